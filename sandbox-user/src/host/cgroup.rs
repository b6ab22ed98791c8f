//! cgroup v2: finding the hierarchy, creating the per-run cgroup, moving into it, and
//! tearing it down (every process in it killed) when the run ends.

use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sandbox_common::MAX_CGROUP_LEVEL;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no cgroup v2 hierarchy is mounted (mount one: mount -t cgroup2 none /sys/fs/cgroup)")]
    NoCgroup2,
    #[error(
        "the cgroup v2 mount at {0} is not the root of the hierarchy (cgroup namespaces are not supported)"
    )]
    NotRoot(String),
    #[error(
        "sandbox runs in a cgroup namespace of its own (inside a container?): its cgroups' \
         depths there are not the kernel's, so the programs would find no process in scope. \
         Run sandbox in the host's cgroup namespace (e.g. docker run --cgroupns=host)"
    )]
    Namespaced,
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is nested {level} levels deep; at most {MAX_CGROUP_LEVEL} are supported")]
    TooDeep { path: String, level: u32 },
    #[error("{field}: the {controller} controller cannot be used for {path}: {reason}")]
    Controller {
        field: &'static str,
        controller: &'static str,
        path: String,
        reason: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Mount point of the cgroup v2 hierarchy, for confining: [`mount`], in the host's cgroup
/// namespace.
pub fn root() -> Result<PathBuf, CgroupError> {
    let root = mount()?;
    // A mount made in another cgroup namespace shows its root as "/" too.
    if !in_initial_namespace() {
        return Err(CgroupError::Namespaced);
    }
    Ok(root)
}

/// Mount point of the cgroup v2 hierarchy (naming cgroups needs no more; confining does:
/// [`root`]).
pub fn mount() -> Result<PathBuf, CgroupError> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io(Path::new("/proc/self/mountinfo")))?;
    for line in info.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        if f.get(sep + 1) == Some(&"cgroup2") {
            if f[3] != "/" {
                return Err(CgroupError::NotRoot(f[4].to_owned()));
            }
            return Ok(PathBuf::from(f[4]));
        }
    }
    Err(CgroupError::NoCgroup2)
}

/// The mount of open file `fd` (`mnt_id` in `/proc/self/fdinfo`), if it can be read.
fn mount_id(fd: std::os::fd::RawFd) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The inode number of the initial cgroup namespace (`PROC_CGROUP_INIT_INO`).
const INITIAL_CGROUP_NS: u64 = 0xEFFF_FFFB;

/// Whether sandbox runs in the host's cgroup namespace: cgroup levels in the mount are then
/// the kernel's own, which the programs compare with (`bpf_get_current_ancestor_cgroup_id`).
/// Every kernel with cgroup v2 has cgroup namespaces (4.6): a namespace that cannot be
/// read is taken for another one.
fn in_initial_namespace() -> bool {
    std::fs::metadata("/proc/self/ns/cgroup").is_ok_and(|m| m.ino() == INITIAL_CGROUP_NS)
}

/// Where the fallback backend mounts a cgroup v2 hierarchy when the host has none (a
/// host with only cgroup v1 controllers: v2 still works for BPF programs and membership).
pub const FALLBACK_MOUNT: &str = "/run/sandbox/cgroup2";

/// The cgroup v2 mount from the mount table or, when there is none, a new one at
/// [`FALLBACK_MOUNT`]. `Ok((path, true))` when sandbox mounted it (it stays mounted for
/// later runs).
pub fn root_or_mount() -> Result<(PathBuf, bool), CgroupError> {
    match root() {
        Ok(p) => return Ok((p, false)),
        Err(CgroupError::NoCgroup2) => {}
        Err(e) => return Err(e),
    }
    let dir = Path::new(FALLBACK_MOUNT);
    std::fs::create_dir_all(dir).map_err(io(dir))?;

    nix::mount::mount(
        Some("none"),
        dir,
        Some("cgroup2"),
        nix::mount::MsFlags::MS_NOSUID
            | nix::mount::MsFlags::MS_NODEV
            | nix::mount::MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| CgroupError::Io {
        path: format!("mounting cgroup2 at {FALLBACK_MOUNT}"),
        source: e.into(),
    })?;
    Ok((root()?, true))
}

