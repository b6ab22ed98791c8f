//! Network, by what the kernel will use:
//! - `socket_create`: only the families, types and protocols of `network.sockets`;
//! - `socket_connect` and `socket_sendmsg` (sends that name a destination: unconnected UDP
//!   `sendto`/`sendmsg`/`sendmmsg`, io_uring sends, TCP Fast Open): the destination read
//!   as the *socket's* family will use it (IPv4 sends take `AF_UNSPEC` as `AF_INET`);
//! - `socket_listen`, and `socket_bind` of datagram sockets to a port: the local address
//!   against `network.listen`;
//! - `unix_stream_connect` and `unix_may_send`: the peer socket, by its name (file rules,
//!   `network.unix`) and by where it was made (inside the sandbox or not).

use sandbox_common::decide::{self, fmode};
use sandbox_common::{LISTEN_ID_BASE, errno, hook, policy_flags, reason};

use super::file::check;
use super::{deny_unresolved, finish, hook};
use crate::addr::{self, AF_INET, AF_INET6, AF_UNIX, Dest, Parsed};
use crate::event::Report;
use crate::kread;
use crate::path;
use crate::scope::{self, Scope};

/// The `struct sock` of a `struct socket` and its family.
#[inline(always)]
fn sock_of(socket: *const u8) -> Option<(*const u8, u16)> {
    let off = kread::offsets();
    let sk = kread::read_ptr(socket, off.socket_sk).ok()?;
    let family: u16 = kread::read(sk, off.sock_family).ok()?;
    Some((sk, family))
}

#[inline(always)]
fn no_offsets(hook_id: u32, scope: Scope) -> i32 {
    deny_unresolved(
        scope.mem,
        hook_id,
        scope.policy_id,
        reason::NO_OFFSETS,
        scope.audits(policy_flags::AUDIT_NET),
        errno::EPERM,
    )
}

/// Reports and denies (or audits) `dest` when `verdict` says so.
#[inline(always)]
fn judge(hook_id: u32, scope: Scope, dest: &Dest, v: Option<decide::Deny>) -> i32 {
    let Some(v) = v else {
        return 0;
    };
    finish(
        scope.mem,
        Report::net(hook_id, scope.policy_id, dest),
        v,
        scope.audits(policy_flags::AUDIT_NET),
        errno::EPERM,
    )
}

/// The network decision for a destination `sockaddr` in kernel memory sent or connected to
/// by `socket`, reported as `hook_id`.
#[inline(always)]
fn check_dest(hook_id: u32, scope: Scope, socket: *const u8, sa: *const u8, len: i32) -> i32 {
    if kread::offsets().valid == 0 {
        return no_offsets(hook_id, scope);
    }
    let Some((sk, family)) = sock_of(socket) else {
        return -errno::EPERM;
    };
    if family != AF_INET && family != AF_INET6 {
        // Unix peers are judged by the unix hooks; other families at socket creation.
        return 0;
    }
    match Dest::parse_for(family, sa, len, hook_id == hook::SOCKET_CONNECT) {
        Some(Parsed::Dest(mut dest)) => {
            // A ping or raw socket ignores the port: judged as port 0.
            let off = kread::offsets();
            let (Ok(ty), Ok(protocol)) = (
                kread::read::<u16>(socket, off.socket_type),
                kread::read::<u16>(sk, off.sock_protocol),
            ) else {
                return -errno::EPERM;
            };
            dest.port = decide::judged_port(u32::from(ty), u32::from(protocol), dest.port);
            let v = addr::verdict(scope.policy_id, scope.flags(), &dest);
            judge(hook_id, scope, &dest, v)
        }
        Some(Parsed::Nothing) => 0,
        // An inet socket whose address cannot be read: fail closed.
        None => -errno::EPERM,
    }
}

/// The size of a `struct cmsghdr` on x86-64: a send whose control part is shorter carries
/// no control message.
const CMSG_HDR: u64 = 16;

