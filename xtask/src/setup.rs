//! Set-up from nothing: pinned toolchains, bpf-linker built against the eBPF nightly's own
//! libLLVM (into the download cache, built only when missing there, and copied into
//! `.tools/`), Debian packages for the VM, kernels.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, anyhow, bail};

use crate::kernel::{self, Kernel, Label};
use crate::{root, sh};

const BPF_LINKER_VERSION: &str = "0.13.0";

pub fn all(labels: &[Label]) -> anyhow::Result<Vec<Kernel>> {
    toolchains()?;
    packages()?;
    labels.iter().copied().map(kernel::ensure).collect()
}

/// `channel = "..."` from rust-toolchain.toml.
fn host_toolchain() -> anyhow::Result<String> {
    let text = std::fs::read_to_string(root().join("rust-toolchain.toml"))?;
    value_of(&text, "channel").ok_or_else(|| anyhow!("rust-toolchain.toml has no channel"))
}

/// `SANDBOX_EBPF_TOOLCHAIN = "..."` from .cargo/config.toml.
pub fn ebpf_toolchain() -> anyhow::Result<String> {
    let text = std::fs::read_to_string(root().join(".cargo/config.toml"))?;
    value_of(&text, "SANDBOX_EBPF_TOOLCHAIN")
        .ok_or_else(|| anyhow!(".cargo/config.toml has no SANDBOX_EBPF_TOOLCHAIN"))
}

fn value_of(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
    })
}

pub fn bpf_linker() -> PathBuf {
    root().join(".tools/bin/bpf-linker")
}

pub fn toolchains() -> anyhow::Result<()> {
    let host = host_toolchain()?;
    let ebpf = ebpf_toolchain()?;
    if !ebpf.starts_with("nightly-") {
        bail!(
            "the eBPF toolchain must be a dated nightly (got {ebpf}): a floating nightly breaks bpf-linker"
        );
    }
    let list = sh::output(Command::new("rustup").args(["toolchain", "list"]))?;
    let have = |t: &str| {
        list.lines()
            .any(|l| l.starts_with(&format!("{t}-")) || l.split_whitespace().next() == Some(t))
    };
    if !have(&host) {
        println!("==> installing Rust {host}");
        sh::run(Command::new("rustup").args([
            "toolchain",
            "install",
            &host,
            "--profile",
            "minimal",
            "-c",
            "clippy,rustfmt",
        ]))?;
    }
    if !have(&ebpf) {
        println!("==> installing {ebpf} (for the BPF programs)");
        sh::run(Command::new("rustup").args([
            "toolchain",
            "install",
            &ebpf,
            "--profile",
            "minimal",
            "-c",
            "rust-src",
        ]))?;
    }
    component(&ebpf, "rust-src")?;
    let linker = bpf_linker();
    if !runs(&linker) {
        // Built once per version and toolchain into the cache beside the kernels, so a
        // fresh clone on this machine copies it instead of building it again.
        let kept =
            crate::kernel::cache_dir().join(format!("bpf-linker-{BPF_LINKER_VERSION}-{ebpf}"));
        let built = kept.join("bin/bpf-linker");
        if !runs(&built) {
            build_bpf_linker(&ebpf, &kept)?;
        }
        std::fs::create_dir_all(linker.parent().expect("a directory"))?;
        std::fs::copy(&built, &linker)
            .with_context(|| format!("copying {} to {}", built.display(), linker.display()))?;
        if !runs(&linker) {
            bail!("{} does not run after it was built", linker.display());
        }
    }
    Ok(())
}

