//! The boundary: nothing outside the sandbox does the agent's work for it. Every case runs
//! the command as the non-root agent user (`sudo sandbox run`) and first shows the same
//! operation working outside the sandbox, as that user: unix sockets, other processes of
//! the same user, the terminal, socket kinds, listening, the host's own addresses.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use sandbox_tests::*;
use serde_json::Value;

fn run_as_agent(dir: &Path, policy: Option<&str>, cmd: &[&str]) -> Run {
    run_as(User::Agent, dir, policy, cmd)
}

fn probe_as_agent(dir: &Path, policy: Option<&str>, ops: &[&[&str]]) -> Run {
    probe_as(User::Agent, dir, policy, ops)
}

/// The probe as the agent user, outside any sandbox; the answer of each operation.
fn probe_outside_as_agent(ops: &[&[&str]]) -> Vec<String> {
    probe_outside_holding(ops, &[])
}

/// [`probe_outside_as_agent`] started holding `fds` (see `sandbox_tests::hold`).
fn probe_outside_holding(
    ops: &[&[&str]],
    fds: &[(std::os::fd::RawFd, std::os::fd::RawFd)],
) -> Vec<String> {
    let b = bins();
    let mut args: Vec<&str> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        if i > 0 {
            args.push("::");
        }
        args.extend_from_slice(op);
    }
    let mut c = Command::new(&b.probe);
    c.args(&args)
        .uid(User::Agent.uid())
        .gid(User::Agent.uid())
        .current_dir("/");
    hold(&mut c, fds);
    let out = c.output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(" -> ").map(|(_, r)| r.to_owned()))
        .collect()
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
    let addr = if let Some(n) = path.strip_prefix('@') {
        std::os::unix::net::SocketAddr::from_abstract_name(n.as_bytes()).unwrap()
    } else {
        let _ = std::fs::remove_file(path);
        std::os::unix::net::SocketAddr::from_pathname(path).unwrap()
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

/// Descriptors opened outside the sandbox (a file it denies, a socket connected to a peer
/// outside) that whoever started sandbox left open: reading and writing them goes through
/// no hook the policy decides on, so the command never gets them; `--pass-fd` hands one
/// over on purpose.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn descriptors_opened_outside_never_reach_the_command() {
    use std::os::fd::AsRawFd;
    let d = agent_dir("fds");
    let secret = d.join("secret.txt");
    std::fs::write(&secret, "the secret\n").unwrap();
    User::Agent.own(&secret);
    let file = std::fs::File::open(&secret).unwrap();
    // A connected socket whose peer (this test) is outside.
    let (sock, _peer) = std::os::unix::net::UnixStream::pair().unwrap();
    let fds = [(file.as_raw_fd(), 7), (sock.as_raw_fd(), 8)];
    let secret = secret.display().to_string();
    let ops: &[&[&str]] = &[
        &["fd-read", "7"],
        &["fd-write", "8"],
        &["open", &secret, "r"],
    ];
    // Outside, as the same user: both descriptors work, and so does the file by its name.
    assert_eq!(
        probe_outside_holding(ops, &fds),
        vec!["OK"; 3],
        "outside the sandbox"
    );
    let policy = format!("files:\n  deny: [{secret}]\n");
    let cmd = probe_command(ops);
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let run = |args: &[&str]| run_as_holding(User::Agent, &d, Some(&policy), args, &fds, &cmd);
    let r = run(&[]);
    r.expect("fd-read 7", "EBADF");
    r.expect("fd-write 8", "EBADF");
    r.expect(&format!("open {secret} r"), "EACCES");
    // Handed over on purpose: that one descriptor, and only it.
    let r = run(&["--pass-fd", "7"]);
    r.expect("fd-read 7", "OK");
    r.expect("fd-write 8", "EBADF");
    r.expect(&format!("open {secret} r"), "EACCES");
    // A descriptor that sandbox was not given: refused before anything runs.
    let r = run(&["--pass-fd", "900"]);
    assert_eq!(r.status, 125, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("--pass-fd 900: sandbox was started without a descriptor 900 open"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stdout.contains("fd-read"),
        "the command ran: {}",
        r.stdout
    );
}

/// The kernel's keys: the user keyring (and the persistent one, where a `KEYRING:`
/// Kerberos credential cache keeps the user's tickets) is every process of the user's.
/// The command neither uses nor makes a key of its user's, not even a session keyring of
/// its own, nor lists them in `/proc/keys` (opened by a shell, read by the `cat` it
/// execs: the check then uses the opener's credentials, another object than the reader's).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn kernel_keys_of_the_user_stay_outside() {
    let d = agent_dir("keys");
    let listing = ["/bin/sh", "-c", "cat < /proc/keys"];
    // Outside, as the same user: a key is added to the user keyring, found, read and
    // listed.
    assert_eq!(
        probe_outside_as_agent(&[
            &["key-add", "kt-secret"],
            &["key-read", "kt-secret"],
            &["key-session"],
        ]),
        vec!["OK"; 3],
        "outside the sandbox"
    );
    let out = Command::new(listing[0])
        .args(&listing[1..])
        .uid(User::Agent.uid())
        .gid(User::Agent.gid())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("kt-secret"),
        "outside, /proc/keys lists the key: {out:?}"
    );
    let r = run_as_agent(&d, None, &listing);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(
        !r.stdout.contains("kt-secret"),
        "inside, /proc/keys lists the key:\n{}",
        r.stdout
    );
    let r = probe_as_agent(
        &d,
        None,
        &[
            &["key-read", "kt-secret"],
            &["key-add", "kt-other"],
            &["key-session"],
        ],
    );
    // The user keyring is looked up by a search the command's credentials make: denied,
    // it is not found (ENOKEY), for reading and adding alike. A keyring of its own cannot
    // be made either.
    r.expect("key-read kt-secret", "E126");
    r.expect("key-add kt-other", "E126");
    r.expect("key-session", "EPERM");
    let keys: Vec<_> = r
        .audit
        .iter()
        .filter(|v| v.pointer("/unmapped/activity").and_then(Value::as_str) == Some("key"))
        .collect();
    assert!(
        keys.iter().all(|v| {
            v.pointer("/unmapped/reason").and_then(Value::as_str) == Some("kernel_keys")
        }),
        "{keys:#?}"
    );
    for need in ["search", "create"] {
        assert!(
            keys.iter()
                .any(|v| v.pointer("/unmapped/key/need").and_then(Value::as_str) == Some(need)),
            "no record of a {need}: {keys:#?}"
        );
    }
    root_keys_with_uids_apart(&d);
    // Still the agent's outside.
    assert_eq!(
        probe_outside_as_agent(&[&["key-read", "kt-secret"]]),
        vec!["OK"],
        "outside the sandbox, after"
    );
}

/// A root command that sets its uids apart (real: nobody, effective and filesystem: the
/// agent's) is still judged for the agent's keys. Outside, so set, root lists them.
fn root_keys_with_uids_apart(d: &std::path::Path) {
    let uid = User::Agent.uid().to_string();
    let apart: &[&[&str]] = &[
        &["setresuid", "65534", &uid, "0"],
        &["key-listed", "kt-secret"],
    ];
    assert_eq!(
        probe_outside(&[
            "setresuid",
            "65534",
            &uid,
            "0",
            "::",
            "key-listed",
            "kt-secret"
        ]),
        "OK",
        "root outside, its uids set apart"
    );
    // A root command's filesystem uid set apart does not make root's own keyrings (`@u`,
    // possessed: its possessor's permissions) the kernel's. Outside, root reads its key so.
    let fs_apart = ["setfsuid", "65534", "::", "key-read", "kt-root"];
    assert_eq!(probe_outside(&["key-add", "kt-root"]), "OK", "root outside");
    assert_eq!(
        probe_outside(&fs_apart),
        "OK",
        "root outside, fsuid set apart"
    );
    let r = probe(
        d,
        None,
        &[
            &["setfsuid", "65534"],
            &["key-read", "kt-root"],
            &["setfsuid", "0"],
            apart[0],
            apart[1],
        ],
    );
    r.expect("setfsuid 0", "OK");
    r.expect(&format!("setresuid 65534 {uid} 0"), "OK");
    r.expect("key-listed kt-secret", "NOT_LISTED");
    r.expect("setfsuid 65534", "OK");
    r.expect("key-read kt-root", "E126");
    // Root's own keyring searched under the fsuid set apart (the first operation, the
    // only one whose uid is still root's): denied, with the search in the record.
    r.check_records(&[rec("/actor/user/uid", "0")
        .some()
        .has("/unmapped/reason", "kernel_keys")
        .has("/unmapped/key/need", "search")]);
}

