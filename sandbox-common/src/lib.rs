//! Types shared by the BPF programs (`sandbox-ebpf`) and the userspace loader (`sandbox-user`).
//!
//! Everything here crosses the kernel/user boundary, so every type is `#[repr(C)]`, `Copy`,
//! padded explicitly and size-checked at compile time. There are no `bool`, `usize` or Rust
//! enums in these types: discriminants are `u32` constants, decoded on the user side with
//! `TryFrom` (a bad value is an error there, never a panic).
#![no_std]

pub mod decide;
pub mod errno;
pub mod programs;

/// Names of the maps in the BPF object. The userspace `maps` module turns these into typed
/// handles; nothing else spells a map name.
pub mod map_names {
    pub const PROTECTED: &str = "PROTECTED";
    pub const SCOPE: &str = "SCOPE";
    pub const POLICIES: &str = "POLICIES";
    pub const DFA_CLASSES: &str = "DFA_CLASSES";
    pub const DFA_TRANS: &str = "DFA_TRANS";
    pub const DFA_ACCEPT: &str = "DFA_ACCEPT";
    pub const SB_START: &str = "SB_START";
    pub const SB_ROOTS: &str = "SB_ROOTS";
    pub const INODE_RULES: &str = "INODE_RULES";
    pub const LITERALS: &str = "LITERALS";
    pub const NET_V4: &str = "NET_V4";
    pub const NET_V6: &str = "NET_V6";
    pub const EVENTS: &str = "EVENTS";
    pub const DROPS: &str = "DROPS";
    pub const AGG: &str = "AGG";
    pub const DIR_CACHE_CTL: &str = "DIR_CACHE_CTL";
    pub const DIR_CACHE_PROBE: &str = "DIR_CACHE_PROBE";
    pub const DIR_MOVES: &str = "DIR_MOVES";
    pub const LOOKUP_FILTER: &str = "LOOKUP_FILTER";
    pub const OWN_INODES: &str = "OWN_INODES";
    pub const NAMESPACES: &str = "NAMESPACES";
}

/// Name of the global that carries the kernel struct offsets (see [`KernelOffsets`]).
pub const OFFSETS_GLOBAL: &str = "OFFSETS";

/// Longest path the kernel side builds. A longer canonical path is denied for in-scope
/// processes (fail closed) and reported with [`EVENT_F_PATH_TRUNCATED`].
pub const PATH_MAX: usize = 4096;
/// Size of the per-CPU buffer the path is built in (backwards, from the end). Twice
/// [`PATH_MAX`] so that masked offsets always stay inside it.
pub const PATH_BUF: usize = 2 * PATH_MAX;
/// Longest single path component the kernel copies (`NAME_MAX` is 255).
pub const NAME_MAX: usize = 256;
/// Dentry levels walked at most; a deeper file is denied (fail closed) and reported.
pub const MAX_DEPTH: u32 = 1024;
/// Cgroup v2 levels checked for a bound ancestor (level 0 is the root cgroup).
pub const MAX_CGROUP_LEVEL: u32 = 32;
/// Policies that can be live at once.
pub const MAX_POLICIES: u32 = 64;
/// Port rules one network prefix can carry (own rules first, then inherited ones).
pub const NET_RULES_PER_PREFIX: usize = 12;
/// "No rule" marker in rule-id slots.
pub const NO_RULE: u16 = u16::MAX;

/// Policy flags (`PolicyInfo::flags`).
pub mod policy_flags {
    /// `files.write` is non-empty: writes are allowed only where a write rule matches.
    pub const WRITE_ALLOWLIST: u32 = 1 << 0;
    /// `files.read` is non-empty: content reads are allowed only where a read rule matches.
    pub const READ_ALLOWLIST: u32 = 1 << 1;
    /// `exec.allow` is non-empty: only matching binaries may be executed.
    pub const EXEC_ALLOWLIST: u32 = 1 << 2;
    /// `exec.allow_privileged: false`: setuid/setgid binaries may not be executed.
    pub const DENY_PRIVILEGED: u32 = 1 << 3;
    /// Network default is deny (an allowlist is set); otherwise unmatched is allowed.
    pub const NET_DEFAULT_DENY: u32 = 1 << 4;
    /// Section modes: when set, that section reports instead of denying.
    pub const AUDIT_FILES: u32 = 1 << 8;
    pub const AUDIT_NET: u32 = 1 << 9;
    pub const AUDIT_EXEC: u32 = 1 << 10;
    /// `network.sockets` includes `raw`: inet raw sockets (and `SOCK_PACKET`) may be made.
    pub const SOCK_RAW: u32 = 1 << 12;
    /// `network.sockets` includes `sctp` (its connectx path bypasses `connect`).
    pub const SOCK_SCTP: u32 = 1 << 13;
    /// `network.sockets` includes `mptcp` (subflows to addresses the peer announces).
    pub const SOCK_MPTCP: u32 = 1 << 14;
    /// `network.unix_inbound: true`: processes outside the sandbox may connect and send
    /// to unix sockets the command made.
    pub const UNIX_INBOUND: u32 = 1 << 15;
    /// `process.user_namespaces: true`: the command may make user namespaces.
    pub const USER_NAMESPACES: u32 = 1 << 16;
}

