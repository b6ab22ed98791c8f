//! The fallback backend (no BPF LSM) on the kernel this runs on, with no VM: the real
//! `sandbox` with `SANDBOX_BACKEND=fallback` (so a host that has BPF LSM tests the fallback
//! too), real processes, sockets on loopback only, files in temporary directories.
//!
//! Each deny test first shows the route works without the sandbox, then that it is denied
//! inside, with the errno and (for the network, which has records) the audit record. The
//! tests need root: `cargo xtask test` runs them on the host before the VM runs
//! (`--include-ignored`); plain `cargo test` lists them as ignored. They fail when the
//! feature is broken; they skip, loudly, only when the kernel has no Landlock or no cgroup
//! socket-address programs at all.
use std::io::Read as _;
use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// `sandbox` and `sandbox-probe`: from `SANDBOX_BIN`/`SANDBOX_PROBE`, else next to this
/// test's own directory (`target/<profile>/`).
fn bins() -> (PathBuf, PathBuf) {
    let dir = || {
        std::env::current_exe()
            .expect("test executable")
            .parent()
            .and_then(Path::parent)
            .expect("target/<profile>")
            .to_path_buf()
    };
    let get = |var: &str, name: &str| {
        let p = std::env::var_os(var).map_or_else(|| dir().join(name), PathBuf::from);
        assert!(
            p.exists(),
            "{} does not exist: build it first (cargo build -p sandbox-user -p sandbox-tests \
             --bins) or set {var}",
            p.display()
        );
        p
    };
    // The probe's build path, unless told otherwise (in the guest it is elsewhere).
    let probe = std::env::var_os("SANDBOX_PROBE").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_sandbox-probe")),
        PathBuf::from,
    );
    (get("SANDBOX_BIN", "sandbox"), probe)
}

/// The kernel's Landlock ABI (0: none).
fn landlock_abi() -> u32 {
    // SAFETY: the Landlock version query takes no attribute.
    let abi = unsafe { libc::syscall(444, std::ptr::null::<u8>(), 0usize, 1u32) };
    u32::try_from(abi).unwrap_or(0)
}

/// Whether the kernel can run the fallback at all. `false` only when it genuinely cannot
/// (printed loudly); everything else must work.
fn host_can() -> bool {
    // SAFETY: plain syscall.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the fallback tests need root (cargo xtask test runs them as root)"
    );
    if landlock_abi() < 1 {
        eprintln!(
            "\n\n*** SKIPPED: this kernel has no active Landlock ({}): the fallback backend \
             cannot be tested here ***\n",
            std::io::Error::last_os_error()
        );
        return false;
    }
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = rel
        .trim()
        .split(['.', '-'])
        .map(|x| x.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    if (major, minor) < (5, 7) {
        eprintln!(
            "\n\n*** SKIPPED: kernel {} has no BPF links for cgroup programs (5.7+) ***\n",
            rel.trim()
        );
        return false;
    }
    true
}

/// A temporary directory owned by root (sandbox refuses logs and policies others can
/// change), removed at the end.
struct Tmp(PathBuf);

impl Tmp {
    fn new(name: &str) -> Self {
        let p =
            std::env::temp_dir().join(format!("sandbox-fallback-{name}-{}", std::process::id()));
        drop(std::fs::remove_dir_all(&p));
        std::fs::create_dir_all(&p).expect("temp dir");
        Self(p)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
        p
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        drop(std::fs::remove_dir_all(&self.0));
    }
}

/// One `sandbox run` in the fallback and what it left.
struct Run {
    out: Output,
    stdout: String,
    stderr: String,
    audit: Vec<Value>,
}

impl Run {
    fn answer(&self, op: &str) -> &str {
        let prefix = format!("PROBE {op} -> ");
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no answer for '{op}'\n{}", self.dump()))
    }

    fn expect(&self, cases: &[(&str, &str)]) {
        let wrong: Vec<String> = cases
            .iter()
            .filter(|(op, want)| self.answer(op) != *want)
            .map(|(op, want)| format!("  {op}: expected {want}, got {}", self.answer(op)))
            .collect();
        assert!(
            wrong.is_empty(),
            "wrong answers:\n{}\n{}",
            wrong.join("\n"),
            self.dump()
        );
    }

