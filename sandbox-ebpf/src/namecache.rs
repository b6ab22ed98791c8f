//! What a file's name matched, kept beside its directory's scan state, so that an open of
//! a file seen before does not scan its name again.
//!
//! With the directory cache (`dircache.rs`), a decision scans only `/name` from the
//! directory's kept state; what that scan makes of the name depends on nothing else than
//! that state, the name's bytes and the policy's tables (fixed for a loaded object). So
//! the kinds of rule it found are kept here, in a slot chosen by the directory's inode and
//! the name, and used for the same directory state and the same name bytes.
//!
//! Invariants:
//! - A slot is keyed by the name's bytes themselves (names of at most [`NAME_BYTES`]
//!   bytes, zero-padded, with their length), never by a dentry's address or a hash: a
//!   file made later under another name never finds another name's result. A file given
//!   that name later (renamed, or made anew) has that same path, so the same kinds of
//!   rule; the rules by identity (`INODE_RULES`) are looked up on every decision.
//! - A slot holds the directory slot's sequence-lock value ([`NameSlot::dir_lock`]) from
//!   the copy its scan started from, and is used only while the directory slot still
//!   holds that value: every write of the directory slot, and its clearing when the
//!   directory's inode is freed, changes it, so a directory made again at the same
//!   address never inherits a name's result.
//! - It is also used only for the lookup's directory (inode, dentry), policy, generation
//!   and rename count, and for the cache's age limit (`dircache::max_age`) after the directory
//!   state it came from was made (the slot carries that state's time); the rename count is
//!   read again after the name, as for a directory slot.
//! - A name changes only in `__d_move`, under `rename_lock` (the count); `d_tmpfile`
//!   writes a new `O_TMPFILE` dentry's name without it, before any other task can reach
//!   that dentry, and before its first decision.
//! - Filled only from a scan of the name from a valid directory slot that started outside
//!   any seeking of mounted directories (`seeking` 0: nothing but the tables decides),
//!   with the rename count unchanged meanwhile; written under a sequence lock as directory
//!   slots are, from the decision's own working memory (`work.rs`).

use crate::dircache::{self, DirSlot, Now};
use crate::kread;
use crate::maps::NAME_CACHE;

/// Slots (a power of two): names in use at once by confined processes. 65,536: a project
/// with its dependencies is tens of thousands of files, and a name whose two slots are
/// both taken by names read as often misses on every pass (16,384 slots: `grep -r` of
/// 18,200 files 1.15x, 65,536 with the file cache's: 1.10x; `cargo xtask bench --native`,
/// session 32). 104 bytes a slot: 6.8 MB.
pub const SLOTS: u32 = 65536;

/// Longest name kept (bytes), in [`NAME_WORDS`] words.
pub const NAME_BYTES: u32 = 32;
pub const NAME_WORDS: usize = NAME_BYTES as usize / 8;

/// A name as a decision reads it (working memory, `Scratch::name`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Name {
    /// The bytes, zero-padded.
    pub words: [u64; NAME_WORDS],
    /// Its length; 0: no name to look up (longer than [`NAME_BYTES`], or unread).
    pub len: u32,
    pub _pad: u32,
}

/// One name's result in one directory state.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NameSlot {
    /// Sequence lock, as a directory slot's.
    pub lock: u64,
    /// The directory slot's lock when the scan started from its state.
    pub dir_lock: u64,
    /// The directory's `struct inode` (0: empty) and dentry.
    pub dir_inode: u64,
    pub dir_dentry: u64,
    pub generation: u64,
    /// When it was made, in jiffies.
    pub time: u64,
    pub words: [u64; NAME_WORDS],
    pub len: u32,
    pub rename_seq: u32,
    pub policy_id: u32,
    /// The kinds of rule the path matched (`FileMatch::path`).
    pub kinds: u32,
    pub sb_known: u32,
    pub _pad: u32,
}

/// What a hit gives: the path's kinds of rule, and whether its superblock is placed.
pub struct Hit {
    pub kinds: u32,
    pub sb_known: bool,
}

/// Reads the name at `src` (`len` bytes) into `out`, if it is short enough to be kept.
#[inline(always)]
pub fn read(out: &mut Name, len: u32, src: u64) {
    kread::zero(&mut out.len);
    let mut i = 0;
    while i < NAME_WORDS {
        kread::zero(&mut out.words[i]);
        i += 1;
    }
    let n = kread::opaque(len);
    if n == 0 || n > NAME_BYTES || src == 0 {
        return;
    }
    // SAFETY: `words` has NAME_BYTES bytes and n <= NAME_BYTES; the helper validates `src`.
    let ret = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            out.words.as_mut_ptr().cast(),
            n,
            src as *const core::ffi::c_void,
        )
    };
    if ret == 0 {
        out.len = n;
    }
}

/// The two slots a name may be kept in (two ways: 2,000 names in 16,384 single slots would
/// leave about 120 pairs taking each other's slot on every pass).
#[inline(always)]
fn index_of(dir_inode: u64, name: &Name) -> u32 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = dir_inode.wrapping_mul(K);
    let mut i = 0;
    while i < NAME_WORDS {
        h = (h ^ name.words[i]).wrapping_mul(K);
        i += 1;
    }
    h = (h ^ u64::from(name.len)).wrapping_mul(K);
    (h >> 40) as u32 & (SLOTS - 1)
}

