//! What an opened file's path matched, kept by the file's dentry, so that an open of a
//! file seen before reads one slot instead of its directory, its name and the name cache,
//! in the hook itself, without the working memory.
//!
//! A dentry's path changes only when it or a dentry above it is moved or renamed
//! (`__d_move`, under `rename_lock`: the count the directory cache stamps its states with),
//! and what a scan makes of a path changes only with the placement maps (the generation)
//! or the policy. So the kinds of rule found for a dentry are kept in a slot chosen by the
//! file's identity (inode number and device: the verifier allows no arithmetic on the
//! hook's typed dentry pointer, only its comparison), holding the dentry's address, the
//! identity and a stamp like a name's result, and used only for that dentry while the
//! stamp holds.
//!
//! Invariants:
//! - A slot is filled only by `file_open`, from a name's result (`namecache.rs`) for the
//!   file's own dentry, found in the name cache or scanned by the same decision from its
//!   directory's kept state (and put in the name cache when it fits there), under the
//!   rename count the slot is stamped with, and only when the count was read unchanged
//!   after that result; so only from states
//!   that started outside any seeking of mounted directories, in directories whose names
//!   are not revalidated. (Filled at the first open of a name, the second reads one slot.)
//! - The file's dentry is referenced (by the `struct file`) while its slot is filled, so
//!   the address is that dentry's and no other's then. A dentry's memory is used again
//!   only by a new dentry, which is bound to an inode before any file can be opened
//!   through it: every binding goes through `security_d_instantiate` (`d_instantiate`,
//!   `d_add`, `d_splice_alias`, the anonymous and root dentries; the LSMs that label inodes
//!   rely on it), and the `d_instantiate` program clears the slots of the inode's identity
//!   that hold the dentry's address. A lookup compares the identity too: a new dentry at
//!   an old one's address bound to an inode of another identity never finds the old
//!   slot, and one bound to an inode of the same identity (the same file, or a number
//!   used again) had that slot cleared. So a slot never speaks for another dentry at the
//!   same address, and a dentry made positive again (unlink, then create under the same
//!   name) starts anew.
//! - Filled and used only when the file's inode number is that of its dentry's inode (the
//!   identity `d_instantiate` clears by): not for an overlayfs file's second open of its
//!   real file, which carries the overlay's path and the real inode.
//! - A slot is used only for the lookup's dentry, identity, policy, generation and rename
//!   count (read once: the slot's own sequence lock keeps its fields together, and the
//!   count only grows, so equal stamps mean no move since the result was found), and for
//!   the cache's age limit after it was filled (`dircache::max_age`; the 32-bit count
//!   cannot come round: the name's result it came from was itself at most that old, so a
//!   slot vouches for a count read at most twice that long ago, still far from 2^31
//!   renames).
//! - With the count of directory moves (`moves.rs`; `dircache::clock`, `file_stamp`) the
//!   stamp is that count, made odd (never equal to `rename_lock`'s, even), and the
//!   dentry's `d_seq`, read before its parent and name: the path of a dentry changes only
//!   if a directory above it moves (the count) or the dentry itself does (`__d_move` moves
//!   the `d_seq` of both dentries it moves, odd meanwhile: an odd one is a miss). The
//!   count keeps 31 bits and a directory's rename adds 4 to it: 2^29 renames of
//!   directories in the minute a slot may vouch for before it could come round.
//! - The rules by identity (`INODE_RULES`) are looked up on every decision, as for a
//!   name's result.
//! - Slots are written under a per-slot sequence lock, as directory slots are; a torn copy
//!   is never used. The cache is on and off with the directory cache (`DIR_CACHE_CTL`), so
//!   it is off until the `d_instantiate` program is attached.

use crate::dircache::{self, Clock, Now};
use crate::kread;
use crate::maps::FILE_CACHE;
use crate::namecache::Hit;
use crate::path::FileFacts;
use crate::work::Work;

/// Slots (a power of two): files opened again and again by confined processes. Sized for a
/// project with its dependencies (tens of thousands of files): in two ways, a file whose
/// two slots are taken by files opened as often misses on every pass (18,200 files in
/// 16,384 slots: about one in three). 64 bytes a slot: 4 MB.
pub const SLOTS: u32 = 65536;

/// One dentry's result.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct FileSlot {
    /// Sequence lock, as a directory slot's.
    pub lock: u64,
    /// The file's `struct dentry` (0: empty).
    pub dentry: u64,
    pub ino: u64,
    pub generation: u64,
    /// When it was filled, in jiffies.
    pub time: u64,
    pub dev: u32,
    pub rename_seq: u32,
    pub policy_id: u32,
    /// The kinds of rule the path matched (`FileMatch::path`).
    pub kinds: u32,
    pub sb_known: u32,
    /// The dentry's `d_seq` when filled, with the count of directory moves in
    /// `rename_seq` (`dircache::file_stamp`); 0 with `rename_lock`'s.
    pub dseq: u32,
}

