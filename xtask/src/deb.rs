//! `cargo xtask deb`: the Debian package, assembled here and built with `dpkg-deb` (the
//! layout is a dozen files; cargo-deb would be one more tool to install), and its check:
//! a real `dpkg` install into a scratch root, then the installed binary, man pages,
//! completions, unit and configuration are exercised, then removed and purged.
//!
//! The package is `agent-sandbox` and its binary `/usr/bin/sandbox`: `SELinux`'s
//! `policycoreutils-sandbox` ships a `/usr/bin/sandbox` too, so the two conflict (declared);
//! the package name says which sandbox this is.

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail, ensure};

use crate::sh;

pub const PACKAGE: &str = "agent-sandbox";

/// Builds `target/debian/agent-sandbox_<version>_<arch>.deb` from the release binary.
pub fn build(root: &Path, sandbox: &Path) -> anyhow::Result<PathBuf> {
    let out = crate::target_dir()?.join("debian");
    let stage = out.join("stage");
    if stage.exists() {
        std::fs::remove_dir_all(&stage)?;
    }
    let put = |rel: &str, bytes: &[u8], mode: u32| -> anyhow::Result<()> {
        let p = stage.join(rel);
        std::fs::create_dir_all(p.parent().unwrap_or(&stage))?;
        std::fs::write(&p, bytes).with_context(|| p.display().to_string())?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))?;
        Ok(())
    };
    let run = |args: &[&str]| sh::output(Command::new(sandbox).args(args));

    put("usr/bin/sandbox", &std::fs::read(sandbox)?, 0o755)?;
    put(
        "usr/lib/systemd/system/sandbox-attach@.service",
        &std::fs::read(root.join("sandbox-user/systemd/sandbox-attach@.service"))?,
        0o644,
    )?;
    // The configuration: the built-in policy as /etc/sandbox/policy.yaml (what `sandbox
    // run` uses when no --policy is given; a conffile, so edits survive upgrades), and the
    // directory for per-user policies.
    put(
        "etc/sandbox/policy.yaml",
        run(&["default-policy"])?.as_bytes(),
        0o644,
    )?;
    std::fs::create_dir_all(stage.join("etc/sandbox/users"))?;
    put(
        "usr/share/sandbox/policy.schema.json",
        run(&["schema"])?.as_bytes(),
        0o644,
    )?;
    // Shipping the audit log off the host (README "Fleet"): the tested rsyslog drop-ins and
    // the untested examples, not active until copied into place.
    for (rel, bytes) in files_below(&root.join("sandbox-user/shipping"))? {
        put(
            &format!("usr/share/sandbox/shipping/{}", rel.display()),
            &bytes,
            0o644,
        )?;
    }
    for (shell, rel) in [
        ("bash", "usr/share/bash-completion/completions/sandbox"),
        ("zsh", "usr/share/zsh/vendor-completions/_sandbox"),
        ("fish", "usr/share/fish/vendor_completions.d/sandbox.fish"),
    ] {
        put(rel, run(&["completions", shell])?.as_bytes(), 0o644)?;
    }
    let man = out.join("man");
    if man.exists() {
        std::fs::remove_dir_all(&man)?;
    }
    run(&["manpages", &man.to_string_lossy()])?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&man)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    pages.sort();
    ensure!(!pages.is_empty(), "`sandbox manpages` wrote no page");
    for page in &pages {
        let name = page.file_name().unwrap_or_default().to_string_lossy();
        put(
            &format!("usr/share/man/man1/{name}.gz"),
            &gzip(&std::fs::read(page)?)?,
            0o644,
        )?;
    }
    let doc = format!("usr/share/doc/{PACKAGE}");
    put(
        &format!("{doc}/README.md.gz"),
        &gzip(&std::fs::read(root.join("README.md"))?)?,
        0o644,
    )?;
    put(&format!("{doc}/copyright"), copyright().as_bytes(), 0o644)?;

    // What `sandbox --version` says.
    let version = crate::package_version("sandbox-user")?;
    let arch = sh::output(Command::new("dpkg").arg("--print-architecture"))?
        .trim()
        .to_owned();
    let size_kib = dir_size(&stage)?.div_ceil(1024);
    let glibc = glibc_needed(&std::fs::read(sandbox)?)
        .map_or_else(String::new, |v| format!("libc6 (>= {v})"));
    put(
        "DEBIAN/control",
        control(&version, &arch, size_kib, &glibc).as_bytes(),
        0o644,
    )?;
    put("DEBIAN/conffiles", b"/etc/sandbox/policy.yaml\n", 0o644)?;
    put("DEBIAN/postinst", MAINTAINER_SCRIPT.as_bytes(), 0o755)?;
    put("DEBIAN/postrm", MAINTAINER_SCRIPT.as_bytes(), 0o755)?;

    // Directories get 0755 whatever the umask of the build: the package creates
    // /etc/sandbox, /etc/sandbox/users and completion directories a host may not have.
    dirs_0755(&stage)?;
    let deb = out.join(format!("{PACKAGE}_{version}_{arch}.deb"));
    sh::run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&deb)
            .stdout(std::process::Stdio::null()),
    )?;
    Ok(deb)
}

