//! Scope and self-protection: a confined process stays confined in the cgroups it makes,
//! and cannot undo its confinement (`bpf()`, signals and ptrace to sandbox, mounts, moving
//! itself out of its cgroup, pulling another process in).

use sandbox_tests::*;

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn child_cgroup_stays_confined() {
    let d = workdir("child_cgroup");
    write(&d.join("secret.txt"), "s");
    let policy = format!("files:\n  deny: [{}/secret.txt]\n", d.display());
    // A process inside can make a cgroup below its own but not move into it (writing a
    // `cgroup.procs` is refused, see below); one moved there from outside (by root, as
    // a service manager would) is as confined as before.
    let pidfile = d.join("pid");
    let mover = {
        let pidfile = pidfile.clone();
        std::thread::spawn(move || {
            for _ in 0..600 {
                if let Ok(pid) = std::fs::read_to_string(&pidfile)
                    && !pid.trim().is_empty()
                {
                    let pid = pid.trim();
                    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
                    let rel = cg.trim().strip_prefix("0::").unwrap().to_owned();
                    let dir = format!("/sys/fs/cgroup{rel}/escape");
                    let _ = std::fs::create_dir(&dir);
                    std::fs::write(format!("{dir}/cgroup.procs"), pid).unwrap();
                    return true;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            false
        })
    };
    let script = format!(
        "{p} cgroup-child inner :: sleep 4000 :: open secret.txt r & echo $! > pid; wait",
        p = bins().probe.display()
    );
    let r = run_in(&d, Some(&policy), &d, &["/bin/sh", "-c", &script]);
    assert!(mover.join().unwrap(), "the probe's pid never came");
    r.expect("cgroup-child inner", EACCES);
    r.expect("open secret.txt r", EACCES);
    let rec = r.one_record("/file/path", &path_str(&d, "secret.txt"));
    let cg = rec["unmapped"]["actor"]["cgroup"].as_str().unwrap();
    assert!(
        cg.starts_with("/sandbox/run-") && cg.ends_with("/escape"),
        "{cg}"
    );
}

/// An agent cannot undo its confinement: no `bpf()`, no signals or ptrace to sandbox, no
/// mounts, no moving itself out of its cgroup, no writing of a `cgroup.procs` (not even
/// into a cgroup of its own: it could pull a process in).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn self_protection() {
    let d = workdir("self_protection");
    std::fs::create_dir_all(d.join("mnt")).unwrap();
    let r = check(
        &d,
        Some("name: guarded\n"),
        &[
            ("bpf", EPERM),
            ("kill-parent 9", EPERM),
            ("kill-parent 0", OK),
            ("ptrace-parent", EPERM),
            ("mount mnt", EPERM),
            ("cgroup-move /", EACCES),
            ("cgroup-child inner", EACCES),
        ],
    );
    // sandbox survived the SIGKILL attempt: it reported the probe's own exit status (1:
    // some operations failed) and wrote the records.
    assert_eq!(r.status, 1, "{}", r.stderr);
    r.check_records(&[
        rec("/unmapped/activity", "bpf")
            .has("/unmapped/rule", "self_protection")
            .has("/unmapped/bpf_cmd", 0),
        rec("/unmapped/activity", "signal").has("/unmapped/signal", 9),
        rec("/unmapped/activity", "ptrace"),
        rec("/unmapped/activity", "mount"),
        rec("/file/path", "/sys/fs/cgroup/cgroup.procs").has("/unmapped/rule", "self_protection"),
    ]);
    let inner = r
        .records("/unmapped/rule", "self_protection")
        .into_iter()
        .filter(|v| {
            v["file"]["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/inner/cgroup.procs"))
        })
        .count();
    assert_eq!(
        inner, 1,
        "the write to a cgroup.procs inside: {:#?}",
        r.audit
    );
    // The signal and the ptrace were aimed at sandbox, the probe's parent.
    for activity in ["signal", "ptrace"] {
        let r = r.one_record("/unmapped/activity", activity);
        assert_eq!(
            r["process"]["pid"], r["actor"]["process"]["parent_process"]["pid"],
            "{r}"
        );
    }
    // The same calls from outside the sandbox are not ours to refuse.
    assert_eq!(probe_outside(&["bpf"]), "OK");
}