/// Unix sockets the command makes are the command's: no process outside the sandbox may
/// connect or send to one, named or abstract. A server of the command's at a name that an
/// outside program trusts would tell that program what to do: a tmux client runs the shell
/// its server names (its socket in `/tmp` moved aside and one of the command's bound in
/// its place), `ssh-add` hands its keys to whatever listens at `SSH_AUTH_SOCK`.
/// `network.unix_inbound: true` lets them (a service whose clients are outside). The agent
/// user on both sides; the route shown working without the sandbox first.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn outside_clients_never_reach_the_commands_unix_sockets() {
    let d = agent_dir("unix_inbound");
    let path = d.join("srv.sock").display().to_string();
    let abs = format!("@sandbox-kt-inbound-{}", std::process::id());
    let (path_d, abs_d) = (format!("{path}.d"), format!("{abs}.d"));
    let ops = [
        ["unix-connect", path.as_str()],
        ["unix-send", path_d.as_str()],
        ["unix-connect", abs.as_str()],
        ["unix-send", abs_d.as_str()],
    ];
    let clients: Vec<&[&str]> = ops.iter().map(<[&str; 2]>::as_slice).collect();
    // The clients once the server answers, or refuses, on all four of its names.
    let reach = || {
        let deadline = std::time::Instant::now() + Duration::from_mins(2);
        loop {
            let got = probe_outside_as_agent(&clients);
            let up = |r: &String| r != "ENOENT" && r != "ECONNREFUSED";
            if got.iter().all(up) || std::time::Instant::now() > deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let gone = |p: &str| {
        let _ = std::fs::remove_file(p);
        let _ = std::fs::remove_file(format!("{p}.d"));
    };
    let serve = vec![
        "unix-serve".to_owned(),
        "4000".to_owned(),
        path.clone(),
        abs.clone(),
    ];
    let outside = std::thread::spawn({
        let serve = serve.clone();
        move || {
            let ops: Vec<&str> = serve.iter().map(String::as_str).collect();
            probe_outside_as_agent(&[&ops])
        }
    });
    assert_eq!(reach(), vec!["OK"; 4], "outside the sandbox");
    assert_eq!(outside.join().unwrap(), vec!["OK"], "the server outside");
    gone(&path);
    let inside = |policy: Option<&'static str>| {
        let t = std::thread::spawn({
            let (d, path, abs) = (d.clone(), path.clone(), abs.clone());
            move || probe_as_agent(&d, policy, &[&["unix-serve", "6000", &path, &abs]])
        });
        let got = reach();
        let r = t.join().unwrap();
        gone(&path);
        (got, r)
    };
    let (got, r) = inside(None);
    assert_eq!(
        got,
        vec!["EACCES"; 4],
        "inside, the built-in policy: {:#?}",
        r.audit
    );
    r.expect(&format!("unix-serve 6000 {path} {abs}"), "OK");
    for (name, activity) in [
        (path.as_str(), "connect"),
        (path_d.as_str(), "send"),
        (abs.as_str(), "connect"),
        (abs_d.as_str(), "send"),
    ] {
        r.check_records(&[rec("/dst_endpoint/name", name)
            .some()
            .has("/unmapped/activity", activity)
            .has("/unmapped/reason", "outside_client")
            .has("/unmapped/rule", "network.unix_inbound")
            .has("/actor/user/uid", User::Agent.uid().to_string())]);
    }
    let (got, r) = inside(Some("network:\n  unix_inbound: true\n"));
    assert_eq!(got, vec!["OK"; 4], "inside, unix_inbound: {:#?}", r.audit);
    // A server outside that the command asked (its datagram socket connected to the
    // server's) answers it: a reply, not a client.
    let echo = d.join("echo.sock").display().to_string();
    let _ = std::fs::remove_file(&echo);
    let server = std::os::unix::net::UnixDatagram::bind(&echo).unwrap();
    std::fs::set_permissions(&echo, std::fs::Permissions::from_mode(0o777)).unwrap();
    server
        .set_read_timeout(Some(Duration::from_mins(1)))
        .unwrap();
    let answers = std::thread::spawn(move || {
        let mut b = [0u8; 16];
        let (_, from) = server.recv_from(&mut b).unwrap();
        server
            .send_to(b"yes", from.as_pathname().unwrap())
            .map_err(|e| e.kind())
    });
    let ask = d.join("ask.sock").display().to_string();
    let r = probe_as_agent(
        &d,
        Some(&format!("network:\n  unix: [{echo}]\n")),
        &[&["unix-ask", &echo, &ask]],
    );
    r.expect(&format!("unix-ask {echo} {ask}"), "OK");
    assert_eq!(answers.join().unwrap(), Ok(3), "the server's reply");
}

/// System V shared memory, semaphores and message queues pass no hook the policy decides
/// on: the command runs in an IPC namespace of its own, where the user's segments (an X
/// server's MIT-SHM images of other windows) and POSIX message queues do not exist; the
/// host's queues, a path on the host's mqueue mount, are denied by an implicit rule.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn system_v_ipc_of_the_user_stays_outside() {
    let d = agent_dir("sysv");
    assert_eq!(
        probe_outside_as_agent(&[&["shm-make", "4242"], &["shm-read", "4242"]]),
        vec!["OK"; 2],
        "outside the sandbox"
    );
    // POSIX message queues: per IPC namespace too, but the host's mount of them
    // (`/dev/mqueue`) is a path: denied by an implicit rule.
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    if !mounts.lines().any(|l| l.contains(" /dev/mqueue mqueue ")) {
        std::fs::create_dir_all("/dev/mqueue").unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "mqueue", "mqueue", "/dev/mqueue"])
            .status()
            .unwrap();
        assert!(mounted.success(), "mount -t mqueue");
    }
    assert_eq!(
        probe_outside_as_agent(&[
            &["mq-make", "/kt-queue"],
            &["mq-take-path", "/dev/mqueue/kt-queue"],
            &["mq-make", "/kt-queue"],
        ]),
        vec!["OK"; 3],
        "outside the sandbox"
    );
    let r = probe_as_agent(
        &d,
        None,
        &[
            &["shm-read", "4242"],
            &["shm-rm", "4242"],
            &["mq-take", "/kt-queue"],
            &["mq-take-path", "/dev/mqueue/kt-queue"],
        ],
    );
    r.expect("shm-read 4242", "ENOENT");
    r.expect("shm-rm 4242", "ENOENT");
    r.expect("mq-take /kt-queue", "ENOENT");
    r.expect("mq-take-path /dev/mqueue/kt-queue", "EACCES");
    r.check_records(&[rec("/file/path", "/dev/mqueue/kt-queue").has(
        "/unmapped/rule",
        "files.deny (implicit: the host's message queues)",
    )]);
    // Untouched outside.
    assert_eq!(
        probe_outside_as_agent(&[
            &["shm-read", "4242"],
            &["shm-rm", "4242"],
            &["mq-take", "/kt-queue"]
        ]),
        vec!["OK"; 3],
        "outside the sandbox, after"
    );
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
        let rec = r.one_record("/dst_endpoint/name", path);
        assert_eq!(rec["unmapped"]["activity"], activity, "{rec:#}");
        // A unix socket: Network Activity with no IP version.
        assert_eq!(rec["class_uid"], 4001, "{rec:#}");
        assert!(
            rec["connection_info"]["protocol_ver_id"].is_null(),
            "{rec:#}"
        );
        assert_eq!(rec["unmapped"]["rule"], rule, "{rec:#}");
        assert_eq!(rec["unmapped"]["reason"], reason, "{rec:#}");
        assert_eq!(
            rec["actor"]["user"]["uid"],
            User::Agent.uid().to_string(),
            "{rec:#}"
        );
    }
    // The listening peer is named where the kernel knows it.
    let rec = r.one_record("/dst_endpoint/name", &srv);
    assert_eq!(
        rec["unmapped"]["peer"]["pid"],
        std::process::id(),
        "{rec:#}"
    );
    assert_eq!(r.audit.len(), 4, "{:#?}", r.audit);

    // The built-in policy refuses the same peers.
    let r = probe_as_agent(&d, None, &ops[..3]);
    r.expect(&format!("unix-connect {srv}"), "EACCES");
    r.expect(&format!("unix-send {dgram}"), "EACCES");
    r.expect("unix-connect @sandbox-kt-outside", "EACCES");
}