/// postinst and postrm: systemd learns about (or forgets) the unit. Nothing is enabled:
/// the unit is a template whose instance is the cgroup to confine.
const MAINTAINER_SCRIPT: &str = "#!/bin/sh
set -e
if [ -z \"${DPKG_ROOT:-}\" ] && [ -d /run/systemd/system ]; then
\tsystemctl --system daemon-reload >/dev/null || true
fi
";

fn control(version: &str, arch: &str, size_kib: u64, depends: &str) -> String {
    let mut c = String::new();
    let _ = writeln!(c, "Package: {PACKAGE}");
    let _ = writeln!(c, "Version: {version}");
    let _ = writeln!(c, "Architecture: {arch}");
    let _ = writeln!(c, "Maintainer: sandbox developers <sandbox@localhost>");
    let _ = writeln!(c, "Installed-Size: {size_kib}");
    if !depends.is_empty() {
        let _ = writeln!(c, "Depends: {depends}");
    }
    let _ = writeln!(c, "Conflicts: policycoreutils-sandbox");
    let _ = writeln!(c, "Section: admin");
    let _ = writeln!(c, "Priority: optional");
    c.push_str(
        "Description: confine AI agents with BPF-LSM: files, network and exec in the kernel
 sandbox runs a command (an AI agent, a build, a service) with every process of
 its cgroup checked in the kernel by BPF-LSM programs: denied paths, read-only
 and write areas, private networks and cloud metadata, exec denylists, unix
 sockets, other processes of the user. Every decision is an OCSF record in an
 audit log. On kernels without BPF LSM a fallback backend (cgroup socket
 programs and Landlock) enforces what it can and says what it cannot.
 .
 Commands: sandbox run, sandbox attach (systemd: sandbox-attach@.service),
 sandbox events, sandbox check, sandbox explain, sandbox preflight.
",
    );
    c
}

fn copyright() -> String {
    "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: sandbox

Files: *
License: MIT or Apache-2.0
 The MIT license or the Apache License, Version 2.0, at your option. On Debian
 systems the Apache License is in /usr/share/common-licenses/Apache-2.0.

Files: usr/share/sandbox/policy.schema.json
License: MIT or Apache-2.0
 Generated by `sandbox schema`.
"
    .to_owned()
}

fn gzip(bytes: &[u8]) -> anyhow::Result<Vec<u8>> {
    use std::io::Write as _;
    let mut child = Command::new("gzip")
        .args(["-9", "-n", "-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("cannot start gzip")?;
    let mut stdin = child.stdin.take().context("gzip stdin")?;
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("gzip writer panicked"))??;
    ensure!(out.status.success(), "gzip failed ({})", out.status);
    Ok(out.stdout)
}

/// Every file below `dir` (relative path, contents), in name order.
fn files_below(dir: &Path) -> anyhow::Result<Vec<(PathBuf, Vec<u8>)>> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) -> anyhow::Result<()> {
        let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for e in entries {
            let p = e.path();
            if e.file_type()?.is_dir() {
                walk(base, &p, out)?;
            } else {
                let rel = p.strip_prefix(base)?.to_path_buf();
                out.push((rel, std::fs::read(&p)?));
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out).with_context(|| dir.display().to_string())?;
    ensure!(!out.is_empty(), "{} is empty", dir.display());
    Ok(out)
}

fn dirs_0755(dir: &Path) -> anyhow::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            dirs_0755(&e.path())?;
        }
    }
    Ok(())
}

