//! Canonical path resolution and matching.
//!
//! The path is rebuilt from the dentry chain up to the root of the file's superblock, so
//! symlinks, `..`, relative names, chroot, `/proc/self/root` and bind mounts do not change
//! it. The superblock's canonical mount point is not rebuilt: the loader has already fed it
//! through the policy's matcher and stored the resulting scan state in `SB_START`. The path
//! bytes are then scanned (see `sandbox-user/src/compile/matcher.rs` for the layout): two
//! DFAs and a rolling hash advance per byte; at each `/` the "everything below" matches of
//! the prefix are collected; at the end the exact matches. The result is a mask of kinds.
//! Where only directories of a superblock are mounted (`SB_F_SUBDIRS`, `SB_F_SUBVOLS`), the
//! scan starts over from a mounted directory's place (`SB_ROOTS`) at the first `/` whose
//! prefix is one.

use core::ffi::c_void;

use aya_ebpf::helpers::generated::bpf_loop;
use sandbox_common::decide::FileMatch;
use sandbox_common::{
    ByteClasses, DFA_ANCHORED, DFA_FLOATING, DfaAccept, DfaInfo, InodeKey, KernelOffsets,
    LITERAL_FNV_PRIME, LiteralKey, MAX_DEPTH, NAME_MAX, PATH_MAX, PolicyInfo, SB_F_MULTI_ROOT,
    SB_F_SUBDIRS, SB_F_SUBVOLS, SbKey, SbRootKey, ScanStart, filter, literal_below, literal_kinds,
};

use crate::dircache;
use crate::filecache;
use crate::kread::{self, offsets};
use crate::maps::{
    DFA_ACCEPT, DFA_CLASSES, DFA_TRANS, INODE_RULES, LITERALS, POLICIES, SB_ROOTS, SB_START,
};
use crate::namecache;
use crate::work::{Claim, Work};

/// Path bytes live in the decision's working memory, `Scratch::path[start..PATH_END]`.
pub const PATH_END: u32 = PATH_MAX as u32 - 1;
const MASK: u32 = PATH_MAX as u32 - 1;

/// What the hooks know about a file before matching.
pub struct FileFacts {
    pub dentry: *const u8,
    pub dev: u32,
    pub ino: u64,
    pub mode: u16,
    /// Start of the path in `Scratch::path` once resolved.
    pub start: u32,
    /// `EVENT_F_*` of a path that could not be resolved ([`Resolved::Unresolved`]).
    pub flags: u32,
    /// `Scratch::path` holds only the last component (`/name`): the directory's part came
    /// from the directory cache. A record rebuilds the whole path ([`whole_path_if`]).
    pub partial: bool,
}

#[inline(always)]
pub fn file_facts(file: *const u8, off: &KernelOffsets) -> FileFacts {
    let dentry = kread::read_ptr(file, off.file_f_path_dentry).unwrap_or(core::ptr::null());
    let inode = kread::read_ptr(file, off.file_f_inode).unwrap_or(core::ptr::null());
    facts(dentry, inode, off)
}

