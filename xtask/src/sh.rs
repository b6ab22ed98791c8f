//! Running commands with clear errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

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

pub fn have(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Builds the integration test target `test` of `package` and returns its executable.
pub fn cargo_test_executable(root: &Path, package: &str, test: &str) -> anyhow::Result<PathBuf> {
    let out = output(
        cargo()
            .args([
                "test",
                "--release",
                "--no-run",
                "--message-format=json",
                "-p",
                package,
                "--test",
                test,
            ])
            .current_dir(root),
    )?;
    for line in out.lines() {
        let Ok(v) = serde_json_lite(line) else {
            continue;
        };
        if let Some(exe) = v {
            return Ok(exe);
        }
    }
    bail!("cargo did not report the executable of {package} --test {test}")
}

/// Finds `"executable":"..."` of a compiler-artifact line for a test target (no JSON crate
/// needed for one field).
fn serde_json_lite(line: &str) -> Result<Option<PathBuf>, ()> {
    if !line.contains("\"reason\":\"compiler-artifact\"") || !line.contains("\"kind\":[\"test\"]") {
        return Ok(None);
    }
    let key = "\"executable\":\"";
    let start = line.find(key).ok_or(())? + key.len();
    let end = line[start..].find('"').ok_or(())? + start;
    Ok(Some(PathBuf::from(&line[start..end])))
}
