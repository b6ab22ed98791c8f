//! Network rules: the built-in private set (with IPv4 embedded in IPv6), `allow` and `deny`
//! with ports, and sends that carry their own destination (UDP, TCP Fast Open).
//!
//! The guest has no network (`-nic none`): a connect or send the sandbox lets through gets
//! the kernel's own answer, `ENETUNREACH`, and nothing can leave.

use sandbox_tests::*;

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn connect_private_and_metadata_denied_public_allowed() {
    let d = workdir("connect");
    // The built-in default policy: block_private is on.
    let r = check(
        &d,
        None,
        &[
            ("connect 169.254.169.254 80", EPERM),
            ("connect ::ffff:169.254.169.254 80", EPERM),
            ("connect ::ffff:10.0.0.1 443", EPERM),
            ("connect 64:ff9b::a9fe:a9fe 80", EPERM),
            ("connect 2002:a9fe:a9fe::1 80", EPERM),
            ("connect 127.1.2.3 80", EPERM),
            ("connect 0.0.0.0 80", EPERM),
            ("connect ::0 80", EPERM),
            ("connect ::1 80", EPERM),
            ("connect fe80::1 80", EPERM),
            ("connect fd00::1 80", EPERM),
            // IPv4-compatible (a `sit` tunnel's), a site's own NAT64, site-local.
            ("connect ::a00:1 80", EPERM),
            ("connect 64:ff9b:1::a00:1 80", EPERM),
            ("connect fec0::1 80", EPERM),
            ("connect 100.64.0.1 80", EPERM),
            ("udp 10.1.2.3 53", ANY),
            // A public address is not ours to deny: the kernel's own answer (no route)
            // comes back, and no audit record is written.
            ("connect 8.8.8.8 53", ENETUNREACH),
        ],
    );
    r.check_records(&[
        rec("/dst_endpoint/ip", "8.8.8.8").count(0),
        rec("/dst_endpoint/ip", "169.254.169.254")
            .has("/dst_endpoint/port", 80)
            .has("/class_uid", 4001)
            .has("/unmapped/rule", "network.block_private")
            .has("/unmapped/rule_source", "169.254.0.0/16")
            // The probe has exited by the time the record is read: the kernel supplied the
            // exe.
            .has(
                "/actor/process/file/path",
                bins().probe.display().to_string(),
            ),
        rec("/dst_endpoint/ip", "::ffff:10.0.0.1")
            .has("/connection_info/protocol_ver_id", 6)
            .has("/unmapped/rule_source", "10.0.0.0/8"),
    ]);
}

