//! The maps. Sizes marked "sized by the loader" are placeholders: the loader sets
//! `max_entries` from the compiled policy before the maps are created.

use aya_ebpf::btf_maps::InodeStorage;
use aya_ebpf::macros::{btf_map, map};
use aya_ebpf::maps::{Array, HashMap, LpmTrie, LruHashMap, PerCpuArray, RingBuf};
use sandbox_common::{
    BPF_F_MMAPABLE, ByteClasses, DfaAccept, EventHeader, InodeKey, LiteralKey, MAX_POLICIES,
    NetKeyV4, NetKeyV6, NetRules, PATH_BUF, PATH_MAX, PolicyInfo, SbKey, SbRootKey, ScanStart,
    ScopeCtl, filter,
};

/// The cgroup this set confines ([`ScopeCtl`]). Written by the loader, read first by every
/// hook.
#[map]
pub static SCOPE: Array<ScopeCtl> = Array::with_max_entries(1, 0);

/// Inodes that are the sandbox's own (`own.rs`): ptys made in the sandbox and sandbox's
/// own terminal (`terminal.rs`), files made in `/dev/shm` by confined processes
/// (`shm.rs`). Marked by the `d_instantiate` program and by the loader through its
/// descriptors. Inode storage: a mark goes with its inode.
#[btf_map]
pub static OWN_INODES: InodeStorage<u32> = InodeStorage::new();

/// Policy id -> header (flags, DFA geometry). Written by the loader, read by every hook.
#[map]
pub static POLICIES: Array<PolicyInfo> = Array::with_max_entries(MAX_POLICIES, 0);

/// 2 * policy id + k -> byte classes of its anchored (k = 0) and floating (k = 1) DFA.
/// Written by the loader, read by file/exec hooks.
#[map]
pub static DFA_CLASSES: Array<ByteClasses> = Array::with_max_entries(2 * MAX_POLICIES, 0);

/// DFA transitions of all policies (sized by the loader). Read by file/exec hooks.
/// Memory-mapped by the loader, which writes the whole table with one copy.
#[map]
pub static DFA_TRANS: Array<u32> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Per-state kind masks (exact, below) of all DFAs (sized by the loader). Read by file/exec
/// hooks. Memory-mapped by the loader like `DFA_TRANS`.
#[map]
pub static DFA_ACCEPT: Array<DfaAccept> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// (policy, superblock) -> scan state after feeding that superblock's canonical mount
/// point. Written by the loader from /proc/self/mountinfo; read by file/exec hooks.
#[map]
pub static SB_START: HashMap<SbKey, ScanStart> = HashMap::with_max_entries(4096, 0);

/// (policy, superblock, hash of a directory's path in it) -> scan state after feeding the
/// place that directory is mounted at, for superblocks whose root is not mounted
/// (`SB_F_SUBDIRS`). Written by the loader from /proc/self/mountinfo; read by file/exec hooks.
#[map]
pub static SB_ROOTS: HashMap<SbRootKey, ScanStart> = HashMap::with_max_entries(4096, 0);

/// (hash of a literal path, policy) -> kinds of rule covering that path and everything
/// below it, and (`LITERAL_EXACT_SHIFT` up) kinds naming exactly that path (sized by the
/// loader). Read by file/exec hooks.
#[map]
pub static LITERALS: HashMap<LiteralKey, u32> = HashMap::with_max_entries(1, 0);

/// Files protected by identity (dev, inode) when the policy loaded, so that hard links to
/// them are covered too (sized by the loader). Read by file/exec hooks.
#[map]
pub static INODE_RULES: HashMap<InodeKey, u32> = HashMap::with_max_entries(1, 0);

/// One bit per key of `LITERALS` and `INODE_RULES` (`sandbox_common::filter`): a clear bit
/// spares a decision the lookup. Written by the loader (through a mapping, before the
/// policy's header), read by file/exec hooks.
#[map]
pub static LOOKUP_FILTER: Array<u64> =
    Array::with_max_entries(filter::REGIONS * filter::WORDS, BPF_F_MMAPABLE);

/// Whether `key` may be in the map of filter `region` (true when the filter cannot be read).
#[inline(always)]
pub fn may_hold(region: u32, key: u64) -> bool {
    let (word, bit) = filter::slot(region, key);
    LOOKUP_FILTER
        .get(word)
        .is_none_or(|w| (*w >> (bit & 63)) & 1 != 0)
}

/// (policy, IPv4 prefix) -> port rules (sized by the loader). Read by socket_connect.
#[map]
pub static NET_V4: LpmTrie<NetKeyV4, NetRules> = LpmTrie::with_max_entries(1, 0);

/// (policy, IPv6 prefix) -> port rules (sized by the loader). Read by socket_connect.
#[map]
pub static NET_V6: LpmTrie<NetKeyV6, NetRules> = LpmTrie::with_max_entries(1, 0);

/// Processes that in-scope tasks may not signal or trace (tgid -> 1): sandbox itself.
/// Written by the loader before binding; read by task_kill and ptrace_access_check.
#[map]
pub static PROTECTED: HashMap<u32, u32> = HashMap::with_max_entries(64, 0);

