//! Enforcement tests against the real kernel: the real `sandbox` binary, real cgroups, real
//! files, real sockets, a real audit file. They need root and BPF LSM, so on a development
//! machine they run inside a VM: `cargo xtask test`. On the host they are ignored (never
//! passed); where they do run, a kernel that cannot enforce makes them fail loudly.
//!
//! Each test is one or more `sandbox run`s, each in its own cgroup. The probe reports the
//! errno of every operation; the assertions check the errno *and* the audit record.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Bins {
    sandbox: PathBuf,
    probe: PathBuf,
}

fn bins() -> Bins {
    let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
    assert!(
        lsm.split(',').any(|l| l.trim() == "bpf"),
        "BPF LSM is not active here (lsm: '{}'): these tests cannot run on this kernel",
        lsm.trim()
    );
    let get = |k: &str| {
        PathBuf::from(
            std::env::var(k)
                .unwrap_or_else(|_| panic!("{k} is not set (cargo xtask test sets it)")),
        )
    };
    Bins {
        sandbox: get("SANDBOX_BIN"),
        probe: get("SANDBOX_PROBE"),
    }
}

/// A fresh directory for one test, canonical (the kernel reports canonical paths).
fn workdir(name: &str) -> PathBuf {
    let d = PathBuf::from("/tmp/kt").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.canonicalize().unwrap()
}

fn write(p: &Path, text: &str) {
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(p, text).unwrap();
}

/// One `sandbox run` of the probe.
struct Run {
    status: i32,
    stdout: String,
    stderr: String,
    audit: Vec<Value>,
}

impl Run {
    /// The probe's answer for the operation whose text starts with `op`.
    fn result(&self, op: &str) -> String {
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

    fn expect(&self, op: &str, want: &str) {
        let got = self.result(op);
        assert_eq!(
            got, want,
            "'{op}': expected {want}, got {got}\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
    }

    /// Audit records whose `pointer` field equals `value`.
    fn records(&self, pointer: &str, value: &str) -> Vec<&Value> {
        self.audit
            .iter()
            .filter(|r| r.pointer(pointer).and_then(Value::as_str) == Some(value))
            .collect()
    }

    fn one_record(&self, pointer: &str, value: &str) -> &Value {
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
}

fn run_in(dir: &Path, policy: Option<&str>, home: &Path, cmd: &[&str]) -> Run {
    run_with(dir, policy, home, cmd, false)
}

/// The guest's non-root user, as `sudo sandbox run` drops to it.
const AGENT_UID: u32 = 1000;

/// `sudo sandbox run` by the agent user: sandbox runs as root and drops the command to
/// `SUDO_UID`/`SUDO_GID`.
fn run_as_agent(dir: &Path, policy: Option<&str>, cmd: &[&str]) -> Run {
    run_with(dir, policy, Path::new("/home/agent"), cmd, true)
}

fn run_with(dir: &Path, policy: Option<&str>, home: &Path, cmd: &[&str], agent: bool) -> Run {
    let b = bins();
    let audit = dir.join("audit.jsonl");
    let _ = std::fs::remove_file(&audit);
    let mut c = Command::new(&b.sandbox);
    c.arg("run").arg("--audit-log").arg(&audit);
    if let Some(p) = policy {
        let f = dir.join("policy.yaml");
        write(&f, p);
        c.arg("--policy").arg(&f);
    }
    c.arg("--").args(cmd).env("HOME", home).current_dir(dir);
    if agent {
        c.env("SUDO_UID", AGENT_UID.to_string())
            .env("SUDO_GID", AGENT_UID.to_string())
            .env("SUDO_USER", "agent");
    }
    let out = c.output().expect("start sandbox");
    let audit_text = std::fs::read_to_string(&audit).unwrap_or_default();
    Run {
        status: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        audit: audit_text
            .lines()
            .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
            .collect(),
    }
}

/// `sandbox run -- sandbox-probe OPS...` with ops separated by `::`.
fn probe(dir: &Path, policy: Option<&str>, ops: &[&[&str]]) -> Run {
    let b = bins();
    let mut cmd: Vec<String> = vec![b.probe.display().to_string()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            cmd.push("::".into());
        }
        cmd.extend(op.iter().map(|s| (*s).to_owned()));
    }
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    run_in(dir, policy, dir, &refs)
}

/// Probe from the test process itself (outside any sandbox cgroup).
fn probe_outside(ops: &[&str]) -> String {
    let b = bins();
    let out = Command::new(&b.probe).args(ops).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.rsplit_once(" -> ")
        .map(|(_, r)| r.trim().to_owned())
        .unwrap_or(s)
}

fn copy_exec(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn file_deny_by_path_symlink_relative_and_subtree() {
    let d = workdir("file_deny");
    write(&d.join("secret.txt"), "s");
    write(&d.join("secrets/inner/key.pem"), "k");
    write(&d.join("allowed.txt"), "a");
    std::os::unix::fs::symlink(d.join("secret.txt"), d.join("link")).unwrap();
    std::os::unix::fs::symlink(d.join("secrets"), d.join("dirlink")).unwrap();
    let policy = format!(
        "files:\n  deny:\n    - {0}/secret.txt\n    - {0}/secrets\n",
        d.display()
    );
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["open", "secret.txt", "r"],
            &["open", "link", "r"],
            &["open", "secrets/../secret.txt", "r"],
            &["open", "dirlink/inner/key.pem", "r"],
            &["open", "secret.txt", "w"],
            &["open", "allowed.txt", "r"],
            &["open", "allowed.txt", "w"],
        ],
    );
    r.expect("open secret.txt r", "EACCES");
    r.expect("open link r", "EACCES");
    r.expect("open secrets/../secret.txt", "EACCES");
    r.expect("open dirlink/inner/key.pem", "EACCES");
    r.expect("open secret.txt w", "EACCES");
    r.expect("open allowed.txt r", "OK");
    r.expect("open allowed.txt w", "OK");
    // One record per deny, naming the canonical file and the rule.
    let secret = d.join("secret.txt").display().to_string();
    let recs = r.records("/file/path", &secret);
    assert_eq!(recs.len(), 4, "{:#?}", r.audit);
    let rec = recs[0];
    assert_eq!(rec["class"], "file_activity");
    assert_eq!(rec["decision"], "deny");
    assert_eq!(rec["policy"]["rule"], "files.deny[0]");
    assert_eq!(rec["file"]["access"], "read");
    assert_eq!(rec["actor"]["process"]["comm"], "sandbox-probe");
    assert_eq!(
        rec["actor"]["process"]["exe"],
        bins().probe.display().to_string()
    );
    assert!(rec["actor"]["process"]["pid"].as_u64().unwrap() > 1);
    assert!(rec["actor"]["process"]["ppid"].as_u64().unwrap() > 1);
    assert!(
        rec["actor"]["process"]["cgroup"]
            .as_str()
            .unwrap()
            .starts_with("/sandbox/run-")
    );
    assert!(rec["time"].as_str().unwrap().ends_with('Z'));
    let key = d.join("secrets/inner/key.pem").display().to_string();
    assert_eq!(
        r.one_record("/file/path", &key)["policy"]["rule"],
        "files.deny[1]"
    );
    assert_eq!(
        r.audit.len(),
        5,
        "no record for allowed operations: {:#?}",
        r.audit
    );
    assert!(
        r.stderr.contains("sandbox: denied open (read)"),
        "{}",
        r.stderr
    );
    // The audit file is owner-only.
    let mode = std::fs::metadata(d.join("audit.jsonl"))
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn file_created_after_load_and_hardlink_made_before() {
    let d = workdir("late_and_hardlink");
    write(&d.join("protected/old.key"), "k");
    // A hard link made before the policy loads, in a place no rule names.
    std::fs::hard_link(d.join("protected/old.key"), d.join("innocent-name")).unwrap();
    let policy = format!(
        "files:\n  deny:\n    - {0}/protected\n    - \"/**/*.late\"\n",
        d.display()
    );
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["open", "protected/new.key", "creat"],
            &["open", "later.late", "creat"],
            &["open", "innocent-name", "r"],
            &["open", "protected/old.key", "r"],
        ],
    );
    r.expect("open protected/new.key", "EACCES");
    r.expect("open later.late", "EACCES");
    r.expect("open innocent-name", "EACCES");
    r.expect("open protected/old.key", "EACCES");
    let link = d.join("innocent-name").display().to_string();
    assert_eq!(
        r.one_record("/file/path", &link)["policy"]["reason"],
        "inode_identity"
    );
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn child_cgroup_stays_confined() {
    let d = workdir("child_cgroup");
    write(&d.join("secret.txt"), "s");
    let policy = format!("files:\n  deny: [{}/secret.txt]\n", d.display());
    let r = probe(
        &d,
        Some(&policy),
        &[&["cgroup-child", "escape"], &["open", "secret.txt", "r"]],
    );
    r.expect("cgroup-child escape", "OK");
    r.expect("open secret.txt", "EACCES");
    let rec = r.one_record("/file/path", &d.join("secret.txt").display().to_string());
    let cg = rec["actor"]["process"]["cgroup"].as_str().unwrap();
    assert!(
        cg.starts_with("/sandbox/run-") && cg.ends_with("/escape"),
        "{cg}"
    );
}

/// An agent cannot undo its confinement: no bpf(), no signals or ptrace to sandbox, no
/// mounts, no moving itself out of its cgroup (its own sub-cgroups stay usable).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn self_protection() {
    let d = workdir("self_protection");
    std::fs::create_dir_all(d.join("mnt")).unwrap();
    let r = probe(
        &d,
        Some("name: guarded\n"),
        &[
            &["bpf"],
            &["kill-parent", "9"],
            &["kill-parent", "0"],
            &["ptrace-parent"],
            &["mount", "mnt"],
            &["cgroup-move", "/"],
            &["cgroup-child", "inner"],
        ],
    );
    r.expect("bpf", "EPERM");
    r.expect("kill-parent 9", "EPERM");
    r.expect("kill-parent 0", "OK");
    r.expect("ptrace-parent", "EPERM");
    r.expect("mount mnt", "EPERM");
    r.expect("cgroup-move /", "EACCES");
    r.expect("cgroup-child inner", "OK");
    // sandbox survived the SIGKILL attempt: it reported the probe's own exit status (1:
    // some operations failed) and wrote the records.
    assert_eq!(r.status, 1, "{}", r.stderr);
    let bpf = r.one_record("/activity", "bpf");
    assert_eq!(bpf["policy"]["rule"], "self_protection", "{bpf}");
    assert_eq!(bpf["bpf_cmd"], 0);
    let sig = r.one_record("/activity", "signal");
    assert_eq!(sig["signal"], 9);
    assert_eq!(
        sig["target"]["pid"], sig["actor"]["process"]["ppid"],
        "{sig}"
    );
    let pt = r.one_record("/activity", "ptrace");
    assert_eq!(pt["target"]["pid"], pt["actor"]["process"]["ppid"], "{pt}");
    r.one_record("/activity", "mount");
    let mv = r.one_record("/file/path", "/sys/fs/cgroup/cgroup.procs");
    assert_eq!(mv["policy"]["rule"], "self_protection", "{mv}");
    // The same calls from outside the sandbox are not ours to refuse.
    assert_eq!(probe_outside(&["bpf"]), "OK");
}