/// A root command that kept every capability still cannot reach past the policy through
/// the kernel: no child started into another cgroup, no unmount, no new root (`pivot_root`
/// in a mount namespace of its own), no kernel module, no
/// operation on the lockdown list, no resource limits on processes outside, no writes to
/// the kernel's settings (the files that start helpers as root outside any sandbox) or to
/// the BPF file system, no raw memory or disk. Each route is shown working outside the sandbox first.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn root_cannot_reach_past_the_policy_through_the_kernel() {
    let d = workdir("root_kernel");
    for m in ["m_out", "m_in"] {
        std::fs::create_dir_all(d.join(m)).unwrap();
    }
    let _m_in = Tmpfs::mount(&d.join("m_in"));
    let m_out = Tmpfs::mount(&d.join("m_out"));
    // pivot_root's new root (a mount point on a mount point) and where the old root goes.
    std::fs::create_dir(d.join("m_in/new")).unwrap();
    let _new_root = Tmpfs::mount(&d.join("m_in/new"));
    std::fs::create_dir(d.join("m_in/new/old")).unwrap();
    write(&d.join("not-a-module.ko"), "not an ELF file, but not empty");
    let mut outsider = Command::new("sleep").arg("600").spawn().unwrap();
    let pid = outsider.id().to_string();
    let module = path_str(&d, "not-a-module.ko");
    let cases: &[(&str, &str, &str)] = &[
        ("clone-into-cgroup /sys/fs/cgroup", OK, EPERM),
        ("finit-module", "ENOEXEC", EPERM),
        ("ioperm", OK, EPERM),
        ("prlimit", OK, EPERM),
        ("open /proc/sys/kernel/core_pattern w", OK, EACCES),
        ("open /proc/sys/kernel/modprobe w", OK, EACCES),
        ("open /proc/irq/default_smp_affinity w", OK, EACCES),
        ("mkdir /sys/fs/bpf/planted", OK, EACCES),
        ("open /dev/mem r", OK, EACCES),
    ];
    let words = |op: &str| -> Vec<String> {
        let mut w: Vec<String> = op.split_whitespace().map(str::to_owned).collect();
        match w[0].as_str() {
            "finit-module" => w.push(module.clone()),
            "prlimit" => w.push(pid.clone()),
            _ => {}
        }
        w
    };
    // Outside the sandbox, as root: every route works (the module is refused by the
    // module loader itself, after the security check).
    for (op, outside, _) in cases {
        let w = words(op);
        let refs: Vec<&str> = w.iter().map(String::as_str).collect();
        assert_eq!(probe_outside(&refs), *outside, "outside: {op}");
    }
    assert_eq!(probe_outside(&["rmdir", "/sys/fs/bpf/planted"]), OK);
    // The test's own parent's oom_score_adj: root may write a process's score.
    assert_eq!(probe_outside(&["open-ppid", "oom_score_adj", "w"]), OK);
    // SIGIO ends the process it is sent to (here a shell that would say it survived).
    let out = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!(
            "{} sigio-parent; echo survived",
            bins().probe.display()
        ))
        .output()
        .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("survived"),
        "SIGIO did not end the shell outside"
    );
    assert_eq!(probe_outside(&["umount", &path_str(&d, "m_out")]), OK);
    std::mem::forget(m_out);
    // In a mount namespace of its own (which root may make inside too).
    assert_eq!(probe_outside(&["pivot-root", &path_str(&d, "m_in")]), OK);
    // Inside, as root with every capability kept.
    let mut ops: Vec<Vec<String>> = cases.iter().map(|(op, _, _)| words(op)).collect();
    ops.push(vec!["umount".into(), path_str(&d, "m_in")]);
    ops.push(vec!["pivot-root".into(), path_str(&d, "m_in")]);
    ops.push(vec!["sigio-parent".into()]);
    ops.push(vec!["open-ppid".into(), "oom_score_adj".into(), "w".into()]);
    let refs: Vec<Vec<&str>> = ops
        .iter()
        .map(|w| w.iter().map(String::as_str).collect())
        .collect();
    let slices: Vec<&[&str]> = refs.iter().map(Vec::as_slice).collect();
    let r = probe(&d, Some("name: root-kernel\n"), &slices);
    for ((op, _, inside), w) in cases.iter().zip(&ops) {
        assert_eq!(
            r.result(&w.join(" ")),
            *inside,
            "inside: {op}\n{}",
            r.stdout
        );
    }
    r.expect(&format!("umount {}", path_str(&d, "m_in")), EPERM);
    r.expect(&format!("pivot-root {}", path_str(&d, "m_in")), EPERM);
    // sandbox as the owner of a file's SIGIO: refused at the `fcntl` (another process),
    // and sandbox reported the probe's status (1: some operations failed), not its own
    // death. (`file_send_sigiotask` refuses a delivery to sandbox whoever set the owner.)
    r.expect("sigio-parent", EPERM);
    r.expect("open-ppid oom_score_adj w", EACCES);
    assert_eq!(r.status, 1, "{}", r.stderr);
    outsider.kill().unwrap();
    let _ = outsider.wait();
    r.check_records(&[
        rec("/unmapped/activity", "clone_into_cgroup").has("/unmapped/rule", "self_protection"),
        rec("/unmapped/activity", "umount").has("/unmapped/rule", "self_protection"),
        rec("/unmapped/activity", "pivot_root").has("/unmapped/rule", "self_protection"),
        rec("/unmapped/kernel/check", "read_file").has("/unmapped/kernel/what", "a module"),
        rec("/unmapped/kernel/check", "lockdown").some(),
        rec("/unmapped/activity", "task").has("/process/pid", outsider.id()),
        rec("/file/path", "/proc/sys/kernel/core_pattern").has(
            "/unmapped/rule",
            "files.read_only (implicit: kernel settings)",
        ),
        rec("/file/path", "/proc/sys/kernel/modprobe"),
        rec("/file/path", "/sys/fs/bpf/planted").has("/unmapped/activity", "mkdir"),
        rec("/file/path", "/dev/mem").has(
            "/unmapped/rule",
            "files.deny (implicit: raw disks and memory)",
        ),
    ]);
}

