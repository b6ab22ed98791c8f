//! One `sandbox run` and what it left: the probe's answers and the audit records.
//!
//! Tests are tables. [`check`] runs one probe per table: each row is an operation in the
//! probe's words and the answer it must get (`OK` or the errno name), so each operation is
//! written once and every mismatch of the table is reported at once. [`Run::check_records`]
//! takes a table of [`rec`]s: how many records carry a field value, and what else the first
//! of them says.

use std::fmt::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{User, bins, write};

/// The probe's answer when the call succeeded.
pub const OK: &str = "OK";
/// A denial of a file operation or an exec.
pub const EACCES: &str = "EACCES";
/// A denial of a network operation or a self-protection rule.
pub const EPERM: &str = "EPERM";
/// The kernel's own answer to a connect or send that was let through: the guest has no
/// network, so nothing can leave.
pub const ENETUNREACH: &str = "ENETUNREACH";

/// Any answer: the operation runs for its effect on what follows.
pub const ANY: &str = "*";

/// One row of an operation table: the probe's words (space-separated, as the probe prints
/// them back) and the answer they must get.
pub type Case<'a> = (&'a str, &'a str);

/// One `sandbox run`: its exit status, output and audit records.
pub struct Run {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
    pub audit: Vec<Value>,
}

impl Run {
    /// The probe's answer for the operation whose text starts with `op`.
    pub fn result(&self, op: &str) -> String {
        let prefix = format!("PROBE {op}");
        self.stdout
            .lines()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| l.rsplit_once(" -> ").map(|(_, r)| r.to_owned()))
            .unwrap_or_else(|| {
                panic!(
                    "no result for '{op}'\nstdout:\n{}\nstderr:\n{}",
                    self.stdout, self.stderr
                )
            })
    }

    /// The answer for the operation whose text starts with `op` is `want`.
    pub fn expect(&self, op: &str, want: &str) {
        let got = self.result(op);
        assert_eq!(
            got, want,
            "'{op}': expected {want}, got {got}\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
    }

    /// Every row of `cases` got its answer (operations matched exactly). All mismatches are
    /// reported together.
    pub fn expect_all(&self, cases: &[Case<'_>]) {
        let answers: Vec<(&str, &str)> = self
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("PROBE ")?.rsplit_once(" -> "))
            .collect();
        let mut wrong = String::new();
        for &(op, want) in cases {
            match answers.iter().find(|(o, _)| *o == op) {
                Some((_, got)) if want == ANY || *got == want => {}
                Some((_, got)) => writeln!(wrong, "  {op}: expected {want}, got {got}").unwrap(),
                None => writeln!(wrong, "  {op}: expected {want}, no answer").unwrap(),
            }
        }
        assert!(
            wrong.is_empty(),
            "wrong answers:\n{wrong}stdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
    }

    /// Audit records whose `pointer` field equals `value`: a string field equal to it, or a
    /// number or boolean field written as it (`rec("/class_uid", "1007")`).
    pub fn records(&self, pointer: &str, value: &str) -> Vec<&Value> {
        self.audit
            .iter()
            .filter(|r| r.pointer(pointer).is_some_and(|v| field_is(v, value)))
            .collect()
    }

    /// The one audit record whose `pointer` field equals `value`.
    pub fn one_record(&self, pointer: &str, value: &str) -> &Value {
        let r = self.records(pointer, value);
        assert_eq!(
            r.len(),
            1,
            "expected one audit record with {pointer} = {value}, got {}:\n{:#?}",
            r.len(),
            self.audit
        );
        r[0]
    }

    /// Every row of `expected` holds (see [`rec`]).
    pub fn check_records(&self, expected: &[Rec<'_>]) {
        for e in expected {
            let found = self.records(e.pointer, &e.value);
            // Denials, not lines: identical denials of one process are a record, then
            // records like it with the `count` they stand for (the kernel counts them).
            let denials: u64 = found.iter().map(|r| r["count"].as_u64().unwrap_or(1)).sum();
            let count_ok = match e.count {
                Some(n) => denials == n as u64,
                None => !found.is_empty(),
            };
            assert!(
                count_ok,
                "expected {} denial(s) with {} = {}, got {denials} in {} record(s):\n{:#?}",
                e.count.map_or_else(|| "some".into(), |n| n.to_string()),
                e.pointer,
                e.value,
                found.len(),
                self.audit
            );
            if let Some(first) = found.first() {
                for (field, want) in &e.fields {
                    assert_eq!(
                        first.pointer(field),
                        Some(want),
                        "record with {} = {}: {field}\n{first:#}",
                        e.pointer,
                        e.value
                    );
                }
            }
        }
    }
}

/// A record's field is `value`: the same string, or a number or boolean whose JSON text is
/// `value` (OCSF's ids such as `class_uid` are integers).
fn field_is(field: &Value, value: &str) -> bool {
    match field {
        Value::String(s) => s == value,
        Value::Number(n) => n.to_string() == value,
        Value::Bool(b) => value.parse() == Ok(*b),
        _ => false,
    }
}

/// One row of a record table: `count` records (one unless said) have `pointer` = `value`,
/// and the first of them has each of `fields`.
pub struct Rec<'a> {
    pointer: &'a str,
    value: String,
    count: Option<usize>,
    fields: Vec<(&'a str, Value)>,
}

/// Exactly one audit record has `pointer` (a JSON pointer such as `/file/path`) = `value`
/// (a number field is matched by its decimal text: `rec("/class_uid", "1001")`).
pub fn rec(pointer: &str, value: impl Into<String>) -> Rec<'_> {
    Rec {
        pointer,
        value: value.into(),
        count: Some(1),
        fields: Vec::new(),
    }
}

impl<'a> Rec<'a> {
    /// Exactly `n` records (`0`: none at all).
    #[must_use]
    pub fn count(mut self, n: usize) -> Self {
        self.count = Some(n);
        self
    }

    /// At least one record; the fields are checked on the first.
    #[must_use]
    pub fn some(mut self) -> Self {
        self.count = None;
        self
    }

    /// The (first) record's `field` is `want`.
    #[must_use]
    pub fn has(mut self, field: &'a str, want: impl Into<Value>) -> Self {
        self.fields.push((field, want.into()));
        self
    }
}

/// `sandbox run` of `cmd` in `dir` as root, with `HOME=home`; the policy text (if any) is
/// written to `dir/policy.yaml`, the audit log to `dir/audit.jsonl`.
pub fn run_in(dir: &Path, policy: Option<&str>, home: &Path, cmd: &[&str]) -> Run {
    sandbox_run(User::Root, dir, policy, home, cmd, &[])
}

/// [`run_in`] the way `user` runs it: root as in [`run_in`] with `HOME=dir`; the agent with
/// `sudo sandbox run` (`SUDO_UID`/`SUDO_GID` set, `HOME=/root`), so sandbox drops to the
/// agent and `~` in the policy is `/home/agent`.
pub fn run_as(user: User, dir: &Path, policy: Option<&str>, cmd: &[&str]) -> Run {
    sandbox_run(user, dir, policy, home_of(user, dir), cmd, &[])
}

/// [`run_as`] with these environment variables set for sandbox.
pub fn run_as_env(
    user: User,
    dir: &Path,
    policy: Option<&str>,
    cmd: &[&str],
    env: &[(&str, &str)],
) -> Run {
    sandbox_run(user, dir, policy, home_of(user, dir), cmd, env)
}

/// `HOME` for a run by `user` in `dir` (see [`run_as`]).
fn home_of(user: User, dir: &Path) -> &Path {
    match user {
        User::Root => dir,
        User::Agent => User::Root.home(),
    }
}

fn sandbox_run(
    user: User,
    dir: &Path,
    policy: Option<&str>,
    home: &Path,
    cmd: &[&str],
    env: &[(&str, &str)],
) -> Run {
    sandbox_run_with(user, dir, policy, home, cmd, env, &[], &[])
}

/// [`run_as`] with sandbox started holding `fds` (each `(open descriptor, number)`: the
/// first is given to sandbox under the second, without close-on-exec, as a parent that
/// leaks descriptors would) and with more arguments of `sandbox run` (`args`).
pub fn run_as_holding(
    user: User,
    dir: &Path,
    policy: Option<&str>,
    args: &[&str],
    fds: &[(std::os::fd::RawFd, std::os::fd::RawFd)],
    cmd: &[&str],
) -> Run {
    sandbox_run_with(user, dir, policy, home_of(user, dir), cmd, &[], args, fds)
}

/// `sandbox run` (see [`run_as_holding`]).
#[allow(clippy::too_many_arguments)]
fn sandbox_run_with(
    user: User,
    dir: &Path,
    policy: Option<&str>,
    home: &Path,
    cmd: &[&str],
    env: &[(&str, &str)],
    args: &[&str],
    fds: &[(std::os::fd::RawFd, std::os::fd::RawFd)],
) -> Run {
    let (mut c, audit) = sandbox_command(user, dir, policy);
    c.args(args);
    c.arg("--").args(cmd).env("HOME", home).current_dir(dir);
    c.envs(env.iter().copied());
    hold(&mut c, fds);
    let out = c.output().expect("start sandbox");
    Run::from_output(&out, &audit)
}

/// [`run_as`] with sandbox started in the cgroup `cgroup` (as a service manager or a CI
/// runner would start it).
pub fn run_as_started_in(
    cgroup: &Path,
    user: User,
    dir: &Path,
    policy: Option<&str>,
    cmd: &[&str],
) -> Run {
    use std::os::unix::ffi::OsStrExt;
    let procs = std::ffi::CString::new(cgroup.join("cgroup.procs").as_os_str().as_bytes())
        .expect("no NUL in a cgroup path");
    run_as_prepared(user, dir, policy, cmd, |c| {
        // SAFETY: open, write and close between fork and exec, on a string made before.
        unsafe {
            c.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                Ok(())
            });
        }
    })
}

