//! The count of directory moves, so that kept directory states (`dircache.rs`) and names'
//! results (`namecache.rs`) outlive the renames of files: a file's rename changes no
//! directory's path, and the host renames files all the time (`git` writing its index, a
//! build's outputs, an editor's save), where `rename_lock`'s count, which every rename
//! moves, voided every kept state.
//!
//! A dentry moves only in `__d_move` (fs/dcache.c, static), whose callers are `d_move`,
//! `d_exchange` and `d_splice_alias` (`d_splice_alias_ops` since 6.15). A move that may
//! change a directory's path (the moved dentry's inode, or the spliced one, is a directory,
//! or its mode cannot be read) is counted when it **begins**, before the move, and when it
//! **ends**, after it:
//! - a rename (`vfs_rename`) begins at `inode_rename` (an LSM program, which kernels from
//!   6.1.54 and 6.2 never skip: the loader uses the count on those only) and ends when
//!   `vfs_rename` returns (`fexit`), moved or failed;
//! - a directory spliced into a lookup's place (`d_splice_alias`: a network file system's
//!   directory moved on the server, a disconnected dentry reconnected) begins at
//!   `d_instantiate` (LSM, called before the search for the other dentry) when the
//!   directory has a dentry already, and ends when `d_splice_alias(_ops)` returns;
//! - a file system's own `d_move`/`d_exchange` (inside a rename, and outside one: debugfs
//!   renaming its directories, selinuxfs swapping its own) begins at their `fentry` and
//!   ends at their `fexit`.
//!
//! Invariants:
//! - `DIR_MOVES[0]` holds the moves in progress in its low `MOVES_IN_FLIGHT_BITS` (32) bits
//!   and the count above them. A beginning adds one to both; an ending adds one to the
//!   count and takes one from those in progress: one atomic add each (`lock add`, a full
//!   barrier), so a reader's single load sees both together.
//! - A kept state stamped with this count is used only while no move is in progress and
//!   the count is the one it was made under (`dircache::now`: the count made odd, so it
//!   never equals `rename_lock`'s, which is even where it is used; while a move is in
//!   progress decisions stamp and compare with `rename_lock`'s, as without these
//!   programs). So a state made before a move is never used once the move began; one
//!   whose walk a move overlapped is either refused by the decision's own check of
//!   `rename_lock` (the move happened before it ended: every `__d_move` moves that
//!   count) or stamped with a count the move's beginning already moved on.
//! - Endings are matched to beginnings by frames, per task (`MOVE_FRAMES`): the `fentry`
//!   or LSM program that opens a call's frame names it (`vfs_rename`'s `renamedata`,
//!   its depth marked [`RENAME`]; the moved or spliced dentry), and the `fexit` that closes it ends
//!   exactly the beginnings made since, and only when the task's newest frame is its own.
//!   `inode_rename` counts into the newest frame only if it is a rename's. A frame the
//!   kernel never opened (a tracing program skipped because it was running on that CPU,
//!   or attached mid-call) or never closed leaves its beginnings in progress for good:
//!   decisions then go by `rename_lock`'s count until the next run (slower, never stale).
//!   So does a beginning that finds no room (`MOVE_FRAMES` full, frames nested past
//!   [`FRAMES`]).
//! - Only the `fentry` beginnings of `d_move`/`d_exchange` can be skipped by the kernel
//!   (a tracing program that another task preempted on the same CPU is not run again
//!   there meanwhile): a file system's own move of a directory outside a rename (debugfs,
//!   selinuxfs: kernel-internal, by privileged writers), then, goes uncounted. Renames and
//!   splices are counted by LSM programs.
//! - The directory cache uses this count only while the loader says every program here is
//!   attached, it saw the count follow a directory rename of its own (by 4: the rename's
//!   and its `d_move`'s beginnings and ends) and no move was in progress, on a kernel that
//!   never skips LSM programs (`DirCacheCtl::own_moves`); else `rename_lock`'s. The loader
//!   attaches every `fexit` here, then every `fentry`, then the LSM programs, which count
//!   from then on (a rename whose `inode_rename` ran before is counted by its `d_move`'s
//!   `fentry`), and turns the cache on last.
//! - Left uncounted, so a state made after the cache is on could outlive it: a move whose
//!   beginning passed before its program was attached and whose `__d_move` comes after the
//!   cache is on (a task stalled inside `d_splice_alias` or `d_move` across the whole
//!   start); and a directory spliced by two lookups at once, both before its first dentry
//!   was bound (`splice_begins` reads `i_dentry` unlocked): only on file systems whose
//!   names are revalidated (network, FUSE: never kept) or for disconnected dentries (whose
//!   walks fail closed, never kept).

use aya_ebpf::macros::{fentry, fexit};
use aya_ebpf::programs::{FEntryContext, FExitContext};
use sandbox_common::MOVES_IN_FLIGHT_BITS;
use sandbox_common::decide::imode;

