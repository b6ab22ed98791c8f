//! The life of a run and of an attachment: exit status and clean-up, bad policies refused
//! before anything starts, audit mode, scope (nothing outside the cgroup is touched),
//! enforcement that outlives a killed sandbox, `sandbox attach` with reloads.

use std::os::fd::FromRawFd as _;
use std::os::unix::fs::MetadataExt as _;

use sandbox_tests::*;

/// `sandbox attach` on an existing cgroup: its processes are confined from binding on;
/// SIGHUP swaps in an edited policy, a broken edit is refused and changes nothing;
/// SIGTERM ends enforcement and leaves the cgroup and its processes alone; the cgroup
/// removed ends the binding with an error.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn attach_to_a_service_cgroup_and_reload() {
    let d = workdir("attach");
    write(&d.join("one"), "1");
    write(&d.join("two"), "2");
    let cg = Path::new("/sys/fs/cgroup/svc-test");
    let _ = std::fs::create_dir(cg);
    let policy = d.join("policy.yaml");
    let deny = |f: &str| format!("name: svc\nfiles:\n  deny: [{}/{f}]\n", d.display());
    write(&policy, &deny("one"));
    let b = bins();
    // The root cgroup, however spelled, is refused: it holds every process of the host.
    let refused = Command::new(&b.sandbox)
        .args(["attach", "--cgroup", "svc-test/.."])
        .arg("--policy")
        .arg(&policy)
        .arg("--audit-log")
        .arg(d.join("refused.jsonl"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success(),
        "attach to the root cgroup: {said}"
    );
    assert!(
        said.contains("the root cgroup holds every process"),
        "{said}"
    );
    // Spelled the long way round: the cgroup's depth counts directories, not the names
    // given (a depth of 3 here would have confined nothing).
    let mut attach = Attached::start("svc-test/../svc-test", &policy, &d.join("audit.jsonl"));
    // A process of the "service": joins the cgroup, then opens a file.
    let in_service = |file: &str| probe_in_cgroup(cg, &["open", &path_str(&d, file), "r"]);
    attach.wait_line("enforcing policy 'svc'");
    assert_eq!(in_service("one"), EACCES);
    assert_eq!(in_service("two"), OK);
    // Reload with another policy.
    write(&policy, &deny("two"));
    attach.signal(libc::SIGHUP);
    attach.wait_line("reloaded");
    assert_eq!(in_service("one"), OK);
    assert_eq!(in_service("two"), EACCES);
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
        attach.signal(libc::SIGHUP);
        attach.wait_line("reloaded");
    }
    write(&stop, "");
    let out = looper.wait_with_output().unwrap();
    let counts = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(counts.contains("ALLOWED=0 "), "{counts}");
    assert!(!counts.contains("DENIED=0"), "{counts}");
    // A broken policy is refused with its position; the one in force stays.
    write(&policy, "files:\n  deny: [\n");
    attach.signal(libc::SIGHUP);
    let refused = attach.wait_line("reload refused");
    assert!(refused.contains("policy.yaml:"), "{refused}");
    assert_eq!(in_service("two"), EACCES);
    // Stop: enforcement ends, the cgroup stays.
    attach.signal(libc::SIGTERM);
    attach.wait_line("no longer confined");
    assert!(attach.child.wait().unwrap().success());
    assert_eq!(in_service("two"), OK);
    assert!(cg.exists());
    let audit = read_audit(&d.join("audit.jsonl"));
    let paths: Vec<&str> = audit
        .iter()
        .filter_map(|r| r["file"]["path"].as_str())
        .collect();
    let (one, two) = (path_str(&d, "one"), path_str(&d, "two"));
    // one, two, then the loop's denials of two, then two once more.
    assert_eq!(paths[..2], [one.as_str(), two.as_str()], "{audit:#?}");
    assert!(paths.len() > 3, "{audit:#?}");
    assert!(paths[2..].iter().all(|p| *p == two), "{audit:#?}");
    // The cgroup removed under a binding (as a service's restart removes its cgroup and
    // makes another at the path): said, and a failure, not "enforcing" on nothing. (The
    // processes have exited: the cgroup is empty.)
    write(&policy, &deny("two"));
    let mut again = Attached::start("svc-test", &policy, &d.join("audit2.jsonl"));
    again.wait_line("enforcing policy 'svc'");
    std::fs::remove_dir(cg).unwrap();
    let said = again.wait_line("was removed");
    assert_eq!(again.child.wait().unwrap().code(), Some(125), "{said}");
}