/// Kinds of path rule; bit `1 << slot` in the kind masks.
pub mod accept {
    pub const FILE_DENY: usize = 0;
    pub const FILE_READ_ONLY: usize = 1;
    pub const FILE_WRITE: usize = 2;
    pub const FILE_READ: usize = 3;
    pub const EXEC_DENY: usize = 4;
    pub const EXEC_ALLOW: usize = 5;
    /// `network.unix`: a unix socket peer outside the scope that may be reached (matched
    /// against the socket's path, or `@name` for abstract sockets).
    pub const UNIX_ALLOW: usize = 6;
    /// A name on the way to what a deny, read-only or exec-deny rule names (`~` and
    /// `~/.ssh` for `~/.ssh/**`; `**/.vscode` for `**/.vscode/tasks.json`). Exact matches
    /// only. Nothing but a directory may be made at such a name, and nothing renamed onto
    /// it: whatever stood there would stand where a protected path is expected.
    pub const ANCESTOR: usize = 7;
    /// Strictly below `L` of a deny or exec-deny rule `L/**/S`: a directory here keeps its
    /// denied files only while it stays below `L`, so it may be renamed in place or moved
    /// to another directory below such an `L`, not out.
    pub const CONTAINED: usize = 8;
    /// An [`ANCESTOR`] of what a deny or exec-deny rule names: removing or renaming it
    /// would carry the denied files away from their rule (for read-only rules, moving the
    /// files away is harmless: they no longer stand where they would run).
    pub const HOLDS_DENIED: usize = 9;
    /// The name of a literal grant (`files.write`, `files.read`; exact matches only): no
    /// symlink may be made there or moved there. Grants follow symlinks when a policy is
    /// loaded, so a link the command left at `~/.gemini` would grant its target to the
    /// next run.
    pub const GRANT_NAME: usize = 10;
    /// Strictly below `L` of a read-only rule `A/**/L/**/S` (an area the rule names by a
    /// pattern, `**/.git` for `**/.git/**/config`): no directory or symlink may arrive
    /// here from another directory (renamed, exchanged, linked), as it could bring files
    /// of the command's to where `S` is expected (`.git/modules/x` replaced by a
    /// repository with a `config` of its own). An empty directory may be made, one renamed
    /// within its directory stood there already, and files are judged by the rule itself.
    pub const SPAN: usize = 11;
    pub const SLOTS: usize = 16;
}

/// Where one DFA of a policy sits in the shared arrays.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DfaInfo {
    /// Number of byte classes: the row width of the transition table.
    pub stride: u32,
    /// Index of state 0 in `DFA_TRANS`.
    pub trans_base: u32,
    /// Index of state 0 in `DFA_ACCEPT`.
    pub accept_base: u32,
    /// State to start from on a superblock whose mount point is unknown.
    pub start: u32,
    /// The dead state: nothing can match any more.
    pub dead: u32,
}
const _: () = assert!(size_of::<DfaInfo>() == 20);

/// The two DFAs of a policy (`PolicyInfo::dfa`, `DFA_CLASSES[2 * policy + k]`).
pub const DFA_ANCHORED: usize = 0;
pub const DFA_FLOATING: usize = 1;

/// Per-policy header, `POLICIES[policy_id]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyInfo {
    pub flags: u32,
    /// Non-zero when the policy is live (a zeroed array slot is not).
    pub live: u32,
    pub dfa: [DfaInfo; 2],
    /// Seed of the literal-path hash on an unknown superblock.
    pub seed: u64,
    /// Address families (bit `1 << AF_*`) in-scope tasks may create sockets of.
    pub sock_families: u64,
    /// `s_dev` of the tmpfs mounted at `/dev/shm` (POSIX shared memory and semaphores)
    /// when the policy was applied; 0: none, nothing is checked there.
    pub shm_dev: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<PolicyInfo>() == 72);

/// The listen rules of policy `p` sit in the network tries under policy id
/// `p + LISTEN_ID_BASE` (an allowlist: what matches no rule may not listen).
pub const LISTEN_ID_BASE: u32 = MAX_POLICIES;

/// FNV-1a prime of the literal-path hash (kernel and userspace must agree).
pub const LITERAL_FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// A `LITERALS` value holds two sets of kinds (bit `1 << slot`, see [`accept`]): the low
/// half for rules that name this path and everything below it, the half from this shift up
/// for rules that name exactly this path (the names above protected paths).
pub const LITERAL_EXACT_SHIFT: u32 = 16;
const _: () = assert!(accept::SLOTS <= LITERAL_EXACT_SHIFT as usize);

/// The kinds of a `LITERALS` value that cover what lies below the path (checked at `/`).
#[inline]
pub const fn literal_below(v: u32) -> u32 {
    v & ((1 << LITERAL_EXACT_SHIFT) - 1)
}

/// The kinds of a `LITERALS` value that match the path itself (checked at its end).
#[inline]
pub const fn literal_kinds(v: u32) -> u32 {
    literal_below(v) | (v >> LITERAL_EXACT_SHIFT)
}

/// `LOOKUP_FILTER`: one bit per key of a hash map a decision looks up (a Bloom filter with
/// one hash), so that a lookup that cannot find anything is not made. A bit clear means
/// the key is not in the map; a bit set means it may be. The loader sets the bit of every
/// key before the policy's header goes live.
pub mod filter {
    /// 64-bit words per region (65,536 bits: at 10,000 rules about one bit in six set).
    pub const WORDS: u32 = 1024;
    /// `LITERALS` keys whose value covers what lies below the path ([`super::literal_below`]
    /// non-zero): looked up at each `/`.
    pub const BELOW: u32 = 0;
    /// Every `LITERALS` key: looked up at the end of the path.
    pub const EXACT: u32 = 1;
    /// Every `INODE_RULES` key ([`inode_key`]).
    pub const INODE: u32 = 2;
    pub const REGIONS: u32 = 3;

    /// The word (index into the map) and the bit of `key` in `region`.
    #[inline]
    pub const fn slot(region: u32, key: u64) -> (u32, u32) {
        // The top bits of a multiplicative hash: FNV's low bits mix little.
        let m = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (region * WORDS + (m >> 54) as u32, ((m >> 48) & 63) as u32)
    }

    /// The filter key of an `INODE_RULES` key.
    #[inline]
    pub const fn inode_key(ino: u64, dev: u32) -> u64 {
        ino ^ ((dev as u64) << 32)
    }

    const _: () = assert!(WORDS == 1 << 10);
}

/// Map flag: the array can be memory-mapped by userspace (`BPF_F_MMAPABLE`).
pub const BPF_F_MMAPABLE: u32 = 1 << 10;

