//! What the programs' directory cache (`sandbox-ebpf/src/dircache.rs`) needs from the
//! host: the address of the kernel's `rename_lock`, whose sequence count tells the
//! programs that no dentry moved since a directory's state was kept.
//!
//! Without it the cache stays off and every path is walked and scanned whole: slower,
//! never less strict. It is off on kernels other than x86-64 too (the programs' lock-free
//! read of a slot relies on x86-64 keeping loads in order), and when `SANDBOX_DIR_CACHE=0`
//! (to measure what it saves). `/proc/kallsyms` is read on a thread beside the load, up to
//! the first `rename_lock` (the core kernel's symbols come before the modules'); what
//! vouches for the address is not the listing but the rename check
//! ([`moved_by_one_rename`]).

use std::io::BufRead;
use std::path::PathBuf;

/// The address of `rename_lock` from `/proc/kallsyms` (needs `CONFIG_KALLSYMS_ALL`, which
/// lists data symbols, and addresses readable by root: `kernel.kptr_restrict` below 2).
pub fn rename_lock() -> Result<u64, String> {
    if !kernel_is_x86_64() {
        return Err("the kernel is not x86-64".into());
    }
    if std::env::var_os("SANDBOX_DIR_CACHE").is_some_and(|v| v == "0") {
        return Err("SANDBOX_DIR_CACHE=0".into());
    }
    let f = std::fs::File::open("/proc/kallsyms").map_err(|e| format!("/proc/kallsyms: {e}"))?;
    let mut line = String::new();
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => {
                return Err("rename_lock is not in /proc/kallsyms (CONFIG_KALLSYMS_ALL)".into());
            }
            Ok(_) => {}
            Err(e) => return Err(format!("/proc/kallsyms: {e}")),
        }
        match symbol(&line, "rename_lock") {
            Some(0) => return Err("/proc/kallsyms hides addresses (kernel.kptr_restrict)".into()),
            Some(addr) => return Ok(addr),
            None => {}
        }
    }
}

/// The running kernel's architecture (the binary's may differ, under emulation).
fn kernel_is_x86_64() -> bool {
    nix::sys::utsname::uname().is_ok_and(|u| u.machine() == "x86_64")
}

/// The address of symbol `name` on a `/proc/kallsyms` line
/// (`ffffffff82a05040 D rename_lock`), if the line is that symbol's (not a module's). The
/// type letter is not trusted (7.3 lists `rename_lock` as `T`): the address is checked by
/// renaming (`moved_by_one_rename`).
fn symbol(line: &str, name: &str) -> Option<u64> {
    let mut f = line.split_ascii_whitespace();
    let addr = f.next()?;
    let _kind = f.next()?;
    let sym = f.next()?;
    if sym != name || f.next().is_some() {
        return None;
    }
    u64::from_str_radix(addr, 16).ok()
}

/// A fresh directory of this process's for a check (`.sandbox-<what>-check-...` in the
/// temporary directory), and the names `a` and `b` in it.
fn fresh_dir(what: &str) -> Result<(PathBuf, PathBuf, PathBuf), String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!(
        ".sandbox-{what}-check-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (a, b) = (dir.join("a"), dir.join("b"));
    Ok((dir, a, b))
}

/// Renames a file of a fresh directory twice, with `watch(true)` before and `watch(false)`
/// after; returns what `read` gave after each rename (the count `inode_rename` saw, bit
/// 32 set once written).
pub fn renames_seen(
    read: impl Fn() -> Result<u64, String>,
    watch: impl Fn(bool) -> Result<(), String>,
) -> Result<[u64; 2], String> {
    let (dir, a, b) = fresh_dir("rename")?;
    let run = || -> Result<[u64; 2], String> {
        std::fs::write(&a, b"").map_err(|e| format!("{}: {e}", a.display()))?;
        watch(true)?;
        std::fs::rename(&a, &b).map_err(|e| format!("rename: {e}"))?;
        let first = read()?;
        std::fs::rename(&b, &a).map_err(|e| format!("rename: {e}"))?;
        let second = read()?;
        Ok([first, second])
    };
    let seen = run();
    let stopped = watch(false);
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    let _ = std::fs::remove_dir(&dir);
    stopped?;
    seen
}