/// [`file_facts`] of a `struct file *` the verifier types (`file_open`'s argument): the
/// same fields with [`kread::field`] loads instead of probe reads (about 40 ns less per
/// decision; `file_open` runs on every open of every confined process).
#[inline(always)]
pub fn typed_file_facts(file: *const u8, off: &KernelOffsets) -> FileFacts {
    let dentry = kread::field(file, off.file_f_path_dentry).unwrap_or(core::ptr::null());
    let inode: *const u8 = kread::field(file, off.file_f_inode).unwrap_or(core::ptr::null());
    let sb: *const u8 = kread::field(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    FileFacts {
        dentry,
        dev: kread::field(sb, off.super_block_s_dev).unwrap_or(0),
        ino: kread::field(inode, off.inode_i_ino).unwrap_or(0),
        mode: kread::field(inode, off.inode_i_mode).unwrap_or(0),
        start: PATH_END,
        flags: 0,
        partial: false,
    }
}

/// `CGROUP2_SUPER_MAGIC` (include/uapi/linux/magic.h).
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
/// Deeper than any cgroup tree (the kernel's own default limit is far lower in practice).
const MAX_CGROUP_WALK: u32 = 64;

/// Self-protection: `file`, opened for writing, is on cgroup2 and either not inside the
/// cgroup subtree the current task is confined to (`bound`, its scope's cgroup), a file
/// of that cgroup itself but `cgroup.subtree_control` (its limits), or a list of members
/// (`cgroup.procs`, `cgroup.threads`) anywhere. Writing outside
/// (`cgroup.procs`, `cgroup.kill`, limits of other groups) would move the task out of
/// scope or act on other processes; writing a pid into a list inside would pull a
/// process from outside in (the kernel asks only for write access to the lists of the
/// two cgroups' common ancestor: the root's, which root has), where it would count as
/// the sandbox's own (its `/proc` entries, ptrace, signals). So no process inside moves
/// between cgroups (`clone3(CLONE_INTO_CGROUP)` is refused too, `protect.rs`); cgroups
/// below its own can be made and set. A cgroup directory's inode number is the cgroup
/// id, so the test is a walk up the dentry chain.
#[inline(always)]
pub fn cgroup_write_refused(file: *const u8, bound: u64, off: &KernelOffsets) -> bool {
    let Ok(dentry) = kread::read_ptr(file, off.file_f_path_dentry) else {
        return false;
    };
    let Ok(sb) = kread::read_ptr(dentry, off.dentry_d_sb) else {
        return false;
    };
    let magic: u64 = kread::read(sb, off.super_block_s_magic).unwrap_or(0);
    if magic != CGROUP2_SUPER_MAGIC {
        return false;
    }
    if member_list(dentry, off) {
        return true;
    }
    // The scope's own files are its limits (`memory.max` and `pids.max` set by sandbox,
    // `cgroup.max.*`, `cgroup.type`, ...): its parent's to write, as in cgroup v2's
    // delegation. The command's are `cgroup.subtree_control` (controllers for cgroups
    // below its own), the pressure files (a trigger to poll: systemd's and GLib's memory
    // pressure watches) and `memory.reclaim` (it can only give memory back).
    let parent = kread::read_ptr(dentry, off.dentry_d_parent).unwrap_or(core::ptr::null());
    let dir = kread::read_ptr(parent, off.dentry_d_inode).unwrap_or(core::ptr::null());
    let dir_ino: u64 = kread::read(dir, off.inode_i_ino).unwrap_or(0);
    if bound != 0 && dir_ino == bound {
        return !own_writable(dentry, off);
    }
    let mut walk = CgroupWalk {
        dentry: dentry as u64,
        bound,
        outside: 1,
    };
    // SAFETY: bpf_loop calls cgroup_step with a pointer to `walk`, which outlives the call.
    unsafe {
        bpf_loop(
            MAX_CGROUP_WALK,
            cgroup_step as *mut c_void,
            (&raw mut walk).cast(),
            0,
        );
    }
    // Volatile: the verifier knows only what the callback may have written.
    // SAFETY: `walk` is a live local.
    unsafe { core::ptr::read_volatile(&raw const walk.outside) != 0 }
}

/// `dentry` (a cgroup2 file) is `cgroup.procs` or `cgroup.threads`; an unreadable name
/// is one (fail closed).
#[inline(always)]
fn member_list(dentry: *const u8, off: &KernelOffsets) -> bool {
    let len: u32 = kread::read(dentry, off.dentry_d_name_len).unwrap_or(u32::MAX);
    if len != 12 && len != 14 {
        return len == u32::MAX;
    }
    let Ok(name) = kread::read_ptr(dentry, off.dentry_d_name_name) else {
        return true;
    };
    // The first eight bytes and the last eight.
    let (Ok(head), Ok(tail)) = (
        kread::read::<u64>(name, 0),
        kread::read::<u64>(name, len - 8),
    ) else {
        return true;
    };
    let word = |b: &[u8; 8]| u64::from_le_bytes(*b);
    (len == 12 && head == word(b"cgroup.p") && tail == word(b"up.procs"))
        || (len == 14 && head == word(b"cgroup.t") && tail == word(b".threads"))
}

/// `dentry` (a file of the scope's own cgroup) is one the command may write:
/// `cgroup.subtree_control`, `memory.reclaim`, or a pressure trigger (`*.pressure` but
/// `cgroup.pressure`). Names compared whole
/// (words, the last two overlapping).
#[inline(always)]
fn own_writable(dentry: *const u8, off: &KernelOffsets) -> bool {
    let len: u32 = kread::read(dentry, off.dentry_d_name_len).unwrap_or(0);
    if !(10..=22).contains(&len) {
        return false;
    }
    let Ok(name) = kread::read_ptr(dentry, off.dentry_d_name_name) else {
        return false;
    };
    let word = |at: u32| kread::read::<u64>(name, at).unwrap_or(0);
    let is = |w: u64, text: &[u8; 8]| w == u64::from_le_bytes(*text);
    let tail = word(len - 8);
    if is(tail, b"pressure") {
        // The triggers (`cpu.`, `io.`, `irq.`, `memory.pressure`), not `cgroup.pressure`
        // (PSI on or off for the cgroup: its pressure is the parent's to watch).
        return kread::read::<u8>(name, len - 9).unwrap_or(0) == b'.'
            && (len != 15 || is(word(0), b"memory.p"));
    }
    match len {
        22 => is(word(0), b"cgroup.s") && is(word(8), b"ubtree_c") && is(tail, b"_control"),
        14 => is(word(0), b"memory.r") && is(tail, b".reclaim"),
        _ => false,
    }
}

/// The state of [`cgroup_write_refused`]'s walk, on the caller's stack: two numbers the
/// verifier cannot know (so `cgroup_step` verifies once, not once per level as an
/// unrolled loop did: 12,600 instructions of `file_open` on 6.18) and the verdict. No
/// counter or depth here: a field that changes on every step would keep kernels that
/// verify callbacks as loops (6.8+) from ever seeing the same state twice.
#[repr(C)]
struct CgroupWalk {
    dentry: u64,
    bound: u64,
    /// 1 until the scope's cgroup is found on the way up.
    outside: u64,
}

/// One level of [`cgroup_write_refused`]'s walk: stops (returns 1) at the scope's cgroup
/// (inside) or at the root (outside); after `MAX_CGROUP_WALK` levels, outside.
#[inline(never)]
extern "C" fn cgroup_step(_index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop passes the `CgroupWalk` of `cgroup_write_refused`.
    let Some(w) = (unsafe { ctx.cast::<CgroupWalk>().as_mut() }) else {
        return 1;
    };
    let off = offsets();
    let d = w.dentry as *const u8;
    let inode = kread::read_ptr(d, off.dentry_d_inode).unwrap_or(core::ptr::null());
    let ino: u64 = kread::read(inode, off.inode_i_ino).unwrap_or(0);
    if w.bound != 0 && ino == w.bound {
        w.outside = 0;
        return 1;
    }
    let parent = kread::read_ptr(d, off.dentry_d_parent).unwrap_or(core::ptr::null());
    if parent.is_null() || parent == d {
        return 1;
    }
    w.dentry = parent as u64;
    0
}

/// Facts of a name: a dentry whose inode may not exist yet (NULL for a file being created).
#[inline(always)]
pub fn dentry_facts(dentry: *const u8, off: &KernelOffsets) -> FileFacts {
    let inode = kread::read_ptr(dentry, off.dentry_d_inode).unwrap_or(core::ptr::null());
    facts(dentry, inode, off)
}

#[inline(always)]
fn facts(dentry: *const u8, inode: *const u8, off: &KernelOffsets) -> FileFacts {
    let sb = kread::read_ptr(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    FileFacts {
        dentry,
        dev: kread::read(sb, off.super_block_s_dev).unwrap_or(0),
        ino: kread::read(inode, off.inode_i_ino).unwrap_or(0),
        mode: kread::read(inode, off.inode_i_mode).unwrap_or(0),
        start: PATH_END,
        flags: 0,
        partial: false,
    }
}

pub enum Resolved {
    Matched(FileMatch),
    /// Could not resolve within the limits: fail closed. `FileFacts::flags` says why. (No
    /// payload: a variant's field left undefined on the other paths compiles to a read of
    /// an uninitialised register, which the verifier rejects.)
    Unresolved,
    /// On a file system mounted after load that userspace has not placed yet: fail closed.
    Unplaced,
    /// Every slot of working memory on this CPU is held by a decision in flight
    /// (`work.rs`): fail closed.
    Busy,
}

/// `SB_KERNMOUNT` (include/linux/fs.h): a kernel-internal mount (pipes, sockets, memfd,
/// anonymous inodes), never in any mount table.
const SB_KERNMOUNT: u64 = 1 << 22;

/// Loop state of the dentry walk. It lives in the working memory (a map), not on the stack:
/// values loaded from a map are unknown to the verifier, so the loop body verifies once.
/// (On the stack, `off` becomes a precise scalar that differs on every iteration, and
/// kernels that verify `bpf_loop` callbacks as loops, 6.8 and later, never converge.)
#[repr(C)]
pub struct Walk {
    dentry: u64,
    off: u32,
    done: u32,
    failed: u32,
    /// The walk ended at a root that is not the superblock's (`s_root`).
    detached: u32,
    /// Where the `/` before the dentry's own name is (`PATH_END`: the dentry is a root).
    first: u32,
}

/// Loop state of the path scan (in the working memory for the same reason).
#[repr(C)]
pub struct Scan {
    hash: u64,
    /// Hash of the path within the superblock so far, while `seeking`.
    sb_hash: u64,
    pos: u32,
    anchored: u32,
    floating: u32,
    mask: u32,
    policy_id: u32,
    /// Superblock (`s_dev`) of the path.
    dev: u32,
    /// While the path has not yet passed a mounted directory that places it (`SB_ROOTS`):
    /// [`SEEK_ONLY`] (`SB_F_SUBDIRS`: nothing is matched until it has) or
    /// [`SEEK_MATCHING`] (`SB_F_SUBVOLS`: matched as below the root's mount meanwhile).
    seeking: u32,
    /// The scan stops before this position.
    end: u32,
    /// At this position (the `/` before the last component) the state is copied to `snap`:
    /// the directory's state, for the directory cache. `NO_SPLIT`: not copied.
    split: u32,
    _pad: u32,
    dfa: [DfaInfo; 2],
    snap: Snap,
}

/// A scan's state between two bytes: what the directory cache keeps.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Snap {
    pub hash: u64,
    pub sb_hash: u64,
    pub anchored: u32,
    pub floating: u32,
    pub mask: u32,
    pub seeking: u32,
}

const NO_SPLIT: u32 = u32::MAX;

/// The slot of working memory a loop callback works in: `ctx` points to its index on the
/// caller's stack (a global function's, which does not know the number).
#[inline(always)]
fn work_of(ctx: *mut c_void) -> Option<&'static mut crate::maps::Scratch> {
    // SAFETY: the callers pass a pointer to a `u32` local that outlives the loop.
    let index = unsafe { ctx.cast::<u32>().as_ref() }?;
    Work::at(*index).mem()
}