/// The control messages a send carries, `len` bytes (a cmsg walk, as the kernel's
/// `for_each_cmsghdr`, over at most [`MAX_CMSGS`]): the first that `decide::socket_option`
/// refuses, as its (level, type); `Err` when they cannot be read or are more than the walk
/// looks at (fail closed).
#[inline(always)]
fn routing_control(
    msg: *const u8,
    len: u64,
    off: &sandbox_common::KernelOffsets,
) -> Result<Option<(i32, i32)>, ()> {
    let base = kread::read_ptr(msg, off.msghdr_msg_control).map_err(|_| ())?;
    // The kernel copies them in before this hook (`____sys_sendmsg`); a caller of its own
    // may pass user memory.
    // `msg_control_is_user` is a one-bit field, the byte's lowest bit on x86-64 (the other
    // bits are other fields, or not set by anyone).
    let user = kread::read::<u8>(msg, off.msghdr_msg_control_is_user).map_err(|_| ())? & 1 != 0;
    let mut at: u64 = 0;
    for _ in 0..MAX_CMSGS {
        if at + CMSG_HDR > len {
            return Ok(None);
        }
        let p = base.wrapping_add(at as usize).cast::<[u64; 2]>();
        // SAFETY: probe reads: a bad address yields Err, never a fault.
        let hdr = if user {
            unsafe { aya_ebpf::helpers::bpf_probe_read_user(p) }
        } else {
            unsafe { aya_ebpf::helpers::bpf_probe_read_kernel(p) }
        }
        .map_err(|_| ())?;
        let (cmsg_len, level, kind) = (hdr[0], hdr[1] as u32 as i32, (hdr[1] >> 32) as u32 as i32);
        if decide::socket_option(level, kind).is_some() {
            return Ok(Some((level, kind)));
        }
        if cmsg_len < CMSG_HDR {
            // Malformed: the kernel refuses the send at this message.
            return Ok(None);
        }
        at += (cmsg_len + 7) & !7;
    }
    if at + CMSG_HDR > len {
        Ok(None)
    } else {
        Err(())
    }
}

/// How many control messages a send may carry for [`routing_control`] to read them all.
const MAX_CMSGS: u32 = 8;

#[inline(always)]
fn sendmsg(socket: *const u8, msg: *const u8, scope: Scope) -> i32 {
    let off = kread::offsets();
    if off.valid == 0 {
        return no_offsets(hook::SOCKET_SENDMSG, scope);
    }
    // Most sends carry no control message: one read tells, before the socket's family.
    let Ok(control_len) = kread::read::<u64>(msg, off.msghdr_msg_controllen) else {
        return -errno::EPERM;
    };
    if control_len >= CMSG_HDR {
        // Control messages route only inet packets (unix sockets carry descriptors in theirs).
        let Some((_, family)) = sock_of(socket) else {
            return -errno::EPERM;
        };
        if family == AF_INET || family == AF_INET6 {
            match routing_control(msg, control_len, off) {
                Ok(None) => {}
                Ok(Some((level, kind))) => return refuse_option(scope, level, kind),
                Err(()) => return refuse_option(scope, -1, -1),
            }
        }
    }
    // The kernel has copied the address in (`move_addr_to_kernel`) before this hook.
    let (Ok(name), Ok(len)) = (
        kread::read_ptr(msg, off.msghdr_msg_name),
        kread::read::<i32>(msg, off.msghdr_msg_namelen),
    ) else {
        return -errno::EPERM;
    };
    if name.is_null() {
        return 0;
    }
    check_dest(hook::SOCKET_SENDMSG, scope, socket, name, len)
}

#[inline(always)]
fn create(scope: Scope, family: u32, ty: u32, protocol: u32, kern: u32) -> i32 {
    if kern != 0 {
        // Sockets the kernel makes for itself.
        return 0;
    }
    let v = decide::socket_create(
        scope.info.sock_families,
        scope.flags(),
        family,
        ty,
        protocol,
    );
    let Some(v) = v else {
        return 0;
    };
    let mut rep = Report::bare(hook::SOCKET_CREATE, scope.policy_id);
    rep.family = family as u16;
    rep.access = ty;
    rep.target = protocol;
    finish(
        scope.mem,
        rep,
        v,
        scope.audits(policy_flags::AUDIT_NET),
        errno::EACCES,
    )
}

/// The local address of a socket about to serve, against `network.listen` (an allowlist).
#[inline(always)]
fn check_local(scope: Scope, dest: &Dest) -> i32 {
    let hit = addr::rules_verdict(
        scope.policy_id + LISTEN_ID_BASE,
        policy_flags::NET_DEFAULT_DENY,
        dest,
    );
    let v = hit.map(|d| {
        if d.reason == reason::NOT_IN_NET_ALLOWLIST {
            decide::Deny::because(reason::NOT_IN_LISTEN_ALLOWLIST)
        } else {
            d
        }
    });
    judge(hook::LISTEN, scope, dest, v)
}

