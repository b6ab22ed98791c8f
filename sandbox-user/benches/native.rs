//! The `file_open` decision at native speed, phase by phase (`cargo xtask bench --native`,
//! or `cargo bench -p sandbox-user --bench native` as root).
//!
//! The development machines cannot attach BPF-LSM programs (their kernel refuses every
//! BPF trampoline), so the hook-overhead benchmark runs under QEMU/TCG, whose helper calls
//! and noise hide what a decision costs on hardware. This one loads the real BPF object
//! with its maps filled by the real loader (`Enforcer::create_maps` + `apply`, compiled
//! policies of 10, 1,000 and 10,000 rules) and runs the decision's own code through BPF
//! iterators (`iter/task_file`, `sandbox-ebpf/src/bench.rs`): for each open file of a
//! process holding a project-shaped tree of real files, one phase of what `file_open`
//! runs. The kernel's BPF run statistics (`BPF_ENABLE_STATS`) give the time spent in each
//! program; ns per file = run time / runs. Then:
//! - the syscalls themselves (open+close, a `grep -r`-like tree read) on the same files,
//!   natively, so that the in-scope overhead on hardware can be estimated: (syscall + hook
//!   + trampoline) / syscall. The trampoline is not measured (none loads here): estimated;
//! - the denial path: the same decision with every file denied (a record per file into
//!   the ring), and the real event pump (`runtime::run::Pump`: decode, OCSF record, JSON
//!   line to an audit file) draining them: ns per record on each side.
//!
//! The iterator runs in the reading task, so the scope lookup sees this process: it is
//! moved into a cgroup of its own (`<cgroup2>/sandbox/native-bench`, level 2 like a run's)
//! and that cgroup is bound to the policy in the maps. No program is attached to any hook:
//! nothing on the host is confined by this.
#![expect(
    clippy::cast_precision_loss,
    reason = "nanosecond counts shown as floats, far below 2^52"
)]

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{BufRead, Read};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use aya::maps::Array;
use aya::programs::{BtfTracePoint, Iter};
use sandbox_common::DirCacheCtl;
use sandbox_user::audit::{AuditFile, Event, Formatter};
use sandbox_user::compile::{CompiledPolicy, compile};
use sandbox_user::host::cgroup::{self, Cgroup};
use sandbox_user::host::{mounts, safepath};
use sandbox_user::kernel::dircache;
use sandbox_user::kernel::loader::{self, Enforcer, KernelFit};
use sandbox_user::policy::{Context, load_str};
use sandbox_user::runtime::session::Pump;

const BASE: &str = "/tmp/sandbox-native-bench";
/// The tree of `sandbox-bench`'s realistic workload (tests/src/bin/bench.rs), same shape.
const TREE: &str = "/tmp/sandbox-native-bench/work/project";

