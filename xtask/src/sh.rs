//! Running commands with clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use cargo_metadata::{Message, TargetKind};

/// `cargo` as invoked by the user (same toolchain as this xtask).
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Runs a command, inheriting stdio; fails on a non-zero exit.
pub fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !status.success() {
        bail!("{} failed ({status})", describe(cmd));
    }
    Ok(())
}

/// Runs a command and returns its stdout; fails on a non-zero exit (stderr is shown).
pub fn output(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    if !out.status.success() {
        bail!("{} failed ({})", describe(cmd), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Whether `program` is an executable on `PATH`.
pub fn have(program: &str) -> bool {
    which::which(program).is_ok()
}

/// Builds the integration test target `test` (of `sandbox-tests`) and returns its
/// executable. The workspace's default members are selected, as by `cargo test` and
/// `build`: with `-p sandbox-tests` alone cargo unifies other features (`serde_json`'s, `libc`'s)
/// and builds their dependents again, 50 s of every CI run.
pub fn cargo_test_executable(root: &Path, test: &str) -> anyhow::Result<PathBuf> {
    let out = output(
        cargo()
            .args([
                "test",
                "--release",
                "--no-run",
                "--message-format=json",
                "--test",
                test,
            ])
            .current_dir(root),
    )?;
    for message in Message::parse_stream(out.as_bytes()) {
        if let Message::CompilerArtifact(a) = message.context("reading cargo's messages")?
            && a.target.is_kind(TargetKind::Test)
            && a.target.name == test
            && a.package_id.repr.contains("sandbox-tests")
            && let Some(exe) = a.executable
        {
            return Ok(exe.into_std_path_buf());
        }
    }
    bail!("cargo did not report the executable of --test {test}")
}
