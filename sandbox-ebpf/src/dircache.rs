//! The scan state of directories, so that a path hook scans only the last component of a
//! path rather than walking and scanning the whole of it on every open.
//!
//! A directory's path within its superblock changes only when a dentry above it, or itself,
//! is moved or renamed (`__d_move`, always under the kernel's `rename_lock`, whose sequence
//! count goes up by two each time), and what a scan makes of a path changes only with the
//! placement maps (`SB_START`, `SB_ROOTS`: the loader writes a new
//! [`DirCacheCtl::generation`](sandbox_common::DirCacheCtl) after every change to them) or the
//! policy. So the state after scanning a directory's path is kept, in a slot chosen by the
//! directory's inode, stamped with the rename count and generation it was made under and
//! used only while both still hold.
//!
//! Invariants:
//! - A slot is filled only from a full walk and scan that matched, and only when the
//!   rename count was even (no move in progress) and the same before the walk and after
//!   the scan: a move during the walk cannot leave a stale state behind.
//! - A slot is used only when its inode, dentry, policy, generation and rename count are
//!   those of the lookup; the lookup reads the rename count before it reads the file's
//!   parent and name, and again after its scan (a move meanwhile: the full walk is done).
//! - A directory's slot is cleared when its inode is freed (`inode_free_security`), before
//!   the memory can hold another inode: a slot is never taken for another directory at
//!   the same address. A filler's file (or name) pins its directory only while it stays in
//!   it: moved out (a `__d_move`, which moves the rename count) and the directory removed,
//!   the free's clear can come after the filler's check of the count and before its write,
//!   and find nothing to clear. So the filler reads the count again after its write
//!   ([`keep`]) and clears the slot if it moved: the free's read of the slot and the
//!   filler's read of the count each follow a locked instruction of its own after the
//!   other's write (x86-64), so one of them sees the other's, and a writer the free finds
//!   holding the slot reads the count after it lets the slot go.
//! - Slots are written in place under a per-slot sequence lock (odd while written; a
//!   writer that finds it taken gives up), and read as two reads of the lock around the
//!   copy: a torn copy is never used. The read side relies on x86-64's ordering of loads
//!   (the loader enables the cache on x86-64 only).
//! - A slot is used for the loader's `DirCacheCtl::max_age` jiffies at most (30 s, by the
//!   HZ it measured; [`MAX_AGE_JIFFIES`] when it could not), never more than
//!   [`MAX_AGE_CAP`]: the 32-bit count cannot come round to its stamp in that time.
//! - Directories whose names the file system revalidates are never cached
//!   ([`DCACHE_OP_REVALIDATE`]).
//! - Disabled (`generation` 0) until the loader has attached every program, the free hook
//!   included, found `rename_lock` and seen the count move with a rename of its own
//!   ([`note_rename`]); disabled again before any program is detached.

use sandbox_common::DirCacheCtl;

use crate::kread;
use crate::maps::{DIR_CACHE, DIR_CACHE_CTL, DIR_CACHE_PROBE, DIR_MOVES};

/// `DCACHE_OP_REVALIDATE` (include/linux/dcache.h, the same bit in every kernel since
/// 2.6.38): the file system checks this dentry's name against a server or another view
/// (NFS, SMB, FUSE, 9p, Ceph, procfs, ...), and may drop it and make another for the same
/// inode without a move there (a rename made on the server). Such directories are not
/// cached.
pub const DCACHE_OP_REVALIDATE: u32 = 0x4;

/// Slots (a power of two): directories in use at once by confined processes, beyond
/// which they take each other's slots (a slot missed costs one full walk).
pub const SLOTS: u32 = 8192;

/// One directory's scan state ([`crate::path::Scan`] after its path), and what makes it
/// valid.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DirSlot {
    /// Sequence lock: odd while a writer fills the slot ([`keep`], under
    /// `kread::write_begin`).
    pub lock: u64,
    /// The directory's `struct inode` (0: empty).
    pub inode: u64,
    /// Its dentry.
    pub dentry: u64,
    pub generation: u64,
    /// When it was filled, in jiffies (`bpf_jiffies64`: a read of a kernel word, where the
    /// nanosecond clock reads the clock source, a paravirtual one in a VM; 6.1 does not offer
    /// LSM programs the coarse clock): a slot older than the cache's age
    /// ([`max_age`]) is not used.
    pub time: u64,
    pub hash: u64,
    pub sb_hash: u64,
    pub rename_seq: u32,
    pub policy_id: u32,
    pub anchored: u32,
    pub floating: u32,
    pub mask: u32,
    pub seeking: u32,
    /// Bytes of the directory's path within its superblock.
    pub len: u32,
    pub sb_known: u32,
}