/// Dependencies in the tree: 30 (`sandbox-bench`'s), or `SANDBOX_BENCH_DEPS` (300: a
/// project of 18,200 files, past the kept results' capacity of old; with
/// `SANDBOX_BENCH_SYSCALL=1`: the denial path's samples are sized for 2,000 files).
fn deps() -> usize {
    std::env::var("SANDBOX_BENCH_DEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

/// Files in the tree: 200 of `src/`, 60 per dependency.
fn tree_len() -> usize {
    200 + 60 * deps()
}
/// Iterator passes over the held files per sample, and samples per figure (median).
const PASSES: u32 = 20;
const SAMPLES: usize = 7;
/// Passes per sample of the denial path: the records of one sample must fit the ring
/// (8 MiB) before the pump drains them.
const DENY_PASSES: u32 = 5;

/// The benchmark programs (see sandbox-ebpf/src/bench.rs).
const PROGRAMS: [&str; 12] = [
    "bench_empty",
    "bench_facts",
    "bench_walk",
    "bench_scope",
    "bench_resolve",
    "bench_resolve_cold",
    "bench_resolve_dir",
    "bench_resolve_name",
    "bench_forget_name",
    "bench_open",
    "bench_open_cold",
    "bench_open_dir",
];

/// `bpf()` commands and the iterator attach type (include/uapi/linux/bpf.h).
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("hold") {
        hold();
        return Ok(());
    }
    if args.get(1).map(String::as_str) == Some("loop") {
        return looper();
    }
    // SAFETY: plain syscall.
    if unsafe { libc::geteuid() } != 0 {
        println!("the native benchmark needs root (BPF programs and statistics): not run");
        return Ok(());
    }
    let t = Instant::now();
    let kernel = loader::kernel_fit()?;
    let btf_read = t.elapsed();
    if std::env::var_os("SANDBOX_BENCH_START").is_some() {
        // A start's parts alone.
        return start_parts(&kernel, btf_read);
    }
    let ticks = dircache::Ticks::now(true);
    make_tree();
    let files = tree_files();
    let mut holder = Holder::start()?;
    let own = OwnCgroup::enter()?;
    // Started before any BPF object is loaded: a process of few descriptors (its table the
    // one it starts with, which `bench_sys_*` read).
    let mut looper = Looper::start()?;
    let rename_lock = rename_count(&kernel, &own.cgroup, holder.pid())?;
    // Results kept as long as a run keeps them (the tree and the first loads took well
    // over the 100 ms the tick rate needs).
    let _ = MAX_AGE.set(dircache::max_age(ticks, dircache::Ticks::now(false)));
    if let Ok(prog) = std::env::var("SANDBOX_BENCH_SPIN_SYS") {
        // For a profiler (`perf record -a` meanwhile): one `sys_exit` program, 1,000 rules,
        // the cache on, the loop process opening each file of the tree in turn for 15 s.
        let compiled = compiled(&policy(1_000, false))?;
        let mut h = Harness::new(&kernel, &compiled, &own.cgroup, rename_lock, holder.pid())?;
        h.load_at_exit(&prog)?;
        let _link = h.at_exit(&prog)?.attach()?;
        let t = Instant::now();
        // `SANDBOX_BENCH_SPIN_ONE=1`: one file again and again instead.
        let which = if std::env::var_os("SANDBOX_BENCH_SPIN_ONE").is_some() {
            Loop::One
        } else {
            Loop::Tree
        };
        while t.elapsed() < std::time::Duration::from_secs(15) {
            looper.run(which)?;
        }
        println!("{prog}: ran for 15 s");
        return Ok(());
    }
    let native = Native::measure(&files);
    // In the syscall, before the run statistics are on (they would add their clock reads
    // to every run of the programs timed here by the wall clock).
    let in_syscall = {
        let compiled = compiled(&policy(1_000, false))?;
        let inside = {
            let mut h = Harness::new(&kernel, &compiled, &own.cgroup, rename_lock, holder.pid())?;
            h.at_exit_loops(&mut looper, &SYSCALL_PHASES)?
        };
        let elsewhere = own.sibling("native-bench-elsewhere")?;
        let outside = {
            let mut h = Harness::new(&kernel, &compiled, &elsewhere, rename_lock, holder.pid())?;
            h.at_exit_loops(&mut looper, &SYSCALL_OUTSIDE)?
        };
        let _ = std::fs::remove_dir(&elsewhere.path);
        // The body decides there: with the tree denied, each file opened is a record.
        let mut h = Harness::new(
            &kernel,
            &compiled_deny(1_000)?,
            &own.cgroup,
            rename_lock,
            holder.pid(),
        )?;
        let grep_tree_opens = h.in_syscall_records(&mut looper, files.len())?;
        InSyscall {
            inside,
            outside,
            files: files.len(),
            grep_tree_opens,
            grep_opens: grep_opens(),
        }
    };
    if std::env::var_os("SANDBOX_BENCH_SYSCALL").is_some() {
        // The in-syscall figures alone: for work on the hot path.
        native.print();
        in_syscall.print();
        return Ok(());
    }
    let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .map_err(|e| anyhow::anyhow!("BPF_ENABLE_STATS: {e}"))?;

    println!(
        "native harness: {} files held by pid {} ({} dirs deep at most), {PASSES} passes x \
         {SAMPLES} samples per figure; ns per file from the kernel's BPF run statistics",
        files.len(),
        holder.pid(),
        files
            .iter()
            .map(|f| f.as_bytes().split(|b| *b == b'/').count() - 1)
            .max()
            .unwrap_or(0)
    );
    println!();
    println!(
        "{:<34} {:>10} {:>10} {:>10}",
        "phase (ns per file)", "10 rules", "1,000", "10,000"
    );
    let mut table: Vec<(String, [f64; 3])> = Vec::new();
    // "cold": neither the directory's state nor the name's result kept (a miss, both
    // filled); "dir kept": the directory's state kept, the name new (the first open of a
    // file in a directory seen before); "warm": the name's result kept too.
    // The "name new" rows include emptying the name's slot first; the estimates take the
    // "forgetting a name" row (that alone) off them.
    let rows: [(&str, &str, Cache); 15] = [
        ("iterator call (empty program)", "bench_empty", Cache::On),
        ("facts (file_open's reads)", "bench_facts", Cache::On),
        ("scope lookup", "bench_scope", Cache::On),
        ("facts + walk", "bench_walk", Cache::On),
        (
            "forgetting a name (bench only)",
            "bench_forget_name",
            Cache::On,
        ),
        ("resolve, no cache (walk+scan)", "bench_resolve", Cache::Off),
        (
            "resolve, cache cold (miss+fill)",
            "bench_resolve_cold",
            Cache::On,
        ),
        (
            "resolve, dir kept, name new",
            "bench_resolve_dir",
            Cache::On,
        ),
        (
            "resolve, name kept, file new",
            "bench_resolve_name",
            Cache::On,
        ),
        (
            "resolve, cache warm (file kept)",
            "bench_resolve",
            Cache::On,
        ),
        ("file_open body, no cache", "bench_open", Cache::Off),
        ("file_open body, cache cold", "bench_open_cold", Cache::On),
        (
            "file_open body, dir kept, name new",
            "bench_open_dir",
            Cache::On,
        ),
        ("file_open body, cache warm", "bench_open", Cache::On),
        ("file_open body, warm, denied+sent", "", Cache::On),
    ];
    for (label, _, _) in &rows {
        table.push(((*label).to_owned(), [0.0; 3]));
    }
    let mut pump_ns = Vec::new();
    if std::env::var_os("SANDBOX_BENCH_PUMP").is_some() {
        // The denial path alone (1,000 rules): for work on the pump.
        let compiled = compiled_deny(1_000)?;
        let mut h = Harness::new(&kernel, &compiled, &own.cgroup, rename_lock, holder.pid())?;
        let d = h.denials(&compiled)?;
        let [decode, record, json, write, both] = d.stages;
        println!(
            "pump: {:.0} ns a record ({:.0} records/s); stages: decode {decode:.0}, OCSF record \
             {record:.0}, JSON {json:.0} ({:.0} bytes), write {write:.0}; record and JSON \
             together {both:.0}",
            d.pump,
            1e9 / d.pump,
            d.bytes
        );
        return Ok(());
    }
    if std::env::var_os("SANDBOX_BENCH_WARM").is_some() {
        // The warm in-scope decision alone (1,000 rules), its rows taken in turn for 7
        // rounds (a noisy host moves them together): for work on the hot path.
        let compiled = compiled(&policy(1_000, false))?;
        let mut h = Harness::new(&kernel, &compiled, &own.cgroup, rename_lock, holder.pid())?;
        let progs = [
            "bench_empty",
            "bench_scope",
            "bench_resolve_name",
            "bench_resolve",
            "bench_open",
        ];
        let mut all = vec![Vec::new(); progs.len()];
        for _ in 0..7 {
            for (i, p) in progs.iter().enumerate() {
                all[i].push(h.per_file(p, Cache::On)?);
            }
        }
        drop(h);
        let outside = scope_outside(&kernel, &compiled, &own, rename_lock, holder.pid(), 7)?;
        let names = progs.iter().copied().chain(["bench_scope (out)"]);
        for (p, xs) in names.zip(all.into_iter().chain([outside])) {
            let lo = xs.iter().copied().fold(f64::MAX, f64::min);
            println!("{p:<18} min {lo:>6.0}  median {:>6.0} ns", median(xs));
        }
        return Ok(());
    }
    let mut shape = String::new();
    for (col, n) in [10usize, 1_000, 10_000].into_iter().enumerate() {
        let compiled = compiled(&policy(n, false))?;
        let mut h = Harness::new(&kernel, &compiled, &own.cgroup, rename_lock, holder.pid())?;
        if let Some(prog) = std::env::var("SANDBOX_BENCH_SPIN")
            .ok()
            .filter(|_| n == 1_000)
        {
            // For a profiler (`perf record -a` meanwhile): one program, 1,000 rules, the
            // cache on, for 15 s.
            h.cache(Cache::On)?;
            let t = Instant::now();
            while t.elapsed() < std::time::Duration::from_secs(15) {
                h.pass(&prog)?;
            }
            println!("{prog}: ran for 15 s");
            return Ok(());
        }
        for (row, (_, prog, cache)) in rows.iter().enumerate() {
            if prog.is_empty() {
                continue;
            }
            table[row].1[col] = h.per_file(prog, *cache)?;
        }
        if n == 1_000 {
            let t = &compiled.matcher;
            shape = format!(
                "1,000 rules: {} + {} DFA states, {} literals",
                t.anchored.states(),
                t.floating.states(),
                t.literals.len()
            );
        }
        drop(h);
        // The denial path: the same policy with the tree denied; every file is a record.
        let compiled = compiled_deny(n)?;
        let mut h = Harness::new(&kernel, &compiled, &own.cgroup, rename_lock, holder.pid())?;
        let d = h.denials(&compiled)?;
        table[rows.len() - 1].1[col] = d.kernel;
        pump_ns.push(d);
    }
    let compiled = compiled(&policy(1_000, false))?;
    let outside = scope_outside(&kernel, &compiled, &own, rename_lock, holder.pid(), 1)?[0];
    for (label, v) in &table {
        println!("{label:<34} {:>10.0} {:>10.0} {:>10.0}", v[0], v[1], v[2]);
    }
    println!("{:<34} {outside:>10.0}", "scope lookup, task out of scope");
    println!("({shape})");
    per_unit(&table, &files);
    println!();
    native.print();
    println!();
    estimates(&table, &native, &pump_ns, outside);
    println!();
    in_syscall.print();
    println!();
    start_parts(&kernel, btf_read)?;
    holder.stop();
    drop(own);
    Ok(())
}

/// The scope lookup of a task outside every sandbox, `rounds` times: another cgroup of
/// the reading task's level is bound (the reader is then outside, as every task of the
/// host outside a sandbox).
fn scope_outside(
    kernel: &KernelFit,
    compiled: &CompiledPolicy,
    own: &OwnCgroup,
    rename_lock: u64,
    tid: u32,
    rounds: usize,
) -> anyhow::Result<Vec<f64>> {
    let elsewhere = own.sibling("native-bench-elsewhere")?;
    let mut h = Harness::new(kernel, compiled, &elsewhere, rename_lock, tid)?;
    let out = (0..rounds)
        .map(|_| h.per_file("bench_scope", Cache::On))
        .collect();
    drop(h);
    let _ = std::fs::remove_dir(&elsewhere.path);
    out
}

/// How long kept results live, in jiffies: a run's 30 s (`dircache::max_age`), or the
/// programs' 2,000 jiffies (0) until it is measured or when it cannot be.
static MAX_AGE: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Whether the directory cache is on while a program runs.
#[derive(Clone, Copy)]
enum Cache {
    Off,
    On,
}

/// The loaded object with one policy applied, its benchmark programs loaded and linked to
/// the holder's files.
struct Harness {
    enforcer: Enforcer,
    links: HashMap<&'static str, OwnedFd>,
    rename_lock: u64,
    /// The cache's last generation: each time it is turned on, a new one (states kept
    /// under an earlier one, while the free hook did nothing, are never used again).
    generation: u64,
}

impl Harness {
    fn new(
        kernel: &KernelFit,
        compiled: &CompiledPolicy,
        own: &Cgroup,
        rename_lock: u64,
        tid: u32,
    ) -> anyhow::Result<Self> {
        let ids = loader::identities(compiled, 0);
        let mut enforcer = Enforcer::create_maps(compiled, &kernel.offsets, ids.entries.len())?;
        enforcer.apply(compiled, &mounts::read()?, &ids)?;
        enforcer.bind(own)?;
        let mut links = HashMap::new();
        for name in PROGRAMS {
            let (prog, _, _) = load_iter(&mut enforcer, name)?;
            links.insert(name, iter_link(prog, tid)?);
        }
        let mut h = Self {
            enforcer,
            links,
            rename_lock,
            generation: 0,
        };
        h.cache(Cache::On)?;
        Ok(h)
    }

    /// Directory cache slots in use.
    fn slots_used(&mut self) -> anyhow::Result<usize> {
        /// `dircache::DirSlot` (kernel-only): 7 u64 and 8 u32; the inode is the second.
        #[derive(Clone, Copy)]
        #[repr(C)]
        struct Slot([u64; 11]);
        // SAFETY: plain integers, no padding.
        unsafe impl aya::Pod for Slot {}
        let map = self
            .enforcer
            .ebpf_mut()
            .map_mut("DIR_CACHE")
            .ok_or_else(|| anyhow::anyhow!("no DIR_CACHE"))?;
        let a: Array<_, Slot> = Array::try_from(map)?;
        Ok(a.iter()
            .filter_map(Result::ok)
            .filter(|s| s.0[1] != 0)
            .count())
    }

    fn cache(&mut self, c: Cache) -> anyhow::Result<()> {
        let v = DirCacheCtl {
            generation: match c {
                Cache::Off => 0,
                Cache::On => {
                    self.generation += 1;
                    self.generation
                }
            },
            rename_lock: self.rename_lock,
            max_age: MAX_AGE.get().copied().unwrap_or(0),
            // As a run whose move programs count directory moves (none attach here: the
            // count stays where it is, as it does while no directory moves);
            // `SANDBOX_BENCH_OWN_MOVES=0`: stamped with `rename_lock`'s count.
            own_moves: u64::from(std::env::var("SANDBOX_BENCH_OWN_MOVES").as_deref() != Ok("0")),
        };
        let mut maps = self.enforcer.maps();
        let mut a = maps.dir_cache_ctl()?;
        a.set(0, v, 0).map_err(a.err())?;
        Ok(())
    }

    /// (runs, ns) of program `name` so far.
    fn stats(&mut self, name: &str) -> anyhow::Result<(u64, u64)> {
        let i = self
            .enforcer
            .ebpf_mut()
            .program(name)
            .ok_or_else(|| anyhow::anyhow!("no {name}"))?
            .info()?;
        Ok((i.run_count(), i.run_time().as_nanos() as u64))
    }

    /// One pass of `name` over the holder's files.
    fn pass(&self, name: &str) -> anyhow::Result<()> {
        run_iter(&self.links[name])
    }

    /// Median over samples of ns per run of `name` (each run: one file; one run per pass
    /// more, the call that ends the iteration).
    fn per_file(&mut self, name: &str, c: Cache) -> anyhow::Result<f64> {
        self.cache(c)?;
        // Warm: the directories' slots are filled by the first pass, the names' by the
        // second (from a kept directory state), and refilled as they age (every 2 s).
        self.pass(name)?;
        self.pass(name)?;
        let mut xs = Vec::with_capacity(SAMPLES);
        for _ in 0..SAMPLES {
            let (r0, t0) = self.stats(name)?;
            for _ in 0..PASSES {
                self.pass(name)?;
            }
            let (r1, t1) = self.stats(name)?;
            xs.push((t1 - t0) as f64 / (r1 - r0).max(1) as f64);
        }
        Ok(median(xs))
    }

    /// `open`+`close` of the tree's files in turn and of one file, by the wall clock, with
    /// no program on `sys_exit`, with `bench_sys_empty` and with `bench_sys_open`, in turns
    /// ([`SYSCALL_ROUNDS`] rounds, medians). The calling thread is the one measured: in
    /// scope when this harness bound the caller's cgroup.
    /// Medians of ns per open+close (the tree's files in turn, one file) with no program
    /// on `sys_exit`, then with each of `names` alone; [`SYSCALL_ROUNDS`] rounds, each
    /// taking the configurations in another order (a round's first after an attach or
    /// detach is not always the same one).
    fn at_exit_loops(
        &mut self,
        looper: &mut Looper,
        names: &[&'static str],
    ) -> anyhow::Result<AtExit> {
        for name in names {
            self.load_at_exit(name)?;
        }
        let configs: Vec<Option<&str>> = [None]
            .into_iter()
            .chain(names.iter().map(|n| Some(*n)))
            .collect();
        let mut xs: Vec<[Vec<f64>; COLS]> = vec![Default::default(); configs.len()];
        // Round 0 is not counted: the first open of each file under the program fills the
        // caches, as the iterators' first passes do.
        for round in 0..=SYSCALL_ROUNDS {
            for k in 0..configs.len() {
                let c = (k + round) % configs.len();
                let link = match configs[c] {
                    Some(name) => Some((name, self.at_exit(name)?.attach()?)),
                    None => None,
                };
                let (tree, single) = (looper.run(Loop::Tree)?, looper.run(Loop::One)?);
                // A first grep: the caches' new generation (as a new run's) keeps nothing
                // of the passes before; then the same grep again.
                self.cache(Cache::On)?;
                let first = looper.run(Loop::Grep)?;
                let again = looper.run(Loop::Grep)?;
                let renamed = looper.run(Loop::GrepRenamed)?;
                if round > 0 {
                    for (i, v) in [tree, single, first, again, renamed]
                        .into_iter()
                        .enumerate()
                    {
                        xs[c][i].push(v);
                    }
                }
                if let Some((name, id)) = link {
                    self.at_exit(name)?.detach(id)?;
                }
            }
        }
        let wall = xs.into_iter().map(|v| v.map(median)).collect();
        let program = self.program_ns(looper, names)?;
        Ok(AtExit { wall, program })
    }

    /// The time spent in each of `names` (`sys_exit` programs) while the loops run, by the
    /// kernel's run statistics: ns per unit of each loop (an open+close; for `grep -r`, a
    /// file of the tree), median of [`SYSCALL_ROUNDS`] rounds that take the two programs in
    /// turn. The programs run at every syscall's exit on the host: the difference of the
    /// two over the same loop is what the second does more at the opens it decides, in the
    /// very syscall and with the data as the workload leaves them, without the wall
    /// clock's noise (this machine's is larger than the difference).
    fn program_ns(
        &mut self,
        looper: &mut Looper,
        names: &[&'static str],
    ) -> anyhow::Result<Vec<[f64; COLS]>> {
        let _stats = aya::sys::enable_stats(aya::sys::Stats::RunTime)
            .map_err(|e| anyhow::anyhow!("BPF_ENABLE_STATS: {e}"))?;
        let units = [
            (5 * tree_len()) as f64,
            (5 * tree_len()) as f64,
            tree_len() as f64,
            tree_len() as f64,
            tree_len() as f64,
        ];
        let mut xs: Vec<[Vec<f64>; COLS]> = vec![Default::default(); names.len()];
        for round in 0..=SYSCALL_ROUNDS {
            for (k, name) in names.iter().enumerate() {
                let id = self.at_exit(name)?.attach()?;
                for (i, which) in [
                    Loop::Tree,
                    Loop::One,
                    Loop::Grep,
                    Loop::Grep,
                    Loop::GrepRenamed,
                ]
                .into_iter()
                .enumerate()
                {
                    if i == 2 {
                        self.cache(Cache::On)?;
                    }
                    let (_, t0) = self.stats(name)?;
                    looper.run(which)?;
                    let (_, t1) = self.stats(name)?;
                    if round > 0 {
                        xs[k][i].push((t1 - t0) as f64 / units[i]);
                    }
                }
                self.at_exit(name)?.detach(id)?;
            }
        }
        Ok(xs.into_iter().map(|v| v.map(median)).collect())
    }

    /// The `sys_exit` program `name`, loaded.
    fn load_at_exit(&mut self, name: &str) -> anyhow::Result<()> {
        self.at_exit(name)?
            .load("sys_exit", full_btf()?)
            .map_err(|e| anyhow::anyhow!("loading {name}: {}", loader::error_chain(&e)))
    }

    fn at_exit(&mut self, name: &str) -> anyhow::Result<&mut BtfTracePoint> {
        Ok(self
            .enforcer
            .ebpf_mut()
            .program_mut(name)
            .ok_or_else(|| anyhow::anyhow!("{name} is not in the BPF object"))?
            .try_into()?)
    }

    /// Checks that `bench_sys_open` decides in the syscall: every file of the tree opened
    /// once under a policy that denies the tree is a record in the ring, and so is every
    /// file and directory a `grep -r` of the tree opens (its process started by the loop
    /// process: a table of few descriptors too). Returns the grep's records.
    fn in_syscall_records(&mut self, looper: &mut Looper, files: usize) -> anyhow::Result<usize> {
        let name = "bench_sys_open";
        let mut ring = self.enforcer.take_events()?;
        self.load_at_exit(name)?;
        let mut count = |which: Loop| -> anyhow::Result<usize> {
            let id = self.at_exit(name)?.attach()?;
            looper.run(which)?;
            self.at_exit(name)?.detach(id)?;
            let mut records = 0;
            while let Some(item) = ring.next() {
                // The path is relative to its file system's root: the tree's own part.
                if let Ok(e) = Event::decode(&item) {
                    records += usize::from(e.sb_path.windows(13).any(|w| w == b"/work/project"));
                }
            }
            Ok(records)
        };
        let records = count(Loop::TreeOnce)?;
        anyhow::ensure!(
            records == files,
            "bench_sys_open sent {records} records of the tree's {files} files: it does not \
             decide in the syscall"
        );
        let grep = count(Loop::Grep)?;
        anyhow::ensure!(
            grep > files,
            "bench_sys_open sent {grep} records of a grep -r of the tree's {files} files (and \
             its directories): it does not decide in grep's syscalls"
        );
        Ok(grep)
    }

    /// The denial path: ns per file of the `file_open` body that denies and sends a
    /// record (cache warm), and ns per record of the event pump writing them.
    fn denials(&mut self, compiled: &CompiledPolicy) -> anyhow::Result<Denials> {
        let name = "bench_open";
        self.cache(Cache::On)?;
        let mut ring = self.enforcer.take_events()?;
        let ids = loader::identities(compiled, 0);
        let fmt = Formatter::new(compiled, mounts::read()?, &ids)?;
        let log = Path::new(BASE).join("audit.jsonl");
        let _ = std::fs::remove_file(&log);
        // Not rotated: every record of the run stays in one file, to be counted.
        let mut audit = AuditFile::with_rotation(&log, u64::MAX, 1, &safepath::Agent::AnyNonRoot)?;
        let mut pump = Pump::quiet(fmt, &mut audit);
        self.pass(name)?;
        pump.drain(&mut ring, usize::MAX)?;
        let (mut kernel, mut user) = (Vec::new(), Vec::new());
        let mut written = 0u64;
        for _ in 0..SAMPLES {
            let (r0, t0) = self.stats(name)?;
            for _ in 0..DENY_PASSES {
                self.pass(name)?;
            }
            let (r1, t1) = self.stats(name)?;
            kernel.push((t1 - t0) as f64 / (r1 - r0).max(1) as f64);
            let records = u64::from(DENY_PASSES) * tree_len() as u64;
            let t = Instant::now();
            pump.drain(&mut ring, usize::MAX)?;
            user.push(t.elapsed().as_nanos() as f64 / records as f64);
            written += records;
        }
        // The pump's stages apart, on one more sample's records: decode, the OCSF record
        // (names: mount table, rule, cgroup, executable), JSON, the write.
        self.pass(name)?;
        let mut raw: Vec<Vec<u8>> = Vec::new();
        while let Some(item) = ring.next() {
            raw.push(item.to_vec());
        }
        let per = |t: Instant| t.elapsed().as_nanos() as f64 / raw.len().max(1) as f64;
        // The fastest of SAMPLES rounds over the same records (the last round's are
        // written): on a shared host the fastest round is the one least disturbed.
        let mut times: [Vec<f64>; 5] = Default::default();
        let mut json = 0;
        let mut recs = Vec::new();
        for _ in 0..SAMPLES {
            let t = Instant::now();
            let events: Vec<Event> = raw.iter().filter_map(|b| Event::decode(b).ok()).collect();
            times[0].push(per(t));
            let t = Instant::now();
            recs = events.iter().map(|e| pump.fmt.record(e)).collect();
            times[1].push(per(t));
            let t = Instant::now();
            let mut line = Vec::new();
            json = recs
                .iter()
                .map(|r| {
                    line.clear();
                    sandbox_user::audit::json::write(&mut line, r).map_or(0, |()| line.len())
                })
                .sum::<usize>();
            times[2].push(per(t));
            // The record and its JSON one after the other (as the pump makes them).
            let t = Instant::now();
            for e in &events {
                let r = pump.fmt.record(e);
                line.clear();
                sandbox_user::audit::json::write(&mut line, &r)?;
            }
            times[4].push(per(t));
        }
        let t = Instant::now();
        for r in &recs {
            pump.audit.write(r)?;
        }
        pump.audit.flush()?;
        times[3].push(per(t));
        written += raw.len() as u64;
        let stages = times.map(|t| t.into_iter().fold(f64::INFINITY, f64::min));
        drop(pump);
        let drops = self.enforcer.drops()?;
        anyhow::ensure!(
            drops == 0,
            "{drops} records dropped: the ring was too small"
        );
        let lines = std::fs::read_to_string(&log)?
            .lines()
            .filter(|l| l.contains(TREE))
            .count() as u64;
        // The first pass's records are in the log too.
        anyhow::ensure!(
            lines == written + tree_len() as u64,
            "{lines} records of the tree in the log, {} sent",
            written + tree_len() as u64
        );
        Ok(Denials {
            kernel: median(kernel),
            pump: median(user),
            stages,
            bytes: json as f64 / recs.len().max(1) as f64,
        })
    }
}

/// The address of the count the directory cache reads (`rename_lock`'s sequence count).
/// Kernels without `CONFIG_KALLSYMS_ALL` (this development machine's) do not list it: a
/// stand-in is used then, the first read-only kernel symbol (`/proc/kallsyms`, types R and
/// D) whose first word is even and so lets the cache fill. The programs' cost is the same
/// (one kernel read of a u32, twice per decision); only the rename check is not exercised
/// (the stand-in never moves: as on a host where nothing is renamed meanwhile).
fn rename_count(kernel: &KernelFit, own: &Cgroup, tid: u32) -> anyhow::Result<u64> {
    let why = match sandbox_user::kernel::dircache::rename_lock() {
        Ok(addr) => return Ok(addr),
        Err(why) => why,
    };
    let compiled = compiled(&policy(10, false))?;
    let syms = std::fs::read_to_string("/proc/kallsyms")?;
    for line in syms.lines() {
        let mut w = line.split_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (w.next(), w.next(), w.next()) else {
            continue;
        };
        if !matches!(kind, "R" | "D") {
            continue;
        }
        let addr = u64::from_str_radix(addr, 16)?;
        let mut h = Harness::new(kernel, &compiled, own, addr, tid)?;
        h.pass("bench_resolve")?;
        if h.slots_used()? > 0 {
            println!(
                "directory cache: {why}; the stand-in count is {name} ({addr:#x}), read \
                 like rename_lock's"
            );
            return Ok(addr);
        }
    }
    anyhow::bail!("no stand-in for rename_lock lets the directory cache fill ({why})")
}

/// The loops timed in the syscall, run by [`Looper`].
#[derive(Clone, Copy)]
enum Loop {
    /// open+close of each file of the tree in turn, 5 times over.
    Tree,
    /// open+close of one file as many times.
    One,
    /// open+close of each file once.
    TreeOnce,
    /// `grep -r` of the tree (a text found in no file: every file read to its end).
    Grep,
    /// A file outside the tree renamed (and back), then `grep -r` of the tree: an agent's
    /// search after the host renamed a file (`git` writing its index, an editor's save).
    GrepRenamed,
}

/// Renames a file outside the tree and back (`Loop::GrepRenamed`).
fn rename_elsewhere() {
    let dir = std::env::temp_dir().join(format!("sandbox-bench-rename-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for the rename");
    let (a, b) = (dir.join("a"), dir.join("b"));
    std::fs::write(&a, b"").expect("a file to rename");
    std::fs::rename(&a, &b).expect("rename");
    std::fs::rename(&b, &a).expect("rename back");
}

/// The realistic workload of the in-syscall loops: a `grep -r` of the tree, as an agent
/// searching its project runs it (every directory listed, every file opened and read).
/// `LC_ALL=C`: the locale's files are not looked for at each start.
fn grep_tree() -> f64 {
    let t = Instant::now();
    let status = Command::new("grep")
        .args(["-r", "-F", "zq-in-no-file-qz", TREE])
        .env("LC_ALL", "C")
        .stdout(Stdio::null())
        .status()
        .expect("grep runs");
    // 1: nothing found, every file read.
    assert_eq!(status.code(), Some(1), "grep -r of the tree: {status}");
    t.elapsed().as_nanos() as f64
}

/// How many opens one `grep -r` of the tree makes that succeed (what a `file_open`
/// program judges: a failed lookup never reaches the hook), counted by `strace`; `None`
/// without it.
fn grep_opens() -> Option<f64> {
    let out = Command::new("strace")
        .args([
            "-f",
            "-c",
            "-e",
            "trace=open,openat,openat2",
            "-o",
            "/dev/stdout",
        ])
        .args(["grep", "-r", "-F", "zq-in-no-file-qz", TREE])
        .env("LC_ALL", "C")
        .stderr(Stdio::null())
        .output()
        .ok()?;
    // The summary's "total" line: % time, seconds, usecs/call, calls, errors, "total".
    let text = String::from_utf8_lossy(&out.stdout);
    let total = text.lines().find(|l| l.trim_end().ends_with("total"))?;
    let cols: Vec<&str> = total.split_whitespace().collect();
    let calls: f64 = cols.get(3)?.parse().ok()?;
    let errors: f64 = cols.get(4).and_then(|e| e.parse().ok()).unwrap_or(0.0);
    Some(calls - errors)
}

/// A process of this benchmark (`native loop`) that runs the open+close loops when told
/// (a line with the loop's number on its stdin) and answers with ns per open+close. In the
/// benchmark's cgroup, with few descriptors: the `sys_exit` programs find the file in the
/// table a process starts with.
struct Looper {
    child: Child,
    to: std::process::ChildStdin,
    from: std::io::BufReader<std::process::ChildStdout>,
}

impl Looper {
    fn start() -> anyhow::Result<Self> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg("loop")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let to = child.stdin.take().expect("piped");
        let from = std::io::BufReader::new(child.stdout.take().expect("piped"));
        Ok(Self { child, to, from })
    }

    /// ns per open+close of `which`.
    fn run(&mut self, which: Loop) -> anyhow::Result<f64> {
        use std::io::Write as _;
        writeln!(self.to, "{}", which as u8)?;
        let mut line = String::new();
        self.from.read_line(&mut line)?;
        line.trim()
            .parse()
            .map_err(|e| anyhow::anyhow!("the loop process said {line:?}: {e}"))
    }
}

impl Drop for Looper {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The loop process ([`Looper`]).
fn looper() -> anyhow::Result<()> {
    if std::env::var_os("SANDBOX_BENCH_LOOPER").is_none() {
        // A process's table of descriptors is as large as its parent's highest one at the
        // fork (cargo's are high): the loops run in a child of this process once it holds
        // only its standard ones.
        // SAFETY: plain syscall; descriptors from 3 on are not used again here.
        unsafe { libc::close_range(3, u32::MAX, 0) };
        let status = Command::new(std::env::current_exe()?)
            .arg("loop")
            .env("SANDBOX_BENCH_LOOPER", "1")
            .status()?;
        std::process::exit(status.code().unwrap_or(1));
    }
    let files = tree_files();
    let all: Vec<&CString> = files.iter().collect();
    let n = 5 * files.len();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let ns = match line?.trim() {
            "0" => open_close(&all, n),
            "1" => open_close(&all[..1], n),
            "3" => grep_tree() / all.len() as f64,
            "4" => {
                rename_elsewhere();
                grep_tree() / all.len() as f64
            }
            _ => open_close(&all, all.len()),
        };
        println!("{ns}");
    }
    Ok(())
}

/// The programs on `sys_exit` (see sandbox-ebpf/src/bench.rs), each doing what the one
/// before it does and more: finding the file an `openat` opened, then the scope lookup,
/// `file_open`'s reads, the file cache's lookup, the whole `file_open` body.
const SYSCALL_PHASES: [&str; 5] = [
    "bench_sys_empty",
    "bench_sys_scope",
    "bench_sys_facts",
    "bench_sys_lookup",
    "bench_sys_open",
];
/// The in-syscall loops' figures (see [`Harness::at_exit_loops`]).
struct AtExit {
    /// Wall clock, ns per unit: no program, then each program.
    wall: Vec<[f64; COLS]>,
    /// Time in each program, ns per unit, by the run statistics.
    program: Vec<[f64; COLS]>,
}

/// Columns of the in-syscall loops: each file of the tree, one file, `grep -r` first,
/// again, and again after a file's rename elsewhere on the host.
const COLS: usize = 5;

/// Out of scope: the file found, and the body (which stops at the scope lookup).
const SYSCALL_OUTSIDE: [&str; 2] = ["bench_sys_empty", "bench_sys_open"];
/// Rounds of the in-syscall loops (one more first, not counted).
const SYSCALL_ROUNDS: usize = 11;

/// Medians of ns per `open`+`close` [each file of the tree in turn, one file] by the wall
/// clock, in the loop process: with no program, then with each program of
/// [`SYSCALL_PHASES`] (in scope) and of [`SYSCALL_OUTSIDE`] (out of scope) alone.
struct InSyscall {
    inside: AtExit,
    outside: AtExit,
    /// The tree's files.
    files: usize,
    /// The tree's files and directories one `grep -r` opens (records under a denial).
    grep_tree_opens: usize,
    /// Every open of one `grep -r` that succeeds (its own start's too), by `strace`.
    grep_opens: Option<f64>,
}

impl InSyscall {
    fn print(&self) {
        println!(
            "in the syscall (1,000 rules; programs on sys_exit of each openat, which find the \
             file by its descriptor; wall clock, ns per open+close (grep: per file of the \
             tree, its whole run), median of {SYSCALL_ROUNDS} rounds taken in turns; \
             statistics off):"
        );
        println!(
            "  {:<44} {:>14} {:>10} {:>10} {:>10} {:>10}",
            "", "each file of", "one file", "grep -r", "grep -r", "grep -r"
        );
        println!(
            "  {:<44} {:>14} {:>10} {:>10} {:>10} {:>10}",
            "", "the tree", "", "first", "again", "renamed"
        );
        let labels = [
            "the file found (sys_exit's program)",
            "+ the scope lookup",
            "+ file_open's reads",
            "+ the file cache's lookup",
            "the whole file_open body",
        ];
        // Trampolines per unit of each column: one per open+close; a grep's opens (every
        // one that succeeds, its start's too) per file of the tree.
        let grep_opens = self.grep_opens.unwrap_or(self.grep_tree_opens as f64);
        let per_grep = grep_opens / self.files as f64;
        let per_unit = [1.0, 1.0, per_grep, per_grep, per_grep];
        for (scope, at_exit, labels) in [
            ("in scope", &self.inside, &labels[..]),
            ("out of scope", &self.outside, &[labels[0], labels[4]][..]),
        ] {
            let rows = &at_exit.wall;
            let [none, found] = [rows[0], rows[1]];
            let line = |label: String, v: [f64; COLS], sign: bool| {
                let f = |x: f64, w: usize| {
                    if x.is_nan() {
                        format!("{:>w$}", "")
                    } else if sign {
                        format!("{x:>+w$.0}")
                    } else {
                        format!("{x:>w$.0}")
                    }
                };
                println!(
                    "  {label:<44} {} {} {} {} {}",
                    f(v[0], 14),
                    f(v[1], 10),
                    f(v[2], 10),
                    f(v[3], 10),
                    f(v[4], 10)
                );
            };
            let over = |a: [f64; COLS], b: [f64; COLS]| std::array::from_fn(|i| a[i] - b[i]);
            line(format!("{scope}: no program"), none, false);
            line(format!("  {}", labels[0]), over(found, none), true);
            for (label, v) in labels.iter().zip(&rows[1..]).skip(1) {
                line(format!("    {label}"), over(*v, found), true);
            }
            // (none + body + trampolines) / none, per column.
            let estimated = |body: [f64; COLS]| {
                let est =
                    |i: usize| (none[i] + body[i].max(0.0) + TRAMPOLINE_NS * per_unit[i]) / none[i];
                println!(
                    "  {:<44} {:>13.3}x {:>9.3}x {:>9.3}x {:>9.3}x {:>9.3}x",
                    "    estimated, (none + body + trampolines) / none",
                    est(0),
                    est(1),
                    est(2),
                    est(3),
                    est(4)
                );
            };
            estimated(over(rows[rows.len() - 1], found));
            // The same by the run statistics: the time in the body over the time in the
            // program that only finds the file, in the same loops.
            let prog = &at_exit.program;
            let found_ns = prog[0];
            let body = over(prog[prog.len() - 1], found_ns);
            line(
                "  in the programs (run statistics):".into(),
                [f64::NAN; COLS],
                false,
            );
            line(format!("    {}", labels[0]), found_ns, false);
            for (label, v) in labels.iter().zip(prog).skip(1) {
                line(format!("      {label}"), over(*v, found_ns), true);
            }
            estimated(body);
        }
        println!(
            "  (\"the file found\" is the tracepoint's own cost, with the syscalls' slow path \
             it turns on, against no program; the rows below it are over it: what the \
             decision costs in the very syscall it judges, its data as the open left them. \
             The trampoline of a BPF-LSM hook, ~{TRAMPOLINE_NS:.0} ns, is estimated: one per \
             open+close; for grep -r (first: in a new generation of the caches, as in a new \
             run; again: right after; renamed: again, after a file outside the tree was \
             renamed) one per open that succeeds, {grep_opens:.0} a run ({}; \
             the body decided {} of them, the tree's files and directories, checked by their \
             records under a denial) over the tree's {} files.)",
            if self.grep_opens.is_some() {
                "counted by strace"
            } else {
                "no strace: the tree's own opens only"
            },
            self.grep_tree_opens,
            self.files
        );
    }
}

/// What the denial path costs (ns per record).
struct Denials {
    /// The `file_open` body that denies and sends (per file).
    kernel: f64,
    /// The event pump, whole (`Pump::drain`).
    pump: f64,
    /// The pump's stages: decode, OCSF record, JSON, write.
    stages: [f64; 5],
    /// Bytes of JSON per record.
    bytes: f64,
}

/// A link of `prog` iterating over the files of task `tid` only.
fn iter_link(prog: &Iter, tid: u32) -> anyhow::Result<OwnedFd> {
    /// `union bpf_iter_link_info`, its `task` member (16 bytes: the union's size).
    #[repr(C)]
    struct TaskInfo {
        tid: u32,
        pid: u32,
        pid_fd: u32,
        _pad: u32,
    }
    /// `bpf_attr` for `BPF_LINK_CREATE` up to `iter_info_len`.
    #[repr(C)]
    struct LinkCreate {
        prog_fd: u32,
        target_fd: u32,
        attach_type: u32,
        flags: u32,
        iter_info: u64,
        iter_info_len: u32,
        _pad: u32,
    }
    let info = TaskInfo {
        tid,
        pid: 0,
        pid_fd: 0,
        _pad: 0,
    };
    let fd = prog.fd()?.as_fd().as_raw_fd();
    let mut attr = LinkCreate {
        prog_fd: fd.cast_unsigned(),
        target_fd: 0,
        attach_type: BPF_TRACE_ITER,
        flags: 0,
        iter_info: (&raw const info) as u64,
        iter_info_len: size_of::<TaskInfo>() as u32,
        _pad: 0,
    };
    // SAFETY: `attr` and `info` outlive the call.
    Ok(unsafe { sandbox_user::sys::bpf_fd("bpf(BPF_LINK_CREATE)", BPF_LINK_CREATE, &mut attr) }?)
}

/// Runs the iterator of `link` once over its task's files.
fn run_iter(link: &OwnedFd) -> anyhow::Result<()> {
    #[repr(C)]
    struct IterCreate {
        link_fd: u32,
        flags: u32,
    }
    let attr = IterCreate {
        link_fd: link.as_raw_fd().cast_unsigned(),
        flags: 0,
    };
    // SAFETY: as in `iter_link`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_ITER_CREATE,
            &raw const attr,
            size_of::<IterCreate>(),
        )
    };
    if r < 0 {
        anyhow::bail!("BPF_ITER_CREATE: {}", std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor the kernel gave us.
    let mut f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(r as i32) });
    let mut buf = [0u8; 64];
    while f.read(&mut buf)? > 0 {}
    Ok(())
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// The rules of `sandbox-bench` (tests/src/bin/bench.rs): `n` rules in the proportions of
/// real policies (literal denies, anchored and floating globs, exec and network rules).
/// With `deny_tree`, the tree is denied too.
fn policy(n: usize, deny_tree: bool) -> String {
    use std::fmt::Write as _;
    let mut deny = String::new();
    let mut exec = String::new();
    let mut net = String::new();
    if deny_tree {
        let _ = writeln!(deny, "    - {TREE}");
    }
    for i in 0..n {
        let _ = match i % 10 {
            0..=5 => writeln!(deny, "    - /srv/app{}/dir{i}/secret.key", i % 50),
            6 => writeln!(deny, "    - /data/*/project{i}/secrets/**"),
            7 => writeln!(deny, "    - /**/*.ext{i}"),
            8 => writeln!(exec, "    - /usr/local/bin/tool{i}"),
            _ => writeln!(
                net,
                "    - '{}.{}.{}.0/24'",
                11 + (i / 65536) % 200,
                (i / 256) % 256,
                i % 256
            ),
        };
    }
    format!(
        "files:\n  deny:\n    - /tmp/bench/denied\n{deny}exec:\n  deny:\n    - /tmp/bench/denied-bin\n{exec}network:\n  deny:\n    - 198.18.0.0/15\n{net}"
    )
}

fn compiled(text: &str) -> anyhow::Result<CompiledPolicy> {
    let ctx = Context {
        home: "/root".into(),
        cwd: BASE.into(),
        env: HashMap::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    let p = load_str(text, "bench.yaml", &ctx)?;
    Ok(compile(&p, sandbox_user::compile::FIXED_SEED)?)
}

fn compiled_deny(n: usize) -> anyhow::Result<CompiledPolicy> {
    compiled(&policy(n, true))
}

/// `src/` with 200 files in 10 modules, and [`deps`] dependencies (30: `sandbox-bench`'s
/// tree) of 60 files each spread over three levels (`node_modules/dep/lib/sub/file.js`).
fn make_tree() {
    let _ = std::fs::remove_dir_all(TREE);
    let body = "export function f(a, b) {\n  return a + b; // a line of code\n}\n".repeat(20);
    let dirs = (0..10)
        .map(|m| (format!("{TREE}/src/module{m}"), "rs"))
        .chain((0..3 * deps()).map(|i| {
            let (dep, sub) = (i / 3, i % 3);
            (format!("{TREE}/node_modules/dep{dep}/lib/sub{sub}"), "js")
        }));
    for (d, ext) in dirs {
        std::fs::create_dir_all(&d).unwrap();
        for f in 0..20 {
            std::fs::write(format!("{d}/file{f}.{ext}"), &body).unwrap();
        }
    }
}

/// Every file of the tree, in directory order.
fn tree_files() -> Vec<CString> {
    fn walk(dir: &Path, out: &mut Vec<CString>) {
        let mut es: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        es.sort();
        for p in es {
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(CString::new(p.into_os_string().into_encoded_bytes()).unwrap());
            }
        }
    }
    let mut out = Vec::new();
    walk(Path::new(TREE), &mut out);
    assert_eq!(out.len(), tree_len());
    out
}

/// The process whose open files the iterators visit: it opens every file of the tree,
/// says so, closes its standard descriptors (only the tree's files remain) and waits.
fn hold() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a local struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim);
    }
    let files: Vec<std::fs::File> = tree_files()
        .iter()
        .map(|p| {
            std::fs::File::open(
                <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(p.as_bytes()),
            )
        })
        .collect::<Result<_, _>>()
        .expect("open the tree's files");
    println!("ready {}", files.len());
    // SAFETY: the standard descriptors are not used again; then wait to be killed.
    unsafe {
        libc::close(0);
        libc::close(1);
        libc::close(2);
        loop {
            libc::pause();
        }
    }
}