/// First readable address of the program `exe` mapped into a process (hex). Waits for
/// its exec to finish: until then the maps are those of the forking test process, and an
/// address taken from them is gone once the exec replaces them.
fn readable_addr(pid: u32, exe: &std::path::Path) -> String {
    let name = exe.file_name().unwrap().to_str().unwrap();
    for _ in 0..500 {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
        let found = maps.lines().find(|l| {
            let mut f = l.split_whitespace();
            let perms = f.nth(1).unwrap_or("");
            perms.starts_with('r') && f.nth(3).is_some_and(|p| p.ends_with(&format!("/{name}")))
        });
        if let Some(l) = found {
            return l.split('-').next().unwrap().to_owned();
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{pid} never mapped {name}");
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
        .uid(User::Agent.uid())
        .gid(User::Agent.uid())
        .env("API_TOKEN", "secret")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    let addr = readable_addr(target.id(), &b.probe);
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
    let recs = num_records(&r, "/process/pid", target_pid);
    let activities: Vec<&str> = recs
        .iter()
        .filter_map(|v| v["unmapped"]["activity"].as_str())
        .collect();
    // Routes with the same mode (attach, `process_vm_readv`, `pidfd_getfd`) from one
    // process within a second may be one record with a count: count denials, not records.
    let ptrace_denials: u64 = recs
        .iter()
        .filter(|v| v["unmapped"]["activity"] == "ptrace")
        .map(|v| v["count"].as_u64().unwrap_or(1))
        .sum();
    assert_eq!(
        ptrace_denials, 3,
        "one ptrace denial per route: {:#?}",
        r.audit
    );
    // `mem` and `environ` are refused at the open, before the kernel's ptrace check: the
    // process's entries in /proc are not the sandbox's (`procfs.rs`).
    for entry in ["mem", "environ"] {
        let rec = r.one_record("/file/path", &format!("/proc/{pid}/{entry}"));
        assert_eq!(rec["unmapped"]["reason"], "outside_scope", "{rec:#}");
    }
    assert!(activities.contains(&"task"), "{activities:?}");
    for rec in &recs {
        assert_eq!(rec["unmapped"]["reason"], "outside_scope", "{rec:#}");
    }
    // A signal: denied, recorded, and the target still runs.
    let r = probe_as_agent(&d, Some("version: 1\n"), &[&["kill", &pid, "9"]]);
    r.expect(&format!("kill {pid} 9"), "EPERM");
    let rec = &num_records(&r, "/process/pid", target_pid)[0];
    assert_eq!(rec["unmapped"]["activity"], "signal", "{rec:#}");
    assert_eq!(rec["unmapped"]["signal"], 9, "{rec:#}");
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

/// A file's owner gets its `SIGIO` (or the `F_SETSIG` signal) from the kernel, past the
/// signal checks `kill` passes: the command may own its files itself, never name another
/// process (`F_SETOWN`, `F_SETOWN_EX`, `FIOSETOWN`, `SIOCSPGRP`). Otherwise any process
/// of its user (of every user, for a root command: `SIGRTMIN+4` to PID 1 powers the host
/// off) could be signalled. The agent user; the route shown outside first (the target
/// dies).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn signals_through_a_files_owner_stay_inside() {
    let d = agent_dir("sigio");
    let b = bins();
    let target = || {
        Command::new(&b.probe)
            .args(["sleep", "600000"])
            .uid(User::Agent.uid())
            .gid(User::Agent.gid())
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut first = target();
    let pid = first.id().to_string();
    assert_eq!(
        probe_outside_as_agent(&[&["sigio-to", &pid, "15"]]),
        vec!["OK"],
        "outside the sandbox"
    );
    let status = first.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(15),
        "outside, the owner's signal ended the target: {status:?}"
    );
    let mut target = target();
    let pid = target.id().to_string();
    let r = probe_as_agent(
        &d,
        None,
        &[
            &["sigio-to", &pid, "15"],
            &["sigio-ex", &pid, "15"],
            &["fiosetown", &pid, "15"],
            &["siocspgrp", &pid, "15"],
            &["sigio-to", "self", "28"],
        ],
    );
    r.expect(&format!("sigio-to {pid} 15"), "EPERM");
    r.expect(&format!("sigio-ex {pid} 15"), "EPERM");
    r.expect(&format!("fiosetown {pid} 15"), "EPERM");
    r.expect(&format!("siocspgrp {pid} 15"), "EPERM");
    // Its own SIGIO (here SIGWINCH, which nothing minds) is the command's.
    r.expect("sigio-to self 28", "OK");
    assert!(
        target.try_wait().unwrap().is_none(),
        "the target was signalled"
    );
    r.check_records(&[
        rec("/process/pid", pid.as_str())
            .has("/unmapped/activity", "signal")
            .has("/unmapped/reason", "file_owner"),
        rec("/unmapped/reason", "file_owner").count(4),
    ]);
    target.kill().unwrap();
    let _ = target.wait();
    async_io_on_terminals(&d);
}

/// The terminal half of [`signals_through_a_files_owner_stay_inside`].
fn async_io_on_terminals(d: &Path) {
    // A terminal makes its foreground process group the owner itself when asynchronous
    // I/O is turned on: the user's terminal (`--terminal direct`, where that group may be
    // the user's shell) refuses it; a pty the command makes, and sandbox's own pty (the
    // default), are the command's. `FIOASYNC` is refused whatever the file.
    let term = UserTerminal::open(24, 80);
    assert_eq!(
        probe_outside_as_agent(&[&["async-path", &term.path], &["async-newpty"]]),
        vec!["OK"; 2],
        "outside the sandbox"
    );
    let policy = trusted_dir(d).join("sigio-policy.yaml");
    write(&policy, "name: sigio\n");
    let audit = trusted_dir(d).join("sigio-audit.jsonl");
    let (policy, audit) = (policy.display().to_string(), audit.display().to_string());
    let probe = bins().probe.display().to_string();
    let args = |mode: &'static str| {
        vec![
            "run",
            "--terminal",
            mode,
            "--audit-log",
            audit.as_str(),
            "--policy",
            policy.as_str(),
            "--",
            probe.as_str(),
            "async-fd",
            "0",
            "::",
            "fioasync-fd",
            "0",
            "::",
            "async-newpty",
        ]
    };
    for (mode, want, denials) in [
        // Denials: the `FIOASYNC` that turns it off again is refused too.
        ("direct", ["EPERM", "EPERM", "OK"], 3),
        ("pty", ["OK", "EPERM", "OK"], 2),
    ] {
        let _ = std::fs::remove_file(&audit);
        let (out, shown) = term.run(d, &args(mode), "", false);
        let said = String::from_utf8_lossy(&out.stdout);
        for (op, want) in ["async-fd 0", "fioasync-fd 0", "async-newpty"]
            .iter()
            .zip(want)
        {
            let line = format!("PROBE {op} -> {want}");
            assert!(
                said.contains(&line) || shown.contains(&line),
                "{mode}: {op}: expected {want}:\n{said}\n{shown}"
            );
        }
        // Each refusal has its record (the log is made anew by every run).
        // Identical denials may be one record with a count: count denials.
        let owners: u64 = read_audit(Path::new(&audit))
            .iter()
            .filter(|r| r.pointer("/unmapped/reason").and_then(Value::as_str) == Some("file_owner"))
            .map(|r| r["count"].as_u64().unwrap_or(1))
            .sum();
        assert_eq!(owners, denials, "{mode}: file_owner records");
    }
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn other_processes_proc_entries_are_refused() {
    let d = agent_dir("procfs");
    let b = bins();
    // Another program of the same user, with a secret on its command line.
    let mut target = Command::new(&b.probe)
        .args(["sleep", "600000", "--token=s3cret"])
        .uid(User::Agent.uid())
        .gid(User::Agent.uid())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    let at = |entry: &str| format!("/proc/{pid}/{entry}");
    let recorded = [
        at("cmdline"),
        format!("/proc/{pid}/task/{pid}/cmdline"),
        at("mountinfo"),
        // Its network namespace's files (no pid of their own: judged by their directory).
        at("net/tcp"),
        at("net/unix"),
        at("net/dev_snmp6"),
        format!("/proc/{pid}"),
        "/proc/1/cmdline".to_owned(),
    ];
    let quiet = [at("stat"), at("status")];
    let ops: Vec<[&str; 3]> = recorded
        .iter()
        .chain(&quiet)
        .map(|p| ["open", p.as_str(), "r"])
        .collect();
    let ops: Vec<&[&str]> = ops.iter().map(<[&str; 3]>::as_slice).collect();
    assert_eq!(
        probe_outside_as_agent(&ops),
        vec!["OK"; ops.len()],
        "outside the sandbox"
    );
    let mut inside = ops.clone();
    // Its own entries and the rest of /proc stay readable.
    let own: &[&[&str]] = &[
        &["open", "/proc/self/cmdline", "r"],
        &["open", "/proc/self/stat", "r"],
        &["open", "/proc/thread-self/status", "r"],
        &["open", "/proc/meminfo", "r"],
    ];
    inside.extend_from_slice(own);
    let r = probe_as_agent(&d, Some("version: 1\n"), &inside);
    for p in recorded.iter().chain(&quiet) {
        r.expect(&format!("open {p} r"), "EACCES");
    }
    for op in own {
        r.expect(&op.join(" "), "OK");
    }
    for p in &recorded {
        let rec = r.one_record("/file/path", p);
        assert_eq!(rec["unmapped"]["reason"], "outside_scope", "{rec:#}");
        assert_eq!(
            rec["unmapped"]["rule"], "(process outside the sandbox)",
            "{rec:#}"
        );
    }
    for p in &quiet {
        assert!(
            r.records("/file/path", p).is_empty(),
            "a lister's read is refused without a record: {:#?}",
            r.audit
        );
    }
    // Inside the sandbox, processes read each other's entries as before.
    let script = format!(
        "{p} sleep 600000 & c=$!; {p} open /proc/$c/cmdline r :: open /proc/$c/stat r :: \
         open /proc/$c/task/$c/status r; kill $c",
        p = b.probe.display()
    );
    let r = run_as_agent(&d, Some("version: 1\n"), &["/bin/sh", "-c", &script]);
    let answers: Vec<&str> = r
        .stdout
        .lines()
        .filter(|l| l.starts_with("PROBE open /proc/"))
        .collect();
    assert_eq!(answers.len(), 3, "{}\n{}", r.stdout, r.stderr);
    assert!(
        answers.iter().all(|l| l.ends_with("-> OK")),
        "inside the sandbox:\n{}\n{}",
        r.stdout,
        r.stderr
    );
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
    let rec = r.one_record("/unmapped/activity", "ioctl");
    assert_eq!(rec["unmapped"]["ioctl_cmd"], 0x5412, "{rec:#}");
    assert_eq!(rec["unmapped"]["reason"], "tty_injection", "{rec:#}");

    // The user's terminal: sandbox run in a session whose controlling terminal is a pty
    // (as from an interactive shell). The command runs in a session of its own on a pty
    // of sandbox's; the user's terminal takes no input from it, and is not its to open.
    let term = UserTerminal::open(24, 80);
    let policy = trusted_dir(&d).join("tty-policy.yaml");
    write(&policy, "name: tty\n");
    let audit = trusted_dir(&d).join("tty-audit.jsonl");
    let probe = bins().probe.display().to_string();
    let (out, shown) = term.run(
        &d,
        &[
            "run",
            "--audit-log",
            &audit.display().to_string(),
            "--policy",
            &policy.display().to_string(),
            "--",
            &probe,
            "tiocsti",
            "/dev/stdin",
            "::",
            "tiocsti",
            &term.path,
        ],
        "",
        false,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("PROBE tiocsti /dev/stdin -> EPERM"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("PROBE tiocsti {} -> OPEN EACCES", term.path)),
        "{stdout}"
    );
    // Nothing was queued: the terminal shows no 'x'.
    assert!(
        !shown.contains('x'),
        "input reached the terminal: {shown:?}"
    );
}

/// Terminals of the host that were not made in the sandbox (another shell of the same
/// user) are refused to the command, by identity; ptys it makes itself are its own.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn terminals_not_made_in_the_sandbox_are_refused() {
    let d = agent_dir("pts");
    // Another terminal of the same user, which sandbox knows nothing of: another tab's
    // shell, the terminal a tmux runs in.
    let other = UserTerminal::open(24, 80);
    let write_other = ["open", other.path.as_str(), "w"];
    let read_other = ["open", other.path.as_str(), "r"];
    // Its mode (a `chmod` would open it to others' writes) and times are its owner's too.
    let chmod_other = ["chmod", other.path.as_str()];
    let touch_other = ["utimes", other.path.as_str()];
    let ops: &[&[&str]] = &[
        &write_other,
        &read_other,
        &chmod_other,
        &touch_other,
        &["pty-made"],
        &["pty-peer"],
    ];
    assert_eq!(
        probe_outside_as_agent(ops),
        vec!["OK"; 6],
        "outside the sandbox"
    );
    let r = probe_as_agent(&d, Some("version: 1\n"), ops);
    r.expect(&write_other.join(" "), "EACCES");
    r.expect(&read_other.join(" "), "EACCES");
    r.expect(&chmod_other.join(" "), "EACCES");
    r.expect(&touch_other.join(" "), "EACCES");
    // Terminals made in the sandbox (what tmux, `script` and editors do) are its own.
    r.expect("pty-made", "OK");
    r.expect("pty-peer", "OK");
    let recs = r.records("/file/path", &other.path);
    assert_eq!(recs.len(), 4, "{:#?}", r.audit);
    for rec in recs {
        assert_eq!(rec["unmapped"]["reason"], "foreign_terminal", "{rec:#}");
        assert_eq!(
            rec["unmapped"]["rule"], "(a terminal that is not the command's own)",
            "{rec:#}"
        );
    }
    // A console login's terminal (login makes its virtual console the user's) and what it
    // shows: read, its keys; written, its screen.
    for dev in ["/dev/tty2", "/dev/vcs1"] {
        std::os::unix::fs::chown(dev, Some(User::Agent.uid()), None).unwrap();
    }
    let console: &[&[&str]] = &[&["open", "/dev/tty2", "rw"], &["open", "/dev/vcs1", "r"]];
    assert_eq!(probe_outside_as_agent(console), vec!["OK"; 2], "outside");
    let r = probe_as_agent(&d, Some("version: 1\n"), console);
    r.expect("open /dev/tty2 rw", "EACCES");
    r.expect("open /dev/vcs1 r", "EACCES");
    assert_eq!(
        r.records("/unmapped/reason", "foreign_terminal").len(),
        2,
        "{:#?}",
        r.audit
    );
    // By identity, not by name: a link to it elsewhere is the same terminal.
    let link = d.join("other-tty");
    std::os::unix::fs::symlink(&other.path, &link).unwrap();
    let link = link.display().to_string();
    let r = probe_as_agent(&d, Some("version: 1\n"), &[&["open", &link, "w"]]);
    r.expect(&format!("open {link} w"), "EACCES");
}

/// Another program of the agent's user makes a segment (`other`), a directory of segments
/// (`dir`, with `in_dir` in it) and a symlink (`link`) in `/dev/shm`; every route the
/// sandbox test then tries works outside the sandbox.
fn other_programs_shared_memory(other: &str, dir: &str, in_dir: &str, link: &str) {
    let _ = std::fs::remove_file(other);
    let _ = std::fs::remove_file(link);
    let _ = std::fs::remove_dir_all(dir);
    assert_eq!(
        probe_outside_as_agent(&[
            &["open", other, "creat"],
            &["open", other, "r"],
            &["open", other, "rw"],
            &["link", other, "/dev/shm/kt-other-2"],
            &["unlink", "/dev/shm/kt-other-2"],
            &["rename", other, "/dev/shm/kt-other-3"],
            &["rename", "/dev/shm/kt-other-3", other],
            &["mkdir", dir],
            &["open", in_dir, "creat"],
            &["open", in_dir, "r"],
            &["open", "/dev/shm/kt-other-dir/new", "creat"],
            &["unlink", "/dev/shm/kt-other-dir/new"],
            &["rename", dir, "/dev/shm/kt-other-dir-2"],
            &["rename", "/dev/shm/kt-other-dir-2", dir],
            &["symlink", other, link],
            &["unlink", link],
            &["symlink", other, link],
        ]),
        vec!["OK"; 17],
        "outside the sandbox"
    );
}

/// POSIX shared memory and semaphores (`/dev/shm`, writable under the built-in policy):
/// a segment another program of the same user made is refused to the command, opened in
/// any mode or as a name to remove, rename, replace or link; so are its directory (and a
/// name made there) and its symlink; what the command makes there is its own (made,
/// reopened, renamed, linked as `sem_open` does, removed; a directory and its contents).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn shared_memory_not_made_in_the_sandbox_is_refused() {
    let d = agent_dir("shm");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(
        mounts
            .lines()
            .any(|l| l.starts_with("tmpfs /dev/shm tmpfs ")),
        "the guest mounts a tmpfs at /dev/shm: {mounts}"
    );
    let other = "/dev/shm/kt-other-seg";
    let (dir, in_dir, link) = (
        "/dev/shm/kt-other-dir",
        "/dev/shm/kt-other-dir/seg",
        "/dev/shm/kt-other-link",
    );
    other_programs_shared_memory(other, dir, in_dir, link);
    let mine = "/dev/shm/kt-mine";
    let r = probe_as_agent(
        &d,
        None,
        &[
            &["open", other, "r"],
            &["open", other, "w"],
            &["open", other, "rtrunc"],
            &["unlink", other],
            &["rename", other, "/dev/shm/kt-moved"],
            &["link", other, "/dev/shm/kt-linked"],
            // The command's own: made, reopened, renamed, linked (what `sem_open` does
            // with its temporary name), removed.
            &["open", mine, "creat"],
            &["open", mine, "rw"],
            &["rename", mine, "/dev/shm/kt-mine-2"],
            &["link", "/dev/shm/kt-mine-2", "/dev/shm/kt-mine-3"],
            &["open", "/dev/shm/kt-mine-3", "r"],
            &["unlink", "/dev/shm/kt-mine-3"],
            // Its own put in the other's place would remove the other's.
            &["rename", "/dev/shm/kt-mine-2", other],
            &["unlink", "/dev/shm/kt-mine-2"],
            // Another program's directory: its segments, a name made or moved there, the
            // directory itself moved; its symlink removed.
            &["open", in_dir, "r"],
            &["open", "/dev/shm/kt-other-dir/new", "creat"],
            &["rename", dir, "/dev/shm/kt-other-dir-2"],
            &["unlink", link],
            // A directory of its own, and what it makes there.
            &["mkdir", "/dev/shm/kt-my-dir"],
            &["open", "/dev/shm/kt-my-dir/seg", "creat"],
            &["open", "/dev/shm/kt-my-dir/seg", "r"],
            &["unlink", "/dev/shm/kt-my-dir/seg"],
            &["rmdir", "/dev/shm/kt-my-dir"],
        ],
    );
    for op in [
        format!("open {other} r"),
        format!("open {other} w"),
        format!("open {other} rtrunc"),
        format!("unlink {other}"),
        format!("rename {other} /dev/shm/kt-moved"),
        format!("link {other} /dev/shm/kt-linked"),
        format!("rename /dev/shm/kt-mine-2 {other}"),
        format!("open {in_dir} r"),
        "open /dev/shm/kt-other-dir/new creat".to_owned(),
        format!("rename {dir} /dev/shm/kt-other-dir-2"),
        format!("unlink {link}"),
    ] {
        r.expect(&op, "EACCES");
    }
    for op in [
        format!("open {mine} creat"),
        format!("open {mine} rw"),
        format!("rename {mine} /dev/shm/kt-mine-2"),
        "link /dev/shm/kt-mine-2 /dev/shm/kt-mine-3".to_owned(),
        "open /dev/shm/kt-mine-3 r".to_owned(),
        "unlink /dev/shm/kt-mine-3".to_owned(),
        "unlink /dev/shm/kt-mine-2".to_owned(),
        "mkdir /dev/shm/kt-my-dir".to_owned(),
        "open /dev/shm/kt-my-dir/seg creat".to_owned(),
        "open /dev/shm/kt-my-dir/seg r".to_owned(),
        "unlink /dev/shm/kt-my-dir/seg".to_owned(),
        "rmdir /dev/shm/kt-my-dir".to_owned(),
    ] {
        r.expect(&op, "OK");
    }
    // One denial each, in records or counts of identical ones (the opens of one name by
    // one process aggregate), every one of the other program's names.
    let recs = r.records("/unmapped/reason", "foreign_shared_memory");
    let denials: u64 = recs.iter().map(|v| v["count"].as_u64().unwrap_or(1)).sum();
    assert_eq!(denials, 11, "{:#?}", r.audit);
    for rec in &recs {
        assert_eq!(
            rec["unmapped"]["rule"], "(shared memory that is not the command's own: /dev/shm)",
            "{rec:#}"
        );
        let path = rec["file"]["path"].as_str().unwrap_or_default();
        assert!(path.starts_with("/dev/shm/kt-other"), "{rec:#}");
    }
    // Untouched: still there, under their names, for their program.
    assert_eq!(
        probe_outside_as_agent(&[
            &["open", other, "r"],
            &["open", in_dir, "r"],
            &["unlink", link],
            &["unlink", in_dir],
            &["rmdir", dir],
            &["unlink", other],
        ]),
        vec!["OK"; 6],
        "outside the sandbox, after"
    );
}

