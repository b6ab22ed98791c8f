//! Shipping the audit log off the host, for real: the rsyslog configuration the project
//! ships (`sandbox-user/shipping/rsyslog/`), in two rsyslogd on loopback, carries every
//! record the real `sandbox` writes, across a rotation and a restart of the sender,
//! unchanged.
//!
//! - The collector: `collector.conf`, listening on 127.0.0.1 on a free high port, writing
//!   one JSON-lines file per sending host.
//! - The sender: `sandbox-audit.conf`, following the logs (`*.jsonl`) with imfile (inotify)
//!   and forwarding each line over TCP to the collector.
//! - The records: `sandbox run` in its fallback backend (as `fallback.rs` runs it) with a
//!   1 MiB rotation size, denying connects to loopback ports (denied in the kernel before
//!   anything is sent) until its log (`agent.slice.jsonl`, named as the unit names its
//!   logs) has been rotated, from a probe whose name is not ASCII (the records carry it).
//!   Then the sender is stopped, a run appends to that log and another starts a second
//!   one (`audit.jsonl`), and the sender is started again: it must resume where it
//!   stopped and pick up the new log.
//!
//! Only the log path, the collector's address and port, the output directory and the
//! work directories are changed in the shipped files (each replacement is checked).
//! Every line that reaches the collector must be a JSON object, and the lines must be
//! exactly the lines of the log and its rotated copy: none lost, none repeated, none
//! changed.
//!
//! Needs root (`sandbox run`) and rsyslogd (Debian's `rsyslog`, installed by
//! `cargo xtask setup`): `cargo xtask test` runs it on the host after the fallback tests;
//! plain `cargo test` lists it as ignored. A missing rsyslogd is a failure, not a skip.
use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The shipped configuration.
fn shipped(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sandbox-user/shipping/rsyslog")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// `text` with each `(from, to)` replaced; every `from` must be there.
fn replace_all(name: &str, text: &str, pairs: &[(&str, String)]) -> String {
    let mut out = text.to_owned();
    for (from, to) in pairs {
        assert!(
            out.contains(from),
            "{name} no longer contains {from:?}: update tests/tests/shipping.rs with it"
        );
        out = out.replace(from, to);
    }
    out
}

fn rsyslogd() -> PathBuf {
    let dirs = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&dirs)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|d| d.join("rsyslogd"))
        .find(|p| p.is_file())
        .expect(
            "rsyslogd is not installed: the shipping test needs it (Debian package rsyslog; \
             `cargo xtask setup` installs it)",
        )
}

/// `sandbox`: from `SANDBOX_BIN`, else next to this test's own directory.
fn sandbox_bin() -> PathBuf {
    let p = std::env::var_os("SANDBOX_BIN").map_or_else(
        || {
            std::env::current_exe()
                .expect("test executable")
                .parent()
                .and_then(Path::parent)
                .expect("target/<profile>")
                .join("sandbox")
        },
        PathBuf::from,
    );
    // Absolute: sandbox runs in another directory.
    std::fs::canonicalize(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: build it first (cargo xtask build) or set SANDBOX_BIN",
            p.display()
        )
    })
}

/// A root-owned temporary directory (sandbox refuses logs others could change), removed
/// at the end.
struct Tmp(PathBuf);

impl Tmp {
    fn new() -> Self {
        let p = std::env::temp_dir().join(format!("sandbox-shipping-{}", std::process::id()));
        drop(std::fs::remove_dir_all(&p));
        std::fs::create_dir_all(&p).expect("temp dir");
        Self(p)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        drop(std::fs::remove_dir_all(&self.0));
    }
}

/// One rsyslogd in the foreground (`-n`) with its own configuration, pid file and work
/// directory; stopped with SIGTERM when dropped.
struct Rsyslogd {
    name: &'static str,
    child: Option<Child>,
    dir: PathBuf,
}