struct Holder(Child);

impl Holder {
    fn start() -> anyhow::Result<Self> {
        let mut c = Command::new(std::env::current_exe()?)
            .args(["hold", TREE])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        std::io::BufReader::new(c.stdout.take().expect("piped"))
            .read_line(&mut line)
            .map_err(anyhow::Error::from)?;
        anyhow::ensure!(
            line.starts_with("ready"),
            "the holder did not start: {line}"
        );
        Ok(Self(c))
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn stop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        self.stop();
    }
}

/// This process in a cgroup of its own (`<cgroup2>/sandbox/native-bench`), which the
/// harnesses bind to their policy; back where it was when dropped.
struct OwnCgroup {
    cgroup: Cgroup,
    back: PathBuf,
}

impl OwnCgroup {
    fn enter() -> anyhow::Result<Self> {
        let root = cgroup::root()?;
        let now = std::fs::read_to_string("/proc/self/cgroup")?;
        let rel = now
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .ok_or_else(|| anyhow::anyhow!("no cgroup v2 line in /proc/self/cgroup"))?;
        let back = root.join(rel.trim_start_matches('/'));
        let dir = root.join("sandbox/native-bench");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string())?;
        Ok(Self {
            cgroup: Cgroup::open(&root, &dir)?,
            back,
        })
    }
}

