//! The decision order, written once: pure functions over what matched (kind masks) and the
//! policy flags. The BPF programs call them after resolving a file, binary or address;
//! `sandbox explain` calls them on the same compiled tables. Nothing here reads memory or
//! maps, so both sides decide alike by construction.

#![allow(
    clippy::inline_always,
    reason = "called from BPF programs, where every call is inlined into the hook"
)]

use crate::{NO_RULE, accept, net_action, policy_flags, reason};

/// `f_mode` bits (include/linux/fs.h), stable since the beginning of git history.
pub mod fmode {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    /// `__FMODE_EXEC`: the open of a binary by execve.
    pub const EXEC: u32 = 0x20;
}

/// `f_flags` bits (the `open(2)` flags, include/uapi/asm-generic/fcntl.h, x86-64).
pub mod oflag {
    /// `O_TRUNC`: the open empties the file.
    pub const TRUNC: u32 = 0o1000;
}

/// A deny: why, and the rule (network: rule id; files and exec: the kind slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deny {
    pub reason: u32,
    pub rule: u16,
}

impl Deny {
    #[inline(always)]
    pub const fn because(reason: u32) -> Self {
        Self {
            reason,
            rule: NO_RULE,
        }
    }
}

/// What matched a file: kinds of rule (bit `1 << slot`) by path and by identity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileMatch {
    pub path: u32,
    pub inode: u32,
    /// The file's superblock is placed in the mount table. Kernel-internal ones (pipes,
    /// sockets, memfd) are not; allowlists do not apply to them.
    pub sb_known: bool,
}

impl FileMatch {
    #[inline(always)]
    pub const fn has(&self, slot: usize) -> bool {
        (self.path | self.inode) & (1 << slot) != 0
    }

    /// The deny by kind `slot`, by path when the path matched, else by identity.
    #[inline(always)]
    pub const fn by(&self, slot: usize) -> Deny {
        Deny {
            reason: if self.path & (1 << slot) != 0 {
                reason::RULE
            } else {
                reason::INODE
            },
            #[expect(
                clippy::cast_possible_truncation,
                reason = "slots are bit numbers < 32"
            )]
            rule: slot as u16,
        }
    }
}

/// The file rules, in order: deny > write rules > read rules. `f_mode` holds [`fmode`]
/// bits; a name change or attribute change is judged as `fmode::WRITE`.
#[inline(always)]
pub fn file(flags: u32, f_mode: u32, is_dir: bool, m: &FileMatch) -> Option<Deny> {
    if m.has(accept::FILE_DENY) {
        return Some(m.by(accept::FILE_DENY));
    }
    let exec_open = f_mode & fmode::EXEC != 0;
    // A denied binary may not be read either: no copying it, no `ld.so denied`. Nor opened
    // to run: `bprm_check_security` judges only the binary execve names (and a script's
    // interpreter), not the ELF interpreter the kernel opens for it (`PT_INTERP`), which
    // a program of the command's own could name (or `uselib`'s library).
    if m.has(accept::EXEC_DENY) {
        return Some(m.by(accept::EXEC_DENY));
    }
    if f_mode & fmode::WRITE != 0 {
        if m.has(accept::FILE_READ_ONLY) {
            return Some(m.by(accept::FILE_READ_ONLY));
        }
        if flags & policy_flags::WRITE_ALLOWLIST != 0 && m.sb_known && !m.has(accept::FILE_WRITE) {
            return Some(Deny::because(reason::NOT_IN_WRITE_ALLOWLIST));
        }
    }
    if f_mode & fmode::READ != 0
        && !exec_open
        && !is_dir
        && flags & policy_flags::READ_ALLOWLIST != 0
        && m.sb_known
        && !m.has(accept::FILE_READ)
        && !m.has(accept::FILE_WRITE)
    {
        return Some(Deny::because(reason::NOT_IN_READ_ALLOWLIST));
    }
    None
}