/// A cgroup directory with what the kernel knows it by.
#[derive(Debug, Clone)]
pub struct Cgroup {
    pub path: PathBuf,
    /// The path below the cgroup v2 root, as `/proc/PID/cgroup` names it (`/a/b`).
    below_root: PathBuf,
    /// `bpf_get_current_cgroup_id()`: the inode number of the directory.
    pub id: u64,
    /// Depth below the root cgroup (the root is level 0).
    pub level: u32,
}

impl Cgroup {
    pub fn open(root: &Path, path: &Path) -> Result<Self, CgroupError> {
        // One lookup for the id, the depth and the mount: the directory is opened once, and
        // its canonical path (`..`, `.` and symlinks resolved: `a/../a/b` is 2 deep) is
        // what the kernel says it opened.
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(path)
            .map_err(io(path))?;
        let meta = dir.metadata().map_err(io(path))?;
        let fd = dir.as_raw_fd();
        let path = &std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(io(path))?;
        let root = &std::fs::canonicalize(root).map_err(io(root))?;
        let not_under = |why: String| CgroupError::Io {
            path: path.display().to_string(),
            source: std::io::Error::other(why),
        };
        let rel = path
            .strip_prefix(root)
            .map_err(|_| not_under(format!("not under the cgroup v2 root {}", root.display())))?;
        // A directory mounted below the root (a bind mount of another cgroup) would be
        // counted at its mount point's depth, not its own.
        let root_dir = std::fs::File::open(root).map_err(io(root))?;
        if mount_id(fd) != mount_id(root_dir.as_raw_fd()) {
            return Err(not_under(format!(
                "on another mount than the cgroup v2 root {}: give its path under the root",
                root.display()
            )));
        }
        let level = rel.components().count() as u32;
        if level >= MAX_CGROUP_LEVEL {
            return Err(CgroupError::TooDeep {
                path: path.display().to_string(),
                level,
            });
        }
        Ok(Self {
            path: path.clone(),
            below_root: Path::new("/").join(rel),
            id: meta.ino(),
            level,
        })
    }

