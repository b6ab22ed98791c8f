//! POSIX shared memory and semaphores: the files of the tmpfs mounted at `/dev/shm`
//! (`shm_open`, `sem_open`, Python's `multiprocessing`). No namespace separates them, and
//! the built-in policy lets the command write there, so without this a confined process
//! could read, change, replace or remove the segments of every other program of the user
//! (an audio server's buffers, a browser's, another tool's semaphores). A regular file
//! there is the command's only when a confined process made it; every other one is
//! refused to confined processes: opened in any mode, and as a name to remove, rename,
//! replace, link or change the attributes of.
//!
//! Invariants:
//! - The file system is the one mounted at `/dev/shm` when the policy was applied
//!   (`PolicyInfo::shm_dev`, by the loader from the mount table; only a tmpfs whose mount
//!   point is `/dev/shm` itself, so that no other file system's files are ever judged as
//!   shared memory). 0: none, nothing is checked.
//! - A new regular file there is bound to its dentry (`shmem_mknod`, `d_tmpfile`) through
//!   `security_d_instantiate`, in the task that made it: the `d_instantiate` program marks
//!   it (`own.rs`) when that task is in scope and the inode has at most one link. A hard
//!   link binds an existing inode, with two links or more, and is never a mark (linking a
//!   file that is not the sandbox's is refused anyway). A tmpfs keeps its dentries pinned
//!   while the files exist, so a lookup never binds an existing file anew.
//! - Directories, and files of other types, are not judged here (the policy's rules are).

use sandbox_common::KernelOffsets;
use sandbox_common::decide::imode;

use crate::kread;

/// `TMPFS_MAGIC` (include/uapi/linux/magic.h).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// A regular file (`mode`) on the file system `dev`, which is the policy's shared memory
/// (`shm_dev`), that is not the sandbox's own. `inode` is the file's, typed by the
/// verifier; looked up only when the rest holds.
#[inline(always)]
pub fn foreign(shm_dev: u32, dev: u32, mode: u16, inode: *const u8) -> bool {
    shm_dev != 0
        && dev == shm_dev
        && imode::is_reg(mode)
        && !inode.is_null()
        && !crate::own::ours(inode)
}

/// `inode` (typed by the verifier), bound to `dentry`, is a regular file on a tmpfs made
/// just now: at most one link.
#[inline(always)]
pub fn made_on_tmpfs(dentry: *const u8, inode: *const u8, off: &KernelOffsets) -> bool {
    let mode: u16 = kread::field(inode, off.inode_i_mode).unwrap_or(0);
    if !imode::is_reg(mode) {
        return false;
    }
    let sb: *const u8 = kread::field(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    let magic: u64 = kread::field(sb, off.super_block_s_magic).unwrap_or(0);
    let links: u32 = kread::field(inode, off.inode_i_nlink).unwrap_or(u32::MAX);
    magic == TMPFS_MAGIC && links <= 1
}

/// Marks the new file `inode` (on `dentry`, see [`made_on_tmpfs`]) when a confined task
/// made it on its policy's shared memory.
#[inline(always)]
pub fn mark_if_made_inside(dentry: *const u8, inode: *const u8, off: &KernelOffsets) {
    let sb: *const u8 = kread::field(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    let dev: u32 = kread::field(sb, off.super_block_s_dev).unwrap_or(0);
    crate::scope::decide((), |scope| {
        let shm_dev = scope.info.shm_dev;
        if shm_dev != 0 && dev == shm_dev {
            crate::own::mark(inode);
        }
    });
}