/// What a name change does besides writing to the name itself (see [`name_change`]).
pub mod guard {
    /// Nothing more (mkdir, unlink, attribute changes; the source of a hard link).
    pub const NONE: u32 = 0;
    /// Something new stands at the name: a file, device, fifo, socket or symlink made
    /// there, the new name of a link or a rename.
    pub const NEW: u32 = 1;
    /// The name goes away: rmdir, the old name of a rename within its directory.
    pub const OLD: u32 = 2;
    /// As `OLD`, for the old name of a rename into another directory.
    pub const MOVE: u32 = 3;
    /// As `NEW`, and what stands at the name is a symlink (made there, renamed or linked
    /// there).
    pub const NEW_LINK: u32 = 4;
    /// As `NEW`, and what stands at the name is a directory renamed there from another
    /// directory.
    pub const NEW_DIR: u32 = 5;
    /// The guards above fit in these bits; `ARRIVES * g` (`g` one of `NEW`, `NEW_LINK`,
    /// `NEW_DIR`) added to `OLD` or `MOVE` says that the name, while it goes away, gets
    /// another file at once (`RENAME_EXCHANGE`: each name is the other's new name).
    pub const BASE: u32 = 7;
    pub const ARRIVES: u32 = 8;

    /// Something new stands at the name.
    #[inline(always)]
    pub fn is_new(g: u32) -> bool {
        g == NEW || g == NEW_LINK || g == NEW_DIR
    }
}

/// A change to a name (create, remove, rename, link, attributes), in order: the file
/// rules for a write to the name; then nothing new at an ancestor of a protected path
/// (`guard::NEW`, `guard::NEW_LINK`, `guard::NEW_DIR`, or swapped in: `guard::ARRIVES`);
/// no directory or symlink moved into a read-only rule's span (`accept::SPAN`); no
/// symlink at a literal grant's name (`guard::NEW_LINK`); no removing or moving an
/// ancestor of a denied path (`guard::OLD`, `guard::MOVE`); no moving a directory out
/// from below a denied area (`guard::MOVE`).
#[inline(always)]
pub fn name_change(flags: u32, is_dir: bool, guard: u32, m: &FileMatch) -> Option<Deny> {
    if let Some(d) = file(flags, fmode::WRITE, is_dir, m) {
        return Some(d);
    }
    let slot_deny = |reason: u32, slot: usize| Deny {
        reason,
        #[expect(
            clippy::cast_possible_truncation,
            reason = "slots are bit numbers < 32"
        )]
        rule: slot as u16,
    };
    let has = |slot: usize| m.path & (1 << slot) != 0;
    // What stands at the name: made or moved there (`base`), or swapped in (`arrives`).
    let (base, arrives) = (guard & guard::BASE, guard / guard::ARRIVES);
    let new = guard::is_new(base) || guard::is_new(arrives);
    let link = base == guard::NEW_LINK || arrives == guard::NEW_LINK;
    let carrier = link || base == guard::NEW_DIR || arrives == guard::NEW_DIR;
    if new && has(accept::ANCESTOR) {
        return Some(slot_deny(reason::ANCESTOR, accept::ANCESTOR));
    }
    if carrier && has(accept::SPAN) {
        return Some(slot_deny(reason::INTO_SPAN, accept::SPAN));
    }
    if link && has(accept::GRANT_NAME) {
        return Some(slot_deny(reason::GRANT_LINK, accept::GRANT_NAME));
    }
    if (base == guard::OLD || base == guard::MOVE) && has(accept::HOLDS_DENIED) {
        return Some(slot_deny(reason::ANCESTOR, accept::HOLDS_DENIED));
    }
    if base == guard::MOVE && is_dir && has(accept::CONTAINED) {
        return Some(slot_deny(reason::MOVES_PROTECTED, accept::CONTAINED));
    }
    None
}

/// The exec rules, in order: files.deny > exec.deny (both decided when the kernel opens
/// the binary to run it: [`file`] with `fmode::EXEC`) > exec.allow > setuid/setgid
/// ([`exec_binary`], at `bprm_check_security`). `privileged`: the binary is setuid, or
/// setgid and group-executable.
#[inline(always)]
pub fn exec(flags: u32, privileged: bool, m: &FileMatch) -> Option<Deny> {
    if m.has(accept::FILE_DENY) {
        Some(m.by(accept::FILE_DENY))
    } else if m.has(accept::EXEC_DENY) {
        Some(m.by(accept::EXEC_DENY))
    } else {
        exec_binary(flags, privileged, m)
    }
}