/// `sandbox attach` on an existing cgroup: its processes are confined from binding on;
/// SIGHUP swaps in an edited policy, a broken edit is refused and changes nothing;
/// SIGTERM ends enforcement and leaves the cgroup and its processes alone.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn attach_to_a_service_cgroup_and_reload() {
    use std::io::BufRead;
    use std::sync::mpsc;
    let d = workdir("attach");
    write(&d.join("one"), "1");
    write(&d.join("two"), "2");
    let cg = Path::new("/sys/fs/cgroup/svc-test");
    let _ = std::fs::create_dir(cg);
    let policy = d.join("policy.yaml");
    let deny = |f: &str| format!("name: svc\nfiles:\n  deny: [{}/{f}]\n", d.display());
    write(&policy, &deny("one"));
    let b = bins();
    let mut attach = Command::new(&b.sandbox)
        .arg("attach")
        .arg("--cgroup")
        .arg("svc-test")
        .arg("--policy")
        .arg(&policy)
        .arg("--audit-log")
        .arg(d.join("audit.jsonl"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let stderr = attach.stderr.take().unwrap();
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
        let deadline = Instant::now() + Duration::from_secs(120);
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
    // A process of the "service": joins the cgroup, then opens a file.
    let in_service = |file: &str| -> String {
        let out = Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec {} open {} r",
                cg.display(),
                b.probe.display(),
                d.join(file).display()
            ))
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).into_owned();
        s.rsplit_once(" -> ")
            .map_or(s.clone(), |(_, r)| r.trim().to_owned())
    };
    wait_line("enforcing policy 'svc'");
    assert_eq!(in_service("one"), "EACCES");
    assert_eq!(in_service("two"), "OK");
    // Reload with another policy.
    write(&policy, &deny("two"));
    // SAFETY: plain syscall on our child.
    unsafe { libc::kill(attach.id() as i32, libc::SIGHUP) };
    wait_line("reloaded");
    assert_eq!(in_service("one"), "OK");
    assert_eq!(in_service("two"), "EACCES");
    // Reloads leave no gap: a process opening the denied file in a loop all through three
    // reloads of the same policy is never let through. (Paced at one open per 2 ms: under
    // QEMU/TCG, patching a BPF trampoline while another vCPU runs through it at full speed
    // once crashed the guest kernel with an int3 oops, an emulation artefact.)
    let stop = d.join("stop-loop");
    let looper = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} open-loop {} {} 2000",
            cg.display(),
            b.probe.display(),
            d.join("two").display(),
            stop.display()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..3 {
        unsafe { libc::kill(attach.id() as i32, libc::SIGHUP) };
        wait_line("reloaded");
    }
    write(&stop, "");
    let out = looper.wait_with_output().unwrap();
    let counts = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(counts.contains("ALLOWED=0 "), "{counts}");
    assert!(!counts.contains("DENIED=0"), "{counts}");
    // A broken policy is refused with its position; the one in force stays.
    write(&policy, "files:\n  deny: [\n");
    unsafe { libc::kill(attach.id() as i32, libc::SIGHUP) };
    let refused = wait_line("reload refused");
    assert!(refused.contains("policy.yaml:"), "{refused}");
    assert_eq!(in_service("two"), "EACCES");
    // Stop: enforcement ends, the cgroup stays.
    unsafe { libc::kill(attach.id() as i32, libc::SIGTERM) };
    wait_line("no longer confined");
    assert!(attach.wait().unwrap().success());
    assert_eq!(in_service("two"), "OK");
    assert!(cg.exists());
    let audit: Vec<Value> = std::fs::read_to_string(d.join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let paths: Vec<&str> = audit
        .iter()
        .filter_map(|r| r["file"]["path"].as_str())
        .collect();
    let (one, two) = (
        d.join("one").display().to_string(),
        d.join("two").display().to_string(),
    );
    // one, two, then the loop's denials of two, then two once more.
    assert_eq!(paths[..2], [one.as_str(), two.as_str()], "{audit:#?}");
    assert!(paths.len() > 3, "{audit:#?}");
    assert!(paths[2..].iter().all(|p| *p == two), "{audit:#?}");
    // The processes have exited: move nothing, just remove the test cgroup.
    let _ = std::fs::remove_dir(cg);
}

/// `sandbox run [--policy P] -- probe ARGS` started in `dir`, output piped; returns once
/// the command is in its cgroup.
fn start_probe(dir: &Path, policy: Option<&Path>, args: &[&str]) -> std::process::Child {
    let b = bins();
    let mut c = Command::new(&b.sandbox);
    c.arg("run").arg("--audit-log").arg(dir.join("audit.jsonl"));
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
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&procs).map_or(true, |s| s.trim().is_empty()) {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Mounts a fresh tmpfs on `dir`; unmounted when the guard goes.
struct Tmpfs(std::ffi::CString);

impl Tmpfs {
    fn mount(dir: &Path) -> Self {
        let m = std::ffi::CString::new(dir.display().to_string()).unwrap();
        // SAFETY: plain mount(2) of a fresh tmpfs.
        let r = unsafe {
            libc::mount(
                c"late".as_ptr(),
                m.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "mount tmpfs on {}", dir.display());
        Self(m)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // SAFETY: plain umount(2).
        unsafe { libc::umount(self.0.as_ptr()) };
    }
}

/// A file system mounted (outside the sandbox) after the policy loaded: its files are
/// matched at their real place, not relative to the new file system's root.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn file_system_mounted_after_load() {
    let d = workdir("late_mount");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let policy = d.join("policy.yaml");
    write(
        &policy,
        &format!("files:\n  deny: [{}/mnt/secret]\n", d.display()),
    );
    let child = start_probe(
        &d,
        Some(&policy),
        &[
            "sleep",
            "4000",
            "::",
            "open",
            "mnt/secret",
            "r",
            "::",
            "open",
            "mnt/other",
            "r",
        ],
    );
    let tmpfs = Tmpfs::mount(&mnt);
    write(&mnt.join("secret"), "s");
    write(&mnt.join("other"), "o");
    let out = child.wait_with_output().unwrap();
    drop(tmpfs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("PROBE open mnt/secret r -> EACCES"),
        "{stdout}\n{stderr}"
    );
    assert!(stdout.contains("PROBE open mnt/other r -> OK"), "{stdout}");
    // The record names the file at its real place, and the rule.
    let audit = std::fs::read_to_string(d.join("audit.jsonl")).unwrap();
    let recs: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let secret = format!("{}/mnt/secret", d.display());
    assert_eq!(recs.len(), 1, "{audit}\n{stderr}");
    assert_eq!(recs[0]["file"]["path"], secret.as_str(), "{audit}");
    assert_eq!(recs[0]["policy"]["rule"], "files.deny[0]", "{audit}");
}

/// Until sandbox has placed a new mount, its files are denied (fail closed): here sandbox
/// is stopped (SIGSTOP) while the mount appears and the command opens a file on it.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_mount_not_yet_placed_is_denied() {
    let d = workdir("unplaced_mount");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let child = start_probe(&d, None, &["sleep", "3000", "::", "open", "mnt/file", "r"]);
    let pid = child.id() as i32;
    // SAFETY: plain syscall: stop sandbox before the mount appears.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let tmpfs = Tmpfs::mount(&mnt);
    write(&mnt.join("file"), "f");
    // The command opens the file at about 3 s, while sandbox is still stopped.
    std::thread::sleep(Duration::from_secs(6));
    // SAFETY: plain syscall.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let out = child.wait_with_output().unwrap();
    drop(tmpfs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("PROBE open mnt/file r -> EACCES"),
        "{stdout}\n{stderr}"
    );
    let audit = std::fs::read_to_string(d.join("audit.jsonl")).unwrap();
    assert!(audit.contains("\"reason\":\"unplaced_mount\""), "{audit}");
}

