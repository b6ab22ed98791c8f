//! `allow_hosts`: names resolved by the loader, each address allowed for as long as its DNS
//! answer may be used (its TTL), then asked for again.
//!
//! Each lookup asks the host's nameservers directly (`dns`, for the TTL) and `getaddrinfo`
//! (what libc programs see: /etc/hosts, search domains). An address stays allowed until the
//! TTL of the newest answer that contained it runs out, so a resolver that cached an answer
//! never sees its address refused early, and an address that left every answer is refused
//! once the last TTL for it is over, whether or not a lookup is under way then (at most
//! `EXPIRY_GRACE` later). Private answers and this host's own addresses are never allowed:
//! a name does not open the private set (DNS rebinding) nor the host's own services; nor
//! does it override an explicit `network.deny` (see `compile::net::host_entry`). At most
//! `MAX_HOST_ADDRESSES` addresses of a family are allowed at once (the room the maps have).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use sandbox_common::{PortRule, net_action};

use crate::compile::{self, CompiledPolicy};
use crate::kernel::loader::{Enforcer, LoadError, MAX_HOST_ADDRESSES};
use crate::runtime::dns;

/// Shortest time an answer is used (TTL 0 would mean asking in a loop).
pub const TTL_FLOOR: Duration = Duration::from_secs(1);
/// Longest time between two lookups of a name, whatever its TTL.
pub const TTL_CEILING: Duration = Duration::from_mins(5);
/// Lifetime of addresses only `getaddrinfo` gave (no TTL is known for them).
pub const NO_TTL: Duration = Duration::from_mins(1);
/// Retry interval after a failed lookup.
pub const RETRY: Duration = Duration::from_secs(5);
/// Time allowed to each nameserver per question (the whole exchange, UDP and TCP).
const DNS_TIMEOUT: Duration = Duration::from_secs(2);
/// How long past an address's expiry a lookup under way is waited for before the address
/// leaves anyway (a lookup that ends in time renews it without a gap).
pub const EXPIRY_GRACE: Duration = Duration::from_secs(5);

/// Address -> allow rules: what the loader installs (`Enforcer::set_hosts`).
pub type HostMap = BTreeMap<IpAddr, Vec<PortRule>>;

/// One address of one `allow_hosts` entry and how long it may be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Index into `CompiledPolicy::net.hosts`.
    pub host: usize,
    pub addr: IpAddr,
    pub ttl: Duration,
}

/// The answers of one round of lookups.
#[derive(Debug, Default)]
pub struct Round {
    pub answers: Vec<Answer>,
    pub warnings: Vec<String>,
    /// Some name could not be resolved at all: ask again soon.
    pub failed: bool,
}

/// Resolves every `allow_hosts` name of `c` with the nameservers of /etc/resolv.conf, all
/// names at once (a slow nameserver costs its timeout once, not once per name). `own`: the
/// addresses and local prefixes this host has had while sandbox ran (never allowed, as
/// private ones).
pub fn resolve(c: &CompiledPolicy, own: &compile::net::HostNets) -> Round {
    let servers =
        crate::policy::resolvers(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    let names: Vec<Result<BTreeMap<IpAddr, Duration>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = c
            .net
            .hosts
            .iter()
            .map(|(h, _)| s.spawn(|| addresses(&h.host, &servers)))
            .collect();
        handles
            .into_iter()
            .map(|t| t.join().unwrap_or_else(|_| Err("lookup failed".into())))
            .collect()
    });
    let mut round = Round::default();
    for (i, ((h, _), found)) in c.net.hosts.iter().zip(names).enumerate() {
        let ttl = match found {
            Ok(t) => t,
            Err(why) => {
                round.failed = true;
                round
                    .warnings
                    .push(format!("{}: cannot resolve {}: {why}", h.field, h.host));
                continue;
            }
        };
        for (addr, t) in ttl {
            if let Some(what) = compile::net::host_refusal(&c.net, addr, own) {
                round.warnings.push(format!(
                    "{}: {} resolves to {addr}, {what}: not allowed",
                    h.field, h.host
                ));
                continue;
            }
            round.answers.push(Answer {
                host: i,
                addr,
                ttl: t.clamp(TTL_FLOOR, TTL_CEILING),
            });
        }
    }
    round
}

