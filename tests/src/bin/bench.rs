//! `sandbox-bench`: hook overhead, measured in one run inside the VM (`cargo xtask bench`).
//!
//! Each figure is the median ns/op of a loop, run as a separate process:
//! - `none`: no BPF programs attached at all;
//! - `floor`: BPF-LSM programs that decide nothing on the loops' hooks (not sandbox's:
//!   `sandbox-user/examples/floor.rs`, in the guest when `cargo xtask bench` built it),
//!   what any BPF-LSM program costs there;
//! - `out of scope`: programs attached and a cgroup bound, the loop outside it;
//! - `in scope, N rules`: the loop is the command of `sandbox run` with an N-rule policy;
//! - `no directory cache`: the same with `SANDBOX_DIR_CACHE=0` (every path walked whole).
//!
//! Ratios are against `none` of the same run. Under QEMU/TCG absolute times are inflated;
//! the ratios are what to read. Every run but the out-of-scope and floor rows' starts once
//! the programs of the runs before it are gone (a finished run's detach one link at a
//! time takes seconds on 6.1 and 6.12, and while it lasts the loops pay for those
//! programs too).
//!
//!   sandbox-bench                 the driver: prints the table
//!   sandbox-bench loop PORT       the measured loops (open+close, connect, fork+exec,
//!                                 ioctl, socket, tree read, build)
//!   sandbox-bench cc SRC OUT      the build workload's compiler (see `build`)
//!   sandbox-bench ld OUT OBJ...   and its linker
//!   sandbox-bench flood N [K]     N denied opens as fast as possible (the event stream):
//!                                 of one file, or of K files in turn
//!
//! The flood phase checks that no denial is lost silently: every one of the N denied opens
//! is a record in the audit log, counted in a record of identical ones (its `count`), or
//! counted in a `Records Lost` record (OCSF: its `unmapped.activity` is `audit_loss`, the
//! number lost is its `count`).
#![expect(
    clippy::cast_precision_loss,
    reason = "nanosecond counts and rates shown as floats, far below 2^52"
)]

use std::fmt::Write as _;
use std::io::Write;
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const OPEN_N: u32 = 20_000;
const CONNECT_N: u32 = 2_000;
const EXEC_N: u32 = 200;
const IOCTL_N: u32 = 20_000;
const SOCKET_N: u32 = 20_000;
/// The loops' columns, in the order `loops` prints them.
const COLUMNS: [&str; 8] = [
    "open+close",
    "connect (lo)",
    "fork+exec",
    "ioctl",
    "socket+close",
    "tree, 1st pass",
    "tree, later passes",
    "build (per build)",
];
/// A project-shaped tree for the realistic workload (`grep -r`): a source directory and
/// dependencies several levels deep, `TREE_FILES` small files in all.
const TREE: &str = "/tmp/bench/work/project";
const TREE_FILES: u32 = 2_000;
const TREE_PASSES: u32 = 3;
/// A C-shaped project for the build workload: sources that include headers that include
/// other headers, compiled one process per source, then linked (see [`build`]).
const PROJECT: &str = "/tmp/bench/work/cproject";
const SOURCES: u32 = 30;
const HEADERS: u32 = 80;
const BUILDS: u32 = 1;
type Row = [f64; COLUMNS.len()];
const REPEAT: usize = 5;
const FILE: &str = "/tmp/bench/work/file.txt";

