//! POSIX shared memory and semaphores: the files of the tmpfs mounted at `/dev/shm`
//! (`shm_open`, `sem_open`, Python's `multiprocessing`). No namespace separates them, and
//! the built-in policy lets the command write there, so without this a confined process
//! could read, change, replace or remove the segments of every other program of the user
//! (an audio server's buffers, a browser's, another tool's semaphores). A file there (of
//! any type: a directory of segments, a FIFO, a symlink) is the command's only when a
//! confined process made it; every other one is refused to confined processes: opened in
//! any mode, and as a name to remove, rename, replace, link or change the attributes of;
//! and no name is made, removed or moved in a directory there that is not the command's
//! (the file system's root is everyone's).
//!
//! Invariants:
//! - The file system is the one mounted at `/dev/shm` when the policy was applied
//!   (`PolicyInfo::shm_dev`, by the loader from the mount table; only a tmpfs whose mount
//!   point is `/dev/shm` itself, so that no other file system's files are ever judged as
//!   shared memory). 0: none, nothing is checked.
//! - A new inode there is bound to its dentry (`shmem_mknod`, `d_tmpfile`) through
//!   `security_d_instantiate`, in the task that made it: the `d_instantiate` program marks
//!   it (`own.rs`) when that task is in scope and it is a directory or has at most one
//!   link. A hard link binds an existing inode, with two links or more, and is never a mark
//!   (linking a file that is not the sandbox's is refused anyway); directories cannot be
//!   hard-linked. A tmpfs keeps its dentries pinned while the files exist, so a lookup
//!   never binds an existing file anew.
//! - The root is the file system's (`/dev/shm` itself): decided by the policy's rules.

use sandbox_common::KernelOffsets;
use sandbox_common::decide::imode;

use crate::kread;

/// `TMPFS_MAGIC` (include/uapi/linux/magic.h).
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// `dentry`, a name on the policy's shared memory (the caller compared the device), names
/// an inode that is not the sandbox's own: any type but the file system's root (a
/// directory another program made, its FIFOs and symlinks too). `inode` is the dentry's,
/// typed by the verifier (NULL for a name not yet made: not foreign).
#[inline(always)]
pub fn foreign(dentry: *const u8, inode: *const u8, off: &KernelOffsets) -> bool {
    !inode.is_null() && !is_root(dentry, off) && !crate::own::ours(inode)
}

/// The directory `dentry` (a name on the policy's shared memory) is in is not the
/// sandbox's own (the root is everyone's): a name made, removed or moved there changes
/// another program's directory.
#[inline(always)]
pub fn foreign_parent(dentry: *const u8, off: &KernelOffsets) -> bool {
    let parent: *const u8 = kread::field(dentry, off.dentry_d_parent).unwrap_or(core::ptr::null());
    let inode: *const u8 = kread::field(parent, off.dentry_d_inode).unwrap_or(core::ptr::null());
    !parent.is_null() && foreign(parent, inode, off)
}

/// `dentry` is the root of its file system (its own parent).
#[inline(always)]
fn is_root(dentry: *const u8, off: &KernelOffsets) -> bool {
    let parent: *const u8 = kread::field(dentry, off.dentry_d_parent).unwrap_or(core::ptr::null());
    parent == dentry
}

/// `inode` (typed by the verifier), bound to `dentry`, is on a tmpfs and made just now: a
/// directory (never hard-linked: every binding of one is its making), or any other type
/// with at most one link (a hard link binds an existing inode with two or more).
#[inline(always)]
pub fn made_on_tmpfs(dentry: *const u8, inode: *const u8, off: &KernelOffsets) -> bool {
    let mode: u16 = kread::field(inode, off.inode_i_mode).unwrap_or(0);
    let sb: *const u8 = kread::field(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    let magic: u64 = kread::field(sb, off.super_block_s_magic).unwrap_or(0);
    if magic != TMPFS_MAGIC {
        return false;
    }
    let links: u32 = kread::field(inode, off.inode_i_nlink).unwrap_or(u32::MAX);
    imode::is_dir(mode) || links <= 1
}

/// Marks the new inode `inode` (on `dentry`, see [`made_on_tmpfs`]) when a confined task
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
