//! The system calls `nix` does not wrap, each behind a safe function, failing with one
//! error type that names the call (aya's `SyscallError { call, io_error }`). Everything
//! else goes through `nix`; the Landlock and capability system calls live with their
//! tables in `landlock.rs` and `host/caps.rs`, the netlink socket in `host/netif.rs`, and
//! the `O_NOFOLLOW` walk in `host/safepath.rs`.

use std::os::fd::{AsRawFd, BorrowedFd};

/// A failed system call.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {source}")]
pub struct SysError {
    pub call: &'static str,
    #[source]
    pub source: std::io::Error,
}

impl SysError {
    fn last(call: &'static str) -> Self {
        Self {
            call,
            source: std::io::Error::last_os_error(),
        }
    }
}

/// Whether `sig` is ignored now (inherited from whoever started sandbox, e.g. `nohup`).
/// `nix` can set a disposition but not only read one.
pub fn signal_ignored(sig: i32) -> bool {
    // SAFETY: a query (no new action) into a zeroed sigaction.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::sigaction(sig, std::ptr::null(), &raw mut old) };
    r == 0 && old.sa_sigaction == libc::SIG_IGN
}

/// `N` random bytes from the kernel (`getrandom`, blocking until it is seeded).
pub fn random<const N: usize>() -> Result<[u8; N], SysError> {
    let mut b = [0u8; N];
    let mut got = 0;
    while got < N {
        // SAFETY: writing at most `N - got` bytes into the rest of `b`.
        let n = unsafe { libc::getrandom(b[got..].as_mut_ptr().cast(), N - got, 0) };
        if n < 0 {
            let e = SysError::last("getrandom");
            if e.source.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += n.cast_unsigned();
    }
    Ok(b)
}

/// `bpf(cmd, attr, size_of::<T>())`, the one place sandbox calls it without aya: a
/// descriptor (`BPF_PROG_LOAD`, `BPF_LINK_CREATE`) or 0, else the call's error.
///
/// # Safety
/// `attr` must be a valid prefix of `union bpf_attr` for `cmd`, and every pointer in it
/// valid for what the kernel reads or writes through it for the lengths it gives.
pub unsafe fn bpf<T>(call: &'static str, cmd: libc::c_long, attr: &mut T) -> Result<i64, SysError> {
    // SAFETY: the caller's promise; the kernel reads `size_of::<T>()` bytes of `attr`.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, std::ptr::from_mut(attr), size_of::<T>()) };
    if r < 0 {
        Err(SysError::last(call))
    } else {
        Ok(r)
    }
}

/// [`bpf`] for a command that returns a new descriptor, owned by the result.
///
/// # Safety
/// As for [`bpf`].
pub unsafe fn bpf_fd<T>(
    call: &'static str,
    cmd: libc::c_long,
    attr: &mut T,
) -> Result<std::os::fd::OwnedFd, SysError> {
    // SAFETY: the caller's promise.
    let fd = unsafe { bpf(call, cmd, attr) }?;
    let fd = i32::try_from(fd).map_err(|_| SysError {
        call,
        source: std::io::Error::other("not a descriptor"),
    })?;
    // SAFETY: a new descriptor the kernel returned, owned by nothing else.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

/// `BPF_MAP_UPDATE_BATCH` of `count` elements whose keys and values start at `keys` and
/// `values` (kernel 5.6+). Returns how many the kernel wrote when it fails part way.
///
/// # Safety
/// `keys` and `values` must point to `count` elements of the map's key and value sizes.
pub unsafe fn bpf_map_update_batch(
    map: BorrowedFd<'_>,
    keys: *const u8,
    values: *const u8,
    count: u32,
) -> Result<(), (SysError, u32)> {
    /// The `batch` member of `union bpf_attr`.
    #[repr(C)]
    #[derive(Default)]
    struct BatchAttr {
        in_batch: u64,
        out_batch: u64,
        keys: u64,
        values: u64,
        count: u32,
        map_fd: u32,
        elem_flags: u64,
        flags: u64,
    }
    const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
    let mut attr = BatchAttr {
        keys: keys as u64,
        values: values as u64,
        count,
        map_fd: map.as_raw_fd().cast_unsigned(),
        ..BatchAttr::default()
    };
    // SAFETY: `attr` is a valid `bpf_attr.batch` whose pointers cover `count` elements of
    // the map's sizes (the caller's promise); the kernel only reads them.
    match unsafe { bpf("bpf(BPF_MAP_UPDATE_BATCH)", BPF_MAP_UPDATE_BATCH, &mut attr) } {
        Ok(_) => Ok(()),
        Err(e) => Err((e, attr.count)),
    }
}

/// `membarrier(MEMBARRIER_CMD_GLOBAL)`: returns once every CPU has passed a point where it
/// ran no code of a read-side critical section begun before (`synchronize_rcu`).
pub fn membarrier_global() -> Result<(), SysError> {
    const MEMBARRIER_CMD_GLOBAL: libc::c_int = 1;
    // SAFETY: plain system call, no pointers.
    let r = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(SysError::last("membarrier"))
    }
}

/// `flock(fd, op)` without blocking (`LOCK_NB` added); the errno when refused
/// (`EWOULDBLOCK`: another holds it). A plain system call, so a child after fork may use it.
pub fn try_flock(fd: i32, op: libc::c_int) -> Result<(), i32> {
    // SAFETY: plain system call on a descriptor number; no pointers.
    if unsafe { libc::flock(fd, op | libc::LOCK_NB) } == 0 {
        Ok(())
    } else {
        Err(nix::errno::Errno::last_raw())
    }
}

/// `CLOCK_MONOTONIC` in milliseconds (a plain system call, for a child after fork).
pub fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live timespec the call fills.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000_000
}