#[inline(always)]
fn listen(socket: *const u8, scope: Scope) -> i32 {
    if kread::offsets().valid == 0 {
        return no_offsets(hook::LISTEN, scope);
    }
    let Some((sk, family)) = sock_of(socket) else {
        return -errno::EPERM;
    };
    if family != AF_INET && family != AF_INET6 {
        return 0;
    }
    match Dest::local(sk, family) {
        Some(dest) => check_local(scope, &dest),
        None => -errno::EPERM,
    }
}

/// A datagram socket bound to a port serves whoever sends to it: judged like `listen`.
/// Stream sockets are judged when they listen (a bind alone serves nothing).
#[inline(always)]
fn bind(socket: *const u8, sa: *const u8, len: i32, scope: Scope) -> i32 {
    let off = kread::offsets();
    if off.valid == 0 {
        return no_offsets(hook::LISTEN, scope);
    }
    let Some((_, family)) = sock_of(socket) else {
        return -errno::EPERM;
    };
    let ty: i16 = kread::read(socket, off.socket_type).unwrap_or(0);
    if (family != AF_INET && family != AF_INET6) || ty as u32 != decide::sock::SOCK_DGRAM {
        return 0;
    }
    match Dest::parse_for(family, sa, len, false) {
        Some(Parsed::Dest(dest)) if dest.port != 0 => check_local(scope, &dest),
        Some(_) => 0,
        None => -errno::EPERM,
    }
}

/// A connect or send to the unix socket `peer` (a `struct sock *`) by a task in scope, or,
/// with `inbound`, by a task outside it (`scope` is then the set's bound policy): refused
/// when the socket was made inside, unless `network.unix_inbound` lets it. `from`: the
/// sender's `struct socket` (a send), null (a connect).
#[inline(always)]
fn unix_peer(hook_id: u32, scope: Scope, peer: *const u8, inbound: bool, from: *const u8) -> i32 {
    let off = kread::offsets();
    let audit = scope.audits(policy_flags::AUDIT_NET);
    if inbound && scope.flags() & policy_flags::UNIX_INBOUND != 0 {
        return 0;
    }
    if off.valid == 0 {
        return if inbound {
            0
        } else {
            no_offsets(hook_id, scope)
        };
    }
    let inside = scope::sock_within(peer, scope.cgroup);
    if inbound && !inside {
        return 0;
    }
    // A reply to a datagram socket of the command's that is connected to the sender (a
    // client inside asked that server, which `network.unix` let it reach): passes. The
    // sender's `struct sock` is read only here, for a send from outside to one inside.
    if inbound
        && !from.is_null()
        && kread::read_ptr(from, off.socket_sk)
            .is_ok_and(|sk| kread::read_ptr(peer, off.unix_sock_peer).is_ok_and(|p| p == sk))
    {
        return 0;
    }
    let pid = kread::read_ptr(peer, off.sock_peer_pid)
        .and_then(|p| kread::read::<u32>(p, off.pid_nr))
        .unwrap_or(0);
    let dentry = kread::read_ptr(peer, off.unix_sock_path_dentry).unwrap_or(core::ptr::null());
    if !dentry.is_null() {
        // A socket with a path: the file rules see the connect as a write to it.
        let facts = path::dentry_facts(dentry, &off);
        return check(
            hook_id,
            scope,
            facts,
            fmode::WRITE,
            policy_flags::AUDIT_NET,
            pid,
            |m, _| {
                if inbound {
                    Some(decide::Deny::because(reason::OUTSIDE_CLIENT))
                } else {
                    decide::unix(inside, m)
                }
            },
        );
    }
    if inside && !inbound {
        return 0;
    }
    let Ok(ua) = kread::read_ptr(peer, off.unix_sock_addr) else {
        return -errno::EPERM;
    };
    if ua.is_null() {
        // An unnamed peer: the other end of a socketpair or connection handed in (an
        // unnamed socket is reached only through a descriptor, never by a connect).
        return 0;
    }
    let len: i32 = kread::read(ua, off.unix_address_len).unwrap_or(0);
    // sockaddr_un: sun_family (2 bytes), then sun_path; abstract names start with a NUL.
    let name = ua.wrapping_add(off.unix_address_name as usize);
    let first: u8 = kread::read(name, 2).unwrap_or(1);
    let mut rep = Report::bare(hook_id, scope.policy_id);
    rep.target = pid;
    rep.family = AF_UNIX;
    if len < 3 || first != 0 {
        // A path name with no dentry (cannot happen while bound): fail closed.
        return finish(
            scope.mem,
            rep,
            decide::Deny::because(reason::OUTSIDE_SCOPE),
            audit,
            errno::EACCES,
        );
    }
    let Some(w) = scope.mem.work() else {
        crate::diag::fail_closed(hook_id, reason::BUSY, 0);
        return finish(
            scope.mem,
            rep,
            decide::Deny::because(reason::BUSY),
            audit,
            errno::EACCES,
        );
    };
    let Ok(start) = path::place_name(w, name.wrapping_add(3), (len - 3) as u32) else {
        return -errno::EACCES;
    };
    rep.path_start = start;
    if inbound {
        return finish(
            scope.mem,
            rep,
            decide::Deny::because(reason::OUTSIDE_CLIENT),
            audit,
            errno::EACCES,
        );
    }
    let m = path::match_name(w, scope.policy_id, start);
    match decide::unix(false, &m) {
        Some(v) => finish(scope.mem, rep, v, audit, errno::EACCES),
        None => 0,
    }
}

