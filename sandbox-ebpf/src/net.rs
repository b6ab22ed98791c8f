//! Destination parsing and the network decision for `socket_connect` and `socket_sendmsg`.

use sandbox_common::{
    LpmKey, NET_RULES_PER_PREFIX, NO_RULE, NetKeyV4, NetKeyV6, NetRules, net_action, policy_flags,
    reason,
};

use crate::Verdict;
use crate::kread;
use crate::maps::{NET_V4, NET_V6};

const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const SOCKADDR_IN_LEN: i32 = 16;
const SOCKADDR_IN6_LEN: i32 = 24;

/// Where a socket is going, as the kernel will see it.
pub struct Dest {
    pub family: u16,
    /// Host byte order.
    pub port: u16,
    /// IPv4 in the first four bytes.
    pub addr: [u8; 16],
}

impl Dest {
    /// Reads a `sockaddr` the kernel already copied in. Anything but IPv4/IPv6 (`AF_UNIX`,
    /// `AF_UNSPEC` disconnects, short addresses the kernel rejects itself) is not ours.
    #[inline(always)]
    pub fn parse(sa: *const u8, len: i32) -> Option<Self> {
        let family: u16 = kread::read(sa, 0).ok()?;
        let port_be: u16 = kread::read(sa, 2).ok()?;
        let mut addr = [0u8; 16];
        match family {
            AF_INET if len >= SOCKADDR_IN_LEN => {
                let a: [u8; 4] = kread::read(sa, 4).ok()?;
                addr[..4].copy_from_slice(&a);
            }
            AF_INET6 if len >= SOCKADDR_IN6_LEN => {
                addr = kread::read(sa, 8).ok()?;
            }
            _ => return None,
        }
        Some(Self {
            family,
            port: u16::from_be(port_be),
            addr,
        })
    }

    /// The IPv4 address embedded in an IPv6 one that reaches an IPv4 host: IPv4-mapped
    /// (`::ffff:0:0/96`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`).
    #[inline(always)]
    fn embedded_v4(&self) -> Option<[u8; 4]> {
        let a = &self.addr;
        let tail = [a[12], a[13], a[14], a[15]];
        let mapped = a[..10].iter().all(|b| *b == 0) && a[10] == 0xff && a[11] == 0xff;
        let nat64 = a[0] == 0x00
            && a[1] == 0x64
            && a[2] == 0xff
            && a[3] == 0x9b
            && a[4..12].iter().all(|b| *b == 0);
        if mapped || nat64 {
            return Some(tail);
        }
        if a[0] == 0x20 && a[1] == 0x02 {
            return Some([a[2], a[3], a[4], a[5]]);
        }
        None
    }
}

/// First port rule of the longest matching prefix that covers `port`.
#[inline(always)]
fn first_rule(rules: &NetRules, port: u16) -> Option<(u8, u16)> {
    let n = rules.count as usize;
    let mut i = 0;
    while i < NET_RULES_PER_PREFIX {
        if i >= n {
            break;
        }
        let r = &rules.rules[i];
        if port >= r.port_lo && port <= r.port_hi {
            return Some((r.action, r.rule));
        }
        i += 1;
    }
    None
}

#[inline(always)]
fn lookup_v4(policy_id: u32, addr: [u8; 4], port: u16) -> Option<(u8, u16)> {
    let key = LpmKey {
        prefix_len: 64,
        data: NetKeyV4 {
            policy_id_be: policy_id.to_be_bytes(),
            addr,
        },
    };
    // SAFETY: LpmKey has the layout the kernel expects (u32 prefix length, then data); the
    // aya wrapper type is layout-identical.
    let key: &aya_ebpf::maps::lpm_trie::Key<NetKeyV4> = unsafe { &*(&raw const key).cast() };
    NET_V4.get(key).and_then(|r| first_rule(r, port))
}

#[inline(always)]
fn lookup_v6(policy_id: u32, addr: [u8; 16], port: u16) -> Option<(u8, u16)> {
    let key = LpmKey {
        prefix_len: 160,
        data: NetKeyV6 {
            policy_id_be: policy_id.to_be_bytes(),
            addr,
        },
    };
    // SAFETY: as in lookup_v4.
    let key: &aya_ebpf::maps::lpm_trie::Key<NetKeyV6> = unsafe { &*(&raw const key).cast() };
    NET_V6.get(key).and_then(|r| first_rule(r, port))
}

/// The decision for a destination: `None` allows it.
#[inline(always)]
pub fn verdict(policy_id: u32, flags: u32, dest: &Dest) -> Option<Verdict> {
    let hit = if dest.family == AF_INET {
        lookup_v4(
            policy_id,
            [dest.addr[0], dest.addr[1], dest.addr[2], dest.addr[3]],
            dest.port,
        )
    } else if let Some(v4) = dest.embedded_v4() {
        // The packet goes to an IPv4 host: the IPv4 rules decide.
        lookup_v4(policy_id, v4, dest.port)
    } else {
        lookup_v6(policy_id, dest.addr, dest.port)
    };
    match hit {
        Some((net_action::ALLOW, _)) => None,
        Some((_, rule)) => Some(Verdict {
            reason: reason::RULE,
            rule,
        }),
        None if flags & policy_flags::NET_DEFAULT_DENY != 0 => Some(Verdict {
            reason: reason::NOT_IN_NET_ALLOWLIST,
            rule: NO_RULE,
        }),
        None => None,
    }
}