/// What `bprm_check_security` decides of the binary execve runs (or a script's
/// interpreter), after its open (which every one of them passes with `fmode::EXEC`, and
/// where the deny rules were decided): exec.allow, then setuid/setgid.
#[inline(always)]
pub fn exec_binary(flags: u32, privileged: bool, m: &FileMatch) -> Option<Deny> {
    if flags & policy_flags::EXEC_ALLOWLIST != 0 && !m.has(accept::EXEC_ALLOW) {
        Some(Deny::because(reason::NOT_IN_EXEC_ALLOWLIST))
    } else if flags & policy_flags::DENY_PRIVILEGED != 0 && privileged {
        Some(Deny::because(reason::PRIVILEGED_BINARY))
    } else {
        None
    }
}

/// A set-user-ID or set-group-ID regular file opened for writing (or truncation): its
/// contents are a program that runs with its owner's rights outside, and a write through
/// a shared mapping keeps the bits (only `write(2)` and truncation without `CAP_FSETID`
/// drop them). Either bit, as for the files a command makes (`reason::SET_ID`).
#[inline(always)]
pub fn set_id_write(f_mode: u32, mode: u16) -> Option<Deny> {
    (f_mode & fmode::WRITE != 0
        && imode::is_reg(mode)
        && mode & (imode::S_ISUID | imode::S_ISGID) != 0)
        .then(|| Deny::because(reason::SET_ID))
}

/// A block device opened, whatever its name (a node of a disk's number made on a tmpfs, a
/// `zram` or a ZFS volume no name rule lists): refused (`reason::BLOCK_DEVICE`).
#[inline(always)]
pub fn block_device(mode: u16) -> Option<Deny> {
    imode::is_blk(mode).then(|| Deny::because(reason::BLOCK_DEVICE))
}

/// `i_mode` bits (include/uapi/linux/stat.h).
pub mod imode {
    pub const S_IFMT: u16 = 0o170_000;
    pub const S_IFDIR: u16 = 0o040_000;
    pub const S_IFCHR: u16 = 0o020_000;
    pub const S_IFBLK: u16 = 0o060_000;
    pub const S_IFLNK: u16 = 0o120_000;
    pub const S_IFREG: u16 = 0o100_000;
    pub const S_ISUID: u16 = 0o4000;
    pub const S_ISGID: u16 = 0o2000;
    pub const S_IXGRP: u16 = 0o0010;

    #[inline(always)]
    pub const fn is_dir(mode: u16) -> bool {
        mode & S_IFMT == S_IFDIR
    }

    #[inline(always)]
    pub const fn is_chr(mode: u16) -> bool {
        mode & S_IFMT == S_IFCHR
    }

    #[inline(always)]
    pub const fn is_blk(mode: u16) -> bool {
        mode & S_IFMT == S_IFBLK
    }

    #[inline(always)]
    pub const fn is_lnk(mode: u16) -> bool {
        mode & S_IFMT == S_IFLNK
    }

    #[inline(always)]
    pub const fn is_reg(mode: u16) -> bool {
        mode & S_IFMT == S_IFREG
    }

    /// setuid, or setgid and group-executable (setgid without group-x is mandatory locking).
    #[inline(always)]
    pub const fn privileged(mode: u16) -> bool {
        mode & S_ISUID != 0 || mode & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP)
    }
}

/// The network decision from the first port rule of the longest matching prefix
/// (`(action, rule id)`), or none: allowed unless the policy's default is deny.
#[inline(always)]
pub fn net(flags: u32, hit: Option<(u8, u16)>) -> Option<Deny> {
    match hit {
        Some((net_action::ALLOW, _)) => None,
        Some((_, rule)) => Some(Deny {
            reason: reason::RULE,
            rule,
        }),
        None if flags & policy_flags::NET_DEFAULT_DENY != 0 => {
            Some(Deny::because(reason::NOT_IN_NET_ALLOWLIST))
        }
        None => None,
    }
}

/// A connect or send to a unix socket. The socket's name (its path, or `@name` for an
/// abstract one) is matched like a file: `files.deny` and `read_only` cover sockets (a
/// connect is a write). Then a peer inside the same sandbox is reached freely; one
/// outside only when `network.unix` names it.
#[inline(always)]
pub fn unix(peer_in_scope: bool, m: &FileMatch) -> Option<Deny> {
    if m.has(accept::FILE_DENY) {
        return Some(m.by(accept::FILE_DENY));
    }
    if m.has(accept::FILE_READ_ONLY) {
        return Some(m.by(accept::FILE_READ_ONLY));
    }
    if peer_in_scope || m.has(accept::UNIX_ALLOW) {
        return None;
    }
    Some(Deny::because(reason::OUTSIDE_SCOPE))
}