/// One dentry level: prepend "/name". Stops (returns 1) at the superblock root.
#[inline(never)]
extern "C" fn walk_step(index: u64, ctx: *mut c_void) -> i64 {
    let Some(s) = work_of(ctx) else {
        return 1;
    };
    let off = offsets();
    let dentry = s.walk.dentry as *const u8;
    let Ok(parent) = kread::read_ptr(dentry, off.dentry_d_parent) else {
        s.walk.failed = 1;
        return 1;
    };
    if parent == dentry || parent.is_null() {
        let sb = kread::read_ptr(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
        let root = kread::read_ptr(sb, off.super_block_s_root).unwrap_or(core::ptr::null());
        s.walk.detached = u32::from(root != dentry);
        s.walk.done = 1;
        return 1;
    }
    let len: u32 = kread::read(dentry, off.dentry_d_name_len).unwrap_or(0);
    let name = kread::read_ptr(dentry, off.dentry_d_name_name).unwrap_or(core::ptr::null());
    let pos = s.walk.off;
    if len >= NAME_MAX as u32 || len + 1 > pos {
        s.walk.failed = 1;
        return 1;
    }
    let pos = pos - len;
    // SAFETY: `pos & MASK` < PATH_MAX and len < NAME_MAX: inside the PATH_BUF-sized buffer.
    let dst = unsafe {
        s.path
            .as_mut_ptr()
            .add((kread::opaque(pos) & MASK) as usize)
    };
    if kread::read_bytes(dst, len, name).is_err() {
        s.walk.failed = 1;
        return 1;
    }
    let pos = pos - 1;
    s.path[(kread::opaque(pos) & MASK) as usize] = b'/';
    s.walk.off = pos;
    if index == 0 {
        s.walk.first = pos;
    }
    s.walk.dentry = parent as u64;
    0
}

/// One DFA step with its byte classes (looked up once per run of bytes); the dead state
/// stays dead, and so does every state without its classes.
#[inline(always)]
fn step(classes: Option<&ByteClasses>, d: &DfaInfo, state: u32, byte: u8) -> u32 {
    if state == d.dead {
        return state;
    }
    let Some(classes) = classes else {
        return d.dead;
    };
    let class = u32::from(classes.classes[byte as usize]);
    DFA_TRANS
        .get(d.trans_base + state * d.stride + class)
        .copied()
        .unwrap_or(d.dead)
}

#[inline(always)]
fn accept_of(d: &DfaInfo, state: u32) -> DfaAccept {
    if state == d.dead {
        return DfaAccept::default();
    }
    DFA_ACCEPT
        .get(d.accept_base + state)
        .copied()
        .unwrap_or_default()
}

/// The `LITERALS` value of `hash`, looked up only if the filter `region` says it may be
/// there (0 otherwise).
#[inline(always)]
fn literal(region: u32, policy_id: u32, hash: u64) -> u32 {
    if !crate::maps::may_hold(region, hash) {
        return 0;
    }
    let key = LiteralKey {
        hash,
        policy_id,
        _pad: 0,
    };
    // SAFETY: the value is a plain u32 copied out immediately.
    unsafe { LITERALS.get(&key) }.copied().unwrap_or(0)
}

/// Path bytes scanned per `bpf_loop` iteration. More bytes per iteration scan faster and
/// verify far slower (natively, 1,000 rules: 7.5 ns a byte at 1, 6.8 at 2, 5.5 at 4, 5.5
/// at 8; `sandbox_resolve` verified in 16,000 instructions at 1, 35,000 at 2, 73,000 at 4,
/// 185,000 at 8, once per program that calls it): every byte's branches multiply the
/// verifier's paths. Start-up (about 30 programs, each verified at every start) and the
/// suite's time under TCG decide for 1.
const SCAN_BYTES_PER_STEP: u32 = 1;

/// [`SCAN_BYTES_PER_STEP`] path bytes (fewer at the end; returns 1 then).
#[inline(never)]
extern "C" fn scan_step(_index: u64, ctx: *mut c_void) -> i64 {
    let Some(s) = work_of(ctx) else {
        return 1;
    };
    let pid = s.scan.policy_id;
    let classes = (
        DFA_CLASSES.get(pid * 2 + DFA_ANCHORED as u32),
        DFA_CLASSES.get(pid * 2 + DFA_FLOATING as u32),
    );
    for _ in 0..SCAN_BYTES_PER_STEP {
        if !scan_byte(s, classes) {
            return 1;
        }
    }
    0
}

/// One path byte: at `/` collect what the prefix covers below it, then advance. False at
/// the end of the scan.
#[inline(always)]
fn scan_byte(
    s: &mut crate::maps::Scratch,
    classes: (Option<&ByteClasses>, Option<&ByteClasses>),
) -> bool {
    let pos = s.scan.pos;
    if pos >= PATH_END || pos >= s.scan.end {
        return false;
    }
    if pos == s.scan.split {
        s.scan.snap = Snap {
            hash: s.scan.hash,
            sb_hash: s.scan.sb_hash,
            anchored: s.scan.anchored,
            floating: s.scan.floating,
            mask: s.scan.mask,
            seeking: s.scan.seeking,
        };
    }
    let byte = s.path[(kread::opaque(pos) & MASK) as usize];
    let pid = s.scan.policy_id;
    if s.scan.seeking != 0 {
        // At each `/`: is the prefix a mounted directory that places the path?
        if byte == b'/'
            && let Some(v) = mounted_dir(pid, s.scan.dev, s.scan.sb_hash)
            && places(s.scan.seeking, &v)
        {
            set_start(&mut s.scan, &v);
        }
        s.scan.sb_hash = (s.scan.sb_hash ^ u64::from(byte)).wrapping_mul(LITERAL_FNV_PRIME);
        if s.scan.seeking == SEEK_ONLY {
            s.scan.pos = pos + 1;
            return true;
        }
    }
    // The DFAs' geometry read in place (copies would take 40 bytes of this callback's
    // stack, which counts towards the 512 of the deepest call chain).
    let scan = &mut s.scan;
    if byte == b'/' {
        let below = u32::from(accept_of(&scan.dfa[DFA_ANCHORED], scan.anchored).below)
            | u32::from(accept_of(&scan.dfa[DFA_FLOATING], scan.floating).below);
        scan.mask |= below | literal_below(literal(filter::BELOW, pid, scan.hash));
    }
    scan.anchored = step(classes.0, &scan.dfa[DFA_ANCHORED], scan.anchored, byte);
    scan.floating = step(classes.1, &scan.dfa[DFA_FLOATING], scan.floating, byte);
    s.scan.hash = (s.scan.hash ^ u64::from(byte)).wrapping_mul(LITERAL_FNV_PRIME);
    s.scan.pos = pos + 1;
    true
}

/// `Scan::seeking` values.
const SEEK_MATCHING: u32 = 1;
const SEEK_ONLY: u32 = 2;

/// The place a directory of a superblock whose root is not mounted is mounted at, by the
/// hash of its path within the superblock.
#[inline(always)]
fn mounted_dir(policy_id: u32, dev: u32, hash: u64) -> Option<ScanStart> {
    let key = SbRootKey {
        hash,
        policy_id,
        dev,
    };
    // SAFETY: the value is plain data copied out immediately.
    unsafe { SB_ROOTS.get(&key) }.copied()
}

/// Whether mounted directory `v` places the path: the first one found does; after that
/// (or below a mounted root) only a btrfs subvolume mount deeper down (openSUSE mounts
/// `/@/.snapshots/1/snapshot` at `/` and `/@/.snapshots` at `/.snapshots`).
#[inline(always)]
fn places(seeking: u32, v: &ScanStart) -> bool {
    seeking == SEEK_ONLY || v.flags & SB_F_SUBVOLS != 0
}

/// Continues the scan as if the path so far were the place `v` was fed for; deeper
/// subvolume mounts are still looked for.
#[inline(always)]
fn set_start(scan: &mut Scan, v: &ScanStart) {
    scan.anchored = v.anchored;
    scan.floating = v.floating;
    scan.hash = v.hash;
    scan.mask = v.mask;
    scan.seeking = SEEK_MATCHING;
}

/// Builds the path of `dentry` within its superblock into the working memory `w`
/// (`Scratch::path[start..PATH_END]`) and returns `start`. Fails when the path does not
/// fit or a read fails.
#[inline(always)]
pub fn build_path(w: Work, dentry: *const u8) -> Result<u32, ()> {
    let start = sandbox_build_path(w.index(), dentry as u64);
    if start < PATH_END { Ok(start) } else { Err(()) }
}

/// [`build_path`]'s work, a global function (the walk's callback verified once per
/// program): the path's start, or `u32::MAX` when it failed.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_build_path(work: u32, dentry: u64) -> u32 {
    match walk(work, dentry as *const u8) {
        Ok(start) => start,
        Err(()) => u32::MAX,
    }
}

