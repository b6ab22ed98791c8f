//! Network rules -> LPM-trie entries.
//!
//! The kernel does one longest-prefix lookup and then takes the first port rule that covers
//! the port. For that to be right, every prefix's value lists its own rules (user `deny`,
//! then user `allow`, then the built-in private set) followed by the rules of every shorter
//! prefix that contains it, longest first. So `allow 10.1.2.3:443` punches through
//! `block_private` for port 443 only, and 10.1.2.3:22 still falls through to 10.0.0.0/8.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use ipnet::IpNet;
use sandbox_common::{NET_RULES_PER_PREFIX, NetRules, PortRule, net_action};

use super::RuleInfo;
use crate::policy::{HostRule, Network};

/// The built-in private set (`network.block_private`). IPv4 embedded in IPv6 (mapped, NAT64,
/// 6to4) is checked against the IPv4 set by the kernel itself.
pub const PRIVATE_V4: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    // Azure's WireServer: a public address every Azure VM reaches for its goal state,
    // extension settings and certificates (the instance metadata is 169.254.169.254).
    "168.63.129.16/32",
];
pub const PRIVATE_V6: &[&str] = &[
    "::/128",
    "::1/128",
    // IPv4-compatible (deprecated): a `sit` device's automatic tunnels take `::a.b.c.d` to
    // the IPv4 host a.b.c.d, private or not.
    "::/96",
    // Local-use NAT64 (RFC 8215): a site's own translator to its internal IPv4 network.
    "64:ff9b:1::/48",
    "fe80::/10",
    // Site-local (deprecated, still routed inside some sites).
    "fec0::/10",
    "fc00::/7",
    "ff00::/8",
];

/// One LPM entry: prefix length (of the address only), address bytes, port rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<const N: usize> {
    pub prefix_len: u8,
    pub addr: [u8; N],
    pub rules: NetRules,
}

type Own = BTreeMap<(u8, Vec<u8>), Vec<PortRule>>;

/// Network rules compiled: the LPM entries, and what is needed to add host entries later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetCompiled {
    pub v4: Vec<Entry<4>>,
    pub v6: Vec<Entry<16>>,
    /// Own rules per prefix (what host entries inherit from).
    pub own: BTreeMap<(u8, Vec<u8>), Vec<PortRule>>,
    /// `allow_hosts` entries with their rule ids.
    pub hosts: Vec<(HostRule, u16)>,
    /// The rule ids of `network.deny`: explicit denies, which no DNS answer overrides (see
    /// [`host_entry`]).
    pub deny_rules: Range<u16>,
    /// `network.listen`: local addresses that may serve (looked up under policy id
    /// `p + LISTEN_ID_BASE`; what no rule allows is denied).
    pub listen_v4: Vec<Entry<4>>,
    pub listen_v6: Vec<Entry<16>>,
    /// With `block_private`: the rule that addresses this host gains after compilation
    /// are denied by (see [`gained_entries`]), and what reached this host then (its
    /// addresses and local prefixes, `netif::local`).
    pub host_rule: Option<u16>,
    pub host_addrs: Vec<IpNet>,
}

/// What reaches this host, as followed while sandbox runs: its addresses (/32, /128) and
/// the prefixes of its `local` routing table (`netif::local`).
pub type HostNets = BTreeSet<IpNet>;

/// Loopback's own prefixes and addresses: the private set's (a policy may open them).
fn is_loopback_net(n: &IpNet) -> bool {
    n.network().is_loopback()
}

/// What a record says of the rule that denies `n`, one of this host's.
fn host_source(n: &IpNet) -> String {
    if n.prefix_len() == n.max_prefix_len() {
        format!("{} (an address of this host)", n.addr())
    } else {
        format!("{n} (local to this host)")
    }
}

type Tables = (Vec<Entry<4>>, Vec<Entry<16>>);

fn rule_of(net: IpNet, ports: (u16, u16), action: u8, rule: usize) -> ((u8, Vec<u8>), PortRule) {
    (
        (net.prefix_len(), addr_bytes(net.network())),
        PortRule {
            port_lo: ports.0,
            port_hi: ports.1,
            rule: rule as u16,
            action,
            _pad: 0,
        },
    )
}

