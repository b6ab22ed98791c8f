//! Enforcement that outlives sandbox. The programs' links are pinned in bpffs under
//! `/sys/fs/bpf/sandbox/run-<pid>-<start time>`: if sandbox is killed (OOM killer, root on
//! the host), its direct child dies with it (parent-death signal) but anything that child
//! started keeps running, and stays confined by the pinned programs and their maps. The
//! next `sandbox run` finds runs whose sandbox is gone, kills what is left in their cgroups,
//! removes the cgroups and then the pins (in that order: never a moment unconfined).
//!
//! Records the dead run's programs wrote after its sandbox died are still in that run's
//! ring buffer (the pinned links keep the programs, and the programs keep their maps):
//! before unpinning, the sweep reaches the maps through a pinned link (link -> program ->
//! map ids), drains the ring buffer and reads the drop counter, and hands both to the
//! caller, which writes them into its own audit log. What the dead sandbox had already
//! reported as lost is pinned beside the links (`reported_drops`, written by the pump), so
//! only the remainder is reported again.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use aya::maps::{Array, Map, MapData, PerCpuArray, RingBuf};

use crate::host::cgroup::Cgroup;
use crate::kernel::maps::Orphaned;

/// Where runs pin their links.
pub const PIN_ROOT: &str = "/sys/fs/bpf/sandbox";

/// `starttime` (field 22 of /proc/<pid>/stat): with the pid, names one process for good.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether process `pid` runs this same sandbox binary.
fn is_sandbox(pid: u32) -> bool {
    match (
        std::fs::read_link(format!("/proc/{pid}/exe")),
        std::fs::read_link("/proc/self/exe"),
    ) {
        (Ok(theirs), Ok(ours)) => theirs == ours,
        _ => false,
    }
}

/// Loads of this process so far (names its pin directories apart).
static LOADS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// A new pin directory for this process, or why links cannot be pinned here:
/// `run-<pid>-<start>` for `sandbox run`, `attach-<pid>-<start>-<cgroup id>-<load>` for
/// `sandbox attach` (one per load: a reload pins a second set before the first goes).
pub fn own_dir(attached: Option<u64>) -> Result<PathBuf, String> {
    let root = Path::new(PIN_ROOT);
    let fs = root.parent().expect("PIN_ROOT has a parent");
    let is_bpffs = nix::sys::statfs::statfs(fs)
        .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::BPF_FS_MAGIC);
    if !is_bpffs {
        return Err(format!(
            "{} is not a BPF file system, so enforcement cannot outlive sandbox: if sandbox \
             is killed, processes its command started keep running unconfined. \
             Fix: mount -t bpf bpf {}",
            fs.display(),
            fs.display()
        ));
    }
    let pid = std::process::id();
    let start = start_time(pid).ok_or("cannot read /proc/self/stat")?;
    // A reload loads a second set while the first is still pinned: one directory each.
    let n = LOADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = root.join(match attached {
        None => format!("run-{pid}-{start}"),
        Some(cg) => format!("attach-{pid}-{start}-{cg}-{n}"),
    });
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// (pid, cgroup id) of an `attach-<pid>-<start>-<cgroup id>-<load>` directory name.
fn attach_dir(name: &str) -> Option<(u32, u64)> {
    let mut it = name.strip_prefix("attach-")?.split('-');
    let pid = it.next()?.parse().ok()?;
    let _start: u64 = it.next()?.parse().ok()?;
    Some((pid, it.next()?.parse().ok()?))
}

/// Whether the sandbox that made pin directory `name` (`<kind>-<pid>-<start>[-...]`) is
/// still running.
fn alive(name: &str) -> bool {
    let mut it = name.split('-').skip(1);
    let (Some(pid), Some(start)) = (
        it.next().and_then(|p| p.parse::<u32>().ok()),
        it.next().and_then(|s| s.parse::<u64>().ok()),
    ) else {
        return false;
    };
    start_time(pid) == Some(start)
}

/// After `sandbox attach` bound cgroup `cg`: removes what dead attaches left pinned on it,
/// after reading what their ring buffers still hold.
pub fn remove_stale_attach(cg: u64) -> Vec<Orphans> {
    let Ok(entries) = std::fs::read_dir(PIN_ROOT) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if attach_dir(&name).is_some_and(|(_, c)| c == cg) && !alive(&name) {
            out.push(drain(&e.path()));
            drop(remove_dir(&e.path()));
        }
    }
    out
}