/// The values of `OWN_INODES` (a mark of an inode as the sandbox's own, `own.rs`).
pub mod own_mark {
    /// The inode and what it reaches are the sandbox's: a pty a confined process made,
    /// the command's terminal, shared memory a confined process made.
    pub const WHOLE: u32 = 1;
    /// Only the inode's name and attributes: a device node a confined process made (what
    /// it reaches is the host's device).
    pub const NAME: u32 = 2;
    /// As `WHOLE`, and a pty whose sessions are the command's: one a confined process
    /// made, or sandbox's pty for the command (not the user's terminal given with
    /// `--terminal direct`, whose foreground job may be the user's shell).
    pub const PTY: u32 = 3;
}

/// `DFA_ACCEPT[base + state]`: kinds of rule (bit `1 << slot`, see [`accept`]) that match a
/// path ending in this state (`exact`), and that match everything strictly below a path
/// ending here (`below`: checked when the next byte is `/`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DfaAccept {
    pub exact: u16,
    pub below: u16,
}
const _: () = assert!(size_of::<DfaAccept>() == 4);

/// `LITERALS` key: the seeded FNV-1a hash of a literal path, in one policy. The value is
/// the `u32` kind mask of that path (it covers the path and everything below it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LiteralKey {
    pub hash: u64,
    pub policy_id: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<LiteralKey>() == 16);

/// `SB_START` value: the scan state after feeding a superblock's canonical mount point.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanStart {
    pub anchored: u32,
    pub floating: u32,
    pub hash: u64,
    pub mask: u32,
    /// `SB_F_*`.
    pub flags: u32,
}

/// `SCOPE` value (one entry): the cgroup a set of programs confines, with everything below
/// it. A set binds one cgroup (a run's, or `attach`'s; a reload loads another set), so a
/// hook compares one ancestor id of the current task with it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeCtl {
    /// The bound cgroup's id; 0: nothing is in scope.
    pub id: u64,
    /// Its depth below the root cgroup (the root is level 0).
    pub level: u32,
    /// The policy its tasks are under.
    pub policy_id: u32,
}
const _: () = assert!(size_of::<ScopeCtl>() == 16);

/// `DIR_CACHE_CTL` value: whether the programs may keep the scan state of directories
/// (`sandbox-ebpf/src/dircache.rs`), and what makes it stale.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirCacheCtl {
    /// 0: no cache (the programs neither read nor fill it). Otherwise the generation of the
    /// placement maps (`SB_START`, `SB_ROOTS`): the loader writes a new one after every
    /// change to them, and a directory's state from another generation is not used.
    pub generation: u64,
    /// Kernel address of `rename_lock` (fs/dcache.c), whose sequence count every change
    /// of a dentry's name or parent (`__d_move`) advances: a directory's state is used only
    /// while the count is the one it was made under.
    pub rename_lock: u64,
    /// How long a kept state is used, in jiffies: 30 s at the HZ the loader measured (0:
    /// the programs' conservative default, 2,000 jiffies; they never take more than
    /// 30,000).
    pub max_age: u64,
    /// Nonzero: directory states and names' results are stamped with the count of
    /// directory moves (`DIR_MOVES`, kept by the move programs, [`programs::MOVE_PROGRAMS`]),
    /// which a file's rename leaves alone; 0: with `rename_lock`'s count, which every
    /// rename on the host moves. Set only while every move program is attached and the
    /// loader saw the count follow a directory rename of its own.
    pub own_moves: u64,
}
const _: () = assert!(size_of::<DirCacheCtl>() == 32);

/// `DIR_MOVES` value: directory moves in progress in the low [`MOVES_IN_FLIGHT_BITS`]
/// bits, above them the count of moves begun and ended (each move adds 1 when it begins
/// and 1 when it ends). A kept directory state is used only while none is in progress and
/// the count is the one it was made under.
pub const MOVES_IN_FLIGHT_BITS: u32 = 32;

/// `ScanStart::flags`: the file system has roots other than its superblock's (NFS, SMB,
/// Ceph, 9p mount server directories as separate roots), so a walk ending at a root that is
/// not `s_root` is not by itself a disconnected dentry there.
pub const SB_F_MULTI_ROOT: u32 = 1;
/// `ScanStart::flags`: the superblock's root is not mounted, only directories below it (a
/// btrfs subvolume, a bind mount of a subdirectory whose parent was unmounted). The other
/// fields mean nothing: a path is placed by the first of its leading directories found in
/// `SB_ROOTS`, and a path below none of them is denied ([`EVENT_F_OUTSIDE_MOUNTS`]).
pub const SB_F_SUBDIRS: u32 = 2;
/// `ScanStart::flags`: the superblock's root is mounted, and so are some of its btrfs
/// subvolumes: a path below a subvolume's mount (`SB_ROOTS`) is placed there (`/home/u`,
/// not `/mnt/top/@home/u` while the top level is mounted too, as snapshot tools do).
pub const SB_F_SUBVOLS: u32 = 4;
const _: () = assert!(size_of::<ScanStart>() == 24);

/// `DFA_CLASSES[policy_id]`: byte to byte-class map of the policy's DFA.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteClasses {
    pub classes: [u8; 256],
}
const _: () = assert!(size_of::<ByteClasses>() == 256);

/// `SB_START` key: a superblock (kernel `s_dev` encoding) in one policy.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SbKey {
    pub policy_id: u32,
    pub dev: u32,
}
const _: () = assert!(size_of::<SbKey>() == 8);

/// `SB_ROOTS` key: a mounted directory of a superblock whose root is not mounted
/// ([`SB_F_SUBDIRS`]), by the policy's seeded FNV-1a hash of its path within the superblock
/// (`/@home`). The value is the [`ScanStart`] of the place it is mounted at (`/home`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SbRootKey {
    pub hash: u64,
    pub policy_id: u32,
    pub dev: u32,
}
const _: () = assert!(size_of::<SbRootKey>() == 16);