/// A root command cannot pull a process from outside into its cgroup (writing its pid
/// into a `cgroup.procs` there, which the kernel allows root), where that process would
/// count as the sandbox's own: its `/proc` entries, ptrace and signals.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn outside_processes_cannot_be_pulled_in() {
    let d = workdir("pull_in");
    let mut target = std::process::Command::new(&bins().probe)
        .args(["sleep", "600000"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = target.id().to_string();
    let cgroup_of = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .unwrap()
            .trim()
            .to_owned()
    };
    let home = cgroup_of(&pid);
    // Outside the sandbox, root moves it into another cgroup and back.
    let elsewhere = "/sys/fs/cgroup/pull-outside";
    let _ = std::fs::create_dir(elsewhere);
    std::fs::write(format!("{elsewhere}/cgroup.procs"), &pid).unwrap();
    assert_eq!(cgroup_of(&pid), "0::/pull-outside");
    let back = format!(
        "/sys/fs/cgroup{}/cgroup.procs",
        home.strip_prefix("0::").unwrap().trim_end_matches('/')
    );
    std::fs::write(&back, &pid).unwrap();
    let _ = std::fs::remove_dir(elsewhere);
    assert_eq!(cgroup_of(&pid), home);
    // Inside, as root: refused, and the process stays outside.
    let pull = format!("cgroup-pull {pid}");
    let environ = format!("open /proc/{pid}/environ r");
    let r = check(
        &d,
        Some("name: pull\n"),
        &[(pull.as_str(), EACCES), (environ.as_str(), EACCES)],
    );
    assert_eq!(cgroup_of(&pid), home, "the process was moved");
    let recs: Vec<_> = r
        .records("/unmapped/rule", "self_protection")
        .into_iter()
        .filter(|v| {
            v["file"]["path"].as_str().is_some_and(|p| {
                p.starts_with("/sys/fs/cgroup/sandbox/") && p.ends_with("/cgroup.procs")
            })
        })
        .collect();
    assert_eq!(recs.len(), 1, "{:#?}", r.audit);
    r.one_record("/file/path", &format!("/proc/{pid}/environ"));
    target.kill().unwrap();
    let _ = target.wait();
}

