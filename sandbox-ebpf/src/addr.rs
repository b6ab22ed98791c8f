//! Socket addresses: parsing a destination as the kernel will use it, and the LPM lookups
//! of the network rules.

use sandbox_common::decide::{self, Deny};
use sandbox_common::{LpmKey, NET_RULES_PER_PREFIX, NetKeyV4, NetKeyV6, NetRules};

use crate::kread;
use crate::maps::{NET_V4, NET_V6};

pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;
pub const AF_UNIX: u16 = 1;
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

/// What a socket address means to the kernel.
pub enum Parsed {
    /// A destination to judge.
    Dest(Dest),
    /// Nothing to judge: a disconnect (`AF_UNSPEC` on `connect`), or an address the
    /// kernel rejects itself (too short).
    Nothing,
}

const AF_UNSPEC: u16 = 0;

impl Dest {
    /// Reads the `sockaddr` (already copied into the kernel) the way a socket of family
    /// `sk_family` will use it, whatever its own family field says: IPv4 sends take
    /// `AF_UNSPEC` as an alias of `AF_INET`, IPv6 sockets send to IPv4 addresses given as
    /// `AF_INET`. `connect` with `AF_UNSPEC` is a disconnect. Families other than inet are
    /// not ours (`None`).
    #[inline(always)]
    pub fn parse_for(sk_family: u16, sa: *const u8, len: i32, connect: bool) -> Option<Parsed> {
        let sa_family: u16 = kread::read(sa, 0).ok()?;
        if connect && sa_family == AF_UNSPEC && (sk_family == AF_INET || sk_family == AF_INET6) {
            return Some(Parsed::Nothing);
        }
        let as_v4 = sk_family == AF_INET || (sk_family == AF_INET6 && sa_family == AF_INET);
        let port_be: u16 = kread::read(sa, 2).ok()?;
        let mut addr = [0u8; 16];
        let family = if as_v4 {
            if len < SOCKADDR_IN_LEN {
                return Some(Parsed::Nothing);
            }
            let a: [u8; 4] = kread::read(sa, 4).ok()?;
            addr[..4].copy_from_slice(&a);
            AF_INET
        } else if sk_family == AF_INET6 {
            if len < SOCKADDR_IN6_LEN {
                return Some(Parsed::Nothing);
            }
            addr = kread::read(sa, 8).ok()?;
            AF_INET6
        } else {
            return None;
        };
        Some(Parsed::Dest(Self {
            family,
            port: u16::from_be(port_be),
            addr,
        }))
    }

    /// The local address a socket is bound to (for `listen`).
    #[inline(always)]
    pub fn local(sk: *const u8, sk_family: u16) -> Option<Self> {
        let off = kread::offsets();
        let port: u16 = kread::read(sk, off.sock_num).ok()?;
        let mut addr = [0u8; 16];
        if sk_family == AF_INET {
            let a: [u8; 4] = kread::read(sk, off.sock_rcv_saddr).ok()?;
            addr[..4].copy_from_slice(&a);
        } else if sk_family == AF_INET6 {
            addr = kread::read(sk, off.sock_v6_rcv_saddr).ok()?;
        } else {
            return None;
        }
        Some(Self {
            family: sk_family,
            port,
            addr,
        })
    }