/// A service of the attach tests: its directory with a `secret` file, its cgroup
/// `svc-NAME`, and a policy `svc` that denies the secret.
fn service(name: &str) -> (PathBuf, String, PathBuf, PathBuf) {
    let d = workdir(name);
    write(&d.join("secret"), "s");
    let secret = path_str(&d, "secret");
    let cg = PathBuf::from(format!("/sys/fs/cgroup/svc-{name}"));
    let _ = std::fs::create_dir(&cg);
    let policy = d.join("policy.yaml");
    write(&policy, &format!("name: svc\nfiles:\n  deny: [{secret}]\n"));
    (d, secret, cg, policy)
}

/// Under a service manager (`Type=notify-reload`): `READY=1` only once the cgroup is bound,
/// so a unit ordered after sandbox starts confined; `RELOADING=1` with `MONOTONIC_USEC`,
/// then `READY=1`, around a reload; `STOPPING=1` at the end. `--metrics` counts the
/// denial and the reload.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn attach_tells_the_service_manager() {
    use std::os::unix::net::UnixDatagram;

    let (d, secret, cg, policy) = service("notify");
    let cg = cg.as_path();
    let sock_path = d.join("notify.sock");
    let _ = std::fs::remove_file(&sock_path);
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_mins(2))).unwrap();
    let recv = || {
        let mut b = [0u8; 512];
        let n = sock
            .recv(&mut b)
            .expect("a notification from sandbox attach");
        String::from_utf8_lossy(&b[..n]).into_owned()
    };
    // The route: before sandbox, a process of the service reads the file.
    assert_eq!(probe_in_cgroup(cg, &["open", &secret, "r"]), OK);
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let mut attach = Attached::start_with(
        "svc-notify",
        &policy,
        &d.join("audit.jsonl"),
        &[("NOTIFY_SOCKET", &sock_path)],
        &["--metrics", &metrics_addr],
    );
    let ready = recv();
    assert!(
        ready.starts_with("READY=1\nSTATUS=enforcing policy 'svc'"),
        "{ready}"
    );
    // The moment READY=1 arrives, the service's processes are confined.
    assert_eq!(probe_in_cgroup(cg, &["open", &secret, "r"]), EACCES);
    // The denial is counted in the metrics (once the pump wrote it).
    let scrape = || {
        use std::io::{Read as _, Write as _};
        let mut c = std::net::TcpStream::connect(&metrics_addr).expect("the metrics listener");
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        text
    };
    let denied = "sandbox_records_total{class=\"file\",decision=\"deny\",rule=\"files.deny[0]\"} 1";
    let deadline = std::time::Instant::now() + Duration::from_mins(2);
    while !scrape().contains(denied) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let text = scrape();
    assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
    assert!(text.contains(denied), "{text}");
    assert!(
        text.contains("sandbox_policy_info{name=\"svc\"} 1"),
        "{text}"
    );
    attach.signal(libc::SIGHUP);
    let reloading = recv();
    assert!(
        reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
        "{reloading}"
    );
    let ready = recv();
    assert!(
        ready.contains("READY=1") && ready.contains("(reloaded)"),
        "{ready}"
    );
    attach.signal(libc::SIGTERM);
    assert!(recv().starts_with("STOPPING=1"));
    assert!(attach.child.wait().unwrap().success());
    let _ = std::fs::remove_dir(cg);
}

