//! Inodes that are the sandbox's own (`OWN_INODES`, BPF inode storage): of the kinds of
//! file that belong to someone whatever their path says (terminals, `terminal.rs`; shared
//! memory, `shm.rs`; device nodes, `hooks/names.rs`), the ones a confined process made or
//! sandbox gave it. A mark's value says how much is the sandbox's (`own_mark`): `WHOLE` (a
//! pty it made, its terminal, its shared memory), or `NAME` (a device node a confined root
//! command made with `CAP_MKNOD`: its name and attributes are the command's, the device
//! behind it is the host's, so a terminal reached through such a node stays someone
//! else's).
//!
//! Invariants:
//! - A mark is inode storage: it lives and dies with the inode, so an inode made again at
//!   a freed one's number or address starts unmarked.
//! - Marks are per set of programs (each run's, each `sandbox attach` set's own map).
//! - Only the `d_instantiate` program (for a confined task's new inode) and the loader
//!   (through a descriptor it holds) mark; nothing unmarks but the inode's end.

use aya_ebpf::bindings::inode;
use sandbox_common::own_mark;

use crate::maps::OWN_INODES;

/// Marks `inode` (typed by the verifier) as wholly the sandbox's own.
#[inline(always)]
pub fn mark(inode: *const u8) {
    set(inode, own_mark::WHOLE);
}

/// Marks `inode` (typed by the verifier), a pty's slave made by a confined process, as
/// wholly the sandbox's, sessions and all (`own_mark::PTY`).
#[inline(always)]
pub fn mark_pty(inode: *const u8) {
    set(inode, own_mark::PTY);
}

/// Marks `inode` (typed by the verifier) as the sandbox's by its name only.
#[inline(always)]
pub fn mark_name(inode: *const u8) {
    set(inode, own_mark::NAME);
}

/// Marks `inode` with `value`; a mark already there stays as it is (an inode is marked
/// once, when it is made or given).
#[inline(always)]
fn set(inode: *const u8, value: u32) {
    let mut value = value;
    // SAFETY: `inode` is typed by the verifier; the helper creates the storage with
    // `value` only when there is none.
    unsafe {
        OWN_INODES.get_or_insert_ptr_mut(inode.cast_mut().cast::<inode>(), Some(&mut value));
    }
}

/// `inode` (typed by the verifier) is the sandbox's own: its name and attributes.
#[inline(always)]
pub fn ours(inode: *const u8) -> bool {
    // SAFETY: `inode` is typed by the verifier; a lookup only.
    !unsafe { OWN_INODES.get_ptr_mut(inode.cast_mut().cast::<inode>()) }.is_null()
}

/// `inode` (typed by the verifier) is wholly the sandbox's own: what it reaches too.
#[inline(always)]
pub fn wholly_ours(inode: *const u8) -> bool {
    // SAFETY: `inode` is typed by the verifier; a lookup, the value read at once.
    let v = unsafe { OWN_INODES.get_ptr_mut(inode.cast_mut().cast::<inode>()) };
    !v.is_null() && unsafe { core::ptr::read_volatile(v) } != own_mark::NAME
}

/// `inode` (typed by the verifier) is a pty whose sessions are the command's
/// (`own_mark::PTY`).
#[inline(always)]
pub fn pty_ours(inode: *const u8) -> bool {
    // SAFETY: `inode` is typed by the verifier; a lookup, the value read at once.
    let v = unsafe { OWN_INODES.get_ptr_mut(inode.cast_mut().cast::<inode>()) };
    !v.is_null() && unsafe { core::ptr::read_volatile(v) } == own_mark::PTY
}