/// The LPM entries of every prefix that has rules of its own.
fn tables(own: &Own) -> Result<Tables, String> {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for (len, addr) in own.keys() {
        match entry(own, *len, addr, &[])? {
            (4, e) => v4.push(Entry {
                prefix_len: e.prefix_len,
                addr: e.addr[..4].try_into().expect("4 bytes"),
                rules: e.rules,
            }),
            (_, e) => v6.push(e),
        }
    }
    Ok((v4, v6))
}

pub fn compile(n: &Network, rules: &mut Vec<RuleInfo>) -> Result<NetCompiled, String> {
    let mut own: Own = BTreeMap::new();
    let mut push = |net: IpNet, ports: (u16, u16), action: u8, rule: usize| {
        let (key, r) = rule_of(net, ports, action, rule);
        own.entry(key).or_default().push(r);
    };
    let deny_start = rules.len() as u16;
    for r in &n.deny {
        push(r.net, r.ports, net_action::DENY, rules.len());
        rules.push(RuleInfo {
            field: r.field.clone(),
            source: r.source.clone(),
        });
    }
    let deny_rules = deny_start..rules.len() as u16;
    for r in &n.allow {
        push(r.net, r.ports, net_action::ALLOW, rules.len());
        rules.push(RuleInfo {
            field: r.field.clone(),
            source: r.source.clone(),
        });
    }
    // The resolvers the host uses: port 53 only, before the private set they usually sit in.
    for a in &n.resolvers {
        push(IpNet::from(*a), (53, 53), net_action::ALLOW, rules.len());
        rules.push(RuleInfo {
            field: "network.allow_dns".into(),
            source: format!("nameserver {a} (/etc/resolv.conf)"),
        });
    }
    let mut host_rule = None;
    if n.block_private {
        for s in PRIVATE_V4.iter().chain(PRIVATE_V6) {
            let net: IpNet = s.parse().expect("built-in prefix");
            push(net, (0, u16::MAX), net_action::DENY, rules.len());
            rules.push(RuleInfo {
                field: "network.block_private".into(),
                source: (*s).to_owned(),
            });
        }
        // The host's own addresses reach its own services, as loopback does: each one is
        // denied by itself, private ones too (an `allow` of the LAN they are in would
        // otherwise reach every service of this host bound to all addresses); loopback
        // ones are the loopback prefix's, which a policy may open on purpose.
        host_rule = Some(rules.len() as u16);
        rules.push(RuleInfo {
            field: "network.block_private".into(),
            source: "an address this host gained while sandbox ran".into(),
        });
        for a in n.host_addrs.iter().filter(|a| !is_loopback_net(a)) {
            push(*a, (0, u16::MAX), net_action::DENY, rules.len());
            rules.push(RuleInfo {
                field: "network.block_private".into(),
                source: host_source(a),
            });
        }
    }
    let mut listen: Own = BTreeMap::new();
    for r in &n.listen {
        let (key, rule) = rule_of(r.net, r.ports, net_action::ALLOW, rules.len());
        listen.entry(key).or_default().push(rule);
        rules.push(RuleInfo {
            field: r.field.clone(),
            source: r.source.clone(),
        });
    }
    let hosts = n
        .allow_hosts
        .iter()
        .map(|h| {
            let id = rules.len() as u16;
            rules.push(RuleInfo {
                field: h.field.clone(),
                source: h.source.clone(),
            });
            (h.clone(), id)
        })
        .collect();
    let (v4, v6) = tables(&own)?;
    let (listen_v4, listen_v6) = tables(&listen)?;
    Ok(NetCompiled {
        v4,
        v6,
        own,
        hosts,
        deny_rules,
        listen_v4,
        listen_v6,
        host_rule,
        host_addrs: n.host_addrs.clone(),
    })
}

