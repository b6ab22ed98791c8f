//! The addresses of this host's network interfaces (`getifaddrs`). A connect to one of
//! them reaches the host's own services just as loopback does, so with
//! `network.block_private` they join the private set.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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

/// Notice of address changes on this host's interfaces (a `NETLINK_ROUTE` socket in the
/// IPv4 and IPv6 address groups), so that an address gained while sandbox runs (DHCP,
/// SLAAC, a VPN coming up) joins the private set.
pub struct AddrWatch(tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>);

/// `RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR` (uapi/linux/rtnetlink.h).
const ADDRESS_GROUPS: u32 = 0x10 | 0x100;

impl AddrWatch {
    pub fn new() -> std::io::Result<Self> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket(2); the descriptor is owned right after.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor of ours.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
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
        Ok(Self(unsafe { tokio::io::unix::AsyncFd::register(fd) }?))
    }

    /// Waits until an address was added or removed (or notices were lost, which may hide
    /// one): the caller then reads the addresses again.
    pub async fn changed(&mut self) -> std::io::Result<()> {
        let mut g = self.0.readable().await?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(g.get_inner());
        let mut buf = [0u8; 8192];
        loop {
            // SAFETY: reading into our buffer.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 0 {
                continue;
            }
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN) => break,
                // Lost notices (ENOBUFS) or an interruption: read on, then re-read all.
                Some(libc::ENOBUFS | libc::EINTR) => {}
                _ => return Err(std::io::Error::last_os_error()),
            }
        }
        g.clear_ready();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn lists_loopback() {
        // Every Linux host (and network namespace) has lo with 127.0.0.1.
        let a = super::addresses();
        assert!(a.iter().any(std::net::IpAddr::is_loopback), "{a:?}");
    }
}
