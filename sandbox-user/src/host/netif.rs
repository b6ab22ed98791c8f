//! What reaches this host itself: the addresses of its network interfaces (`getifaddrs`)
//! and the prefixes its routing tables deliver locally (`NETLINK_ROUTE`): its addresses
//! again, the subnets' broadcast addresses, IPv6 anycast addresses (a router's
//! subnet-router anycast), and whole prefixes that are local (an address given with a
//! prefix on `lo` makes all of the prefix local; `ip route add local PREFIX dev lo`). A
//! connect or send to any of them reaches the host's own services just as loopback does,
//! so with `network.block_private` they join the private set.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

/// What reaches this host: every address of its interfaces (as a /32 or /128) and every
/// prefix its routes deliver to it (`local`, `broadcast`, `anycast`), sorted, without
/// duplicates, each as read. Empty when neither can be read.
pub fn local() -> Vec<IpNet> {
    let mut out: Vec<IpNet> = addresses().into_iter().map(IpNet::from).collect();
    // A dump the tables' changes interrupted is read again (their notice follows too).
    let mut routes = local_routes();
    for _ in 0..2 {
        if routes.is_ok() {
            break;
        }
        routes = local_routes();
    }
    match routes {
        Ok(routes) => out.extend(routes),
        Err(e) => tracing::warn!(
            "this host's routing tables could not be read ({e}): of what reaches this host, \
             only its interfaces' addresses are private"
        ),
    }
    // Not merged (`IpNet::aggregate`): two local /24s merged into a /23 that the policy
    // happens to name would put the host's deny after the policy's rules for it.
    out.sort();
    out.dedup();
    out
}

/// Every IPv4 and IPv6 address on an interface of this host, sorted, without duplicates.
/// Empty when the C library cannot list them.
pub fn addresses() -> Vec<IpAddr> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&raw mut head) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr whose family says which one it is.
            let family = i32::from(unsafe { (*ifa.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in (read unaligned: the
                // pointer is typed as the 2-aligned sockaddr).
                let sin = unsafe { ifa.ifa_addr.cast::<libc::sockaddr_in>().read_unaligned() };
                out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                    sin.sin_addr.s_addr,
                ))));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6 (read unaligned).
                let sin6 = unsafe { ifa.ifa_addr.cast::<libc::sockaddr_in6>().read_unaligned() };
                out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the list came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out.sort();
    out.dedup();
    out
}

/// The tables every lookup goes through (`RT_TABLE_DEFAULT`, `MAIN`, `LOCAL`: the rules
/// a host starts with; a `local` route is delivered here from any of them), and the route
/// types that deliver to this host, by family (`RTN_LOCAL`, `RTN_BROADCAST`,
/// `RTN_ANYCAST`; uapi/linux/rtnetlink.h). Tables only a policy rule looks in (`ip rule
/// fwmark ... lookup 100`: a transparent proxy's `local 0.0.0.0/0`) are not read.
const LOOKED_UP: [u32; 3] = [253, 254, 255];
const DELIVERED_HERE: [(i32, u8); 4] = [
    (libc::AF_INET, 2),
    (libc::AF_INET, 3),
    (libc::AF_INET6, 2),
    (libc::AF_INET6, 4),
];
/// Netlink message types and flags, and the attributes read (uapi/linux/netlink.h,
/// rtnetlink.h).
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_DUMP: u16 = 0x300;
const NLM_F_DUMP_INTR: u16 = 0x10;
const RTA_DST: u16 = 1;
const RTA_TABLE: u16 = 15;
/// `SOL_NETLINK`, `NETLINK_GET_STRICT_CHK`: the kernel filters the dump by route type
/// (a host with a full routing table sends a few routes, not all).
const SOL_NETLINK: i32 = 270;
const NETLINK_GET_STRICT_CHK: i32 = 12;

/// A `NETLINK_ROUTE` socket (`flags`: `SOCK_NONBLOCK` or none).
fn route_socket(flags: i32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket(2); the descriptor is owned right after.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor of ours.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// One netlink message of a datagram: its type, flags, sequence number, and what follows
/// its header; `Err` for one whose length does not fit.
struct Message<'a> {
    kind: u16,
    flags: u16,
    seq: u32,
    body: &'a [u8],
}