    /// Creates the cgroup of a `sandbox run`: `<scope>/<name>` inside the delegated scope
    /// sandbox runs in under systemd (sandbox itself moves to `<scope>/supervisor`, so that
    /// processes stay in leaves), else `<root>/sandbox/<name>`.
    pub fn create(root: &Path, name: &str) -> Result<Self, CgroupError> {
        let parent = match crate::host::systemd::delegated_scope(root) {
            Some(scope) => {
                let me = scope.join("supervisor");
                let moved = std::fs::create_dir(&me)
                    .or_else(|e| {
                        if e.kind() == std::io::ErrorKind::AlreadyExists {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })
                    .and_then(|()| std::fs::write(me.join("cgroup.procs"), b"0"));
                if let Err(e) = moved {
                    tracing::warn!("moving sandbox into {}: {e}", me.display());
                }
                scope
            }
            None => {
                let parent = root.join("sandbox");
                match std::fs::create_dir(&parent) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io(&parent)(e)),
                }
                parent
            }
        };
        let path = parent.join(name);
        std::fs::create_dir(&path).map_err(io(&path))?;
        Self::open(root, &path)
    }

    /// Sets one limit of this cgroup (`None` writes `max`), before anything joins it. Its
    /// controller is first enabled, where it is not yet, in the `cgroup.subtree_control`
    /// of every cgroup from the root down to this one's parent (under systemd those above
    /// the delegated scope have it from `Delegate=yes`; the scope is sandbox's, its
    /// processes moved to a leaf).
    pub fn limit(
        &self,
        root: &Path,
        field: &'static str,
        knob: Knob,
        value: Option<u64>,
    ) -> Result<(), CgroupError> {
        self.enable(root, field, knob.controller)?;
        self.write_limit(field, knob.controller, knob.file, &knob.text(value))
    }

    /// Writes `text` to this cgroup's limit `file` of `controller` (enabled).
    pub fn write_limit(
        &self,
        field: &'static str,
        controller: &'static str,
        file: &str,
        text: &str,
    ) -> Result<(), CgroupError> {
        let at = self.path.join(file);
        std::fs::write(&at, text).map_err(|e| CgroupError::Controller {
            field,
            controller,
            path: self.path.display().to_string(),
            reason: format!("writing {text} to {}: {e}", at.display()),
        })
    }

    /// Enables `controller` for this cgroup: in the `cgroup.subtree_control` of every
    /// cgroup from the root down to its parent where it is not yet.
    pub fn enable(
        &self,
        root: &Path,
        field: &'static str,
        controller: &'static str,
    ) -> Result<(), CgroupError> {
        let fail = |path: &Path, reason: String| CgroupError::Controller {
            field,
            controller,
            path: path.display().to_string(),
            reason,
        };
        let parent = self.path.parent().unwrap_or(root);
        let rel = parent.strip_prefix(root).unwrap_or(Path::new(""));
        let mut dir = root.to_path_buf();
        let mut chain = vec![dir.clone()];
        for c in rel.components() {
            dir.push(c);
            chain.push(dir.clone());
        }
        for d in &chain {
            let read = |name: &str| std::fs::read_to_string(d.join(name)).unwrap_or_default();
            let listed = |text: &str| text.split_whitespace().any(|c| c == controller);
            if listed(&read("cgroup.subtree_control")) {
                continue;
            }
            if !listed(&read("cgroup.controllers")) {
                return Err(fail(
                    d,
                    format!(
                        "{} does not offer it (its cgroup.controllers: '{}'; a host that \
                         mounts it as cgroup v1 keeps it from v2)",
                        d.display(),
                        read("cgroup.controllers").trim()
                    ),
                ));
            }
            let sub = d.join("cgroup.subtree_control");
            std::fs::write(&sub, format!("+{controller}")).map_err(|e| {
                fail(
                    d,
                    format!("writing +{controller} to {}: {e}", sub.display()),
                )
            })?;
        }
        Ok(())
    }

    /// The lowest limit `knob` of this cgroup's ancestors, if one is set: what the run may
    /// have at most.
    pub fn ancestors_max(&self, root: &Path, knob: Knob) -> Option<u64> {
        lowest(root, self.path.parent()?, knob)
    }

    /// In how many periods the command's threads waited at its CPU limit (`cpu.stat`'s
    /// `nr_throttled`), when the cpu controller is on.
    pub fn cpu_throttled(&self) -> Option<u64> {
        self.counter("cpu.stat", "nr_throttled")
    }

    /// The number after `key` in this cgroup's flat-keyed `file` (`memory.events`,
    /// `cpu.stat`).
    fn counter(&self, file: &str, key: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.path.join(file)).ok()?;
        text.lines().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|v| v.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
        })
    }

    /// What the limits did so far: processes the OOM killer killed in the subtree once it
    /// reached its memory limit (`memory.events`' `oom_kill`, counted only when its `oom`
    /// says the limit was reached: a kill by the host's own OOM killer counts there too),
    /// and forks refused at its task limit (`pids.events`' `max`).
    pub fn limit_events(&self) -> (u64, u64) {
        let count = |file: &str, key: &str| self.counter(file, key).unwrap_or(0);
        let reached = count("memory.events", "oom") > 0;
        (
            if reached {
                count("memory.events", "oom_kill")
            } else {
                0
            },
            count("pids.events", "max"),
        )
    }

    pub fn procs_path(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }

    /// Pids of every process in this cgroup and below it.
    pub fn pids(&self) -> Vec<u32> {
        let mut out = Vec::new();
        collect_pids(&self.path, &mut out);
        out
    }

    /// Every process in this cgroup and below it, each held ([`Member`]) and found in the
    /// subtree only after it was: a pid of `cgroup.procs` that a process outside took over
    /// before the opens (the one listed had ended) is left out, never taken for a member.
    /// One at a time (each holds two descriptors): a cgroup of many processes never runs
    /// sandbox out of descriptors.
    pub fn members(&self) -> impl Iterator<Item = Member> + '_ {
        self.pids().into_iter().filter_map(|pid| self.member(pid))
    }

    fn member(&self, pid: u32) -> Option<Member> {
        use std::os::fd::AsFd;
        let pidfd = crate::sys::pidfd_open(pid).ok()?;
        let dir = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(format!("/proc/{pid}"))
            .ok()?;
        // The pidfd's process was there after the directory was opened (a refusal says so
        // too: a security module's rule on signals), so it held the number all along...
        if let Err(e) = crate::sys::pidfd_send_signal(pidfd.as_fd(), 0)
            && e.source.raw_os_error() == Some(libc::ESRCH)
        {
            return None;
        }
        // ... the number in `/proc`'s pid namespace (the pidfd's was in sandbox's): both
        // name it. (A kernel whose fdinfo has no `Pid:` line, before 5.10, is trusted to
        // mount `/proc` of sandbox's pid namespace.)
        let fdinfo = format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd());
        let shown = std::fs::read_to_string(fdinfo).ok()?;
        if let Some(number) = shown.lines().find_map(|l| l.strip_prefix("Pid:"))
            && number.trim().parse::<u32>().ok() != Some(pid)
        {
            return None;
        }
        let member = Member { pid, pidfd, dir };
        let cgroup = std::fs::read(member.proc_dir().join("cgroup")).ok()?;
        in_subtree(&cgroup, &self.below_root).then_some(member)
    }

    /// Kills every process in the subtree and removes the directories.
    pub fn destroy(&self) -> Result<(), CgroupError> {
        self.kill_and_wait()?;
        remove_tree(&self.path).map_err(io(&self.path))
    }

    /// Kills every process in the subtree now: `cgroup.kill` (5.14+), else SIGKILL to each
    /// member by its pidfd. Whether `cgroup.kill` did it (so that nothing forked meanwhile
    /// escapes; one by one, a later pass is needed for those).
    pub fn kill_now(&self) -> bool {
        if std::fs::write(self.path.join("cgroup.kill"), b"1").is_ok() {
            return true;
        }
        for m in self.members() {
            // A process that ended meanwhile just fails.
            let _ = m.signal(libc::SIGKILL);
        }
        false
    }

    /// Kills every process in the subtree and waits (up to 5 s) until it is empty.
    pub fn kill_and_wait(&self) -> Result<(), CgroupError> {
        let whole = self.kill_now();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.pids().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            if !whole {
                // Processes forked while the others were signalled.
                self.kill_now();
            }
        }
        match self.pids().len() {
            0 => Ok(()),
            n => Err(CgroupError::Io {
                path: self.path.display().to_string(),
                source: std::io::Error::other(format!("{n} process(es) still there after 5 s")),
            }),
        }
    }
}