/// The LPM entry for a prefix: `extra` rules first, then the prefix's own, then inherited.
fn entry(
    own: &Own,
    len: u8,
    addr: &[u8],
    extra: &[PortRule],
) -> Result<(usize, Entry<16>), String> {
    let mut list = extra.to_vec();
    list.extend(inherited(own, len, addr));
    if list.len() > NET_RULES_PER_PREFIX {
        return Err(format!(
            "{} port rules apply to {}/{len}; at most {NET_RULES_PER_PREFIX} fit on one prefix",
            list.len(),
            show(addr)
        ));
    }
    let mut value = NetRules {
        count: list.len() as u32,
        ..NetRules::default()
    };
    value.rules[..list.len()].copy_from_slice(&list);
    let mut a = [0u8; 16];
    a[..addr.len()].copy_from_slice(addr);
    Ok((
        addr.len(),
        Entry {
            prefix_len: len,
            addr: a,
            rules: value,
        },
    ))
}

/// True when the built-in private set contains `addr` (embedded IPv4 included).
pub fn is_private(addr: IpAddr) -> bool {
    let addr = embedded_v4(addr).map_or(addr, IpAddr::V4);
    PRIVATE_V4
        .iter()
        .chain(PRIVATE_V6)
        .any(|s| s.parse::<IpNet>().is_ok_and(|n| n.contains(&addr)))
}

/// Why a DNS answer is never allowed, if it is not: an address in the private set (a name
/// never opens a private address: DNS rebinding), or an address of this host (it reaches the
/// host's own services, as loopback does): one it had when the policy was compiled
/// (`c.host_addrs`) or one of `own`, what it has had since; in a prefix local to it too.
/// IPv4 embedded in IPv6 counts as the IPv4 address.
pub fn host_refusal(c: &NetCompiled, addr: IpAddr, own: &HostNets) -> Option<&'static str> {
    if is_private(addr) {
        return Some("a private address");
    }
    let v4 = embedded_v4(addr).map(IpAddr::V4);
    let this_host = |a: IpAddr| c.host_addrs.iter().chain(own).any(|n| n.contains(&a));
    if this_host(addr) || v4.is_some_and(this_host) {
        return Some("an address of this host");
    }
    None
}

/// The rules of one resolved address of `allow_hosts`: the policy's own rules for the
/// address, with its allows (`allows`, one per `allow_hosts` rule that named it) in front of
/// all but the explicit denies (`network.deny`) that cover it: a DNS answer opens what the
/// policy leaves to the default or to the private set, never what it denies by name (on
/// the ports that deny names). The first allow always fits; further ones are added while
/// there is room. `None` for an address [`host_refusal`] refuses (`own`: the addresses this
/// host has had since compilation), or no allow.
pub fn host_entry(
    c: &NetCompiled,
    addr: IpAddr,
    allows: &[PortRule],
    own: &HostNets,
) -> Option<NetRules> {
    if allows.is_empty() || host_refusal(c, addr, own).is_some() {
        return None;
    }
    let b = addr_bytes(addr);
    let len = (b.len() * 8) as u8;
    let policy = inherited(&c.own, len, &b);
    let room = NET_RULES_PER_PREFIX.checked_sub(policy.len())?;
    if room == 0 {
        return None;
    }
    // After the last explicit deny: every rule before it is an explicit deny or allow (the
    // private set and this host's addresses were refused above), and keeps its verdict.
    let at = policy
        .iter()
        .rposition(|r| r.action == net_action::DENY && c.deny_rules.contains(&r.rule))
        .map_or(0, |i| i + 1);
    let mut list = policy[..at].to_vec();
    list.extend(allows[..allows.len().min(room)].iter().rev());
    list.extend_from_slice(&policy[at..]);
    let mut rules = NetRules {
        count: list.len() as u32,
        ..NetRules::default()
    };
    rules.rules[..list.len()].copy_from_slice(&list);
    Some(rules)
}