fn ns_per(start: Instant, n: u32) -> f64 {
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

/// The measured loops; prints `open=NS connect=NS exec=NS ioctl=NS socket=NS tree0=NS
/// tree=NS build=NS` (the tree read's first pass, then its later passes). `SANDBOX_BENCH_ONLY` (comma-separated `open`, `connect`, `exec`, `ioctl`,
/// `socket`, `tree`, `build`) runs only those (the others print 0): for a closer look at
/// one column, with more runs, in a guest.
fn loops(port: u16) {
    let only = std::env::var("SANDBOX_BENCH_ONLY").ok();
    let want = |c: &str| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == c));
    let timed = |c: &str, n: u32, f: &dyn Fn()| {
        if !want(c) {
            return 0.0;
        }
        let t = Instant::now();
        f();
        ns_per(t, n)
    };
    let path = std::ffi::CString::new(FILE).unwrap();
    let open = timed("open", OPEN_N, &|| {
        for _ in 0..OPEN_N {
            // SAFETY: plain syscalls on a valid path.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                assert!(fd >= 0, "open {FILE} failed");
                libc::close(fd);
            }
        }
    });
    let connect = timed("connect", CONNECT_N, &|| {
        for _ in 0..CONNECT_N {
            let s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("loopback connect");
            drop(s);
        }
    });
    let exec = timed("exec", EXEC_N, &|| {
        for _ in 0..EXEC_N {
            let st = Command::new("/bin/true").status().expect("exec /bin/true");
            assert!(st.success());
        }
    });
    // A harmless ioctl on a pipe (FIONREAD): the file_ioctl hook's path for every ioctl.
    let mut fds = [0i32; 2];
    // SAFETY: plain syscalls on our own fds.
    unsafe { assert_eq!(libc::pipe(fds.as_mut_ptr()), 0) };
    let ioctl = timed("ioctl", IOCTL_N, &|| {
        for _ in 0..IOCTL_N {
            let mut n: libc::c_int = 0;
            // SAFETY: FIONREAD writes one int.
            let r = unsafe { libc::ioctl(fds[0], libc::FIONREAD, &raw mut n) };
            assert_eq!(r, 0, "ioctl FIONREAD failed");
        }
    });
    // Socket creation (the socket_create hook) of an allowed family and type.
    let socket = timed("socket", SOCKET_N, &|| {
        for _ in 0..SOCKET_N {
            // SAFETY: plain syscalls.
            unsafe {
                let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
                assert!(fd >= 0, "socket failed");
                libc::close(fd);
            }
        }
    });
    // What an agent's `grep -r` does: list every directory, read every file. The first
    // pass of a run finds every kept state of a new sandbox empty; the later ones are
    // what an agent's next search of the same tree costs.
    let first = std::cell::Cell::new(0.0);
    let all = timed("tree", TREE_FILES * TREE_PASSES, &|| {
        let mut read = 0u32;
        for i in 0..TREE_PASSES {
            let t = Instant::now();
            read += read_tree(std::path::Path::new(TREE));
            if i == 0 {
                first.set(ns_per(t, TREE_FILES));
            }
            if only.is_some() {
                eprintln!("tree pass {i}: {:.0} ns per file", ns_per(t, TREE_FILES));
            }
        }
        assert_eq!(read, TREE_FILES * TREE_PASSES, "files of {TREE} read");
    });
    let tree0 = first.get();
    let passes = f64::from(TREE_PASSES);
    let tree = (all * passes - tree0) / (passes - 1.0);
    // A build: make -j1 of the C-shaped project.
    let build = timed("build", BUILDS, &|| {
        for _ in 0..BUILDS {
            build();
        }
    });
    println!(
        "open={open:.0} connect={connect:.0} exec={exec:.0} ioctl={ioctl:.0} socket={socket:.0} \
         tree0={tree0:.0} tree={tree:.0} build={build:.0}"
    );
}

/// What `make -j1` of [`PROJECT`] does: the object directory made anew (the previous
/// objects unlinked), one compiler process per source (fork+exec of this binary as `cc`),
/// then one `ld` process that reads every object and writes the program. The guest has
/// no compiler (busybox only); `cc` does what a C compiler's front end does to the file
/// system: it opens the source and, recursively, every header it includes (once each, as
/// include guards make a real one do), and writes an object.
fn build() {
    let me = std::env::current_exe().unwrap();
    let obj = format!("{PROJECT}/obj");
    let _ = std::fs::remove_dir_all(&obj);
    std::fs::create_dir(&obj).unwrap();
    let mut objects = Vec::new();
    for i in 0..SOURCES {
        let out = format!("{obj}/unit{i}.o");
        let st = Command::new(&me)
            .args(["cc", &format!("{PROJECT}/src/unit{i}.c"), &out])
            .status()
            .unwrap();
        assert!(st.success(), "cc unit{i}.c failed");
        objects.push(out);
    }
    let st = Command::new(&me)
        .args(["ld", &format!("{obj}/program")])
        .args(&objects)
        .status()
        .unwrap();
    assert!(st.success(), "ld failed");
}

