//! Developer tasks for `sandbox`: `cargo xtask setup | build | clippy | deb | test | vm | bench`.
//!
//! Everything a fresh machine needs is installed from here (pinned toolchains, bpf-linker,
//! Debian packages, Debian kernels for the VM tests); nothing is a hand step.

mod clippy;
mod cpio;
mod deb;
mod kernel;
mod setup;
mod sh;
mod vm;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "xtask",
    about = "set-up, build, VM tests and benchmarks for sandbox"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what building and testing need: toolchains, bpf-linker, Debian packages, kernels.
    Setup {
        /// Kernels to fetch (comma-separated labels: 6.1, 6.12, 7.2).
        #[arg(long, default_value = kernel::DEFAULT_KERNELS)]
        kernels: String,
    },
    /// Build the sandbox binary (release), with the BPF programs embedded.
    Build,
    /// Lint the host crates (-D warnings) and the BPF crate on its own target.
    Clippy,
    /// Build the Debian package (target/debian/agent-sandbox_VERSION_ARCH.deb) and check
    /// it: installed with dpkg into a scratch root, exercised, removed and purged.
    Deb,
    /// Run every test: host unit tests, then the kernel tests inside a VM for each kernel.
    Test {
        #[arg(long, default_value = kernel::DEFAULT_KERNELS)]
        kernels: String,
        /// Only kernel tests whose name contains this (or one of its `|`-separated parts).
        #[arg(long)]
        filter: Option<String>,
        /// Skip the host unit tests.
        #[arg(long)]
        vm_only: bool,
    },
    /// Boot a VM with BPF LSM and run a command in it (the sandbox binary is /usr/bin/sandbox).
    /// Example: `cargo xtask vm -- sandbox run --as-root -- cat /root/.ssh/id_rsa`
    Vm {
        #[arg(long, default_value = "6.12")]
        kernel: String,
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Run the benchmarks inside a VM and print the ratios; with `--native`, the
    /// `file_open` decision phase by phase on this host's own kernel (BPF iterators, as
    /// root: `sandbox-user/benches/native.rs`) instead.
    Bench {
        #[arg(long, default_value = "6.12")]
        kernel: String,
        /// On this host, at native speed: no VM.
        #[arg(long)]
        native: bool,
    },
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// What `cargo metadata` says about the workspace (asked once): the target directory, which
/// `CARGO_TARGET_DIR` or a cargo configuration may move, and the packages' versions.
pub fn metadata() -> anyhow::Result<&'static cargo_metadata::Metadata> {
    static META: std::sync::OnceLock<cargo_metadata::Metadata> = std::sync::OnceLock::new();
    if let Some(m) = META.get() {
        return Ok(m);
    }
    let m = cargo_metadata::MetadataCommand::new()
        .cargo_path(std::env::var_os("CARGO").map_or_else(|| PathBuf::from("cargo"), PathBuf::from))
        .manifest_path(root().join("Cargo.toml"))
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    Ok(META.get_or_init(|| m))
}

/// Cargo's target directory (`target/` unless moved).
pub fn target_dir() -> anyhow::Result<PathBuf> {
    Ok(metadata()?.target_directory.clone().into_std_path_buf())
}

/// The version of workspace package `name`, as cargo reads it.
pub fn package_version(name: &str) -> anyhow::Result<String> {
    metadata()?
        .packages
        .iter()
        .find(|p| p.name.as_str() == name)
        .map(|p| p.version.to_string())
        .with_context(|| format!("cargo metadata lists no package {name}"))
}