/// Addresses of one name and their TTLs: DNS answers, plus what `getaddrinfo` adds (with
/// `NO_TTL`). An error when neither knows an address.
fn addresses(host: &str, servers: &[IpAddr]) -> Result<BTreeMap<IpAddr, Duration>, String> {
    let mut ttl: BTreeMap<IpAddr, Duration> = BTreeMap::new();
    let dns_error = match dns::lookup(host, servers, DNS_TIMEOUT) {
        Ok(records) => {
            for r in records {
                let t = Duration::from_secs(u64::from(r.ttl));
                let e = ttl.entry(r.addr).or_insert(t);
                *e = (*e).max(t);
            }
            None
        }
        Err(e) => Some(e),
    };
    let libc_error = match std::net::ToSocketAddrs::to_socket_addrs(&(host, 0u16)) {
        Ok(addrs) => {
            for a in addrs {
                ttl.entry(a.ip()).or_insert(NO_TTL);
            }
            None
        }
        Err(e) => Some(e.to_string()),
    };
    if ttl.is_empty() {
        return Err(dns_error
            .or(libc_error)
            .unwrap_or_else(|| "no address".into()));
    }
    Ok(ttl)
}

/// The `allow_hosts` state of one loaded policy: what is allowed until when, and what is
/// installed in the kernel.
#[derive(Debug, Default)]
pub struct HostState {
    pub table: HostTable,
    pub installed: HostMap,
    /// The last round found more addresses than fit (warned once until it no longer does).
    capped: bool,
}

impl HostState {
    /// When the names are to be looked up next.
    pub fn next_lookup(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.table.next_lookup(Instant::now()))
    }

    /// When addresses whose TTL is over leave even if a lookup is still under way: the
    /// first expiry plus [`EXPIRY_GRACE`] (in `TTL_CEILING` when nothing is allowed).
    pub fn next_expiry(&self) -> tokio::time::Instant {
        let at = self
            .table
            .first_expiry()
            .map_or_else(|| Instant::now() + TTL_CEILING, |t| t + EXPIRY_GRACE);
        tokio::time::Instant::from_std(at)
    }

    /// Looks every name of `c` up, off the event loop.
    pub fn start_lookup(
        c: &CompiledPolicy,
        own: &compile::net::HostNets,
    ) -> tokio::task::JoinHandle<Round> {
        let (c, own) = (c.clone(), own.clone());
        tokio::task::spawn_blocking(move || resolve(&c, &own))
    }

    /// Takes in a round of answers and installs the result (see [`HostState::sync`]).
    pub fn install(
        &mut self,
        round: &Round,
        enforcer: &mut Enforcer,
        c: &CompiledPolicy,
        own: &compile::net::HostNets,
    ) -> Result<(), LoadError> {
        let dropped = self.table.update(round, Instant::now());
        if dropped > 0 && !self.capped {
            tracing::warn!(
                "allow_hosts: the names resolve to more than {MAX_HOST_ADDRESSES} addresses of \
                 one family; {dropped} answer(s) not allowed (those allowed first are kept)"
            );
        }
        self.capped = dropped > 0;
        self.sync(enforcer, c, own)
    }

    /// Makes the kernel's entries what the table allows now: expired addresses leave, and
    /// none of `own` (this host's addresses) is allowed. On an error the entries that could
    /// not be written stay as they were (the next call tries again).
    pub fn sync(
        &mut self,
        enforcer: &mut Enforcer,
        c: &CompiledPolicy,
        own: &compile::net::HostNets,
    ) -> Result<(), LoadError> {
        self.table.expire(Instant::now());
        let want = self.table.want(c);
        enforcer.set_hosts(c, &want, &mut self.installed, own)
    }

    /// Installs what a lookup found; expired addresses leave even when it failed (fail
    /// closed).
    pub fn take_round(
        &mut self,
        done: Result<Round, tokio::task::JoinError>,
        enforcer: &mut Enforcer,
        c: &CompiledPolicy,
        own: &compile::net::HostNets,
    ) -> Result<(), LoadError> {
        let round = done.unwrap_or_else(|_| Round {
            failed: true,
            ..Round::default()
        });
        self.install(&round, enforcer, c, own)
    }
}