/// How long a slot stays usable, in jiffies, when the loader could not measure HZ
/// (CONFIG_HZ is 100 to 1000: 2 to 20 s).
pub const MAX_AGE_JIFFIES: u64 = 2_000;

/// The longest life the programs accept from the loader, a backstop (30 s at HZ=1000,
/// 300 s at HZ=100: 7 million renames a second to come round). The count comes round to a
/// slot's stamp only after exactly 2^31 renames, each taking the global `rename_lock`: in
/// the 30 s the loader asks for (its rate measured as a lower bound), 72 million renames
/// a second, far beyond what one spinlock passes.
pub const MAX_AGE_CAP: u64 = 30_000;

/// The age limit of kept states, in jiffies, from the loader's control value.
#[inline(always)]
pub fn max_age(ctl: &DirCacheCtl) -> u64 {
    match ctl.max_age {
        0 => MAX_AGE_JIFFIES,
        a if a > MAX_AGE_CAP => MAX_AGE_CAP,
        a => a,
    }
}

/// The cache's state when a decision starts, and the directory the decision's file is
/// in. Kept in the working memory (`Scratch::now`): the stack of the path functions has
/// no room left.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Now {
    /// 0: no cache for this decision (off, or a move in progress).
    pub generation: u64,
    pub rename_lock: u64,
    pub time: u64,
    /// How old a slot may be ([`max_age`]).
    pub max_age: u64,
    /// The file's directory (0: none to use: a root, or revalidated names).
    pub parent_dentry: u64,
    pub parent_inode: u64,
    pub seq: u32,
    /// Set by [`crate::path::resolve_typed`]: the fields above and the file's name below were
    /// read by the hook (direct loads of its typed dentry), after the rename count.
    pub prepared: u32,
    /// The file's name (`d_name.name`) and its length, when `prepared`.
    pub name: u64,
    pub name_len: u32,
    /// Set by [`crate::path::resolve_typed`]: the name's bytes are in `Scratch::name`
    /// already (read from the dentry itself, where a short name lives).
    pub name_read: u32,
    /// The count directory states and names' results are stamped with: of directory
    /// moves (`moves.rs`), made odd, when the loader turned it on and no move is in
    /// progress, else [`Now::seq`] (even).
    pub dir_seq: u32,
    /// The file's dentry's `d_seq`, read before its parent and name (`file_open`,
    /// [`crate::path::resolve_typed`]); odd: unread (no move count for the file cache).
    pub dseq: u32,
}

/// The cache's state when a file cache lookup starts: its generation, the count its
/// slots are stamped with and the time (`filecache::lookup` needs nothing more).
#[derive(Clone, Copy)]
pub struct Clock {
    pub generation: u64,
    pub time: u64,
    /// How old a slot may be ([`max_age`]).
    pub max_age: u64,
    /// The count of directory moves made odd ([`Clock::own`]), or `rename_lock`'s.
    pub seq: u32,
    /// Stamped with the count of directory moves and the file's dentry's `d_seq`
    /// ([`file_stamp`]).
    pub own: bool,
}

/// The cache's state now, if it can be used (not off, no move in progress).
#[inline(always)]
pub fn clock() -> Option<Clock> {
    // Read in place: a copy of the control value would take the hook's stack.
    let ctl: &DirCacheCtl = DIR_CACHE_CTL.get(0)?;
    if ctl.generation == 0 {
        return None;
    }
    let own = match ctl.own_moves {
        0 => None,
        _ if kread::offsets().dentry_d_seq == 0 => None,
        _ => dir_moves(),
    };
    let (seq, own) = match own {
        Some(m) => (m << 1 | 1, true),
        None => (rename_seq(ctl.rename_lock)?, false),
    };
    Some(Clock {
        generation: ctl.generation,
        // SAFETY: plain helper call (inlined by the verifier on 64-bit JITs).
        time: unsafe { aya_ebpf::helpers::generated::bpf_jiffies64() },
        max_age: max_age(ctl),
        seq,
        own,
    })
}

/// What a file's kept result is stamped with, from the decision's state (`now`): the
/// count of directory moves and the dentry's `d_seq` (both read before the file's parent
/// and name) when the decision read both, and [`clock`] would read them; else
/// `rename_lock`'s count, and no `d_seq`.
#[inline(always)]
pub fn file_stamp(now: &Now) -> (u32, u32) {
    if now.dir_seq & 1 != 0 && now.dseq & 1 == 0 && kread::offsets().dentry_d_seq != 0 {
        (now.dir_seq, now.dseq)
    } else {
        (now.seq, 0)
    }
}