/// `sandbox attach` binds processes that already run: the terminals they hold (a service
/// on a console, an agent started in a terminal) stay theirs to open by name, also after a
/// reload; the other terminals are refused to them. So do the namespaces they are in when
/// bound (a service's own, bound on a file as `ip netns` does) against another's.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn attach_keeps_the_terminals_and_namespaces_of_its_processes() {
    use std::io::BufRead as _;
    let d = workdir("attach-tty");
    let held = UserTerminal::open(24, 80);
    let other = UserTerminal::open(24, 80);
    let cg = Path::new("/sys/fs/cgroup/svc-tty");
    let _ = std::fs::create_dir(cg);
    let policy = d.join("policy.yaml");
    write(&policy, "name: tty\n");
    // The service's process: its input is the held terminal, its UTS namespace its own
    // (the probe's `ns-hold`); another process outside, in a namespace of its own too.
    let ns_hold = |c: &mut Command| {
        let mut child = c.stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "PROBE ns-hold -> READY", "a holder");
        child
    };
    let mut holder = ns_hold(
        Command::new("/bin/sh")
            .arg("-c")
            .arg(format!(
                "echo $$ > {}/cgroup.procs && exec {} ns-hold",
                cg.display(),
                bins().probe.display()
            ))
            .stdin(std::fs::File::open(&held.path).unwrap()),
    );
    let mut outsider = ns_hold(Command::new(bins().probe).arg("ns-hold"));
    let bind = |name: &str, pid: u32| {
        let bound = d.join(name);
        write(&bound, "");
        let guard = Bind::mount(Path::new(&format!("/proc/{pid}/ns/uts")), &bound);
        (bound.display().to_string(), guard)
    };
    let (svc_uts, _svc_guard) = bind("svc-uts", holder.id());
    let (other_uts, _other_guard) = bind("other-uts", outsider.id());
    let in_service = |path: &str, how: &str| probe_in_cgroup(cg, &["open", path, how]);
    let check = |when: &str, other_terminal: &str, other_namespace: &str| {
        assert_eq!(in_service(&held.path, "w"), OK, "the held terminal, {when}");
        assert_eq!(in_service(&other.path, "w"), other_terminal, "{when}");
        assert_eq!(
            in_service(&svc_uts, "r"),
            OK,
            "the service's namespace, {when}"
        );
        assert_eq!(in_service(&other_uts, "r"), other_namespace, "{when}");
    };
    // The route: all open before the cgroup is bound.
    check("before", OK, OK);
    let mut attach = Attached::start("svc-tty", &policy, &d.join("audit.jsonl"));
    attach.wait_line("enforcing policy 'tty'");
    check("bound", EACCES, EACCES);
    attach.signal(libc::SIGHUP);
    attach.wait_line("reloaded");
    check("after a reload", EACCES, EACCES);
    attach.signal(libc::SIGTERM);
    attach.wait_line("no longer confined");
    assert!(attach.child.wait().unwrap().success());
    for c in [&mut holder, &mut outsider] {
        let _ = c.kill();
        let _ = c.wait();
    }
    let _ = std::fs::remove_dir(cg);
}