/// `program --version` runs and succeeds.
fn runs(program: &Path) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Adds `component` to `toolchain` unless it is there (an exact toolchain name: rustup
/// downloads only that).
pub fn component(toolchain: &str, component: &str) -> anyhow::Result<()> {
    let comps = sh::output(Command::new("rustup").args([
        "component",
        "list",
        "--installed",
        "--toolchain",
        toolchain,
    ]))?;
    if !comps.lines().any(|l| l.starts_with(component)) {
        sh::run(Command::new("rustup").args([
            "component",
            "add",
            component,
            "--toolchain",
            toolchain,
        ]))?;
    }
    Ok(())
}

/// bpf-linker linked against the eBPF toolchain's libLLVM: no system LLVM needed, and the
/// LLVM versions always match.
fn build_bpf_linker(ebpf: &str, into: &Path) -> anyhow::Result<()> {
    println!("==> building bpf-linker {BPF_LINKER_VERSION} against {ebpf}'s LLVM (about a minute)");
    let sysroot = sh::output(
        Command::new("rustc")
            .arg(format!("+{ebpf}"))
            .args(["--print", "sysroot"]),
    )?;
    let sysroot = PathBuf::from(sysroot.trim());
    let vv = sh::output(Command::new("rustc").arg(format!("+{ebpf}")).arg("-vV"))?;
    let major = vv
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .ok_or_else(|| anyhow!("cannot read the LLVM version of {ebpf}"))?
        .to_owned();
    let lib = std::fs::read_dir(sysroot.join("lib"))?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .find(|n| {
            n.starts_with("libLLVM")
                && std::path::Path::new(n)
                    .extension()
                    .is_some_and(|e| e == "so")
        })
        .ok_or_else(|| anyhow!("{ebpf} ships no libLLVM*.so"))?;
    let lib = lib
        .trim_start_matches("lib")
        .trim_end_matches(".so")
        .to_owned();
    let libdir = sysroot.join("lib");
    let rustflags = format!(
        "-L {0} -l dylib={lib} -C link-arg=-Wl,-rpath,{0}",
        libdir.display()
    );
    sh::run(
        Command::new("cargo")
            .arg(format!("+{ebpf}"))
            .args([
                "install",
                "--locked",
                &format!("bpf-linker@{BPF_LINKER_VERSION}"),
                "--no-default-features",
            ])
            .args([
                "--features",
                &format!("llvm-{major},no-llvm-linking"),
                "--root",
            ])
            .arg(into)
            .env("RUSTFLAGS", rustflags)
            // Do not let the workspace's config (target linker, env) leak into this build.
            .current_dir(std::env::temp_dir()),
    )
    .context("building bpf-linker")
}

/// Debian packages the VM tests, the package check and the shipping test need.
pub fn packages() -> anyhow::Result<()> {
    let mut need = Vec::new();
    if !sh::have("qemu-system-x86_64") {
        need.push("qemu-system-x86");
    }
    if !is_static_busybox() {
        need.push("busybox-static");
    }
    // Kernel modules in the Debian packages are xz- (6.x) or zstd-compressed (7.x).
    if !sh::have("xz") {
        need.push("xz-utils");
    }
    if !sh::have("zstd") {
        need.push("zstd");
    }
    // mkfs.btrfs and btrfs, copied into the guest for the subvolume tests.
    if system_tool("mkfs.btrfs").is_none() || system_tool("btrfs").is_none() {
        need.push("btrfs-progs");
    }
    // groff renders the man pages when the Debian package is checked (`deb::check`).
    if !sh::have("groff") {
        need.push("groff-base");
    }
    // The shipped rsyslog configuration is tested with two real rsyslogd
    // (tests/tests/shipping.rs).
    if system_tool("rsyslogd").is_none() {
        need.push("rsyslog");
    }
    // The systemd guest boots the host's systemd as its PID 1 (tests/tests/systemd.rs).
    if !Path::new("/lib/systemd/systemd").exists() || !sh::have("systemd-run") {
        need.push("systemd");
    }
    if !sh::have("dpkg-deb") || !sh::have("apt-get") {
        bail!("xtask needs a Debian-based machine (apt-get, dpkg-deb) to fetch kernels and QEMU");
    }
    if need.is_empty() {
        return Ok(());
    }
    // SAFETY: plain syscall.
    if unsafe { libc_geteuid() } != 0 {
        bail!(
            "missing Debian packages: {}; install them with: sudo apt-get install {}",
            need.join(" "),
            need.join(" ")
        );
    }
    println!("==> installing Debian packages: {}", need.join(" "));
    sh::run(Command::new("apt-get").args(["update", "-qq"]))?;
    sh::run(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&need)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// A system tool (the guest gets a copy of some, with their libraries), looked for in the
/// system directories whatever `PATH` says: `/usr/sbin` is not on a user's `PATH`.
pub fn system_tool(name: &str) -> Option<PathBuf> {
    which::which_in(name, Some("/usr/sbin:/sbin:/usr/bin:/bin"), "/").ok()
}

pub fn busybox() -> PathBuf {
    PathBuf::from("/bin/busybox")
}

fn is_static_busybox() -> bool {
    let b = busybox();
    b.is_file()
        && Command::new("ldd").arg(&b).output().is_ok_and(|o| {
            !o.status.success() || String::from_utf8_lossy(&o.stdout).contains("not a dynamic")
        })
}

unsafe extern "C" {
    #[link_name = "geteuid"]
    fn libc_geteuid() -> u32;
}
