//! The fallback backend's network programs, for kernels that cannot run BPF-LSM programs:
//! `cgroup/connect4`, `connect6`, `sendmsg4`, `sendmsg6`, attached to the run's cgroup (and
//! so run for every task in it and below). They make the same decision as
//! `socket_connect`/`socket_sendmsg` in `net.rs` (`addr::verdict` over the same `NET_V4`/
//! `NET_V6` maps, embedded IPv4 checked as IPv4) and report through the same `finish`, so
//! their records are the LSM programs' records, hook ids included.
//!
//! The kernel calls them with the destination as the socket will use it: an IPv6 socket
//! that sends to or connects to an `AF_INET` address (UDP) runs the `*4` program; an
//! IPv4-mapped IPv6 destination reaches the `*6` program (and `addr::verdict` judges its
//! IPv4 part). `sendmsg*` run for unconnected UDP sends that name a destination; TCP Fast
//! Open and `io_uring` connects go through `connect*`.

use aya_ebpf::macros::cgroup_sock_addr;
use aya_ebpf::programs::SockAddrContext;
use sandbox_common::{decide, errno, hook, policy_flags};

use super::finish;
use crate::addr::{self, AF_INET, AF_INET6, Dest};
use crate::event::Report;

/// `cgroup_sock_addr` return values: 1 lets the call go on, 0 fails it with `EPERM`.
const ALLOW: i32 = 1;
const DENY: i32 = 0;

/// Judges `dest` for the current task; out of scope (not bound, or the policy not live
/// yet) it is allowed, as in the LSM programs.
#[inline(always)]
fn judge(hook_id: u32, dest: &Dest) -> i32 {
    crate::scope::decide(ALLOW, |scope| {
        let Some(v) = addr::verdict(scope.policy_id, scope.flags(), dest) else {
            return ALLOW;
        };
        let r = finish(
            scope.mem,
            Report::net(hook_id, scope.policy_id, dest),
            v,
            scope.audits(policy_flags::AUDIT_NET),
            errno::EPERM,
        );
        if r == 0 { ALLOW } else { DENY }
    })
}

/// The IPv4 destination of the call (`user_ip4`, `user_port`: network byte order).
#[inline(always)]
fn v4(ctx: &SockAddrContext) -> Dest {
    // SAFETY: the context the kernel passed; these fields allow 4-byte reads.
    let (ip, port) = unsafe { ((*ctx.sock_addr).user_ip4, (*ctx.sock_addr).user_port) };
    let mut addr = [0u8; 16];
    addr[..4].copy_from_slice(&ip.to_ne_bytes());
    Dest {
        family: AF_INET,
        port: u16::from_be(port as u16),
        addr,
    }
}

/// The IPv6 destination of the call (`user_ip6`, `user_port`: network byte order).
#[inline(always)]
fn v6(ctx: &SockAddrContext) -> Dest {
    // SAFETY: the context the kernel passed; each `user_ip6` word allows a 4-byte read.
    let (w, port) = unsafe {
        let s = &*ctx.sock_addr;
        (
            [s.user_ip6[0], s.user_ip6[1], s.user_ip6[2], s.user_ip6[3]],
            s.user_port,
        )
    };
    let mut addr = [0u8; 16];
    let mut i = 0;
    while i < 4 {
        addr[4 * i..4 * i + 4].copy_from_slice(&w[i].to_ne_bytes());
        i += 1;
    }
    Dest {
        family: AF_INET6,
        port: u16::from_be(port as u16),
        addr,
    }
}

/// `dest` with the port the socket's kind gives it: a ping socket's `connect` runs
/// `connect*` too (`ping_pre_connect`), and ignores the port (`decide::judged_port`).
/// (`sendmsg*` run for UDP sends only, whose port counts.)
#[inline(always)]
fn with_protocol(ctx: &SockAddrContext, mut dest: Dest) -> Dest {
    // SAFETY: the context the kernel passed; `type` and `protocol` allow 4-byte reads.
    let (ty, protocol) = unsafe { ((*ctx.sock_addr).type_, (*ctx.sock_addr).protocol) };
    dest.port = decide::judged_port(ty, protocol, dest.port);
    dest
}

#[cgroup_sock_addr(connect4)]
pub fn connect4(ctx: SockAddrContext) -> i32 {
    judge(hook::SOCKET_CONNECT, &with_protocol(&ctx, v4(&ctx)))
}

#[cgroup_sock_addr(connect6)]
pub fn connect6(ctx: SockAddrContext) -> i32 {
    judge(hook::SOCKET_CONNECT, &with_protocol(&ctx, v6(&ctx)))
}

#[cgroup_sock_addr(sendmsg4)]
pub fn sendmsg4(ctx: SockAddrContext) -> i32 {
    judge(hook::SOCKET_SENDMSG, &v4(&ctx))
}

#[cgroup_sock_addr(sendmsg6)]
pub fn sendmsg6(ctx: SockAddrContext) -> i32 {
    judge(hook::SOCKET_SENDMSG, &v6(&ctx))
}
