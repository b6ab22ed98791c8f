//! The sandbox's own integrity: its audit log and policy, the terminal, the parent-death
//! signal, a dead run's records, who the command runs as and with which capabilities, and
//! the built-in policy's writes.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::*;
use serde_json::Value;

// signal, a dead run's records, who the command runs as and with which capabilities, and
// the built-in policy's writes. Helpers first.

/// The guest's unprivileged user (`agent`, 1000:1000, home /home/agent: see xtask/vm.rs).
const AGENT: u32 = 1000;

fn chown_agent(p: &Path) {
    std::os::unix::fs::lchown(p, Some(AGENT), Some(AGENT)).unwrap();
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// A directory owned by the agent user.
fn agent_dir(p: &Path) -> PathBuf {
    std::fs::create_dir_all(p).unwrap();
    chown_agent(p);
    p.to_path_buf()
}

/// `base/rel`, every directory from `base` down owned by the agent user.
fn agent_dirs(base: &Path, rel: &str) {
    let mut p = base.to_path_buf();
    for part in rel.split('/') {
        p.push(part);
        agent_dir(&p);
    }
}

/// The environment `sudo` gives `sandbox run` when the agent user calls it.
const AS_AGENT: &[(&str, &str)] = &[("SUDO_UID", "1000"), ("SUDO_GID", "1000")];

/// `sandbox run ARGS --audit-log AUDIT -- CMD` in `cwd`, with `env` (and no SUDO_* variables
/// unless `env` has them). `AUDIT` is left as it is (some tests plant things there).
fn sandbox_run(cwd: &Path, audit: &Path, args: &[&str], env: &[(&str, &str)], cmd: &[&str]) -> Run {
    let b = bins();
    let out = Command::new(&b.sandbox)
        .arg("run")
        .args(args)
        .arg("--audit-log")
        .arg(audit)
        .arg("--")
        .args(cmd)
        .current_dir(cwd)
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .envs(env.iter().copied())
        .output()
        .expect("start sandbox");
    let audit_text = std::fs::read_to_string(audit).unwrap_or_default();
    Run {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        // Not every file passed as the log is one (the refused ones).
        audit: audit_text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect(),
    }
}

/// Runs `bin ARGS` outside any sandbox as the agent user; the probe's answer.
fn as_agent(bin: &Path, args: &[&str]) -> String {
    use std::os::unix::process::CommandExt as _;
    let out = Command::new(bin)
        .args(args)
        .uid(AGENT)
        .gid(AGENT)
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.rsplit_once(" -> ")
        .map(|(_, r)| r.trim().to_owned())
        .unwrap_or(s)
}

/// The probe as the agent user, outside any sandbox.
fn probe_as_agent(args: &[&str]) -> String {
    as_agent(&bins().probe, args)
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The audit log is refused where the command could plant a link (root would append to,
/// and chmod, whatever it points to) or replace the log; where only root can write, the
/// command can neither remove nor rename it, even as root.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
#[expect(
    clippy::too_many_lines,
    reason = "one scenario: each route shown outside, then refused inside"
)]
fn audit_log_cannot_be_turned_against_root_or_removed() {
    use std::os::unix::fs::MetadataExt;
    let d = workdir("audit_integrity");
    let b = bins();
    let probe = s(&b.probe);
    let ws = agent_dir(&d.join("ws"));
    let victim = d.join("victim");
    write(&victim, "precious\n");
    set_mode(&victim, 0o644);
    // The route: the agent plants a link where its log goes (README's example put the log
    // in the workspace); root opening the log by name follows it to root's file.
    let link = ws.join("audit.jsonl");
    assert_eq!(probe_as_agent(&["symlink", &s(&victim), &s(&link)]), "OK");
    let followed = std::fs::OpenOptions::new()
        .append(true)
        .open(&link)
        .unwrap();
    assert_eq!(
        followed.metadata().unwrap().ino(),
        std::fs::metadata(&victim).unwrap().ino()
    );
    drop(followed);
    // sandbox refuses, says why and where to put the log instead, and starts nothing.
    let r = sandbox_run(&ws, &link, &[], AS_AGENT, &[&probe, "whoami"]);
    assert_eq!(r.status, 125, "{}", r.stderr);
    assert!(r.stderr.contains("refusing audit log"), "{}", r.stderr);
    assert!(r.stderr.contains("uid 1000"), "{}", r.stderr);
    assert!(r.stderr.contains("/var/log/sandbox/"), "{}", r.stderr);
    assert!(!r.stdout.contains("PROBE"), "{}", r.stdout);
    // A link left in a directory only root can write is not followed either.
    let logs = d.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::os::unix::fs::symlink(&victim, logs.join("old.jsonl")).unwrap();
    let r = sandbox_run(
        &d,
        &logs.join("old.jsonl"),
        &["--as-root"],
        &[],
        &[&probe, "whoami"],
    );
    assert_eq!(r.status, 125, "{}", r.stderr);
    assert!(r.stderr.contains("symbolic link"), "{}", r.stderr);
    // ... nor a second name of another file.
    std::fs::hard_link(&victim, logs.join("hard.jsonl")).unwrap();
    let r = sandbox_run(
        &d,
        &logs.join("hard.jsonl"),
        &["--as-root"],
        &[],
        &[&probe, "whoami"],
    );
    assert_eq!(r.status, 125, "{}", r.stderr);
    assert!(r.stderr.contains("hard links"), "{}", r.stderr);
    // ... nor root's file that is not a log (a mistyped path, or one a policy chose).
    let passwd = d.join("passwd");
    write(&passwd, "root:x:0:0:root:/root:/bin/sh\n");
    set_mode(&passwd, 0o644);
    let r = sandbox_run(&d, &passwd, &["--as-root"], &[], &[&probe, "whoami"]);
    assert_eq!(r.status, 125, "{}", r.stderr);
    assert!(r.stderr.contains("not a sandbox audit log"), "{}", r.stderr);
    assert_eq!(mode_of(&passwd), 0o644);
    assert_eq!(
        std::fs::read_to_string(&passwd).unwrap(),
        "root:x:0:0:root:/root:/bin/sh\n"
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(mode_of(&victim), 0o644, "the victim was chmod-ed");
    // Where only root can write, a command running as root (with root's file powers) still
    // cannot remove, rename or truncate its log: the route works for root outside.
    write(&logs.join("other"), "x");
    assert_eq!(probe_outside(&["unlink", &s(&logs.join("other"))]), "OK");
    let log = logs.join("audit.jsonl");
    let policy = d.join("policy.yaml");
    write(&policy, "name: custom\n");
    let r = sandbox_run(
        &d,
        &log,
        &["--as-root", "--policy", &s(&policy)],
        &[],
        &[
            &probe,
            "unlink",
            &s(&log),
            "::",
            "rename",
            &s(&log),
            &s(&d.join("stolen")),
            "::",
            "open",
            &s(&log),
            "w",
            "::",
            "open",
            &s(&policy),
            "w",
        ],
    );
    r.expect("unlink", "EACCES");
    r.expect("rename", "EACCES");
    r.expect(&format!("open {} w", s(&log)), "EACCES");
    r.expect(&format!("open {} w", s(&policy)), "EACCES");
    let rec = r.records("/file/path", &s(&log));
    assert!(
        rec.iter()
            .all(|r| r["unmapped"]["rule"] == "files.read_only (implicit: audit log)"),
        "{rec:#?}"
    );
    assert_eq!(rec.len(), 3, "{:#?}", r.audit);
    assert_eq!(
        r.one_record("/file/path", &s(&policy))["unmapped"]["rule"],
        "files.read_only (implicit: policy file)"
    );
    // The log is root's and owner-only.
    let meta = std::fs::metadata(&log).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
}

/// A policy the confined command could change is refused: by `sandbox run` (it would
/// decide the next run), and by `sandbox attach` (which re-reads it on SIGHUP while the
/// confined processes run), at start and at reload.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_policy_the_agent_could_change_is_refused() {
    use std::io::BufRead;
    let d = workdir("policy_integrity");
    let b = bins();
    let ws = agent_dir(&d.join("ws"));
    let theirs = ws.join("policy.yaml");
    // The route: the agent can write a policy in its directory.
    assert_eq!(probe_as_agent(&["open", &s(&theirs), "creat"]), "OK");
    std::fs::write(&theirs, "name: svc\n").unwrap();
    let r = sandbox_run(
        &ws,
        &d.join("run.jsonl"),
        &["--policy", &s(&theirs)],
        AS_AGENT,
        &[&s(&b.probe), "whoami"],
    );
    assert_eq!(r.status, 125, "{}", r.stderr);
    assert!(r.stderr.contains("refusing policy"), "{}", r.stderr);
    assert!(r.stderr.contains("uid 1000"), "{}", r.stderr);
    assert!(!r.stdout.contains("PROBE"), "{}", r.stdout);
    let attach = |policy: &Path| {
        let mut c = Command::new(&b.sandbox);
        c.args(["attach", "--cgroup", "svc-integrity", "--policy"])
            .arg(policy)
            .arg("--audit-log")
            .arg(d.join("audit.jsonl"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    };
    let out = attach(&theirs).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("refusing policy") && err.contains("uid 1000"),
        "{err}"
    );
    // Root's file, but writable by everyone.
    let ours = d.join("policy.yaml");
    write(&ours, "name: svc\n");
    set_mode(&ours, 0o666);
    let out = attach(&ours).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("writable by every user"), "{err}");
    // A good policy at start that becomes writable later: the reload is refused and the
    // policy in force stays.
    set_mode(&ours, 0o644);
    let cg = Path::new("/sys/fs/cgroup/svc-integrity");
    let _ = std::fs::create_dir(cg);
    let mut child = attach(&ours).spawn().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    let mut wait_line = |want: &str| -> String {
        let deadline = Instant::now() + Duration::from_mins(2);
        while Instant::now() < deadline {
            if let Ok(l) = rx.recv_timeout(Duration::from_millis(200)) {
                seen.push(l.clone());
                if l.contains(want) {
                    return l;
                }
            }
        }
        panic!("no '{want}' from sandbox attach:\n{}", seen.join("\n"));
    };
    wait_line("enforcing policy 'svc'");
    set_mode(&ours, 0o666);
    // SAFETY: plain syscalls on our own child.
    unsafe { libc::kill(child.id().cast_signed(), libc::SIGHUP) };
    let refused = wait_line("reload refused");
    assert!(refused.contains("writable by every user"), "{refused}");
    unsafe { libc::kill(child.id().cast_signed(), libc::SIGTERM) };
    wait_line("no longer confined");
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_dir(cg);
}

/// stderr that does not take what sandbox writes (a pipe nobody reads, a terminal stopped
/// with ctrl-S) neither stops the audit log from getting every record nor keeps
/// `sandbox run` from ending.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_terminal_that_does_not_read_never_stops_auditing() {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let d = workdir("stuck_terminal");
    let b = bins();
    // Distinct files: identical denials would be counted in the kernel, one line each.
    for i in 0..100 {
        write(&d.join(format!("secret.{i}")), "s");
    }
    let policy = d.join("policy.yaml");
    write(
        &policy,
        &format!("files:\n  deny: [{}/secret.*]\n", d.display()),
    );
    let secret = s(&d.join("secret."));
    // Runs N denied opens with stderr on `err`; the audit records of them.
    let run = |err: OwnedFd, n: u32| -> Vec<Value> {
        let audit = d.join("audit.jsonl");
        let _ = std::fs::remove_file(&audit);
        let mut child = Command::new(&b.sandbox)
            .args(["run", "--as-root", "--audit-log"])
            .arg(&audit)
            .arg("--policy")
            .arg(&policy)
            .arg("--")
            .arg(&b.probe)
            .args(["open-n", "secret", &n.to_string(), "100"])
            .current_dir(&d)
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_mins(3);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("sandbox run did not end while its stderr was not read");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out).unwrap();
        assert_eq!(status.code(), Some(1), "{out}");
        assert!(out.contains(&format!("DENIED={n}")), "{out}");
        std::fs::read_to_string(&audit)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let of_secret = |recs: &[Value]| {
        recs.iter()
            .filter(|r| {
                r["file"]["path"]
                    .as_str()
                    .is_some_and(|p| p.starts_with(&secret))
            })
            .count()
    };
    // A pipe nobody reads: sandbox's lines fill it long before the command is done.
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 into a two-element array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: descriptors the kernel just returned, owned here.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let probe_end = wr.try_clone().unwrap();
    let recs = run(wr, 3000);
    assert_eq!(of_secret(&recs), 3000, "records lost");
    // The pipe really was full (64 KiB, sixteen pages, waiting to be read), and what is in
    // it is sandbox's lines.
    drop(probe_end);
    let mut queued: libc::c_int = 0;
    // SAFETY: FIONREAD into an int on our descriptor.
    assert_eq!(
        unsafe { libc::ioctl(rd.as_raw_fd(), libc::FIONREAD, &raw mut queued) },
        0
    );
    assert!(
        queued >= 15 * 4096,
        "only {queued} bytes were waiting in the pipe"
    );
    let mut head = vec![0u8; 4096];
    // SAFETY: reading into our buffer.
    let n = unsafe { libc::read(rd.as_raw_fd(), head.as_mut_ptr().cast(), head.len()) };
    head.truncate(usize::try_from(n).unwrap());
    assert!(
        String::from_utf8_lossy(&head).contains("sandbox: denied open (read)"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    // A terminal stopped with ctrl-S (output suspended): every write to it would wait.
    let (mut master, mut slave) = (0i32, 0i32);
    // SAFETY: openpty into two ints; no name, no settings.
    let r = unsafe {
        libc::openpty(
            &raw mut master,
            &raw mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0);
    // SAFETY: descriptors openpty returned, owned here.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    // SAFETY: tcflow on our terminal.
    assert_eq!(unsafe { libc::tcflow(slave.as_raw_fd(), libc::TCOOFF) }, 0);
    let recs = run(slave.try_clone().unwrap(), 300);
    assert_eq!(of_secret(&recs), 300, "records lost");
    // SAFETY: as above.
    unsafe { libc::tcflow(slave.as_raw_fd(), libc::TCOON) };
    drop((master, slave));
}

/// Denials the audit log counts as lost (`Records Lost` records).
fn lost(audit: &[Value]) -> u64 {
    audit
        .iter()
        .filter(|r| r["activity_name"] == "Records Lost")
        .filter_map(|r| r["count"].as_u64())
        .sum()
}

/// A flood of identical denials (one process, one file) is counted in the kernel: a few
/// records, each later one with the count of those it stands for, and nothing lost
/// uncounted: the records and their counts add up to every denial.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_flood_of_identical_denials_is_counted_not_lost() {
    let d = workdir("flood");
    write(&d.join("secret"), "s");
    write(&d.join("open"), "o");
    let secret = s(&d.join("secret"));
    let policy = format!("files:\n  deny: [{secret}]\n");
    // The route: the same loop on a file the policy lets be read.
    let r = run_as(
        User::Root,
        &d,
        Some(&policy),
        &[s(&bins().probe).as_str(), "open-n", "open", "2000"],
    );
    assert!(r.stdout.contains("ALLOWED=2000 DENIED=0"), "{}", r.stdout);
    let n = 20_000u64;
    let r = run_as(
        User::Root,
        &d,
        Some(&policy),
        &[
            s(&bins().probe).as_str(),
            "open-n",
            "secret",
            &n.to_string(),
        ],
    );
    assert!(r.stdout.contains(&format!("DENIED={n}")), "{}", r.stdout);
    let recs = &r.audit;
    let of_secret: Vec<&Value> = recs
        .iter()
        .filter(|r| r["file"]["path"] == secret.as_str())
        .collect();
    let counted: u64 = of_secret
        .iter()
        .map(|r| r["count"].as_u64().unwrap_or(1))
        .sum();
    let lost = lost(recs);
    assert_eq!(
        counted + lost,
        n,
        "records {}, lost {lost}:\n{of_secret:#?}",
        of_secret.len()
    );
    assert!(
        of_secret.len() < 100
            && of_secret
                .iter()
                .any(|r| r["count"].as_u64().unwrap_or(0) > 1),
        "{} records for {n} identical denials",
        of_secret.len()
    );
}

/// A flood of distinct denials (one process, 3,000 files) is written by the pump's writing
/// thread (`SANDBOX_PIPELINE_AFTER=1`: every drain of two records or more hands them over)
/// in the order the kernel made them, and every denial is a record or counted as lost.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_flood_of_distinct_denials_is_written_in_order() {
    let d = workdir("flood-distinct");
    let n = 3_000usize;
    for i in 0..n {
        write(&d.join(format!("secret.{i}")), "s");
    }
    let base = s(&d.join("secret"));
    let policy = format!("files:\n  deny: ['{base}.[0-9]*']\n");
    let probe = s(&bins().probe);
    let count = n.to_string();
    // The route: without the sandbox every file opens.
    assert_eq!(
        probe_outside(&["open-n", &base, &count, &count]),
        format!("ALLOWED={n} DENIED=0")
    );
    let r = run_as_env(
        User::Root,
        &d,
        Some(&policy),
        &[probe.as_str(), "open-n", &base, &count, &count],
        &[("SANDBOX_PIPELINE_AFTER", "1"), ("SANDBOX_DEBUG", "1")],
    );
    assert!(
        r.stdout.contains(&format!("ALLOWED=0 DENIED={n}")),
        "{}",
        r.stdout
    );
    // The thread ran (else this test shows nothing about it).
    assert!(
        r.stderr
            .contains("sandbox: debug: the pump's writing thread wrote records"),
        "{}",
        r.stderr
    );
    let prefix = format!("{base}.");
    let order: Vec<usize> = r
        .audit
        .iter()
        .filter_map(|rec| rec["file"]["path"].as_str())
        .filter_map(|p| p.strip_prefix(&prefix))
        .filter_map(|i| i.parse().ok())
        .collect();
    let lost = lost(&r.audit);
    assert_eq!(
        order.len() as u64 + lost,
        n as u64,
        "records {}, lost {lost}",
        order.len()
    );
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "records out of order: {:?}",
        order.windows(2).find(|w| w[0] >= w[1])
    );
}