/// Whether two counts seen by consecutive renames (before each one's move) show the first
/// move: both recorded, even, the second 2 or more above the first (other renames on the
/// host may come between) and not absurdly far.
pub fn moved_by_one_rename(seen: [u64; 2]) -> Result<(), String> {
    const WRITTEN: u64 = 1 << 32;
    let [a, b] = seen;
    if a & WRITTEN == 0 || b & WRITTEN == 0 {
        return Err("inode_rename did not record the count".into());
    }
    let (a, b) = ((a & 0xffff_ffff) as u32, (b & 0xffff_ffff) as u32);
    let step = b.wrapping_sub(a);
    if a % 2 != 0 || b % 2 != 0 || !(2..=1 << 24).contains(&step) {
        return Err(format!(
            "rename_lock's count did not follow a rename ({a} then {b}): not the address it seemed"
        ));
    }
    Ok(())
}

/// A reading of the kernel's tick count (`jiffies`, what the programs' `bpf_jiffies64`
/// reads) and of the monotonic clock at the same moment.
#[derive(Clone, Copy, Debug)]
pub struct Ticks {
    jiffies: u64,
    at: std::time::Instant,
}

impl Ticks {
    /// Now, from `/proc/schedstat` (its `timestamp` line is `jiffies`; `CONFIG_SCHEDSTATS`,
    /// which Debian's kernels have). `None` without it. `at` is taken before the read
    /// (`start`) or after it (the end): the interval between two readings is never
    /// shorter than the one their tick counts span, so the rate [`max_age`] finds is never
    /// above the kernel's.
    pub fn now(start: bool) -> Option<Self> {
        use std::io::Read;
        let before = std::time::Instant::now();
        // The first lines are enough (the file lists every CPU and scheduling domain).
        let mut buf = [0u8; 256];
        let n = std::fs::File::open("/proc/schedstat")
            .and_then(|mut f| f.read(&mut buf))
            .ok()?;
        let after = std::time::Instant::now();
        Some(Ticks {
            jiffies: schedstat_jiffies(std::str::from_utf8(&buf[..n]).ok()?)?,
            at: if start { before } else { after },
        })
    }
}

/// The `timestamp` of a `/proc/schedstat` text.
fn schedstat_jiffies(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("timestamp "))
        .and_then(|v| v.trim().parse().ok())
}

/// How long the programs keep a directory's, name's or file's result: 30 s, in jiffies at
/// the tick rate measured between `start` and `end` (at least 100 ms apart: the load
/// between them takes longer), or 0 (the programs' conservative 2,000 jiffies) when it
/// cannot be measured. Agents' tool calls come seconds apart; a kept result outliving
/// them saves each the walk and scan of every directory it reads again. The rate is a
/// lower bound (one tick less than counted, over an interval never shorter than theirs):
/// the life is at most 30 s, so the rename count's wrap stays out of reach.
pub fn max_age(start: Option<Ticks>, end: Option<Ticks>) -> u64 {
    const LIFE_S: f64 = 30.0;
    let (Some(s), Some(e)) = (start, end) else {
        return 0;
    };
    let secs = e.at.saturating_duration_since(s.at).as_secs_f64();
    let ticks = e.jiffies.saturating_sub(s.jiffies).saturating_sub(1);
    if secs < 0.1 || ticks == 0 {
        return 0;
    }
    #[expect(
        clippy::cast_precision_loss,
        reason = "ticks of a load: far below 2^52"
    )]
    let hz = ticks as f64 / secs;
    // CONFIG_HZ is 100 to 1000; far above that is a misreading (below only shortens the
    // life: a short load at HZ=100 reads lower).
    if !(50.0..=1100.0).contains(&hz) {
        return 0;
    }
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "at most 33,000"
    )]
    let age = (hz * LIFE_S) as u64;
    age
}