impl OwnCgroup {
    /// An empty cgroup beside this one (same level).
    fn sibling(&self, name: &str) -> anyhow::Result<Cgroup> {
        let root = cgroup::root()?;
        let dir = self
            .cgroup
            .path
            .parent()
            .ok_or_else(|| anyhow::anyhow!("the bench's cgroup has no parent"))?
            .join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(Cgroup::open(&root, &dir)?)
    }
}

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.back.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        let _ = std::fs::remove_dir(&self.cgroup.path);
    }
}

/// The syscalls on the same files, natively (no program runs on them here).
struct Native {
    /// open+close of each file of the tree in turn.
    open_tree: f64,
    /// open+close of one file again and again (the TCG benchmark's loop).
    open_one: f64,
    /// `grep -r`: list every directory, read every file (per file).
    tree_read: f64,
}

/// ns per `open`+`close` of `paths` in turn, `n` of them: one sample.
fn open_close(paths: &[&CString], n: usize) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        let p = paths[i % paths.len()];
        // SAFETY: plain syscalls on a valid path.
        unsafe {
            let fd = libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            assert!(fd >= 0, "open {p:?}");
            libc::close(fd);
        }
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

impl Native {
    fn measure(files: &[CString]) -> Self {
        let open_close = |paths: &[&CString], n: usize| {
            median((0..SAMPLES).map(|_| open_close(paths, n)).collect())
        };
        let all: Vec<&CString> = files.iter().collect();
        let open_tree = open_close(&all, 10 * files.len());
        let open_one = open_close(&all[..1], 10 * files.len());
        let mut xs = Vec::new();
        for _ in 0..SAMPLES {
            let t = Instant::now();
            let n = read_tree(Path::new(TREE));
            xs.push(t.elapsed().as_nanos() as f64 / n as f64);
        }
        Self {
            open_tree,
            open_one,
            tree_read: median(xs),
        }
    }