/// A device node is the host's: a root command may write to `/dev/null` (as the policy
/// allows) but not remove, rename, replace or change it (`/dev/urandom` replaced by a
/// symlink to a file of its own would feed every program on the host its "randomness").
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn device_nodes_keep_their_names_and_modes() {
    let d = workdir("devices");
    // Two nodes like /dev/null (1:3): one to show the routes outside, one for inside.
    let node = |name: &str| {
        let p = format!("/dev/sandbox-test-{name}");
        let _ = std::fs::remove_file(&p);
        let c = std::ffi::CString::new(p.clone()).unwrap();
        // SAFETY: plain syscall on a valid C string.
        let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
        assert_eq!(r, 0, "mknod {p}");
        p
    };
    let routes = |p: &str| -> Vec<Vec<String>> {
        let v = |w: &[&str]| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        vec![
            v(&["open", p, "w"]),
            v(&["chmod", p]),
            v(&["utimes", p]),
            v(&["rename", p, &format!("{p}-moved")]),
            v(&["unlink", p]),
        ]
    };
    let outside = node("outside");
    for op in routes(&outside) {
        let refs: Vec<&str> = op.iter().map(String::as_str).collect();
        assert_eq!(probe_outside(&refs), OK, "outside: {op:?}");
        if refs[0] == "rename" {
            // The rest of the routes on the moved node's old name: make it again.
            std::fs::rename(format!("{outside}-moved"), &outside).unwrap();
        }
    }
    let inside = node("inside");
    let ops = routes(&inside);
    let words: Vec<Vec<&str>> = ops
        .iter()
        .map(|w| w.iter().map(String::as_str).collect())
        .collect();
    let slices: Vec<&[&str]> = words.iter().map(Vec::as_slice).collect();
    let r = probe(&d, Some("name: devices\n"), &slices);
    r.expect(&format!("open {inside} w"), OK);
    for op in &words[1..] {
        r.expect(&op.join(" "), EACCES);
    }
    assert!(
        std::fs::symlink_metadata(&inside).is_ok(),
        "the node was removed"
    );
    let recs = r.records("/unmapped/reason", "host_device");
    assert_eq!(recs.len(), 4, "{:#?}", r.audit);
    for rec in recs {
        assert_eq!(
            rec["unmapped"]["rule"],
            "(a device node of the host: only its contents are the policy's)",
            "{rec:#}"
        );
    }
    let _ = std::fs::remove_file(&inside);
    // A whiteout (0:0, which anyone may make, as container layers unpacked by `tar` hold)
    // is no device: it stays the command's to change and remove.
    let wo = path_str(&d, "whiteout");
    let r = check(
        &d,
        Some("name: devices\n"),
        &[
            (format!("mknod-whiteout {wo}").as_str(), OK),
            (format!("chmod {wo}").as_str(), OK),
            (format!("unlink {wo}").as_str(), OK),
        ],
    );
    assert!(r.records("/unmapped/reason", "host_device").is_empty());
}