/// `INODE_RULES` key: a file that existed when the policy loaded, by identity. The value is
/// the `u32` kind mask that applies to it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InodeKey {
    pub ino: u64,
    pub dev: u32,
    pub policy_id: u32,
}
const _: () = assert!(size_of::<InodeKey>() == 16);

/// Network rule actions.
pub mod net_action {
    pub const ALLOW: u8 = 1;
    pub const DENY: u8 = 2;
}

/// One port-range rule of a network prefix.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortRule {
    pub port_lo: u16,
    pub port_hi: u16,
    pub rule: u16,
    pub action: u8,
    pub _pad: u8,
}
const _: () = assert!(size_of::<PortRule>() == 8);

/// `NET_V4` / `NET_V6` value: the ordered port rules that apply to the longest matching
/// prefix (its own, then those inherited from shorter prefixes). First match wins.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetRules {
    pub count: u32,
    pub _pad: u32,
    pub rules: [PortRule; NET_RULES_PER_PREFIX],
}
const _: () = assert!(size_of::<NetRules>() == 8 + 8 * NET_RULES_PER_PREFIX);

/// `NET_V4` key data: policy id (big endian) then the address, so the prefix length of a
/// rule is `32 + cidr_prefix`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetKeyV4 {
    pub policy_id_be: [u8; 4],
    pub addr: [u8; 4],
}
const _: () = assert!(size_of::<NetKeyV4>() == 8);

/// `NET_V6` key data, as [`NetKeyV4`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetKeyV6 {
    pub policy_id_be: [u8; 4],
    pub addr: [u8; 16],
}
const _: () = assert!(size_of::<NetKeyV6>() == 20);

/// LPM trie key as the kernel lays it out: prefix length, then the data.
#[repr(C, packed)]
#[derive(Clone, Copy, Debug)]
pub struct LpmKey<K> {
    pub prefix_len: u32,
    pub data: K,
}

/// Struct member offsets of the running kernel, read from its BTF by the loader and written
/// into the programs' `OFFSETS` global before load. Nothing else tells the programs where a
/// field is: no offset is compiled in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    pub file_f_path_dentry: u32,
    pub file_f_inode: u32,
    pub file_f_mode: u32,
    pub file_f_flags: u32,
    pub dentry_d_parent: u32,
    pub dentry_d_name_len: u32,
    pub dentry_d_name_name: u32,
    pub dentry_d_inode: u32,
    pub dentry_d_sb: u32,
    pub inode_i_ino: u32,
    pub inode_i_mode: u32,
    pub super_block_s_dev: u32,
    pub linux_binprm_file: u32,
    pub task_struct_real_parent: u32,
    pub task_struct_tgid: u32,
    pub task_struct_mm: u32,
    pub mm_struct_exe_file: u32,
    pub msghdr_msg_name: u32,
    pub msghdr_msg_namelen: u32,
    pub super_block_s_magic: u32,
    pub super_block_s_flags: u32,
    /// Sockets: `socket.sk`, `socket.type`, `sock.__sk_common.skc_family`.
    pub socket_sk: u32,
    pub socket_type: u32,
    pub sock_family: u32,
    /// The cgroup a socket was made in (`sock.sk_cgrp_data.cgroup`).
    pub sock_cgroup: u32,
    /// `sock.sk_peer_pid` (`struct pid *`) and the pid number in `struct pid`
    /// (`numbers[0].nr`).
    pub sock_peer_pid: u32,
    pub pid_nr: u32,
    /// The bound local address and port of a socket (`skc_rcv_saddr`, `skc_v6_rcv_saddr`,
    /// `skc_num`).
    pub sock_rcv_saddr: u32,
    pub sock_v6_rcv_saddr: u32,
    pub sock_num: u32,
    /// `unix_sock.path.dentry`, `unix_sock.addr`, `unix_address.len`, `unix_address.name`.
    pub unix_sock_path_dentry: u32,
    pub unix_sock_addr: u32,
    pub unix_address_len: u32,
    pub unix_address_name: u32,
    /// `unix_sock.peer`: the socket a datagram socket is connected to.
    pub unix_sock_peer: u32,
    /// Cgroups: `cgroup.kn`, `kernfs_node.id`, `cgroup.self.parent`, `task_struct.cgroups`,
    /// `css_set.dfl_cgrp`.
    pub cgroup_kn: u32,
    pub kernfs_node_id: u32,
    pub cgroup_parent: u32,
    pub task_struct_cgroups: u32,
    pub css_set_dfl_cgrp: u32,
    /// `super_block.s_root`: where a connected dentry walk must end.
    pub super_block_s_root: u32,
    /// `dentry.d_flags`: the directory cache leaves alone directories whose names the
    /// file system revalidates (`DCACHE_OP_REVALIDATE`: NFS, SMB, FUSE, 9p, Ceph, ...).
    pub dentry_d_flags: u32,
    /// `dentry.d_iname` (`d_shortname` from 6.14): where a short name's bytes live in the
    /// dentry itself; 0 when the kernel's is unknown or shorter than
    /// [`DNAME_INLINE_MIN`] bytes (the name is then read with a probe read).
    pub dentry_d_iname: u32,
    /// Keys: `task_struct.real_cred` (a task's own credentials, which `override_creds`
    /// leaves alone), `task_struct.cred` (those in force), `cred.fsuid` (what key
    /// permissions are checked against), `cred.thread_keyring`, `key.uid`, `key.serial`.
    pub task_struct_real_cred: u32,
    pub task_struct_cred: u32,
    pub cred_fsuid: u32,
    pub cred_thread_keyring: u32,
    /// `cred.uid`, `cred.euid`, `cred.suid`: a task with none of them root.
    pub cred_uid: u32,
    pub cred_euid: u32,
    pub cred_suid: u32,
    pub key_uid: u32,
    pub key_serial: u32,
    /// `path.dentry`.
    pub path_dentry: u32,
    /// `inode.i_rdev`: a device file's number (terminals by major).
    pub inode_i_rdev: u32,
    /// `task_struct.files`, `files_struct.fdt`, `files_struct.fd_array`, `fdtable.fd`: the
    /// native benchmark's programs find the file a syscall opened by its descriptor
    /// (`bench.rs`); no hook reads them.
    pub task_struct_files: u32,
    pub files_struct_fdt: u32,
    pub files_struct_fd_array: u32,
    pub fdtable_fd: u32,
    /// `inode.i_nlink`: a file made anew has one link (or none: `O_TMPFILE`).
    pub inode_i_nlink: u32,
    /// `proc_inode.pid` and `proc_inode.vfs_inode` (a procfs inode is the `vfs_inode` of a
    /// `proc_inode`, whose `pid` names the process an entry of `/proc/PID/` is about, NULL
    /// for the rest of `/proc`), `pid.tasks` (its first list: the task of that pid), and
    /// `task_struct.pid_links` (where that list links the task): other processes' `/proc`
    /// entries (`procfs.rs`).
    pub proc_inode_pid: u32,
    pub proc_inode_vfs_inode: u32,
    pub pid_tasks: u32,
    pub task_struct_pid_links: u32,
    /// A message's control messages (`msghdr.msg_control`, `msg_controllen`,
    /// `msg_control_is_user`): a source route given per message.
    pub msghdr_msg_control: u32,
    pub msghdr_msg_controllen: u32,
    pub msghdr_msg_control_is_user: u32,
    /// A task's IPC namespace's inode number (`task_struct.nsproxy`, `nsproxy.ipc_ns`,
    /// `ipc_namespace.ns.inum`): the command's own namespace files open (`nsfs.rs`).
    pub task_struct_nsproxy: u32,
    pub nsproxy_ipc_ns: u32,
    pub ipc_namespace_inum: u32,
    /// `inode.i_dentry` (its `first`): the inode's dentries; a directory that has one
    /// already is moved, not given another (`d_splice_alias`, `moves.rs`).
    pub inode_i_dentry: u32,
    /// `dentry.d_seq` (its `sequence`): moved on by every move of the dentry
    /// (`__d_move`), so a file's kept result stamped with it and with the count of
    /// directory moves goes with the file's own renames only (`filecache.rs`); 0 when the
    /// kernel's BTF does not say (the file cache then goes by `rename_lock`'s count).
    pub dentry_d_seq: u32,
    /// `sock.sk_protocol`: the protocol of an inet socket; a destination's port counts
    /// only for the protocols that have ports (`net.rs`).
    pub sock_protocol: u32,
    /// Non-zero once the loader filled the struct; the programs allow nothing to be decided
    /// with zero offsets (they deny in-scope operations instead).
    pub valid: u32,
}
const _: () = assert!(size_of::<KernelOffsets>() == 292);