    /// The one network record for `activity` to `ip`:`port`.
    fn net_record(&self, activity: &str, ip: &str, port: u16) -> &Value {
        let found: Vec<&Value> = self
            .audit
            .iter()
            .filter(|r| {
                r["unmapped"]["activity"] == activity
                    && r["dst_endpoint"]["ip"] == ip
                    && r["dst_endpoint"]["port"] == port
            })
            .collect();
        assert_eq!(
            found.len(),
            1,
            "expected one {activity} record to {ip}:{port}\n{}",
            self.dump()
        );
        found[0]
    }

    fn dump(&self) -> String {
        format!(
            "status: {:?}\nstdout:\n{}\nstderr:\n{}\naudit:\n{:#?}",
            self.out.status.code(),
            self.stdout,
            self.stderr,
            self.audit
        )
    }
}

/// The probe's words: operations separated by `::`.
fn ops(cases: &[(&str, &str)]) -> Vec<String> {
    let mut v = Vec::new();
    for (i, (op, _)) in cases.iter().enumerate() {
        if i > 0 {
            v.push("::".into());
        }
        v.extend(op.split(' ').map(str::to_owned));
    }
    v
}

/// `sandbox run --as-root [extra] -- probe ops` in `dir`, with HOME set to `dir/home`.
fn run(dir: &Tmp, policy: Option<&Path>, extra: &[&str], probe_ops: &[String]) -> Run {
    let (sandbox, probe) = bins();
    let log = dir.path("audit.jsonl");
    let mut cmd = Command::new(sandbox);
    cmd.arg("run").arg("--as-root").arg("--audit-log").arg(&log);
    if let Some(p) = policy {
        cmd.arg("--policy").arg(p);
    }
    cmd.args(extra)
        .arg("--")
        .arg(probe)
        .args(probe_ops)
        .env("SANDBOX_BACKEND", "fallback")
        .env("HOME", dir.path("home"))
        .current_dir(&dir.0);
    let out = cmd.output().expect("starting sandbox");
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(&log) {
        f.read_to_string(&mut text).expect("audit log");
    }
    drop(std::fs::remove_file(&log));
    Run {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        audit: text
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON record"))
            .collect(),
        out,
    }
}

/// The probe outside any sandbox.
fn outside(probe_ops: &[String]) -> String {
    let (_, probe) = bins();
    let out = Command::new(probe).args(probe_ops).output().expect("probe");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn expect_outside(cases: &[(&str, &str)]) {
    let text = outside(&ops(cases));
    for (op, want) in cases {
        let got = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("PROBE {op} -> ")))
            .unwrap_or("no answer");
        assert_eq!(got, *want, "outside the sandbox, '{op}'\n{text}");
    }
}