/// The messages of a datagram as read (`nlmsghdr`s, each 4-byte aligned).
fn messages(buf: &[u8]) -> impl Iterator<Item = Result<Message<'_>, ()>> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at + 16 > buf.len() {
            return None;
        }
        let u32_at = |i: usize| u32::from_ne_bytes(buf[i..i + 4].try_into().expect("4"));
        let len = u32_at(at) as usize;
        if len < 16 || at + len > buf.len() {
            at = buf.len();
            return Some(Err(()));
        }
        let m = Message {
            kind: u16::from_ne_bytes([buf[at + 4], buf[at + 5]]),
            flags: u16::from_ne_bytes([buf[at + 6], buf[at + 7]]),
            seq: u32_at(at + 8),
            body: &buf[at + 16..at + len],
        };
        at += (len + 3) & !3;
        Some(Ok(m))
    })
}

/// The prefixes of the routes (IPv4 and IPv6, of the tables every lookup goes through)
/// that deliver to this host.
fn local_routes() -> std::io::Result<Vec<IpNet>> {
    use std::os::fd::AsRawFd;
    let fd = route_socket(0)?;
    let one: i32 = 1;
    // SAFETY: an int option on our socket. Without it (before 4.20) the dump is of every
    // route, filtered below.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            SOL_NETLINK,
            NETLINK_GET_STRICT_CHK,
            (&raw const one).cast(),
            4,
        );
    }
    let mut out = Vec::new();
    for (seq, (family, kind)) in (1u32..).zip(DELIVERED_HERE) {
        // nlmsghdr (16 bytes), then rtmsg (12): family, dst_len, src_len, tos, table,
        // protocol, scope, type, flags.
        let mut req = [0u8; 28];
        req[0..4].copy_from_slice(&28u32.to_ne_bytes());
        req[4..6].copy_from_slice(&RTM_GETROUTE.to_ne_bytes());
        req[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
        req[8..12].copy_from_slice(&seq.to_ne_bytes());
        req[16] = u8::try_from(family).expect("AF_INET, AF_INET6");
        req[23] = kind;
        // SAFETY: sending our buffer on our socket (to the kernel: no address needed).
        if unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        read_dump(&fd, seq, &mut out)?;
    }
    Ok(out)
}

/// Reads one dump's answers (`seq`) until its end, adding the routes that deliver here.
fn read_dump(fd: &std::os::fd::OwnedFd, seq: u32, out: &mut Vec<IpNet>) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: reading into our buffer.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::other("the dump ended without its end"));
        }
        for m in messages(&buf[..n.unsigned_abs()]) {
            let Ok(m) = m else {
                return Err(std::io::Error::other("a malformed netlink message"));
            };
            if m.seq != seq {
                continue;
            }
            if m.flags & NLM_F_DUMP_INTR != 0 {
                // The tables changed during the dump: the change's notice makes the caller
                // read them again; this reading may have missed a route.
                return Err(std::io::Error::other("the dump was interrupted"));
            }
            // Both carry an error code (negative; 0 for none) after the header.
            let code = m
                .body
                .get(..4)
                .map_or(0, |b| i32::from_ne_bytes(b.try_into().expect("4")));
            match m.kind {
                NLMSG_DONE if code == 0 => return Ok(()),
                NLMSG_DONE | NLMSG_ERROR => {
                    return Err(std::io::Error::from_raw_os_error(-code));
                }
                RTM_NEWROUTE => out.extend(delivered_here(m.body)),
                _ => {}
            }
        }
    }
}