    fn print(&self) {
        println!("native syscalls (no program attached; ns per op, median):");
        println!(
            "  open+close, each file of the tree in turn: {:.0}",
            self.open_tree
        );
        println!(
            "  open+close, one file:                      {:.0}",
            self.open_one
        );
        println!(
            "  tree read (list + read), per file:         {:.0}",
            self.tree_read
        );
    }
}

fn read_tree(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            n += read_tree(&e.path());
        } else {
            std::hint::black_box(std::fs::read(e.path()).unwrap().len());
            n += 1;
        }
    }
    n
}

/// The walk per dentry level and the scan per path byte, from the phases and the held
/// files' paths (the mean over them: the runs are spread evenly over the files).
fn per_unit(table: &[(String, [f64; 3])], files: &[CString]) {
    let row = |label: &str| {
        table
            .iter()
            .find(|(l, _)| l.starts_with(label))
            .map_or([0.0; 3], |(_, v)| *v)
    };
    let n = files.len() as f64;
    let bytes = files.iter().map(|f| f.as_bytes().len()).sum::<usize>() as f64 / n;
    let levels = files
        .iter()
        .map(|f| f.as_bytes().split(|b| *b == b'/').count() - 1)
        .sum::<usize>() as f64
        / n;
    let (facts, walk, whole) = (
        row("facts ("),
        row("facts + walk"),
        row("resolve, no cache"),
    );
    for (col, rules) in ["10", "1,000", "10,000"].iter().enumerate() {
        println!(
            "  {rules:>6} rules: walk {:.0} ns per level ({levels:.1} levels), scan and \
             lookups {:.1} ns per byte ({bytes:.0} bytes)",
            (walk[col] - facts[col]) / levels,
            (whole[col] - walk[col]) / bytes
        );
    }
}

