//! Namespace files (nsfs). `setns(2)` takes one and has no LSM hook; the kernel's own
//! checks there are capability tests in the namespace's owning user namespace, which
//! the uid that made a user namespace passes without any capability of its own. The
//! older ways to a namespace file of another process pass the ptrace check
//! (`/proc/PID/ns/*`, `setns` on a pidfd, `PIDFD_GET_*_NAMESPACE`); newer ones do not: a
//! namespace's file handle (`open_by_handle_at`, 6.18+, ids from `listns`), a
//! namespace's owner or parent (`NS_GET_USERNS`, `NS_GET_PARENT`), the mount-namespace
//! walk (`NS_MNT_GET_NEXT`, 6.11+; the stable kernels want `CAP_SYS_ADMIN` for it now).
//! Each of them opens the file (`file_open`), and a confined process
//! may open the files of the namespaces the command started in only (`NAMESPACES`, the
//! loader's), so that the IPC, mounts, hostname and loopback ports of the user's own
//! namespaces outside (a rootless container, a Flatpak application) stay out of reach.
//!
//! Invariants:
//! - A file is a namespace's when its superblock is nsfs (one internal superblock); its
//!   inode number is the namespace's (`ns_common.inum`, unique on the host while the
//!   namespace lives, the number `stat` of `/proc/PID/ns/*` shows).
//! - The opener's own IPC namespace opens too (the command's is made by its first process
//!   before exec). Other namespaces a confined process makes itself are not in the map:
//!   their files do not open (the command cannot mount, so little it could enter them for
//!   works).

use sandbox_common::KernelOffsets;

use crate::kread;
use crate::maps::NAMESPACES;

/// `NSFS_MAGIC` (include/uapi/linux/magic.h).
pub const NSFS_MAGIC: u64 = 0x6e73_6673;

/// The namespace file of inode number `ino` is neither one the command started in nor the
/// opener's own IPC namespace (the command's first process makes its own before exec, so
/// the loader learns it only after the command has started).
#[inline(always)]
pub fn foreign(ino: u64, off: &KernelOffsets) -> bool {
    let Ok(inum) = u32::try_from(ino) else {
        return true;
    };
    NAMESPACES.get_ptr(&inum).is_none() && own_ipc(off) != Some(inum)
}

/// The current task's IPC namespace's inode number.
#[inline(always)]
fn own_ipc(off: &KernelOffsets) -> Option<u32> {
    // SAFETY: plain helper call.
    let task = unsafe { aya_ebpf::helpers::generated::bpf_get_current_task() } as *const u8;
    let nsproxy = kread::read_ptr(task, off.task_struct_nsproxy).ok()?;
    let ipc = kread::read_ptr(nsproxy, off.nsproxy_ipc_ns).ok()?;
    kread::read::<u32>(ipc, off.ipc_namespace_inum).ok()
}