fn dir_size(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        if m.is_dir() {
            total += dir_size(&e.path())?;
        } else {
            total += m.len();
        }
    }
    Ok(total)
}

/// The newest `GLIBC_x.y` symbol version the binary names (what `libc6 (>= x.y)` needs).
fn glibc_needed(binary: &[u8]) -> Option<String> {
    let tag = b"GLIBC_";
    let mut best: Option<(u32, u32)> = None;
    let mut i = 0;
    while let Some(at) = binary[i..].windows(tag.len()).position(|w| w == tag) {
        let start = i + at + tag.len();
        let rest = &binary[start..binary.len().min(start + 12)];
        let text: String = rest
            .iter()
            .take_while(|b| b.is_ascii_digit() || **b == b'.')
            .map(|b| char::from(*b))
            .collect();
        let mut parts = text.split('.').map(str::parse::<u32>);
        if let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) {
            best = best.max(Some((major, minor)));
        }
        i = start;
    }
    best.map(|(a, b)| format!("{a}.{b}"))
}

/// Installs `deb` with dpkg into a scratch root and exercises what it installed; then
/// removes it (the edited configuration stays, as a conffile does) and purges it.
pub fn check(deb: &Path) -> anyhow::Result<()> {
    let scratch = crate::target_dir()?.join("debian/root");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch)?;
    }
    let admin = scratch.join("var/lib/dpkg");
    for d in ["info", "updates", "triggers"] {
        std::fs::create_dir_all(admin.join(d))?;
    }
    std::fs::write(admin.join("status"), "")?;
    let dpkg = |args: &[&str]| {
        let mut c = Command::new("dpkg");
        c.arg(format!("--root={}", scratch.display()))
            .args([
                "--log=/dev/null",
                "--force-script-chrootless",
                "--force-depends",
                "--force-not-root",
            ])
            .args(args);
        c
    };
    // Nothing in the package may be writable by group or others (a completion script
    // root's shell sources, the policy directories).
    let contents = sh::output(Command::new("dpkg-deb").arg("--contents").arg(deb))?;
    for line in contents.lines() {
        let perms = line
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .as_bytes();
        ensure!(
            perms.len() == 10 && (perms[0] == b'l' || (perms[5] != b'w' && perms[8] != b'w')),
            "the package holds an entry writable by group or others: {line}"
        );
    }
    sh::run(dpkg(&["--install"]).arg(deb))?;
    let listed = sh::output(&mut dpkg(&["--listfiles", PACKAGE]))?;
    for want in [
        "/usr/bin/sandbox",
        "/usr/lib/systemd/system/sandbox-attach@.service",
        "/etc/sandbox/policy.yaml",
        "/etc/sandbox/users",
        "/usr/share/man/man1/sandbox.1.gz",
        "/usr/share/man/man1/sandbox-run.1.gz",
        "/usr/share/man/man1/sandbox-attach.1.gz",
        "/usr/share/bash-completion/completions/sandbox",
        "/usr/share/zsh/vendor-completions/_sandbox",
        "/usr/share/fish/vendor_completions.d/sandbox.fish",
        "/usr/share/sandbox/policy.schema.json",
        "/usr/share/sandbox/shipping/rsyslog/sandbox-audit.conf",
        "/usr/share/sandbox/shipping/rsyslog/collector.conf",
    ] {
        ensure!(
            listed.lines().any(|l| l == want),
            "{want} is not in the package: {listed}"
        );
    }
    let bin = scratch.join("usr/bin/sandbox");
    let version = sh::output(Command::new(&bin).arg("--version"))?;
    ensure!(version.starts_with("sandbox "), "--version said {version}");
    let policy = scratch.join("etc/sandbox/policy.yaml");
    sh::output(Command::new(&bin).arg("check").arg(&policy))
        .context("the installed /etc/sandbox/policy.yaml does not pass `sandbox check`")?;
    pages_and_completions(&scratch)?;
    verify_unit(&scratch)?;
    // Removal keeps the edited configuration; purge removes it.
    std::fs::write(&policy, "name: edited\n")?;
    sh::run(&mut dpkg(&["--remove", PACKAGE]))?;
    ensure!(!bin.exists(), "the binary survived removal");
    ensure!(
        std::fs::read_to_string(&policy)? == "name: edited\n",
        "removal touched the edited /etc/sandbox/policy.yaml"
    );
    sh::run(&mut dpkg(&["--purge", PACKAGE]))?;
    ensure!(!policy.exists(), "purge left /etc/sandbox/policy.yaml");
    if !std::fs::read_to_string(admin.join("status"))?.contains(PACKAGE) {
        return Ok(());
    }
    let status = std::fs::read_to_string(admin.join("status"))?;
    if status.contains("Status: install ok installed") {
        bail!("dpkg still lists {PACKAGE} as installed");
    }
    Ok(())
}