fn run(cli: Cli) -> anyhow::Result<bool> {
    match cli.cmd {
        Cmd::Setup { kernels } => {
            setup::all(&kernel::parse_labels(&kernels)?)?;
            Ok(true)
        }
        Cmd::Build => {
            setup::toolchains()?;
            build()?;
            Ok(true)
        }
        Cmd::Clippy => {
            clippy::run()?;
            Ok(true)
        }
        Cmd::Deb => {
            let arts = build()?;
            let deb = deb::build(&root(), &arts.sandbox)?;
            deb::check(&deb)?;
            println!("{}", deb.display());
            Ok(true)
        }
        Cmd::Test {
            kernels,
            filter,
            vm_only,
        } => test(&kernel::parse_labels(&kernels)?, filter.as_deref(), vm_only),
        Cmd::Vm { kernel, command } => {
            let k = setup::all(&kernel::parse_labels(&kernel)?)?.remove(0);
            let arts = build()?;
            let rc = vm::run_command(&k, &arts, &command)?;
            Ok(rc == 0)
        }
        Cmd::Bench { native: true, .. } => {
            setup::toolchains()?;
            sh::run(
                sh::cargo()
                    .args(["bench", "-p", "sandbox-user", "--bench", "native"])
                    .current_dir(root()),
            )?;
            Ok(true)
        }
        Cmd::Bench { kernel, .. } => {
            let k = setup::all(&kernel::parse_labels(&kernel)?)?.remove(0);
            let arts = build()?;
            vm::bench(&k, &arts)
        }
    }
}

/// Built binaries that go into the guest.
pub struct Artifacts {
    pub sandbox: PathBuf,
    pub probe: PathBuf,
    pub kernel_tests: PathBuf,
    /// `tests/tests/fallback.rs`, run on the host and in a guest without BPF LSM.
    pub fallback_tests: PathBuf,
    /// `tests/tests/systemd.rs`, run in a guest whose PID 1 is systemd.
    pub systemd_tests: PathBuf,
    pub bench: PathBuf,
    /// `sandbox-user/examples/floor.rs`, the benchmark's floor (only its guest runs it).
    pub floor: PathBuf,
}

fn build() -> anyhow::Result<Artifacts> {
    let root = root();
    // The default members, as `cargo test --release` selects them: the same features, so
    // what the host tests built is used again (see `sh::cargo_test_executable`).
    sh::run(
        sh::cargo()
            .args(["build", "--release", "--bins", "--example", "floor"])
            .current_dir(&root),
    )?;
    let tests = sh::cargo_test_executable(&root, "kernel")?;
    let fallback_tests = sh::cargo_test_executable(&root, "fallback")?;
    let systemd_tests = sh::cargo_test_executable(&root, "systemd")?;
    let rel = target_dir()?.join("release");
    Ok(Artifacts {
        sandbox: rel.join("sandbox"),
        probe: rel.join("sandbox-probe"),
        kernel_tests: tests,
        fallback_tests,
        systemd_tests,
        bench: rel.join("sandbox-bench"),
        floor: rel.join("examples").join("floor"),
    })
}