/// Renames a directory of a fresh directory and back; `count` (the move programs' count
/// of directory moves) must have gone up by four or more for each (other moves on the host
/// may come between).
pub fn dir_rename_counted(count: impl Fn() -> Result<u64, String>) -> Result<(), String> {
    let (dir, a, b) = fresh_dir("move")?;
    let run = || -> Result<[u64; 3], String> {
        std::fs::create_dir(&a).map_err(|e| format!("{}: {e}", a.display()))?;
        let before = count()?;
        std::fs::rename(&a, &b).map_err(|e| format!("rename: {e}"))?;
        let between = count()?;
        std::fs::rename(&b, &a).map_err(|e| format!("rename: {e}"))?;
        Ok([before, between, count()?])
    };
    let seen = run();
    let _ = std::fs::remove_dir(&a);
    let _ = std::fs::remove_dir(&b);
    let _ = std::fs::remove_dir(&dir);
    let [x, y, z] = seen?;
    moves_counted([x, y, z])
}

/// Whether three counts of directory moves, read around two renames of a directory, show
/// each rename's beginnings and ends: `inode_rename`'s and `d_move`'s, 4 for each.
fn moves_counted(seen: [u64; 3]) -> Result<(), String> {
    let [x, y, z] = seen;
    if y.wrapping_sub(x) >= 4 && z.wrapping_sub(y) >= 4 && z.wrapping_sub(x) < 1 << 32 {
        Ok(())
    } else {
        Err(format!(
            "the count of directory moves did not follow a directory's rename ({x}, {y}, {z})"
        ))
    }
}

/// Whether this kernel runs every BPF-LSM program it should: before 6.1.54 (and 6.2) it
/// skipped one on a CPU where another task was preempted inside the same program (the
/// `prog->active` check that tracing programs still have), and a rename could go uncounted.
pub fn lsm_never_skipped() -> Result<(), String> {
    use aya::util::KernelVersion;
    let v = KernelVersion::current().map_err(|e| format!("the kernel's version: {e}"))?;
    if v >= KernelVersion::new(6, 1, 54) {
        Ok(())
    } else {
        Err(format!(
            "kernel {v} may skip a BPF-LSM program (fixed in 6.1.54 and 6.2)"
        ))
    }
}

/// The running kernel's version, if it is one that may skip a BPF-LSM program
/// ([`lsm_never_skipped`]); `None` for newer kernels and when the version is unknown.
pub fn lsm_skipping_kernel() -> Option<aya::util::KernelVersion> {
    use aya::util::KernelVersion;
    KernelVersion::current()
        .ok()
        .filter(|v| *v < KernelVersion::new(6, 1, 54))
}