/// `cc SRC OUT`: reads `SRC` and every header it includes, recursively (`#include "x.h"`
/// from `include/`), once each; writes an object of their checksum and sizes.
fn cc(src: &str, out: &str) {
    let mut todo = vec![std::path::PathBuf::from(src)];
    let mut seen = std::collections::HashSet::new();
    let (mut sum, mut bytes) = (0u64, 0usize);
    while let Some(p) = todo.pop() {
        if !seen.insert(p.clone()) {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        bytes += text.len();
        for line in text.lines() {
            if let Some(h) = line
                .strip_prefix("#include \"")
                .and_then(|l| l.strip_suffix('"'))
            {
                todo.push(std::path::Path::new(PROJECT).join("include").join(h));
            }
            sum = line
                .bytes()
                .fold(sum, |a, b| a.rotate_left(5) ^ u64::from(b));
        }
    }
    let body = format!("{sum:016x} {bytes} {}\n", seen.len()).repeat(100);
    std::fs::write(out, body).unwrap();
}

/// `ld OUT OBJ...`: reads every object, writes the program.
fn ld(out: &str, objects: &[String]) {
    let mut program = Vec::new();
    for o in objects {
        program.extend(std::fs::read(o).unwrap());
    }
    std::fs::write(out, program).unwrap();
}

/// [`PROJECT`]: `include/` with [`HEADERS`] headers, each including up to three earlier
/// ones, and `src/` with [`SOURCES`] sources of about 2 KB, each including ten headers.
fn make_project() {
    let _ = std::fs::remove_dir_all(PROJECT);
    std::fs::create_dir_all(format!("{PROJECT}/include")).unwrap();
    std::fs::create_dir_all(format!("{PROJECT}/src")).unwrap();
    let code = "static inline int f(int a, int b) { return a + b; /* a line of code */ }\n";
    for h in 0..HEADERS {
        let mut text = format!("#ifndef H{h}\n#define H{h}\n");
        for k in 1..=3 {
            if h >= k * 7 {
                let _ = writeln!(text, "#include \"h{}.h\"", h - k * 7);
            }
        }
        text.push_str(&code.repeat(10));
        text.push_str("#endif\n");
        std::fs::write(format!("{PROJECT}/include/h{h}.h"), text).unwrap();
    }
    for i in 0..SOURCES {
        let mut text = String::new();
        for k in 0..10 {
            let _ = writeln!(text, "#include \"h{}.h\"", (i * 7 + k * 13) % HEADERS);
        }
        text.push_str(&code.repeat(25));
        std::fs::write(format!("{PROJECT}/src/unit{i}.c"), text).unwrap();
    }
}

/// Reads every file below `dir`; how many.
fn read_tree(dir: &std::path::Path) -> u32 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).expect("list a tree directory") {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += read_tree(&e.path());
        } else {
            let body = std::fs::read(e.path()).expect("read a tree file");
            std::hint::black_box(body.len());
            n += 1;
        }
    }
    n
}

/// The tree: `src/` with 200 files in 10 modules, and 30 dependencies of 60 files each
/// spread over three levels (`node_modules/dep/lib/sub/file.js`).
fn make_tree() {
    let _ = std::fs::remove_dir_all(TREE);
    let body = "export function f(a, b) {\n  return a + b; // a line of code\n}\n".repeat(20);
    let dirs = (0..10)
        .map(|m| (format!("{TREE}/src/module{m}"), "rs"))
        .chain((0..90).map(|i| {
            let (dep, sub) = (i / 3, i % 3);
            (format!("{TREE}/node_modules/dep{dep}/lib/sub{sub}"), "js")
        }));
    let mut made = 0;
    for (d, ext) in dirs {
        std::fs::create_dir_all(&d).unwrap();
        for f in 0..20 {
            std::fs::write(format!("{d}/file{f}.{ext}"), &body).unwrap();
            made += 1;
        }
    }
    assert_eq!(made, TREE_FILES);
}

fn parse(out: &str) -> Row {
    let line = out
        .lines()
        .find(|l| l.starts_with("open="))
        .unwrap_or_else(|| panic!("no result in: {out}"));
    let mut v = [0.0; COLUMNS.len()];
    for (i, kv) in line.split_whitespace().enumerate() {
        v[i] = kv.split_once('=').unwrap().1.parse().unwrap();
    }
    v
}

