//! Inodes that are the sandbox's own (`OWN_INODES`, BPF inode storage): of the kinds of
//! file that belong to someone whatever their path says (terminals, `terminal.rs`; shared
//! memory, `shm.rs`), the ones a confined process made or sandbox gave it.
//!
//! Invariants:
//! - A mark is inode storage: it lives and dies with the inode, so an inode made again at
//!   a freed one's number or address starts unmarked.
//! - Marks are per set of programs (each run's, each `sandbox attach` set's own map).
//! - Only the `d_instantiate` program (for a confined task's new inode) and the loader
//!   (through a descriptor it holds) mark; nothing unmarks but the inode's end.

use aya_ebpf::bindings::inode;

use crate::maps::OWN_INODES;

/// Marks `inode` (typed by the verifier) as the sandbox's own.
#[inline(always)]
pub fn mark(inode: *const u8) {
    // SAFETY: `inode` is typed by the verifier; the helper creates the storage.
    unsafe {
        OWN_INODES.get_or_insert_ptr_mut(inode.cast_mut().cast::<inode>(), None);
    }
}

/// `inode` (typed by the verifier) is the sandbox's own.
#[inline(always)]
pub fn ours(inode: *const u8) -> bool {
    // SAFETY: `inode` is typed by the verifier; a lookup only.
    !unsafe { OWN_INODES.get_ptr_mut(inode.cast_mut().cast::<inode>()) }.is_null()
}