/// The file's identity, as the slots are chosen by.
#[derive(Clone, Copy)]
pub struct Key {
    /// The hook's dentry pointer (compared, never computed with).
    pub dentry: *const u8,
    pub ino: u64,
    pub dev: u32,
}

impl Key {
    #[inline(always)]
    pub fn of(facts: &FileFacts) -> Self {
        Key {
            dentry: facts.dentry,
            ino: facts.ino,
            dev: facts.dev,
        }
    }
}

/// The file's inode number is that of its dentry's inode: the identity a new dentry at
/// this address is cleared by (`d_instantiate`) is the one the slot is chosen by. Not so
/// for an overlayfs file's second open of its real file, with the overlay's path and the
/// real inode. (A null dentry too: a cleared slot keeps its other fields.)
#[inline(always)]
fn bound_to(dentry: *const u8, ino: u64) -> bool {
    let off = kread::offsets();
    let inode: *const u8 = kread::field(dentry, off.dentry_d_inode).unwrap_or(core::ptr::null());
    !inode.is_null() && kread::field::<u64>(inode, off.inode_i_ino) == Ok(ino)
}

/// The first of the two slots a file may be kept in.
#[inline(always)]
fn index_of(k: &Key) -> u32 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let h = (k.ino.wrapping_mul(K) ^ u64::from(k.dev)).wrapping_mul(K);
    (h >> 40) as u32 & (SLOTS - 1)
}

/// A hit, as [`lookup`] returns it: [`HIT`] set, the kinds of rule in the low 32 bits and
/// [`SB_KNOWN`] for a placed superblock.
pub const HIT: u64 = 1 << 63;
pub const SB_KNOWN: u64 = 1 << 32;

/// What the path of the file (`dentry`, `ino`, `dev`) matched, if it was seen before
/// through this dentry (0: not). Reads no working memory.
///
/// A function of its own (a static BPF-to-BPF call, verified with the hook's types) that
/// takes and returns plain values: its locals, or the facts kept on the stack to pass
/// them by reference, in the hook's frame took `file_open` past the 512 bytes of stack it
/// may use with the global functions below it (6.1).
#[inline(never)]
pub fn lookup(policy_id: u32, dentry: *const u8, ino: u64, dev: u32) -> u64 {
    if !bound_to(dentry, ino) {
        return 0;
    }
    let Some(c) = dircache::clock() else {
        return 0;
    };
    // With the count of directory moves: the dentry's own moves, by its `d_seq` (odd
    // while it moves).
    let dseq: u32 = if c.own {
        let s = kread::field(dentry, kread::offsets().dentry_d_seq).unwrap_or(1);
        if s & 1 != 0 {
            return 0;
        }
        s
    } else {
        0
    };
    let k = Key { dentry, ino, dev };
    let i = index_of(&k);
    let hit = match get_at(i, &c, dseq, policy_id, &k) {
        Some(h) => h,
        None => match get_at(i ^ 1, &c, dseq, policy_id, &k) {
            Some(h) => h,
            None => return 0,
        },
    };
    HIT | if hit.sb_known { SB_KNOWN } else { 0 } | u64::from(hit.kinds)
}

#[inline(always)]
fn get_at(i: u32, c: &Clock, dseq: u32, policy_id: u32, k: &Key) -> Option<Hit> {
    let p = FILE_CACHE.get_ptr_mut(i)?;
    // SAFETY: `p` is a map value of this array; volatile reads keep the lock reads around
    // the others (x86-64 keeps loads in order, as for directory slots).
    unsafe {
        let before = core::ptr::read_volatile(&raw const (*p).lock);
        if before & 1 != 0 {
            return None;
        }
        macro_rules! same {
            ($f:ident, $v:expr) => {
                core::ptr::read_volatile(&raw const (*p).$f) == $v
            };
        }
        if !(same!(dentry, k.dentry as u64)
            && same!(ino, k.ino)
            && same!(dev, k.dev)
            && same!(policy_id, policy_id)
            && same!(generation, c.generation)
            && same!(rename_seq, c.seq)
            && same!(dseq, dseq))
        {
            return None;
        }
        let time = core::ptr::read_volatile(&raw const (*p).time);
        let hit = Hit {
            kinds: core::ptr::read_volatile(&raw const (*p).kinds),
            sb_known: core::ptr::read_volatile(&raw const (*p).sb_known) != 0,
        };
        let after = core::ptr::read_volatile(&raw const (*p).lock);
        (after == before && c.time.wrapping_sub(time) < c.max_age).then_some(hit)
    }
}

/// What a fill needs of the decision's working memory (`Scratch::now`).
#[derive(Clone, Copy)]
pub struct Stamp {
    pub generation: u64,
    pub time: u64,
    pub seq: u32,
    pub dseq: u32,
}

impl Stamp {
    #[inline(always)]
    pub fn of(now: &Now) -> Self {
        let (seq, dseq) = dircache::file_stamp(now);
        Stamp {
            generation: now.generation,
            time: now.time,
            seq,
            dseq,
        }
    }
}