/// With stderr as the journal (`JOURNAL_STREAM` names the stream stderr is), lines carry
/// syslog levels and there is no line per denial; the audit log has the record.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn attach_writes_for_the_journal() {
    let (d, secret, cg, policy) = service("journal");
    let cg = cg.as_path();
    // The route: before sandbox, a process of the service reads the file.
    assert_eq!(probe_in_cgroup(cg, &["open", &secret, "r"]), OK);
    let mut fds = [0i32; 2];
    // SAFETY: pipe() fills two descriptors we own from here on.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors are ours and open.
    let (read_end, write_end) = unsafe {
        (
            std::fs::File::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    };
    let st = std::fs::File::from(write_end.try_clone().unwrap())
        .metadata()
        .unwrap();
    let stream = format!("{}:{}", st.dev(), st.ino());
    let mut journal = Command::new(bins().sandbox)
        .args(["attach", "--cgroup", "svc-journal", "--policy"])
        .arg(&policy)
        .arg("--audit-log")
        .arg(d.join("audit.jsonl"))
        .env("JOURNAL_STREAM", &stream)
        .stderr(Stdio::from(write_end))
        .spawn()
        .unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for l in std::io::BufReader::new(read_end)
                .lines()
                .map_while(Result::ok)
            {
                lines.lock().unwrap().push(l);
            }
        })
    };
    let seen = |want: &str| lines.lock().unwrap().iter().any(|l| l.contains(want));
    let deadline = std::time::Instant::now() + Duration::from_mins(2);
    while !seen("enforcing policy 'svc'") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(probe_in_cgroup(cg, &["open", &secret, "r"]), EACCES);
    std::thread::sleep(Duration::from_millis(500));
    signal(journal.id(), libc::SIGTERM);
    assert!(journal.wait().unwrap().success());
    reader.join().unwrap();
    let lines = lines.lock().unwrap().clone();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("<6>sandbox: enforcing policy 'svc'")),
        "{lines:#?}"
    );
    assert!(lines.iter().all(|l| l.starts_with('<')), "{lines:#?}");
    assert!(
        !lines.iter().any(|l| l.contains("denied open")),
        "{lines:#?}"
    );
    // The denial is in the audit log all the same.
    let audit = read_audit(&d.join("audit.jsonl"));
    assert!(
        audit.iter().any(|r| r["file"]["path"] == secret.as_str()),
        "{audit:#?}"
    );
    let _ = std::fs::remove_dir(cg);
}