#[test]
#[ignore = "needs root; cargo xtask test runs it on the host"]
#[expect(
    clippy::too_many_lines,
    reason = "one run: its cases, shown outside first, and their records"
)]
fn network_loopback_denied_by_block_private_with_records() {
    if !host_can() {
        return;
    }
    let dir = Tmp::new("net");
    let tcp = TcpListener::bind("127.0.0.1:0").expect("listen");
    let tport = tcp.local_addr().expect("addr").port();
    let udp = UdpSocket::bind("127.0.0.1:0").expect("udp");
    let uport = udp.local_addr().expect("addr").port();
    let tcp6 = TcpListener::bind("[::1]:0").ok();
    let open = TcpListener::bind("127.0.0.1:0").expect("listen");
    let oport = open.local_addr().expect("addr").port();
    let policy = dir.write(
        "p.yaml",
        &format!(
            "name: fallback-net\nfiles:\n  workspace: {}\nnetwork:\n  block_private: true\n  \
             allow: [\"127.0.0.1:{oport}\"]\n",
            dir.0.display()
        ),
    );
    let connect = format!("connect 127.0.0.1 {tport}");
    let mapped = format!("connect ::ffff:127.0.0.1 {tport}");
    let send = format!("udp 127.0.0.1 {uport}");
    let allowed = format!("connect 127.0.0.1 {oport}");
    // A ping socket's connect (`ping_pre_connect` runs `connect4`) to the allowed port: an
    // echo request ignores the port, so it is judged as port 0, which the rule leaves shut.
    let _ping = Sysctl::set("/proc/sys/net/ipv4/ping_group_range", "0 2147483647");
    let ping = format!("ping-connect 127.0.0.1 {oport}");
    let mut cases = vec![
        (connect.as_str(), "OK"),
        (mapped.as_str(), "OK"),
        (send.as_str(), "OK"),
        (allowed.as_str(), "OK"),
        (ping.as_str(), "OK"),
    ];
    let v6 = tcp6
        .as_ref()
        .map(|l| format!("connect ::1 {}", l.local_addr().expect("addr").port()));
    if let Some(v6) = &v6 {
        cases.push((v6.as_str(), "OK"));
    }
    // A send to a public address whose socket carries a segment routing header (any user
    // may set one; the fallback has no setsockopt hook): the kernel sends the packet to the
    // header's segment, here loopback (whose Linux stack then drops it: `seg6_enabled` is
    // off by default; another host's need not).
    let udp6 = UdpSocket::bind("[::1]:0").ok();
    let srh = udp6.as_ref().map(|u| {
        let port = u.local_addr().expect("addr").port();
        format!("srh-send 2606:4700:4700::1111 {port} ::1")
    });
    match &srh {
        Some(srh) => cases.push((srh.as_str(), "OK")),
        None => eprintln!("no IPv6 loopback here: the segment routing case is not run"),
    }
    expect_outside(&cases);
    let r = run(&dir, Some(&policy), &[], &ops(&cases));
    let inside: Vec<(&str, &str)> = cases
        .iter()
        .map(|(op, _)| (*op, if *op == allowed { "OK" } else { "EPERM" }))
        .collect();
    r.expect(&inside);
    assert_ne!(
        r.out.status.code(),
        Some(125),
        "sandbox failed\n{}",
        r.dump()
    );
    assert!(r.stderr.contains("backend: fallback"), "{}", r.dump());
    assert!(
        r.stderr.contains("every rule of the policy is enforced"),
        "{}",
        r.dump()
    );
    let rec = r.net_record("connect", "127.0.0.1", tport);
    assert_eq!(rec["class_uid"], 4001, "{rec:#}");
    assert_eq!(rec["action"], "Denied", "{rec:#}");
    assert_eq!(rec["unmapped"]["rule"], "network.block_private", "{rec:#}");
    assert_eq!(rec["unmapped"]["rule_source"], "127.0.0.0/8", "{rec:#}");
    assert_eq!(rec["policy"]["name"], "fallback-net", "{rec:#}");
    assert!(
        rec["unmapped"]["actor"]["cgroup"]
            .as_str()
            .is_some_and(|c| c.starts_with("/sandbox/run-")),
        "{rec:#}"
    );
    let rec = r.net_record("connect", "::ffff:127.0.0.1", tport);
    assert_eq!(rec["unmapped"]["rule_source"], "127.0.0.0/8", "{rec:#}");
    // The routed send was dropped by the egress program, which makes no record (the
    // `sendmsg6` program judged the public address and let it go).
    assert!(
        !r.audit
            .iter()
            .any(|x| x["dst_endpoint"]["ip"] == "2606:4700:4700::1111"),
        "the routed send left a record\n{}",
        r.dump()
    );
    let rec = r.net_record("connect", "127.0.0.1", 0);
    assert_eq!(rec["unmapped"]["rule"], "network.block_private", "{rec:#}");
    let rec = r.net_record("send", "127.0.0.1", uport);
    assert_eq!(rec["unmapped"]["rule"], "network.block_private", "{rec:#}");
    if let Some(l) = &tcp6 {
        let port = l.local_addr().expect("addr").port();
        let rec = r.net_record("connect", "::1", port);
        assert_eq!(rec["unmapped"]["rule_source"], "::1/128", "{rec:#}");
    }
    assert!(
        !r.audit.iter().any(|x| x["dst_endpoint"]["port"] == oport),
        "the allowed connect left a record\n{}",
        r.dump()
    );
}

/// A sysctl set for a test and put back after it (this test also runs on the developer's
/// own machine).
struct Sysctl(&'static str, String);

impl Sysctl {
    fn set(path: &'static str, value: &str) -> Self {
        let old = std::fs::read_to_string(path).expect(path);
        std::fs::write(path, value).expect(path);
        Self(path, old)
    }
}

impl Drop for Sysctl {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0, self.1.trim());
    }
}