/// What a start of `sandbox run` costs on this machine, in the parts that run here (the
/// kernel refuses BPF-LSM programs, so neither their load nor their attach): the kernel's
/// BTF read, the built-in policy's compile, its maps made and applied, and the verifier's
/// pace, fitted over the loads of the benchmark programs (built from the same code as
/// the hooks: time = a fixed part per program + a part per instruction verified). A run
/// counts its programs' instructions with `SANDBOX_LOG=sandbox_user=debug`.
fn start_parts(kernel: &KernelFit, btf_read: std::time::Duration) -> anyhow::Result<()> {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let mut t = Instant::now();
    let mut lap = || {
        let d = t.elapsed();
        t = Instant::now();
        ms(d)
    };
    let compiled = compiled(sandbox_user::policy::DEFAULT_POLICY)?;
    let compile = lap();
    let ids = loader::identities(&compiled, 0);
    let identities = lap();
    let mut enforcer = Enforcer::create_maps(&compiled, &kernel.offsets, ids.entries.len())?;
    let maps = lap();
    enforcer.apply(&compiled, &mounts::read()?, &ids)?;
    let apply = lap();
    // (instructions verified, ms) of each load, three loads of each program.
    let mut loads: Vec<(f64, f64)> = Vec::new();
    for _ in 0..3 {
        for name in PROGRAMS {
            let (prog, took, insns) = load_iter(&mut enforcer, name)?;
            loads.push((f64::from(insns), ms(took)));
            prog.unload()?;
        }
    }
    // Least squares: ms = fixed + per_insn * insns.
    let n = loads.len() as f64;
    let (sx, sy) = loads
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n, sy / n);
    let (sxy, sxx) = loads.iter().fold((0.0, 0.0), |(a, b), (x, y)| {
        (a + (x - mx) * (y - my), b + (x - mx) * (x - mx))
    });
    let per_insn = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    let fixed = my - per_insn * mx;
    println!("a start's parts on this machine (ms; BPF-LSM programs cannot be loaded here):");
    println!(
        "  kernel BTF read {:.0}, built-in policy compiled {compile:.1}, identities {identities:.1}, \
         maps made {maps:.1}, policy applied {apply:.1}",
        ms(btf_read)
    );
    println!(
        "  verifier: {fixed:.2} ms per program + {:.0} ns per instruction verified (fitted \
         over {} loads of the benchmark programs, {:.0}-{:.0} instructions)",
        per_insn * 1e6,
        loads.len(),
        loads.iter().map(|l| l.0).fold(f64::MAX, f64::min),
        loads.iter().map(|l| l.0).fold(0.0, f64::max),
    );
    for (what, programs, insns) in [
        // As counted in the guests at session 28's end (`SANDBOX_LOG=sandbox_user=debug`).
        ("6.1's 45 programs", 45.0, 285_650.0),
        ("7.3's 47 programs", 47.0, 212_937.0),
    ] {
        println!(
            "    at that pace, {what} ({insns:.0} instructions, as counted in the guests): \
             {:.0} ms on one CPU",
            fixed * programs + per_insn * insns
        );
    }
    Ok(())
}