/// Waits up to a second for `in_progress` (directory moves under way) to read 0.
pub fn none_in_progress(in_progress: impl Fn() -> Result<u64, String>) -> Result<(), String> {
    let mut n = 0;
    for _ in 0..100 {
        n = in_progress()?;
        if n == 0 {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(format!(
        "{n} directory moves still in progress a second after the check (one began while the programs were attached)"
    ))
}

/// Says (a debug diagnostic) why kept states go with every rename on the host.
pub fn renames_void(why: &str) {
    tracing::debug!("directory moves not counted, every rename voids kept states: {why}");
}

/// Says (a debug diagnostic) why the cache is off.
pub fn off(why: &str) {
    tracing::debug!("directory cache off: {why}");
}

/// Says (a debug diagnostic) that the cache is on, and how long results are kept.
pub fn on(max_age: u64) {
    tracing::debug!("directory cache on, results kept {max_age} jiffies (0: 2,000)");
}

#[cfg(test)]
mod tests {
    use super::{Ticks, max_age, moved_by_one_rename, moves_counted, schedstat_jiffies, symbol};
    use std::time::{Duration, Instant};

    #[test]
    fn kept_results_live_30_s_at_the_measured_tick_rate() {
        let t0 = Instant::now();
        let at = |jiffies: u64, ms: u64| {
            Some(Ticks {
                jiffies,
                at: t0 + Duration::from_millis(ms),
            })
        };
        // HZ=250 and HZ=1000 over a 2 s load, HZ=100 over 150 ms: one tick less than
        // counted, never more than 30 s.
        assert_eq!(max_age(at(1_000, 0), at(1_500, 2_000)), 7_485);
        assert_eq!(max_age(at(1_000, 0), at(3_000, 2_000)), 29_985);
        assert_eq!(max_age(at(1_000, 0), at(1_015, 150)), 2_800);
        // Too short to measure, no tick, a rate no kernel has, or no reading: the
        // programs' default.
        assert_eq!(max_age(at(1_000, 0), at(1_005, 50)), 0);
        assert_eq!(max_age(at(1_000, 0), at(1_000, 500)), 0);
        assert_eq!(max_age(at(1_000, 0), at(11_000, 1_000)), 0);
        assert_eq!(max_age(None, at(1_500, 2_000)), 0);
        // The `timestamp` line of /proc/schedstat.
        let text = "version 17\ntimestamp 4295187743\ncpu0 0 0 0 0 0 0 1 2 3\n";
        assert_eq!(schedstat_jiffies(text), Some(4_295_187_743));
        assert_eq!(schedstat_jiffies("version 17\n"), None);
    }

    #[test]
    fn directory_moves_counted_at_both_ends() {
        assert!(moves_counted([10, 14, 18]).is_ok());
        assert!(moves_counted([10, 20, 30]).is_ok());
        // `d_move`'s alone (the rename's beginning not counted), only begun, or not at all.
        assert!(moves_counted([10, 12, 14]).is_err());
        assert!(moves_counted([10, 11, 12]).is_err());
        assert!(moves_counted([10, 10, 10]).is_err());
        assert!(moves_counted([10, 14, 14]).is_err());
    }

    #[test]
    fn a_count_that_moved_with_the_rename() {
        const W: u64 = 1 << 32;
        assert!(moved_by_one_rename([W + 10, W + 12]).is_ok());
        // Others renamed meanwhile.
        assert!(moved_by_one_rename([W + 10, W + 40]).is_ok());
        // Wrapped round.
        assert!(moved_by_one_rename([W + 0xffff_fffe, W]).is_ok());
        // Not moved, odd, not recorded, or some other number.
        assert!(moved_by_one_rename([W + 10, W + 10]).is_err());
        assert!(moved_by_one_rename([W + 11, W + 13]).is_err());
        assert!(moved_by_one_rename([10, W + 12]).is_err());
        assert!(moved_by_one_rename([W + 10, W + 0x7000_0000]).is_err());
    }

    #[test]
    fn kallsyms_lines() {
        assert_eq!(
            symbol("ffffffff82a05040 D rename_lock\n", "rename_lock"),
            Some(0xffff_ffff_82a0_5040)
        );
        assert_eq!(
            symbol("0000000000000000 D rename_lock\n", "rename_lock"),
            Some(0)
        );
        // Kernels differ in the type letter (7.3: `T`); a module's symbol is not the lock.
        assert_eq!(
            symbol("ffffffffa4409800 T rename_lock\n", "rename_lock"),
            Some(0xffff_ffff_a440_9800)
        );
        assert_eq!(
            symbol("ffffffffc0000000 d rename_lock\t[ext4]\n", "rename_lock"),
            None
        );
        assert_eq!(
            symbol("ffffffff82a05040 D rename_locks\n", "rename_lock"),
            None
        );
    }
}