fn collect_pids(dir: &Path, out: &mut Vec<u32>) {
    if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                collect_pids(&e.path(), out);
            }
        }
    }
}

/// Whether a process whose `/proc/PID/cgroup` reads `cgroup` is in the subtree whose path
/// below the root is `below_root`: its cgroup v2 line (`0::/a/b`; a hybrid host lists its
/// v1 hierarchies beside it) names it or a cgroup below it. Names are bytes, whatever
/// they are.
fn in_subtree(cgroup: &[u8], below_root: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    cgroup
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(b"0::"))
        .is_some_and(|at| Path::new(std::ffi::OsStr::from_bytes(at)).starts_with(below_root))
}

/// A process of a cgroup's subtree, held by a pidfd and by its `/proc` directory: what is
/// read, copied or signalled through it is that process's, however its number is used
/// once it ends ([`Cgroup::members`]).
pub struct Member {
    pub pid: u32,
    pidfd: std::os::fd::OwnedFd,
    dir: std::fs::File,
}

impl Member {
    /// The process's `/proc` directory, reached through the held descriptor
    /// (`/proc/self/fd/N`): the files below it are this process's, and none once it ended.
    pub fn proc_dir(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()))
    }

    /// A copy of the process's descriptor `fd` (see [`crate::sys::pidfd_getfd`]).
    pub fn fd(&self, fd: i32) -> Result<std::os::fd::OwnedFd, crate::sys::SysError> {
        crate::sys::pidfd_getfd(std::os::fd::AsFd::as_fd(&self.pidfd), fd)
    }

    /// Sends `sig` to the process (an ended one is not sent anything).
    pub fn signal(&self, sig: i32) -> Result<(), crate::sys::SysError> {
        crate::sys::pidfd_send_signal(std::os::fd::AsFd::as_fd(&self.pidfd), sig)
    }
}

