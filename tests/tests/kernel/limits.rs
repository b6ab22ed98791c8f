//! Limits: the run's cgroup holds the command to its memory, task and CPU limits
//! (`limits`), so a runaway command (a fork bomb, memory it fills, a busy loop) meets them
//! and not the host's; a root command cannot raise its own.

use sandbox_tests::*;

/// The shell line that prints files of the command's own cgroup, read inside it.
fn own_cgroup_files(files: &[&str]) -> String {
    let list: Vec<String> = files.iter().map(|f| format!("\"$cg/{f}\"")).collect();
    format!(
        "cg=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup); cat {}",
        list.join(" ")
    )
}

/// A command that forks past its task limit gets `EAGAIN`, one that fills memory past its
/// memory limit is killed by the kernel, inside the sandbox only; sandbox says both. The
/// same forks and the same memory work outside.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_runaway_command_meets_its_limits_not_the_hosts() {
    let d = agent_dir("limits");
    assert_eq!(probe_outside_as(User::Agent, &["fork-n", "100"]), OK);
    assert_eq!(probe_outside_as(User::Agent, &["alloc", "128"]), OK);
    let policy = "limits:\n  memory: 64M\n  pids: 48\n";
    let r = run_as(
        User::Agent,
        &d,
        Some(policy),
        &[
            "/bin/sh",
            "-c",
            &own_cgroup_files(&["memory.max", "memory.swap.max", "pids.max"]),
        ],
    );
    // As much swap as memory (the guests' kernels account swap).
    let mib64 = (64u64 << 20).to_string();
    assert_eq!(
        r.stdout.split_whitespace().collect::<Vec<_>>(),
        [mib64.as_str(), mib64.as_str(), "48"]
    );
    let r = probe_as(
        User::Agent,
        &d,
        Some(policy),
        &[&["fork-n", "100"], &["alloc", "128"]],
    );
    r.expect("fork-n 100", "EAGAIN");
    assert!(
        !r.stdout.contains("PROBE alloc"),
        "the allocation was let through:\n{}",
        r.stdout
    );
    assert_eq!(r.status, 128 + libc::SIGKILL, "{}", r.stderr);
    for said in [
        "sandbox: the command reached its task limit (48, limits.pids): ",
        "sandbox: the command reached its memory limit (64.0 MiB, limits.memory): the kernel \
         killed 1 of its processes",
    ] {
        assert!(r.stderr.contains(said), "not said: {said}\n{}", r.stderr);
    }
    // And recorded, for whoever reads the audit log.
    r.check_records(&[
        rec("/unmapped/activity", "limit_reached").count(2),
        rec("/unmapped/rule", "limits.memory")
            .has("/unmapped/rule_source", (64u64 << 20).to_string())
            .has("/message", "the kernel killed 1 of its processes"),
        rec("/unmapped/rule", "limits.pids").has("/unmapped/rule_source", "48"),
    ]);
}

