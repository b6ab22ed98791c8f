//! `cgroup_skb/egress`, attached to the run's cgroup with either backend: the packets of
//! the sandbox's sockets, after the kernel built their IP header. It drops a packet whose
//! header routes it past the address judged: an IPv4 source route (LSRR, SSRR: the packet
//! goes to the route's first hop) or an IPv6 routing header (to the header's address).
//!
//! `socket_setsockopt` and `socket_sendmsg` refuse the options and control messages that
//! ask for those headers (`decide::socket_option`), but `sendmmsg` skips the LSM hook for
//! every message after one sent to the same address (`____sys_sendmsg`'s `used_address`:
//! `sock_sendmsg_nosec`), control messages included; a non-root user may put a type-2
//! routing header in one (measured on 6.1 and 7.3); and the fallback has no setsockopt
//! hook at all (a segment routing header, type 4, set on the socket). Here every packet is
//! seen, whatever the syscall.

use aya_ebpf::macros::cgroup_skb;
use aya_ebpf::programs::SkBuffContext;

const PASS: i32 = 1;
const DROP: i32 = 0;

/// The IPv4 header's options (bytes 20 to its length) hold a source route.
#[inline(always)]
fn v4_source_route(ctx: &SkBuffContext, ihl: usize) -> bool {
    const EOL: u8 = 0;
    const NOP: u8 = 1;
    const LSRR: u8 = 0x83;
    const SSRR: u8 = 0x89;
    let end = ihl * 4;
    let mut at = 20usize;
    // At most 40 bytes of options: 40 steps of one byte or fewer longer ones.
    for _ in 0..40 {
        if at >= end {
            return false;
        }
        let Ok(kind) = ctx.load::<u8>(at) else {
            return true;
        };
        match kind {
            EOL => return false,
            NOP => at += 1,
            LSRR | SSRR => return true,
            _ => {
                let Ok(len) = ctx.load::<u8>(at + 1) else {
                    return true;
                };
                if len < 2 {
                    // Malformed: the kernel built it, but fail closed.
                    return true;
                }
                at += usize::from(len);
            }
        }
        let Some(next) = unknown(at) else {
            return true;
        };
        at = next;
    }
    false
}

/// `v` as the verifier cannot know it. The place in the options is a known number after
/// a NOP; compared with the header's end (which the verifier of 6.7+ decides from their
/// ranges) it becomes precise, and the walk's states then differ on every step and place:
/// 181,777 instructions to verify this program on 6.12 and 7.3 (a second of every start
/// in the guests) against 4,149 on 6.1. Copied through a probe read, the place is any
/// number to the verifier and every step's states are one. `None`: the read failed.
#[inline(always)]
fn unknown(v: usize) -> Option<usize> {
    crate::kread::read::<usize>((&raw const v).cast(), 0).ok()
}

/// The IPv6 extension headers (hop-by-hop and destination options may come first) hold a
/// routing header of a kind a socket can ask for.
#[inline(always)]
fn v6_routing_header(ctx: &SkBuffContext) -> bool {
    const HOPOPTS: u8 = 0;
    const ROUTING: u8 = 43;
    const DSTOPTS: u8 = 60;
    let Ok(mut next) = ctx.load::<u8>(6) else {
        return true;
    };
    let mut at = 40usize;
    for _ in 0..4 {
        match next {
            // The kinds a socket can ask for: 2 (Mobile IPv6, also per message) and 4
            // (segment routing: any user may set one with `setsockopt(IPV6_RTHDR)`, which
            // `socket_setsockopt` refuses and the fallback has no hook for), and 0
            // (deprecated: refused by the kernel on input). A host's own segment routes
            // that insert a header (seg6 `inline`) are dropped with them: the header does
            // not say who asked for it. RPL's (3) is only the host's routes'.
            ROUTING => {
                let Ok(kind) = ctx.load::<u8>(at + 2) else {
                    return true;
                };
                return kind == 0 || kind == 2 || kind == 4;
            }
            HOPOPTS | DSTOPTS => {
                let (Ok(n), Ok(len)) = (ctx.load::<u8>(at), ctx.load::<u8>(at + 1)) else {
                    return true;
                };
                next = n;
                at += (usize::from(len) + 1) * 8;
            }
            _ => return false,
        }
    }
    // More option headers than a socket makes: fail closed.
    true
}

#[cgroup_skb(egress)]
pub fn egress(ctx: SkBuffContext) -> i32 {
    // The data starts at the IP header. Dropped, the packet's send fails with EPERM. No
    // record: on 6.1 a `cgroup_skb` program may not ask whose send it is (the verifier
    // refuses `bpf_get_current_pid_tgid` there), and a retransmission has no sender; the
    // options and control messages that ask for these headers are refused, with a
    // record, by `socket_setsockopt` and `socket_sendmsg` before this.
    let Ok(first) = ctx.load::<u8>(0) else {
        return DROP;
    };
    let routed = match first >> 4 {
        4 => first & 0x0f > 5 && v4_source_route(&ctx, usize::from(first & 0x0f)),
        6 => v6_routing_header(&ctx),
        _ => false,
    };
    if routed { DROP } else { PASS }
}