/// Name of the pinned one-entry array holding the drops a run has already reported.
pub const REPORTED_DROPS: &str = "reported_drops";

/// What a run whose sandbox died left in its ring buffer.
#[derive(Debug, Default)]
pub struct Orphans {
    /// The pin directory's name (`run-<pid>-<start>`), which names the dead run.
    pub run: String,
    /// Raw records, as the kernel wrote them.
    pub records: Vec<Vec<u8>>,
    /// Records the kernel could not deliver and the dead sandbox never reported.
    pub lost: u64,
    /// The dead run's aggregation slots (counts of identical denials), per CPU.
    pub pending: Vec<sandbox_common::AggSlot>,
    /// Why the buffer could not be read (records may then be lost; said in the log).
    pub error: Option<String>,
}

/// The counter of reported drops for a new pin directory: created, pinned there, and
/// updated by the pump each time it reports drops.
pub fn reported_drops(dir: &Path) -> Result<Array<MapData, u64>, String> {
    let path = dir.join(REPORTED_DROPS);
    Array::<MapData, u64>::create(1, 0)
        .map_err(|e| format!("creating {REPORTED_DROPS}: {e}"))?
        .pin(&path)
        .map_err(|e| format!("pinning {REPORTED_DROPS}: {e}"))?;
    let data = MapData::from_pin(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let map = Map::from_map_data(data).map_err(|e| e.to_string())?;
    Array::try_from(map).map_err(|e| e.to_string())
}

/// Reads the ring buffer and drop counter of the programs pinned in `dir`.
pub fn drain(dir: &Path) -> Orphans {
    let run = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Orphans {
        run,
        ..Orphans::default()
    };
    if let Err(e) = drain_into(dir, &mut out) {
        out.error = Some(e);
    }
    out
}

/// The pinned program whose maps a dead run's records are read through.
const REPORTING_PROGRAM: &str = "file_open";

fn drain_into(dir: &Path, out: &mut Orphans) -> Result<(), String> {
    // The link of `file_open` leads to the ring buffer and the drop count: it reports. (Not
    // every program does: `file_send_sigiotask` denies silently and uses neither map.)
    let prog_id = aya::programs::links::PinnedLink::from_pin(dir.join(REPORTING_PROGRAM))
        .ok()
        .and_then(|link| aya::programs::links::FdLink::from(link).info().ok())
        .map(|info| info.program_id())
        .ok_or("no pinned link to read the maps through")?;
    let prog = aya::programs::loaded_programs()
        .flatten()
        .find(|p| p.id() == prog_id)
        .ok_or_else(|| format!("program {prog_id} is gone"))?;
    let ids = prog
        .map_ids()
        .map_err(|e| e.to_string())?
        .ok_or("the kernel does not list a program's maps")?;
    let mut drops = 0u64;
    let mut found_ring = false;
    for id in ids {
        let Ok(data) = MapData::from_id(id) else {
            continue;
        };
        let Ok(info) = data.info() else { continue };
        match Orphaned::of(info.name_as_str()) {
            Some(Orphaned::Events) => {
                let map = Map::from_map_data(data).map_err(|e| e.to_string())?;
                let mut ring = RingBuf::try_from(map).map_err(|e| e.to_string())?;
                while let Some(item) = ring.next() {
                    out.records.push(item.to_vec());
                    if out.records.len() >= crate::runtime::session::FINAL_DRAIN {
                        break;
                    }
                }
                found_ring = true;
            }
            Some(Orphaned::Agg) => {
                // Not fatal: a run pinned by an older sandbox may have a slot of another
                // size; its records and lost count are still read (the counts it kept
                // back are then not written).
                let slots = Map::from_map_data(data)
                    .ok()
                    .and_then(|map| PerCpuArray::<_, sandbox_common::AggSlot>::try_from(map).ok())
                    .and_then(|a| a.get(&0, 0).ok());
                if let Some(slots) = slots {
                    out.pending = slots.iter().copied().collect();
                }
            }
            Some(Orphaned::Drops) => {
                let map = Map::from_map_data(data).map_err(|e| e.to_string())?;
                let a: PerCpuArray<_, u64> =
                    PerCpuArray::try_from(map).map_err(|e| e.to_string())?;
                drops = a.get(&0, 0).map_err(|e| e.to_string())?.iter().sum();
            }
            None => {}
        }
    }
    let reported = MapData::from_pin(dir.join(REPORTED_DROPS))
        .ok()
        .and_then(|d| Map::from_map_data(d).ok())
        .and_then(|m| Array::<_, u64>::try_from(m).ok())
        .and_then(|a| a.get(&0, 0).ok())
        .unwrap_or(0);
    out.lost = drops.saturating_sub(reported);
    if found_ring {
        Ok(())
    } else {
        Err("the event ring buffer was not found".into())
    }
}

/// Where a sandbox attaching its programs and the detach of finished runs' links take
/// turns (see [`attach_turn`]): root's, in a directory only root may write (both checked
/// at every open), and denied to every sandboxed command (`arm::protect_own_files`).
/// Whoever could hold it could slow every start.
const TURNS_DIR: &str = "/run/sandbox";
pub const TURNS: &str = "/run/sandbox/attach.lock";

/// How long each side waits for its turn before it goes ahead anyway, and how often it
/// asks meanwhile: turns make starts faster, they are never a condition (a holder that does
/// not let go must neither stop a start nor leave a finished run's programs attached).
const TURN_WAIT_MS: u64 = 2000;
const TURN_STEP_MS: u32 = 5;

/// The turn file, opened (made on first use: root's, mode 0600), if it and its directory
/// are root's and writable by no one else; else none (no turns: starts and detaches as if
/// alone).
fn turns_file() -> Option<OwnedFd> {
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::{Mode, SFlag, fstat};
    let _ = nix::unistd::mkdir(TURNS_DIR, Mode::from_bits_truncate(0o700));
    let trusted = |fd: &OwnedFd, kind: SFlag| {
        fstat(fd).is_ok_and(|st| {
            st.st_uid == 0
                && SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == kind
                && st.st_mode & 0o022 == 0
        })
    };
    let opened = (|| {
        let dir = open(
            TURNS_DIR,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("{TURNS_DIR}: {e}"))?;
        if !trusted(&dir, SFlag::S_IFDIR) {
            return Err(format!("{TURNS_DIR} is not root's alone"));
        }
        let file = openat(
            &dir,
            "attach.lock",
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| format!("{TURNS}: {e}"))?;
        if !trusted(&file, SFlag::S_IFREG) {
            return Err(format!("{TURNS} is not root's alone"));
        }
        Ok(file)
    })();
    opened
        .inspect_err(|e| tracing::debug!("{e}: attach and detach do not take turns"))
        .ok()
}

/// Makes the turn file if it is missing, so that a policy compiled now denies it by inode
/// too (a literal rule gets its file's identity only if the file exists at load: a second
/// name made later would otherwise open it).
pub fn make_turns_file() {
    drop(turns_file());
}

/// This process's turn to attach programs, held until dropped. On 6.1 and 6.12 each detach
/// of a program holds ftrace's lock through an RCU-tasks grace period, and each attach needs
/// that lock: a sandbox started while a finished run's links were still being detached
/// (the next test, an agent's next command) attached its forty programs in turns with
/// those waits, 4.3-4.5 s instead of 0.8-1 s in the 6.1 guest. A detach ([`detach_turn`])
/// starts only while no attach holds the turn, so an attach waits only for the detaches
/// already under way (one per finished run still detaching), and the rest follow it.
pub struct AttachTurn {
    _held: Option<OwnedFd>,
}

pub fn attach_turn() -> AttachTurn {
    let Some(f) = turns_file() else {
        return AttachTurn { _held: None };
    };
    let held = take_turn(f.as_raw_fd(), libc::LOCK_EX);
    if !held {
        tracing::debug!("{TURNS}: held too long by another; attaching without the turn");
    }
    AttachTurn {
        _held: held.then_some(f),
    }
}

/// Takes lock `op` on `fd` without blocking, asking again every [`TURN_STEP_MS`] while
/// another holds it, for at most [`TURN_WAIT_MS`]: whether it was taken. Any error but
/// "held by another" gives up at once. System calls only (a child after fork calls this).
fn take_turn(fd: i32, op: libc::c_int) -> bool {
    let deadline = crate::sys::monotonic_ms().saturating_add(TURN_WAIT_MS);
    loop {
        match crate::sys::try_flock(fd, op) {
            Ok(()) => return true,
            Err(libc::EWOULDBLOCK) if crate::sys::monotonic_ms() < deadline => {
                crate::sys::sleep_ms(TURN_STEP_MS);
            }
            Err(_) => return false,
        }
    }
}

/// Waits (at most [`TURN_WAIT_MS`]) until no attach holds the turn; `turns` is the turn
/// file's descriptor (-1: none). System calls only: a child after fork calls this.
pub fn detach_turn(turns: i32) {
    if turns >= 0 && take_turn(turns, libc::LOCK_SH) {
        let _ = crate::sys::try_flock(turns, libc::LOCK_UN);
    }
}

/// Closes `links` one at a time, each in its turn ([`detach_turn`]).
pub fn detach_in_turns(links: Vec<aya::programs::links::FdLink>) {
    let turns = turns_file();
    let fd = turns.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    for link in links {
        detach_turn(fd);
        drop(link);
    }
}

/// Makes a child process hold this process's BPF links until the returned descriptor (the
/// write end of a pipe) is closed, then close them. Closing a link detaches its program,
/// and on 6.1 and 6.12 every detach waits for an RCU-tasks grace period (ftrace takes the
/// hook's trampoline out), one after the other: 4-6 s for sandbox's forty links, most of
/// it asleep. Left to the child, it no longer holds up sandbox's exit. The caller closes its
/// own copies of the links first, then the descriptor; by then nothing the links guard is
/// left (the run's cgroup is gone), so the programs have nothing to judge meanwhile.
pub fn hand_links_to_a_child() -> std::io::Result<OwnedFd> {
    // Opened before the links are listed: neither can take the number of a link closed
    // meanwhile and be closed by the child as one.
    let turns = turns_file();
    let turns_fd = turns.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let mut keep: Vec<i32> = std::fs::read_dir("/proc/self/fd")?
        .flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path()).ok()?;
            // "anon_inode:bpf_link" (bpf_link_prime names it so).
            (target.as_os_str() == "anon_inode:bpf_link").then_some(fd)
        })
        .collect();
    let links = keep.clone();
    keep.push(read.as_raw_fd());
    if turns_fd >= 0 {
        keep.push(turns_fd);
    }
    keep.sort_unstable();
    // Where closing one by one stops when close_range is refused (before 5.9, or a seccomp
    // filter): the highest descriptor this process may hold (the hard limit: the soft one
    // may have been lowered below descriptors already open).
    let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(
        1 << 20,
        |(soft, hard)| {
            u32::try_from(soft.max(hard))
                .unwrap_or(1 << 20)
                .min(1 << 20)
        },
    );
    // SAFETY: the child only makes system calls (close, close_range, open, write, read,
    // flock, clock_gettime, nanosleep, _exit) on memory made before the fork: nothing that
    // could need a lock another thread of this process held at the fork.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            // The write end first, whatever happens below: holding it, the child would
            // wait for itself forever. (This child's copy only.)
            drop(write);
            let mut first = 0u32;
            for &fd in &keep {
                let fd = fd.unsigned_abs();
                if fd > first {
                    close_between(first, fd - 1, limit);
                }
                first = fd + 1;
            }
            close_between(first, u32::MAX, limit);
            // sandbox protects itself from the OOM killer; the child need not.
            if let Ok(f) = nix::fcntl::open(
                c"/proc/self/oom_score_adj",
                nix::fcntl::OFlag::O_WRONLY,
                nix::sys::stat::Mode::empty(),
            ) {
                let _ = nix::unistd::write(&f, b"0\n");
            }
            let mut byte = [0u8];
            loop {
                match nix::unistd::read(&read, &mut byte) {
                    Err(nix::errno::Errno::EINTR) => {}
                    // The other end closed (or the pipe failed): let the links go.
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            // One at a time, in turns with sandboxes attaching (`attach_turn`).
            for &fd in &links {
                detach_turn(turns_fd);
                let _ = crate::sys::close_raw(fd);
            }
            crate::sys::exit_child()
        }
        nix::unistd::ForkResult::Parent { .. } => {
            drop(turns);
            Ok(write)
        }
    }
}