/// A command held to a tenth of a CPU waits at its limit in most periods of 100 ms, which
/// the kernel counts and sandbox says; the same busy loop outside, and inside without a
/// CPU limit (the default), is never held. A share is of the host's CPUs.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_busy_command_gets_its_cpu_share_not_every_cpu() {
    let d = agent_dir("limits_cpu");
    assert_eq!(probe_outside_as(User::Agent, &["spin", "100"]), OK);
    let script = format!(
        "{} spin 100 && {}",
        bins().probe.display(),
        own_cgroup_files(&["cpu.max", "cpu.stat"])
    );
    let throttled = |r: &Run| -> u64 {
        r.stdout
            .lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no cpu.stat:\n{}\n{}", r.stdout, r.stderr))
    };
    let r = run_as(
        User::Agent,
        &d,
        Some("limits: {cpu: 0.1}\n"),
        &["/bin/sh", "-c", &script],
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(r.stdout.contains("10000 100000\n"), "{}", r.stdout);
    // 100 ms of CPU time at 10 ms a period: held in about 9 of the 10 periods it spans.
    let held = throttled(&r);
    assert!(held >= 5, "held in {held} periods only:\n{}", r.stdout);
    let said = "sandbox: the command waited at its CPU limit (0.1 CPUs, limits.cpu) in ";
    assert!(r.stderr.contains(said), "not said: {said}\n{}", r.stderr);
    // No limit by default: the controller is on (the run above enabled it in the parent),
    // its limit `max`, and the loop never held.
    let r = run_as(User::Agent, &d, None, &["/bin/sh", "-c", &script]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    assert!(r.stdout.contains("max 100000\n"), "{}", r.stdout);
    assert_eq!(throttled(&r), 0, "{}", r.stdout);
    assert!(!r.stderr.contains("limits.cpu"), "{}", r.stderr);
    // Half of the host's CPUs.
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let r = run_as(
        User::Agent,
        &d,
        Some("limits: {cpu: 50%}\n"),
        &["/bin/sh", "-c", &own_cgroup_files(&["cpu.max"])],
    );
    assert_eq!(
        r.stdout.trim(),
        format!("{} 100000", cpus * 50_000),
        "{}",
        r.stderr
    );
}

/// A command limited to 1 MiB a second of each disk writes and reads 4 MiB past the page
/// cache, and writes 4 MiB through it and syncs them, in no less than about 3 s each, its
/// disk's `io.max` set; outside the same writes and reads are not held.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_command_reads_and_writes_each_disk_at_its_rate() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    let d = agent_dir("limits_io");
    let mnt = d.join("disk");
    std::fs::create_dir_all(&mnt).unwrap();
    let _fs = DiskFs::mount(&std::env::temp_dir().join("kt-limits-io.img"), &mnt, 48);
    User::Agent.own(&mnt);
    let dev = std::fs::metadata(&mnt).unwrap().dev();
    let disk = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let (outside, inside) = (path_str(&mnt, "outside"), path_str(&mnt, "inside"));
    let ms = |stdout: &str| -> Vec<u64> {
        stdout
            .lines()
            .filter_map(|l| l.strip_prefix("io: 4096 KiB in "))
            .filter_map(|l| l.strip_suffix(" ms")?.parse().ok())
            .collect()
    };
    let out = Command::new(bins().probe)
        .args([
            "write-direct",
            &outside,
            "4",
            "::",
            "read-direct",
            &outside,
            "::",
            "write-sync",
            &format!("{outside}.b"),
            "4",
        ])
        .uid(User::Agent.uid())
        .gid(User::Agent.gid())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(ms(&out).len(), 3, "outside:\n{out}");
    // Buffered: the kernel writes the pages back as the command's (the memory controller
    // is on for that, also with `memory: max`), at the disk's rate.
    let policy = "limits:\n  memory: max\n  io: {read: 1M, write: 1M/s}\n";
    let show = format!(
        "{probe} write-direct {inside} 4 :: read-direct {inside} :: write-sync {inside}.b 4 \
         && grep '^{disk} ' /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/io.max",
        probe = bins().probe.display()
    );
    let r = run_as(User::Agent, &d, Some(policy), &["/bin/sh", "-c", &show]);
    assert_eq!(r.status, 0, "{}\n{}", r.stdout, r.stderr);
    let mib = (1u64 << 20).to_string();
    assert!(
        r.stdout
            .contains(&format!("{disk} rbps={mib} wbps={mib} riops=max wiops=max")),
        "{}",
        r.stdout
    );
    let held = ms(&r.stdout);
    assert_eq!(held.len(), 3, "{}", r.stdout);
    // 4 MiB at 1 MiB a second: 3 s at least, whatever the first request's allowance.
    assert!(
        held.iter().all(|&t| t >= 2500),
        "not held at 1 MiB/s: {held:?} ms (outside: {:?})",
        ms(&out)
    );
    // Requests at 200 a second: 256 writes of 4 KiB, each one request or more (kernels
    // split them differently); the disk's count of them says how long they must have
    // taken.
    let policy = "limits:\n  io: {write_iops: 200}\n";
    let show = format!(
        "{probe} write-direct {inside} 1 4K && cg=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup) \
         && grep '^{disk} ' $cg/io.max $cg/io.stat",
        probe = bins().probe.display()
    );
    let r = run_as(User::Agent, &d, Some(policy), &["/bin/sh", "-c", &show]);
    assert!(
        r.stdout
            .contains(&format!("{disk} rbps=max wbps=max riops=max wiops=200")),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    held_at_200_a_second(&r, "wios=");
    // And reads: the 1 MiB just written, 4 KiB a read.
    let policy = "limits:\n  io: {read_iops: 200}\n";
    let show = format!(
        "{probe} read-direct {inside} 0 4K && cg=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup) \
         && grep '^{disk} ' $cg/io.stat",
        probe = bins().probe.display()
    );
    let r = run_as(User::Agent, &d, Some(policy), &["/bin/sh", "-c", &show]);
    held_at_200_a_second(&r, "rios=");
}

/// The run moved 1 MiB in at least 256 requests (`key`: `wios=` or `rios=` of the disk's
/// `io.stat`), and took as long as 200 a second allow, less one first allowance.
fn held_at_200_a_second(r: &Run, key: &str) {
    let took: u64 = r
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("io: 1024 KiB in "))
        .and_then(|l| l.strip_suffix(" ms")?.parse().ok())
        .unwrap_or_else(|| panic!("{}\n{}", r.stdout, r.stderr));
    let requests: u64 = r
        .stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no io.stat: {}", r.stdout));
    assert!(requests >= 256, "{requests} requests only:\n{}", r.stdout);
    assert!(
        took + 500 >= requests * 5,
        "{requests} requests ({key}) in {took} ms: not held at 200 a second"
    );
}