/// A node the command makes itself (a root command that kept `CAP_MKNOD`) on a tmpfs is its
/// own to change and remove; what it reaches stays the host's: a node of the console's
/// number opens the console, and is refused as it; a block device (a disk's blocks) does
/// not open whatever its name. (A pty's slave opens only through its
/// name in its devpts: the kernel answers `EIO` through any other node.)
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn device_nodes_made_inside_are_theirs_by_name_only() {
    let d = workdir("devices-made");
    let alias = path_str(&d, "console");
    let (major, minor) = ("5", "1");
    assert_eq!(probe_outside(&["mknod-char", &alias, major, minor]), OK);
    assert_eq!(
        probe_outside(&["open", &alias, "w"]),
        OK,
        "outside: the console through {alias}"
    );
    std::fs::remove_file(&alias).unwrap();
    // A disk's blocks by a name no rule lists (the first loop device: 7:0).
    let disk = path_str(&d, "disk");
    assert_eq!(probe_outside(&["mknod-blk", &disk, "7", "0"]), OK);
    assert_eq!(probe_outside(&["open", &disk, "r"]), OK, "outside: {disk}");
    std::fs::remove_file(&disk).unwrap();
    let made = path_str(&d, "null");
    let r = check(
        &d,
        Some("name: devices\n"),
        &[
            (format!("mknod-char {made} 1 3").as_str(), OK),
            (format!("open {made} w").as_str(), OK),
            (format!("chmod {made}").as_str(), OK),
            (format!("rename {made} {made}-moved").as_str(), OK),
            (format!("unlink {made}-moved").as_str(), OK),
            (format!("mknod-char {alias} {major} {minor}").as_str(), OK),
            (format!("open {alias} w").as_str(), EACCES),
            (format!("unlink {alias}").as_str(), OK),
            (format!("mknod-blk {disk} 7 0").as_str(), OK),
            (format!("open {disk} r").as_str(), EACCES),
            (format!("unlink {disk}").as_str(), OK),
        ],
    );
    let recs = r.records("/unmapped/reason", "block_device");
    assert_eq!(recs.len(), 1, "{:#?}", r.audit);
    assert_eq!(recs[0]["file"]["path"], disk.as_str(), "{:#}", recs[0]);
    let recs = r.records("/unmapped/reason", "foreign_terminal");
    assert_eq!(recs.len(), 1, "{:#?}", r.audit);
    assert_eq!(recs[0]["file"]["path"], alias.as_str(), "{:#}", recs[0]);
    assert!(r.records("/unmapped/reason", "host_device").is_empty());
}