#[test]
#[ignore = "needs root; cargo xtask test runs it on the host"]
fn network_cidr_port_rule_denies_only_that_port() {
    if !host_can() {
        return;
    }
    let dir = Tmp::new("cidr");
    let a = TcpListener::bind("127.0.0.1:0").expect("listen");
    let b = TcpListener::bind("127.0.0.1:0").expect("listen");
    let (pa, pb) = (
        a.local_addr().expect("addr").port(),
        b.local_addr().expect("addr").port(),
    );
    let policy = dir.write(
        "p.yaml",
        &format!(
            "files:\n  workspace: {}\nnetwork:\n  block_private: false\n  deny: \
             [\"127.0.0.0/8:{pa}\"]\n",
            dir.0.display()
        ),
    );
    let (ca, cb) = (
        format!("connect 127.0.0.1 {pa}"),
        format!("connect 127.0.0.1 {pb}"),
    );
    expect_outside(&[(&ca, "OK"), (&cb, "OK")]);
    let r = run(&dir, Some(&policy), &[], &ops(&[(&ca, ""), (&cb, "")]));
    r.expect(&[(&ca, "EPERM"), (&cb, "OK")]);
    let rec = r.net_record("connect", "127.0.0.1", pa);
    assert_eq!(rec["unmapped"]["rule"], "network.deny[0]", "{rec:#}");
}

#[test]
#[ignore = "needs root; cargo xtask test runs it on the host"]
fn files_and_exec_by_landlock() {
    if !host_can() {
        return;
    }
    let abi = landlock_abi();
    let dir = Tmp::new("files");
    dir.write("secret/key", "k");
    dir.write("ro/conf", "c");
    dir.write("ws/a", "a");
    std::fs::create_dir_all(dir.path("out")).expect("mkdir");
    let (_, probe) = bins();
    let tool = dir.path("bin/denied-tool");
    std::fs::create_dir_all(tool.parent().expect("parent")).expect("mkdir");
    std::fs::copy(&probe, &tool).expect("copy probe");
    let other = dir.path("bin/other-tool");
    std::fs::copy(&probe, &other).expect("copy probe");
    let d = dir.0.display();
    let mut outsider = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("sleep");
    let policy = dir.write(
        "p.yaml",
        &format!(
            "files:\n  workspace: {d}/ws\n  deny: [{d}/secret]\n  read_only: [{d}/ro]\n  \
             write: [{d}/out]\nexec:\n  deny: [{d}/bin/denied-tool]\n"
        ),
    );
    let cases_text = [
        format!("open {d}/secret/key r"),
        format!("open {d}/ro/conf w"),
        format!("open {d}/ro/conf r"),
        format!("open {d}/ws/a w"),
        format!("open {d}/ws/new creat"),
        format!("open {d}/out/new creat"),
        format!("open {d}/elsewhere creat"),
        format!("exec {d}/bin/denied-tool"),
        format!("exec {d}/bin/other-tool"),
        format!("rename {d}/ro/conf {d}/ws/conf"),
        // SIGCONT to a process outside (harmless to it): Landlock's signal scoping, ABI 6.
        format!("kill {} 18", outsider.id()),
    ];
    let c = |i: usize| cases_text[i].as_str();
    let inside = [
        (c(0), "EACCES"),
        (c(1), "EACCES"),
        (c(2), "OK"),
        (c(3), "OK"),
        (c(4), "OK"),
        (c(5), "OK"),
        (c(6), "EACCES"),
        (c(7), "EACCES"),
        (c(8), "OK"),
        // Moving a read-only file into the workspace would make it writable: its
        // directory is not writable, so the name cannot be removed from it.
        (c(9), "EACCES"),
        // Landlock scopes signals from ABI 6 (Linux 6.12); before, it is listed as not
        // enforced.
        (c(10), if abi >= 6 { "EPERM" } else { "OK" }),
    ];
    // Outside: the same routes work (the rename last, so it does not disturb the rest;
    // run on copies).
    let outside_cases = [
        (c(0), "OK"),
        (c(1), "OK"),
        (c(2), "OK"),
        (c(7), "OK"),
        (c(10), "OK"),
    ];
    expect_outside(&outside_cases);
    // Before ABI 3 (Linux 6.2) truncate by path is not judged: the run needs consent and
    // says so.
    let extra: &[&str] = if abi >= 3 { &[] } else { &["--allow-degraded"] };
    let r = run(&dir, Some(&policy), extra, &ops(&inside));
    r.expect(&inside);
    let said = if abi >= 3 {
        "every rule of the policy is enforced"
    } else {
        "files (truncate): truncate(2) by path"
    };
    assert!(r.stderr.contains(said), "{}", r.dump());
    if abi < 6 {
        assert!(
            r.stderr
                .contains("signals to processes outside the sandbox"),
            "{}",
            r.dump()
        );
    }
    assert!(
        !dir.path("elsewhere").exists(),
        "a denied create left a file"
    );
    assert!(dir.path("ro/conf").exists(), "the read-only file was moved");
    let _ = outsider.kill();
    let _ = outsider.wait();
}