/// What `addr`'s own entry (a /32 or /128) is without any `allow_hosts` answer: the
/// policy's own entry for that exact prefix with the denies of what this host gained while
/// sandbox ran (`own`, see [`gained_entries`]), else none (the shorter prefixes decide).
pub fn base_entry(c: &NetCompiled, addr: IpAddr, own: &HostNets) -> Option<NetRules> {
    let b = addr_bytes(addr);
    let len = (b.len() * 8) as u8;
    let rules = with_gained(c, own);
    if !rules.contains_key(&(len, b.clone())) {
        return None;
    }
    Some(entry_or_deny(c, &rules, len, &b))
}

/// The entry of a prefix of `rules` (the policy's with what the host gained); one whose
/// rules no longer fit is the host's deny alone (fail closed: the longest prefix decides,
/// so leaving its old entry, or none, would leave it open).
fn entry_or_deny(c: &NetCompiled, rules: &Own, len: u8, addr: &[u8]) -> NetRules {
    entry(rules, len, addr, &[]).map_or_else(
        |_| {
            let mut r = NetRules {
                count: 1,
                ..NetRules::default()
            };
            r.rules[0] = PortRule {
                port_lo: 0,
                port_hi: u16::MAX,
                rule: c.host_rule.unwrap_or_default(),
                action: net_action::DENY,
                _pad: 0,
            };
            r
        },
        |(_, e)| e.rules,
    )
}

/// Whether `n` is something this host gained after the policy was compiled that
/// `block_private` denies (not loopback's, not known at compile time).
pub fn gained(c: &NetCompiled, n: &IpNet) -> bool {
    c.host_rule.is_some() && !is_loopback_net(n) && !c.host_addrs.contains(n)
}

/// The policy's own rules with a deny on every prefix of `own` that [`gained`] says this
/// host gained, after the prefix's own rules (as at compile time: only a rule naming the
/// prefix itself opens it). The policy's own, not a copy, when the host gained nothing
/// (`base_entry` runs for every address a name lets go).
fn with_gained<'a>(c: &'a NetCompiled, own: &HostNets) -> std::borrow::Cow<'a, Own> {
    let gains: Vec<&IpNet> = own.iter().filter(|n| gained(c, n)).collect();
    let (Some(rule), false) = (c.host_rule, gains.is_empty()) else {
        return std::borrow::Cow::Borrowed(&c.own);
    };
    let mut out = c.own.clone();
    for n in gains {
        let (key, deny) = rule_of(*n, (0, u16::MAX), net_action::DENY, rule.into());
        out.entry(key).or_default().push(deny);
    }
    std::borrow::Cow::Owned(out)
}

/// The LPM entries to write when this host gained `new` (addresses, local prefixes) after
/// the policy was compiled (with `block_private`): each one's own entry with its deny, and
/// every entry of the policy inside it again (which inherits that deny), as `(address,
/// prefix length, rules)`. `all`: everything gained so far, `new` included. An entry
/// whose rules no longer fit is written as the deny alone ([`entry_or_deny`]).
pub fn gained_entries(
    c: &NetCompiled,
    all: &HostNets,
    new: &[IpNet],
) -> Vec<(IpAddr, u8, NetRules)> {
    let new: Vec<&IpNet> = new.iter().filter(|n| gained(c, n)).collect();
    if new.is_empty() {
        return Vec::new();
    }
    let rules = with_gained(c, all);
    let inside = |len: u8, addr: &[u8]| {
        new.iter().any(|n| {
            let net = addr_bytes(n.network());
            net.len() == addr.len()
                && len >= n.prefix_len()
                && truncate(addr, n.prefix_len()) == net
        })
    };
    rules
        .keys()
        .filter(|(len, addr)| inside(*len, addr))
        .filter_map(|(len, addr)| {
            let value = entry_or_deny(c, &rules, *len, addr);
            let ip = match addr.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(&addr[..]).ok()?),
                _ => IpAddr::from(<[u8; 16]>::try_from(&addr[..]).ok()?),
            };
            Some((ip, *len, value))
        })
        .collect()
}