/// A command cannot take a CPU with real-time scheduling, which `cpu.max` does not hold,
/// even when sandbox was started with a real-time priority limit (`RLIMIT_RTPRIO`, as an
/// `@audio` user's login sets), a nice of -5 and the real-time I/O class: outside, that
/// user gets `SCHED_FIFO` and keeps the nice and the class; inside, no real-time policy, a
/// nice of 0 and the best-effort class.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_command_cannot_take_a_cpu_with_real_time_priority() {
    use std::os::unix::process::CommandExt;
    let d = agent_dir("limits_rt");
    // As a login would start them: the limit, nice and class while root, then the ids.
    let eager = |c: &mut Command, uid: Option<(u32, u32)>| {
        // SAFETY: setrlimit, setpriority, ioprio_set, setgid and setuid between fork and
        // exec, on values on the stack.
        unsafe {
            c.pre_exec(move || {
                let l = libc::rlimit {
                    rlim_cur: 10,
                    rlim_max: 10,
                };
                let rt_io: libc::c_long = (1 << 13) | 4;
                if libc::setrlimit(libc::RLIMIT_RTPRIO, &raw const l) != 0
                    || libc::setpriority(libc::PRIO_PROCESS, 0, -5) != 0
                    || libc::syscall(libc::SYS_ioprio_set, 1, 0, rt_io) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                if let Some((uid, gid)) = uid
                    && (libc::setgid(gid) != 0 || libc::setuid(uid) != 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    };
    let mut c = Command::new(bins().probe);
    c.args(["sched-show", "::", "sched-fifo"]);
    eager(&mut c, Some((User::Agent.uid(), User::Agent.gid())));
    let out = c.output().unwrap();
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.contains("PROBE sched-show -> OTHER -5 1"),
        "outside: {out}"
    );
    assert!(out.contains("PROBE sched-fifo -> OK"), "outside: {out}");
    let cmd = probe_command(&[&["sched-show"], &["sched-fifo"]]);
    let refs: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let r = run_as_prepared(User::Agent, &d, None, &refs, |c| eager(c, None));
    r.expect("sched-show", "OTHER 0 2");
    r.expect("sched-fifo", "EPERM");
}

/// Without a `limits` section the run gets 80% of the host's memory and 4,096 tasks;
/// `max` sets no limit.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn the_default_limits_and_none() {
    let d = agent_dir("limits_default");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    // The kernel keeps whole pages.
    let want = (kib << 10) / 100 * 80 / 4096 * 4096;
    let show = own_cgroup_files(&["memory.max", "pids.max"]);
    let r = run_as(User::Agent, &d, None, &["/bin/sh", "-c", &show]);
    assert_eq!(
        r.stdout.split_whitespace().collect::<Vec<_>>(),
        [want.to_string().as_str(), "4096"]
    );
    let r = run_as(
        User::Agent,
        &d,
        Some("limits: {memory: max, pids: max}\n"),
        &["/bin/sh", "-c", &show],
    );
    assert_eq!(
        r.stdout.split_whitespace().collect::<Vec<_>>(),
        ["max", "max"]
    );
    assert_eq!(r.status, 0, "{}", r.stderr);
}

/// A root command cannot write its own cgroup's limits (they are its parent's, as in
/// cgroup v2's delegation), only `cgroup.subtree_control` (for cgroups below its own), the
/// pressure files (triggers) and `memory.reclaim`.
/// Root outside writes the same files of a cgroup of its own.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_root_command_cannot_raise_its_own_limits() {
    let d = workdir("limits_root");
    let files = [
        ("memory.max", EACCES),
        ("pids.max", EACCES),
        ("cgroup.max.descendants", EACCES),
        ("cgroup.freeze", EACCES),
        ("cgroup.type", EACCES),
        ("memory.swap.max", EACCES),
        ("cpu.max", EACCES),
        ("cpu.weight", EACCES),
        ("cpu.max.burst", EACCES),
        ("cpu.idle", EACCES),
        ("io.max", EACCES),
        ("cgroup.pressure", EACCES),
        ("cgroup.subtree_control", OK),
        ("memory.pressure", OK),
        ("memory.reclaim", OK),
    ];
    // Outside: a cgroup of the test's own, its memory, pids, cpu and io controllers enabled
    // by a run above (sandbox enables them from the root down; cpu and io for their limits).
    let cpu = "limits:\n  cpu: 1\n  io: {write: 1G}\n";
    let r = run_in(&d, Some(cpu), &d, &["true"]);
    assert_eq!(r.status, 0, "{}", r.stderr);
    let mine = std::path::Path::new("/sys/fs/cgroup/kt-limits-root");
    let _ = std::fs::remove_dir(mine);
    std::fs::create_dir(mine).unwrap();
    for (f, _) in files {
        assert_eq!(
            probe_outside(&["open", &format!("{}/{f}", mine.display()), "w"]),
            OK,
            "{f} outside"
        );
    }
    std::fs::remove_dir(mine).unwrap();
    let ops: Vec<String> = files
        .iter()
        .map(|(f, _)| format!("open \"$cg/{f}\" w"))
        .collect();
    let script = format!(
        "cg=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup); {} {}",
        bins().probe.display(),
        ops.join(" :: ")
    );
    // The files are writable by the policy: what refuses them is the cgroup's boundary.
    let policy = format!("files:\n  write: [/sys/fs/cgroup]\n{cpu}");
    let r = run_in(&d, Some(&policy), &d, &["/bin/sh", "-c", &script]);
    let cgroup = r
        .audit
        .iter()
        .find_map(|v| v["unmapped"]["actor"]["cgroup"].as_str())
        .unwrap_or_else(|| panic!("no record: {}\n{}", r.stdout, r.stderr))
        .to_owned();
    for (f, want) in files {
        r.expect(&format!("open /sys/fs/cgroup{cgroup}/{f} w"), want);
    }
    r.check_records(&[
        rec("/unmapped/rule", "self_protection").count(12),
        rec("/file/path", format!("/sys/fs/cgroup{cgroup}/memory.max"))
            .has("/unmapped/rule", "self_protection"),
    ]);
}