/// Sends that carry a destination reach it without `connect`: unconnected UDP (`sendto`,
/// `sendmsg`, `sendmmsg`) and TCP Fast Open. They get the decision `connect` would get.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn sends_with_an_address_get_the_connect_decision() {
    let d = workdir("sends");
    let r = check(
        &d,
        Some("network:\n  deny: ['198.51.0.0/16:9', '[2001:db8::/32]']\n"),
        &[
            ("udp 169.254.169.254 53", EPERM),
            ("sendmsg 10.1.2.3 53", EPERM),
            ("sendmmsg 127.0.0.1 9", EPERM),
            ("sendmmsg ::1 9", EPERM),
            ("tfo 169.254.169.253 80", EPERM),
            ("udp ::ffff:10.9.9.9 53", EPERM),
            ("udp 2001:db8::1 53", EPERM),
            ("sendmsg 198.51.1.1 9", EPERM),
            // Not denied: the kernel's own answer.
            ("sendmsg 198.51.1.1 10", ENETUNREACH),
            ("udp 8.8.8.8 53", ENETUNREACH),
            ("tfo 8.8.8.8 80", ENETUNREACH),
        ],
    );
    r.check_records(&[
        rec("/dst_endpoint/ip", "8.8.8.8").count(0),
        rec("/dst_endpoint/ip", "169.254.169.254")
            .has("/unmapped/activity", "send")
            .has("/dst_endpoint/port", 53)
            .has("/unmapped/rule", "network.block_private"),
        rec("/dst_endpoint/ip", "169.254.169.253")
            .has("/unmapped/activity", "send")
            .has("/dst_endpoint/port", 80),
        rec("/dst_endpoint/ip", "2001:db8::1").has("/unmapped/rule", "network.deny[1]"),
        // sendmmsg is checked per message and stops at the first refused one.
        rec("/dst_endpoint/ip", "127.0.0.1"),
    ]);
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn network_allow_punches_through_with_ports_and_ipv6_rules() {
    let d = workdir("net_rules");
    // A real listener on loopback, outside the sandbox.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let policy = format!(
        "network:\n  allow: ['127.0.0.1:{port}']\n  deny: ['93.184.216.0/24:80-90', '[2001:db8::/32]:443']\n"
    );
    let allowed = format!("connect 127.0.0.1 {port}");
    let other = format!("connect 127.0.0.1 {}", port + 1);
    let r = check(
        &d,
        Some(&policy),
        &[
            (&allowed, OK),
            (&other, EPERM),
            ("connect 93.184.216.34 85", EPERM),
            ("connect 93.184.216.34 443", ENETUNREACH),
            ("connect 2001:db8::1 443", EPERM),
            ("connect 2001:db8::1 80", ENETUNREACH),
        ],
    );
    r.check_records(&[
        rec("/dst_endpoint/ip", "93.184.216.34").has("/unmapped/rule", "network.deny[0]"),
        rec("/dst_endpoint/ip", "2001:db8::1").has("/unmapped/rule", "network.deny[1]"),
    ]);
    drop(listener);
}

/// Socket options that take packets past the address judged: `TCP_ULP` "smc" (the socket
/// becomes an `AF_SMC` one, whose connect, send and listen go through the kernel's own TCP
/// socket, past every hook; until 7.0), which any user may set, and a source route
/// (`IP_OPTIONS`: the packet goes to the route's first hop), also as a control message of
/// one send (`IP_RETOPTS`), which needs `CAP_NET_RAW` (a root command that kept it). Each
/// works outside; inside they are refused.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn socket_options_that_route_past_the_policy_are_refused() {
    let d = workdir_as(User::Agent, "sockopts");
    let (major, _) = kernel_version();
    // The SMC upper layer is in the guest's kernels before 7.0 (its module is loaded).
    let smc_outside = probe_outside_as(User::Agent, &["tcp-ulp", "smc"]);
    if major < 7 {
        assert_eq!(smc_outside, OK, "the SMC route, outside");
    } else {
        assert_eq!(smc_outside, "ENOENT", "no SMC upper layer after 7.0");
    }
    // A flow label's request carries control messages (a routing header among them) that
    // every send with the label uses.
    assert_eq!(
        probe_outside_as(User::Agent, &["flowlabel"]),
        OK,
        "a flow label, outside"
    );
    let r = check_as(
        User::Agent,
        &d,
        None,
        &[
            ("tcp-ulp smc", EPERM),
            ("tcp-ulp tls", EPERM),
            ("flowlabel", EPERM),
        ],
    );
    r.check_records(&[rec("/unmapped/socket_option/option", "32")
        .has("/unmapped/reason", "socket_option")
        .has("/unmapped/socket_option/level", 41)]);
    r.check_records(&[rec("/unmapped/socket_option/option", "31")
        .count(2)
        .has("/unmapped/reason", "socket_option")
        .has("/unmapped/socket_option/level", 6)
        .has("/unmapped/activity", "setsockopt")
        .has(
            "/unmapped/rule",
            "(a socket option that routes past the network policy)",
        )]);
    // Source routes, as root with every capability: an address the guest cannot reach is
    // sent to through the route's first hop (loopback).
    assert_eq!(probe_outside(&["ip-options", "lsrr"]), OK);
    assert_eq!(probe_outside(&["udp", "8.8.8.8", "53"]), ENETUNREACH);
    assert_eq!(probe_outside(&["ip-retopts", "8.8.8.8", "53"]), OK);
    let r = check(
        &d,
        None,
        &[
            ("ip-options lsrr", EPERM),
            ("ip-retopts 8.8.8.8 53", EPERM),
            ("udp 8.8.8.8 53", ENETUNREACH),
        ],
    );
    r.check_records(&[
        rec("/unmapped/reason", "socket_option").count(2),
        rec("/unmapped/socket_option/option", "4").has("/unmapped/socket_option/level", 0),
        rec("/unmapped/socket_option/option", "7").has("/unmapped/socket_option/level", 0),
    ]);
}