/// What the command leaves running when it exits is ended before the last read of the
/// ring: every denial it made is in the log, as a record or counted as lost; none is made
/// after that read and never told (a process left behind in audit mode could otherwise act
/// unrecorded between the last drain and the teardown).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn what_the_command_leaves_running_is_recorded_to_its_end() {
    let d = workdir("left-running");
    write(&d.join("secret"), "s");
    let secret = s(&d.join("secret"));
    let count = d.join("count");
    let policy = format!("files:\n  deny: [{secret}]\n");
    // The route: outside the sandbox the file opens.
    assert_eq!(probe_outside(&["open", &secret, "r"]), OK);
    // A loop in the background, each attempt a new process (so no two denials are alike),
    // each counted before it is made; the command itself exits at once.
    let script = format!(
        "( while true; do echo x >> {count}; {probe} open {secret} r >/dev/null; done ) & \
         sleep 1; exit 0",
        count = count.display(),
        probe = s(&bins().probe),
    );
    let r = run_as(User::Root, &d, Some(&policy), &["/bin/sh", "-c", &script]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let attempts = std::fs::read_to_string(&count).unwrap().lines().count() as u64;
    let recorded: u64 = r
        .audit
        .iter()
        .filter(|x| x["file"]["path"] == secret.as_str())
        .map(|x| x["count"].as_u64().unwrap_or(1))
        .sum();
    let lost = lost(&r.audit);
    assert!(attempts > 1, "the loop never ran: {}", r.stderr);
    // The last attempt may have been counted and killed before its open.
    assert!(
        recorded + lost + 1 >= attempts,
        "{attempts} attempts, {recorded} recorded, {lost} counted as lost"
    );
    // And nothing goes on in the cgroup after sandbox ended.
    let after = std::fs::read_to_string(&count).unwrap().lines().count() as u64;
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().lines().count() as u64,
        after
    );
}