/// Median, minimum and maximum of each column.
fn median(mut xs: Vec<Row>) -> [Row; 3] {
    let mut out = [[0.0; COLUMNS.len()]; 3];
    for k in 0..COLUMNS.len() {
        xs.sort_by(|a, b| a[k].total_cmp(&b[k]));
        out[0][k] = xs[xs.len() / 2][k];
        out[1][k] = xs[0][k];
        out[2][k] = xs[xs.len() - 1][k];
    }
    out
}

/// An n-rule policy in the proportions of real ones, plus what the loops need.
fn policy(n: usize, port: u16) -> String {
    let mut deny = Vec::new();
    let mut exec = Vec::new();
    let mut net = Vec::new();
    for i in 0..n {
        match i % 10 {
            0..=5 => deny.push(format!("/srv/app{}/dir{i}/secret.key", i % 50)),
            6 => deny.push(format!("/data/*/project{i}/secrets/**")),
            7 => deny.push(format!("/**/*.ext{i}")),
            8 => exec.push(format!("/usr/local/bin/tool{i}")),
            _ => net.push(format!(
                "'{}.{}.{}.0/24'",
                11 + (i / 65536) % 200,
                (i / 256) % 256,
                i % 256
            )),
        }
    }
    let list = |v: &[String]| {
        v.iter().fold(String::new(), |mut out, s| {
            let _ = writeln!(out, "    - {s}");
            out
        })
    };
    format!(
        "files:\n  deny:\n    - /tmp/bench/denied\n    - /tmp/bench/denied.*\n{}exec:\n  deny:\n    - /tmp/bench/denied-bin\n{}network:\n  allow: ['127.0.0.1:{port}']\n  deny:\n    - 198.18.0.0/15\n{}",
        list(&deny),
        list(&exec),
        list(&net)
    )
}

/// BPF symbols the kernel lists now (`[bpf]` lines of /proc/kallsyms: programs and
/// trampolines).
fn bpf_symbols() -> usize {
    std::fs::read_to_string("/proc/kallsyms")
        .map_or(0, |s| s.lines().filter(|l| l.ends_with("[bpf]")).count())
}