/// No set-user-ID or set-group-ID file is made inside: one would run later, outside, with
/// its owner's powers (a root command's copy of a shell, `chmod 4755`, is a root shell for
/// every user of the host). Made with the bits, given one (group-executable or not), an ACL
/// set on one (it rewrites the group's bits past `chmod`), or an unnamed `O_TMPFILE` made
/// with them linked in: refused; a mode that keeps the bits a file has, a second name for
/// a set-id file (a package manager's backup link) and set-group-ID directories are not.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn set_id_files_are_not_made() {
    use std::os::unix::fs::PermissionsExt;
    let d = workdir("set-id");
    let p = |n: &str| path_str(&d, n);
    let mode = |n: &str| std::fs::metadata(p(n)).unwrap().permissions().mode() & 0o7777;
    // The routes, outside.
    std::fs::create_dir(d.join("dir")).unwrap();
    for (op, made, want) in [
        (
            vec!["create-mode", &p("out-made"), "4755"],
            "out-made",
            0o4755,
        ),
        (vec!["create-mode", &p("out-set"), "755"], "out-set", 0o755),
        (vec!["chmod-mode", &p("out-set"), "2755"], "out-set", 0o2755),
        (
            vec!["tmpfile-link", &p("."), &p("out-linked"), "4755"],
            "out-linked",
            0o4755,
        ),
        (
            vec!["link", &p("out-made"), &p("out-link")],
            "out-link",
            0o4755,
        ),
        // An ACL rewrites the group's bits and keeps set-group-ID.
        (vec!["setacl", &p("out-set")], "out-set", 0o2644),
    ] {
        assert_eq!(probe_outside(&op), OK, "outside: {op:?}");
        assert_eq!(mode(made), want, "outside: {op:?}");
    }
    let r = check(
        &d,
        Some("name: set-id\n"),
        &[
            (format!("create-mode {} 4755", p("made")).as_str(), EACCES),
            (format!("create-mode {} 755", p("plain")).as_str(), OK),
            (format!("create-mode {} 755", p("plain-g")).as_str(), OK),
            (format!("create-mode {} 755", p("plain-gr")).as_str(), OK),
            // Each on a file of its own: identical denials of one file are one record.
            (format!("chmod-mode {} 4755", p("plain")).as_str(), EACCES),
            (format!("chmod-mode {} 2755", p("plain-g")).as_str(), EACCES),
            (
                format!("chmod-mode {} 2744", p("plain-gr")).as_str(),
                EACCES,
            ),
            (format!("chmod-mode {} 700", p("plain")).as_str(), OK),
            (format!("setacl {}", p("out-set")).as_str(), EACCES),
            // Refused at its open already: a set-id file opened for writing.
            (
                format!("tmpfile-link {} {} 4755", p("."), p("linked")).as_str(),
                "OPEN-EACCES",
            ),
            (
                format!("link {} {}", p("out-made"), p("in-link")).as_str(),
                OK,
            ),
            // What a file has already, it keeps; a directory passes its group on.
            (format!("chmod-mode {} 4700", p("out-made")).as_str(), OK),
            (format!("chmod-mode {} 2775", p("dir")).as_str(), OK),
        ],
    );
    assert_eq!(mode("plain"), 0o700);
    for gone in ["made", "linked"] {
        assert!(!d.join(gone).exists(), "{gone} was made");
    }
    let recs = r.records("/unmapped/reason", "set_id");
    assert_eq!(recs.len(), 6, "{:#?}", r.audit);
    for rec in recs {
        assert_eq!(
            rec["unmapped"]["rule"], "(a set-user-ID or set-group-ID file: it would run outside)",
            "{rec:#}"
        );
    }
}

/// A non-root agent: a set-user-ID file of its own would run as the agent outside, for
/// whoever runs it there (another user's shell, a cron job, a later session).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn set_id_files_are_not_made_by_a_non_root_agent() {
    use std::os::unix::fs::PermissionsExt;
    let d = workdir_as(User::Agent, "set-id-agent");
    let p = |n: &str| path_str(&d, n);
    let mode = |n: &str| std::fs::metadata(d.join(n)).unwrap().permissions().mode() & 0o7777;
    for op in [
        vec!["create-mode", &p("out-made"), "4755"],
        vec!["create-mode", &p("out-set"), "755"],
        vec!["chmod-mode", &p("out-set"), "6755"],
    ] {
        assert_eq!(
            probe_outside_as(User::Agent, &op),
            OK,
            "outside, as the agent: {op:?}"
        );
    }
    assert_eq!(mode("out-set"), 0o6755);
    let r = check_as(
        User::Agent,
        &d,
        Some("name: set-id-agent\n"),
        &[
            (format!("create-mode {} 4755", p("made")).as_str(), EACCES),
            (format!("create-mode {} 755", p("plain")).as_str(), OK),
            (format!("chmod-mode {} 4755", p("plain")).as_str(), EACCES),
            (format!("create-mode {} 755", p("plain-g")).as_str(), OK),
            (format!("chmod-mode {} 2755", p("plain-g")).as_str(), EACCES),
            (format!("chmod-mode {} 6700", p("out-set")).as_str(), OK),
        ],
    );
    assert!(!d.join("made").exists(), "made was made");
    assert_eq!(mode("plain"), 0o755);
    assert_eq!(
        r.records("/unmapped/reason", "set_id").len(),
        3,
        "{:#?}",
        r.audit
    );
}

