//! `cargo xtask clippy`: the lints CI holds the code to, before any test runs.
//!
//! - The host crates: `cargo clippy --all-targets -- -D warnings`, so what
//!   `[workspace.lints]` warns about (clippy pedantic included) fails here.
//! - The BPF crate, which the host build never compiles on its own: clippy of the pinned
//!   eBPF nightly on the programs' own target (`bpfel-unknown-none`, `-Z build-std=core`,
//!   the `bpf_target_arch` cfg aya-build sets), as aya's xtask lints its eBPF crates.
//!
//! `--no-deps` everywhere: each package is judged by its own row below, not by the flags of
//! a package that depends on it.

use std::process::Command;

use anyhow::Context;

use crate::{root, setup, sh};

/// Host packages with lints that fire today in code being reshaped on other branches. Each
/// is linted on its own with these allowed and every other warning denied. Rows only shrink:
/// delete a lint (or the row) as soon as the code is clean of it.
const HOST_DEBT: &[(&str, &[&str])] = &[(
    "sandbox-user",
    &[
        "clippy::bool_to_int_with_if",
        "clippy::cast_possible_truncation",
        "clippy::cast_possible_wrap",
        "clippy::cast_precision_loss",
        "clippy::default_trait_access",
        "clippy::doc_markdown",
        "clippy::format_collect",
        "clippy::identity_op",
        "clippy::manual_is_multiple_of",
        "clippy::many_single_char_names",
        "clippy::ref_as_ptr",
        "clippy::same_item_push",
        "clippy::semicolon_if_nothing_returned",
        "clippy::similar_names",
        "clippy::single_match_else",
        "clippy::too_many_lines",
        "clippy::uninlined_format_args",
    ],
)];

/// The BPF crate's lint levels, on top of `[workspace.lints]`. Denied: the groups that flag
/// bugs or near-bugs. The other warnings (pedantic and style, about 40 today in code being
/// reshaped on another branch) are shown, not fatal.
const BPF_LEVELS: &[(&str, &str, &str)] = &[
    ("-D", "clippy::correctness", "code that is wrong"),
    ("-D", "clippy::suspicious", "code that is most likely wrong"),
    (
        "-A",
        "clippy::inline_always",
        "BPF helpers are inlined on purpose: a BPF-to-BPF call gets its own frame within the \
         512-byte stack and its own verification",
    ),
];

pub fn run() -> anyhow::Result<()> {
    setup::toolchains()?;
    let root = root();

    let debt: Vec<&str> = HOST_DEBT.iter().map(|(p, _)| *p).collect();
    println!("==> clippy: host crates (-D warnings)");
    let mut clean = sh::cargo();
    clean.args(["clippy", "--all-targets", "--workspace"]);
    // The BPF crate cannot be built for the host (it is linted below, on its own target).
    for p in debt.iter().chain(&["sandbox-ebpf"]) {
        clean.args(["--exclude", p]);
    }
    clean.args(["--", "--no-deps", "-D", "warnings"]);
    // An empty object embedded instead of the programs (sandbox-user/build.rs).
    clean.env("SANDBOX_EBPF_PLACEHOLDER", "1");
    sh::run(clean.current_dir(&root)).context("clippy found problems in the host crates")?;

    for (package, allowed) in HOST_DEBT {
        println!(
            "==> clippy: {package} (-D warnings, {} lints allowed until fixed)",
            allowed.len()
        );
        let mut c = sh::cargo();
        c.args(["clippy", "--all-targets", "-p", package]);
        c.args(["--", "--no-deps", "-D", "warnings"]);
        c.env("SANDBOX_EBPF_PLACEHOLDER", "1");
        for lint in *allowed {
            c.args(["-A", lint]);
        }
        sh::run(c.current_dir(&root))
            .with_context(|| format!("clippy found problems in {package}"))?;
    }

    let ebpf = setup::ebpf_toolchain()?;
    setup::component(&ebpf, "clippy")?;
    println!("==> clippy: sandbox-ebpf for bpfel-unknown-none ({ebpf})");
    let mut c = Command::new("rustup");
    c.args(["run", &ebpf, "cargo", "clippy", "-p", "sandbox-ebpf"])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
        .arg("--release")
        // Apart from the host build's target directory: no rebuild of either after the other.
        .arg("--target-dir")
        .arg(crate::target_dir()?.join("clippy-bpf"))
        .args(["--", "--no-deps"]);
    for (level, lint, why) in BPF_LEVELS {
        println!("    {level} {lint}: {why}");
        c.args([level, lint]);
    }
    // What aya-build passes to the real build (the `\x1f`-separated form cargo reads).
    c.env(
        "CARGO_ENCODED_RUSTFLAGS",
        format!("--cfg=bpf_target_arch=\"{}\"", std::env::consts::ARCH),
    )
    // This runs under `cargo run` of the host toolchain: its choices must not leak in.
    .env_remove("RUSTC")
    .env_remove("RUSTC_WORKSPACE_WRAPPER")
    .env_remove("RUSTUP_TOOLCHAIN")
    .env_remove("CARGO");
    sh::run(c.current_dir(&root)).context("clippy found problems in sandbox-ebpf")?;
    Ok(())
}