#[inline(always)]
fn unix_send(sock: *const u8, other: *const u8, scope: Scope, inbound: bool) -> i32 {
    match kread::read_ptr(other, kread::offsets().socket_sk) {
        Ok(sk) => unix_peer(hook::UNIX_SEND, scope, sk, inbound, sock),
        Err(_) if inbound => 0,
        Err(_) => -errno::EACCES,
    }
}

/// `setsockopt(2)` of an option `decide::socket_option` refuses.
#[inline(always)]
fn set_option(scope: Scope, level: i32, option: i32) -> i32 {
    if decide::socket_option(level, option).is_none() {
        return 0;
    }
    refuse_option(scope, level, option)
}

/// Refuses (or audits) the socket option or control message `level`/`option` (-1/-1:
/// control messages that could not be read all).
#[inline(always)]
fn refuse_option(scope: Scope, level: i32, option: i32) -> i32 {
    let mut rep = Report::bare(hook::SOCKET_OPTION, scope.policy_id);
    rep.access = level as u32;
    rep.target = option as u32;
    finish(
        scope.mem,
        rep,
        decide::Deny::because(reason::SOCKET_OPTION),
        scope.audits(policy_flags::AUDIT_NET),
        errno::EPERM,
    )
}

hook!(socket_setsockopt, "socket_setsockopt", |ctx, scope| {
    set_option(scope, ctx.arg(1), ctx.arg(2))
});
hook!(socket_create, "socket_create", |ctx, scope| {
    create(scope, ctx.arg(0), ctx.arg(1), ctx.arg(2), ctx.arg(3))
});
hook!(socket_connect, "socket_connect", |ctx, scope| {
    check_dest(
        hook::SOCKET_CONNECT,
        scope,
        ctx.arg(0),
        ctx.arg(1),
        ctx.arg(2),
    )
});
hook!(socket_sendmsg, "socket_sendmsg", |ctx, scope| {
    sendmsg(ctx.arg(0), ctx.arg(1), scope)
});
hook!(socket_listen, "socket_listen", |ctx, scope| listen(
    ctx.arg(0),
    scope
));
hook!(socket_bind, "socket_bind", |ctx, scope| {
    bind(ctx.arg(0), ctx.arg(1), ctx.arg(2), scope)
});
// Both ways: a task in scope reaching a socket outside (`network.unix`), and a task
// outside reaching a socket the command made (`network.unix_inbound`).
hook!(
    unix_stream_connect,
    "unix_stream_connect",
    |ctx, scope, inbound| {
        unix_peer(
            hook::UNIX_CONNECT,
            scope,
            ctx.arg(1),
            inbound,
            core::ptr::null(),
        )
    }
);
hook!(unix_may_send, "unix_may_send", |ctx, scope, inbound| {
    unix_send(ctx.arg(0), ctx.arg(1), scope, inbound)
});