/// Address families, socket types and protocols (include/linux/socket.h, net.h, in.h).
pub mod sock {
    pub const AF_UNIX: u32 = 1;
    pub const AF_INET: u32 = 2;
    pub const AF_INET6: u32 = 10;
    pub const AF_NETLINK: u32 = 16;
    pub const SOCK_STREAM: u32 = 1;
    pub const SOCK_DGRAM: u32 = 2;
    pub const SOCK_RAW: u32 = 3;
    pub const SOCK_SEQPACKET: u32 = 5;
    pub const SOCK_TYPE_MASK: u32 = 0xf;
    pub const IPPROTO_ICMP: u32 = 1;
    pub const IPPROTO_TCP: u32 = 6;
    pub const IPPROTO_DCCP: u32 = 33;
    pub const IPPROTO_UDP: u32 = 17;
    pub const IPPROTO_ICMPV6: u32 = 58;
    pub const IPPROTO_SCTP: u32 = 132;
    pub const IPPROTO_UDPLITE: u32 = 136;
    pub const IPPROTO_MPTCP: u32 = 262;
    /// A raw socket of this protocol writes its own IP header (`hdrincl` from creation).
    pub const IPPROTO_RAW: u32 = 255;
    /// The kernel connector; its `CN_IDX_PROC` group reports every fork, exec, id change
    /// and exit of the host, to any user from 6.6.
    pub const NETLINK_CONNECTOR: u32 = 11;
}

/// `setsockopt(2)` by an in-scope task (the hook sees the level and the option, not the
/// value): refused for the options that send a socket's packets elsewhere than the
/// address `connect` or `send` judged, or make it a socket no network hook judges:
/// - `TCP_ULP`: an upper layer for a TCP socket; `"smc"` turns it into an `AF_SMC`
///   socket whose connect, send and listen reach the network through the kernel's own
///   TCP socket, past every hook (and `"tls"`, kernel TLS, is the other: programs that
///   try it fall back to TLS of their own);
/// - `IP_OPTIONS` (loose and strict source routes: the packet goes to the route's first
///   hop, the judged address is only in the option), `IPV6_RTHDR` and its RFC 2292 forms
///   (a routing header: the same for IPv6), and `IPV6_FLOWLABEL_MGR` (a flow label's
///   request carries control messages, a routing header among them, that every send
///   with the label then uses). The same levels and types name the control
///   messages that give them per message (`IP_RETOPTS` for the IPv4 options), which
///   `socket_sendmsg` refuses by this function too;
/// - `IP_HDRINCL`, `IPV6_HDRINCL` (also at `SOL_RAW`, where IPv6 raw sockets take it
///   too): a raw socket (`network.sockets: [raw]`, and `CAP_NET_RAW`) then writes its own
///   IP header, whose destination the next router follows, not the address the send
///   named.
#[inline(always)]
pub const fn socket_option(level: i32, option: i32) -> Option<Deny> {
    const SOL_IP: i32 = 0;
    const IP_HDRINCL: i32 = 3;
    const IP_OPTIONS: i32 = 4;
    const IP_RETOPTS: i32 = 7;
    const SOL_TCP: i32 = 6;
    const TCP_ULP: i32 = 31;
    const SOL_IPV6: i32 = 41;
    const IPV6_2292RTHDR: i32 = 5;
    const IPV6_2292PKTOPTIONS: i32 = 6;
    const IPV6_FLOWLABEL_MGR: i32 = 32;
    const IPV6_HDRINCL: i32 = 36;
    const SOL_RAW: i32 = 255;
    const IPV6_RTHDR: i32 = 57;
    let refused = matches!(
        (level, option),
        (SOL_TCP, TCP_ULP)
            | (SOL_IP, IP_HDRINCL | IP_OPTIONS | IP_RETOPTS)
            | (
                SOL_IPV6,
                IPV6_RTHDR
                    | IPV6_2292RTHDR
                    | IPV6_2292PKTOPTIONS
                    | IPV6_FLOWLABEL_MGR
                    | IPV6_HDRINCL
            )
            | (SOL_RAW, IPV6_HDRINCL)
    );
    if refused {
        Some(Deny::because(reason::SOCKET_OPTION))
    } else {
        None
    }
}