use crate::kread;
use crate::maps::{DIR_MOVES, MOVE_FRAMES};

const BEGIN: u64 = (1 << MOVES_IN_FLIGHT_BITS) + 1;
const END: u64 = (1 << MOVES_IN_FLIGHT_BITS) - 1;

/// Frames open at once per task: a rename inside a rename (overlayfs renames its upper
/// layer's files) nests two, with a `d_move` each.
pub const FRAMES: usize = 4;

/// A task with no frame open.
static NO_FRAMES: Frames = Frames {
    depth: 0,
    open: 0,
    ids: [0; FRAMES],
    at: [0; FRAMES],
};

/// A task's open frames and the beginnings it counted.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Frames {
    /// Beginnings counted and not yet ended.
    pub depth: u32,
    /// Frames open.
    pub open: u32,
    /// Each frame's name (a kernel address) and the depth when it opened.
    pub ids: [u64; FRAMES],
    pub at: [u32; FRAMES],
}

/// Whether `inode` may be a directory's: `NULL` (a negative lookup's splice), not; a mode
/// that cannot be read, or no offsets, may. (An error pointer reads as mode 0: the load
/// faults, and a faulting `BPF_PROBE_MEM` load gives 0; `d_splice_alias` returns it at
/// once.)
#[inline(always)]
fn dir_inode(inode: *const u8) -> bool {
    if inode.is_null() {
        return false;
    }
    let off = kread::offsets();
    if off.valid == 0 {
        return true;
    }
    match kread::field::<u16>(inode, off.inode_i_mode) {
        Ok(mode) => imode::is_dir(mode),
        Err(_) => true,
    }
}

/// Whether the dentry being moved may be a directory's (a negative one may become one).
#[inline(always)]
fn dir_dentry(dentry: *const u8) -> bool {
    let off = kread::offsets();
    if off.valid == 0 || dentry.is_null() {
        return true;
    }
    match kread::field::<*const u8>(dentry, off.dentry_d_inode) {
        Ok(inode) if inode.is_null() => true,
        Ok(inode) => dir_inode(inode),
        Err(_) => true,
    }
}

#[inline(always)]
fn task() -> u64 {
    // SAFETY: plain helper call.
    unsafe { aya_ebpf::helpers::generated::bpf_get_current_pid_tgid() }
}

/// This task's frames, made empty if it has none; `None` if the map is full.
#[inline(always)]
fn frames(t: u64) -> Option<*mut Frames> {
    if let Some(f) = MOVE_FRAMES.get_ptr_mut(&t) {
        return Some(f);
    }
    // From a static: a zeroed value made on the stack is a `memset` call.
    // SAFETY: a volatile read of the static's address only (the helper copies from it).
    let empty: &Frames = unsafe { &*core::ptr::read_volatile(&(&raw const NO_FRAMES)) };
    MOVE_FRAMES.insert(&t, empty, 0).ok()?;
    MOVE_FRAMES.get_ptr_mut(&t)
}

/// Opens a frame named `id` for this task, and with `begin` counts a beginning in it.
/// Without room the beginning is counted still, and never ended.
#[inline(always)]
fn open(id: u64, begin: bool, mark: u32) {
    let Some(w) = DIR_MOVES.get_ptr_mut(0) else {
        return;
    };
    if let Some(f) = frames(task()) {
        // SAFETY: a value of this map, this task's only.
        unsafe {
            let n = (*f).open;
            if (n as usize) < FRAMES {
                let i = kread::opaque(n) as usize & (FRAMES - 1);
                (*f).ids[i] = id;
                (*f).at[i] = (*f).depth | mark;
                (*f).open = n + 1;
            } else if !begin {
                // No frame: what begins inside is never ended.
                (*f).open = n + 1;
                (*f).depth += 1;
                kread::atomic_add(w, BEGIN);
                return;
            }
            if begin {
                (*f).depth += 1;
            }
        }
    }
    if begin {
        kread::atomic_add(w, BEGIN);
    }
}

/// Counts a beginning in this task's newest frame if it is a rename's (`vfs_rename`'s,
/// [`RENAME`]); else it is never ended.
#[inline(always)]
fn begin_in_rename() {
    let Some(w) = DIR_MOVES.get_ptr_mut(0) else {
        return;
    };
    if let Some(f) = MOVE_FRAMES.get_ptr_mut(&task()) {
        // SAFETY: a value of this map, this task's only.
        unsafe {
            let n = (*f).open;
            if n != 0 && n as usize <= FRAMES {
                let i = kread::opaque(n - 1) as usize & (FRAMES - 1);
                if (*f).at[i] & RENAME != 0 {
                    (*f).depth += 1;
                }
            }
        }
    }
    kread::atomic_add(w, BEGIN);
}

/// The mark of a rename's frame, on the depth it opened at (a depth never comes near it:
/// beginnings are counted per task, a few at once).
const RENAME: u32 = 1 << 31;