/// The unspecified address is this host: the kernel connects and sends to `0.0.0.0`, `::`
/// and `::ffff:0.0.0.0` on loopback. A `deny` of loopback covers them (without
/// `block_private`, whose private set has them anyway).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn the_unspecified_address_is_judged_as_loopback() {
    let d = workdir_as(User::Agent, "unspecified");
    // A listener on every address, both families, outside the sandbox.
    let listener = std::net::TcpListener::bind("[::]:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    // (`::0`: a bare `::` separates the probe's operations.)
    let addrs = ["127.0.0.1", "0.0.0.0", "::0", "::ffff:0.0.0.0", "::1"];
    for a in addrs {
        assert_eq!(
            probe_outside_as(User::Agent, &["connect", a, &port]),
            OK,
            "outside: {a}"
        );
    }
    assert_eq!(
        probe_outside_as(User::Agent, &["udp", "0.0.0.0", &port]),
        OK
    );
    let policy = format!(
        "network:\n  block_private: false\n  deny: ['127.0.0.0/8:{port}', '[::1]:{port}']\n"
    );
    let mut cases: Vec<(String, &str)> = addrs
        .iter()
        .map(|a| (format!("connect {a} {port}"), EPERM))
        .collect();
    cases.push((format!("udp 0.0.0.0 {port}"), EPERM));
    cases.push((format!("udp ::0 {port}"), EPERM));
    // Only the ports denied: the rest of loopback answers as the kernel does.
    let other = std::net::TcpListener::bind("[::]:0").unwrap();
    let other_port = other.local_addr().unwrap().port();
    cases.push((format!("connect 0.0.0.0 {other_port}"), OK));
    let refs: Vec<(&str, &str)> = cases.iter().map(|(c, e)| (c.as_str(), *e)).collect();
    let r = check_as(User::Agent, &d, Some(&policy), &refs);
    // `::` from a socket bound to an IPv4-mapped address reaches 127.0.0.1: a deny of IPv4
    // loopback alone covers it.
    let mapped = ["connect-mapped", "::0", &port];
    assert_eq!(
        probe_outside_as(User::Agent, &mapped),
        OK,
        "outside: {mapped:?}"
    );
    let v4_only = format!("network:\n  block_private: false\n  deny: ['127.0.0.1:{port}']\n");
    check_as(
        User::Agent,
        &d,
        Some(&v4_only),
        &[
            (format!("connect-mapped ::0 {port}").as_str(), EPERM),
            (format!("connect ::1 {port}").as_str(), OK),
        ],
    );
    r.check_records(&[
        // connect and send each.
        rec("/dst_endpoint/ip", "0.0.0.0")
            .count(2)
            .has("/unmapped/rule", "network.deny[0]"),
        rec("/dst_endpoint/ip", "::")
            .count(2)
            .has("/unmapped/rule", "network.deny[1]"),
        rec("/dst_endpoint/ip", "::ffff:0.0.0.0").has("/unmapped/rule", "network.deny[0]"),
    ]);
    drop((listener, other));
}