/// [`run_as`] with sandbox's command prepared by `prepare` before it starts.
pub fn run_as_prepared(
    user: User,
    dir: &Path,
    policy: Option<&str>,
    cmd: &[&str],
    prepare: impl FnOnce(&mut Command),
) -> Run {
    let home = home_of(user, dir);
    let (mut c, audit) = sandbox_command(user, dir, policy);
    c.arg("--").args(cmd).env("HOME", home).current_dir(dir);
    prepare(&mut c);
    let out = c.output().expect("start sandbox");
    Run::from_output(&out, &audit)
}

/// [`run_as`] with sandbox started under a resource limit (`RLIMIT_*`, soft and hard at
/// `value`), as a login's `limits.conf` (an `@audio` user's `rtprio`) would start it.
pub fn run_as_under_rlimit(
    resource: libc::__rlimit_resource_t,
    value: u64,
    user: User,
    dir: &Path,
    policy: Option<&str>,
    cmd: &[&str],
) -> Run {
    run_as_prepared(user, dir, policy, cmd, |c| {
        under_rlimit(c, resource, value);
    })
}

/// `c` starts under the resource limit `resource` at `value` (soft and hard).
pub fn under_rlimit(c: &mut Command, resource: libc::__rlimit_resource_t, value: u64) {
    use std::os::unix::process::CommandExt;
    // SAFETY: one setrlimit between fork and exec, on a value on the stack.
    unsafe {
        c.pre_exec(move || {
            let l = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            if libc::setrlimit(resource, &raw const l) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `sandbox run` as `user` with `--audit-log` (returned) and `--policy` set, arguments
/// after them still to come.
fn sandbox_command(user: User, dir: &Path, policy: Option<&str>) -> (Command, PathBuf) {
    let b = bins();
    let files = trusted_dir(dir);
    let audit = files.join("audit.jsonl");
    let _ = std::fs::remove_file(&audit);
    let mut c = Command::new(&b.sandbox);
    c.arg("run");
    as_user(&mut c, user);
    c.arg("--audit-log").arg(&audit);
    if let Some(p) = policy {
        let f = files.join("policy.yaml");
        write(&f, p);
        c.arg("--policy").arg(&f);
    }
    (c, audit)
}

/// `c` starts holding `fds` (`(open descriptor, number)`), without close-on-exec.
pub fn hold(c: &mut Command, fds: &[(std::os::fd::RawFd, std::os::fd::RawFd)]) {
    use std::os::unix::process::CommandExt;
    if fds.is_empty() {
        return;
    }
    let fds = fds.to_vec();
    // SAFETY: only dup2 between fork and exec.
    unsafe {
        c.pre_exec(move || {
            for &(from, to) in &fds {
                if libc::dup2(from, to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Where sandbox's own files for a run in `dir` go (the audit log, the policy): `dir`
/// itself when root owns it, else a root-owned directory beside it (sandbox refuses both
/// files in a directory the command could change).
pub fn trusted_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    if std::fs::metadata(dir).is_ok_and(|m| m.uid() == 0) {
        return dir.to_path_buf();
    }
    let name = dir.file_name().expect("a test directory has a name");
    let d = Path::new("/tmp/kt-trusted").join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `sandbox run`'s arguments and environment for `user`: root asks for root explicitly
/// (with every capability, as the tests of root commands expect); the agent is what
/// `sudo` tells sandbox about the user who called it.
pub fn as_user(c: &mut Command, user: User) {
    match user {
        User::Root => {
            c.args(["--as-root", "--keep-cap", "all"]);
        }
        User::Agent => {
            c.env("SUDO_UID", user.uid().to_string())
                .env("SUDO_GID", user.gid().to_string())
                .env("SUDO_USER", user.name());
        }
    }
}

impl Run {
    fn from_output(out: &std::process::Output, audit: &Path) -> Self {
        Self {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            audit: finished_audit(audit),
        }
    }
}

/// The records of an audit file whose writer has exited: every line whole.
fn finished_audit(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the audit file ends inside a line after sandbox exited: {:?}",
        &text[text.rfind('\n').map_or(0, |i| i + 1)..]
    );
    audit_lines(&text)
}

/// The records written so far to an audit file (none when there is no file). A writer
/// that is still running may be part-way through a line (a reader of a regular file can
/// see a `write` half done): only whole lines count.
pub fn read_audit(path: &Path) -> Vec<Value> {
    audit_lines(&std::fs::read_to_string(path).unwrap_or_default())
}

fn audit_lines(text: &str) -> Vec<Value> {
    let whole = text.rfind('\n').map_or("", |i| &text[..i]);
    whole
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line is JSON ({e}): {l}"))
        })
        .collect()
}

/// The probe's command line for several operations (`::` between them).
pub fn probe_command(ops: &[&[&str]]) -> Vec<String> {
    let mut cmd: Vec<String> = vec![bins().probe.display().to_string()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            cmd.push("::".into());
        }
        cmd.extend(op.iter().map(|s| (*s).to_owned()));
    }
    cmd
}

/// `sandbox run -- sandbox-probe OPS...` in `dir` as root (`HOME=dir`).
pub fn probe(dir: &Path, policy: Option<&str>, ops: &[&[&str]]) -> Run {
    probe_as(User::Root, dir, policy, ops)
}

/// [`probe`] run by `user` (see [`run_as`]).
pub fn probe_as(user: User, dir: &Path, policy: Option<&str>, ops: &[&[&str]]) -> Run {
    let cmd = probe_command(ops);
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    run_as(user, dir, policy, &refs)
}

/// One probe for the table `cases` (each operation once), every answer checked.
pub fn check(dir: &Path, policy: Option<&str>, cases: &[Case<'_>]) -> Run {
    check_as(User::Root, dir, policy, cases)
}

/// [`check`] run by `user` (see [`run_as`]).
pub fn check_as(user: User, dir: &Path, policy: Option<&str>, cases: &[Case<'_>]) -> Run {
    check_as_env(user, dir, policy, &[], cases)
}

/// [`check_as`] with `env` set for sandbox (e.g. `SANDBOX_DEBUG`; the command gets it too).
pub fn check_as_env(
    user: User,
    dir: &Path,
    policy: Option<&str>,
    env: &[(&str, &str)],
    cases: &[Case<'_>],
) -> Run {
    let words: Vec<Vec<&str>> = cases
        .iter()
        .map(|(op, _)| op.split_whitespace().collect())
        .collect();
    let ops: Vec<&[&str]> = words.iter().map(Vec::as_slice).collect();
    let cmd = probe_command(&ops);
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let r = sandbox_run(user, dir, policy, home_of(user, dir), &refs, env);
    r.expect_all(cases);
    r
}

/// Probe from the test process itself (outside any sandbox cgroup), as root.
pub fn probe_outside(ops: &[&str]) -> String {
    probe_outside_as(User::Root, ops)
}

/// [`probe_outside`] as `user` (uid and gid changed before exec, no other groups).
pub fn probe_outside_as(user: User, ops: &[&str]) -> String {
    let mut c = Command::new(bins().probe);
    c.args(ops);
    if user != User::Root {
        c.uid(user.uid()).gid(user.gid());
    }
    let out = c.output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.rsplit_once(" -> ")
        .map_or_else(|| s.clone(), |(_, r)| r.trim().to_owned())
}

/// `sandbox run [--policy P] -- probe ARGS` started in `dir`, output piped; returns once
/// the command is in its cgroup.
pub fn start_probe(dir: &Path, policy: Option<&Path>, args: &[&str]) -> Child {
    let b = bins();
    let mut c = Command::new(&b.sandbox);
    c.arg("run");
    as_user(&mut c, User::Root);
    c.arg("--audit-log").arg(dir.join("audit.jsonl"));
    if let Some(p) = policy {
        c.arg("--policy").arg(p);
    }
    let child = c
        .arg("--")
        .arg(&b.probe)
        .args(args)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let procs = format!("/sys/fs/cgroup/sandbox/run-{}/cgroup.procs", child.id());
    let deadline = Instant::now() + Duration::from_mins(1);
    while std::fs::read_to_string(&procs).map_or(true, |s| s.trim().is_empty()) {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Waits for a run started with [`start_probe`] in `dir` and collects it.
pub fn wait_probe(child: Child, dir: &Path) -> Run {
    let out = child.wait_with_output().unwrap();
    Run::from_output(&out, &dir.join("audit.jsonl"))
}

/// The probe, started outside any sandbox and moved into `cgroup` (a cgroup2 directory)
/// before it execs: a process of a service that `sandbox attach` confines. Returns the
/// answer of the (last) operation.
pub fn probe_in_cgroup(cgroup: &Path, ops: &[&str]) -> String {
    let quoted: Vec<String> = ops
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect();
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} {}",
            cgroup.display(),
            bins().probe.display(),
            quoted.join(" ")
        ))
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.rsplit_once(" -> ")
        .map_or_else(|| s.clone(), |(_, r)| r.trim().to_owned())
}