impl Rsyslogd {
    /// Writes `main.conf` (the work directory, then the shipped snippet) into `dir` and
    /// checks it with `rsyslogd -N1` before starting.
    fn start(name: &'static str, dir: &Path, snippet: &str) -> Self {
        std::fs::create_dir_all(dir.join("work")).expect("mkdir");
        std::fs::write(dir.join("snippet.conf"), snippet).expect("write");
        let main = dir.join("main.conf");
        std::fs::write(
            &main,
            format!(
                "global(workDirectory=\"{}\")\ninclude(file=\"{}\")\n",
                dir.join("work").display(),
                dir.join("snippet.conf").display()
            ),
        )
        .expect("write");
        let check = Command::new(rsyslogd())
            .args(["-N1", "-f"])
            .arg(&main)
            .output()
            .expect("rsyslogd -N1");
        assert!(
            check.status.success(),
            "rsyslogd -N1 refused the {name} configuration:\n{}{}\n{snippet}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );
        let mut me = Self {
            name,
            child: None,
            dir: dir.to_owned(),
        };
        me.restart();
        me
    }

    fn restart(&mut self) {
        assert!(self.child.is_none(), "{} is running", self.name);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("rsyslogd.out"))
            .expect("log");
        let child = Command::new(rsyslogd())
            .arg("-n")
            .arg("-f")
            .arg(self.dir.join("main.conf"))
            .arg("-i")
            .arg(self.dir.join("rsyslogd.pid"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup"))
            .stderr(log)
            .spawn()
            .expect("starting rsyslogd");
        self.child = Some(child);
    }

    /// SIGTERM and wait: rsyslogd writes its imfile state on the way out.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = i32::try_from(child.id()).expect("pid");
            // SAFETY: plain syscall, on our own child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let status = child.wait().expect("wait");
            assert!(
                status.success(),
                "{} ended with {status}: {}",
                self.name,
                self.output()
            );
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(self.dir.join("rsyslogd.out")).unwrap_or_default()
    }

    fn assert_running(&mut self) {
        if let Some(child) = &mut self.child
            && let Some(status) = child.try_wait().expect("try_wait")
        {
            panic!("{} exited ({status}):\n{}", self.name, self.output());
        }
    }
}

impl Drop for Rsyslogd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(child.kill());
            drop(child.wait());
        }
    }
}

/// A port nobody listens on now (the collector takes it right after).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