#[inline(always)]
fn walk(work: u32, dentry: *const u8) -> Result<u32, ()> {
    let mut index = work;
    let s = Work::at(work).mem().ok_or(())?;
    s.walk = Walk {
        dentry: dentry as u64,
        off: PATH_END,
        done: 0,
        failed: 0,
        detached: 0,
        first: PATH_END,
    };
    // SAFETY: bpf_loop calls walk_step with a pointer to `index`, which outlives the call.
    unsafe {
        bpf_loop(
            MAX_DEPTH,
            walk_step as *mut c_void,
            (&raw mut index).cast(),
            0,
        );
    }
    if s.walk.done == 0 || s.walk.failed != 0 {
        return Err(());
    }
    let mut start = s.walk.off;
    if start >= PATH_END {
        // The superblock root itself.
        start = PATH_END - 1;
        s.path[start as usize] = b'/';
    }
    Ok(start)
}

/// Resolves the canonical path of `facts.dentry` and matches it (and the inode) against the
/// policy. The work is done once per program, in [`sandbox_resolve`].
#[inline(always)]
pub fn resolve(mem: Claim, policy_id: u32, facts: &mut FileFacts) -> Resolved {
    let Some(w) = mem.work() else {
        return Resolved::Busy;
    };
    resolve_with(w, policy_id, facts, false).0
}