/// Fills `n` with the cache's generation and the rename count now; whether the cache can
/// be used (not off, no move in progress).
#[inline(always)]
pub fn now(n: &mut Now) -> bool {
    n.generation = 0;
    // Read in place: a copy of the control value would take the hook's stack.
    let Some(ctl) = DIR_CACHE_CTL.get(0) else {
        return false;
    };
    if ctl.generation == 0 {
        return false;
    }
    let Some(seq) = rename_seq(ctl.rename_lock) else {
        return false;
    };
    // Two kinds of stamp that never meet: `rename_lock`'s count is even where it is used,
    // the count of directory moves is made odd. While a directory move is in progress (or
    // one was never seen to end), `rename_lock`'s.
    let dir_seq = match ctl.own_moves {
        0 => seq,
        _ => dir_moves().map_or(seq, |m| m << 1 | 1),
    };
    n.dir_seq = dir_seq;
    n.rename_lock = ctl.rename_lock;
    // SAFETY: plain helper call.
    n.time = unsafe { aya_ebpf::helpers::generated::bpf_jiffies64() };
    n.max_age = max_age(ctl);
    n.seq = seq;
    n.generation = ctl.generation;
    true
}

/// `rename_lock`'s sequence count (the first field of `seqlock_t`), if even.
#[inline(always)]
pub fn rename_seq(rename_lock: u64) -> Option<u32> {
    let seq: u32 = kread::read(rename_lock as *const u8, 0).ok()?;
    (seq & 1 == 0).then_some(seq)
}

/// The count of directory moves (`moves.rs`), if none is in progress.
#[inline(always)]
fn dir_moves() -> Option<u32> {
    let p = DIR_MOVES.get_ptr(0)?;
    // SAFETY: a value of this array, written by the move programs with atomic adds.
    let w = unsafe { core::ptr::read_volatile(p) };
    let in_flight = w & ((1 << sandbox_common::MOVES_IN_FLIGHT_BITS) - 1);
    (in_flight == 0).then_some((w >> sandbox_common::MOVES_IN_FLIGHT_BITS) as u32)
}

/// No move since `now`.
#[inline(always)]
pub fn unchanged(now: &Now) -> bool {
    rename_seq(now.rename_lock) == Some(now.seq)
}

#[inline(always)]
fn slot_of(inode: u64) -> Option<*mut DirSlot> {
    // Inodes are slab objects some hundreds of bytes apart: a multiplicative hash spreads
    // their addresses over the slots.
    let i = (inode.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 51) as u32 & (SLOTS - 1);
    DIR_CACHE.get_ptr_mut(i)
}

/// The sequence-lock value of the slot `inode` would have now (a name's result is valid
/// only while it is the one its scan started from: `namecache.rs`).
#[inline(always)]
pub fn lock_of(inode: u64) -> Option<u64> {
    let p = slot_of(inode)?;
    // SAFETY: `p` is a map value of this array.
    Some(unsafe { core::ptr::read_volatile(&raw const (*p).lock) })
}

/// Copies the state of the directory of `now` for `policy_id` into `out` (working
/// memory: the stack has no room for it), if a valid one is kept.
#[inline(always)]
pub fn get(now: &Now, policy_id: u32, out: &mut DirSlot) -> bool {
    let (inode, dentry) = (now.parent_inode, now.parent_dentry);
    if now.generation == 0 || inode == 0 {
        return false;
    }
    let Some(p) = slot_of(inode) else {
        return false;
    };
    // SAFETY: `p` is a map value of this array; reads are volatile so that the lock is read
    // before and after the copy, in that order.
    unsafe {
        let before = core::ptr::read_volatile(&raw const (*p).lock);
        if before & 1 != 0 {
            return false;
        }
        copy(p, out);
        let after = core::ptr::read_volatile(&raw const (*p).lock);
        after == before
            && out.inode == inode
            && out.dentry == dentry
            && out.policy_id == policy_id
            && out.generation == now.generation
            && out.rename_seq == now.dir_seq
            && now.time.wrapping_sub(out.time) < now.max_age
    }
}