/// Hex of a path's bytes, for the probe's `open-hex`.
fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The aliases of the bypass list: /proc/self/root and /proc/self/cwd, `//` and `/./`,
/// openat2, open_by_handle_at, chroot, names with a newline or invalid UTF-8, a 25-deep
/// directory chain; and a path too long to resolve is denied (fail closed).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn file_aliases_and_odd_names() {
    use std::os::unix::ffi::OsStrExt;
    let d = workdir("aliases");
    write(&d.join("secret.txt"), "s");
    let newline = b"odd\nname".as_slice();
    let invalid = b"odd\xffname".as_slice();
    for n in [newline, invalid] {
        write(&d.join(std::ffi::OsStr::from_bytes(n)), "o");
    }
    let policy = format!(
        "files:\n  deny: ['{0}/secret.txt', '{0}/odd*', '**/deep-secret']\n",
        d.display()
    );
    let ds = d.display().to_string();
    let root_alias = format!("/proc/self/root{ds}/secret.txt");
    let slashes = format!("{ds}//secret.txt");
    let dots = format!("{ds}/./secret.txt");
    let hex_newline = hex(&[d.as_os_str().as_bytes(), b"/", newline].concat());
    let hex_invalid = hex(&[d.as_os_str().as_bytes(), b"/", invalid].concat());
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["open", &root_alias, "r"],
            &["open", "/proc/self/cwd/secret.txt", "r"],
            &["open", &slashes, "r"],
            &["open", &dots, "r"],
            &["open-hex", &hex_newline],
            &["open-hex", &hex_invalid],
            &["openat2", "secret.txt"],
            &["by-handle", "secret.txt"],
            &["chroot-open", &ds, "/secret.txt"],
            &["deep-open", "25", "100", "deep-secret"],
            &["deep-open", "25", "99", "deep-ok"],
            &["deep-open", "45", "98", "too-deep"],
        ],
    );
    for op in [
        format!("open {root_alias}"),
        "open /proc/self/cwd/secret.txt".into(),
        format!("open {slashes}"),
        format!("open {dots}"),
        format!("open-hex {hex_newline}"),
        format!("open-hex {hex_invalid}"),
        "openat2 secret.txt".into(),
        "by-handle secret.txt".into(),
        format!("chroot-open {ds} /secret.txt"),
        "deep-open 25 100 deep-secret".into(),
    ] {
        r.expect(&op, "EACCES");
    }
    // 45 levels of 99 bytes: past the kernel-side path buffer (4,096 bytes) a name cannot
    // be matched, so making it is denied rather than let through.
    r.expect("deep-open 45 98 too-deep", "MKDIR-EACCES");
    r.expect("deep-open 25 99 deep-ok", "OK");
    let secret = d.join("secret.txt").display().to_string();
    // Every alias of secret.txt is reported under its canonical path.
    assert_eq!(r.records("/file/path", &secret).len(), 7, "{:#?}", r.audit);
    let unresolved: Vec<_> = r
        .audit
        .iter()
        .filter(|x| x["policy"]["reason"] == "path_unresolved")
        .collect();
    assert_eq!(unresolved.len(), 1, "{:#?}", r.audit);
    // The invalid-UTF-8 name: its record carries the exact bytes and names the rule.
    let odd = r.one_record("/file/path_hex", &hex_invalid);
    assert_eq!(odd["policy"]["rule"], "files.deny[1]", "{odd}");
    let nl = r.one_record("/file/path", &format!("{ds}/odd\nname"));
    assert_eq!(nl["policy"]["rule"], "files.deny[1]", "{nl}");
}

/// io_uring does not go around the hooks: OPENAT and CONNECT submitted through a ring get
/// the decisions of open(2) and connect(2).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn io_uring_gets_the_same_decisions() {
    let d = workdir("io_uring");
    write(&d.join("secret"), "s");
    write(&d.join("public"), "p");
    let policy = format!("files:\n  deny: [{}/secret]\n", d.display());
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["uring-open", "secret"],
            &["uring-open", "public"],
            &["uring-connect", "169.254.169.254", "80"],
            &["uring-connect", "8.8.8.8", "80"],
        ],
    );
    r.expect("uring-open secret", "EACCES");
    r.expect("uring-open public", "OK");
    r.expect("uring-connect 169.254.169.254", "EPERM");
    r.expect("uring-connect 8.8.8.8", "ENETUNREACH");
    let rec = r.one_record("/file/path", &d.join("secret").display().to_string());
    assert_eq!(rec["policy"]["rule"], "files.deny[0]");
    r.one_record("/dst_endpoint/ip", "169.254.169.254");
}