/// cgroup directories are removed bottom-up with rmdir.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)?.flatten() {
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            remove_tree(&e.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

/// A limit of cgroup v2 (a file of a controller), read and written as a number: bytes,
/// tasks, or for `cpu.max` microseconds of CPU time in each
/// [`CPU_PERIOD`](crate::policy::limits::CPU_PERIOD).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Knob {
    pub controller: &'static str,
    pub file: &'static str,
}

pub const MEMORY_MAX: Knob = Knob {
    controller: "memory",
    file: "memory.max",
};
pub const MEMORY_SWAP_MAX: Knob = Knob {
    controller: "memory",
    file: "memory.swap.max",
};
pub const PIDS_MAX: Knob = Knob {
    controller: "pids",
    file: "pids.max",
};
pub const CPU_MAX: Knob = Knob {
    controller: "cpu",
    file: "cpu.max",
};

impl Knob {
    /// The file's limit, `None` for `max` (or unreadable). `cpu.max` is `QUOTA PERIOD`:
    /// scaled to sandbox's period, so that limits of different periods compare.
    pub fn parse(self, text: &str) -> Option<u64> {
        let mut words = text.split_whitespace();
        let n = words.next()?.parse::<u64>().ok()?;
        if self != CPU_MAX {
            return Some(n);
        }
        let period = words.next()?.parse::<u64>().ok().filter(|&p| p > 0)?;
        let scaled =
            u128::from(n) * u128::from(crate::policy::limits::CPU_PERIOD) / u128::from(period);
        u64::try_from(scaled).ok()
    }

    /// What is written for `value` (`None`: `max`). A CPU quota below the kernel's least
    /// (1 ms) in sandbox's period (a share of an invoker's small one) is written in the
    /// longest period the kernel takes, 1 s, where it is ten times as many microseconds.
    pub fn text(self, value: Option<u64>) -> String {
        use crate::policy::limits::{CPU_PERIOD, MIN_CPU_QUOTA};
        let v = value.map_or_else(|| "max".to_owned(), |v| v.to_string());
        match value {
            _ if self != CPU_MAX => v,
            Some(q) if q < MIN_CPU_QUOTA => {
                format!("{} {}", (q * 10).max(MIN_CPU_QUOTA), CPU_PERIOD * 10)
            }
            _ => format!("{v} {CPU_PERIOD}"),
        }
    }
}

/// `io.max`'s keys, in the order sandbox keeps them: bytes and operations a second, read
/// and written.
pub const IO_KEYS: [&str; 4] = ["rbps", "wbps", "riops", "wiops"];

/// One disk's `io.max` limits, [`IO_KEYS`] in order (`None`: `max`).
pub type IoLimits = [Option<u64>; 4];

/// The host's disks, by `MAJ:MIN`: every block device of `/sys/block` (whole disks, loop
/// and device-mapper devices; `io.max` takes no partition: a disk's limit holds for its
/// partitions).
pub fn disks() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    let mut out: Vec<String> = dir
        .flatten()
        // NVMe multipath's paths (`nvme0c0n1`) are hidden: no block device of their own.
        .filter(|e| {
            std::fs::read_to_string(e.path().join("hidden")).map_or(true, |h| h.trim() != "1")
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("dev")).ok())
        .map(|d| d.trim().to_owned())
        .filter(|d| !d.is_empty())
        .collect();
    out.sort();
    out
}