/// Waits (up to 2 minutes) until no more BPF symbols are listed than `base`: the programs
/// of a finished run detach after it, one link at a time (seconds on 6.1 and 6.12), and
/// while they do they cost every hook what a set out of scope costs. Each run is measured
/// alone; a run that had to start with them still there says so.
fn settle(base: usize) {
    let deadline = Instant::now() + Duration::from_mins(2);
    while bpf_symbols() > base {
        if Instant::now() > deadline {
            eprintln!("sandbox-bench: programs of an earlier run are still attached");
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn run_loop(cmd: &mut Command) -> Row {
    let out = cmd.output().expect("run loop");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "loop failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&text)
}

#[expect(clippy::too_many_lines, reason = "the driver: one phase after another")]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("loop") {
        loops(args[2].parse().unwrap());
        return;
    }
    if args.get(1).map(String::as_str) == Some("flood") {
        let n: u32 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(0);
        // With K: K distinct files in turn (every denial differs from the one before).
        let k: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(0);
        let paths: Vec<std::ffi::CString> = if k == 0 {
            vec![std::ffi::CString::new("/tmp/bench/denied").unwrap()]
        } else {
            (0..k)
                .map(|i| std::ffi::CString::new(format!("/tmp/bench/denied.{i}")).unwrap())
                .collect()
        };
        let t = Instant::now();
        let mut denied = 0u32;
        for i in 0..n {
            let path = &paths[i as usize % paths.len()];
            // SAFETY: plain syscalls on a valid path.
            unsafe {
                let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    denied += 1;
                } else {
                    libc::close(fd);
                }
            }
        }
        println!("flood denied={denied} ns={}", t.elapsed().as_nanos());
        return;
    }
    if args.get(1).map(String::as_str) == Some("cc") {
        cc(&args[2], &args[3]);
        return;
    }
    if args.get(1).map(String::as_str) == Some("ld") {
        ld(&args[2], &args[3..]);
        return;
    }
    if args.get(1).map(String::as_str) == Some("hold") {
        std::thread::sleep(Duration::from_hours(1));
        return;
    }
    let me = std::env::current_exe().unwrap();
    let sandbox = std::env::var("SANDBOX_BIN").unwrap_or_else(|_| "/usr/bin/sandbox".into());
    std::fs::create_dir_all("/tmp/bench/work").unwrap();
    std::fs::write(FILE, "x").unwrap();
    make_tree();
    make_project();
    // A loopback listener that accepts and drops every connection.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    let p = port.to_string();
    let mut direct = || {
        let mut c = Command::new(&me);
        c.args(["loop", &p]);
        c
    };
    let confined = |n: usize| {
        let f = format!("/tmp/bench/policy-{n}.yaml");
        std::fs::write(&f, policy(n, port)).unwrap();
        let mut c = sandbox_run(&sandbox, &f, "/tmp/bench/audit.jsonl");
        c.arg(&me).args(["loop", &p]);
        c
    };
    let base = bpf_symbols();
    let measure = |cmd: &mut dyn FnMut() -> Command| {
        median(
            (0..REPEAT)
                .map(|_| {
                    settle(base);
                    run_loop(&mut cmd())
                })
                .collect(),
        )
    };
    let mut rows: Vec<(String, [Row; 3])> = Vec::new();
    rows.push(("none (no programs attached)".into(), measure(&mut direct)));
    // The floor: programs that decide nothing on the loops' hooks (not sandbox's; see
    // sandbox-user/examples/floor.rs), what any BPF-LSM program costs there.
    if let Some(floor) = floor() {
        rows.push((
            "floor (empty BPF-LSM programs, no sandbox)".into(),
            floor_row(&floor, &mut direct),
        ));
    }
    // Attach and bind (a held sandbox), then measure outside its cgroup.
    settle(base);
    let f = "/tmp/bench/policy-hold.yaml";
    std::fs::write(f, policy(1000, port)).unwrap();
    let mut holder = sandbox_run(&sandbox, f, "/tmp/bench/audit.jsonl")
        .arg(&me)
        .arg("hold")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let procs = format!("/sys/fs/cgroup/sandbox/run-{}/cgroup.procs", holder.id());
    let deadline = Instant::now() + Duration::from_mins(2);
    while std::fs::read_to_string(&procs).map_or(true, |s| s.trim().is_empty()) {
        assert!(Instant::now() < deadline, "holder never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    rows.push((
        "out of scope (attached, 1,000 rules bound elsewhere)".into(),
        median((0..REPEAT).map(|_| run_loop(&mut direct())).collect()),
    ));
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(holder.id().cast_signed(), libc::SIGTERM) };
    holder.wait().unwrap();
    for n in [10, 1_000, 10_000] {
        rows.push((format!("in scope, {n} rules"), measure(&mut || confined(n))));
    }
    // What the directory cache saves: the same as the 1,000-rule row, every path walked
    // and scanned whole.
    rows.push((
        "in scope, 1000 rules, no directory cache".into(),
        measure(&mut || {
            let mut c = confined(1_000);
            c.env("SANDBOX_DIR_CACHE", "0");
            c
        }),
    ));
    let none = rows[0].1[0];
    let mut out = std::io::stdout();
    let mut head = format!("{:<54}", "configuration");
    for c in COLUMNS {
        let _ = write!(head, " {c:>18}");
    }
    writeln!(out, "{head}").unwrap();
    for (name, [v, lo, hi]) in &rows {
        let mut line = format!("{name:<54}");
        let mut spread = format!("{:<54}", "  (spread of the runs)");
        for k in 0..COLUMNS.len() {
            let cell = format!("{:.0} ns {:>5.2}x", v[k], v[k] / none[k]);
            let _ = write!(line, " {cell:>18}");
            let range = format!("{:.2}-{:.2}x", lo[k] / none[k], hi[k] / none[k]);
            let _ = write!(spread, " {range:>18}");
        }
        writeln!(out, "{line}\n{spread}").unwrap();
    }
    // Every loop must have been confined for real: the denied file stays denied in scope.
    std::fs::write("/tmp/bench/denied", "x").unwrap();
    let check = sandbox_run(
        &sandbox,
        "/tmp/bench/policy-10.yaml",
        "/tmp/bench/audit.jsonl",
    )
    .args(["/bin/cat", "/tmp/bench/denied"])
    .output()
    .unwrap();
    assert!(!check.status.success(), "the bench policy did not confine");
    flood(&sandbox, &me, 0);
    flood(&sandbox, &me, 1000);
}

