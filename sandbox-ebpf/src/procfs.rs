//! Other processes' entries in `/proc`. The kernel asks its ptrace check (and so the
//! `ptrace_access_check` program) for some of a process's files (`mem`, `environ`, `maps`,
//! the `fd` links) but not for the rest: `cmdline` (secrets passed as arguments: a token
//! in a `curl` header, a database password), `stat`, `status`, `io`'s neighbours, `mountinfo`.
//! A confined process may open no entry of `/proc/PID/` (nor `/proc/PID/task/TID/`) whose
//! process runs outside the sandbox; its own processes' entries, and the rest of `/proc`,
//! are decided by the policy as before. It sees other processes as a pid namespace would
//! show them: their numbers in `/proc`, nothing more.
//!
//! Invariants:
//! - A file is an entry of a process when its superblock is a procfs one (any mount of
//!   it) and its inode's `proc_inode.pid` is set, or that of one of its directories up to
//!   `/proc/PID/net/`'s: the kernel sets it for every inode it makes with
//!   `proc_pid_make_inode` below `/proc/PID/` and `/proc/PID/task/TID/`, to that
//!   process's or thread's `struct pid`, and for no other; the files below
//!   `/proc/PID/net/` are its network namespace's (`proc_get_inode`, no pid), reached
//!   only through that directory. `/proc/self/...` is the opener's own.
//! - The entry's process is the task of that pid (`pid.tasks[PIDTYPE_PID]`); one that has
//!   exited (no task) is not the sandbox's, nor is one whose memory cannot be read (fail
//!   closed). Inside means in the sandbox's cgroup or below (`scope::task_within`).
//! - `stat` and `status`, what process listers read first for each process (`ps`, `top`,
//!   `pgrep`, psutil), are refused without a record, as the kernel's own "do not audit"
//!   reads are (a lister then skips the process, and reads nothing more of it); every other
//!   entry is refused with a record.

use sandbox_common::KernelOffsets;

use crate::kread;

/// `PROC_SUPER_MAGIC` (include/uapi/linux/magic.h).
pub const PROC_SUPER_MAGIC: u64 = 0x9fa0;

/// Names searched from a procfs file up to `/proc` for the process it is about:
/// `/proc/PID/net/`'s files and directories are the network namespace's own
/// (`proc_net`: no pid of their own), some levels below `net` (`net/stat/...`,
/// `net/rpc/CACHE/...`), whose directory is the process's; `/proc/sys` goes seven deep.
/// A file this many names below `/proc` or more is refused (fail closed).
const PROC_LEVELS: u32 = 16;

/// The procfs file `dentry` (its address) is an entry of a process that is not inside
/// the sandbox bound at `bound`: 1, else 0. Its process is that of the nearest of it and
/// its directories whose inode names one (none up to `/proc`: no process's;
/// [`PROC_LEVELS`] names deep or more: refused). A global function:
/// verified once per program (with the cgroup walk's loop), whatever the caller's
/// state, and called only for files on a procfs.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_proc_outside(dentry: u64, bound: u64) -> u32 {
    let off = kread::offsets();
    let mut d = dentry as *const u8;
    let mut pid: *const u8 = core::ptr::null();
    let mut at_root = false;
    for _ in 0..PROC_LEVELS {
        let Ok(inode) = kread::read_ptr(d, off.dentry_d_inode) else {
            return 1;
        };
        if inode.is_null() {
            return 1;
        }
        let ei = (inode as u64).wrapping_sub(u64::from(off.proc_inode_vfs_inode)) as *const u8;
        let Ok(p) = kread::read_ptr(ei, off.proc_inode_pid) else {
            return 1;
        };
        if !p.is_null() {
            pid = p;
            break;
        }
        let Ok(parent) = kread::read_ptr(d, off.dentry_d_parent) else {
            return 1;
        };
        if parent == d {
            // The file system's root: `/proc` itself.
            at_root = true;
            break;
        }
        d = parent;
    }
    if pid.is_null() && !at_root {
        // Deeper than any procfs tree: not judged, refused.
        return 1;
    }
    if pid.is_null() {
        // Not a process's entry (`/proc/meminfo`, `/proc/sys`, ...).
        return 0;
    }
    let Ok(node) = kread::read_ptr(pid, off.pid_tasks) else {
        return 1;
    };
    if node.is_null() {
        // The process has exited.
        return 1;
    }
    let task = (node as u64).wrapping_sub(u64::from(off.task_struct_pid_links)) as *const u8;
    u32::from(!crate::scope::task_within(task, bound))
}

/// The file (`dentry`: typed by the verifier) is an entry of a process outside the
/// sandbox bound at `bound`.
#[inline(always)]
pub fn outside(dentry: *const u8, off: &KernelOffsets, bound: u64) -> bool {
    kread::sb_magic(dentry, off) == PROC_SUPER_MAGIC
        && sandbox_proc_outside(kread::untyped(dentry), bound) != 0
}

/// The entry's name is one a process lister reads first: `stat` or `status`.
#[inline(always)]
pub fn listed_first(dentry: *const u8, off: &KernelOffsets) -> bool {
    let len: u32 = kread::field(dentry, off.dentry_d_name_len).unwrap_or(0);
    if len != 4 && len != 6 {
        return false;
    }
    let name: *const u8 = kread::field(dentry, off.dentry_d_name_name).unwrap_or(core::ptr::null());
    let Ok(word) = kread::read::<u64>(name, 0) else {
        return false;
    };
    let stat = u64::from(u32::from_le_bytes(*b"stat"));
    let status = u64::from_le_bytes(*b"status\0\0");
    (len == 4 && word & 0xffff_ffff == stat) || (len == 6 && word & 0xffff_ffff_ffff == status)
}