/// The prefix's own rules, then those of each containing shorter prefix, longest first.
fn inherited(own: &Own, len: u8, addr: &[u8]) -> Vec<PortRule> {
    let mut out = Vec::new();
    for l in (0..=len).rev() {
        let key = (l, truncate(addr, l));
        if let Some(list) = own.get(&key) {
            out.extend_from_slice(list);
        }
    }
    out
}

fn truncate(addr: &[u8], len: u8) -> Vec<u8> {
    let mut out = addr.to_vec();
    for (i, b) in out.iter_mut().enumerate() {
        let bit = (i * 8) as u32;
        let keep = u32::from(len).saturating_sub(bit).min(8);
        *b &= if keep == 0 { 0 } else { 0xffu8 << (8 - keep) };
    }
    out
}

fn addr_bytes(a: IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn show(addr: &[u8]) -> String {
    match addr.len() {
        4 => IpAddr::from(<[u8; 4]>::try_from(addr).expect("4 bytes")).to_string(),
        _ => IpAddr::from(<[u8; 16]>::try_from(addr).expect("16 bytes")).to_string(),
    }
}

/// What the kernel decides for a destination: `(action, rule)` of the first matching port
/// rule of the longest matching prefix. Mirrors `sandbox-ebpf/src/net.rs`, for `explain`.
pub fn lookup(v4: &[Entry<4>], v6: &[Entry<16>], addr: IpAddr, port: u16) -> Option<(u8, u16)> {
    let addr = embedded_v4(addr).map_or(addr, IpAddr::V4);
    let first = |rules: &NetRules| {
        rules.rules[..rules.count as usize]
            .iter()
            .find(|r| port >= r.port_lo && port <= r.port_hi)
            .map(|r| (r.action, r.rule))
    };
    match addr {
        IpAddr::V4(a) => {
            let b = a.octets();
            v4.iter()
                .filter(|e| truncate(&b, e.prefix_len) == e.addr)
                .max_by_key(|e| e.prefix_len)
                .and_then(|e| first(&e.rules))
        }
        IpAddr::V6(a) => {
            let b = a.octets();
            v6.iter()
                .filter(|e| truncate(&b, e.prefix_len) == e.addr)
                .max_by_key(|e| e.prefix_len)
                .and_then(|e| first(&e.rules))
        }
    }
}

/// Where the kernel sends the unspecified address (`0.0.0.0`, `::`, `::ffff:0.0.0.0`): the
/// loopback address of the same form, and for `::` IPv4's too (from a socket bound to an
/// IPv4-mapped address). A destination there passes the rules of each (mirrors
/// `verdict` in `sandbox-ebpf/src/addr.rs`).
pub fn unspecified_as_loopback(addr: IpAddr) -> Vec<IpAddr> {
    match addr {
        IpAddr::V4(a) if a.is_unspecified() => vec![Ipv4Addr::LOCALHOST.into()],
        IpAddr::V6(a) if a.is_unspecified() => {
            vec![Ipv6Addr::LOCALHOST.into(), Ipv4Addr::LOCALHOST.into()]
        }
        IpAddr::V6(a) if a.to_ipv4_mapped().is_some_and(|v4| v4.is_unspecified()) => {
            vec![Ipv4Addr::LOCALHOST.to_ipv6_mapped().into()]
        }
        _ => Vec::new(),
    }
}

/// IPv4 reached through an IPv6 address: mapped, NAT64 and 6to4.
pub fn embedded_v4(addr: IpAddr) -> Option<std::net::Ipv4Addr> {
    let IpAddr::V6(a) = addr else { return None };
    let o = a.octets();
    let mapped = o[..10].iter().all(|b| *b == 0) && o[10] == 0xff && o[11] == 0xff;
    let nat64 = o[..4] == [0x00, 0x64, 0xff, 0x9b] && o[4..12].iter().all(|b| *b == 0);
    if mapped || nat64 {
        return Some([o[12], o[13], o[14], o[15]].into());
    }
    if o[0] == 0x20 && o[1] == 0x02 {
        return Some([o[2], o[3], o[4], o[5]].into());
    }
    None
}