/// [`resolve`] for a dentry the verifier types (`file_open`'s, from its typed `file`):
/// the decision's start (the rename count read) is made here, and the file's directory and
/// name are read after it with direct loads ([`kread::field`]) instead of probe reads in
/// the global function. A file seen before needs no working memory.
#[inline(always)]
pub fn resolve_typed(mem: Claim, policy_id: u32, facts: &mut FileFacts) -> Resolved {
    // The file seen before through this dentry: one slot decides.
    let found = filecache::lookup(policy_id, facts.dentry, facts.ino, facts.dev);
    if found & filecache::HIT != 0 {
        let inode = inode_rules(policy_id, facts);
        // A record rebuilds the whole path (`whole_path_if`).
        facts.start = PATH_END;
        facts.partial = true;
        #[allow(clippy::cast_possible_truncation)] // the low 32 bits are the kinds
        return Resolved::Matched(FileMatch {
            path: found as u32,
            inode,
            sb_known: found & filecache::SB_KNOWN != 0,
        });
    }
    let Some(w) = mem.work() else {
        return Resolved::Busy;
    };
    let Some(s) = w.mem() else {
        return Resolved::Unresolved;
    };
    s.now.prepared = 1;
    s.now.name_read = 0;
    // Volatile: LLVM would merge the adjacent stores into a call of `memset`, a loop of
    // byte stores in BPF.
    kread::zero(&mut s.now.parent_dentry);
    kread::zero(&mut s.now.parent_inode);
    s.now.name = 0;
    s.now.name_len = u32::MAX;
    s.now.dseq = 1;
    let mut known = None;
    if dircache::now(&mut s.now) {
        let off = offsets();
        let dentry = facts.dentry;
        // Before the parent and the name (volatile loads, kept in order; x86-64 keeps
        // loads in order): a move after it moves it on (`filecache.rs`).
        if off.dentry_d_seq != 0 {
            s.now.dseq = kread::field(dentry, off.dentry_d_seq).unwrap_or(1);
        }
        let parent: *const u8 =
            kread::field(dentry, off.dentry_d_parent).unwrap_or(core::ptr::null());
        if !parent.is_null() && parent != dentry {
            let inode: *const u8 =
                kread::field(parent, off.dentry_d_inode).unwrap_or(core::ptr::null());
            let flags: u32 = kread::field(parent, off.dentry_d_flags).unwrap_or(u32::MAX);
            if !inode.is_null() && flags & dircache::DCACHE_OP_REVALIDATE == 0 {
                s.now.parent_dentry = parent as u64;
                s.now.parent_inode = inode as u64;
            }
        }
        s.now.name_len = kread::field(dentry, off.dentry_d_name_len).unwrap_or(u32::MAX);
        s.now.name = kread::field(dentry, off.dentry_d_name_name).unwrap_or(0);
        // The file seen before in this directory: decided here, without the global
        // function (and the probe reads it takes to get its arguments).
        if inline_name(dentry, s) {
            known = resolve_known_in(s, policy_id, facts);
        }
    }
    // A name cache hit, or the global function's answer and whether it is a name's result.
    let (r, kept) = match known {
        Some(r) => (r, true),
        None => resolve_with(w, policy_id, facts, true),
    };
    // One call site: the function is verified once per call site.
    keep_for_dentry(w, policy_id, facts, r, kept)
}

/// A name's result (`kept`: found in the name cache, or a scan of the name from its
/// directory's kept state that sought no mounted directory) is the path of the file's
/// own dentry, found under the decision's rename count (read again since): kept for the
/// dentry ([`filecache::fill`]). So a file's second open reads one slot, whether the name
/// was seen before or scanned by the first.
#[inline(always)]
fn keep_for_dentry(
    w: Work,
    policy_id: u32,
    facts: &FileFacts,
    r: Resolved,
    kept: bool,
) -> Resolved {
    if kept && let Resolved::Matched(m) = &r {
        let sb = if m.sb_known { filecache::SB_KNOWN } else { 0 };
        let found = sb | u64::from(m.path);
        filecache::fill(w, policy_id, facts, found);
    }
    r
}

/// A short name's bytes, read from the dentry itself (`d_iname`) with direct loads, into
/// `Scratch::name` as [`namecache::read`] would put them (zero past the length). Whether
/// they were: not for a name kept elsewhere (a long one), or a kernel whose inline name
/// the loader did not find (`dentry_d_iname` 0: the verifier drops this code then).
/// The bytes may change under a rename; the rename count, read before and after, says so.
#[inline(always)]
fn inline_name(dentry: *const u8, s: &mut crate::maps::Scratch) -> bool {
    let off = offsets();
    let (len, name) = (s.now.name_len, s.now.name);
    if off.dentry_d_iname == 0
        || len == 0
        || len > namecache::NAME_BYTES
        || name != (dentry as u64).wrapping_add(u64::from(off.dentry_d_iname))
    {
        return false;
    }
    let mut i = 0;
    while i < namecache::NAME_WORDS {
        #[allow(clippy::cast_possible_truncation)] // i < NAME_WORDS (4)
        let lo = 8 * i as u32;
        let w: u64 = kread::field(dentry, off.dentry_d_iname + lo).unwrap_or(0);
        s.name.words[i] = if len >= lo + 8 {
            w
        } else if len <= lo {
            0
        } else {
            w & ((1u64 << (8 * (len - lo))) - 1)
        };
        i += 1;
    }
    s.name.len = len;
    s.now.name_read = 1;
    true
}

/// The global function's answer, and whether it is a name's result (`packed::KEPT`).
#[inline(always)]
fn resolve_with(
    w: Work,
    policy_id: u32,
    facts: &mut FileFacts,
    prepared: bool,
) -> (Resolved, bool) {
    let dentry = kread::untyped(facts.dentry);
    let call = (w.index() << call::WORK) | u32::from(prepared);
    let r = sandbox_resolve(call, policy_id, dentry, facts.dev, facts.ino);
    facts.start = ((r >> packed::START) & packed::START_MASK) as u32;
    facts.flags = ((r >> packed::FLAGS) & packed::FLAGS_MASK) as u32;
    facts.partial = (r >> packed::PARTIAL) & 1 != 0;
    let kept = (r >> packed::KEPT) & 1 != 0;
    // Made on every way (zeros but for a match): LLVM keeps the match's payload in a
    // register it may spill on the other ways too, where the verifier refuses to read an
    // unwritten one (it did in the native benchmark's `bench_open`).
    let m = FileMatch {
        path: (r & packed::KINDS_MASK) as u32,
        inode: ((r >> packed::INODE) & packed::KINDS_MASK) as u32,
        sb_known: (r >> packed::SB_KNOWN) & 1 != 0,
    };
    let resolved = match r >> packed::VARIANT {
        packed::MATCHED => Resolved::Matched(m),
        packed::UNPLACED => Resolved::Unplaced,
        _ => Resolved::Unresolved,
    };
    (resolved, kept)
}

/// [`sandbox_resolve`]'s first argument (a BPF function takes five): bit 0 set when the
/// caller prepared the decision ([`resolve_typed`]), the slot of working memory from bit
/// `WORK` on.
mod call {
    pub const PREPARED: u32 = 1;
    pub const WORK: u32 = 1;
}