    /// For the unspecified address (`0.0.0.0`, `::`, `::ffff:0.0.0.0`), the loopback address
    /// of the same form, where the kernel sends it. (Made from the address's own zero
    /// bytes: a constant address compiles to a `memset` call, a byte loop.)
    #[inline(always)]
    fn unspecified_as_loopback(&self) -> Option<Self> {
        let a = &self.addr;
        let mut addr = *a;
        if self.family == AF_INET {
            if a[0] | a[1] | a[2] | a[3] != 0 {
                return None;
            }
            addr[0] = 127;
            addr[3] = 1;
        } else if a[..10].iter().all(|b| *b == 0) && a[12..].iter().all(|b| *b == 0) {
            match (a[10], a[11]) {
                (0, 0) => addr[15] = 1,
                (0xff, 0xff) => {
                    addr[12] = 127;
                    addr[15] = 1;
                }
                _ => return None,
            }
        } else {
            return None;
        }
        Some(Self {
            family: self.family,
            port: self.port,
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

/// The decision for an address by the rules of `policy_id` (a destination's, or a
/// listening socket's under `policy_id + LISTEN_ID_BASE`): `None` allows it. The lookups
/// are a global function ([`sandbox_net_rules`]), verified once per program: [`verdict`]
/// asks up to three times (an inlined copy each took 2,500-12,000 instructions more to
/// verify).
#[inline(always)]
pub fn rules_verdict(policy_id: u32, flags: u32, dest: &Dest) -> Option<Deny> {
    let [
        h0,
        h1,
        h2,
        h3,
        h4,
        h5,
        h6,
        h7,
        t0,
        t1,
        t2,
        t3,
        t4,
        t5,
        t6,
        t7,
    ] = dest.addr;
    let v = sandbox_net_rules(
        u64::from(policy_id) << 32 | u64::from(flags),
        u32::from(dest.family) << 16 | u32::from(dest.port),
        u64::from_ne_bytes([h0, h1, h2, h3, h4, h5, h6, h7]),
        u64::from_ne_bytes([t0, t1, t2, t3, t4, t5, t6, t7]),
    );
    #[expect(
        clippy::cast_possible_truncation,
        reason = "fields packed by sandbox_net_rules"
    )]
    (v & DENIED != 0).then_some(Deny {
        reason: (v >> 16) as u32,
        rule: v as u16,
    })
}

/// [`sandbox_net_rules`]'s bit for a deny (its reason in bits 16-47, its rule in 0-15).
const DENIED: u64 = 1 << 48;

/// [`rules_verdict`] with its arguments packed in scalars (a global function takes
/// scalars, five at most): the policy's id and flags, the family and port, the address
/// as two words. 0 allows, else [`DENIED`] with the reason and the rule.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_net_rules(policy: u64, family_port: u32, head: u64, tail: u64) -> u64 {
    #[expect(clippy::cast_possible_truncation, reason = "unpacking")]
    let (policy_id, flags, family, port) = (
        (policy >> 32) as u32,
        policy as u32,
        (family_port >> 16) as u16,
        family_port as u16,
    );
    let mut addr = [0u8; 16];
    let (h, t) = (head.to_ne_bytes(), tail.to_ne_bytes());
    addr[..8].copy_from_slice(&h);
    addr[8..].copy_from_slice(&t);
    let dest = Dest { family, port, addr };
    match lookup_verdict(policy_id, flags, &dest) {
        Some(d) => DENIED | u64::from(d.reason) << 16 | u64::from(d.rule),
        None => 0,
    }
}

#[inline(always)]
fn lookup_verdict(policy_id: u32, flags: u32, dest: &Dest) -> Option<Deny> {
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
    decide::net(flags, hit)
}

/// The decision for a destination: `None` allows it. The unspecified address (`0.0.0.0`,
/// `::`, `::ffff:0.0.0.0`) is this host: the kernel connects and sends there to loopback
/// (IPv4: or to the socket's bound source address), so it must pass the rules of its own
/// prefix and loopback's both: a `deny` of `127.0.0.1` covers `0.0.0.0` too. `::` goes to
/// `::1`, or to `127.0.0.1` from a socket bound to an IPv4-mapped address: it must pass
/// both.
#[inline(always)]
pub fn verdict(policy_id: u32, flags: u32, dest: &Dest) -> Option<Deny> {
    let v = rules_verdict(policy_id, flags, dest);
    if v.is_some() {
        return v;
    }
    let loopback = dest.unspecified_as_loopback()?;
    let v = rules_verdict(policy_id, flags, &loopback);
    if v.is_some()
        || loopback.family != AF_INET6
        || loopback.addr[15] != 1
        || loopback.addr[11] != 0
    {
        return v;
    }
    // `dest` is `::`: its zero bytes, with 127.0.0.1 in the first four.
    let mut addr = dest.addr;
    addr[0] = 127;
    addr[3] = 1;
    let v4 = Dest {
        family: AF_INET,
        port: dest.port,
        addr,
    };
    rules_verdict(policy_id, flags, &v4)
}