/// `sandbox attach` binds processes that already run: the shared-memory segments they hold
/// (open, or only mapped) stay theirs to open by name, also after a reload; another
/// program's segment is refused to them.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn attach_keeps_the_shared_memory_its_processes_hold() {
    let d = workdir("attach-shm");
    let (held, mapped, other) = (
        "/dev/shm/kt-svc-held",
        "/dev/shm/kt-svc-mapped",
        "/dev/shm/kt-svc-other",
    );
    for f in [held, mapped, other] {
        std::fs::write(f, vec![0u8; 4096]).unwrap();
    }
    let cg = Path::new("/sys/fs/cgroup/svc-shm");
    let _ = std::fs::create_dir(cg);
    let policy = d.join("policy.yaml");
    write(&policy, "name: shm\n");
    // The service's process: `held` open on its stdin, `mapped` mapped and its descriptor
    // closed (the probe's `map-hold`, which then waits).
    let mut holder = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} map-hold {mapped}",
            cg.display(),
            bins().probe.display()
        ))
        .stdin(std::fs::File::open(held).unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.contains("mapped"), "the holder: {line}");
    let in_service = |f: &str| probe_in_cgroup(cg, &["open", f, "r"]);
    // The route: all open before the cgroup is bound.
    for f in [held, mapped, other] {
        assert_eq!(in_service(f), OK, "{f} before");
    }
    let mut attach = Attached::start("svc-shm", &policy, &d.join("audit.jsonl"));
    attach.wait_line("enforcing policy 'shm'");
    assert_eq!(in_service(held), OK, "the segment the service holds open");
    assert_eq!(in_service(mapped), OK, "the segment the service has mapped");
    assert_eq!(in_service(other), EACCES);
    // A process moved in later holding the other segment (or sent its descriptor): it
    // keeps its descriptor, and the cgroup gets no name for it at the reload.
    let mut late = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec sleep 1000",
            cg.display()
        ))
        .stdin(std::fs::File::open(other).unwrap())
        .spawn()
        .unwrap();
    attach.signal(libc::SIGHUP);
    attach.wait_line("reloaded");
    assert_eq!(in_service(held), OK, "after a reload");
    assert_eq!(in_service(mapped), OK, "after a reload");
    assert_eq!(in_service(other), EACCES, "held only since after the bind");
    let _ = late.kill();
    let _ = late.wait();
    attach.signal(libc::SIGTERM);
    attach.wait_line("no longer confined");
    assert!(attach.child.wait().unwrap().success());
    let _ = holder.kill();
    let _ = holder.wait();
    let _ = std::fs::remove_dir(cg);
    for f in [held, mapped, other] {
        let _ = std::fs::remove_file(f);
    }
}