/// Waits up to `secs` for `p` to exist.
fn wait_for(p: &Path, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !p.exists() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Fail closed when sandbox itself dies: a process the command left behind stays confined
/// after sandbox is SIGKILLed (the programs are pinned), and the next run cleans up.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn enforcement_outlives_a_killed_sandbox() {
    let d = workdir("outlives");
    write(&d.join("secret"), "s");
    let policy = d.join("policy.yaml");
    write(
        &policy,
        &format!("files:\n  deny: [{}/secret]\n", d.display()),
    );
    let b = bins();
    let result = d.join("result");
    let mut sandbox = Command::new(&b.sandbox)
        .arg("run")
        .arg("--audit-log")
        .arg(d.join("audit.jsonl"))
        .arg("--policy")
        .arg(&policy)
        .arg("--")
        .arg(&b.probe)
        .args(["orphan-open", "secret", "4000"])
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
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    sandbox.wait().unwrap();
    assert!(wait_for(&result, 60), "the orphan never reported");
    assert_eq!(std::fs::read_to_string(&result).unwrap(), "EACCES");
    // Its cgroup and pins are still there until the next run cleans up.
    let cg = Path::new("/sys/fs/cgroup/sandbox").join(format!("run-{pid}"));
    assert!(cg.exists());
    let pins = |pid: u32| -> Vec<PathBuf> {
        std::fs::read_dir("/sys/fs/bpf/sandbox")
            .map(|r| {
                r.flatten()
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name().is_some_and(|n| {
                            n.to_string_lossy().starts_with(&format!("run-{pid}-"))
                        })
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(pins(pid).len(), 1);
    let next = run_in(&d, None, &d, &["true"]);
    assert_eq!(next.status, 0, "{}", next.stderr);
    assert!(
        next.stderr.contains("cleaned up after a sandbox that died"),
        "{}",
        next.stderr
    );
    assert!(!cg.exists());
    assert!(pins(pid).is_empty());
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn exec_denied_by_path_symlink_and_hardlink() {
    let d = workdir("exec_deny");
    let b = bins();
    copy_exec(&b.probe, &d.join("denied-tool"));
    copy_exec(&b.probe, &d.join("allowed-tool"));
    std::os::unix::fs::symlink(d.join("denied-tool"), d.join("innocent")).unwrap();
    std::fs::hard_link(d.join("denied-tool"), d.join("hardlinked")).unwrap();
    let policy = format!("exec:\n  deny: [{}/denied-tool]\n", d.display());
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["exec", "./denied-tool"],
            &["exec", "./innocent"],
            &["exec", "./hardlinked"],
            &["exec", "./allowed-tool"],
            &["open", "denied-tool", "r"],
            &["exec-fd", "./denied-tool"],
            &["exec-fd", "./allowed-tool"],
            &["exec-procfd", "./denied-tool"],
            &["exec-memfd", "./denied-tool"],
        ],
    );
    r.expect("exec ./denied-tool", "EACCES");
    r.expect("exec ./innocent", "EACCES");
    r.expect("exec ./hardlinked", "EACCES");
    r.expect("exec ./allowed-tool", "OK");
    // No copying a denied binary (or `ld.so denied-tool`): it cannot be read either.
    r.expect("open denied-tool r", "EACCES");
    // execveat on an O_PATH descriptor is judged on the file; /proc/self/fd/N and a memfd
    // copy both need the file opened for reading first, which is refused.
    r.expect("exec-fd ./denied-tool", "EACCES");
    r.expect("exec-fd ./allowed-tool", "OK");
    r.expect("exec-procfd ./denied-tool", "OPEN-EACCES");
    r.expect("exec-memfd ./denied-tool", "READ-EACCES");
    let rec = &r.records("/class", "process_activity")[0];
    assert_eq!(
        rec["process"]["file"]["path"],
        d.join("denied-tool").display().to_string()
    );
    assert_eq!(rec["policy"]["rule"], "exec.deny[0]");
    assert_eq!(
        r.records("/class", "process_activity").len(),
        4,
        "{:#?}",
        r.audit
    );
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn connect_private_and_metadata_denied_public_allowed() {
    let d = workdir("connect");
    // The built-in default policy: block_private is on.
    let r = probe(
        &d,
        None,
        &[
            &["connect", "169.254.169.254", "80"],
            &["connect", "::ffff:169.254.169.254", "80"],
            &["connect", "::ffff:10.0.0.1", "443"],
            &["connect", "64:ff9b::a9fe:a9fe", "80"],
            &["connect", "2002:a9fe:a9fe::1", "80"],
            &["connect", "127.1.2.3", "80"],
            &["connect", "0.0.0.0", "80"],
            &["connect", "::0", "80"],
            &["connect", "::1", "80"],
            &["connect", "fe80::1", "80"],
            &["connect", "fd00::1", "80"],
            &["connect", "100.64.0.1", "80"],
            &["udp", "10.1.2.3", "53"],
            &["connect", "8.8.8.8", "53"],
        ],
    );
    for op in [
        "connect 169.254.169.254 ",
        "connect ::ffff:169.254.169.254 ",
        "connect ::ffff:10.0.0.1 ",
        "connect 64:ff9b::a9fe:a9fe ",
        "connect 2002:a9fe:a9fe::1 ",
        "connect 127.1.2.3 ",
        "connect 0.0.0.0 ",
        "connect ::0 ",
        "connect ::1 ",
        "connect fe80::1 ",
        "connect fd00::1 ",
        "connect 100.64.0.1 ",
    ] {
        r.expect(op, "EPERM");
    }
    // A public address is not ours to deny: the VM has no network, so the kernel's own
    // answer (no route) comes back, and no audit record is written.
    r.expect("connect 8.8.8.8", "ENETUNREACH");
    assert!(r.records("/dst_endpoint/ip", "8.8.8.8").is_empty());
    let rec = r.one_record("/dst_endpoint/ip", "169.254.169.254");
    assert_eq!(rec["dst_endpoint"]["port"], 80);
    assert_eq!(rec["class"], "network_activity");
    assert_eq!(rec["policy"]["rule"], "network.block_private");
    assert_eq!(rec["policy"]["rule_source"], "169.254.0.0/16");
    // The probe has exited by the time the record is read: the kernel supplied the exe.
    assert_eq!(
        rec["actor"]["process"]["exe"],
        bins().probe.display().to_string()
    );
    let mapped = r.one_record("/dst_endpoint/ip", "::ffff:10.0.0.1");
    assert_eq!(mapped["dst_endpoint"]["family"], "ipv6");
    assert_eq!(mapped["policy"]["rule_source"], "10.0.0.0/8");
}

/// Sends that carry a destination reach it without `connect`: unconnected UDP (`sendto`,
/// `sendmsg`, `sendmmsg`) and TCP Fast Open. They get the decision `connect` would get.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn sends_with_an_address_get_the_connect_decision() {
    let d = workdir("sends");
    let r = probe(
        &d,
        Some("network:\n  deny: ['198.51.0.0/16:9', '[2001:db8::/32]']\n"),
        &[
            &["udp", "169.254.169.254", "53"],
            &["sendmsg", "10.1.2.3", "53"],
            &["sendmmsg", "127.0.0.1", "9"],
            &["sendmmsg", "::1", "9"],
            &["tfo", "169.254.169.253", "80"],
            &["udp", "::ffff:10.9.9.9", "53"],
            &["udp", "2001:db8::1", "53"],
            &["sendmsg", "198.51.1.1", "9"],
            &["sendmsg", "198.51.1.1", "10"],
            &["udp", "8.8.8.8", "53"],
            &["tfo", "8.8.8.8", "80"],
        ],
    );
    for op in [
        "udp 169.254.169.254 ",
        "sendmsg 10.1.2.3 ",
        "sendmmsg 127.0.0.1 ",
        "sendmmsg ::1 ",
        "tfo 169.254.169.253 ",
        "udp ::ffff:10.9.9.9 ",
        "udp 2001:db8::1 ",
        "sendmsg 198.51.1.1 9",
    ] {
        r.expect(op, "EPERM");
    }
    // Not denied: the kernel's own answer (the VM has no route out).
    r.expect("sendmsg 198.51.1.1 10", "ENETUNREACH");
    r.expect("udp 8.8.8.8", "ENETUNREACH");
    r.expect("tfo 8.8.8.8", "ENETUNREACH");
    assert!(r.records("/dst_endpoint/ip", "8.8.8.8").is_empty());
    let rec = r.one_record("/dst_endpoint/ip", "169.254.169.254");
    assert_eq!(rec["activity"], "send", "{rec}");
    assert_eq!(rec["dst_endpoint"]["port"], 53);
    assert_eq!(rec["policy"]["rule"], "network.block_private");
    let tfo = r.one_record("/dst_endpoint/ip", "169.254.169.253");
    assert_eq!(tfo["activity"], "send", "{tfo}");
    assert_eq!(tfo["dst_endpoint"]["port"], 80);
    let rule = r.one_record("/dst_endpoint/ip", "2001:db8::1");
    assert_eq!(rule["policy"]["rule"], "network.deny[1]", "{rule}");
    // sendmmsg is checked per message and stops at the first refused one.
    assert_eq!(r.records("/dst_endpoint/ip", "127.0.0.1").len(), 1);
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn default_policy_denies_credentials_and_sudo() {
    let d = workdir("default_policy");
    write(&d.join(".ssh/id_rsa"), "key");
    write(&d.join(".aws/credentials"), "aws");
    write(&d.join("project/.env"), "TOKEN=x");
    write(&d.join("project/main.rs"), "fn main() {}");
    copy_exec(&bins().probe, &d.join("sudo"));
    let r = probe(
        &d,
        None,
        &[
            &["open", ".ssh/id_rsa", "r"],
            &["open", ".aws/credentials", "r"],
            &["open", "project/.env", "r"],
            &["open", "project/main.rs", "r"],
            &["exec", "./sudo"],
        ],
    );
    r.expect("open .ssh/id_rsa", "EACCES");
    r.expect("open .aws/credentials", "EACCES");
    r.expect("open project/.env", "EACCES");
    r.expect("open project/main.rs", "OK");
    r.expect("exec ./sudo", "EACCES");
    assert_eq!(
        r.one_record("/file/path", &d.join(".ssh/id_rsa").display().to_string())["policy"]["rule_source"],
        "~/.ssh"
    );
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn same_operations_allowed_outside_the_cgroup() {
    let d = workdir("outside");
    write(&d.join("secret.txt"), "s");
    let b = bins();
    copy_exec(&b.probe, &d.join("denied-tool"));
    let policy = format!(
        "files:\n  deny: [{0}/secret.txt]\nexec:\n  deny: [{0}/denied-tool]\n",
        d.display()
    );
    write(&d.join("policy.yaml"), &policy);
    // A confined process that stays alive while we act from outside.
    let mut held = Command::new(&b.sandbox)
        .args(["run", "--quiet", "--audit-log"])
        .arg(d.join("audit.jsonl"))
        .arg("--policy")
        .arg(d.join("policy.yaml"))
        .arg("--")
        .arg(&b.probe)
        .args(["sleep", "60000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let procs = PathBuf::from(format!(
        "/sys/fs/cgroup/sandbox/run-{}/cgroup.procs",
        held.id()
    ));
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::fs::read_to_string(&procs).map_or(true, |s| s.trim().is_empty()) {
        assert!(
            Instant::now() < deadline,
            "the confined process never appeared in {}",
            procs.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let outside = [
        probe_outside(&["open", d.join("secret.txt").to_str().unwrap(), "r"]),
        probe_outside(&["exec", d.join("denied-tool").to_str().unwrap()]),
        probe_outside(&["connect", "169.254.169.254", "80"]),
    ];
    // SIGTERM: sandbox forwards it to the command, then removes the cgroup.
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(held.id() as i32, libc::SIGTERM) };
    held.wait().unwrap();
    assert_eq!(outside[0], "OK");
    assert_eq!(outside[1], "OK");
    assert_eq!(
        outside[2], "ENETUNREACH",
        "outside the cgroup the kernel decides, not the sandbox"
    );
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn audit_mode_reports_without_denying() {
    let d = workdir("audit_mode");
    write(&d.join("secret.txt"), "s");
    let policy = format!(
        "mode: audit\nfiles:\n  deny: [{}/secret.txt]\n",
        d.display()
    );
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["open", "secret.txt", "r"],
            &["connect", "169.254.169.254", "80"],
        ],
    );
    r.expect("open secret.txt", "OK");
    r.expect("connect 169.254.169.254", "ENETUNREACH");
    let rec = r.one_record("/file/path", &d.join("secret.txt").display().to_string());
    assert_eq!(rec["decision"], "audit");
    assert_eq!(rec["disposition"], "audited");
    assert_eq!(
        r.one_record("/dst_endpoint/ip", "169.254.169.254")["decision"],
        "audit"
    );
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn exit_status_propagates_and_cgroup_is_removed() {
    let d = workdir("exit_status");
    let b = bins();
    let child = Command::new(&b.sandbox)
        .args(["run", "--quiet", "--audit-log"])
        .arg(d.join("audit.jsonl"))
        .args(["--", "/bin/sh", "-c", "sleep 1000 & exit 7"])
        .spawn()
        .unwrap();
    let child_id = child.id();
    let cgroup = PathBuf::from(format!("/sys/fs/cgroup/sandbox/run-{child_id}"));
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    // The background sleep was killed with the cgroup, and the cgroup is gone, and so are
    // the pinned programs.
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
    let pins = PathBuf::from("/sys/fs/bpf/sandbox");
    let left: Vec<_> = std::fs::read_dir(&pins)
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(
        !left
            .iter()
            .any(|p| p.to_string_lossy().contains(&format!("run-{}-", child_id))),
        "pins left behind: {left:?}"
    );
    let r = run_in(&d, None, &d, &["/bin/sh", "-c", "kill -TERM $$"]);
    assert_eq!(r.status, 128 + 15);
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn bad_policy_is_rejected_before_anything_runs() {
    let d = workdir("bad_policy");
    let marker = d.join("ran");
    let cmd = ["/bin/sh", "-c", "touch ran"];
    let r = run_in(&d, Some("files:\n  dney: [/etc]\n"), &d, &cmd);
    assert_eq!(r.status, 125);
    assert!(
        r.stderr
            .contains("policy.yaml:2:3: files: unknown field `dney`"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("did you mean `deny`?"), "{}", r.stderr);
    let r = run_in(&d, Some("network:\n  deny: [10.0.0.0/33]\n"), &d, &cmd);
    assert_eq!(r.status, 125);
    assert!(
        r.stderr.contains("network.deny[0]: '10.0.0.0/33'"),
        "{}",
        r.stderr
    );
    assert!(!marker.exists(), "the command ran despite a bad policy");
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn read_only_and_write_allowlist() {
    let d = workdir("write_rules");
    for f in ["ro/f", "rw/f", "ws/f", "other/f"] {
        write(&d.join(f), "x");
    }
    let policy = format!(
        "files:\n  workspace: {0}/ws\n  read_only: [{0}/ro]\n  write: [{0}/rw]\n",
        d.display()
    );
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["open", "ro/f", "r"],
            &["open", "ro/f", "w"],
            &["open", "rw/f", "w"],
            &["open", "rw/new", "creat"],
            &["open", "ws/f", "rw"],
            &["open", "other/f", "w"],
            &["open", "other/f", "r"],
            &["open", "/dev/null", "w"],
        ],
    );
    r.expect("open ro/f r", "OK");
    r.expect("open ro/f w", "EACCES");
    r.expect("open rw/f w", "OK");
    r.expect("open rw/new creat", "OK");
    r.expect("open ws/f rw", "OK");
    r.expect("open other/f w", "EACCES");
    r.expect("open other/f r", "OK");
    r.expect("open /dev/null w", "OK");
    let ro = r.one_record("/file/path", &d.join("ro/f").display().to_string());
    assert_eq!(ro["policy"]["rule"], "files.read_only[0]");
    assert_eq!(ro["file"]["access"], "write");
    let other = r.one_record("/file/path", &d.join("other/f").display().to_string());
    assert_eq!(other["policy"]["reason"], "not_in_write_allowlist");
    assert_eq!(other["policy"]["rule"], "files.write");
    // Writing to a pipe through /proc/self/fd is not a file write: stdout keeps working.
    let r = run_in(
        &d,
        Some(&policy),
        &d,
        &["/bin/sh", "-c", "echo through-pipe > /dev/stdout"],
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(r.stdout.contains("through-pipe"));
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn read_allowlist() {
    let d = workdir("read_rules");
    write(&d.join("pub/f"), "x");
    write(&d.join("priv/f"), "x");
    write(&d.join("ws/f"), "x");
    let probe_dir = bins().probe.parent().unwrap().display().to_string();
    // The probe and its libraries must stay readable for it to start at all.
    let policy = format!(
        "files:\n  workspace: {0}/ws\n  read: [{0}/pub, /lib, /lib64, /usr/lib, /etc, {probe_dir}]\n",
        d.display()
    );
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["open", "pub/f", "r"],
            &["open", "ws/f", "r"],
            &["open", "priv/f", "r"],
            &["open", "priv", "r"],
        ],
    );
    r.expect("open pub/f r", "OK");
    r.expect("open ws/f r", "OK");
    r.expect("open priv/f r", "EACCES");
    r.expect("open priv r", "OK");
    let rec = r.one_record("/file/path", &d.join("priv/f").display().to_string());
    assert_eq!(rec["policy"]["reason"], "not_in_read_allowlist");
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn glob_rules_in_the_kernel() {
    let d = workdir("globs");
    for f in [
        "app/.env.local",
        "app/.envrc",
        "app/env",
        ".ssh/id_ed25519",
        "data/x/secrets/a/b",
        "data/x/y/secrets/a",
        "data/x/public/a",
    ] {
        write(&d.join(f), "x");
    }
    let policy = format!(
        "files:\n  workspace: {0}\n  deny: ['**/.env*', '~/.ssh/**', '{0}/data/*/secrets/**']\n",
        d.display()
    );
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["open", "app/.env.local", "r"],
            &["open", "app/.envrc", "r"],
            &["open", "app/env", "r"],
            &["open", ".ssh/id_ed25519", "r"],
            &["open", ".ssh", "r"],
            &["open", "data/x/secrets/a/b", "r"],
            &["open", "data/x/y/secrets/a", "r"],
            &["open", "data/x/public/a", "r"],
        ],
    );
    r.expect("open app/.env.local", "EACCES");
    r.expect("open app/.envrc", "EACCES");
    r.expect("open app/env", "OK");
    r.expect("open .ssh/id_ed25519", "EACCES");
    r.expect("open .ssh r", "OK");
    r.expect("open data/x/secrets/a/b", "EACCES");
    r.expect("open data/x/y/secrets/a", "OK");
    r.expect("open data/x/public/a", "OK");
    let rec = r.one_record(
        "/file/path",
        &d.join("data/x/secrets/a/b").display().to_string(),
    );
    assert_eq!(rec["policy"]["rule"], "files.deny[2]");
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn network_allow_punches_through_with_ports_and_ipv6_rules() {
    let d = workdir("net_rules");
    // A real listener on loopback, outside the sandbox.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let policy = format!(
        "network:\n  allow: ['127.0.0.1:{port}']\n  deny: ['93.184.216.0/24:80-90', '[2001:db8::/32]:443']\n"
    );
    let p = port.to_string();
    let other = (port + 1).to_string();
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["connect", "127.0.0.1", &p],
            &["connect", "127.0.0.1", &other],
            &["connect", "93.184.216.34", "85"],
            &["connect", "93.184.216.34", "443"],
            &["connect", "2001:db8::1", "443"],
            &["connect", "2001:db8::1", "80"],
        ],
    );
    r.expect(&format!("connect 127.0.0.1 {p}"), "OK");
    r.expect(&format!("connect 127.0.0.1 {other}"), "EPERM");
    r.expect("connect 93.184.216.34 85", "EPERM");
    r.expect("connect 93.184.216.34 443", "ENETUNREACH");
    r.expect("connect 2001:db8::1 443", "EPERM");
    r.expect("connect 2001:db8::1 80", "ENETUNREACH");
    let rec = r.one_record("/dst_endpoint/ip", "93.184.216.34");
    assert_eq!(rec["policy"]["rule"], "network.deny[0]");
    assert_eq!(
        r.one_record("/dst_endpoint/ip", "2001:db8::1")["policy"]["rule"],
        "network.deny[1]"
    );
    drop(listener);
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn exec_allowlist_and_setuid_denial() {
    let d = workdir("exec_allow");
    let b = bins();
    copy_exec(&b.probe, &d.join("ok-tool"));
    copy_exec(&b.probe, &d.join("other-tool"));
    copy_exec(&b.probe, &d.join("suid-tool"));
    std::fs::set_permissions(d.join("suid-tool"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let policy = format!(
        "exec:\n  allow: [{}, {}/ok-tool]\n",
        b.probe.display(),
        d.display()
    );
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["exec", "./ok-tool"],
            &["exec", "./other-tool"],
            &["exec-memfd", "./ok-tool"],
            &["exec-fd", "./ok-tool"],
        ],
    );
    r.expect("exec ./ok-tool", "OK");
    r.expect("exec ./other-tool", "EACCES");
    // A memfd has no path on any mounted file system: never in an allowlist, so an allowed
    // binary's bytes (or a downloaded one) cannot be run from memory.
    r.expect("exec-memfd ./ok-tool", "EACCES");
    r.expect("exec-fd ./ok-tool", "OK");
    let rec = &r.records("/class", "process_activity")[0];
    assert_eq!(rec["policy"]["reason"], "not_in_exec_allowlist");
    let r = probe(
        &d,
        Some("exec:\n  allow_privileged: false\n"),
        &[&["exec", "./suid-tool"], &["exec", "./ok-tool"]],
    );
    r.expect("exec ./suid-tool", "EACCES");
    r.expect("exec ./ok-tool", "OK");
    assert_eq!(
        r.records("/class", "process_activity")[0]["policy"]["reason"],
        "privileged_binary"
    );
}

/// `sandbox explain` computes decisions from the same compiled form the kernel gets; on
/// generated paths, addresses and binaries the two must agree.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn explain_agrees_with_the_kernel() {
    let d = workdir("explain_agrees");
    let b = bins();
    let policy = format!(
        "files:\n  workspace: {0}/ws\n  deny: ['{0}/a/secret', '**/*.key', '{0}/b/*/private/**']\n  read_only: ['{0}/ro', '{0}/a/*.conf']\n  \
         write: ['{0}/a', '{0}/tmp*']\nexec:\n  deny: ['{0}/bin/bad*', 'evil']\nnetwork:\n  allow: ['10.9.0.0/16:443']\n  deny: ['8.8.0.0/16:53']\n",
        d.display()
    );
    write(&d.join("policy.yaml"), &policy);
    // Generated paths: every combination of a few components that exercise each rule.
    let dirs = [
        "a",
        "b/x",
        "b/x/private",
        "b/x/y/private",
        "ro",
        "ws",
        "tmp1",
        "c",
        "a/secret",
    ];
    let names = [
        "f", "x.key", "secrets", "app.conf", ".hidden", "a b", "k.keys",
    ];
    let mut paths = Vec::new();
    for dir in dirs {
        for name in names {
            let p = d.join(dir).join(name);
            write(&p, "x");
            paths.push(p);
        }
    }
    let explain = |args: &[&str]| -> bool {
        let out = Command::new(&b.sandbox)
            .arg("explain")
            .arg("--policy")
            .arg(d.join("policy.yaml"))
            .args(args)
            .output()
            .unwrap();
        match out.status.code() {
            Some(0) => true,
            Some(1) => false,
            other => panic!(
                "explain {args:?}: status {other:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    };
    let mut ops: Vec<Vec<String>> = Vec::new();
    let mut expected = Vec::new();
    for p in &paths {
        let ps = p.display().to_string();
        for (mode, verb) in [("r", "read"), ("w", "write")] {
            expected.push((format!("open {ps} {mode}"), explain(&[verb, &ps])));
            ops.push(vec!["open".into(), ps.clone(), mode.into()]);
        }
    }
    for name in ["bin/bad-tool", "bin/good-tool", "bin/evil", "evil-not"] {
        let p = d.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        copy_exec(&b.probe, &p);
        let ps = p.display().to_string();
        expected.push((format!("exec {ps}"), explain(&["exec", &ps])));
        ops.push(vec!["exec".into(), ps]);
    }
    for (addr, port) in [
        ("10.9.1.1", "443"),
        ("10.9.1.1", "80"),
        ("8.8.8.8", "53"),
        ("8.8.8.8", "443"),
        ("::ffff:10.9.0.1", "443"),
        ("fd00::1", "443"),
    ] {
        expected.push((
            format!("connect {addr} {port}"),
            explain(&["connect", addr, port]),
        ));
        ops.push(vec!["connect".into(), addr.into(), port.into()]);
    }
    let op_refs: Vec<Vec<&str>> = ops
        .iter()
        .map(|o| o.iter().map(String::as_str).collect())
        .collect();
    let op_slices: Vec<&[&str]> = op_refs.iter().map(Vec::as_slice).collect();
    let r = probe(&d, Some(&policy), &op_slices);
    let mut denied = 0;
    for (op, allow) in &expected {
        let got = r.result(op);
        let kernel_denied = got == "EACCES" || got == "EPERM";
        assert_eq!(
            !kernel_denied,
            *allow,
            "explain says {} but the kernel answered {got} for '{op}'",
            if *allow { "allow" } else { "deny" }
        );
        denied += usize::from(kernel_denied);
    }
    assert!(
        denied > 20 && denied < expected.len() - 20,
        "the corpus must exercise both outcomes ({denied} of {})",
        expected.len()
    );
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn allow_hosts_and_dns_resolvers() {
    let d = workdir("allow_hosts");
    // Name resolution in the guest: names from /etc/hosts, one nameserver for allow_dns
    // (nothing answers there: the DNS lookups fail and /etc/hosts is what counts).
    let _etc = Resolution::set(
        "93.184.216.34 example.test\n10.1.1.1 internal.test\n",
        "10.0.0.53",
    );
    let policy = "network:\n  allow_hosts: ['example.test:443', internal.test]\n";
    let r = probe(
        &d,
        Some(policy),
        &[
            &["connect", "93.184.216.34", "443"],
            &["connect", "93.184.216.34", "80"],
            &["connect", "93.184.216.35", "443"],
            &["connect", "10.1.1.1", "443"],
            &["udp", "10.0.0.53", "53"],
            &["connect", "10.0.0.53", "80"],
        ],
    );
    r.expect("connect 93.184.216.34 443", "ENETUNREACH");
    r.expect("connect 93.184.216.34 80", "EPERM");
    r.expect("connect 93.184.216.35 443", "EPERM");
    // A name that resolves to a private address does not open it.
    r.expect("connect 10.1.1.1 443", "EPERM");
    assert!(
        r.stderr
            .contains("internal.test resolves to 10.1.1.1, a private address: not allowed"),
        "{}",
        r.stderr
    );
    // The host's resolver is reachable for DNS, and only for DNS.
    r.expect("udp 10.0.0.53 53", "ENETUNREACH");
    r.expect("connect 10.0.0.53 80", "EPERM");
    let rec = &r.records("/dst_endpoint/ip", "93.184.216.35")[0];
    assert_eq!(rec["policy"]["rule"], "network.default");
    assert_eq!(rec["policy"]["reason"], "not_in_network_allowlist");
}

/// /etc/hosts, /etc/nsswitch.conf (files only: libc asks no DNS server) and
/// /etc/resolv.conf for one test; the old files come back when it ends, panic or not.
struct Resolution(Vec<(&'static str, Option<String>)>);

impl Resolution {
    fn set(hosts: &str, nameserver: &str) -> Self {
        let files = ["/etc/hosts", "/etc/nsswitch.conf", "/etc/resolv.conf"];
        let saved = files
            .iter()
            .map(|f| (*f, std::fs::read_to_string(f).ok()))
            .collect();
        std::fs::write("/etc/hosts", hosts).unwrap();
        std::fs::write("/etc/nsswitch.conf", "hosts: files\n").unwrap();
        std::fs::write("/etc/resolv.conf", format!("nameserver {nameserver}\n")).unwrap();
        Self(saved)
    }
}

impl Drop for Resolution {
    fn drop(&mut self) {
        for (f, text) in &self.0 {
            match text {
                Some(t) => drop(std::fs::write(f, t)),
                None => drop(std::fs::remove_file(f)),
            }
        }
    }
}

/// A DNS server on 127.0.0.1:53 (outside the sandbox: the loader asks it) whose answer for
/// every A question is `answers[n]` for the n-th question (the last one from then on).
/// AAAA questions get an empty answer.
struct DnsServer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    questions: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl DnsServer {
    fn start(answers: Vec<([u8; 4], u32)>) -> Self {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        let sock = std::net::UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let questions = Arc::new(AtomicUsize::new(0));
        let (s, q) = (stop.clone(), questions.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !s.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                // Header, then the question: labels, type, class.
                let mut end = 12;
                while end < n && buf[end] != 0 {
                    end += 1 + usize::from(buf[end]);
                }
                let qtype = u16::from_be_bytes([buf[end + 1], buf[end + 2]]);
                let question = &buf[12..end + 5];
                let mut m = buf[..2].to_vec();
                m.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0]);
                m.extend_from_slice(question);
                if qtype == 1 {
                    let i = q.fetch_add(1, Ordering::Relaxed).min(answers.len() - 1);
                    let (addr, ttl) = answers[i];
                    m[7] = 1;
                    m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
                    m.extend_from_slice(&ttl.to_be_bytes());
                    m.extend_from_slice(&[0, 4]);
                    m.extend_from_slice(&addr);
                }
                let _ = sock.send_to(&m, from);
            }
        });
        Self { stop, questions }
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `allow_hosts` follows DNS: an address is allowed while the TTL of its answer lasts; when
/// the name moves, the old address is refused once its TTL is over and the new one allowed.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn allow_hosts_follow_dns_ttl() {
    let d = workdir("allow_hosts_ttl");
    let _etc = Resolution::set("", "127.0.0.1");
    let dns = DnsServer::start(vec![([93, 184, 216, 34], 3), ([93, 184, 216, 40], 60)]);
    let r = probe(
        &d,
        Some("network:\n  allow_hosts: [moving.test]\n"),
        &[
            &["connect", "93.184.216.34", "443"],
            &["connect", "93.184.216.40", "443"],
            &["sleep", "6000"],
            &["connect", "93.184.216.34", "444"],
            &["connect", "93.184.216.40", "444"],
        ],
    );
    // First answer: .34 for 3 s.
    r.expect("connect 93.184.216.34 443", "ENETUNREACH");
    r.expect("connect 93.184.216.40 443", "EPERM");
    // Asked again when the TTL ran out: the name moved to .40.
    r.expect("connect 93.184.216.34 444", "EPERM");
    r.expect("connect 93.184.216.40 444", "ENETUNREACH");
    let questions = dns.questions.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        (2..=4).contains(&questions),
        "one lookup at start, one per TTL after: {questions} A questions\n{}",
        r.stderr
    );
    for ip in ["93.184.216.40", "93.184.216.34"] {
        let rec = r.one_record("/dst_endpoint/ip", ip);
        assert_eq!(rec["policy"]["rule"], "network.default", "{rec}");
        assert_eq!(rec["disposition"], "blocked", "{rec}");
    }
}

/// Writes are more than opens for writing: creating and removing names in a read-only area
/// are denied too, and a denied `creat` leaves no empty file behind.
/// A protected file cannot be given another name (link), moved out from under its rule
/// (rename) or changed through its attributes (truncate, chmod, chown); nothing can be
/// linked or renamed into a read-only area. The same operations work where writes are
/// allowed.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn links_renames_and_attributes_are_writes() {
    let d = workdir("links_renames");
    write(&d.join("secret/key"), "k");
    write(&d.join("ro/existing"), "x");
    write(&d.join("free/f"), "x");
    write(&d.join("free/x"), "x");
    let policy = format!(
        "files:\n  read_only: [{0}/ro]\n  deny: [{0}/secret]\n",
        d.display()
    );
    let denied: &[&[&str]] = &[
        &["link", "secret/key", "free/k1"],
        &["link", "ro/existing", "free/r1"],
        &["link", "free/f", "ro/l1"],
        &["rename", "secret/key", "free/k2"],
        &["rename", "ro/existing", "free/r2"],
        &["rename", "free/x", "ro/x"],
        &["truncate", "ro/existing"],
        &["chmod", "ro/existing"],
        &["chown", "ro/existing"],
        &["utimes", "ro/existing"],
        &["setxattr", "ro/existing"],
        &["setacl", "ro/existing"],
        &["truncate", "secret/key"],
    ];
    let allowed: &[&[&str]] = &[
        &["link", "free/f", "free/f2"],
        &["rename", "free/f2", "free/f3"],
        &["truncate", "free/f3"],
        &["chmod", "free/f"],
        &["chown", "free/f"],
        &["utimes", "free/f"],
        &["setxattr", "free/f"],
        &["setacl", "free/f"],
    ];
    let ops: Vec<&[&str]> = denied.iter().chain(allowed).copied().collect();
    let r = probe(&d, Some(&policy), &ops);
    for op in denied {
        r.expect(&op.join(" "), "EACCES");
    }
    for op in allowed {
        r.expect(&op.join(" "), "OK");
    }
    assert_eq!(std::fs::read_to_string(d.join("ro/existing")).unwrap(), "x");
    assert_eq!(std::fs::read_to_string(d.join("secret/key")).unwrap(), "k");
    assert!(!d.join("free/k1").exists() && !d.join("free/r2").exists());
    let key = d.join("secret/key").display().to_string();
    let recs = r.records("/file/path", &key);
    let activities: Vec<&str> = recs.iter().filter_map(|r| r["activity"].as_str()).collect();
    assert_eq!(activities, ["link", "rename", "truncate"], "{recs:#?}");
    assert!(recs.iter().all(|r| r["policy"]["rule"] == "files.deny[0]"));
    let into_ro = r.one_record("/file/path", &d.join("ro/x").display().to_string());
    assert_eq!(into_ro["activity"], "rename");
    assert_eq!(into_ro["policy"]["rule"], "files.read_only[0]");
    let chmod = r.records("/activity", "chmod");
    assert_eq!(chmod.len(), 1, "{chmod:#?}");
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn name_changes_are_writes() {
    let d = workdir("name_changes");
    write(&d.join("ro/existing"), "x");
    std::fs::create_dir_all(d.join("ro/subdir")).unwrap();
    write(&d.join("secret/key"), "k");
    write(&d.join("free/f"), "x");
    let policy = format!(
        "files:\n  read_only: [{0}/ro]\n  deny: [{0}/secret]\n",
        d.display()
    );
    let r = probe(
        &d,
        Some(&policy),
        &[
            &["open", "ro/new", "creat"],
            &["mkdir", "ro/newdir"],
            &["symlink", "/etc/passwd", "ro/link"],
            &["unlink", "ro/existing"],
            &["rmdir", "ro/subdir"],
            &["link", "free/f", "free/f-link"],
            &["rename", "free/f-link", "free/g"],
            &["mkdir", "free/newdir"],
            &["unlink", "free/g"],
        ],
    );
    for op in [
        "open ro/new creat",
        "mkdir ro/newdir",
        "symlink /etc/passwd ro/link",
        "unlink ro/existing",
        "rmdir ro/subdir",
    ] {
        r.expect(op, "EACCES");
    }
    for op in [
        "link free/f free/f-link",
        "rename free/f-link free/g",
        "mkdir free/newdir",
        "unlink free/g",
    ] {
        r.expect(op, "OK");
    }
    assert!(
        !d.join("ro/new").exists(),
        "a denied creat left a file behind"
    );
    assert!(d.join("ro/existing").exists());
    let rec = r.one_record("/file/path", &d.join("ro/newdir").display().to_string());
    assert_eq!(rec["activity"], "mkdir");
    assert_eq!(rec["policy"]["rule"], "files.read_only[0]");
}

// ---- The boundary: nothing outside the sandbox does the agent's work for it. Every case
// runs the command as the non-root agent user (`sudo sandbox run`) and first shows the
// same operation working outside the sandbox, as that user.

/// The probe as the agent user, outside any sandbox; the answer of each operation.
fn probe_outside_as_agent(ops: &[&[&str]]) -> Vec<String> {
    let b = bins();
    let mut args: Vec<&str> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            args.push("::");
        }
        args.extend_from_slice(op);
    }
    let out = Command::new(&b.probe)
        .args(&args)
        .uid(AGENT_UID)
        .gid(AGENT_UID)
        .current_dir("/")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(" -> ").map(|(_, r)| r.to_owned()))
        .collect()
}

/// `sandbox run` (as the agent user) of the probe with `ops`.
fn probe_as_agent(dir: &Path, policy: Option<&str>, ops: &[&[&str]]) -> Run {
    let b = bins();
    let mut cmd: Vec<String> = vec![b.probe.display().to_string()];
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            cmd.push("::".into());
        }
        cmd.extend(op.iter().map(|s| (*s).to_owned()));
    }
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    run_as_agent(dir, policy, &refs)
}