/// Loads the benchmark program `name` of `enforcer`'s object as an iterator over open
/// files: the program, how long the load took and the instructions the verifier
/// processed.
fn load_iter<'a>(
    enforcer: &'a mut Enforcer,
    name: &str,
) -> anyhow::Result<(&'a mut Iter, std::time::Duration, u32)> {
    let prog: &mut Iter = enforcer
        .ebpf_mut()
        .program_mut(name)
        .ok_or_else(|| anyhow::anyhow!("{name} is not in the BPF object"))?
        .try_into()?;
    // The kernel's BTF parsed before the clock starts: the load alone is timed.
    let btf = full_btf()?;
    let t = Instant::now();
    prog.load("task_file", btf)
        .map_err(|e| anyhow::anyhow!("loading {name}: {}", loader::error_chain(&e)))?;
    let took = t.elapsed();
    let insns = prog
        .info()
        .ok()
        .and_then(|i| i.verified_instruction_count())
        .unwrap_or(0);
    Ok((prog, took, insns))
}

/// The BPF trampoline of an LSM hook (entry, `__bpf_prog_enter_lsm`, exit), per program
/// invocation: not measurable here (the kernel refuses trampolines); a figure from
/// published fentry measurements on current x86-64 hardware.
const TRAMPOLINE_NS: f64 = 30.0;