/// The audit log of [`the_command_writes_to_a_pty_of_its_own_filtered`]'s pty run: the
/// clipboard write recorded once, the user's terminal refused by its implicit rule.
fn pty_run_audited(audit: &Path, terminal: &str) {
    let log = read_audit(audit);
    // The clipboard write is in the audit log too, once.
    let filtered: Vec<&Value> = log
        .iter()
        .filter(|r| r["unmapped"]["activity"] == "terminal_output")
        .collect();
    assert_eq!(filtered.len(), 1, "{log:#?}");
    assert!(
        filtered[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("clipboard (OSC 52)")),
        "{:#}",
        filtered[0]
    );
    assert_eq!(filtered[0]["action"], "Denied", "{:#}", filtered[0]);
    let denied: Vec<Value> = log
        .into_iter()
        .filter(|r| r["file"]["path"] == terminal)
        .collect();
    assert_eq!(denied.len(), 1, "{denied:#?}");
    assert_eq!(
        denied[0]["unmapped"]["rule"],
        "files.deny (implicit: the terminal sandbox was started from)",
        "{:#}",
        denied[0]
    );
}

/// The command's terminal is a pty of sandbox's own: what the command writes reaches the
/// user's terminal filtered (no clipboard write), keys typed reach the command, the window
/// size is the terminal's, and the user's terminal itself cannot be opened by path. With
/// `--terminal direct` (the terminal itself, as before) the same command sets the
/// clipboard and opens the terminal.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn the_command_writes_to_a_pty_of_its_own_filtered() {
    let d = agent_dir("ptyrelay");
    let term = UserTerminal::open(33, 99);
    let policy = trusted_dir(&d).join("pty-policy.yaml");
    write(&policy, "name: pty\n");
    let audit = trusted_dir(&d).join("pty-audit.jsonl");
    let script = format!(
        "printf 'before\\033]52;c;cHduZWQ=\\007after\\n'; stty size; tty; read line; \
         echo \"got:$line\"; if printf x > {t}; then echo opened; else echo refused; fi; \
         exit 7",
        t = term.path
    );
    let (audit_s, policy_s) = (audit.display().to_string(), policy.display().to_string());
    let args = |mode: &'static str| {
        vec![
            "run",
            "--terminal",
            mode,
            "--audit-log",
            audit_s.as_str(),
            "--policy",
            policy_s.as_str(),
            "--",
            "/bin/sh",
            "-c",
            script.as_str(),
        ]
    };
    // The terminal itself: the clipboard sequence reaches it, and it opens by path.
    let (out, shown) = term.run(&d, &args("direct"), "hello\r", true);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{shown}\n{said}");
    assert!(
        shown.contains("before\x1b]52;c;cHduZWQ=\x07after"),
        "{shown:?}"
    );
    assert!(shown.contains("opened"), "{shown:?}");
    assert!(shown.contains("got:hello"), "{shown:?}");
    // A pty of sandbox's own (the default).
    let mode = term.local_flags();
    let (out, shown) = term.run(&d, &args("pty"), "hello\r", true);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{shown:?}\n{said}");
    assert!(shown.contains("beforeafter"), "{shown:?}");
    assert!(!shown.contains("]52;"), "{shown:?}");
    assert!(
        said.contains("sets the clipboard (OSC 52) to the terminal: not passed on"),
        "{said}"
    );
    assert!(shown.contains("33 99"), "the window size: {shown:?}");
    assert!(shown.contains("got:hello"), "the keys typed: {shown:?}");
    assert!(shown.contains("refused"), "{shown:?}");
    let own = shown
        .lines()
        .find(|l| l.starts_with("/dev/pts/"))
        .unwrap_or_else(|| panic!("no tty line: {shown:?}"));
    assert_ne!(
        own.trim(),
        term.path,
        "the command's terminal is sandbox's pty"
    );
    // The terminal has its mode back.
    assert_eq!(term.local_flags(), mode);
    pty_run_audited(&audit, &term.path);
    // `sudo` with `use_pty` runs sandbox on a pty of its own and keeps the user's terminal
    // in its other process: the terminals of the processes sandbox was started from are
    // denied too. Here a shell holding another terminal starts sandbox on this one (and
    // waits for it: `sh -c 'cmd'` may exec its last command in place of itself).
    let outer = UserTerminal::open(24, 80);
    let b = bins();
    let wrapped = format!(
        "{} run --audit-log {audit_s} --policy {policy_s} -- /bin/sh -c \
         'if printf x > {o}; then echo opened; else echo refused; fi' <{t} >{t} & wait $!",
        b.sandbox.display(),
        o = outer.path,
        t = term.path,
    );
    let (out, shown) = term.run_wrapped(&d, &wrapped, &outer);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{shown:?}\n{said}");
    assert!(shown.contains("refused"), "{shown:?}");
    assert!(
        read_audit(&audit)
            .iter()
            .any(|r| r["file"]["path"] == outer.path.as_str()),
        "no record of the outer terminal"
    );
}

/// A pty standing for the user's terminal: its slave is the controlling terminal of the
/// session sandbox is started in (as from an interactive shell), in the foreground.
struct UserTerminal {
    master: std::os::fd::OwnedFd,
    path: String,
}