/// The namespaces (their inode numbers) the command started in: the only ones whose files
/// (nsfs) its processes may open (`nsfs.rs`).
#[map]
pub static NAMESPACES: HashMap<u32, u32> = HashMap::with_max_entries(256, 0);

/// The new name of a rename in progress, per task (`pid_tgid`): `path_rename` (which
/// sees it first) records what matched it, `inode_rename` (which sees the moving
/// directory) reads it back. Written and read by the programs only.
#[map]
pub static RENAME_DEST: LruHashMap<u64, RenameDest> = LruHashMap::with_max_entries(4096, 0);

#[repr(C)]
#[derive(Clone, Copy)]
pub struct RenameDest {
    /// The new name's dentry (the old one's for an exchange onto a symlink): the entry
    /// belongs to the rename that names it.
    pub dentry: u64,
    /// Kinds of rule matching that name's path.
    pub mask: u32,
    /// Non-zero for `RENAME_EXCHANGE`.
    pub exchange: u32,
    /// The rename's two dentries, as path_rename got them.
    pub old: u64,
    pub new: u64,
}

/// Deny/audit records to the loader.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(8 << 20, 0);

/// Records that did not fit in `EVENTS`, per CPU. Read by the loader, reported as records.
#[map]
pub static DROPS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Identical denials counted instead of sent, per CPU (`event::send`). Read by the loader.
#[map]
pub static AGG: PerCpuArray<sandbox_common::AggSlot> = PerCpuArray::with_max_entries(1, 0);

/// The caches' arrays are `BPF_F_MMAPABLE` for their alignment: their values then start
/// on a page (an array's values otherwise start where the kernel's `struct bpf_array`
/// ends, 56 bytes into a cache line on 6.18), so that a file's 64-byte slot is one cache
/// line, not two. They are never mapped.
const ALIGNED: u32 = BPF_F_MMAPABLE;

/// Directories' scan states (`dircache.rs`), in slots chosen by inode. Written and read by
/// the programs only.
#[map]
pub static DIR_CACHE: Array<crate::dircache::DirSlot> =
    Array::with_max_entries(crate::dircache::SLOTS, ALIGNED);

/// What names matched in kept directory states (`namecache.rs`), in slots chosen by
/// directory and name. Written and read by the programs only.
#[map]
pub static NAME_CACHE: Array<crate::namecache::NameSlot> =
    Array::with_max_entries(crate::namecache::SLOTS, ALIGNED);

/// What opened files' paths matched (`filecache.rs`), in slots chosen by dentry. Written
/// and read by the programs only.
#[map]
pub static FILE_CACHE: Array<crate::filecache::FileSlot> =
    Array::with_max_entries(crate::filecache::SLOTS, ALIGNED);

/// Whether the directory cache is on, and what makes its states stale. Written by the
/// loader once every program is attached, and after every change to `SB_START`/`SB_ROOTS`.
#[map]
pub static DIR_CACHE_CTL: Array<sandbox_common::DirCacheCtl> = Array::with_max_entries(1, 0);

/// The loader's check that `DIR_CACHE_CTL.rename_lock` is a count renames move: 0 -> the
/// loader's tgid while it checks (0: not checking), 1 -> the count its last rename saw
/// (bit 32 set once written). Written by the loader and `inode_rename`.
#[map]
pub static DIR_CACHE_PROBE: Array<u64> = Array::with_max_entries(2, 0);

/// Directory moves (`moves.rs`): begun and in progress (the layout is
/// `sandbox_common::MOVES_IN_FLIGHT_BITS`'s), written by the move programs.
#[map]
pub static DIR_MOVES: Array<u64> = Array::with_max_entries(1, 0);

/// Each task's frames of calls that move dentries, and the beginnings of moves counted in
/// them (`moves.rs`). Written and read by the move programs only.
#[map]
pub static MOVE_FRAMES: HashMap<u64, crate::moves::Frames> = HashMap::with_max_entries(8192, 0);

/// Per-CPU working memory of the decisions in flight (`work.rs`): the path being built
/// and the record being sent. `work::SLOTS` slots per CPU.
#[repr(C)]
pub struct Scratch {
    /// Whether a decision holds the slot (`work::sandbox_claim`, `work::release`).
    pub taken: u64,
    pub walk: crate::path::Walk,
    pub scan: crate::path::Scan,
    /// A directory cache slot being read or filled, and the cache's state for this
    /// decision (`dircache.rs`).
    pub dir: crate::dircache::DirSlot,
    pub now: crate::dircache::Now,
    /// The file's name, for the name cache (`namecache.rs`).
    pub name: crate::namecache::Name,
    pub path: [u8; PATH_BUF],
    /// The report being sent (`event::send`): it crosses into `sandbox_send` here rather
    /// than by a pointer to the hook's stack (see there).
    pub report: crate::event::Report,
    pub event: EventHeader,
    /// The file path, then the executable's path.
    pub event_path: [u8; 2 * PATH_MAX],
}

#[map]
pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(crate::work::SLOTS, 0);