/// The lowest `io.max` limits set in `dir` or a cgroup above it, by disk.
pub fn lowest_io(root: &Path, dir: &Path) -> std::collections::BTreeMap<String, IoLimits> {
    let mut out = std::collections::BTreeMap::<String, IoLimits>::new();
    let cgroups = dir
        .ancestors()
        .take_while(|a| a.starts_with(root) && *a != root);
    for text in cgroups.filter_map(|a| std::fs::read_to_string(a.join("io.max")).ok()) {
        for line in text.lines() {
            let mut words = line.split_whitespace();
            let Some(dev) = words.next() else { continue };
            let limits = out.entry(dev.to_owned()).or_default();
            for w in words {
                let Some((key, value)) = w.split_once('=') else {
                    continue;
                };
                let (Some(i), Ok(v)) = (IO_KEYS.iter().position(|k| *k == key), value.parse())
                else {
                    continue;
                };
                limits[i] = Some(limits[i].map_or(v, |l: u64| l.min(v)));
            }
        }
    }
    out
}

/// A line of `io.max` for `dev`.
pub fn io_line(dev: &str, limits: &IoLimits) -> String {
    let keys: Vec<String> = IO_KEYS
        .iter()
        .zip(limits)
        .map(|(key, v)| {
            format!(
                "{key}={}",
                v.map_or_else(|| "max".to_owned(), |v| v.to_string())
            )
        })
        .collect();
    format!("{dev} {}", keys.join(" "))
}

/// The lowest limit `knob` set in `dir` or a cgroup above it (the root has none).
pub fn lowest(root: &Path, dir: &Path, knob: Knob) -> Option<u64> {
    dir.ancestors()
        .take_while(|a| a.starts_with(root) && *a != root)
        .filter_map(|a| std::fs::read_to_string(a.join(knob.file)).ok())
        .filter_map(|t| knob.parse(&t))
        .min()
}

/// Where `sandbox run` makes cgroups: `/sandbox`, and the scopes of `/sandbox.slice`
/// under systemd.
pub fn run_parents(root: &Path) -> Vec<PathBuf> {
    vec![root.join("sandbox"), root.join(crate::host::systemd::SLICE)]
}

/// The cgroup a `sandbox run` with this pid made, wherever it is.
pub fn run_cgroup(root: &Path, pid: u32) -> Option<PathBuf> {
    let name = format!("run-{pid}");
    [
        root.join("sandbox").join(&name),
        root.join(crate::host::systemd::SLICE)
            .join(format!("sandbox-run-{pid}.scope"))
            .join(&name),
    ]
    .into_iter()
    .find(|p| p.exists())
}

/// Names of cgroups by id (the directory's inode number): opened by id where the kernel
/// allows (`open_by_handle_at`, as root), else found by a walk of the hierarchy under
/// `root/sandbox`; kept, and so are misses by id of a cgroup that is gone (ids are never
/// used again; a walk's misses are not kept: each asks the walk again), in a cache of at
/// most [`Names::KEPT`] entries that starts anew when full.
#[derive(Debug)]
pub struct Names {
    root: PathBuf,
    cache: std::sync::Mutex<std::collections::HashMap<u64, Option<String>>>,
}