/// The fewest bytes of a dentry's inline name (`d_iname`) the programs rely on: 32 on
/// every 64-bit kernel before 6.14, 40 from it.
pub const DNAME_INLINE_MIN: usize = 32;

/// Hooks that report events (`EventHeader::hook`).
pub mod hook {
    pub const FILE_OPEN: u32 = 1;
    pub const SOCKET_CONNECT: u32 = 2;
    pub const BPRM_CHECK: u32 = 3;
    /// Name changes in the file system, each judged as a write to the path: creating a
    /// file, node, directory or symlink; removing one; either end of a link or rename.
    pub const CREATE: u32 = 4;
    pub const MKDIR: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const UNLINK: u32 = 7;
    pub const RMDIR: u32 = 8;
    pub const LINK: u32 = 9;
    pub const RENAME: u32 = 10;
    /// A send with a destination address (unconnected UDP `sendto`/`sendmsg`/`sendmmsg`,
    /// TCP Fast Open), judged like `connect` to that address.
    pub const SOCKET_SENDMSG: u32 = 11;
    /// Self-protection: what an in-scope process may not do to sandbox or to enforcement.
    /// `bpf()` (any command; `EventHeader::target` = the command).
    pub const BPF: u32 = 12;
    /// A signal to a protected process (`target` = its tgid, `access` = the signal).
    pub const SIGNAL: u32 = 13;
    /// ptrace or /proc access to a protected process (`target` = its tgid, `access` = mode).
    pub const PTRACE: u32 = 14;
    /// `mount(2)` or `move_mount(2)`.
    pub const MOUNT: u32 = 15;
    /// Attribute changes, judged as writes to the path.
    pub const TRUNCATE: u32 = 16;
    pub const CHMOD: u32 = 17;
    pub const CHOWN: u32 = 18;
    /// Any other attribute change (times, ...) and extended attributes.
    pub const SETATTR: u32 = 19;
    pub const XATTR: u32 = 20;
    /// A connect (stream) or send (datagram) to a unix socket: `path`/`dev` name the
    /// socket (`@name` for abstract ones), `target` the peer's pid where the kernel knows it.
    pub const UNIX_CONNECT: u32 = 21;
    pub const UNIX_SEND: u32 = 22;
    /// `socket(2)` of a family/type/protocol the policy does not allow (`family` = the
    /// family, `access` = the type, `target` = the protocol).
    pub const SOCKET_CREATE: u32 = 23;
    /// `listen(2)`, or `bind(2)` of a datagram socket to a port: the local address.
    pub const LISTEN: u32 = 24;
    /// An ioctl that injects terminal input (`access` = the command).
    pub const IOCTL: u32 = 25;
    /// Changing another process's scheduling, priority or memory placement
    /// (`target` = its tgid).
    pub const TASK: u32 = 26;
    /// `umount(2)` of any mount.
    pub const UMOUNT: u32 = 27;
    /// Reaching into the kernel: loading a module or a kexec image (`access` = 1 from a
    /// file, 2 from memory; `target` = the kernel's `kernel_read_file_id`), or any check of
    /// the kernel's lockdown list (`access` = 3, `target` = the `lockdown_reason`: /dev/mem,
    /// I/O ports, MSRs, kprobes, BPF reads of kernel memory, ...).
    pub const KERNEL: u32 = 28;
    /// `clone3(CLONE_INTO_CGROUP)`: a child started straight into a cgroup of the caller's
    /// choice (the kernel checks it without opening `cgroup.procs`).
    pub const CLONE_INTO_CGROUP: u32 = 29;
    /// A kernel key or keyring of the task's user used or made (`keyctl`, `add_key`,
    /// `request_key`, `/proc/keys`; `access` = the kernel's `key_need_perm`, or
    /// [`KEY_CREATE`]; `target` = the key's serial).
    pub const KEY: u32 = 30;
    /// A watch on a path (`inotify_add_watch`, `fanotify_mark`): what happens to the file
    /// and its names, judged as a read of the path.
    pub const NOTIFY: u32 = 31;
    /// `setsockopt(2)` of an option that sends packets elsewhere than the address judged,
    /// or turns the socket into one no network hook judges (`access` = the level,
    /// `target` = the option; `decide::socket_option`).
    pub const SOCKET_OPTION: u32 = 32;
    /// `pivot_root(2)`: a new root for a mount namespace.
    pub const PIVOT_ROOT: u32 = 33;
    /// A new user namespace (`unshare`, `clone` with `CLONE_NEWUSER`).
    pub const USER_NAMESPACE: u32 = 34;
}

