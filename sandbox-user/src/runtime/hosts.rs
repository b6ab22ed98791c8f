//! `allow_hosts`: names resolved by the loader, each address allowed for as long as its DNS
//! answer may be used (its TTL), then asked for again.
//!
//! Each lookup asks the host's nameservers directly (`dns`, for the TTL) and `getaddrinfo`
//! (what libc programs see: /etc/hosts, search domains). An address stays allowed until the
//! TTL of the newest answer that contained it runs out, so a resolver that cached an answer
//! never sees its address refused early, and an address that left every answer is refused
//! once the last TTL for it is over. Private answers are never allowed: a name does not
//! open the private set (DNS rebinding).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use sandbox_common::{PortRule, net_action};

use crate::compile::{self, CompiledPolicy};
use crate::runtime::dns;

/// Shortest time an answer is used (TTL 0 would mean asking in a loop).
pub const TTL_FLOOR: Duration = Duration::from_secs(1);
/// Longest time between two lookups of a name, whatever its TTL.
pub const TTL_CEILING: Duration = Duration::from_mins(5);
/// Lifetime of addresses only `getaddrinfo` gave (no TTL is known for them).
pub const NO_TTL: Duration = Duration::from_mins(1);
/// Retry interval after a failed lookup.
pub const RETRY: Duration = Duration::from_secs(5);
/// Time allowed to each nameserver per question.
const DNS_TIMEOUT: Duration = Duration::from_secs(2);

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
/// names at once (a slow nameserver costs its timeout once, not once per name).
pub fn resolve(c: &CompiledPolicy) -> Round {
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
            if compile::net::is_private(addr) {
                round.warnings.push(format!(
                    "{}: {} resolves to {addr}, a private address: not allowed",
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
}

impl HostState {
    /// When the names are to be looked up next.
    pub fn next_lookup(&self) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.table.next_lookup(Instant::now()))
    }

    /// Looks every name of `c` up, off the event loop.
    pub fn start_lookup(c: &CompiledPolicy) -> tokio::task::JoinHandle<Round> {
        let c = c.clone();
        tokio::task::spawn_blocking(move || resolve(&c))
    }

    /// Takes in a round of answers and installs the result.
    pub fn install(
        &mut self,
        round: &Round,
        enforcer: &mut crate::kernel::loader::Enforcer,
        c: &CompiledPolicy,
    ) -> Result<(), crate::kernel::loader::LoadError> {
        self.table.update(round, Instant::now());
        let want = self.table.want(c);
        enforcer.set_hosts(c, &want, &mut self.installed)
    }

    /// Installs what a lookup found; expired addresses leave even when it failed (fail
    /// closed). Returns when to look up next.
    pub fn take_round(
        &mut self,
        done: Result<Round, tokio::task::JoinError>,
        enforcer: &mut crate::kernel::loader::Enforcer,
        c: &CompiledPolicy,
    ) -> Result<tokio::time::Instant, crate::kernel::loader::LoadError> {
        let round = done.unwrap_or_else(|_| Round {
            failed: true,
            ..Round::default()
        });
        self.install(&round, enforcer, c)?;
        Ok(self.next_lookup())
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
    /// Takes in a round of answers received at `now`, then forgets what has expired.
    pub fn update(&mut self, round: &Round, now: Instant) {
        for a in &round.answers {
            let until = now + a.ttl;
            let e = self.expires.entry((a.host, a.addr)).or_insert(until);
            *e = (*e).max(until);
        }
        self.expires.retain(|_, until| *until > now);
        self.failed = round.failed;
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
