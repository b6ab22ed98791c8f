//! `allow_hosts`: names resolved by sandbox (outside the sandbox), addresses allowed while
//! their answer's TTL lasts, private answers never installed, the host's resolvers
//! reachable for DNS only; never this host's own addresses, nor what `network.deny` names.

use sandbox_tests::*;

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn allow_hosts_and_dns_resolvers() {
    let d = workdir("allow_hosts");
    // Name resolution in the guest: names from /etc/hosts, one nameserver for allow_dns
    // (nothing answers there: the DNS lookups fail and /etc/hosts is what counts).
    let _etc = Resolution::set(
        "93.184.216.34 example.test\n10.1.1.1 internal.test\n",
        "10.0.0.53",
    );
    let policy = "network:\n  allow_hosts: ['example.test:443', internal.test]\n";
    let r = check(
        &d,
        Some(policy),
        &[
            ("connect 93.184.216.34 443", ENETUNREACH),
            ("connect 93.184.216.34 80", EPERM),
            ("connect 93.184.216.35 443", EPERM),
            // A name that resolves to a private address does not open it.
            ("connect 10.1.1.1 443", EPERM),
            // The host's resolver is reachable for DNS, and only for DNS.
            ("udp 10.0.0.53 53", ENETUNREACH),
            ("connect 10.0.0.53 80", EPERM),
        ],
    );
    assert!(
        r.stderr
            .contains("internal.test resolves to 10.1.1.1, a private address: not allowed"),
        "{}",
        r.stderr
    );
    r.check_records(&[rec("/dst_endpoint/ip", "93.184.216.35")
        .some()
        .has("/unmapped/rule", "network.default")
        .has("/unmapped/reason", "not_in_network_allowlist")]);
}

/// `allow_hosts` follows DNS: an address is allowed while the TTL of its answer lasts; when
/// the name moves, the old address is refused once its TTL is over and the new one allowed.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn allow_hosts_follow_dns_ttl() {
    let d = workdir("allow_hosts_ttl");
    let _etc = Resolution::set("", "127.0.0.1");
    let dns = DnsServer::start(vec![([93, 184, 216, 34], 3), ([93, 184, 216, 40], 60)]);
    let r = check(
        &d,
        Some("network:\n  allow_hosts: [moving.test]\n"),
        &[
            // First answer: .34 for 3 s.
            ("connect 93.184.216.34 443", ENETUNREACH),
            ("connect 93.184.216.40 443", EPERM),
            ("sleep 6000", OK),
            // Asked again when the TTL ran out: the name moved to .40.
            ("connect 93.184.216.34 444", EPERM),
            ("connect 93.184.216.40 444", ENETUNREACH),
        ],
    );
    let questions = dns.questions();
    assert!(
        (2..=4).contains(&questions),
        "one lookup at start, one per TTL after: {questions} A questions\n{}",
        r.stderr
    );
    let blocked = |ip| {
        rec("/dst_endpoint/ip", ip)
            .has("/unmapped/rule", "network.default")
            .has("/disposition", "Blocked")
    };
    r.check_records(&[blocked("93.184.216.40"), blocked("93.184.216.34")]);
}

/// A name never opens this host, nor what the policy denies by name: an answer that is one
/// of the host's own addresses stays denied as the host's (it reaches the host's own
/// services, as loopback does), and an explicit `network.deny` port of an allowed address
/// stays denied. First, a public answer is allowed (the connect gets as far as the route).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn allow_hosts_never_open_this_host_nor_a_denied_port() {
    let d = workdir("allow_hosts_own");
    let _etc = Resolution::set("", "127.0.0.1");
    let _own = HostAddr::add("93.184.216.50", 32);
    // .34 for 4 s, then this host's own address.
    let dns = DnsServer::start(vec![([93, 184, 216, 34], 4), ([93, 184, 216, 50], 60)]);
    let r = check(
        &d,
        Some("network:\n  allow_hosts: [moving.test]\n  deny: ['93.184.216.34:80']\n"),
        &[
            ("connect 93.184.216.34 443", ENETUNREACH),
            ("connect 93.184.216.34 80", EPERM),
            ("sleep 6000", OK),
            // Asked again: the name is now this host (nothing listens there: without the
            // deny this would be ECONNREFUSED).
            ("connect 93.184.216.50 443", EPERM),
        ],
    );
    let questions = dns.questions();
    assert!(
        questions >= 2,
        "the second answer was never asked for: {questions} A questions\n{}",
        r.stderr
    );
    r.check_records(&[
        rec("/dst_endpoint/ip", "93.184.216.34").has("/unmapped/rule", "network.deny[0]"),
        rec("/dst_endpoint/ip", "93.184.216.50")
            .has("/unmapped/rule", "network.block_private")
            .has(
                "/unmapped/rule_source",
                "93.184.216.50 (an address of this host)",
            ),
    ]);
}

/// An address the host gains while sandbox runs is never opened by a name either: a name
/// that had it before loses it as the host gains it, and the address's deny outlives that
/// name's answer (with `default: allow`, a deny lost when the answer expired would let the
/// connect through).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn allow_hosts_never_open_an_address_the_host_gained() {
    let d = workdir("allow_hosts_gained");
    let _etc = Resolution::set("", "127.0.0.1");
    let gained = "93.184.216.51";
    // The address for 3 s (allowed: not this host's yet), then elsewhere.
    let dns = DnsServer::start(vec![([93, 184, 216, 51], 3), ([93, 184, 216, 34], 60)]);
    let adder = std::thread::spawn(move || {
        wait_for_sandbox_run();
        HostAddr::add(gained, 32)
    });
    let r = check(
        &d,
        Some("network:\n  allow_hosts: [moving.test]\n  default: allow\n"),
        &[
            ("sleep 1000", OK),
            // The host has the address now, while the name's answer still has it.
            ("connect 93.184.216.51 443", EPERM),
            ("sleep 5000", OK),
            // The answer is over: the address is still this host's (nothing listens
            // there: without the deny this would be ECONNREFUSED).
            ("connect 93.184.216.51 443", EPERM),
        ],
    );
    let _gained = adder.join().unwrap();
    let questions = dns.questions();
    assert!(
        questions >= 2,
        "the later answer was never asked for: {questions} A questions\n{}",
        r.stderr
    );
    r.check_records(&[rec("/dst_endpoint/ip", gained)
        .count(2)
        .has("/unmapped/rule", "network.block_private")
        .has(
            "/unmapped/rule_source",
            "an address this host gained while sandbox ran",
        )]);
}