/// `EventHeader::access` of a key being made (`hook::KEY`): the kernel's `key_need_perm`
/// values stop at 11.
pub const KEY_CREATE: u32 = 100;

/// What happened (`EventHeader::decision`).
pub mod decision {
    /// The operation was denied.
    pub const DENY: u32 = 1;
    /// The policy (or section) is in audit mode: it would have been denied.
    pub const AUDIT: u32 = 2;
}

/// Why (`EventHeader::reason`), beyond the rule id.
pub mod reason {
    /// A rule matched; `EventHeader::rule` says which.
    pub const RULE: u32 = 1;
    /// Writes are restricted to `files.write` and this path is not under it.
    pub const NOT_IN_WRITE_ALLOWLIST: u32 = 2;
    /// Reads are restricted to `files.read` and this path is not under it.
    pub const NOT_IN_READ_ALLOWLIST: u32 = 3;
    /// Exec is restricted to `exec.allow` and this binary is not in it.
    pub const NOT_IN_EXEC_ALLOWLIST: u32 = 4;
    /// The binary is setuid/setgid and `exec.allow_privileged` is false.
    pub const PRIVILEGED_BINARY: u32 = 5;
    /// The network allowlist is set and this destination is not in it.
    pub const NOT_IN_NET_ALLOWLIST: u32 = 6;
    /// The path could not be resolved within the limits (too long, too deep): fail closed.
    pub const PATH_UNRESOLVED: u32 = 7;
    /// The kernel offsets were not supplied: fail closed.
    pub const NO_OFFSETS: u32 = 8;
    /// The file is denied by its identity (inode), e.g. through a hard link.
    pub const INODE: u32 = 9;
    /// Self-protection: the operation would weaken enforcement or touch sandbox itself.
    pub const SELF_PROTECTION: u32 = 10;
    /// The file is on a file system mounted after the policy loaded that sandbox has not
    /// placed in the mount table yet (a window of milliseconds): denied until it has.
    pub const UNPLACED_MOUNT: u32 = 11;
    /// The target process, or the peer of a unix socket, is outside the sandbox and no
    /// rule lets it be reached.
    pub const OUTSIDE_SCOPE: u32 = 12;
    /// The socket family, type or protocol is not in `network.sockets`.
    pub const SOCKET_KIND: u32 = 13;
    /// `network.listen` is an allowlist and this local address is not in it.
    pub const NOT_IN_LISTEN_ALLOWLIST: u32 = 14;
    /// Terminal input injection (`TIOCSTI`, `TIOCLINUX`).
    pub const TTY_INJECTION: u32 = 15;
    /// Every slot of this CPU's working memory was held by a decision in flight (tasks
    /// preempted in the middle of theirs, on a preemptible kernel): the decision could not
    /// be made, so the operation is denied (fail closed).
    pub const BUSY: u32 = 16;
    /// The name is an ancestor of a protected path (`accept::ANCESTOR`): removing,
    /// renaming or replacing it would move or re-point what a rule protects.
    pub const ANCESTOR: u32 = 17;
    /// A directory below a protected area moved to another directory
    /// (`accept::CONTAINED`): the protected files in it would leave the rule.
    pub const MOVES_PROTECTED: u32 = 18;
    /// A btrfs subvolume or snapshot created or destroyed by ioctl: names made that way
    /// pass no name hook, and a snapshot copies protected files to a new path.
    pub const SUBVOLUME: u32 = 19;
    /// The kernel's keys and keyrings: the user's keyring, session keyring and persistent
    /// keyring are shared with every process of the user (Kerberos tickets of a
    /// `KEYRING:` credential cache, cached passphrases), and none is the sandbox's.
    pub const KERNEL_KEYS: u32 = 20;
    /// A terminal (a pty's slave) that was neither made in the sandbox nor is sandbox's
    /// own: another shell's keyboard and screen (`terminal.rs` in the programs).
    pub const FOREIGN_TERMINAL: u32 = 21;
    /// A file in `/dev/shm` (POSIX shared memory, semaphores) that no confined process
    /// made: another program's segment (`shm.rs` in the programs).
    pub const FOREIGN_SHARED_MEMORY: u32 = 22;
    /// A device node that is not the command's own (`/dev/null`, `/dev/urandom`, a disk's):
    /// its contents are the policy's to allow, its name and attributes the host's (a root
    /// command could otherwise replace `/dev/urandom` or `chmod` `/dev/ptmx`).
    pub const HOST_DEVICE: u32 = 23;
    /// A set-user-ID or set-group-ID file made, or a file made one (create, `chmod`,
    /// a hard link to one): it would run later, outside the sandbox, with its owner's
    /// powers (a root command's `chmod 4755` copy of a shell is a root shell for anyone).
    pub const SET_ID: u32 = 24;
    /// A socket option that would take the socket's packets past the network policy
    /// (`decide::socket_option`).
    pub const SOCKET_OPTION: u32 = 25;
    /// A block device, by its inode whatever its name: a disk's (or a partition's, a
    /// compressed swap's, a RAM disk's) blocks hold every file on it past the path rules.
    pub const BLOCK_DEVICE: u32 = 26;
    /// A symlink made at, or moved to, the name of a literal grant (`accept::GRANT_NAME`):
    /// the next run would follow it and grant its target.
    pub const GRANT_LINK: u32 = 27;
    /// A namespace file (nsfs: `/proc/PID/ns/*`, a namespace's file handle, the files
    /// `NS_GET_USERNS`, `NS_MNT_GET_NEXT`, `PIDFD_GET_*_NAMESPACE` return) of a namespace
    /// the command did not start in: `setns` into it (no LSM hook) would reach the System
    /// V IPC, mounts, hostname or loopback ports of the processes there, and a user's own
    /// namespaces outside (rootless containers, Flatpak) are the user's to enter.
    pub const FOREIGN_NAMESPACE: u32 = 28;
    /// A directory or symlink moved, swapped or linked in below a read-only rule's area
    /// (`accept::SPAN`): it could bring files of the command's where the rule's are
    /// expected.
    pub const INTO_SPAN: u32 = 29;
    /// A process outside the sandbox connecting or sending to a unix socket the command
    /// made: a server of the command's at a name an outside program trusts (tmux's
    /// socket, an ssh agent's) would tell that program what to run or take what it sends.
    pub const OUTSIDE_CLIENT: u32 = 30;
    /// A file's owner set to another process or a process group (`F_SETOWN`,
    /// `F_SETOWN_EX`, `FIOSETOWN`, `SIOCSPGRP`): the kernel's `SIGIO` (or `F_SETSIG`'s
    /// signal) to the owner passes no signal check of the sender's, so any process of the
    /// user (of every user, for a root command) could be signalled.
    pub const FILE_OWNER: u32 = 31;
    /// A user namespace made while `process.user_namespaces` is false: in one the command
    /// holds every capability over what it then makes (network namespaces, `nf_tables`,
    /// new file systems), the kernel code most local privilege escalations start in.
    pub const USER_NAMESPACE: u32 = 32;
}