impl UserTerminal {
    fn open(rows: u16, cols: u16) -> Self {
        use std::os::fd::FromRawFd;
        // SAFETY: plain libc calls on a pty we own.
        let (master, path) = unsafe {
            let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
            assert!(m >= 0 && libc::grantpt(m) == 0 && libc::unlockpt(m) == 0);
            let name = std::ffi::CStr::from_ptr(libc::ptsname(m))
                .to_str()
                .unwrap()
                .to_owned();
            let size = libc::winsize {
                ws_row: rows,
                ws_col: cols,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            assert_eq!(libc::ioctl(m, libc::TIOCSWINSZ, &raw const size), 0);
            (std::os::fd::OwnedFd::from_raw_fd(m), name)
        };
        std::os::unix::fs::chown(&path, Some(User::Agent.uid()), None).unwrap();
        Self { master, path }
    }

    /// The terminal's mode flags (`c_lflag`), as a shell would find them.
    fn local_flags(&self) -> libc::tcflag_t {
        let f = std::fs::File::open(&self.path).unwrap();
        // SAFETY: termios is plain data filled by the call.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(
                libc::tcgetattr(std::os::fd::AsRawFd::as_raw_fd(&f), &raw mut t),
                0
            );
            t.c_lflag
        }
    }

    /// Runs sandbox with `args` as `sudo` from the agent user would, in a new session
    /// whose controlling terminal is this one, with stdin the terminal and stdout a pipe
    /// (`stdout_too`: the terminal as well); `typed` is typed once the command runs.
    /// [`UserTerminal::run`] of `sh -c SCRIPT` (which starts sandbox itself on this
    /// terminal), the shell holding `outer` as its 0, 1 and 2, as `sudo` with `use_pty`
    /// holds the user's terminal while sandbox runs on sudo's pty.
    fn run_wrapped(
        &self,
        dir: &Path,
        script: &str,
        outer: &UserTerminal,
    ) -> (std::process::Output, String) {
        let open = |p: &str| {
            std::fs::File::options()
                .read(true)
                .write(true)
                .open(p)
                .unwrap()
        };
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script])
            .env("SUDO_UID", "1000")
            .env("SUDO_GID", "1000")
            .current_dir(dir)
            .stdin(open(&outer.path))
            .stdout(open(&outer.path))
            .stderr(Stdio::piped());
        self.spawn_and_read(c, "")
    }

    /// Returns sandbox's output and what the terminal showed.
    fn run(
        &self,
        dir: &Path,
        args: &[&str],
        typed: &str,
        stdout_too: bool,
    ) -> (std::process::Output, String) {
        let open = || {
            std::fs::File::options()
                .read(true)
                .write(true)
                .open(&self.path)
                .unwrap()
        };
        let mut c = Command::new(&bins().sandbox);
        c.args(args)
            .env("SUDO_UID", "1000")
            .env("SUDO_GID", "1000")
            .current_dir(dir)
            .stdin(open())
            .stderr(Stdio::piped());
        if stdout_too {
            c.stdout(open());
        } else {
            c.stdout(Stdio::piped());
        }
        self.spawn_and_read(c, typed)
    }

    /// Spawns `c` in a new session whose controlling terminal is this one, types `typed`
    /// once a sandbox run's command runs, and collects what the terminal showed.
    fn spawn_and_read(&self, mut c: Command, typed: &str) -> (std::process::Output, String) {
        use std::os::fd::AsRawFd;
        let slave_c = std::ffi::CString::new(self.path.clone()).unwrap();
        // SAFETY: between fork and exec: setsid and TIOCSCTTY make the pty the session's
        // controlling terminal, as a login shell has it.
        unsafe {
            c.pre_exec(move || {
                libc::setsid();
                let fd = libc::open(slave_c.as_ptr(), libc::O_RDWR);
                libc::ioctl(fd, libc::TIOCSCTTY, 0);
                // Held open as 3 while the session's first process lives: a terminal
                // nobody has open reads as hung up (the reader would stop at once).
                if fd != 3 {
                    libc::dup2(fd, 3);
                    libc::close(fd);
                }
                Ok(())
            });
        }
        let child = c.spawn().unwrap();
        // The command keeps its copies of the slave until dropped.
        drop(c);
        // What the terminal shows, read until every holder of the slave is gone.
        let m = self.master.as_raw_fd();
        let reader = std::thread::spawn(move || {
            let mut shown = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                // SAFETY: reads into a live buffer from the master we own.
                let n = unsafe { libc::read(m, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    break;
                }
                shown.extend_from_slice(&buf[..n.cast_unsigned()]);
            }
            String::from_utf8_lossy(&shown).into_owned()
        });
        if !typed.is_empty() {
            wait_for_sandbox_run();
            std::thread::sleep(std::time::Duration::from_millis(500));
            // SAFETY: writes from a live slice to the master we own.
            let n = unsafe { libc::write(m, typed.as_ptr().cast(), typed.len()) };
            assert_eq!(n.cast_unsigned(), typed.len());
        }
        let out = child.wait_with_output().unwrap();
        // sandbox held the slave last: the reader sees EIO once it read everything.
        let shown = reader.join().unwrap();
        (out, shown)
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
    assert_eq!(rec["unmapped"]["rule"], "network.block_private", "{rec:#}");
    assert_eq!(
        rec["unmapped"]["rule_source"],
        format!("{host_ip} (an address of this host)"),
        "{rec:#}"
    );
    let rec = r.one_record("/dst_endpoint/ip", "127.0.0.1");
    assert_eq!(rec["unmapped"]["activity"], "send", "{rec:#}");
    let rec = r.one_record("/unmapped/activity", "socket");
    assert_eq!(rec["unmapped"]["socket"]["protocol"], 262, "{rec:#}");
    assert_eq!(rec["unmapped"]["rule"], "network.sockets", "{rec:#}");
    let listens: Vec<&Value> = r.records("/unmapped/activity", "listen");
    assert_eq!(listens.len(), 2, "{:#?}", r.audit);
    for l in listens {
        assert_eq!(l["src_endpoint"]["ip"], "0.0.0.0", "{l:#}");
        assert_eq!(l["unmapped"]["rule"], "network.listen", "{l:#}");
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

/// A TCP listener on every address of this host (`::`, IPv4 too) that accepts and drops
/// connections for the rest of the test: its port.
fn listener_everywhere() -> String {
    let tcp = std::net::TcpListener::bind(("::", 0)).unwrap();
    let port = tcp.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for c in tcp.incoming() {
            drop(c);
        }
    });
    port
}

/// An address the host gains while a sandbox runs (DHCP, SLAAC, a VPN coming up) reaches
/// the host's own services just like the ones it had at the start: it joins the private
/// set as soon as the kernel announces it.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn host_addresses_gained_while_running_are_private_too() {
    let d = agent_dir("netgained");
    let (v4, v6) = ("93.184.216.35", "2001:db8:feed::35");
    let ip = |op: &str, addr: &str, len: u8| {
        let _ = Command::new("ip")
            .args(["addr", op, &format!("{addr}/{len}"), "dev", "lo"])
            .status();
    };
    let port = listener_everywhere();
    let ops: &[&[&str]] = &[
        &["sleep", "2500"],
        &["connect", v4, &port],
        &["connect", v6, &port],
    ];
    // Outside, as the agent: the service answers on both new addresses.
    ip("add", v4, 32);
    ip("add", v6, 128);
    assert_eq!(
        probe_outside_as_agent(&ops[1..]),
        vec!["OK"; 2],
        "outside the sandbox"
    );
    ip("del", v4, 32);
    ip("del", v6, 128);
    // Inside: the addresses appear once the command runs.
    let adder = std::thread::spawn(move || {
        wait_for_sandbox_run();
        ip("add", v4, 32);
        ip("add", v6, 128);
    });
    let r = probe_as_agent(&d, Some("version: 1\n"), ops);
    adder.join().unwrap();
    ip("del", v4, 32);
    ip("del", v6, 128);
    r.expect(&format!("connect {v4}"), "EPERM");
    r.expect(&format!("connect {v6}"), "EPERM");
    for a in [v4, v6] {
        let rec = r.one_record("/dst_endpoint/ip", a);
        assert_eq!(rec["unmapped"]["rule"], "network.block_private", "{rec:#}");
        assert_eq!(
            rec["unmapped"]["rule_source"], "an address this host gained while sandbox ran",
            "{rec:#}"
        );
    }
}

/// What reaches this host is more than its addresses: an address given with a prefix on
/// `lo` makes the whole prefix local, and so does a `local` route (`AnyIP`). Every address
/// of such a prefix reaches the host's own services, so the prefix is private: one local
/// at the start, and one gained while the command runs (by address or by route).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn local_prefixes_of_the_host_are_private_too() {
    let d = agent_dir("netlocal");
    let ip = |args: &[&str]| {
        let ok = Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip {args:?}");
    };
    let (start, gained, route) = ("93.184.220.1/24", "93.184.221.1/24", "2001:db8:221::/64");
    let (v4_start, v4_gained, v6_gained) = ("93.184.220.77", "93.184.221.77", "2001:db8:221::77");
    let port = listener_everywhere();
    let ops: &[&[&str]] = &[
        &["sleep", "4000"],
        &["connect", v4_start, &port],
        &["connect", v4_gained, &port],
        &["connect", v6_gained, &port],
    ];
    // Outside, as the agent: the service answers on addresses no interface has.
    ip(&["addr", "add", start, "dev", "lo"]);
    ip(&["addr", "add", gained, "dev", "lo"]);
    ip(&["-6", "route", "add", "local", route, "dev", "lo"]);
    assert_eq!(
        probe_outside_as_agent(&ops[1..]),
        vec!["OK"; 3],
        "outside the sandbox"
    );
    ip(&["addr", "del", gained, "dev", "lo"]);
    ip(&["-6", "route", "del", "local", route, "dev", "lo"]);
    // Inside: one prefix local from the start, two gained once the command runs: by an
    // address, then (once that notice was read) by a route alone.
    let adder = std::thread::spawn(move || {
        wait_for_sandbox_run();
        ip(&["addr", "add", gained, "dev", "lo"]);
        std::thread::sleep(std::time::Duration::from_millis(1500));
        ip(&["-6", "route", "add", "local", route, "dev", "lo"]);
    });
    let r = probe_as_agent(&d, Some("version: 1\n"), ops);
    adder.join().unwrap();
    ip(&["addr", "del", start, "dev", "lo"]);
    ip(&["addr", "del", gained, "dev", "lo"]);
    ip(&["-6", "route", "del", "local", route, "dev", "lo"]);
    for addr in [v4_start, v4_gained, v6_gained] {
        r.expect(&format!("connect {addr}"), "EPERM");
        let rec = r.one_record("/dst_endpoint/ip", addr);
        assert_eq!(rec["unmapped"]["rule"], "network.block_private", "{rec:#}");
        let source = if addr == v4_start {
            "93.184.220.0/24 (local to this host)"
        } else {
            "an address this host gained while sandbox ran"
        };
        assert_eq!(rec["unmapped"]["rule_source"], source, "{rec:#}");
    }
}