/// Every man page renders without a warning from groff; bash loads the completion and
/// completes a subcommand; the schema is draft 7.
fn pages_and_completions(scratch: &Path) -> anyhow::Result<()> {
    // Every man page renders without a warning from groff.
    for e in std::fs::read_dir(scratch.join("usr/share/man/man1"))? {
        let page = e?.path();
        let out = Command::new("sh")
            .arg("-c")
            .arg("gzip -dc \"$1\" | groff -man -Tutf8 -ww -z 2>&1")
            .arg("sh")
            .arg(&page)
            .output()?;
        let warnings = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success() && warnings.trim().is_empty(),
            "{}: {warnings}",
            page.display()
        );
    }
    // bash loads the completion and completes a subcommand.
    let completion = scratch.join("usr/share/bash-completion/completions/sandbox");
    let words = sh::output(
        Command::new("bash")
            .arg("-c")
            .arg(
                "source \"$1\"; COMP_WORDS=(sandbox ev); COMP_CWORD=1; COMP_LINE='sandbox ev'; \
                 COMP_POINT=${#COMP_LINE}; _sandbox sandbox ev sandbox; echo \"${COMPREPLY[@]}\"",
            )
            .arg("bash")
            .arg(&completion),
    )?;
    ensure!(
        words.split_whitespace().any(|w| w == "events"),
        "bash completion of `sandbox ev` gave {words:?}"
    );
    let schema: String =
        std::fs::read_to_string(scratch.join("usr/share/sandbox/policy.schema.json"))?;
    ensure!(
        schema.contains("\"draft-07") || schema.contains("draft-07/schema"),
        "the schema is not draft 7"
    );
    Ok(())
}

/// systemd reads the unit as an instance (the template's %i expanded).
fn verify_unit(scratch: &Path) -> anyhow::Result<()> {
    if sh::have("systemd-analyze") {
        let dir = crate::target_dir()?.join("debian/verify");
        std::fs::create_dir_all(&dir)?;
        let unit = dir.join("sandbox-attach@agent.slice.service");
        std::fs::copy(
            scratch.join("usr/lib/systemd/system/sandbox-attach@.service"),
            &unit,
        )?;
        let out = Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&unit)
            .output()?;
        let said = String::from_utf8_lossy(&out.stderr);
        // The binary is in the scratch root, not in /usr/bin: the one complaint allowed.
        let other: Vec<&str> = said
            .lines()
            .filter(|l| !l.contains("/usr/bin/sandbox") && !l.trim().is_empty())
            .collect();
        ensure!(other.is_empty(), "systemd-analyze verify: {said}");
    }
    Ok(())
}