/// Fail closed when sandbox itself dies: a process the command left behind stays confined
/// after sandbox is killed (`SIGKILL`) (the programs are pinned), and the next run cleans up.
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
        .args(["run", "--as-root", "--keep-cap", "all"])
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
    signal(pid, libc::SIGKILL);
    sandbox.wait().unwrap();
    assert!(wait_for(&result, 60), "the orphan never reported");
    assert_eq!(std::fs::read_to_string(&result).unwrap(), EACCES);
    // Its cgroup and pins are still there until the next run cleans up.
    let cg = Path::new("/sys/fs/cgroup/sandbox").join(format!("run-{pid}"));
    assert!(cg.exists());
    assert_eq!(pins_of_run(pid).len(), 1);
    let next = run_in(&d, None, &d, &["true"]);
    assert_eq!(next.status, 0, "{}", next.stderr);
    assert!(
        next.stderr.contains("cleaned up after a sandbox that died"),
        "{}",
        next.stderr
    );
    assert!(!cg.exists());
    assert!(pins_of_run(pid).is_empty());
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
        .args([
            "run",
            "--as-root",
            "--keep-cap",
            "all",
            "--quiet",
            "--audit-log",
        ])
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
    let deadline = Instant::now() + Duration::from_mins(2);
    while std::fs::read_to_string(&procs).map_or(true, |s| s.trim().is_empty()) {
        assert!(
            Instant::now() < deadline,
            "the confined process never appeared in {}",
            procs.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let outside = [
        probe_outside(&["open", &path_str(&d, "secret.txt"), "r"]),
        probe_outside(&["exec", &path_str(&d, "denied-tool")]),
        probe_outside(&["connect", "169.254.169.254", "80"]),
    ];
    // SIGTERM: sandbox forwards it to the command, then removes the cgroup.
    signal(held.id(), libc::SIGTERM);
    held.wait().unwrap();
    assert_eq!(outside[0], OK);
    assert_eq!(outside[1], OK);
    assert_eq!(
        outside[2], ENETUNREACH,
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
    let r = check(
        &d,
        Some(&policy),
        &[
            ("open secret.txt r", OK),
            ("connect 169.254.169.254 80", ENETUNREACH),
        ],
    );
    r.check_records(&[
        rec("/file/path", path_str(&d, "secret.txt"))
            .has("/action", "Allowed")
            .has("/disposition", "Logged"),
        rec("/dst_endpoint/ip", "169.254.169.254").has("/action", "Allowed"),
    ]);
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn exit_status_propagates_and_cgroup_is_removed() {
    let d = workdir("exit_status");
    let b = bins();
    let child = Command::new(&b.sandbox)
        .args([
            "run",
            "--as-root",
            "--keep-cap",
            "all",
            "--quiet",
            "--audit-log",
        ])
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
    let left = pins_of_run(child_id);
    assert!(left.is_empty(), "pins left behind: {left:?}");
    let r = run_in(&d, None, &d, &["/bin/sh", "-c", "kill -TERM $$"]);
    assert_eq!(r.status, 128 + 15);
}

/// The `[bpf]` lines of `/proc/kallsyms`: one for each loaded program's image (and each of
/// its functions) and each trampoline, until the kernel frees it.
fn loaded_bpf_images() -> Vec<String> {
    std::fs::read_to_string("/proc/kallsyms")
        .unwrap()
        .lines()
        .filter(|l| l.ends_with("[bpf]"))
        .map(str::to_owned)
        .collect()
}

/// Waits at most `secs` until no BPF image is left (earlier runs detach after they end).
fn wait_for_no_bpf_images(secs: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let left = loaded_bpf_images();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {} BPF images still loaded after {secs} s, e.g. {:?}",
            left.len(),
            &left[..left.len().min(5)]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A finished run's links are closed one at a time by a child of sandbox, each only while
/// no sandbox is attaching (`/run/sandbox/attach.lock`; on 6.1 and 6.12 each detach holds
/// ftrace's lock through an RCU-tasks grace period, which a start would otherwise wait out
/// link by link). Held by another for long, the turn neither stops a start (it goes ahead
/// after 2 s, and says so) nor keeps a run's programs attached (each detach goes ahead
/// after 2 s): with the turn held for 12 s after the run, some of its programs' images are
/// gone and more than half are left (without turns all are gone within about 6 s under
/// emulation); let go, all are gone soon. A sandboxed root command cannot open the file,
/// nor a second name of it.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn finished_runs_detach_in_turns_with_starts_and_never_stay() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let d = workdir("detach_turns");
    wait_for_no_bpf_images(180, "before the test");
    std::fs::create_dir_all("/run/sandbox").unwrap();
    let turn = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open("/run/sandbox/attach.lock")
        .unwrap();
    // A second name of the file, made before the run: denied by the file's identity.
    let second = "/run/sandbox/attach.lock.second-name";
    let _ = std::fs::remove_file(second);
    std::fs::hard_link("/run/sandbox/attach.lock", second).unwrap();
    for name in ["/run/sandbox/attach.lock", second] {
        assert_eq!(probe_outside(&["open", name, "r"]), "OK", "{name}");
    }
    // SAFETY: flock on a descriptor the test owns.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&turn), libc::LOCK_EX) },
        0
    );
    let r = check_as_env(
        User::Root,
        &d,
        None,
        &[("SANDBOX_LOG", "sandbox_user=debug")],
        &[
            ("open /run/sandbox/attach.lock r", EACCES),
            ("open /run/sandbox/attach.lock.second-name r", EACCES),
        ],
    );
    std::fs::remove_file(second).unwrap();
    assert!(
        r.stderr
            .contains("held too long by another; attaching without the turn"),
        "the start did not wait for its turn: {}",
        r.stderr
    );
    r.check_records(&[rec("/file/path", "/run/sandbox/attach.lock").has(
        "/unmapped/rule",
        "files.deny (implicit: sandbox's attach turn)",
    )]);
    let after_run = loaded_bpf_images().len();
    std::thread::sleep(Duration::from_secs(12));
    let held = loaded_bpf_images().len();
    drop(turn);
    // One link may go every 2 s: about six of forty-odd.
    assert!(
        held < after_run && held * 2 >= after_run,
        "with the turn held, {held} BPF images were left of {after_run} 12 s after the run: \
         the detach should wait 2 s for each turn, then go ahead"
    );
    wait_for_no_bpf_images(60, "after the turn was let go");
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

/// sandbox started inside a cgroup namespace of its own, with a cgroup2 mount made there (a
/// container's view: the mount's root is "/", depths are relative to the namespace) refuses
/// to run the command: the programs compare the kernel's depths, so a run there would
/// confine nothing. The same run outside the namespace runs the command.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_cgroup_namespace_of_its_own_is_refused() {
    use std::os::unix::process::CommandExt as _;
    let d = workdir("cgroupns");
    let marker = d.join("ran");
    let cmd = ["/bin/sh", "-c", "touch ran"];
    let r = run_in(&d, None, &d, &cmd);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(
        marker.exists(),
        "the command did not run outside the namespace"
    );
    std::fs::remove_file(&marker).unwrap();

    // A cgroup below the root, so that the namespace's depths are not the kernel's.
    let cg = Path::new("/sys/fs/cgroup/cgns-test");
    let _ = std::fs::create_dir(cg);
    let procs = std::ffi::CString::new("/sys/fs/cgroup/cgns-test/cgroup.procs").unwrap();
    let (none, slash) = (c"none", c"/");
    let (mnt, fstype) = (c"/sys/fs/cgroup", c"cgroup2");
    let mut c = Command::new(bins().sandbox);
    c.args(["run", "--as-root", "--audit-log"])
        .arg(d.join("audit.jsonl"))
        .arg("--")
        .args(cmd)
        .env("HOME", &d)
        .current_dir(&d);
    // SAFETY: system calls only between fork and exec, on strings made before the fork.
    unsafe {
        c.pre_exec(move || {
            let check = |r: libc::c_int| {
                if r < 0 {
                    Err(std::io::Error::last_os_error())
                } else {
                    Ok(())
                }
            };
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            check(fd)?;
            if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            check(libc::unshare(libc::CLONE_NEWCGROUP | libc::CLONE_NEWNS))?;
            check(libc::mount(
                none.as_ptr(),
                slash.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            check(libc::umount2(mnt.as_ptr(), libc::MNT_DETACH))?;
            check(libc::mount(
                none.as_ptr(),
                mnt.as_ptr(),
                fstype.as_ptr(),
                0,
                std::ptr::null(),
            ))
        });
    }
    let out = c.output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "sandbox ran in a cgroup namespace: {said}"
    );
    assert!(said.contains("cgroup namespace of its own"), "{said}");
    assert!(!marker.exists(), "the command ran unconfined");
    let _ = std::fs::remove_dir(cg);
}

/// `/etc/sandbox` for one test, removed whatever happens (the guest is shared by the tests).
struct EtcSandbox;

impl EtcSandbox {
    fn new() -> Self {
        std::fs::create_dir_all("/etc/sandbox/users").unwrap();
        for d in ["/etc/sandbox", "/etc/sandbox/users"] {
            std::fs::set_permissions(d, PermissionsExt::from_mode(0o755)).unwrap();
        }
        Self
    }
}

impl Drop for EtcSandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all("/etc/sandbox");
    }
}

/// Without --policy, `sandbox run` takes `/etc/sandbox/users/USER.yaml` (USER: who the
/// command runs as), else `/etc/sandbox/policy.yaml`, else the built-in policy; it says
/// which; a broken or user-writable file found there is an error, never a silent
/// fall-back to the built-in policy.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn policies_are_found_in_etc_sandbox() {
    let d = workdir_as(User::Agent, "etc_sandbox");
    write(&d.join("one"), "1");
    write(&d.join("two"), "2");
    let ops: [&[&str]; 2] = [
        &["open", &path_str(&d, "one"), "r"],
        &["open", &path_str(&d, "two"), "r"],
    ];
    let deny =
        |name: &str, f: &str| format!("name: {name}\nfiles:\n  deny: [{}/{f}]\n", d.display());
    let _etc = EtcSandbox::new();
    // Nothing in /etc/sandbox: the built-in policy, which lets both be read.
    let r = probe_as(User::Agent, &d, None, &ops);
    assert_eq!(r.result(&format!("open {}", path_str(&d, "one"))), OK);
    assert_eq!(r.result(&format!("open {}", path_str(&d, "two"))), OK);
    assert!(
        r.stderr
            .contains("sandbox: policy: the built-in one (no --policy given"),
        "{}",
        r.stderr
    );
    // The host's policy.
    write(Path::new("/etc/sandbox/policy.yaml"), &deny("host", "one"));
    let r = probe_as(User::Agent, &d, None, &ops);
    assert_eq!(r.result(&format!("open {}", path_str(&d, "one"))), EACCES);
    assert_eq!(r.result(&format!("open {}", path_str(&d, "two"))), OK);
    assert!(
        r.stderr
            .contains("sandbox: policy /etc/sandbox/policy.yaml (no --policy given)"),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.one_record("/policy/name", "host")["unmapped"]["rule"],
        "files.deny[0]"
    );
    // The user's own beats the host's.
    write(
        Path::new("/etc/sandbox/users/agent.yaml"),
        &deny("agent-own", "two"),
    );
    let r = probe_as(User::Agent, &d, None, &ops);
    assert_eq!(r.result(&format!("open {}", path_str(&d, "one"))), OK);
    assert_eq!(r.result(&format!("open {}", path_str(&d, "two"))), EACCES);
    assert!(
        r.stderr.contains("/etc/sandbox/users/agent.yaml"),
        "{}",
        r.stderr
    );
    // A root command whose policy lets it write in /etc (the route: a file it makes
    // there) cannot choose a later run's policy: /etc/sandbox is read-only to it.
    let r_dir = workdir_as(User::Root, "etc_sandbox_root");
    let writer = "name: etc-writer\nfiles:\n  write: [/etc/**]\n";
    let r = run_as(
        User::Root,
        &r_dir,
        Some(writer),
        &[
            "/bin/sh",
            "-c",
            "echo x > /etc/kt-etc-route; mkdir /etc/kt-etc-dir; \
             echo y > /etc/sandbox/users/mallory.yaml; chmod 777 /etc/sandbox; \
             mv /etc/sandbox /etc/sandbox.moved",
        ],
    );
    assert!(Path::new("/etc/kt-etc-route").exists(), "{}", r.stderr);
    assert!(Path::new("/etc/kt-etc-dir").is_dir(), "{}", r.stderr);
    let _ = std::fs::remove_file("/etc/kt-etc-route");
    let _ = std::fs::remove_dir("/etc/kt-etc-dir");
    assert!(
        !Path::new("/etc/sandbox/users/mallory.yaml").exists(),
        "a confined root command wrote a policy for a later run"
    );
    assert!(
        Path::new("/etc/sandbox").is_dir() && !Path::new("/etc/sandbox.moved").exists(),
        "a confined root command moved /etc/sandbox away"
    );
    assert_eq!(
        std::fs::metadata("/etc/sandbox")
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o755,
        "a confined root command changed /etc/sandbox's mode"
    );
    // Three denials: the policy written, the chmod, the rename.
    assert!(
        r.records("/policy/name", "etc-writer").len() >= 3,
        "{:#?}",
        r.audit
    );
    // Refused, and nothing runs: one the agent could change, a policy directory the agent
    // could change (removing the file would choose the policy), then a broken host
    // policy (an error, not the built-in policy).
    let marker = d.join("ran");
    let refused = |why: &str| {
        let r = run_as(User::Agent, &d, None, &["/bin/sh", "-c", "touch ran"]);
        assert_eq!(r.status, 125, "{}", r.stderr);
        assert!(r.stderr.contains(why), "{}", r.stderr);
    };
    std::fs::set_permissions(
        "/etc/sandbox/users/agent.yaml",
        PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    refused("refusing policy /etc/sandbox/users/agent.yaml");
    std::fs::remove_file("/etc/sandbox/users/agent.yaml").unwrap();
    std::fs::set_permissions("/etc/sandbox/users", PermissionsExt::from_mode(0o777)).unwrap();
    refused("/etc/sandbox/users: this directory is writable by every user");
    std::fs::set_permissions("/etc/sandbox/users", PermissionsExt::from_mode(0o755)).unwrap();
    write(
        Path::new("/etc/sandbox/policy.yaml"),
        "files:\n  dney: [/etc]\n",
    );
    refused("/etc/sandbox/policy.yaml:2:3: files: unknown field `dney`");
    assert!(!marker.exists(), "the command ran without its policy");
}