/// The result kept for `name` in the directory of `now`, if a valid one is.
#[inline(always)]
pub fn get(now: &Now, policy_id: u32, name: &Name) -> Option<Hit> {
    // SAFETY: a volatile read of working memory: a number, where LLVM could otherwise
    // reuse the typed pointer the hook stored there, on which no arithmetic is allowed.
    let dir = unsafe { core::ptr::read_volatile(&raw const now.parent_inode) };
    if now.generation == 0 || dir == 0 || name.len == 0 {
        return None;
    }
    let i = index_of(dir, name);
    if let Some(h) = get_at(i, now, policy_id, name) {
        return Some(h);
    }
    get_at(i ^ 1, now, policy_id, name)
}

#[inline(always)]
fn get_at(i: u32, now: &Now, policy_id: u32, name: &Name) -> Option<Hit> {
    let p = NAME_CACHE.get_ptr_mut(i)?;
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
        let mut ok = same!(dir_inode, now.parent_inode)
            && same!(dir_dentry, now.parent_dentry)
            && same!(len, name.len)
            && same!(policy_id, policy_id)
            && same!(generation, now.generation)
            && same!(rename_seq, now.dir_seq);
        let mut w = 0;
        while ok && w < NAME_WORDS {
            ok = core::ptr::read_volatile(&raw const (*p).words[w]) == name.words[w];
            w += 1;
        }
        if !ok {
            return None;
        }
        let time = core::ptr::read_volatile(&raw const (*p).time);
        let dir_lock = core::ptr::read_volatile(&raw const (*p).dir_lock);
        let hit = Hit {
            kinds: core::ptr::read_volatile(&raw const (*p).kinds),
            sb_known: core::ptr::read_volatile(&raw const (*p).sb_known) != 0,
        };
        let after = core::ptr::read_volatile(&raw const (*p).lock);
        (after == before
            && now.time.wrapping_sub(time) < now.max_age
            && dircache::lock_of(now.parent_inode) == Some(dir_lock))
        .then_some(hit)
    }
}

/// Which of the two slots of a name a new result goes to: an empty one or one no lookup
/// can use any more (another generation or rename count), else the older if it was
/// filled more than about a second ago, else none (`filecache::older_of`: names read as
/// often keep their slots rather than take each other's in turn).
#[inline(always)]
fn victim(i: u32, now: &Now) -> Option<u32> {
    let age = |i: u32| {
        NAME_CACHE.get(i).map_or(0, |v| {
            // SAFETY: a map value; a torn read only picks the other slot, or none.
            let (inode, time, g, seq) = unsafe {
                (
                    core::ptr::read_volatile(&raw const v.dir_inode),
                    core::ptr::read_volatile(&raw const v.time),
                    core::ptr::read_volatile(&raw const v.generation),
                    core::ptr::read_volatile(&raw const v.rename_seq),
                )
            };
            if inode == 0 || g != now.generation || seq != now.dir_seq {
                u64::MAX
            } else {
                now.time.wrapping_sub(time)
            }
        })
    };
    crate::filecache::older_of(i, age(i), age(i ^ 1))
}

/// Keeps `kinds` as what `name` matched from the directory state `dir` (as copied from its
/// slot, with the slot's lock value), for the decision of `now`.
#[inline(always)]
pub fn put(now: &Now, policy_id: u32, name: &Name, dir: &DirSlot, kinds: u32, sb_known: bool) {
    if now.generation == 0 || now.parent_inode == 0 || name.len == 0 {
        return;
    }
    let Some(i) = victim(index_of(now.parent_inode, name), now) else {
        return;
    };
    let Some(p) = NAME_CACHE.get_ptr_mut(i) else {
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
        set!(dir_lock, dir.lock);
        set!(dir_inode, now.parent_inode);
        set!(dir_dentry, now.parent_dentry);
        set!(generation, now.generation);
        // The directory state's time, not this decision's: the result is never used
        // longer than the state it came from could be.
        set!(time, dir.time);
        let mut i = 0;
        while i < NAME_WORDS {
            core::ptr::write_volatile(&raw mut (*p).words[i], name.words[i]);
            i += 1;
        }
        set!(len, name.len);
        set!(rename_seq, now.dir_seq);
        set!(policy_id, policy_id);
        set!(kinds, kinds);
        set!(sb_known, u32::from(sb_known));
        kread::write_end(lock);
    }
}

/// Empties the slot of `name` in directory `dir_inode` (the native benchmark's cold rows).
#[inline(always)]
pub fn forget(dir_inode: u64, name: &Name) {
    let i = index_of(dir_inode, name);
    for i in [i, i ^ 1] {
        let Some(p) = NAME_CACHE.get_ptr_mut(i) else {
            continue;
        };
        // SAFETY: as in `put`.
        unsafe {
            let lock = &raw mut (*p).lock;
            if kread::write_begin(lock).is_none() {
                continue;
            }
            core::ptr::write_volatile(&raw mut (*p).dir_inode, 0);
            kread::write_end(lock);
        }
    }
}