/// `EventHeader::flags`.
pub const EVENT_F_PATH_TRUNCATED: u32 = 1;
/// The dentry walk ended at a dentry that is not its file system's root: a disconnected
/// dentry (`open_by_handle_at` after the dentry cache dropped its parents). Denied.
pub const EVENT_F_DISCONNECTED: u32 = 2;
/// The file is on a file system whose root is not mounted, and below none of its mounted
/// directories (reached by handle or through a mount sandbox does not know). Denied.
pub const EVENT_F_OUTSIDE_MOUNTS: u32 = 4;
/// This record became its CPU's aggregation key ([`AggSlot`]): identical denials on this
/// CPU are counted instead of sent for up to [`AGG_WINDOW_NS`]. `agg_key` identifies it;
/// `agg_base` is the CPU's running count when it was sent.
pub const EVENT_F_AGG_KEY: u32 = 8;
/// Not a denial but a count: the denials identical to key record `agg_key` of CPU `cpu`
/// that were counted instead of sent, from `agg_base` up to the CPU's running total
/// `agg_total`. No path follows.
pub const EVENT_F_REPEATS: u32 = 16;

/// How long identical denials are counted rather than sent: then the next one is sent
/// again (with the count so far first), so a long flood still shows once per window.
pub const AGG_WINDOW_NS: u64 = 1_000_000_000;

/// Per-CPU aggregation state (`AGG`): the last aggregatable denial sent from this CPU
/// (the key) and how many identical ones followed. Userspace reads it (see
/// `sandbox-user/src/audit/aggregate.rs`) to report counts of a flood that stopped;
/// `suppressed` comes first and `base` and `key_seq` after it, so a copy made while the
/// kernel changes the key never pairs old `base`/`key_seq` with a newer `suppressed` (the
/// copy reads upwards, the kernel writes them before counting for the new key).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AggSlot {
    /// Denials counted instead of sent on this CPU, ever (only grows).
    pub suppressed: u64,
    /// `suppressed` when the key record was sent (the record's `agg_base`).
    pub base: u64,
    /// Which key of this CPU: one more at every change (the record's `agg_key`). Unique,
    /// where `base` is not (two keys in a row with no repeat between share it).
    pub key_seq: u64,
    /// The acting process's executable (`mm->exe_file`): part of the key, so a process
    /// that execs something else does not continue the count of what it was.
    pub exe: u64,
    /// When the key record was sent, and the latest counted denial (`CLOCK_BOOTTIME`).
    pub since_ns: u64,
    pub last_ns: u64,
    /// Non-zero while the key is valid (its record reached the ring).
    pub valid: u32,
    pub tgid: u32,
    /// The key: the kernel's report of the denial, as words.
    pub key: [u64; AGG_KEY_WORDS],
    /// Held (odd) by the decision reading and writing the slot: decisions on one CPU can
    /// preempt each other (`kread::write_begin`/`write_end` in the programs).
    pub lock: u64,
}
/// Size of the kernel's `Report` in 8-byte words.
pub const AGG_KEY_WORDS: usize = 9;
const _: () = assert!(size_of::<AggSlot>() == 64 + 8 * AGG_KEY_WORDS);