/// `sendmmsg` asks the LSM hook about the first of its messages to one address only: the
/// kernel sends the others to the same address past it (`sock_sendmsg_nosec`), control
/// messages and all. Any user may put an IPv6 routing header in one (type 2, one
/// address), which takes the packet to the header's address instead. The packets of the
/// sandbox's sockets are checked once built (`cgroup_skb/egress`): one with a routing
/// header is dropped.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn routing_headers_sent_past_the_hook_are_dropped() {
    let d = workdir_as(User::Agent, "rthdr");
    // Outside, as the agent: the header sends the packet to its address (an unreachable
    // one: the kernel's no-route answer), also as the second message of a sendmmsg.
    for (op, want) in [
        (["rthdr-send", "::1", "9", "2001:db8::9"], ENETUNREACH),
        (["rthdr-send", "::1", "9", "::1"], OK),
        (["rthdr-sendmmsg", "::1", "9", "2001:db8::9"], "SENT1"),
        (["rthdr-sendmmsg", "::1", "9", "::1"], "SENT2"),
        // A segment routing header set on the socket: to its segment (loopback), not to
        // the address sent to.
        (["srh-send", "2001:db8::9", "9", "::1"], OK),
    ] {
        assert_eq!(probe_outside_as(User::Agent, &op), want, "outside: {op:?}");
    }
    let r = check_as(
        User::Agent,
        &d,
        Some("network:\n  allow: ['[::1]:9']\n"),
        &[
            // One message: the hook refuses its control message.
            ("rthdr-send ::1 9 ::1", EPERM),
            // The second message passes no hook: its packet is dropped.
            ("rthdr-sendmmsg ::1 9 ::1", "SENT1"),
            // Messages without one are sent.
            ("sendmmsg ::1 9", OK),
            // The option is refused (and were it not, `egress` drops type 4 too: the
            // fallback's test shows it).
            ("srh-send 2001:db8::9 9 ::1", "SETSOCKOPT-EPERM"),
        ],
    );
    // The hook's refusals are recorded (the control message, the option); the dropped
    // packet is not (no sender to name).
    r.check_records(&[rec("/unmapped/reason", "socket_option")
        .count(2)
        .has("/unmapped/socket_option/level", 41)
        .has("/unmapped/socket_option/option", 57)
        .has("/unmapped/activity", "setsockopt")]);
    // IPv4, as root (IP_RETOPTS is refused to the agent's user by the kernel): a loose
    // source route (behind a NOP) in the second message; a record route there, which
    // routes nowhere. Outside, both messages are sent.
    for op in ["ip-retopts-sendmmsg", "ip-rr-sendmmsg"] {
        let route = [op, "127.0.0.1", "9"];
        assert_eq!(probe_outside(&route), "SENT2", "outside: {route:?}");
    }
    check(
        &d,
        Some("network:\n  allow: ['127.0.0.1:9']\n"),
        &[
            // The second message passes no hook: its packet is dropped.
            ("ip-retopts-sendmmsg 127.0.0.1 9", "SENT1"),
            // Options without a route are walked and sent.
            ("ip-rr-sendmmsg 127.0.0.1 9", "SENT2"),
            ("sendmmsg 127.0.0.1 9", OK),
        ],
    );
}