/// The floor's program (`sandbox-user/examples/floor.rs`), if the guest has it.
fn floor() -> Option<std::path::PathBuf> {
    let p = std::path::PathBuf::from("/usr/bin/sandbox-floor");
    p.exists().then_some(p)
}

/// The loops with the floor's empty programs attached (and nothing else).
fn floor_row(floor: &std::path::Path, direct: &mut dyn FnMut() -> Command) -> [Row; 3] {
    use std::io::BufRead as _;
    let mut held = Command::new(floor)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the floor's programs");
    let mut line = String::new();
    std::io::BufReader::new(held.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("attached"), "the floor's programs: {line}");
    let row = median((0..REPEAT).map(|_| run_loop(&mut direct())).collect());
    // SAFETY: plain syscall on our own child.
    unsafe { libc::kill(held.id().cast_signed(), libc::SIGTERM) };
    held.wait().unwrap();
    row
}

/// `sandbox run --as-root --quiet --audit-log LOG --policy POLICY --`, ready for the
/// command (the guest has no sudo: root is asked for explicitly).
fn sandbox_run(sandbox: &str, policy: &str, log: &str) -> Command {
    let mut c = Command::new(sandbox);
    c.args([
        "run",
        "--as-root",
        "--quiet",
        "--audit-log",
        log,
        "--policy",
        policy,
        "--",
    ]);
    c
}

/// The event stream under a flood of denials: how fast they are produced and recorded, and
/// that records (with the counts of identical ones) + counted losses add up to the
/// denials. `distinct` 0: one file (the kernel counts the repeats); else that many files
/// in turn (every denial is a ring record).
fn flood(sandbox: &str, me: &std::path::Path, distinct: u32) {
    const N: u32 = 200_000;
    for i in 0..distinct {
        std::fs::write(format!("/tmp/bench/denied.{i}"), "x").unwrap();
    }
    let log = "/tmp/bench/flood.jsonl";
    let rotated = |i: u32| format!("{log}.{i}");
    let _ = std::fs::remove_file(log);
    for i in 1..=9 {
        let _ = std::fs::remove_file(rotated(i));
    }
    let t = Instant::now();
    let out = sandbox_run(sandbox, "/tmp/bench/policy-10.yaml", log)
        .arg(me)
        .args(["flood", &N.to_string(), &distinct.to_string()])
        .output()
        .unwrap();
    let wall = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("flood "))
        .unwrap_or_else(|| panic!("no flood result: {text}"));
    let field = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let (denied, ns) = (field("denied="), field("ns="));
    let (mut records, mut counted, mut lost) = (0u64, 0u64, 0u64);
    // The log and its rotated copies (it rotates at 100 MB: 200,000 records are more).
    let text: String = std::iter::once(log.to_owned())
        .chain((1..=9).map(rotated))
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    for l in text.lines() {
        let Ok(rec) = serde_json::from_str::<serde_json::Value>(l) else {
            continue;
        };
        if rec["unmapped"]["activity"] == "audit_loss" {
            lost += rec["count"].as_u64().unwrap_or(0);
        } else if l.contains("/tmp/bench/denied") {
            records += 1;
            counted += rec["count"].as_u64().unwrap_or(1);
        }
    }
    let what = if distinct == 0 {
        "one file".to_owned()
    } else {
        format!("{distinct} files")
    };
    println!(
        "flood ({what}): {denied} denied opens in {:.2} s ({:.0}/s produced); {records} \
         records standing for {counted} + {lost} counted as lost = {} (run took {:.2} s)",
        ns as f64 / 1e9,
        denied as f64 / (ns as f64 / 1e9),
        counted + lost,
        wall.as_secs_f64()
    );
    assert_eq!(u64::from(N), denied, "every flood open must be denied");
    assert_eq!(counted + lost, denied, "denials lost without being counted");
}