/// What the figures say for real hardware.
fn estimates(table: &[(String, [f64; 3])], n: &Native, pump: &[Denials], outside: f64) {
    let row = |label: &str| {
        table
            .iter()
            .find(|(l, _)| l.starts_with(label))
            .map_or([0.0; 3], |(_, v)| *v)
    };
    let empty = row("iterator call");
    let warm = row("file_open body, cache warm");
    let forget = row("forgetting a name");
    let mut dir = row("file_open body, dir kept");
    for (d, (f, e)) in dir.iter_mut().zip(forget.iter().zip(empty.iter())) {
        *d -= f - e;
    }
    let cold = row("file_open body, cache cold");
    let off = row("file_open body, no cache");
    let deny = row("file_open body, warm, denied");
    println!(
        "estimated in-scope overhead on this hardware: (syscall + hook + trampoline ~{TRAMPOLINE_NS:.0} ns, \
         estimated) / syscall; hook = program - empty program"
    );
    for (col, rules) in ["10", "1,000", "10,000"].iter().enumerate() {
        let hook = |v: [f64; 3]| (v[col] - empty[col]).max(0.0) + TRAMPOLINE_NS;
        let ratio = |base: f64, v: [f64; 3]| (base + hook(v)) / base;
        println!(
            "  {rules:>6} rules: open+close {:.3}x warm, {:.3}x dir kept, {:.3}x cold, {:.3}x \
             no cache; tree read {:.3}x again, {:.3}x first time (dir kept), {:.3}x no cache",
            ratio(n.open_tree, warm),
            ratio(n.open_tree, dir),
            ratio(n.open_tree, cold),
            ratio(n.open_tree, off),
            ratio(n.tree_read, warm),
            ratio(n.tree_read, dir),
            ratio(n.tree_read, off),
        );
    }
    let hook = (outside - empty[1]).max(0.0) + TRAMPOLINE_NS;
    println!(
        "  out of scope (any rule count): open+close {:.3}x, tree read {:.3}x (the \
         trampoline and the scope lookup)",
        (n.open_tree + hook) / n.open_tree,
        (n.tree_read + hook) / n.tree_read
    );
    println!("denial path (every file of the tree denied, cache warm):");
    for (col, rules) in ["10", "1,000", "10,000"].iter().enumerate() {
        let record = deny[col] - warm[col];
        let producer = 1e9 / (n.open_tree + deny[col] - empty[col] + TRAMPOLINE_NS);
        println!(
            "  {rules:>6} rules: the record costs the program {record:.0} ns more; one CPU \
             produces {producer:.0} denials/s; the pump writes a record in {:.0} ns \
             ({:.0} records/s: the pump and, past 256 records in a drain, its writing thread)",
            pump[col].pump,
            1e9 / pump[col].pump
        );
        let [decode, record, json, write, _] = pump[col].stages;
        println!(
            "          pump stages: decode {decode:.0}, OCSF record {record:.0}, JSON {json:.0} \
             ({:.0} bytes, timed alone), write {write:.0} (the encoding included)",
            pump[col].bytes
        );
    }
}

/// The kernel's whole BTF as aya reads it, for the benchmark's own programs (a tracepoint
/// and an iterator: `KernelFit::btf` holds the product's attach points only).
fn full_btf() -> anyhow::Result<&'static aya::Btf> {
    static BTF: std::sync::OnceLock<aya::Btf> = std::sync::OnceLock::new();
    if let Some(b) = BTF.get() {
        return Ok(b);
    }
    let b = aya::Btf::from_sys_fs().map_err(|e| anyhow::anyhow!("kernel BTF: {e}"))?;
    Ok(BTF.get_or_init(|| b))
}