/// `socket(2)` by an in-scope task: the family must be in `network.sockets`; inet sockets
/// are TCP, UDP and ping unless raw, SCTP or MPTCP are named too (their own paths reach
/// addresses that `connect` never sees); a raw socket is of ICMP only: one of
/// `IPPROTO_RAW` writes its own IP header (see `IP_HDRINCL` in [`socket_option`]), one of
/// a protocol with ports ([`port_counts`]: TCP, UDP, ...) its own port where the rules
/// judge its destination as port 0, one of a tunnel an inner destination. The kernel connector
/// (netlink) is refused whatever the policy: its process events report the host's other
/// processes.
#[inline(always)]
pub fn socket_create(
    families: u64,
    flags: u32,
    family: u32,
    ty: u32,
    protocol: u32,
) -> Option<Deny> {
    use sock::{
        AF_INET, AF_INET6, AF_NETLINK, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_MPTCP, IPPROTO_SCTP,
        IPPROTO_TCP, IPPROTO_UDP, IPPROTO_UDPLITE, NETLINK_CONNECTOR, SOCK_DGRAM, SOCK_RAW,
        SOCK_SEQPACKET, SOCK_STREAM, SOCK_TYPE_MASK,
    };
    let kind = Some(Deny::because(reason::SOCKET_KIND));
    if family >= 64 || families & (1u64 << family) == 0 {
        return kind;
    }
    if family == AF_NETLINK && protocol == NETLINK_CONNECTOR {
        // Every other process's fork, exec and exit: hidden, as a pid namespace would.
        return Some(Deny::because(reason::OUTSIDE_SCOPE));
    }
    if family != AF_INET && family != AF_INET6 {
        return None;
    }
    let ping = if family == AF_INET {
        IPPROTO_ICMP
    } else {
        IPPROTO_ICMPV6
    };
    let ok = match ty & SOCK_TYPE_MASK {
        SOCK_STREAM => {
            protocol == 0
                || protocol == IPPROTO_TCP
                || (protocol == IPPROTO_MPTCP && flags & policy_flags::SOCK_MPTCP != 0)
                || (protocol == IPPROTO_SCTP && flags & policy_flags::SOCK_SCTP != 0)
        }
        SOCK_DGRAM => {
            protocol == 0
                || protocol == IPPROTO_UDP
                || protocol == IPPROTO_UDPLITE
                || protocol == ping
        }
        // SOCK_SEQPACKET on inet is SCTP.
        SOCK_SEQPACKET => flags & policy_flags::SOCK_SCTP != 0,
        // ICMP only: `IPPROTO_RAW` writes its own IP header, a protocol with ports its own
        // port, a tunnel's (IPIP, IPv6 in IPv4, GRE, ...) an inner destination its far end
        // follows.
        SOCK_RAW => protocol == ping && flags & policy_flags::SOCK_RAW != 0,
        // SOCK_PACKET (the old packet socket) and anything newer.
        _ => flags & policy_flags::SOCK_RAW != 0,
    };
    if ok { None } else { kind }
}

/// Whether a destination's port means anything to an inet socket of type `ty` and
/// `protocol` (`socket.type` and `sock.sk_protocol`, the `type` and `protocol` of a
/// `cgroup/connect*` context): TCP, UDP, UDP-Lite, SCTP, MPTCP, DCCP, not raw. A ping or
/// raw socket sends to the address whatever port its `sendto` or `connect` names (the
/// kernel ignores it), so its destination is judged with port 0 ([`judged_port`]): only a
/// rule whose ports include 0 (one that names no port) lets it through, not one that
/// opens a single service of the host. (A raw socket of a protocol with ports would write
/// its own: [`socket_create`] refuses one.)
#[inline(always)]
pub const fn port_counts(ty: u32, protocol: u32) -> bool {
    use sock::{
        IPPROTO_DCCP, IPPROTO_MPTCP, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP, IPPROTO_UDPLITE,
        SOCK_RAW, SOCK_TYPE_MASK,
    };
    ty & SOCK_TYPE_MASK != SOCK_RAW
        && matches!(
            protocol,
            IPPROTO_TCP
                | IPPROTO_UDP
                | IPPROTO_UDPLITE
                | IPPROTO_SCTP
                | IPPROTO_MPTCP
                | IPPROTO_DCCP
        )
}

/// The port a destination is judged with: its own where it counts, 0 for the rest
/// ([`port_counts`]).
#[inline(always)]
pub const fn judged_port(ty: u32, protocol: u32, port: u16) -> u16 {
    if port_counts(ty, protocol) { port } else { 0 }
}