/// The prefix of one route (an `rtmsg` and its attributes), if it is in a table every
/// lookup goes through and delivers to this host.
fn delivered_here(msg: &[u8]) -> Option<IpNet> {
    let [family, dst_len, _, _, table, _, _, kind, ..] = *msg else {
        return None;
    };
    let mut table = u32::from(table);
    let mut dst: &[u8] = &[];
    let mut at = 12usize;
    while at + 4 <= msg.len() {
        let len = usize::from(u16::from_ne_bytes([msg[at], msg[at + 1]]));
        let kind = u16::from_ne_bytes([msg[at + 2], msg[at + 3]]);
        if len < 4 || at + len > msg.len() {
            break;
        }
        let data = &msg[at + 4..at + len];
        match kind {
            RTA_DST => dst = data,
            RTA_TABLE if data.len() == 4 => {
                table = u32::from_ne_bytes(data.try_into().expect("4"));
            }
            _ => {}
        }
        at += (len + 3) & !3;
    }
    if !LOOKED_UP.contains(&table) || !DELIVERED_HERE.contains(&(i32::from(family), kind)) {
        return None;
    }
    let addr = match (i32::from(family), dst.len()) {
        (libc::AF_INET, 4) => IpAddr::from(<[u8; 4]>::try_from(dst).ok()?),
        (libc::AF_INET6, 16) => IpAddr::from(<[u8; 16]>::try_from(dst).ok()?),
        // No destination: the default route, all of the family.
        (libc::AF_INET, 0) => IpAddr::from(Ipv4Addr::UNSPECIFIED),
        (libc::AF_INET6, 0) => IpAddr::from(Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    IpNet::new(addr, dst_len).ok().map(|n| n.trunc())
}

/// Notice of address and route changes on this host (a `NETLINK_ROUTE` socket in the IPv4
/// and IPv6 address and route groups), so that an address or local prefix gained while
/// sandbox runs (DHCP, SLAAC, a VPN coming up) joins the private set.
pub struct AddrWatch {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    /// A notice that matters was read and not yet reported (kept across a cancelled
    /// [`AddrWatch::changed`]).
    pending: bool,
    buf: Vec<u8>,
}

/// How many datagrams of notices [`AddrWatch::changed`] reads before it lets the rest of
/// the session run (a router loading a full table sends them by the thousand).
const NOTICES_PER_TURN: usize = 64;

/// `RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR`, and the route groups
/// (`RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE`: a `local` route added by itself;
/// uapi/linux/rtnetlink.h).
const ADDRESS_GROUPS: u32 = 0x10 | 0x100 | 0x40 | 0x400;

impl AddrWatch {
    pub fn new() -> std::io::Result<Self> {
        let fd = route_socket(libc::SOCK_NONBLOCK)?;
        // SAFETY: a zeroed sockaddr_nl is valid; the family and groups are set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = ADDRESS_GROUPS;
        // SAFETY: binding our socket to a sockaddr_nl of the right size.
        let r = unsafe {
            libc::bind(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                (&raw const sa).cast(),
                size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the OwnedFd owns its descriptor for as long as the AsyncFd exists.
        let fd = unsafe { tokio::io::unix::AsyncFd::register(fd) }?;
        Ok(Self {
            fd,
            pending: false,
            buf: vec![0u8; 8192],
        })
    }

    /// Waits until an address was added or removed, or a route that delivers to this host
    /// (or notices were lost, which may hide one): the caller then reads them again. The
    /// other routes' notices (a busy router's) are read and let go. Cancel-safe: a notice
    /// read before a cancellation is reported by the next call.
    pub async fn changed(&mut self) -> std::io::Result<()> {
        loop {
            if std::mem::take(&mut self.pending) {
                return Ok(());
            }
            let mut g = self.fd.readable().await?;
            let fd = std::os::fd::AsRawFd::as_raw_fd(g.get_inner());
            let mut drained = false;
            for _ in 0..NOTICES_PER_TURN {
                let buf = &mut self.buf;
                // SAFETY: reading into our buffer.
                let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
                if n >= 0 {
                    self.pending |= notices_matter(&buf[..n.unsigned_abs()]);
                    continue;
                }
                match std::io::Error::last_os_error().raw_os_error() {
                    Some(libc::EAGAIN) => {
                        drained = true;
                        break;
                    }
                    // Lost notices: any of them may have mattered.
                    Some(libc::ENOBUFS) => self.pending = true,
                    Some(libc::EINTR) => {}
                    _ => return Err(std::io::Error::last_os_error()),
                }
            }
            if drained {
                g.clear_ready();
            } else if !self.pending {
                // More to read: the rest of the session first.
                drop(g);
                tokio::task::yield_now().await;
            }
        }
    }
}

/// Netlink notices, as read: `RTM_NEWADDR`, `RTM_DELADDR`, and `RTM_NEWROUTE`/`DELROUTE`
/// of a route that delivers to this host (`local`, `broadcast`, `anycast`).
const RTM_NEWADDR: u16 = 20;
const RTM_DELADDR: u16 = 21;
const RTM_DELROUTE: u16 = 25;

/// Whether a datagram of notices holds one that changes what reaches this host (one that
/// cannot be read counts: the caller reads everything again).
fn notices_matter(buf: &[u8]) -> bool {
    messages(buf).any(|m| match m {
        Ok(m) => match m.kind {
            RTM_NEWADDR | RTM_DELADDR => true,
            // A route's type is the eighth byte of its `rtmsg`.
            RTM_NEWROUTE | RTM_DELROUTE => m
                .body
                .get(7)
                .is_none_or(|t| DELIVERED_HERE.iter().any(|(_, k)| k == t)),
            _ => false,
        },
        Err(()) => true,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_loopback() {
        // Every Linux host (and network namespace) has lo with 127.0.0.1.
        let a = super::addresses();
        assert!(a.iter().any(std::net::IpAddr::is_loopback), "{a:?}");
    }

    /// Notices of addresses and of local routes matter; a forwarding route's does not; one
    /// that cannot be read does.
    #[test]
    fn only_notices_of_what_reaches_this_host_matter() {
        let notice = |kind: u16, route_type: u8| {
            let mut m = vec![0u8; 28];
            m[0..4].copy_from_slice(&28u32.to_ne_bytes());
            m[4..6].copy_from_slice(&kind.to_ne_bytes());
            m[23] = route_type;
            m
        };
        let unicast = notice(super::RTM_NEWROUTE, 1);
        assert!(!super::notices_matter(&unicast));
        assert!(!super::notices_matter(
            &[unicast.clone(), unicast.clone()].concat()
        ));
        assert!(super::notices_matter(&notice(super::RTM_NEWADDR, 0)));
        assert!(super::notices_matter(&notice(super::RTM_DELROUTE, 2)));
        assert!(super::notices_matter(
            &[unicast.clone(), notice(super::RTM_NEWROUTE, 3)].concat()
        ));
        assert!(super::notices_matter(&unicast[..20]));
    }

    /// A route (an `rtmsg` and its attributes) is this host's when its type delivers here
    /// and its table is one every lookup goes through (`RTA_TABLE` over the header's).
    #[test]
    fn routes_of_the_tables_every_lookup_uses_deliver_here() {
        let route =
            |family: i32, dst: &[u8], len: u8, table: u8, kind: u8, rta_table: Option<u32>| {
                let mut m = vec![
                    u8::try_from(family).unwrap(),
                    len,
                    0,
                    0,
                    table,
                    0,
                    0,
                    kind,
                    0,
                    0,
                    0,
                    0,
                ];
                let mut attr = |t: u16, data: &[u8]| {
                    m.extend_from_slice(&u16::try_from(4 + data.len()).unwrap().to_ne_bytes());
                    m.extend_from_slice(&t.to_ne_bytes());
                    m.extend_from_slice(data);
                    m.resize(m.len().next_multiple_of(4), 0);
                };
                if !dst.is_empty() {
                    attr(super::RTA_DST, dst);
                }
                if let Some(t) = rta_table {
                    attr(super::RTA_TABLE, &t.to_ne_bytes());
                }
                super::delivered_here(&m)
            };
        let net = [93, 184, 220, 0];
        let want: ipnet::IpNet = "93.184.220.0/24".parse().unwrap();
        assert_eq!(route(libc::AF_INET, &net, 24, 255, 2, None), Some(want));
        assert_eq!(
            route(libc::AF_INET, &net, 24, 252, 2, Some(254)),
            Some(want)
        );
        assert_eq!(
            route(libc::AF_INET, &net, 24, 252, 2, Some(100)),
            None,
            "table 100"
        );
        assert_eq!(
            route(libc::AF_INET, &net, 24, 254, 1, None),
            None,
            "unicast"
        );
        assert_eq!(route(libc::AF_INET, &[], 0, 100, 2, None), None, "tproxy's");
        assert_eq!(
            route(libc::AF_INET6, &[0; 16], 0, 255, 4, None),
            Some("::/0".parse().unwrap())
        );
        assert_eq!(
            route(libc::AF_INET6, &[0; 16], 0, 255, 3, None),
            None,
            "no IPv6 broadcast"
        );
    }

    #[test]
    fn reads_the_local_routing_table() {
        // Every Linux host with lo up has `local 127.0.0.0/8` and `broadcast
        // 127.255.255.255` in its local table; the union keeps the /8.
        let routes = super::local_routes().unwrap();
        let lo: ipnet::IpNet = "127.0.0.0/8".parse().unwrap();
        assert!(routes.contains(&lo), "{routes:?}");
        assert!(
            routes.contains(&"127.255.255.255/32".parse().unwrap()),
            "{routes:?}"
        );
        assert!(super::local().contains(&lo));
        // Not the default route, nor any other forwarding one.
        assert!(routes.iter().all(|n| n.prefix_len() > 0), "{routes:?}");
    }
}