/// Keeps `kinds` as what the path of the file (`facts`: its dentry and identity) matched,
/// under the decision's rename count and generation in its working memory (`w`;
/// `Scratch::now`, read before the file's directory and name, and again after them).
/// `found`: the kinds, and [`SB_KNOWN`]. A function of its own, as [`lookup`].
#[inline(never)]
pub fn fill(w: Work, policy_id: u32, facts: &FileFacts, found: u64) {
    let (dentry, ino, dev) = (facts.dentry, facts.ino, facts.dev);
    if !bound_to(dentry, ino) {
        return;
    }
    let Some(s) = w.mem() else {
        return;
    };
    #[allow(clippy::cast_possible_truncation)] // the low 32 bits are the kinds
    let kinds = found as u32;
    put(
        Stamp::of(&s.now),
        policy_id,
        &Key { dentry, ino, dev },
        kinds,
        found & SB_KNOWN != 0,
    );
}

/// Which of the two slots a new result goes to: the dentry's own, an empty one or one no
/// lookup can use any more (another generation or rename count), else the older if it
/// was filled more than about a second ago ([`older_of`]); none when both were filled
/// since (two files opened as often keep their slots, and a third misses, rather than all
/// three in turn: a `grep -r` of a tree takes its files in the same order every time).
#[inline(always)]
fn victim(i: u32, k: &Key, stamp: &Stamp) -> Option<u32> {
    let age = |i: u32| {
        FILE_CACHE.get(i).map_or(0, |v| {
            // SAFETY: a map value; a torn read only picks the other slot, or none.
            let (d, t, g, seq) = unsafe {
                (
                    core::ptr::read_volatile(&raw const v.dentry),
                    core::ptr::read_volatile(&raw const v.time),
                    core::ptr::read_volatile(&raw const v.generation),
                    core::ptr::read_volatile(&raw const v.rename_seq),
                )
            };
            if d == k.dentry as u64 || d == 0 || g != stamp.generation || seq != stamp.seq {
                u64::MAX
            } else {
                stamp.time.wrapping_sub(t)
            }
        })
    };
    older_of(i, age(i), age(i ^ 1))
}

/// Of the pair `i`, `i ^ 1` whose slots are `a` and `b` jiffies old (`u64::MAX`: free to
/// take), the older, if it was filled more than about a second ago (a thirty-second of a
/// result's life; read from the control value here, not passed in: a fill's frame is at
/// the edge of the stack `file_open` may use on 6.1). The name cache's rule too.
#[inline(always)]
pub fn older_of(i: u32, a: u64, b: u64) -> Option<u32> {
    let young = crate::maps::DIR_CACHE_CTL
        .get(0)
        .map_or(0, |ctl| dircache::max_age(ctl) >> 5);
    let (v, oldest) = if b > a { (i ^ 1, b) } else { (i, a) };
    (oldest >= young).then_some(v)
}

/// Keeps `kinds` as what the path of the file `k` matched under `stamp`.
#[inline(always)]
fn put(stamp: Stamp, policy_id: u32, k: &Key, kinds: u32, sb_known: bool) {
    if stamp.generation == 0 || k.dentry.is_null() {
        return;
    }
    let Some(i) = victim(index_of(k), k, &stamp) else {
        return;
    };
    let Some(p) = FILE_CACHE.get_ptr_mut(i) else {
        return;
    };
    // SAFETY: `p` is a map value of this array; the lock makes this the only writer.
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
        set!(dentry, k.dentry as u64);
        set!(ino, k.ino);
        set!(dev, k.dev);
        set!(generation, stamp.generation);
        set!(time, stamp.time);
        set!(rename_seq, stamp.seq);
        set!(dseq, stamp.dseq);
        set!(policy_id, policy_id);
        set!(kinds, kinds);
        set!(sb_known, u32::from(sb_known));
        kread::write_end(lock);
    }
}

/// The dentry of `k` is being bound to its inode (a new dentry, perhaps at an old one's
/// address, or one made positive again): the slots of that identity holding its address
/// are cleared.
#[inline(always)]
pub fn forget(k: &Key) {
    let i = index_of(k);
    for i in [i, i ^ 1] {
        let Some(p) = FILE_CACHE.get_ptr_mut(i) else {
            continue;
        };
        // SAFETY: as in `put`.
        unsafe {
            if core::ptr::read_volatile(&raw const (*p).dentry) != k.dentry as u64 {
                continue;
            }
            let lock = &raw mut (*p).lock;
            // A writer holding the slot fills it for another dentry: the one being bound
            // has no file open through it yet, and an old one at its address was freed,
            // so no decision about it is running.
            if kread::write_begin(lock).is_none() {
                continue;
            }
            core::ptr::write_volatile(&raw mut (*p).dentry, 0);
            kread::write_end(lock);
        }
    }
}