/// If sandbox is killed, its direct child dies with it, also when it runs as another user
/// (changing uid clears the parent-death signal, so it is set after the change).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn the_command_dies_with_sandbox_also_as_another_user() {
    let d = workdir("pdeathsig");
    let b = bins();
    let policy = d.join("policy.yaml");
    write(&policy, "name: pdeath\n");
    let mut sandbox = Command::new(&b.sandbox)
        .args(["run", "--audit-log"])
        .arg(d.join("audit.jsonl"))
        .arg("--policy")
        .arg(&policy)
        .arg("--")
        .arg(&b.probe)
        .args(["sleep", "60000"])
        .current_dir(&d)
        .envs(AS_AGENT.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let procs = format!("/sys/fs/cgroup/sandbox/run-{}/cgroup.procs", sandbox.id());
    let deadline = Instant::now() + Duration::from_mins(1);
    let pid = loop {
        if let Some(p) = std::fs::read_to_string(&procs)
            .ok()
            .and_then(|t| t.lines().next().and_then(|l| l.trim().parse::<u32>().ok()))
        {
            break p;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    // The child joins the cgroup before it changes user and execs: wait for the exec.
    while std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or(true, |c| c.trim() != "sandbox-probe")
    {
        assert!(Instant::now() < deadline, "the command never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert!(uid.split_whitespace().nth(1) == Some("1000"), "{uid}");
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(sandbox.id().cast_signed(), libc::SIGKILL) };
    sandbox.wait().unwrap();
    let dead = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |st| {
            st.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !dead(pid) {
        assert!(
            Instant::now() < deadline,
            "the command (pid {pid}, uid 1000) outlived its sandbox"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The next run cleans up the dead run's cgroup and pins.
    let r = run_in(&d, Some("name: sweep\n"), &d, &["true"]);
    assert_eq!(r.status, 0, "{}", r.stderr);
}

/// Records the programs wrote after their sandbox was killed are not lost: the next run's
/// clean-up reads the dead run's ring buffer into its own audit log.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn records_left_by_a_killed_sandbox_reach_the_next_log() {
    let d = workdir("orphaned_records");
    write(&d.join("secret"), "s");
    let policy = d.join("policy.yaml");
    write(
        &policy,
        &format!("files:\n  deny: [{}/secret]\n", d.display()),
    );
    let b = bins();
    let result = d.join("result");
    let mut sandbox = Command::new(&b.sandbox)
        .args(["run", "--as-root", "--audit-log"])
        .arg(d.join("audit.jsonl"))
        .arg("--policy")
        .arg(&policy)
        .arg("--")
        .arg(&b.probe)
        .args(["orphan-open", "secret", "3000"])
        .arg(&result)
        .args(["::", "sleep", "60000"])
        .current_dir(&d)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = sandbox.id();
    assert!(
        wait_for(&d.join("result.started"), 60),
        "the orphan never started"
    );
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(pid.cast_signed(), libc::SIGKILL) };
    sandbox.wait().unwrap();
    assert!(wait_for(&result, 60), "the orphan never reported");
    assert_eq!(std::fs::read_to_string(&result).unwrap(), "EACCES");
    // The dead run's own log never got the record: it died first.
    let secret = s(&d.join("secret"));
    assert!(
        !std::fs::read_to_string(d.join("audit.jsonl"))
            .unwrap_or_default()
            .contains(&secret)
    );
    let next = sandbox_run(&d, &d.join("next.jsonl"), &["--as-root"], &[], &["true"]);
    assert_eq!(next.status, 0, "{}", next.stderr);
    let rec = next.one_record("/file/path", &secret);
    assert_eq!(rec["action"], "Denied", "{rec}");
    assert_eq!(rec["unmapped"]["reason"], "rule", "{rec}");
    let run = rec["unmapped"]["orphaned"]["run"]
        .as_str()
        .unwrap_or_default();
    assert!(run.starts_with(&format!("run-{pid}-")), "{rec}");
    assert!(
        next.stderr.contains("left by a sandbox that died"),
        "{}",
        next.stderr
    );
}

/// Root is never the command's user by default: without sudo, sandbox asks who it should
/// be (`--user`, `--as-root`) instead of silently giving the command root.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn root_is_never_the_default_user() {
    let d = workdir("root_by_default");
    let probe = s(&bins().probe);
    let audit = d.join("audit.jsonl");
    // The route: run from a root shell, the command would be root.
    assert!(probe_outside(&["whoami"]).starts_with("UID=0 "));
    let r = sandbox_run(&d, &audit, &[], &[], &[&probe, "whoami"]);
    assert_eq!(r.status, 125, "{}", r.stderr);
    for hint in ["sudo", "--user", "--as-root"] {
        assert!(r.stderr.contains(hint), "{hint}: {}", r.stderr);
    }
    assert!(!r.stdout.contains("PROBE"), "the command ran: {}", r.stdout);
    for who in ["agent", "1000"] {
        let r = sandbox_run(&d, &audit, &["--user", who], &[], &[&probe, "whoami"]);
        assert!(
            r.result("whoami")
                .starts_with("UID=1000 EUID=1000 GID=1000 EGID=1000 "),
            "{}",
            r.stderr
        );
    }
    let r = sandbox_run(&d, &audit, &["--user", "root"], &[], &[&probe, "whoami"]);
    assert_eq!(r.status, 125, "{}", r.stderr);
    assert!(r.stderr.contains("--as-root"), "{}", r.stderr);
    let r = sandbox_run(&d, &audit, &[], AS_AGENT, &[&probe, "whoami"]);
    assert!(
        r.result("whoami").starts_with("UID=1000 EUID=1000 "),
        "{}",
        r.stderr
    );
    let r = sandbox_run(&d, &audit, &["--as-root"], &[], &[&probe, "whoami"]);
    assert!(
        r.result("whoami").starts_with("UID=0 EUID=0 "),
        "{}",
        r.stderr
    );
}

/// A command running as root loses every capability that reaches past the policy (raw
/// sockets, bpf, ...) from all sets, bounding included; keeping one is explicit. No command
/// gains privileges through setuid binaries (`no_new_privs`), unless the policy lifts it, and
/// then still without those capabilities.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_root_command_keeps_no_capability_that_reaches_past_the_policy() {
    // chown, dac_override, dac_read_search, fowner, setgid, setuid, net_bind_service,
    // sys_chroot.
    const KEPT: u64 = 0x0004_04cf;
    const NET_RAW: u64 = 1 << 13;
    let d = workdir("capabilities");
    let b = bins();
    let probe = s(&b.probe);
    let audit = d.join("audit.jsonl");
    let policy = |name: &str, text: &str| {
        let p = d.join(name);
        write(&p, text);
        s(&p)
    };
    let hex = |v: u64| format!("{v:016x}");
    // The route: root outside has them.
    assert_eq!(probe_outside(&["raw-socket"]), "OK");
    assert_eq!(probe_outside(&["bpf"]), "OK");
    // Raw sockets are allowed by the policy: what stops them here is the capability.
    let sockets = "network:\n  sockets: [unix, inet, inet6, netlink, raw]\n";
    let plain = policy("plain.yaml", &format!("name: plain\n{sockets}"));
    let ops = [probe.as_str(), "whoami", "::", "raw-socket", "::", "bpf"];
    let r = sandbox_run(&d, &audit, &["--as-root", "--policy", &plain], &[], &ops);
    let who = r.result("whoami");
    for want in [
        "UID=0 ".to_owned(),
        "NNP=1".to_owned(),
        format!("CAPBND={}", hex(KEPT)),
        format!("CAPEFF={}", hex(KEPT)),
        format!("CAPPRM={}", hex(KEPT)),
        format!("CAPINH={}", hex(0)),
        format!("CAPAMB={}", hex(0)),
    ] {
        assert!(who.contains(&want), "{want} in {who}");
    }
    r.expect("raw-socket", "EPERM");
    r.expect("bpf", "EPERM");
    // Keeping one is explicit: on the command line, or in the policy.
    let r = sandbox_run(
        &d,
        &audit,
        &["--as-root", "--keep-cap", "net_raw", "--policy", &plain],
        &[],
        &ops,
    );
    assert!(
        r.result("whoami")
            .contains(&format!("CAPBND={}", hex(KEPT | NET_RAW)))
    );
    r.expect("raw-socket", "OK");
    r.expect("bpf", "EPERM");
    let keeps = policy(
        "keeps.yaml",
        &format!("process:\n  keep_capabilities: [CAP_NET_RAW]\n{sockets}"),
    );
    let r = sandbox_run(&d, &audit, &["--as-root", "--policy", &keeps], &[], &ops);
    r.expect("raw-socket", "OK");
    // A user's command: nothing effective, the bounding set cut as well, no new privileges.
    let r = sandbox_run(&d, &audit, &["--policy", &plain], AS_AGENT, &ops);
    let who = r.result("whoami");
    for want in [
        "UID=1000 ".to_owned(),
        "NNP=1".to_owned(),
        format!("CAPEFF={}", hex(0)),
        format!("CAPBND={}", hex(KEPT)),
    ] {
        assert!(who.contains(&want), "{want} in {who}");
    }
    // setuid root: the route works outside (the agent becomes root) ...
    let suid = d.join("suid-probe");
    copy_exec(&b.probe, &suid);
    set_mode(&suid, 0o4755);
    assert!(as_agent(&suid, &["whoami"]).contains(" EUID=0 "));
    // ... but not inside, even where the policy allows setuid binaries to run.
    let allowed = policy("allowed.yaml", "exec:\n  allow_privileged: true\n");
    let r = sandbox_run(
        &d,
        &audit,
        &["--policy", &allowed],
        AS_AGENT,
        &[&s(&suid), "whoami"],
    );
    assert!(r.result("whoami").contains(" EUID=1000 "), "{}", r.stdout);
    // Lifting no_new_privs is a policy choice; the capabilities stay cut.
    let lifted = policy(
        "lifted.yaml",
        "process:\n  no_new_privs: false\nexec:\n  allow_privileged: true\n",
    );
    let r = sandbox_run(
        &d,
        &audit,
        &["--policy", &lifted],
        AS_AGENT,
        &[&s(&suid), "whoami"],
    );
    let who = r.result("whoami");
    assert!(who.contains(" EUID=0 "), "{who}");
    assert!(who.contains(&format!("CAPEFF={}", hex(KEPT))), "{who}");
}

/// The built-in policy: writes only in the workspace, temp directories, caches and the
/// agents' state; nothing that runs later outside (shell startup files, autostart,
/// programs on PATH, git hooks and config) is writable, and developer tools' tokens are
/// unreadable. Each denial is shown to work outside first.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
#[expect(
    clippy::too_many_lines,
    reason = "one policy, many paths: each shown writable outside, then decided inside"
)]
fn built_in_policy_writes_stay_where_nothing_runs_later() {
    let home = Path::new("/home/agent");
    let _ = std::fs::remove_dir_all(home);
    agent_dir(home);
    let ws = agent_dir(&home.join("project"));
    for dir in [".git/hooks", "src"] {
        agent_dirs(&ws, dir);
    }
    for dir in [
        ".config/autostart",
        ".config/gh",
        ".local/bin",
        ".cache/tool",
        ".claude",
    ] {
        agent_dirs(home, dir);
    }
    let h = |p: &str| s(&home.join(p));
    let w = |p: &str| s(&ws.join(p));
    // Files that run later, outside: the agent can write them without the sandbox.
    let later = [
        h(".bashrc"),
        h(".profile"),
        h(".config/autostart/evil.desktop"),
        h(".local/bin/ls"),
        w(".git/hooks/pre-commit"),
        w(".git/config"),
    ];
    for p in &later {
        assert_eq!(probe_as_agent(&["open", p, "creat"]), "OK", "{p}");
    }
    // Tokens of developer tools: readable without the sandbox.
    write(&home.join(".config/gh/hosts.yml"), "oauth_token: x\n");
    write(&home.join(".npmrc"), "//registry.npmjs.org/:_authToken=x\n");
    for p in [".config/gh/hosts.yml", ".npmrc"] {
        chown_agent(&home.join(p));
        assert_eq!(probe_as_agent(&["open", &h(p), "r"]), "OK", "{p}");
    }
    for p in &later[..4] {
        std::fs::remove_file(p).unwrap();
    }
    let probe = s(&bins().probe);
    let audit = Path::new("/tmp/kt/builtin-policy.jsonl");
    let _ = std::fs::remove_file(audit);
    let mut cmd: Vec<String> = vec![probe];
    for (i, op) in [
        vec!["open".to_owned(), later[0].clone(), "creat".into()],
        vec!["open".to_owned(), later[1].clone(), "creat".into()],
        vec!["open".to_owned(), later[2].clone(), "creat".into()],
        vec!["open".to_owned(), later[3].clone(), "creat".into()],
        vec!["open".to_owned(), later[4].clone(), "w".into()],
        vec!["open".to_owned(), later[5].clone(), "w".into()],
        vec!["rename".to_owned(), w(".git"), w("git-elsewhere")],
        vec!["open".to_owned(), h(".config/gh/hosts.yml"), "r".into()],
        vec!["open".to_owned(), h(".npmrc"), "r".into()],
        vec!["open".to_owned(), w("src/main.rs"), "creat".into()],
        vec!["open".to_owned(), w(".git/index"), "creat".into()],
        vec![
            "open".to_owned(),
            "/tmp/kt-agent-scratch".into(),
            "creat".into(),
        ],
        vec!["open".to_owned(), h(".cache/tool/blob"), "creat".into()],
        vec!["open".to_owned(), h(".claude/todos.json"), "creat".into()],
        vec!["open".to_owned(), h(".claude.json"), "creat".into()],
        vec![
            "open".to_owned(),
            h("notes-outside-the-workspace"),
            "creat".into(),
        ],
    ]
    .into_iter()
    .enumerate()
    {
        if i > 0 {
            cmd.push("::".into());
        }
        cmd.extend(op);
    }
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let r = sandbox_run(&ws, audit, &[], AS_AGENT, &refs);
    for p in &later[..4] {
        r.expect(&format!("open {p} creat"), "EACCES");
        assert!(!Path::new(p).exists(), "a denied creat left {p}");
    }
    for p in &later[4..] {
        r.expect(&format!("open {p} w"), "EACCES");
    }
    r.expect("rename", "EACCES");
    r.expect(&format!("open {}", h(".config/gh/hosts.yml")), "EACCES");
    r.expect(&format!("open {}", h(".npmrc")), "EACCES");
    for p in [
        w("src/main.rs"),
        w(".git/index"),
        "/tmp/kt-agent-scratch".into(),
        h(".cache/tool/blob"),
        h(".claude/todos.json"),
        h(".claude.json"),
    ] {
        r.expect(&format!("open {p} creat"), "OK");
    }
    r.expect(
        &format!("open {}", h("notes-outside-the-workspace")),
        "EACCES",
    );
    let notes = r.one_record("/file/path", &h("notes-outside-the-workspace"));
    assert_eq!(
        notes["unmapped"]["reason"], "not_in_write_allowlist",
        "{notes}"
    );
    assert_eq!(notes["unmapped"]["rule"], "files.write", "{notes}");
    assert_eq!(notes["actor"]["user"]["uid"], "1000", "{notes}");
    let rc = r.one_record("/file/path", &later[0]);
    assert_eq!(rc["unmapped"]["rule_source"], "~/.bashrc", "{rc}");
    let hook = r.one_record("/file/path", &later[4]);
    assert_eq!(
        hook["unmapped"]["rule_source"], "**/.git/**/hooks/**",
        "{hook}"
    );
    let config = r.one_record("/file/path", &later[5]);
    assert_eq!(
        config["unmapped"]["rule_source"], "**/.git/**/config",
        "{config}"
    );
    let gh = r.one_record("/file/path", &h(".config/gh/hosts.yml"));
    assert_eq!(gh["unmapped"]["rule_source"], "~/.config/gh", "{gh}");
    let _ = std::fs::remove_file("/tmp/kt-agent-scratch");
    let _ = std::fs::remove_dir_all(home);
}

/// Paths on the terminal carry no control bytes (a file name can hold ESC sequences); the
/// audit log keeps the exact name.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn terminal_lines_carry_no_control_bytes() {
    let d = workdir("terminal_escape");
    let name = "secret\x1b]0;owned\x07\x1b[2J\u{9b}31m";
    write(&d.join(name), "s");
    let policy = format!("files:\n  deny: [\"{}/secret*\"]\n", d.display());
    let r = probe(&d, Some(&policy), &[&["open", name, "r"]]);
    r.expect("open secret", "EACCES");
    assert!(
        r.stderr.contains("sandbox: denied open (read)"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains(['\x1b', '\x07', '\u{9b}']),
        "{:?}",
        r.stderr
    );
    assert!(
        r.stderr
            .contains("secret\\x1b]0;owned\\x07\\x1b[2J\\u{9b}31m"),
        "{}",
        r.stderr
    );
    r.one_record("/file/path", &s(&d.join(name)));
}