fn test(labels: &[kernel::Label], filter: Option<&str>, vm_only: bool) -> anyhow::Result<bool> {
    let kernels = setup::all(labels)?;
    let root = root();
    if !vm_only {
        // The default members only: the eBPF crate cannot be built for the host.
        println!("==> host tests (cargo test)");
        sh::run(sh::cargo().args(["test", "--release"]).current_dir(&root))
            .context("host tests failed")?;
    }
    let arts = build()?;
    if !vm_only {
        fallback_on_host(&root, &arts)?;
        shipping_on_host(&root, &arts)?;
        println!("==> Debian package");
        let deb = deb::build(&root, &arts.sandbox)?;
        deb::check(&deb).context("the Debian package")?;
        println!(
            "==> {}: installed, exercised, removed, purged",
            deb.display()
        );
    }
    // The guests run side by side: each is mostly one busy vCPU (the tests run one after
    // another inside), so a machine with two cores runs two at about the speed of one.
    let workers = vm_workers();
    let tests = vm::kernel_tests(&arts, filter)?;
    let per_kernel = if tests.len() >= 8 { workers } else { 1 };
    let mut jobs = Vec::new();
    for k in &kernels {
        let parts = vm::shards(&tests, per_kernel);
        let n = parts.len();
        for (i, part) in parts.into_iter().enumerate() {
            if part.is_empty() {
                continue;
            }
            jobs.push(vm::Job {
                kernel: k,
                name: if n > 1 {
                    format!("{} ({}/{n})", k.version, i + 1)
                } else {
                    k.version.clone()
                },
                what: vm::What::Kernel {
                    tests: part,
                    shard: i,
                },
            });
        }
    }
    // The fallback on the oldest kernel too (Landlock ABI 2 there), booted without BPF
    // LSM; with a filter, only when asked for by name. Last: it is short.
    if let Some(k) = kernels.iter().find(|k| k.label == kernel::Label::V6_1)
        && filter.is_none_or(|f| f == "fallback")
    {
        jobs.push(vm::Job {
            kernel: k,
            name: format!("{} (fallback, no BPF LSM)", k.version),
            what: vm::What::Fallback,
        });
    }
    // sandbox under systemd (a delegated scope, the shipped unit), on the newest kernel;
    // with a filter, only when asked for by name.
    // The Debian package is installed in that guest: the unit and the binary the tests
    // use are the package's.
    if let Some(k) = kernels.last()
        && filter.is_none_or(|f| f == "systemd")
    {
        let deb = deb::build(&root, &arts.sandbox).context("the Debian package")?;
        jobs.push(vm::Job {
            kernel: k,
            name: format!("{} (systemd as PID 1)", k.version),
            what: vm::What::Systemd { deb },
        });
    }
    println!(
        "==> {} kernel tests in {} guest boots, {workers} at a time (SANDBOX_VM_JOBS)",
        tests.len(),
        jobs.len()
    );
    let results = vm::run_all(&jobs, &arts, workers);
    println!("==> summary");
    let mut ok = true;
    for (v, o) in &results {
        println!("    {v}: {o}");
        ok &= o.passed();
    }
    if !ok {
        bail!(
            "kernel tests failed (console logs in {})",
            target_dir()?.join("vmtest").display()
        );
    }
    Ok(true)
}

/// How many guests run at once: `SANDBOX_VM_JOBS`, else one per core (at most 4; each
/// guest takes 2 GiB).
fn vm_workers() -> usize {
    std::env::var("SANDBOX_VM_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
        .max(1)
}

/// The fallback backend (no BPF LSM) on this machine's own kernel, before the VMs: the
/// tests in `tests/tests/fallback.rs` with real processes, loopback sockets and temporary
/// directories. They need root (they are ignored by a plain `cargo test`), and fail rather
/// than pass when the feature is broken.
fn fallback_on_host(root: &std::path::Path, arts: &Artifacts) -> anyhow::Result<()> {
    println!("==> fallback backend on this host's kernel (tests/tests/fallback.rs)");
    let root_user = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if !root_user {
        bail!("the fallback tests run on the host as root: run cargo xtask test as root");
    }
    let exe = sh::cargo_test_executable(root, "fallback")?;
    sh::run(
        std::process::Command::new(exe)
            .args(["--include-ignored", "--test-threads=1"])
            .env("SANDBOX_BIN", &arts.sandbox)
            .env("SANDBOX_PROBE", &arts.probe)
            .current_dir(root),
    )
    .context("fallback tests failed")
}

/// The shipped rsyslog configuration, for real (`tests/tests/shipping.rs`): two rsyslogd on
/// loopback, the real `sandbox` (fallback backend, as root) writing and rotating the audit
/// log, every record checked at the collector. Fails when rsyslogd is missing (setup
/// installs it).
fn shipping_on_host(root: &std::path::Path, arts: &Artifacts) -> anyhow::Result<()> {
    println!(
        "==> audit log shipped by rsyslog to a collector on loopback (tests/tests/shipping.rs)"
    );
    let exe = sh::cargo_test_executable(root, "shipping")?;
    sh::run(
        std::process::Command::new(exe)
            .args(["--include-ignored", "--test-threads=1", "--nocapture"])
            .env("SANDBOX_BIN", &arts.sandbox)
            .current_dir(root),
    )
    .context("the shipping test failed")
}