/// [`Resolved`] and what [`resolve`] writes back into `FileFacts`, as the one scalar a
/// global function may return: the path's and the inode's kinds of rule (`accept::SLOTS`
/// bits each), where the path starts, the `EVENT_F_*` flags, whether the superblock is
/// placed, whether the path is only the last component, and the variant.
mod packed {
    pub const KINDS_MASK: u64 = (1 << sandbox_common::accept::SLOTS) - 1;
    pub const INODE: u64 = 16;
    pub const START: u64 = 32;
    pub const START_MASK: u64 = 0xfff;
    pub const FLAGS: u64 = 44;
    pub const FLAGS_MASK: u64 = 0xf;
    pub const SB_KNOWN: u64 = 48;
    pub const PARTIAL: u64 = 49;
    /// A name's result: found in the name cache, or scanned from the directory's state.
    pub const KEPT: u64 = 50;
    pub const VARIANT: u64 = 56;
    pub const MATCHED: u64 = 0;
    pub const UNRESOLVED: u64 = 1;
    pub const UNPLACED: u64 = 2;
    const _: () = assert!(sandbox_common::accept::SLOTS <= INODE as usize);
    const _: () = assert!(super::PATH_END as u64 <= START_MASK);
    const _: () = assert!(
        sandbox_common::EVENT_F_PATH_TRUNCATED
            | sandbox_common::EVENT_F_DISCONNECTED
            | sandbox_common::EVENT_F_OUTSIDE_MOUNTS
            <= FLAGS_MASK as u32
    );
}

/// The path machinery shared by every path hook: a global function, which the verifier
/// checks once per program with unknown arguments instead of once per call site and
/// caller state (`file_open` alone went through 333,000 instructions on 6.1 when it was
/// inlined). Its arguments are scalars (the dentry is only ever read through
/// `bpf_probe_read_kernel`), and it looks the policy up itself. Kept global by
/// `--export` in `build.rs` (bpf-linker makes every other function static).
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_resolve(
    call: u32,
    policy_id: u32,
    dentry: u64,
    dev: u32,
    ino: u64,
) -> u64 {
    let w = Work::at(call >> call::WORK);
    let prepared = call & call::PREPARED != 0;
    let mut facts = FileFacts {
        dentry: dentry as *const u8,
        dev,
        ino,
        mode: 0,
        start: PATH_END,
        flags: 0,
        partial: false,
    };
    let (variant, m, kept) = match POLICIES.get(policy_id) {
        None => (packed::UNRESOLVED, FileMatch::default(), false),
        Some(info) => match resolve_here(w, policy_id, info, &mut facts, prepared) {
            (Resolved::Matched(m), kept) => (packed::MATCHED, m, kept),
            (Resolved::Unplaced, _) => (packed::UNPLACED, FileMatch::default(), false),
            (Resolved::Unresolved | Resolved::Busy, _) => {
                (packed::UNRESOLVED, FileMatch::default(), false)
            }
        },
    };
    (u64::from(m.path) & packed::KINDS_MASK)
        | ((u64::from(m.inode) & packed::KINDS_MASK) << packed::INODE)
        | ((u64::from(facts.start) & packed::START_MASK) << packed::START)
        | ((u64::from(facts.flags) & packed::FLAGS_MASK) << packed::FLAGS)
        | (u64::from(m.sb_known) << packed::SB_KNOWN)
        | (u64::from(facts.partial) << packed::PARTIAL)
        | (u64::from(kept) << packed::KEPT)
        | (variant << packed::VARIANT)
}

/// The directory a dentry is in, into `now` (its dentry and inode as numbers, for the
/// directory cache), or zeros for a root or names the file system revalidates.
#[inline(always)]
fn parent_of(dentry: *const u8, now: &mut dircache::Now) {
    let off = offsets();
    kread::zero(&mut now.parent_dentry);
    kread::zero(&mut now.parent_inode);
    let Ok(parent) = kread::read_ptr(dentry, off.dentry_d_parent) else {
        return;
    };
    if parent.is_null() || parent == dentry {
        return;
    }
    let inode = kread::read_ptr(parent, off.dentry_d_inode).unwrap_or(core::ptr::null());
    let flags: u32 = kread::read(parent, off.dentry_d_flags).unwrap_or(u32::MAX);
    if inode.is_null() || flags & dircache::DCACHE_OP_REVALIDATE != 0 {
        return;
    }
    now.parent_dentry = parent as u64;
    now.parent_inode = inode as u64;
}

#[inline(always)]
fn resolve_here(
    w: Work,
    policy_id: u32,
    info: &PolicyInfo,
    facts: &mut FileFacts,
    prepared: bool,
) -> (Resolved, bool) {
    // The rename count is read before the parent and the name. A prepared decision
    // ([`resolve_typed`]) did that before the call.
    let Some(s) = w.mem() else {
        return (Resolved::Unresolved, false);
    };
    let cache = if prepared {
        s.now.generation != 0
    } else {
        s.now.prepared = 0;
        s.now.name_read = 0;
        s.now.dseq = 1;
        let on = dircache::now(&mut s.now);
        if on {
            parent_of(facts.dentry, &mut s.now);
            name_of(facts.dentry, &mut s.now);
        }
        on
    };
    if cache {
        if s.now.name_read == 0 {
            namecache::read(&mut s.name, s.now.name_len, s.now.name);
            // (A name read by the hook was looked up there already.)
            if let Some(r) = resolve_known_in(s, policy_id, facts) {
                return (r, true);
            }
        }
        if dircache::get(&s.now, policy_id, &mut s.dir)
            && let Some(found) = resolve_below(w, policy_id, info, facts)
        {
            return found;
        }
    }
    (resolve_whole(w, policy_id, info, facts), false)
}

/// The name of a dentry (`d_name`), into `now` (length `u32::MAX` when unreadable).
#[inline(always)]
fn name_of(dentry: *const u8, now: &mut dircache::Now) {
    let off = offsets();
    now.name_len = kread::read(dentry, off.dentry_d_name_len).unwrap_or(u32::MAX);
    now.name = kread::read(dentry, off.dentry_d_name_name).unwrap_or(0);
}

/// A file whose name's result is kept for its directory's state (`namecache.rs`): no
/// scan at all. `None` when none is kept or a move happened meanwhile.
#[inline(always)]
fn resolve_known_in(
    s: &mut crate::maps::Scratch,
    policy_id: u32,
    facts: &mut FileFacts,
) -> Option<Resolved> {
    let hit = namecache::get(&s.now, policy_id, &s.name)?;
    let inode = inode_rules(policy_id, facts);
    if !dircache::unchanged(&s.now) {
        return None;
    }
    // A record rebuilds the whole path (`whole_path_if`).
    facts.start = PATH_END;
    facts.partial = true;
    // Kept only from scans that did not seek mounted directories: none is outside the
    // mounted ones (`matched`).
    Some(Resolved::Matched(FileMatch {
        path: hit.kinds,
        inode,
        sb_known: hit.sb_known,
    }))
}