/// Which (name, address) pairs are allowed, and until when.
#[derive(Debug, Default, Clone)]
pub struct HostTable {
    expires: BTreeMap<(usize, IpAddr), Instant>,
    /// When the last round had a failure.
    failed: bool,
}

impl HostTable {
    /// Takes in a round of answers received at `now`, after forgetting what has expired.
    /// New addresses are taken one name at a time in turn while fewer than
    /// `MAX_HOST_ADDRESSES` of their family are allowed; returns how many answers were
    /// left out for that (addresses already allowed are always renewed).
    pub fn update(&mut self, round: &Round, now: Instant) -> usize {
        self.expire(now);
        let mut addrs: BTreeSet<IpAddr> = self.expires.keys().map(|(_, a)| *a).collect();
        let mut count = [0usize; 2];
        for a in &addrs {
            count[usize::from(a.is_ipv6())] += 1;
        }
        let mut by_name: BTreeMap<usize, Vec<&Answer>> = BTreeMap::new();
        for a in &round.answers {
            by_name.entry(a.host).or_default().push(a);
        }
        let longest = by_name.values().map(Vec::len).max().unwrap_or(0);
        let mut dropped = 0;
        for i in 0..longest {
            for a in by_name.values().filter_map(|v| v.get(i)) {
                let until = now + a.ttl;
                if let Some(e) = self.expires.get_mut(&(a.host, a.addr)) {
                    *e = (*e).max(until);
                    continue;
                }
                if !addrs.contains(&a.addr) {
                    let n = &mut count[usize::from(a.addr.is_ipv6())];
                    if *n >= MAX_HOST_ADDRESSES {
                        dropped += 1;
                        continue;
                    }
                    *n += 1;
                    addrs.insert(a.addr);
                }
                self.expires.insert((a.host, a.addr), until);
            }
        }
        self.expires.retain(|_, until| *until > now);
        self.failed = round.failed;
        dropped
    }

    /// Forgets the (name, address) pairs whose time is over at `now`.
    pub fn expire(&mut self, now: Instant) {
        self.expires.retain(|_, until| *until > now);
    }

    /// When the first pair's time is over.
    pub fn first_expiry(&self) -> Option<Instant> {
        self.expires.values().min().copied()
    }

    /// When to ask again: as the first address expires, and at least every `TTL_CEILING`
    /// (every `RETRY` after a failure).
    pub fn next_lookup(&self, now: Instant) -> Instant {
        let mut next = now + if self.failed { RETRY } else { TTL_CEILING };
        if let Some(first) = self.expires.values().min() {
            next = next.min(*first);
        }
        next.max(now + TTL_FLOOR)
    }