/// A ping socket (`SOCK_DGRAM` with `IPPROTO_ICMP`/`ICMPV6`, open to any user the guest's
/// `ping_group_range` names: Debian's default names every group) sends an echo request
/// to the address whatever port `sendto` or `connect` named. A rule that opens one port
/// of a host does not open the host to ICMP; a rule without a port does.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn ping_sockets_are_judged_without_a_port() {
    std::fs::write("/proc/sys/net/ipv4/ping_group_range", "0 2147483647").unwrap();
    let d = workdir_as(User::Agent, "ping");
    // Outside, as the agent: the echo replies come back, the port named or not.
    for op in [
        ["ping", "127.0.0.1", "443"],
        ["ping-connect", "127.0.0.1", "443"],
        ["ping", "::1", "443"],
        ["ping-connect", "::1", "443"],
    ] {
        assert_eq!(probe_outside_as(User::Agent, &op), OK, "outside: {op:?}");
    }
    // One port of loopback (block_private denies the rest): TCP to it is let through (no
    // listener: the kernel's refusal), an echo request is not; a whole host (127.0.0.2,
    // loopback too) is open to them.
    let r = check_as(
        User::Agent,
        &d,
        Some("network:\n  allow: ['127.0.0.1:443', '[::1]:443', 127.0.0.2]\n"),
        &[
            ("connect 127.0.0.1 443", "ECONNREFUSED"),
            ("ping 127.0.0.1 443", EPERM),
            ("ping-connect 127.0.0.1 443", EPERM),
            ("ping ::1 443", EPERM),
            ("ping-connect ::1 443", EPERM),
            ("ping 127.0.0.2 443", OK),
            ("ping-connect 127.0.0.2 7", OK),
        ],
    );
    r.check_records(&[
        rec("/dst_endpoint/ip", "127.0.0.1")
            .count(2)
            .has("/dst_endpoint/port", 0)
            .has("/unmapped/rule", "network.block_private"),
        rec("/dst_endpoint/ip", "::1")
            .count(2)
            .has("/dst_endpoint/port", 0),
    ]);
}

/// Raw sockets (listed in `network.sockets`, and `CAP_NET_RAW`: a root command that kept
/// it) have no port the kernel goes by: an ICMP one's sends are judged as port 0; one of a
/// protocol with ports (UDP) would write its own, one of a tunnel (GRE) an inner
/// destination, and one that writes its own IP header (`IP_HDRINCL`, `IPV6_HDRINCL` at
/// either level, or made with `IPPROTO_RAW`) sends where that header says, which no hook
/// reads: refused.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn raw_sockets_are_judged_without_a_port_and_write_no_header_of_their_own() {
    let d = workdir("raw");
    let cases = [
        "raw-send 127.0.0.1 9",
        "raw-udp 127.0.0.1",
        "raw-udp ::1",
        "raw-hdrincl 127.0.0.1",
        "raw-hdrincl ::1",
        "raw-hdrincl-solraw ::1",
        "socket 2 3 255",
        "socket 10 3 255",
        "socket 2 3 47",
    ];
    for op in cases {
        let words: Vec<&str> = op.split(' ').collect();
        assert_eq!(probe_outside(&words), OK, "outside: {op}");
    }
    let sockets = "network:\n  sockets: [unix, inet, inet6, netlink, raw]\n";
    // A port of one host; all of another (127.0.0.2, loopback too).
    let r = check(
        &d,
        Some(&format!("{sockets}  allow: ['127.0.0.1:9', 127.0.0.2]\n")),
        &[
            ("udp 127.0.0.1 9", OK),
            ("raw-send 127.0.0.2 9", OK),
            (cases[0], EPERM),
            (cases[1], EACCES),
            (cases[2], EACCES),
            (cases[3], EPERM),
            (cases[4], EPERM),
            (cases[5], EPERM),
            (cases[6], EACCES),
            (cases[7], EACCES),
            (cases[8], EACCES),
        ],
    );
    r.check_records(&[
        rec("/dst_endpoint/ip", "127.0.0.1")
            .has("/dst_endpoint/port", 0)
            .has("/unmapped/rule", "network.block_private"),
        rec("/unmapped/socket_option/level", "0").has("/unmapped/socket_option/option", 3),
        rec("/unmapped/socket_option/level", "41").has("/unmapped/socket_option/option", 36),
        rec("/unmapped/socket_option/level", "255").has("/unmapped/socket_option/option", 36),
        rec("/unmapped/socket/protocol", "17").count(2),
        rec("/unmapped/socket/protocol", "255").count(2),
        rec("/unmapped/socket/protocol", "47"),
    ]);
}