/// The path of a file whose directory's scan state is kept (in `Scratch::dir`): only
/// `/name` is placed and scanned. `None` when the name does not fit or a move happened
/// meanwhile: the whole walk decides then. With the result, whether it is a name's result
/// (one that sought no mounted directory).
#[inline(always)]
fn resolve_below(
    w: Work,
    policy_id: u32,
    info: &PolicyInfo,
    facts: &mut FileFacts,
) -> Option<(Resolved, bool)> {
    let s = w.mem()?;
    let d = &s.dir;
    // Read by `resolve_typed` or `resolve_here`, after the rename count.
    let (len, name) = (s.now.name_len, s.now.name as *const u8);
    if name.is_null() {
        return None;
    }
    if len >= NAME_MAX as u32 || d.len + len + 1 > PATH_END {
        return None;
    }
    let start = PATH_END - len - 1;
    // SAFETY: start + 1 < PATH_MAX and len < NAME_MAX: inside the PATH_BUF-sized buffer.
    let dst = unsafe {
        s.path
            .as_mut_ptr()
            .add((kread::opaque(start + 1) & MASK) as usize)
    };
    kread::read_bytes(dst, len, name).ok()?;
    s.path[(kread::opaque(start) & MASK) as usize] = b'/';
    let sb_known = d.sb_known != 0;
    s.scan.hash = d.hash;
    s.scan.sb_hash = d.sb_hash;
    s.scan.pos = start;
    s.scan.anchored = d.anchored;
    s.scan.floating = d.floating;
    s.scan.mask = d.mask;
    s.scan.policy_id = policy_id;
    s.scan.dev = facts.dev;
    s.scan.seeking = d.seeking;
    s.scan.end = PATH_END;
    s.scan.split = NO_SPLIT;
    set_dfa(&mut s.scan.dfa, &info.dfa);
    let seeking = d.seeking;
    let path = sandbox_scan(w.index(), policy_id, facts.dev);
    let inode = inode_rules(policy_id, facts);
    if !dircache::unchanged(&s.now) {
        return None;
    }
    facts.start = start;
    facts.partial = true;
    let r = matched(w, path, inode, sb_known, facts);
    if seeking == 0 && matches!(r, Resolved::Matched(_)) {
        namecache::put(&s.now, policy_id, &s.name, &s.dir, path, sb_known);
    }
    // A name's result (a scan from the directory's state that sought no mounted
    // directory), which the file's dentry may keep (`resolve_typed`).
    let kept = seeking == 0 && matches!(r, Resolved::Matched(_));
    Some((r, kept))
}