/// The run's cgroup is not below the one sandbox was started in, so that cgroup's limits
/// (a CI runner's, a user slice's) are set on the run's too: started in a cgroup of 100
/// tasks, 512 MiB and three CPUs' worth of time (in periods of 200 ms), pinned to one CPU,
/// the command gets 100 tasks, 80% of 512 MiB and that time, on that CPU; a share is of the
/// one CPU.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn the_limits_sandbox_was_started_under_hold_for_the_run() {
    let d = agent_dir("limits_invoker");
    // The controllers enabled at the root (a run enables memory and pids; cpu only for a
    // CPU limit).
    assert_eq!(run_in(&d, None, &d, &["true"]).status, 0);
    std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+cpu +cpuset").unwrap();
    let cg = std::path::Path::new("/sys/fs/cgroup/kt-invoker");
    let _ = std::fs::remove_dir(cg);
    std::fs::create_dir(cg).unwrap();
    std::fs::write(cg.join("pids.max"), "100").unwrap();
    std::fs::write(cg.join("memory.max"), (512u64 << 20).to_string()).unwrap();
    // Three CPUs' worth (in 200 ms periods), more than the one CPU it may use.
    std::fs::write(cg.join("cpu.max"), "600000 200000").unwrap();
    // Pinned to the last CPU (the guests have two).
    let last = std::thread::available_parallelism().unwrap().get() - 1;
    assert!(last > 0, "one CPU: nothing to pin to");
    std::fs::write(cg.join("cpuset.cpus"), last.to_string()).unwrap();
    let show = own_cgroup_files(&["memory.max", "pids.max", "cpu.max", "cpuset.cpus.effective"]);
    let r = run_as_started_in(cg, User::Agent, &d, None, &["/bin/sh", "-c", &show]);
    let want = (512u64 << 20) / 100 * 80 / 4096 * 4096;
    assert_eq!(
        r.stdout.split_whitespace().collect::<Vec<_>>(),
        [
            want.to_string().as_str(),
            "100",
            "300000",
            "100000",
            last.to_string().as_str()
        ],
        "{}",
        r.stderr
    );
    // A written limit above the invoker's is held to it; a share is of what it has.
    let r = run_as_started_in(
        cg,
        User::Agent,
        &d,
        Some("limits: {memory: max, pids: 5000, cpu: 50%}\n"),
        &["/bin/sh", "-c", &show],
    );
    assert_eq!(
        r.stdout.split_whitespace().collect::<Vec<_>>(),
        [
            (512u64 << 20).to_string().as_str(),
            "100",
            "50000",
            "100000",
            last.to_string().as_str()
        ],
        "{}",
        r.stderr
    );
    let _ = std::fs::remove_dir(cg);
}