/// Closes this task's newest frame if it is `id`'s, ending the beginnings counted since it
/// opened.
#[inline(always)]
fn close(id: u64) {
    let Some(w) = DIR_MOVES.get_ptr_mut(0) else {
        return;
    };
    let t = task();
    let Some(f) = MOVE_FRAMES.get_ptr_mut(&t) else {
        return;
    };
    // SAFETY: a value of this map, this task's only.
    unsafe {
        let n = (*f).open;
        if n == 0 || n as usize > FRAMES {
            return;
        }
        let i = kread::opaque(n - 1) as usize & (FRAMES - 1);
        if (*f).ids[i] != id {
            return;
        }
        let at = (*f).at[i] & !RENAME;
        let ended = (*f).depth.wrapping_sub(at);
        (*f).depth = at;
        (*f).open = n - 1;
        if n == 1 && at == 0 {
            let _ = MOVE_FRAMES.remove(&t);
        }
        if ended != 0 {
            kread::atomic_add(w, u64::from(ended) * END);
        }
    }
}

/// `inode_rename` (the LSM program, before the scope lookup, for any task): a rename that
/// moves a directory (`old`; `new` too for `RENAME_EXCHANGE`) begins. Always true.
#[inline(always)]
pub fn rename_begins(old: *const u8, new: *const u8) -> bool {
    if dir_dentry(old) || (!new.is_null() && dir_inode_of(new)) {
        begin_in_rename();
    }
    true
}

/// Whether a positive dentry's inode may be a directory's (a negative one: not).
#[inline(always)]
fn dir_inode_of(dentry: *const u8) -> bool {
    let off = kread::offsets();
    if off.valid == 0 {
        return true;
    }
    match kread::field::<*const u8>(dentry, off.dentry_d_inode) {
        Ok(inode) => dir_inode(inode),
        Err(_) => true,
    }
}

/// `d_instantiate` (the LSM program, for any task): a directory that has a dentry already
/// is about to be moved to `dentry`'s place (`d_splice_alias`), or is not given a second
/// one (the other callers), so a move begins, in a frame named by `dentry`.
#[inline(always)]
pub fn splice_begins(dentry: *const u8, inode: *const u8) {
    if !dir_inode(inode) {
        return;
    }
    let off = kread::offsets();
    let aliased =
        off.valid == 0 || !matches!(kread::field::<u64>(inode, off.inode_i_dentry), Ok(0));
    if aliased {
        open(dentry as u64, true, 0);
    }
}

#[fentry(function = "vfs_rename")]
pub fn move_enter_vfs_rename(ctx: FEntryContext) -> i32 {
    open(ctx.arg::<u64>(0), false, RENAME);
    0
}

#[fexit(function = "vfs_rename")]
pub fn move_exit_vfs_rename(ctx: FExitContext) -> i32 {
    close(ctx.arg::<u64>(0));
    0
}

// d_move(dentry, target): `dentry` moves to `target`'s place.
#[fentry(function = "d_move")]
pub fn move_enter_d_move(ctx: FEntryContext) -> i32 {
    let dentry: *const u8 = ctx.arg(0);
    if dir_dentry(dentry) {
        open(dentry as u64, true, 0);
    }
    0
}

// The ends check what the beginnings did (the inodes do not change in the call): a file's
// rename, or a lookup's splice of a file or of nothing, looks up no frame.
#[fexit(function = "d_move")]
pub fn move_exit_d_move(ctx: FExitContext) -> i32 {
    let dentry: *const u8 = ctx.arg(0);
    if dir_dentry(dentry) {
        close(dentry as u64);
    }
    0
}

// d_exchange(dentry1, dentry2): each takes the other's place.
#[fentry(function = "d_exchange")]
pub fn move_enter_d_exchange(ctx: FEntryContext) -> i32 {
    let (a, b): (*const u8, *const u8) = (ctx.arg(0), ctx.arg(1));
    if dir_dentry(a) || dir_dentry(b) {
        open(a as u64, true, 0);
    }
    0
}

#[fexit(function = "d_exchange")]
pub fn move_exit_d_exchange(ctx: FExitContext) -> i32 {
    let (a, b): (*const u8, *const u8) = (ctx.arg(0), ctx.arg(1));
    if dir_dentry(a) || dir_dentry(b) {
        close(a as u64);
    }
    0
}

// d_splice_alias(inode, dentry), d_splice_alias_ops(inode, dentry, ops): the frame
// `d_instantiate` opened for `dentry`.
#[fexit(function = "d_splice_alias")]
pub fn move_exit_d_splice_alias(ctx: FExitContext) -> i32 {
    if dir_inode(ctx.arg::<*const u8>(0)) {
        close(ctx.arg::<u64>(1));
    }
    0
}

#[fexit(function = "d_splice_alias_ops")]
pub fn move_exit_d_splice_alias_ops(ctx: FExitContext) -> i32 {
    if dir_inode(ctx.arg::<*const u8>(0)) {
        close(ctx.arg::<u64>(1));
    }
    0
}