/// Sleeps `ms` milliseconds (`nanosleep`; a plain system call, for a child after fork).
pub fn sleep_ms(ms: u32) {
    let ts = libc::timespec {
        tv_sec: libc::time_t::from(ms / 1000),
        tv_nsec: libc::c_long::from(ms % 1000) * 1_000_000,
    };
    // SAFETY: `ts` is a live timespec; no remainder is asked for.
    unsafe { libc::nanosleep(&raw const ts, std::ptr::null_mut()) };
}

/// Closes descriptors `first..=last` (`close_range`, 5.9+). For a child after fork, where
/// no `OwnedFd` knows which descriptors it holds.
pub fn close_range(first: u32, last: u32) -> Result<(), SysError> {
    // SAFETY: closes descriptors only; the caller owns them all.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(SysError::last("close_range"))
    }
}

/// Marks every descriptor from 3 up close-on-exec but those of `keep` (ascending, each 3
/// or more): an exec that follows passes 0, 1, 2 and `keep` only. `close_range` with
/// `CLOSE_RANGE_CLOEXEC` (5.11+, older than any kernel sandbox enforces on); for a child
/// between fork and exec (no allocation, and the error pipe of `Command::spawn`, itself
/// close-on-exec, stays usable until the exec).
pub fn cloexec_all_but(keep: &[u32]) -> Result<(), SysError> {
    const CLOSE_RANGE_CLOEXEC: u32 = 1 << 2;
    let mark = |first: u32, last: u32| {
        // SAFETY: changes descriptor flags only.
        let r = unsafe { libc::syscall(libc::SYS_close_range, first, last, CLOSE_RANGE_CLOEXEC) };
        if r == 0 {
            Ok(())
        } else {
            Err(SysError::last("close_range"))
        }
    };
    let mut first = 3;
    for &k in keep {
        if k > first {
            mark(first, k - 1)?;
        }
        first = first.max(k.saturating_add(1));
    }
    mark(first, u32::MAX)
}

/// A system call's descriptor, owned; a negative return is its error.
fn owned(r: libc::c_long, call: &'static str) -> Result<std::os::fd::OwnedFd, SysError> {
    use std::os::fd::FromRawFd;
    match i32::try_from(r) {
        // SAFETY: a descriptor the kernel just returned to this process.
        Ok(d) if d >= 0 => Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(d) }),
        _ => Err(SysError::last(call)),
    }
}

/// A pidfd of process `pid` (`pidfd_open`, 5.3+): it names that process only, however its
/// number is used later.
pub fn pidfd_open(pid: u32) -> Result<std::os::fd::OwnedFd, SysError> {
    // SAFETY: a plain system call.
    owned(
        unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) },
        "pidfd_open",
    )
}

/// A copy of descriptor `fd` of the process `pidfd` names: the same open file
/// (`pidfd_getfd`, 5.6+), not a new open of what its path names.
pub fn pidfd_getfd(pidfd: BorrowedFd<'_>, fd: i32) -> Result<std::os::fd::OwnedFd, SysError> {
    // SAFETY: a plain system call on a descriptor we hold.
    owned(
        unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0u32) },
        "pidfd_getfd",
    )
}

/// Sends `sig` to the process `pidfd` names (0: only whether it is there, unreaped).
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: i32) -> Result<(), SysError> {
    // SAFETY: a plain system call on a descriptor we hold, no siginfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(SysError::last("pidfd_send_signal"))
    }
}

/// An `O_PATH` descriptor of the cgroup whose id is `id`, in the cgroup2 hierarchy that
/// `mount` (a descriptor of a directory in it) belongs to: `open_by_handle_at` with a
/// kernfs handle (`FILEID_KERNFS`: the node's 64-bit id), which needs
/// `CAP_DAC_READ_SEARCH`.
pub fn open_cgroup_by_id(mount: BorrowedFd<'_>, id: u64) -> Result<std::os::fd::OwnedFd, SysError> {
    /// `struct file_handle` with room for the kernfs id (include/linux/fs.h).
    #[repr(C)]
    struct Handle {
        bytes: u32,
        kind: i32,
        id: [u8; 8],
    }
    const FILEID_KERNFS: i32 = 0xfe;
    let mut h = Handle {
        bytes: 8,
        kind: FILEID_KERNFS,
        id: id.to_ne_bytes(),
    };
    // SAFETY: `h` is a whole handle of the size it declares, alive for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            &raw mut h,
            libc::O_PATH | libc::O_CLOEXEC,
        )
    };
    owned(r, "open_by_handle_at")
}

/// Whether descriptor `fd` is open in this process.
pub fn fd_is_open(fd: u32) -> bool {
    let Ok(fd) = i32::try_from(fd) else {
        return false;
    };
    // SAFETY: F_GETFD reads a descriptor's flags only.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Closes one descriptor by number (see [`close_range`]).
pub fn close_raw(fd: i32) -> Result<(), SysError> {
    // SAFETY: as for `close_range`.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(SysError::last("close"))
    }
}

/// Ends a forked child at once, running nothing of the parent's (no atexit handlers, no
/// buffered output flushed twice).
pub fn exit_child() -> ! {
    // SAFETY: `_exit` only ends the process.
    unsafe { libc::_exit(0) }
}