/// The whole walk and scan; with the cache on (`Scratch::now`), the directory's state is
/// kept on the way.
#[inline(always)]
fn resolve_whole(w: Work, policy_id: u32, info: &PolicyInfo, facts: &mut FileFacts) -> Resolved {
    let Ok(start_off) = build_path(w, facts.dentry) else {
        facts.flags = sandbox_common::EVENT_F_PATH_TRUNCATED;
        return Resolved::Unresolved;
    };
    // The path is Scratch::path[start_off..PATH_END]; the event copies it from there.
    facts.start = start_off;

    let key = SbKey {
        policy_id,
        dev: facts.dev,
    };
    // SAFETY: the value is plain data copied out immediately.
    let sb = unsafe { SB_START.get(&key) }.copied();
    let sb_known = sb.is_some();
    if let Some(v) = sb
        && v.flags & SB_F_MULTI_ROOT == 0
        && w.mem().is_none_or(|s| s.walk.detached != 0)
    {
        // A disconnected dentry (open_by_handle_at of a file whose parents are not in the
        // dentry cache): its path would read as `/name` or `/`. Fail closed.
        facts.flags = sandbox_common::EVENT_F_DISCONNECTED;
        return Resolved::Unresolved;
    }
    if !sb_known {
        let off = offsets();
        let sbp = kread::read_ptr(facts.dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
        let flags: u64 = kread::read(sbp, off.super_block_s_flags).unwrap_or(0);
        if flags & SB_KERNMOUNT == 0 {
            return Resolved::Unplaced;
        }
    }
    let split = match w.mem() {
        Some(s) if s.now.generation != 0 && s.now.parent_inode != 0 && s.walk.first < PATH_END => {
            s.walk.first
        }
        _ => NO_SPLIT,
    };
    scan_begin(w, policy_id, info, start_off, sb, facts.dev, split);
    let path = sandbox_scan(w.index(), policy_id, facts.dev);
    let inode = inode_rules(policy_id, facts);
    let r = matched(w, path, inode, sb_known, facts);
    if let (Resolved::Matched(_), Some(s)) = (&r, w.mem())
        && split != NO_SPLIT
        && dircache::unchanged(&s.now)
    {
        dircache::keep(&s.now, policy_id, &s.scan.snap, split - start_off, sb_known);
    }
    r
}

/// The inode's own rules (files protected by identity, `INODE_RULES`).
#[inline(always)]
fn inode_rules(policy_id: u32, facts: &FileFacts) -> u32 {
    if !crate::maps::may_hold(filter::INODE, filter::inode_key(facts.ino, facts.dev)) {
        return 0;
    }
    let ikey = InodeKey {
        ino: facts.ino,
        dev: facts.dev,
        policy_id,
    };
    // SAFETY: the value is a plain u32 copied out immediately.
    unsafe { INODE_RULES.get(&ikey) }.copied().unwrap_or(0)
}

/// The result of a scan.
#[inline(always)]
fn matched(w: Work, path: u32, inode: u32, sb_known: bool, facts: &mut FileFacts) -> Resolved {
    if w.mem().is_none_or(|s| s.scan.seeking == SEEK_ONLY) {
        // Below none of the mounted directories of a superblock whose root is not mounted.
        facts.flags = sandbox_common::EVENT_F_OUTSIDE_MOUNTS;
        return Resolved::Unresolved;
    }
    Resolved::Matched(FileMatch {
        path,
        inode,
        sb_known,
    })
}

/// Sets up a scan of `Scratch::path[start_off..PATH_END]` by the policy's matcher, from the
/// scan state after a superblock's mount point (`sb`) or from the very start; the state
/// at `split` is kept in `Scan::snap`.
#[inline(always)]
fn scan_begin(
    w: Work,
    policy_id: u32,
    info: &PolicyInfo,
    start_off: u32,
    sb: Option<ScanStart>,
    dev: u32,
    split: u32,
) {
    let Some(s) = w.mem() else {
        return;
    };
    let flags = sb.map_or(0, |v| v.flags);
    let seeking = if flags & SB_F_SUBDIRS != 0 {
        SEEK_ONLY
    } else if flags & SB_F_SUBVOLS != 0 {
        SEEK_MATCHING
    } else {
        0
    };
    let (a0, f0, h0, m0) = match sb {
        Some(v) => (v.anchored, v.floating, v.hash, v.mask),
        None => (
            info.dfa[DFA_ANCHORED].start,
            info.dfa[DFA_FLOATING].start,
            info.seed,
            0,
        ),
    };
    // Field by field: a whole `Scan` would be built on the stack first.
    s.scan.hash = h0;
    s.scan.sb_hash = info.seed;
    s.scan.pos = start_off;
    s.scan.anchored = a0;
    s.scan.floating = f0;
    s.scan.mask = m0;
    s.scan.policy_id = policy_id;
    s.scan.dev = dev;
    s.scan.seeking = seeking;
    s.scan.end = PATH_END;
    s.scan.split = split;
    set_dfa(&mut s.scan.dfa, &info.dfa);
}

/// `*to = *from` field by field: LLVM makes the copy of the 40 bytes a call of `memmove`,
/// a loop of byte stores in BPF (about 30 ns on every scan).
#[inline(always)]
fn set_dfa(to: &mut [DfaInfo; 2], from: &[DfaInfo; 2]) {
    let mut i = 0;
    while i < 2 {
        let (t, f) = (&mut to[i], &from[i]);
        // SAFETY: volatile writes of plain u32 fields through a unique reference.
        unsafe {
            core::ptr::write_volatile(&raw mut t.stride, f.stride);
            core::ptr::write_volatile(&raw mut t.trans_base, f.trans_base);
            core::ptr::write_volatile(&raw mut t.accept_base, f.accept_base);
            core::ptr::write_volatile(&raw mut t.start, f.start);
            core::ptr::write_volatile(&raw mut t.dead, f.dead);
        }
        i += 1;
    }
}

/// Runs the scan set up in `Scratch::scan` to the end of the path. Returns the kind mask;
/// `Scan::seeking` is left at `SEEK_ONLY` for a path of an `SB_F_SUBDIRS` superblock below
/// none of its mounted directories (the mask is then 0). A global function: the scan's
/// callback is verified once per program, not once per caller and caller's state.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_scan(work: u32, policy_id: u32, dev: u32) -> u32 {
    let mut index = work;
    let Some(s) = Work::at(work).mem() else {
        return 0;
    };
    let Some(info) = POLICIES.get(policy_id) else {
        // (The callers looked the same policy up.) Nothing matched is not known: as a
        // path below no placed directory, which `matched` denies.
        s.scan.seeking = SEEK_ONLY;
        return 0;
    };
    // SAFETY: bpf_loop calls scan_step with a pointer to `index`, which outlives the call.
    unsafe {
        bpf_loop(
            PATH_MAX as u32,
            scan_step as *mut c_void,
            (&raw mut index).cast(),
            0,
        );
    }
    if s.scan.seeking != 0 {
        // The whole path may be a mounted directory itself.
        if let Some(v) = mounted_dir(policy_id, dev, s.scan.sb_hash)
            && places(s.scan.seeking, &v)
        {
            set_start(&mut s.scan, &v);
        }
        if s.scan.seeking == SEEK_ONLY {
            return 0;
        }
    }
    let (a, f) = (info.dfa[DFA_ANCHORED], info.dfa[DFA_FLOATING]);
    s.scan.mask
        | u32::from(accept_of(&a, s.scan.anchored).exact)
        | u32::from(accept_of(&f, s.scan.floating).exact)
        | literal_kinds(literal(filter::EXACT, policy_id, s.scan.hash))
}

/// The whole path of `dentry` (for a record, when the decision used only its last
/// component): where it starts in `Scratch::path`, or `PATH_END` (no path) when it does
/// not fit. A global function for the reason [`sandbox_resolve`] is.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_whole_path(work: u32, dentry: u64) -> u32 {
    build_path(Work::at(work), dentry as *const u8).unwrap_or(PATH_END)
}

/// See [`sandbox_whole_path`]; whether the path is partial (`partial` not 0) comes as a
/// number the verifier may not know (`kread::forget`). No working memory free: no path.
#[inline(always)]
pub fn whole_path_if(mem: Claim, partial: u32, facts: &mut FileFacts) {
    if partial != 0 {
        facts.start = match mem.work() {
            Some(w) => sandbox_whole_path(w.index(), kread::untyped(facts.dentry)) & MASK,
            None => PATH_END,
        };
    }
    facts.partial = false;
}

/// Places `@` and `len` bytes of kernel memory at `src` (an abstract unix socket name) at
/// the end of the working memory's path (`Scratch::path`) and returns where they start.
#[inline(always)]
pub fn place_name(w: Work, src: *const u8, len: u32) -> Result<u32, ()> {
    let s = w.mem().ok_or(())?;
    if len >= NAME_MAX as u32 {
        return Err(());
    }
    let start = PATH_END - len - 1;
    s.path[(kread::opaque(start) & MASK) as usize] = b'@';
    // SAFETY: start + 1 < PATH_MAX and len < NAME_MAX: inside the PATH_BUF-sized buffer.
    let dst = unsafe {
        s.path
            .as_mut_ptr()
            .add((kread::opaque(start + 1) & MASK) as usize)
    };
    kread::read_bytes(dst, len, src).map_err(|_| ())?;
    Ok(start)
}

/// The kinds of rule matching a name placed by [`place_name`] (no superblock: abstract
/// names match only patterns written as `@name`).
#[inline(always)]
pub fn match_name(w: Work, policy_id: u32, start_off: u32) -> FileMatch {
    FileMatch {
        path: sandbox_match_name(w.index(), policy_id, start_off),
        inode: 0,
        sb_known: false,
    }
}

/// The scan of [`match_name`], global for the reason [`sandbox_resolve`] is.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_match_name(work: u32, policy_id: u32, start_off: u32) -> u32 {
    match POLICIES.get(policy_id) {
        Some(info) => {
            scan_begin(
                Work::at(work),
                policy_id,
                info,
                start_off & MASK,
                None,
                0,
                NO_SPLIT,
            );
            sandbox_scan(work, policy_id, 0)
        }
        None => 0,
    }
}