/// A directory the agent user owns.
fn agent_dir(name: &str) -> PathBuf {
    let d = workdir(name);
    std::os::unix::fs::chown(&d, Some(AGENT_UID), Some(AGENT_UID)).unwrap();
    std::fs::create_dir_all("/home/agent").unwrap();
    std::os::unix::fs::chown("/home/agent", Some(AGENT_UID), Some(AGENT_UID)).unwrap();
    d
}

fn num_records<'a>(r: &'a Run, pointer: &str, value: u64) -> Vec<&'a Value> {
    r.audit
        .iter()
        .filter(|v| v.pointer(pointer).and_then(Value::as_u64) == Some(value))
        .collect()
}

/// Servers outside the sandbox, accepting and reading until the test ends.
fn serve_unix(path: &str) {
    use std::os::linux::net::SocketAddrExt;
    let addr = match path.strip_prefix('@') {
        Some(n) => std::os::unix::net::SocketAddr::from_abstract_name(n.as_bytes()).unwrap(),
        None => {
            let _ = std::fs::remove_file(path);
            std::os::unix::net::SocketAddr::from_pathname(path).unwrap()
        }
    };
    let l = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    if !path.starts_with('@') {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    std::thread::spawn(move || {
        for c in l.incoming() {
            drop(c);
        }
    });
}

fn serve_unix_dgram(path: &str) {
    let _ = std::fs::remove_file(path);
    let s = std::os::unix::net::UnixDatagram::bind(path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::thread::spawn(move || {
        let mut b = [0u8; 64];
        while s.recv(&mut b).is_ok() {}
    });
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn unix_sockets_outside_the_sandbox() {
    let d = agent_dir("unix");
    let p = |n: &str| d.join(n).display().to_string();
    let (srv, dgram, allowed, secret) = (
        p("srv.sock"),
        p("dgram.sock"),
        p("ok.sock"),
        p("secret.sock"),
    );
    for s in [&srv, &allowed, &secret] {
        serve_unix(s);
    }
    serve_unix_dgram(&dgram);
    serve_unix("@sandbox-kt-outside");
    serve_unix("@sandbox-kt-allowed");
    let inner = p("inner.sock");
    let ops: &[&[&str]] = &[
        &["unix-connect", &srv],
        &["unix-send", &dgram],
        &["unix-connect", "@sandbox-kt-outside"],
        &["unix-connect", &allowed],
        &["unix-connect", "@sandbox-kt-allowed"],
        &["unix-connect", &secret],
        &["unix-self", &inner],
        &["unix-self", "@sandbox-kt-inner"],
    ];
    // Outside, as the same user: every peer answers.
    assert_eq!(
        probe_outside_as_agent(ops),
        vec!["OK"; 8],
        "outside the sandbox"
    );
    let policy = format!(
        "files:\n  deny: [{secret}]\nnetwork:\n  unix: [{allowed}, '@sandbox-kt-allowed', {secret}]\n"
    );
    let r = probe_as_agent(&d, Some(&policy), ops);
    r.expect(&format!("unix-connect {srv}"), "EACCES");
    r.expect(&format!("unix-send {dgram}"), "EACCES");
    r.expect("unix-connect @sandbox-kt-outside", "EACCES");
    r.expect(&format!("unix-connect {allowed}"), "OK");
    r.expect("unix-connect @sandbox-kt-allowed", "OK");
    r.expect(&format!("unix-connect {secret}"), "EACCES");
    // Peers inside the same sandbox keep working.
    r.expect(&format!("unix-self {inner}"), "OK");
    r.expect("unix-self @sandbox-kt-inner", "OK");
    for (path, activity, rule, reason) in [
        (srv.as_str(), "connect", "network.unix", "outside_scope"),
        (dgram.as_str(), "send", "network.unix", "outside_scope"),
        (
            "@sandbox-kt-outside",
            "connect",
            "network.unix",
            "outside_scope",
        ),
        (secret.as_str(), "connect", "files.deny[0]", "rule"),
    ] {
        let rec = r.one_record("/dst_endpoint/path", path);
        assert_eq!(rec["activity"], activity, "{rec:#}");
        assert_eq!(rec["dst_endpoint"]["family"], "unix", "{rec:#}");
        assert_eq!(rec["policy"]["rule"], rule, "{rec:#}");
        assert_eq!(rec["policy"]["reason"], reason, "{rec:#}");
        assert_eq!(rec["actor"]["process"]["uid"], AGENT_UID, "{rec:#}");
    }
    // The listening peer is named where the kernel knows it.
    let rec = r.one_record("/dst_endpoint/path", &srv);
    assert_eq!(rec["dst_endpoint"]["pid"], std::process::id(), "{rec:#}");
    assert_eq!(r.audit.len(), 4, "{:#?}", r.audit);

    // The built-in policy refuses the same peers.
    let r = probe_as_agent(&d, None, &ops[..3]);
    r.expect(&format!("unix-connect {srv}"), "EACCES");
    r.expect(&format!("unix-send {dgram}"), "EACCES");
    r.expect("unix-connect @sandbox-kt-outside", "EACCES");
}

/// First readable address of a process's mappings (hex).
fn readable_addr(pid: u32) -> String {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .find(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|m| m.starts_with('r'))
        })
        .and_then(|l| l.split('-').next())
        .unwrap()
        .to_owned()
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn other_processes_of_the_same_user() {
    let d = agent_dir("procs");
    // Debian ships Yama's ptrace_scope at 0: any process may trace its user's others.
    std::fs::write("/proc/sys/kernel/yama/ptrace_scope", "0").unwrap();
    let b = bins();
    let mut target = Command::new(&b.probe)
        .args(["sleep", "600000"])
        .uid(AGENT_UID)
        .gid(AGENT_UID)
        .env("API_TOKEN", "secret")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    let addr = readable_addr(target.id());
    let ops: &[&[&str]] = &[
        &["ptrace", &pid],
        &["mem", &pid],
        &["environ", &pid],
        &["vm-read", &pid, &addr],
        &["getfd", &pid],
        &["setnice", &pid],
        &["kill", &pid, "0"],
    ];
    assert_eq!(
        probe_outside_as_agent(ops),
        vec!["OK"; 7],
        "outside the sandbox"
    );
    let r = probe_as_agent(&d, Some("version: 1\n"), ops);
    r.expect(&format!("ptrace {pid}"), "EPERM");
    r.expect(&format!("mem {pid}"), "EACCES");
    r.expect(&format!("environ {pid}"), "EACCES");
    r.expect(&format!("vm-read {pid}"), "EPERM");
    r.expect(&format!("getfd {pid}"), "EPERM");
    r.expect(&format!("setnice {pid}"), "EPERM");
    // Signal 0 only asks whether the process exists.
    r.expect(&format!("kill {pid} 0"), "OK");
    let target_pid = u64::from(target.id());
    let recs = num_records(&r, "/target/pid", target_pid);
    let activities: Vec<&str> = recs.iter().filter_map(|v| v["activity"].as_str()).collect();
    assert_eq!(
        activities.iter().filter(|a| **a == "ptrace").count(),
        5,
        "one ptrace record per route: {:#?}",
        r.audit
    );
    assert!(activities.contains(&"task"), "{activities:?}");
    for rec in &recs {
        assert_eq!(rec["policy"]["reason"], "outside_scope", "{rec:#}");
    }
    // A signal: denied, recorded, and the target still runs.
    let r = probe_as_agent(&d, Some("version: 1\n"), &[&["kill", &pid, "9"]]);
    r.expect(&format!("kill {pid} 9"), "EPERM");
    let rec = &num_records(&r, "/target/pid", target_pid)[0];
    assert_eq!(rec["activity"], "signal", "{rec:#}");
    assert_eq!(rec["signal"], 9, "{rec:#}");
    assert!(
        target.try_wait().unwrap().is_none(),
        "the target was killed"
    );
    // Inside the sandbox, processes reach each other as before.
    let script = format!(
        "{p} sleep 600000 & c=$!; {p} ptrace $c :: environ $c :: setnice $c :: kill $c 15",
        p = b.probe.display()
    );
    let r = run_as_agent(&d, Some("version: 1\n"), &["/bin/sh", "-c", &script]);
    for op in ["ptrace", "environ", "setnice", "kill"] {
        assert!(
            r.stdout
                .lines()
                .any(|l| l.starts_with(&format!("PROBE {op} ")) && l.ends_with("-> OK")),
            "{op} inside the sandbox:\n{}\n{}",
            r.stdout,
            r.stderr
        );
    }
    target.kill().unwrap();
    let _ = target.wait();
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn terminal_input_cannot_be_injected() {
    let d = agent_dir("tty");
    // Kernels with CONFIG_LEGACY_TIOCSTI=n refuse TIOCSTI to everyone: turn it on so the
    // route is open without the sandbox.
    let _ = std::fs::write("/proc/sys/dev/tty/legacy_tiocsti", "1");
    // Outside: a process queues input into its own controlling terminal.
    assert_eq!(probe_outside_as_agent(&[&["tiocsti-own"]]), vec!["OK"]);
    // Inside, the same: denied by the kernel hook (the terminal is the probe's own).
    let r = probe_as_agent(&d, Some("version: 1\n"), &[&["tiocsti-own"]]);
    r.expect("tiocsti-own", "EPERM");
    let rec = r.one_record("/activity", "ioctl");
    assert_eq!(rec["ioctl_cmd"], 0x5412, "{rec:#}");
    assert_eq!(rec["policy"]["reason"], "tty_injection", "{rec:#}");

    // The user's terminal: sandbox run in a session whose controlling terminal is a pty
    // (as from an interactive shell). The command runs in a session of its own, and the
    // terminal it inherited takes no input from it.
    // SAFETY: plain libc calls on a pty we own.
    let (master, slave) = unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0 && libc::grantpt(m) == 0 && libc::unlockpt(m) == 0);
        let name = std::ffi::CStr::from_ptr(libc::ptsname(m))
            .to_str()
            .unwrap()
            .to_owned();
        (m, name)
    };
    std::os::unix::fs::chown(&slave, Some(AGENT_UID), None).unwrap();
    let mut c = Command::new(&bins().sandbox);
    let audit = d.join("tty-audit.jsonl");
    c.args(["run", "--audit-log"])
        .arg(&audit)
        .args(["--policy", "/dev/null", "--"])
        .arg(&bins().probe)
        .args(["tiocsti", "/dev/stdin", "::", "tiocsti", &slave])
        .env("SUDO_UID", "1000")
        .env("SUDO_GID", "1000")
        .current_dir(&d)
        .stdin(
            std::fs::File::options()
                .read(true)
                .write(true)
                .open(&slave)
                .unwrap(),
        );
    let slave_c = std::ffi::CString::new(slave.clone()).unwrap();
    // SAFETY: between fork and exec: setsid and TIOCSCTTY make the pty the session's
    // controlling terminal, as a login shell has it.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut c, move || {
            libc::setsid();
            let fd = libc::open(slave_c.as_ptr(), libc::O_RDWR);
            libc::ioctl(fd, libc::TIOCSCTTY, 0);
            Ok(())
        });
    }
    let out = c.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("PROBE tiocsti /dev/stdin -> EPERM"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("PROBE tiocsti {slave} -> EPERM")),
        "{stdout}"
    );
    // Nothing was queued: the master reads no 'x'.
    // SAFETY: non-blocking read from our pty master.
    unsafe {
        libc::fcntl(master, libc::F_SETFL, libc::O_NONBLOCK);
        let mut buf = [0u8; 256];
        let n = libc::read(master, buf.as_mut_ptr().cast(), buf.len());
        let got = if n > 0 { &buf[..n as usize] } else { &[][..] };
        assert!(!got.contains(&b'x'), "input reached the terminal: {got:?}");
        libc::close(master);
    }
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn network_by_socket_family_listen_and_host_addresses() {
    let d = agent_dir("netkinds");
    // A public address on this host (the guest has no network: it stays local).
    let host_ip = "93.184.216.34";
    let st = Command::new("ip")
        .args(["addr", "add", &format!("{host_ip}/32"), "dev", "lo"])
        .status()
        .unwrap();
    assert!(st.success());
    let tcp = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
    let tcp_port = tcp.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for c in tcp.incoming() {
            drop(c);
        }
    });
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let udp_port = udp.local_addr().unwrap().port().to_string();
    let ops: &[&[&str]] = &[
        &["udp-unspec", "127.0.0.1", &udp_port],
        &["connect", host_ip, &tcp_port],
        &["socket", "2", "1", "262"],
        &["listen", "0.0.0.0", "0"],
        &["udp-bind", "0.0.0.0", "5353"],
        &["listen", "127.0.0.1", "0"],
        &["udp-bind", "0.0.0.0", "0"],
        &["socket", "2", "2", "0"],
        &["socket", "16", "3", "0"],
    ];
    assert_eq!(
        probe_outside_as_agent(ops),
        vec!["OK"; 9],
        "outside the sandbox"
    );
    let r = probe_as_agent(&d, Some("version: 1\n"), ops);
    r.expect("udp-unspec 127.0.0.1", "EPERM");
    r.expect(&format!("connect {host_ip}"), "EPERM");
    r.expect("socket 2 1 262", "EACCES");
    r.expect("listen 0.0.0.0", "EPERM");
    r.expect("udp-bind 0.0.0.0 5353", "EPERM");
    r.expect("listen 127.0.0.1", "OK");
    r.expect("udp-bind 0.0.0.0 0", "OK");
    r.expect("socket 2 2 0", "OK");
    r.expect("socket 16 3 0", "OK");
    let rec = r.one_record("/dst_endpoint/ip", host_ip);
    assert_eq!(rec["policy"]["rule"], "network.block_private", "{rec:#}");
    assert_eq!(
        rec["policy"]["rule_source"],
        format!("{host_ip} (an address of this host)"),
        "{rec:#}"
    );
    let rec = r.one_record("/dst_endpoint/ip", "127.0.0.1");
    assert_eq!(rec["activity"], "send", "{rec:#}");
    let rec = r.one_record("/activity", "socket");
    assert_eq!(rec["socket"]["protocol"], 262, "{rec:#}");
    assert_eq!(rec["policy"]["rule"], "network.sockets", "{rec:#}");
    let listens: Vec<&Value> = r.records("/activity", "listen");
    assert_eq!(listens.len(), 2, "{:#?}", r.audit);
    for l in listens {
        assert_eq!(l["src_endpoint"]["ip"], "0.0.0.0", "{l:#}");
        assert_eq!(l["policy"]["rule"], "network.listen", "{l:#}");
    }
    // A policy that opens them.
    let open = "network:\n  sockets: [unix, inet, inet6, netlink, mptcp]\n  listen: [0.0.0.0/0]\n";
    let r = probe_as_agent(&d, Some(open), &ops[2..5]);
    r.expect("socket 2 1 262", "OK");
    r.expect("listen 0.0.0.0", "OK");
    r.expect("udp-bind 0.0.0.0 5353", "OK");
    let _ = Command::new("ip")
        .args(["addr", "del", &format!("{host_ip}/32"), "dev", "lo"])
        .status();
}