/// A set-id file's contents are a program that runs with its owner's (or group's) rights
/// outside. `write(2)` and truncation by a process without `CAP_FSETID` drop the bits, but a
/// write through a shared mapping keeps them: a command opens no set-id file for writing.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn set_id_files_are_not_written() {
    use std::os::unix::fs::PermissionsExt;
    let d = workdir_as(User::Agent, "set-id-write");
    let mode = |n: &str| std::fs::metadata(d.join(n)).unwrap().permissions().mode() & 0o7777;
    for n in ["tool", "gtool", "plain"] {
        write(&d.join(n), "#!/bin/sh\nexit 0\n");
        User::Agent.own(&d.join(n));
    }
    let p = |n: &str| path_str(&d, n);
    // The route, outside, as the agent: its own set-user-ID file, changed through a
    // mapping, keeps its bit.
    for op in [
        vec!["chmod-mode", &p("tool"), "4755"],
        vec!["chmod-mode", &p("gtool"), "2755"],
        vec!["mmap-write", &p("tool")],
        vec!["mmap-write", &p("gtool")],
    ] {
        assert_eq!(probe_outside_as(User::Agent, &op), OK, "outside: {op:?}");
    }
    assert_eq!((mode("tool"), mode("gtool")), (0o4755, 0o2755), "outside");
    let r = check_as(
        User::Agent,
        &d,
        Some("name: set-id-write\n"),
        &[
            (format!("mmap-write {}", p("tool")).as_str(), EACCES),
            (format!("open {} rw", p("gtool")).as_str(), EACCES),
            (format!("open {} rtrunc", p("tool")).as_str(), EACCES),
            (format!("open {} r", p("tool")).as_str(), OK),
            (format!("mmap-write {}", p("plain")).as_str(), OK),
        ],
    );
    assert_eq!((mode("tool"), mode("gtool")), (0o4755, 0o2755));
    r.check_records(&[rec("/unmapped/reason", "set_id").count(3).has(
        "/unmapped/rule",
        "(a set-user-ID or set-group-ID file: it would run outside)",
    )]);
}

/// A root command reads every user's files: the built-in policy's protective `~` rules
/// (`~/.ssh`, ...) cover the other users' homes as well as root's own.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_root_command_keeps_out_of_every_users_secrets() {
    let d = workdir("root-homes");
    let ssh = User::Agent.home().join(".ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    let key = ssh.join("sandbox-test-key");
    std::fs::write(&key, "secret").unwrap();
    let key = key.display().to_string();
    assert_eq!(probe_outside(&["open", &key, "r"]), OK, "outside");
    let r = check(&d, None, &[(format!("open {key} r").as_str(), EACCES)]);
    r.check_records(&[rec("/file/path", key.as_str()).has("/unmapped/rule", "files.deny[0]")]);
    let _ = std::fs::remove_file(&key);
}

/// No user namespace unless the policy allows it (`process.user_namespaces`): in one the
/// command would hold every capability over what it makes there, the kernel code most
/// local privilege escalations start in. By `unshare` and by `clone`, for the agent and
/// for root; both work outside first.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn user_namespaces_only_where_the_policy_allows_them() {
    let d = agent_dir("userns");
    let ops = ["userns-unshare", "userns-clone"];
    for op in ops {
        assert_eq!(probe_outside_as(User::Agent, &[op]), OK, "{op} outside");
    }
    let cases: Vec<(&str, &str)> = ops.iter().map(|op| (*op, EPERM)).collect();
    for user in [User::Agent, User::Root] {
        let r = check_as(user, &d, None, &cases);
        r.check_records(&[rec("/unmapped/activity", "user_namespace")
            .count(2)
            .has("/unmapped/reason", "user_namespace")
            .has("/unmapped/rule", "process.user_namespaces")]);
    }
    let allowed: Vec<(&str, &str)> = ops.iter().map(|op| (*op, OK)).collect();
    let r = check_as(
        User::Agent,
        &d,
        Some("process:\n  user_namespaces: true\n"),
        &allowed,
    );
    assert!(r.audit.is_empty(), "{:#?}", r.audit);
}