/// Fixed part of every ring-buffer record. For file and exec events `path_len` bytes of
/// path (relative to the superblock root of `dev`) follow the header; then `exe_len` bytes
/// of the acting process's executable (relative to the superblock root of `exe_dev`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    pub hook: u32,
    pub decision: u32,
    pub reason: u32,
    pub flags: u32,
    pub pid: u32,
    pub tgid: u32,
    pub ppid: u32,
    pub uid: u32,
    pub gid: u32,
    pub policy_id: u32,
    pub cgroup_id: u64,
    pub comm: [u8; 16],
    /// Network events: rule id (index into the loader's rule table). File and exec events:
    /// the kind of rule (`accept` slot) that decided. `NO_RULE as u32` otherwise.
    pub rule: u32,
    /// File events: `f_mode` bits of the open (`FMODE_READ` 1, `FMODE_WRITE` 2).
    pub access: u32,
    /// File and exec events: kernel `s_dev` and inode number of the file.
    pub dev: u32,
    pub path_len: u32,
    pub ino: u64,
    /// Network events: `AF_INET` or `AF_INET6`, port (host order), address (v4 in the first
    /// four bytes).
    pub family: u16,
    pub port: u16,
    /// The acting process's executable: kernel `s_dev` and path length (0: unknown).
    pub exe_dev: u32,
    pub addr: [u8; 16],
    pub exe_len: u32,
    /// Self-protection events: the target process (tgid) or the `bpf()` command.
    pub target: u32,
    /// When the hook ran: `CLOCK_BOOTTIME` nanoseconds (`bpf_ktime_get_boot_ns`), which
    /// userspace turns into wall-clock time (records carry the kernel's time, not the time
    /// they were formatted).
    pub time_ns: u64,
    /// The CPU the record was made on, and its aggregation fields ([`EVENT_F_AGG_KEY`],
    /// [`EVENT_F_REPEATS`]).
    pub cpu: u32,
    pub _pad: u32,
    pub agg_base: u64,
    pub agg_total: u64,
    pub agg_key: u64,
}
const _: () = assert!(size_of::<EventHeader>() == 160);

#[cfg(feature = "user")]
mod pod {
    // SAFETY (all impls): repr(C) structs of integers and integer arrays with explicit
    // padding fields, so every bit pattern is valid and there are no hidden padding bytes.
    unsafe impl aya::Pod for super::PolicyInfo {}
    unsafe impl aya::Pod for super::AggSlot {}
    unsafe impl aya::Pod for super::DirCacheCtl {}
    unsafe impl aya::Pod for super::ScopeCtl {}
    unsafe impl aya::Pod for super::ByteClasses {}
    unsafe impl aya::Pod for super::DfaAccept {}
    unsafe impl aya::Pod for super::DfaInfo {}
    unsafe impl aya::Pod for super::LiteralKey {}
    unsafe impl aya::Pod for super::ScanStart {}
    unsafe impl aya::Pod for super::SbKey {}
    unsafe impl aya::Pod for super::SbRootKey {}
    unsafe impl aya::Pod for super::InodeKey {}
    unsafe impl aya::Pod for super::NetRules {}
    unsafe impl aya::Pod for super::NetKeyV4 {}
    unsafe impl aya::Pod for super::NetKeyV6 {}
    unsafe impl aya::Pod for super::KernelOffsets {}
    unsafe impl aya::Pod for super::EventHeader {}
}

impl KernelOffsets {
    /// All zero, `valid == 0`: what the programs see when the loader supplied nothing.
    pub const ZERO: Self = Self {
        file_f_path_dentry: 0,
        file_f_inode: 0,
        file_f_mode: 0,
        file_f_flags: 0,
        dentry_d_parent: 0,
        dentry_d_name_len: 0,
        dentry_d_name_name: 0,
        dentry_d_inode: 0,
        dentry_d_sb: 0,
        inode_i_ino: 0,
        inode_i_mode: 0,
        super_block_s_dev: 0,
        linux_binprm_file: 0,
        task_struct_real_parent: 0,
        task_struct_tgid: 0,
        task_struct_mm: 0,
        mm_struct_exe_file: 0,
        msghdr_msg_name: 0,
        msghdr_msg_namelen: 0,
        super_block_s_magic: 0,
        super_block_s_flags: 0,
        socket_sk: 0,
        socket_type: 0,
        sock_family: 0,
        sock_cgroup: 0,
        sock_peer_pid: 0,
        pid_nr: 0,
        sock_rcv_saddr: 0,
        sock_v6_rcv_saddr: 0,
        sock_num: 0,
        unix_sock_path_dentry: 0,
        unix_sock_addr: 0,
        unix_address_len: 0,
        unix_address_name: 0,
        unix_sock_peer: 0,
        cgroup_kn: 0,
        kernfs_node_id: 0,
        cgroup_parent: 0,
        task_struct_cgroups: 0,
        css_set_dfl_cgrp: 0,
        super_block_s_root: 0,
        dentry_d_flags: 0,
        dentry_d_iname: 0,
        task_struct_real_cred: 0,
        task_struct_cred: 0,
        cred_fsuid: 0,
        cred_thread_keyring: 0,
        cred_uid: 0,
        cred_euid: 0,
        cred_suid: 0,
        key_uid: 0,
        key_serial: 0,
        path_dentry: 0,
        inode_i_rdev: 0,
        task_struct_files: 0,
        files_struct_fdt: 0,
        files_struct_fd_array: 0,
        fdtable_fd: 0,
        inode_i_nlink: 0,
        proc_inode_pid: 0,
        proc_inode_vfs_inode: 0,
        pid_tasks: 0,
        task_struct_pid_links: 0,
        msghdr_msg_control: 0,
        msghdr_msg_controllen: 0,
        msghdr_msg_control_is_user: 0,
        task_struct_nsproxy: 0,
        nsproxy_ipc_ns: 0,
        ipc_namespace_inum: 0,
        inode_i_dentry: 0,
        dentry_d_seq: 0,
        sock_protocol: 0,
        valid: 0,
    };
}