    /// The addresses to install, with the rules of the entries that named them.
    pub fn want(&self, c: &CompiledPolicy) -> HostMap {
        let mut map = HostMap::new();
        for (host, addr) in self.expires.keys() {
            let Some((h, rule)) = c.net.hosts.get(*host) else {
                continue;
            };
            let r = PortRule {
                port_lo: h.ports.0,
                port_hi: h.ports.1,
                rule: *rule,
                action: net_action::ALLOW,
                _pad: 0,
            };
            let list = map.entry(*addr).or_default();
            if !list.contains(&r) {
                list.push(r);
            }
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(host: usize, addr: &str, secs: u64) -> Answer {
        Answer {
            host,
            addr: addr.parse().unwrap(),
            ttl: Duration::from_secs(secs),
        }
    }

    fn round(answers: Vec<Answer>) -> Round {
        Round {
            answers,
            ..Round::default()
        }
    }

    fn allowed(t: &HostTable) -> Vec<String> {
        t.expires.keys().map(|(_, a)| a.to_string()).collect()
    }

    #[test]
    fn addresses_live_until_their_ttl_then_leave() {
        let t0 = Instant::now();
        let mut t = HostTable::default();
        t.update(
            &round(vec![answer(0, "1.1.1.1", 30), answer(0, "2.2.2.2", 10)]),
            t0,
        );
        assert_eq!(t.next_lookup(t0), t0 + Duration::from_secs(10));
        // The next answer no longer has 2.2.2.2 and moves to 3.3.3.3: 2.2.2.2 is gone as
        // its TTL is over, 1.1.1.1 stays for the rest of its TTL.
        let t1 = t0 + Duration::from_secs(10);
        t.update(&round(vec![answer(0, "3.3.3.3", 10)]), t1);
        assert_eq!(allowed(&t), ["1.1.1.1", "3.3.3.3"]);
        let t2 = t0 + Duration::from_secs(30);
        t.update(&round(vec![answer(0, "3.3.3.3", 10)]), t2);
        assert_eq!(allowed(&t), ["3.3.3.3"]);
        // A failed round keeps nothing past its TTL and asks again soon.
        let t3 = t2 + Duration::from_secs(10);
        t.update(
            &Round {
                failed: true,
                ..Round::default()
            },
            t3,
        );
        assert!(allowed(&t).is_empty());
        assert_eq!(t.next_lookup(t3), t3 + RETRY);
    }

    /// A huge answer (a TCP answer holds thousands of records) does not take more room than
    /// the maps have: at most `MAX_HOST_ADDRESSES` per family, new addresses taken one name
    /// at a time in turn, those already allowed kept and renewed.
    #[test]
    fn addresses_are_capped_per_family() {
        let t0 = Instant::now();
        let mut t = HostTable::default();
        let mut answers: Vec<Answer> = (0..2000u32)
            .map(|i| Answer {
                host: 0,
                addr: IpAddr::V4((0x0500_0000 + i).into()),
                ttl: Duration::from_mins(1),
            })
            .collect();
        answers.extend([
            answer(1, "9.9.9.1", 60),
            answer(1, "9.9.9.2", 60),
            answer(1, "2001:db8::1", 60),
        ]);
        assert_eq!(t.update(&round(answers), t0), 2002 - MAX_HOST_ADDRESSES);
        let v4 = |t: &HostTable| t.expires.keys().filter(|(_, a)| a.is_ipv4()).count();
        assert_eq!(v4(&t), MAX_HOST_ADDRESSES);
        for a in ["9.9.9.1", "9.9.9.2", "2001:db8::1"] {
            assert!(allowed(&t).contains(&a.to_owned()), "{a}: names take turns");
        }
        // Full: an address already allowed is renewed, a new one is left out.
        let t1 = t0 + Duration::from_secs(30);
        let more = round(vec![answer(1, "9.9.9.1", 60), answer(0, "6.0.0.1", 60)]);
        assert_eq!(t.update(&more, t1), 1);
        assert_eq!(
            t.expires[&(1, "9.9.9.1".parse().unwrap())],
            t1 + Duration::from_mins(1)
        );
        // Once the old ones expired there is room again.
        let t2 = t0 + Duration::from_secs(61);
        assert_eq!(t.update(&round(vec![answer(0, "6.0.0.1", 60)]), t2), 0);
        assert_eq!(allowed(&t), ["6.0.0.1", "9.9.9.1"]);
    }

    /// Expiry needs no lookup round: what is over leaves on its own, and the session's
    /// expiry timer follows the first expiry (plus the grace a lookup under way gets).
    #[test]
    fn addresses_expire_without_a_round() {
        let t0 = Instant::now();
        let mut s = HostState::default();
        s.table.update(
            &round(vec![answer(0, "1.1.1.1", 10), answer(0, "2.2.2.2", 20)]),
            t0,
        );
        assert_eq!(s.table.first_expiry(), Some(t0 + Duration::from_secs(10)));
        assert_eq!(
            s.next_expiry().into_std(),
            t0 + Duration::from_secs(10) + EXPIRY_GRACE
        );
        s.table.expire(t0 + Duration::from_secs(15));
        assert_eq!(allowed(&s.table), ["2.2.2.2"]);
        s.table.expire(t0 + Duration::from_secs(20));
        assert!(s.table.first_expiry().is_none());
    }

    #[test]
    fn lookups_are_neither_too_often_nor_too_rare() {
        let t0 = Instant::now();
        let mut t = HostTable::default();
        t.update(&round(vec![]), t0);
        assert_eq!(t.next_lookup(t0), t0 + TTL_CEILING);
        t.update(&round(vec![answer(0, "1.1.1.1", 1)]), t0);
        assert_eq!(t.next_lookup(t0), t0 + TTL_FLOOR);
    }
}