/// Copies a slot field by field, each a volatile read and a volatile write, in field
/// order (a whole-struct copy is done through registers and spills to the stack, which
/// has no room).
#[inline(always)]
unsafe fn copy(from: *const DirSlot, to: *mut DirSlot) {
    macro_rules! fields {
        ($($f:ident),*) => {
            $(
                // SAFETY: both point to whole `DirSlot`s (the callers'); plain data.
                unsafe {
                    core::ptr::write_volatile(
                        &raw mut (*to).$f,
                        core::ptr::read_volatile(&raw const (*from).$f),
                    );
                }
            )*
        };
    }
    fields!(
        lock, inode, dentry, generation, time, hash, sb_hash, rename_seq, policy_id, anchored,
        floating, mask, seeking, len, sb_known
    );
}

/// Keeps the scan state `snap` of the decision's directory (`now`), whose path is `len`
/// bytes, in the directory's slot, unless another writer has the slot. Written into the
/// slot directly, not through the working memory's copy (`Scratch::dir`). Cleared again
/// if a move came after the caller's check of the rename count: the directory may have
/// been freed meanwhile (see the invariants above).
#[inline(always)]
pub fn keep(now: &Now, policy_id: u32, snap: &crate::path::Snap, len: u32, sb_known: bool) {
    let Some(p) = slot_of(now.parent_inode) else {
        return;
    };
    // SAFETY: `p` is a map value of this array; the lock makes this the only writer;
    // `now` and `snap` are the decision's working memory, read with volatile reads.
    unsafe {
        let lock = &raw mut (*p).lock;
        if kread::write_begin(lock).is_none() {
            return;
        }
        macro_rules! set {
            ($f:ident, $v:expr) => {
                core::ptr::write_volatile(&raw mut (*p).$f, $v)
            };
        }
        macro_rules! get {
            ($v:expr) => {
                core::ptr::read_volatile(&raw const $v)
            };
        }
        set!(inode, get!(now.parent_inode));
        set!(dentry, get!(now.parent_dentry));
        set!(generation, get!(now.generation));
        set!(time, get!(now.time));
        set!(rename_seq, get!(now.dir_seq));
        set!(hash, get!(snap.hash));
        set!(sb_hash, get!(snap.sb_hash));
        set!(anchored, get!(snap.anchored));
        set!(floating, get!(snap.floating));
        set!(mask, get!(snap.mask));
        set!(seeking, get!(snap.seeking));
        set!(policy_id, policy_id);
        set!(len, len);
        set!(sb_known, u32::from(sb_known));
        kread::write_end(lock);
    }
    if !unchanged(now) {
        forget(now.parent_inode);
    }
}

/// `inode` is being freed: its slot, if it has one, is cleared.
#[inline(always)]
pub fn forget(inode: u64) {
    let Some(p) = slot_of(inode) else {
        return;
    };
    // SAFETY: as in `keep`.
    unsafe {
        if core::ptr::read_volatile(&raw const (*p).inode) != inode {
            return;
        }
        let lock = &raw mut (*p).lock;
        // A writer holding the slot reads the rename count again once it has written, and
        // clears the slot itself if a move came (`keep`): a directory can be freed under a
        // filler only after the filler's file moved out of it.
        if kread::write_begin(lock).is_none() {
            return;
        }
        core::ptr::write_volatile(&raw mut (*p).inode, 0);
        kread::write_end(lock);
    }
}

/// The loader's check of the address it found (`DIR_CACHE_PROBE`): while slot 0 holds its
/// tgid, its own renames record the count they see in slot 1. Always true (a pre-test of
/// `inode_rename` that lets every rename on).
#[inline(always)]
pub fn note_rename() -> bool {
    let Some(watched) = DIR_CACHE_PROBE.get(0) else {
        return true;
    };
    if *watched == 0 {
        return true;
    }
    // SAFETY: plain helper call.
    let tgid = unsafe { aya_ebpf::helpers::generated::bpf_get_current_pid_tgid() } >> 32;
    if *watched != tgid {
        return true;
    }
    let Some(ctl) = DIR_CACHE_CTL.get(0) else {
        return true;
    };
    let seq: u32 = kread::read(ctl.rename_lock as *const u8, 0).unwrap_or(1);
    if let Some(p) = DIR_CACHE_PROBE.get_ptr_mut(1) {
        // SAFETY: a value of this array.
        unsafe { *p = u64::from(seq) | 1 << 32 };
    }
    true
}

/// Whether the cache is on (the free hook pays for nothing else when it is off).
#[inline(always)]
pub fn enabled() -> bool {
    DIR_CACHE_CTL.get(0).is_some_and(|c| c.generation != 0)
}