#[test]
#[ignore = "needs root; cargo xtask test runs it on the host"]
fn rules_the_fallback_cannot_enforce_are_refused_by_name_unless_accepted() {
    if !host_can() {
        return;
    }
    let dir = Tmp::new("refuse");
    let d = dir.0.display();
    let text = format!("files:\n  workspace: {d}\n  deny:\n    - {d}/secret\n    - /**/.env\n");
    let policy = dir.write("p.yaml", &text);
    let readable = dir.write("readable", "r");
    let open_readable = format!("open {} r", readable.display());
    let probe_ops = ops(&[(&open_readable, "")]);
    let r = run(&dir, Some(&policy), &[], &probe_ops);
    assert_eq!(r.out.status.code(), Some(125), "{}", r.dump());
    assert!(r.stdout.is_empty(), "the command ran\n{}", r.dump());
    assert!(
        r.stderr.contains("files.deny[1] '/**/.env': not enforced"),
        "the refusal must name the rule\n{}",
        r.dump()
    );
    assert!(!r.stderr.contains("files.deny[0]"), "{}", r.dump());
    assert!(r.stderr.contains("--allow-degraded"), "{}", r.dump());
    // The flag: runs, and says what is not enforced.
    let r = run(&dir, Some(&policy), &["--allow-degraded"], &probe_ops);
    assert!(r.out.status.success(), "{}", r.dump());
    r.expect(&[(&open_readable, "OK")]);
    // Before ABI 3, truncate is the second.
    let n = if landlock_abi() >= 3 { 1 } else { 2 };
    assert!(
        r.stderr.contains(&format!("rules not enforced ({n})")),
        "{}",
        r.dump()
    );
    // The policy setting: the same.
    let policy = dir.write(
        "p2.yaml",
        &format!("{text}fallback:\n  allow_degraded: true\n"),
    );
    let r = run(&dir, Some(&policy), &[], &probe_ops);
    assert!(r.out.status.success(), "{}", r.dump());
    assert!(
        r.stderr.contains("files.deny[1] '/**/.env'"),
        "{}",
        r.dump()
    );
}

#[test]
#[ignore = "needs root; cargo xtask test runs it on the host"]
fn builtin_policy_runs_in_the_fallback_and_says_what_it_does_not_enforce() {
    if !host_can() {
        return;
    }
    let dir = Tmp::new("default");
    dir.write("home/.ssh/id_rsa", "PRIVATE KEY");
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = l.local_addr().expect("addr").port();
    let key = format!("open {} r", dir.path("home/.ssh/id_rsa").display());
    let connect = format!("connect 127.0.0.1 {port}");
    expect_outside(&[(&key, "OK"), (&connect, "OK")]);
    let r = run(&dir, None, &[], &ops(&[(&key, ""), (&connect, "")]));
    r.expect(&[(&key, "EACCES"), (&connect, "EPERM")]);
    assert_ne!(
        r.out.status.code(),
        Some(125),
        "sandbox failed\n{}",
        r.dump()
    );
    assert!(r.stderr.contains("backend: fallback"), "{}", r.dump());
    assert!(r.stderr.contains("rules not enforced"), "{}", r.dump());
    assert!(
        r.stderr.contains("'/**/.env': not enforced"),
        "{}",
        r.dump()
    );
    let rec = r.net_record("connect", "127.0.0.1", port);
    assert_eq!(rec["policy"]["name"], "default", "{rec:#}");
}

#[test]
#[ignore = "needs root; cargo xtask test runs it on the host"]
fn preflight_names_the_fallback_backend() {
    if !host_can() {
        return;
    }
    let (sandbox, _) = bins();
    let out = Command::new(sandbox)
        .arg("preflight")
        .env("SANDBOX_BACKEND", "fallback")
        .output()
        .expect("preflight");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("backend: fallback"), "{text}");
    assert!(
        text.contains("cgroup socket-address programs load"),
        "{text}"
    );
    assert!(text.contains("'/**/.env': not enforced"), "{text}");
    let out = Command::new(bins().0)
        .args(["preflight", "--json"])
        .env("SANDBOX_BACKEND", "fallback")
        .output()
        .expect("preflight --json");
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["ok"], true, "{v:#}");
    assert_eq!(v["backend"], "fallback", "{v:#}");
    let load = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "load")
        .expect("a load check");
    assert_eq!(load["status"], "ok", "{v:#}");
    assert!(
        v["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap_or_default()
            .contains("'/**/.env': not enforced")),
        "{v:#}"
    );
}