/// `sandbox run --quiet` in the fallback backend: the probe connects to `ports` on
/// 127.0.0.1, each denied by `block_private` with a record.
fn sandbox_run(tmp: &Tmp, probe: &Path, log: &Path, ports: std::ops::Range<u16>) {
    let mut ops: Vec<String> = Vec::new();
    for port in ports {
        if !ops.is_empty() {
            ops.push("::".into());
        }
        ops.extend(["connect".into(), "127.0.0.1".into(), port.to_string()]);
    }
    let out = Command::new(sandbox_bin())
        .args(["run", "--as-root", "--quiet", "--audit-log"])
        .arg(log)
        .arg("--policy")
        .arg(tmp.path("policy.yaml"))
        .arg("--")
        .arg(probe)
        .args(&ops)
        .env("SANDBOX_BACKEND", "fallback")
        .env("HOME", tmp.path("home"))
        .current_dir(tmp.path("ws"))
        .output()
        .expect("starting sandbox");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The probe exits 1 when an operation failed, as each of these must.
    assert!(
        out.status.code() == Some(1)
            && stdout.lines().count() == ops.iter().filter(|o| *o == "connect").count()
            && stdout.lines().all(|l| l.ends_with(" -> EPERM")),
        "sandbox run: {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Lines of the files that exist, in order.
fn lines_of(files: &[PathBuf]) -> Vec<String> {
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|t| t.lines().map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

/// How many times each line occurs.
fn counts(lines: &[String]) -> BTreeMap<&str, usize> {
    let mut m = BTreeMap::new();
    for l in lines {
        *m.entry(l.as_str()).or_insert(0) += 1;
    }
    m
}

/// The collector's file for this host (the only directory under `fleet/`).
fn received(fleet: &Path) -> Vec<String> {
    let Ok(dirs) = std::fs::read_dir(fleet) else {
        return Vec::new();
    };
    let files: Vec<PathBuf> = dirs
        .map(|d| d.expect("entry").path().join("audit.jsonl"))
        .collect();
    assert!(files.len() <= 1, "more than one sending host: {files:?}");
    lines_of(&files)
}

/// Waits until the collector has as many lines as `sent` (or 60 s), then checks that
/// they are the same lines, each a JSON object.
fn expect_delivered(
    fleet: &Path,
    sent: &[String],
    sender: &mut Rsyslogd,
    collector: &mut Rsyslogd,
) {
    let deadline = Instant::now() + Duration::from_mins(1);
    let mut got = received(fleet);
    while got.len() < sent.len() && Instant::now() < deadline {
        sender.assert_running();
        collector.assert_running();
        std::thread::sleep(Duration::from_millis(200));
        got = received(fleet);
    }
    // A moment more: a repeat would show up now.
    std::thread::sleep(Duration::from_millis(500));
    got = received(fleet);
    for l in &got {
        let v: Value = serde_json::from_str(l)
            .unwrap_or_else(|e| panic!("the collector wrote a line that is not JSON ({e}): {l}"));
        assert!(v.is_object(), "not a JSON object: {l}");
    }
    let (want, have) = (counts(sent), counts(&got));
    let lost: Vec<&&str> = want.keys().filter(|k| !have.contains_key(*k)).collect();
    let changed: Vec<&&str> = have.keys().filter(|k| !want.contains_key(*k)).collect();
    let repeated: Vec<&&str> = have
        .iter()
        .filter(|(k, n)| want.get(*k).is_some_and(|w| *n > w))
        .map(|(k, _)| k)
        .collect();
    assert!(
        lost.is_empty() && changed.is_empty() && repeated.is_empty(),
        "sent {} records, the collector has {}: {} lost, {} not as sent, {} repeated\n\
         first lost: {:?}\nfirst not as sent: {:?}\nfirst repeated: {:?}\n\
         sender:\n{}\ncollector:\n{}",
        sent.len(),
        got.len(),
        lost.len(),
        changed.len(),
        repeated.len(),
        lost.first(),
        changed.first(),
        repeated.first(),
        sender.output(),
        collector.output()
    );
}

#[test]
#[ignore = "needs root and rsyslogd; cargo xtask test runs it on the host"]
fn rsyslog_ships_every_record_unchanged_across_rotation_and_restart() {
    // SAFETY: plain syscall.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the shipping test needs root (sandbox run; cargo xtask test runs it as root)"
    );
    rsyslogd();
    let tmp = Tmp::new();
    for d in ["ws", "home", "log", "bin"] {
        std::fs::create_dir_all(tmp.path(d)).expect("mkdir");
    }
    // 1 MiB is the smallest rotation size; keep 3 so nothing is deleted here.
    std::fs::write(
        tmp.path("policy.yaml"),
        format!(
            "name: shipping\nfiles:\n  workspace: {}\nnetwork:\n  block_private: true\n\
             audit:\n  max_size_mb: 1\n  keep: 3\n",
            tmp.path("ws").display()
        ),
    )
    .expect("policy");
    // The records carry the process name: one that is not ASCII (and is cut by the
    // kernel's 15-byte comm inside a character) must arrive as written.
    let probe = tmp.path("bin/prøbe-ünïcødé");
    std::fs::copy(env!("CARGO_BIN_EXE_sandbox-probe"), &probe).expect("copy probe");
    let log = tmp.path("log/agent.slice.jsonl");
    let rotated = tmp.path("log/agent.slice.jsonl.1");
    let second = tmp.path("log/audit.jsonl");
    let fleet = tmp.path("fleet");

    let port = free_port();
    let mut collector = Rsyslogd::start(
        "collector",
        &tmp.path("collector"),
        &replace_all(
            "collector.conf",
            &shipped("collector.conf"),
            &[
                (
                    "port=\"514\"",
                    format!("port=\"{port}\" address=\"127.0.0.1\""),
                ),
                ("/var/log/sandbox-fleet/", format!("{}/", fleet.display())),
            ],
        ),
    );
    let mut sender = Rsyslogd::start(
        "sender",
        &tmp.path("sender"),
        &replace_all(
            "sandbox-audit.conf",
            &shipped("sandbox-audit.conf"),
            &[
                (
                    "/var/log/sandbox/*.jsonl",
                    tmp.path("log/*.jsonl").display().to_string(),
                ),
                (
                    "target=\"collector.example.org\"",
                    "target=\"127.0.0.1\"".into(),
                ),
                ("port=\"514\"", format!("port=\"{port}\"")),
            ],
        ),
    );
    // The collector listens before anything is sent (else the sender's first retry waits
    // the shipped 10 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        collector.assert_running();
        assert!(Instant::now() < deadline, "the collector does not listen");
        std::thread::sleep(Duration::from_millis(100));
    }

    // Run 1: enough denials for the log to be rotated once.
    let mut first = 30_000;
    let mut batches = 0;
    while !rotated.exists() {
        batches += 1;
        assert!(
            batches <= 3,
            "three runs of 800 denials did not rotate the log"
        );
        sandbox_run(&tmp, &probe, &log, first..first + 800);
        first += 800;
    }
    let sent = lines_of(&[rotated.clone(), log.clone()]);
    let rotated_count = lines_of(std::slice::from_ref(&rotated)).len();
    eprintln!(
        "run 1: {} records in {batches} run(s) ({rotated_count} in agent.slice.jsonl.1, {} in \
         agent.slice.jsonl)",
        sent.len(),
        sent.len() - rotated_count
    );
    assert!(
        sent.iter().any(|l| l.contains("prøbe-")),
        "no record names the probe:\n{}",
        sent.first().map_or("", String::as_str)
    );
    expect_delivered(&fleet, &sent, &mut sender, &mut collector);
    eprintln!("run 1: every record arrived unchanged");

    // While the sender is down: more records in that log, and a new log. The sender
    // resumes from its saved position and picks up the new file.
    sender.stop();
    sandbox_run(&tmp, &probe, &log, first..first + 50);
    sandbox_run(&tmp, &probe, &second, first + 50..first + 100);
    let mut files: Vec<PathBuf> = std::fs::read_dir(tmp.path("log"))
        .expect("log dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    let sent = lines_of(&files);
    sender.restart();
    expect_delivered(&fleet, &sent, &mut sender, &mut collector);
    let names: Vec<String> = files
        .iter()
        .map(|f| {
            f.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    eprintln!(
        "runs 2 and 3, sender restarted: {} records in {}, each arrived once and unchanged",
        sent.len(),
        names.join(", ")
    );
    sender.stop();
    collector.stop();
}