impl Names {
    /// Cgroups remembered at most (a run whose service manager makes and removes cgroups
    /// all the time would otherwise grow the cache for ever).
    pub const KEPT: usize = 4096;

    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            cache: std::sync::Mutex::default(),
        }
    }

    /// The cgroup's path relative to the hierarchy root (`/sandbox/run-1/child`).
    pub fn name(&self, id: u64) -> Option<String> {
        let mut cache = self.cache.lock().ok()?;
        if let Some(n) = cache.get(&id) {
            return n.clone();
        }
        if cache.len() >= Self::KEPT {
            cache.clear();
        }
        match self.by_id(id) {
            Ok(name) => {
                // Found, or gone (kept as a miss: ids are never used again).
                cache.insert(id, name.clone());
                name
            }
            Err(()) => {
                // Not opened by id here: a walk, whose misses are not kept.
                self.walk(&mut cache);
                cache.get(&id).cloned().flatten()
            }
        }
    }

    /// The cgroup opened by its id, its path read back: `Ok(None)` when it is gone (or is
    /// not below the hierarchy's root), `Err` when it could not be looked up this way.
    fn by_id(&self, id: u64) -> Result<Option<String>, ()> {
        let root = std::fs::File::open(&self.root).map_err(|_| ())?;
        let fd = match crate::sys::open_cgroup_by_id(std::os::fd::AsFd::as_fd(&root), id) {
            Ok(fd) => fd,
            Err(e) if e.source.raw_os_error() == Some(libc::ESTALE) => return Ok(None),
            Err(e) => {
                tracing::debug!("cgroup {id}: {e}; looked for by a walk");
                return Err(());
            }
        };
        let path = std::fs::read_link(format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&fd)
        ))
        .map_err(|_| ())?;
        let text = path.to_string_lossy();
        if text.ends_with(" (deleted)") {
            return Ok(None);
        }
        Ok(path
            .strip_prefix(&self.root)
            .ok()
            .map(|rel| format!("/{}", rel.display())))
    }

    /// Every cgroup under the runs' parents, into `cache`.
    fn walk(&self, cache: &mut std::collections::HashMap<u64, Option<String>>) {
        let mut stack = run_parents(&self.root);
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                let Ok(meta) = e.metadata() else { continue };
                if !meta.is_dir() {
                    continue;
                }
                let path = e.path();
                if let Ok(rel) = path.strip_prefix(&self.root)
                    && cache.len() < Self::KEPT
                {
                    cache.insert(meta.ino(), Some(format!("/{}", rel.display())));
                }
                stack.push(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Limits compare as numbers: `cpu.max` scaled to sandbox's period, so a host's 50 ms
    /// in 200 ms is a quarter of a CPU as sandbox's 25 ms in 100 ms is; the lowest of the
    /// ancestors' holds.
    #[test]
    fn limits_read_and_written_as_numbers() {
        assert_eq!(CPU_MAX.parse("50000 200000\n"), Some(25_000));
        assert_eq!(CPU_MAX.parse("max 100000\n"), None);
        assert_eq!(CPU_MAX.parse("100000 0"), None);
        assert_eq!(CPU_MAX.text(Some(50_000)), "50000 100000");
        assert_eq!(CPU_MAX.text(None), "max 100000");
        // An invoker's 1 ms in 1 s (100 in sandbox's period, below the kernel's least).
        assert_eq!(CPU_MAX.parse("1000 1000000"), Some(100));
        assert_eq!(CPU_MAX.text(Some(100)), "1000 1000000");
        assert_eq!(CPU_MAX.text(Some(500)), "5000 1000000");
        assert_eq!(PIDS_MAX.parse("100\n"), Some(100));
        assert_eq!(MEMORY_MAX.parse("max\n"), None);
        assert_eq!(MEMORY_MAX.text(Some(4096)), "4096");
        let root =
            std::env::temp_dir().join(format!("sandbox-cgroup-lowest-{}", std::process::id()));
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("cpu.max"), "1000 100000").unwrap();
        std::fs::write(root.join("a/cpu.max"), "150000 100000").unwrap();
        std::fs::write(root.join("a/b/cpu.max"), "max 100000").unwrap();
        // The root's own file is not a limit (cgroup v2 has none there).
        assert_eq!(lowest(&root, &root.join("a/b"), CPU_MAX), Some(150_000));
        std::fs::write(root.join("a/b/cpu.max"), "40000 50000").unwrap();
        assert_eq!(lowest(&root, &root.join("a/b"), CPU_MAX), Some(80_000));
        // io.max: by disk, the lowest of each key.
        std::fs::write(
            root.join("a/io.max"),
            "8:0 rbps=1000 wbps=max riops=max wiops=7\n",
        )
        .unwrap();
        std::fs::write(
            root.join("a/b/io.max"),
            "8:0 rbps=2000 wbps=500 riops=max wiops=max\n7:1 rbps=max wbps=9 riops=max wiops=max\n",
        )
        .unwrap();
        let io = lowest_io(&root, &root.join("a/b"));
        assert_eq!(io["8:0"], [Some(1000), Some(500), None, Some(7)]);
        assert_eq!(
            io_line("7:1", &io["7:1"]),
            "7:1 rbps=max wbps=9 riops=max wiops=max"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_depth_counts_directories_not_path_components() {
        let root =
            std::env::temp_dir().join(format!("sandbox-cgroup-depth-{}", std::process::id()));
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        let direct = Cgroup::open(&root, &root.join("a/b")).unwrap();
        assert_eq!(direct.level, 2);
        let roundabout = Cgroup::open(&root, &root.join("a/../a/./b")).unwrap();
        assert_eq!(roundabout.level, 2);
        assert_eq!(roundabout.id, direct.id);
        // Above the root: not a cgroup of this hierarchy.
        assert!(Cgroup::open(&root, &root.join("a/b/../../..")).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A member is the process its number named when it was held: where that process says
    /// it is decides, and once it ended nothing is read or signalled through it.
    #[test]
    fn members_are_held_processes_found_in_the_subtree() {
        let root =
            std::env::temp_dir().join(format!("sandbox-cgroup-members-{}", std::process::id()));
        std::fs::create_dir_all(root.join("a")).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        // Listed at the top (the whole hierarchy: where the process is, it is below it) and
        // in `a`, where the process itself is not.
        for dir in [&root, &root.join("a")] {
            std::fs::write(dir.join("cgroup.procs"), format!("{pid}\n")).unwrap();
        }
        let sub = Cgroup::open(&root, &root.join("a")).unwrap();
        assert_eq!(sub.members().count(), 0, "a pid listed is not a member");
        let top = Cgroup::open(&root, &root).unwrap();
        let members: Vec<Member> = top.members().collect();
        assert_eq!(
            members.iter().map(|m| m.pid).collect::<Vec<_>>(),
            [pid, pid]
        );
        let m = &members[0];
        assert!(std::fs::read_to_string(m.proc_dir().join("status")).is_ok());
        m.signal(0).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(
            std::fs::read_to_string(m.proc_dir().join("status")).is_err(),
            "read through the directory of an ended process"
        );
        assert!(m.signal(0).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_subtree_is_read_from_the_cgroup_v2_line_by_components() {
        use std::os::unix::ffi::OsStrExt;
        let v2 = b"0::/sandbox/run-7/sub\n";
        let hybrid = b"12:cpu,cpuacct:/sandbox/run-8\n1:name=systemd:/x\n0::/sandbox/run-7\n";
        for below in ["/", "/sandbox", "/sandbox/run-7"] {
            assert!(in_subtree(v2, Path::new(below)), "{below}");
            assert!(in_subtree(hybrid, Path::new(below)), "hybrid, {below}");
        }
        // A sibling whose name begins with the cgroup's, and the v1 lines, are not it.
        for below in ["/sandbox/run", "/sandbox/run-8", "/x"] {
            assert!(!in_subtree(v2, Path::new(below)), "{below}");
            assert!(!in_subtree(hybrid, Path::new(below)), "hybrid, {below}");
        }
        assert!(
            !in_subtree(b"12:cpu:/sandbox\n", Path::new("/")),
            "no v2 line"
        );
        // Names need not be UTF-8.
        let odd = b"0::/sandbox/\xff\xfe/x\n";
        let below = Path::new(std::ffi::OsStr::from_bytes(b"/sandbox/\xff\xfe"));
        assert!(in_subtree(odd, below));
    }
}