/// Exit statuses as `env` and `timeout` give them: 127 for a command not found, 126 for
/// one that cannot run; `check` of a bad policy exits 1 and says where (text and JSON).
#[test]
#[ignore = "needs root; cargo xtask test runs it on the host"]
fn exit_statuses_follow_env() {
    if !host_can() {
        return;
    }
    let dir = Tmp::new("exit");
    let (sandbox, _) = bins();
    let not_exec = dir.write("data.txt", "not a program\n");
    let status = |cmd: &[&std::ffi::OsStr]| {
        let out = Command::new(&sandbox)
            .args(["run", "--as-root", "--allow-degraded", "--audit-log"])
            .arg(dir.path("audit.jsonl"))
            .arg("--")
            .args(cmd)
            .env("SANDBOX_BACKEND", "fallback")
            .env("HOME", dir.path("home"))
            .output()
            .expect("sandbox");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = status(&["/no/such/program".as_ref()]);
    assert_eq!(code, Some(127), "{err}");
    assert!(err.contains("/no/such/program: command not found"), "{err}");
    let (code, err) = status(&["no-such-command-anywhere".as_ref()]);
    assert_eq!(code, Some(127), "{err}");
    let (code, err) = status(&[not_exec.as_os_str()]);
    assert_eq!(code, Some(126), "{err}");
    assert!(err.contains("cannot execute"), "{err}");
    // The command's own status passes through.
    let (code, err) = status(&["/bin/sh".as_ref(), "-c".as_ref(), "exit 3".as_ref()]);
    assert_eq!(code, Some(3), "{err}");

    let bad = dir.write("bad.yaml", "files:\n  dney: [/etc]\n");
    let out = Command::new(&sandbox)
        .arg("check")
        .arg(&bad)
        .output()
        .expect("check");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.yaml:2:3: files: unknown field `dney`"),
        "{err}"
    );
    let out = Command::new(&sandbox)
        .args(["check", "--json"])
        .arg(&bad)
        .output()
        .expect("check --json");
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(v["ok"], false, "{v:#}");
    assert_eq!(v["errors"][0]["line"], 2, "{v:#}");
    assert_eq!(v["errors"][0]["column"], 3, "{v:#}");
}

/// `sandbox events` shows what a run recorded: a line per record, filters, JSON.
#[test]
#[ignore = "needs root; cargo xtask test runs it on the host"]
fn events_shows_the_audit_log() {
    if !host_can() {
        return;
    }
    let dir = Tmp::new("events");
    let (sandbox, probe) = bins();
    let tcp = TcpListener::bind("127.0.0.1:0").expect("listen");
    let port = tcp.local_addr().expect("addr").port().to_string();
    let log = dir.path("audit.jsonl");
    let out = Command::new(&sandbox)
        .args(["run", "--as-root", "--allow-degraded", "--audit-log"])
        .arg(&log)
        .arg("--")
        .arg(&probe)
        .args(["connect", "127.0.0.1", &port])
        .env("SANDBOX_BACKEND", "fallback")
        .env("HOME", dir.path("home"))
        .output()
        .expect("sandbox");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("-> EPERM"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events = |args: &[&str]| {
        let out = Command::new(&sandbox)
            .arg("events")
            .arg("--audit-log")
            .arg(&log)
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .expect("events");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = events(&[]);
    let want = format!("deny  denied connect 127.0.0.1:{port} by network.block_private");
    assert!(text.contains(&want), "{text}");
    assert!(
        text.lines().next().is_some_and(|l| l.starts_with("20")),
        "{text}"
    );
    assert_eq!(events(&["--class", "file"]), "");
    assert_eq!(events(&["--decision", "audit"]), "");
    assert_eq!(events(&["--since", "2099-01-01T00:00:00Z"]), "");
    let json = events(&["-o", "json", "--rule", "network.", "--since", "10m"]);
    let recs: Vec<Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record"))
        .collect();
    assert_eq!(recs.len(), 1, "{json}");
    assert_eq!(recs[0]["dst_endpoint"]["port"].to_string(), port);
}