/// The kernel's process events (the proc connector, netlink) report every fork, exec and
/// exit of the host, to any user from 6.6: the command gets no such socket, whatever the
/// policy's `network.sockets` (netlink is in the built-in one).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn process_events_of_the_host_stay_outside() {
    let d = agent_dir("proc-events");
    let version = kernel_version();
    let outside = probe_outside_as_agent(&[&["proc-events"]]);
    if version >= (6, 6) {
        assert_eq!(outside, vec!["OK"], "outside, as the agent");
    }
    let r = probe_as_agent(&d, None, &[&["proc-events"]]);
    r.expect("proc-events", "EACCES");
    let rec = r.one_record("/unmapped/activity", "socket");
    assert_eq!(rec["unmapped"]["socket"]["protocol"], 11, "{rec:#}");
    assert_eq!(rec["unmapped"]["reason"], "outside_scope", "{rec:#}");
}

/// Grants follow symlinks when a policy loads (`~/.gemini -> dotfiles/gemini`), so a
/// symlink the command left at a granted name would grant its target to the next run:
/// `ln -s ~/.bash_aliases ~/.gemini` today, `~/.bash_aliases` writable tomorrow. No symlink
/// is made at a literal grant's name, nor renamed or linked there; a directory is.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_symlink_never_moves_a_grant() {
    let d = agent_dir("grant-links");
    let home = User::Agent.home();
    let h = |n: &str| home.join(n).display().to_string();
    let target = h(".bash_aliases");
    // Staged on the home's file system, where the command may write: its cache.
    std::fs::create_dir_all(home.join(".cache")).unwrap();
    User::Agent.own(&home.join(".cache"));
    let staged = h(".cache/staged");
    for name in [".gemini", ".codex", ".aider", ".claude"] {
        let _ = std::fs::remove_dir_all(home.join(name));
        let _ = std::fs::remove_file(home.join(name));
    }
    // Outside, as the agent: each route puts a symlink at a granted name.
    // (A directory at the granted name swapped with a staged symlink: RENAME_EXCHANGE.)
    let outside = probe_outside_as_agent(&[
        &["symlink", &target, &h(".gemini")],
        &["symlink", &target, &staged],
        &["rename", &staged, &h(".codex")],
        &["symlink", &target, &staged],
        &["link", &staged, &h(".aider")],
        &["mkdir", &h(".claude")],
        &["rename-exchange", &h(".claude"), &staged],
    ]);
    assert_eq!(outside, vec!["OK"; 7], "outside the sandbox");
    for name in [".gemini", ".codex", ".aider", ".claude"] {
        assert!(home.join(name).is_symlink(), "outside: {name}");
        std::fs::remove_file(home.join(name)).unwrap();
    }
    std::fs::remove_dir(&staged).unwrap();
    std::fs::create_dir(home.join(".claude")).unwrap();
    User::Agent.own(&home.join(".claude"));
    let r = probe_as_agent(
        &d,
        None,
        &[
            &["symlink", &target, &h(".gemini")],
            &["symlink", &target, &staged],
            &["rename", &staged, &h(".codex")],
            &["link", &staged, &h(".aider")],
            &["rename-exchange", &h(".claude"), &staged],
            &["rename-exchange", &staged, &h(".claude")],
            &["mkdir", &h(".gemini")],
        ],
    );
    r.expect(
        &format!("rename-exchange {} {staged}", h(".claude")),
        "EACCES",
    );
    r.expect(
        &format!("rename-exchange {staged} {}", h(".claude")),
        "EACCES",
    );
    r.expect(&format!("symlink {target} {}", h(".gemini")), "EACCES");
    r.expect(&format!("symlink {target} {staged}"), "OK");
    r.expect(&format!("rename {staged} {}", h(".codex")), "EACCES");
    r.expect(&format!("link {staged} {}", h(".aider")), "EACCES");
    r.expect(&format!("mkdir {}", h(".gemini")), "OK");
    for name in [".gemini", ".codex", ".aider", ".claude"] {
        assert!(!home.join(name).is_symlink(), "inside: {name}");
    }
    let recs = r.records("/unmapped/reason", "symlink_at_grant");
    assert_eq!(recs.len(), 5, "{:#?}", r.audit);
    for rec in recs {
        assert!(
            rec["unmapped"]["rule"]
                .as_str()
                .is_some_and(|r| r.starts_with("files.write[")),
            "{rec:#}"
        );
    }
    let _ = std::fs::remove_dir(home.join(".gemini"));
    let _ = std::fs::remove_dir(home.join(".claude"));
}

/// A user's namespaces outside the sandbox (a rootless container's, a Flatpak
/// application's, made by the agent user) stay closed: `setns` has no hook, so their files
/// do not open, whatever the route: `/proc/PID/ns` (the ptrace check, every kernel), a
/// bind mount of the file (`ip netns`'s way; every kernel) or a namespace's file handle
/// (6.18+), which pass no ptrace check (the kernels here want `CAP_SYS_ADMIN` for another
/// namespace's handle: a root command that kept every capability shows it). Each route
/// enters the namespace outside. The command's own namespaces open.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn namespaces_outside_stay_closed() {
    use std::io::BufRead as _;
    let d = agent_dir("namespaces");
    let mut holder = Command::new(bins().probe)
        .args(["ns-hold"])
        .uid(User::Agent.uid())
        .gid(User::Agent.uid())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "PROBE ns-hold -> READY", "the holder");
    let uts = format!("/proc/{}/ns/uts", holder.id());
    let by_proc = ["open", uts.as_str(), "r"];
    // The user and UTS namespaces' files bound on files of the agent's directory (the
    // guards unmount them).
    let bind = |ns: &str| {
        let bound = d.join(format!("{ns}-bound"));
        write(&bound, "");
        let guard = Bind::mount(Path::new(&format!("/proc/{}/ns/{ns}", holder.id())), &bound);
        (bound.display().to_string(), guard)
    };
    let ((user_bound, _user_guard), (uts_bound, _uts_guard)) = (bind("user"), bind("uts"));
    // The command's own UTS namespace (the host's, which it starts in) bound the same way,
    // as `ip netns` binds namespaces: it opens inside too (decided by the namespace, not
    // by a path of a bind-mounted nsfs).
    let own_bound = d.join("own-uts-bound");
    write(&own_bound, "");
    let _own_guard = Bind::mount(Path::new("/proc/self/ns/uts"), &own_bound);
    let own_bound = own_bound.display().to_string();
    let own_by_mount = ["open", own_bound.as_str(), "r"];
    let by_mount = ["ns-enter", user_bound.as_str(), uts_bound.as_str()];
    assert_eq!(
        probe_outside_as_agent(&[&by_proc, &by_mount]),
        vec!["OK"; 2],
        "outside"
    );
    let own: Vec<[&str; 3]> = ["uts", "ipc", "net", "user"]
        .iter()
        .map(|n| ["open", ["/proc/self/ns/", n].concat().leak(), "r"])
        .collect();
    let mut ops: Vec<&[&str]> = own.iter().map(<[&str; 3]>::as_slice).collect();
    ops.push(&by_proc);
    ops.push(&by_mount);
    ops.push(&own_by_mount);
    let r = probe_as_agent(&d, None, &ops);
    for o in &own {
        r.expect(&o.join(" "), "OK");
    }
    r.expect(&own_by_mount.join(" "), "OK");
    r.expect(&by_proc.join(" "), "EACCES");
    r.expect(&by_mount.join(" "), "OPEN-EACCES");
    let rec = r.one_record("/unmapped/reason", "foreign_namespace");
    assert_eq!(
        rec["unmapped"]["rule"], "(a namespace the command did not start in: other processes')",
        "{rec:#}"
    );
    // A namespace's handle, opened by a root command that kept `CAP_SYS_ADMIN`.
    if kernel_version() >= (6, 18) {
        let h = probe_outside(&["ns-handle-of", &uts]);
        let hex = h
            .strip_prefix("HANDLE=")
            .unwrap_or_else(|| panic!("the handle: {h}"));
        let by_handle = ["ns-handle", hex];
        assert_eq!(probe_outside(&by_handle), OK, "outside, by handle");
        let policy = "process:\n  keep_capabilities: [all]\n";
        let r = probe(&d, Some(policy), &[&own[0], &by_handle]);
        r.expect(&own[0].join(" "), "OK");
        r.expect(&by_handle.join(" "), "OPEN-EACCES");
        let rec = r.one_record("/unmapped/reason", "foreign_namespace");
        assert_eq!(
            rec["unmapped"]["rule"], "(a namespace the command did not start in: other processes')",
            "{rec:#}"
        );
    }
    holder.kill().unwrap();
    let _ = holder.wait();
}