/// Waits until every BPF program that was running has returned: `membarrier`'s global
/// command is an RCU grace period (`synchronize_rcu`), and non-sleepable BPF programs run
/// inside `rcu_read_lock`. Where the command is refused (`nohz_full` hosts), a pause far
/// longer than any decision.
pub fn wait_for_running_programs() {
    if crate::sys::membarrier_global().is_err() {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Closes descriptors `first..=last` of a child after fork (system calls only): with
/// `close_range`, or one by one up to `limit` where that is refused.
fn close_between(first: u32, last: u32, limit: u32) {
    if crate::sys::close_range(first, last).is_ok() {
        return;
    }
    for fd in first..=last.min(limit) {
        // Closing a descriptor that is not open is harmless.
        let _ = crate::sys::close_raw(fd.cast_signed());
    }
}

/// Removes a pin directory (the pinned links detach when their last reference goes).
pub fn remove_dir(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        std::fs::remove_file(e?.path())?;
    }
    std::fs::remove_dir(dir)
}

/// What the sweep did: one line per run cleaned (or left alone because of an error), and
/// the records the dead runs left.
#[derive(Debug, Default)]
pub struct Swept {
    pub lines: Vec<String>,
    pub orphans: Vec<Orphans>,
}

/// Cleans up after runs whose sandbox died: kills and removes their cgroups, reads what is
/// left in their ring buffers, then unpins their programs.
pub fn sweep(cgroup_root: &Path) -> Swept {
    let Ok(entries) = std::fs::read_dir(PIN_ROOT) else {
        return Swept::default();
    };
    let mut out = Vec::new();
    let mut orphans = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some((pid, cg)) = attach_dir(&name)
            && !alive(&name)
        {
            // Not ours to kill: the service keeps running, confined, until `sandbox attach`
            // binds its cgroup again (which then removes this).
            out.push(format!(
                "enforcement left by a sandbox attach that died (pid {pid}) is still in force \
                 on cgroup id {cg}; it ends when sandbox attach binds that cgroup again, or \
                 when {} is removed",
                e.path().display()
            ));
            continue;
        }
        let Some((pid, start)) = name
            .strip_prefix("run-")
            .and_then(|r| r.split_once('-'))
            .and_then(|(p, s)| Some((p.parse::<u32>().ok()?, s.parse::<u64>().ok()?)))
        else {
            continue;
        };
        if start_time(pid) == Some(start) {
            continue; // that sandbox is still running
        }
        // The pid is another running sandbox's now: a cgroup named by it may be that run's.
        // Left for a later clean-up (never unpinned while a cgroup of the dead run could
        // still hold processes).
        if pid != std::process::id() && is_sandbox(pid) {
            continue;
        }
        if let Some(cg) = crate::host::cgroup::run_cgroup(cgroup_root, pid) {
            let left = Cgroup::open(cgroup_root, &cg).and_then(|c| {
                let n = c.pids().len();
                c.destroy().map(|()| n)
            });
            match left {
                Ok(n) => out.push(format!(
                    "cleaned up after a sandbox that died (pid {pid}): killed {n} process(es) \
                     still confined in {}",
                    cg.display()
                )),
                Err(err) => {
                    out.push(format!(
                        "cannot clean up {} (its sandbox, pid {pid}, died): {err}; its \
                         programs stay pinned in {}",
                        cg.display(),
                        e.path().display()
                    ));
                    continue;
                }
            }
        }
        // Nothing in the cgroup can add records now: read what is left, then unpin.
        orphans.push(drain(&e.path()));
        if let Err(err) = remove_dir(&e.path()) {
            out.push(format!("cannot remove {}: {err}", e.path().display()));
        }
    }
    Swept {
        lines: out,
        orphans,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_names_a_live_process() {
        let me = start_time(std::process::id()).expect("own start time");
        assert_eq!(start_time(std::process::id()), Some(me));
        assert_eq!(start_time(u32::MAX), None);
    }
}
