//! The service manager, when sandbox runs under one: readiness and reload notifications
//! (`sd_notify`'s datagram protocol on `$NOTIFY_SOCKET`, for `Type=notify` units, which
//! `Type=notify-reload` also understands) and whether stderr is the journal (`$JOURNAL_STREAM`).
//! Both are plain protocols on real sockets; no library is needed.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Where to send notifications; nothing when not started by a service manager.
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// From `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket). The variable is
    /// removed so that nothing sandbox starts notifies in its name.
    pub fn from_env() -> Self {
        let Some(name) = std::env::var_os("NOTIFY_SOCKET") else {
            return Self { target: None };
        };
        // SAFETY: called at start-up, before sandbox starts other threads that read the
        // environment (the terminal thread does not).
        unsafe { std::env::remove_var("NOTIFY_SOCKET") };
        let bytes = name.as_encoded_bytes();
        let addr = match bytes.strip_prefix(b"@") {
            Some(abs) => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(abs)
            }
            None => SocketAddr::from_pathname(&name),
        };
        let target = addr
            .ok()
            .and_then(|a| UnixDatagram::unbound().ok().map(|s| (s, a)));
        if target.is_none() {
            tracing::warn!(
                "NOTIFY_SOCKET={} is not a socket address: the service \
                 manager will not hear that sandbox is ready",
                name.to_string_lossy()
            );
        }
        Self { target }
    }

    pub fn active(&self) -> bool {
        self.target.is_some()
    }

    /// Sends `state` (`KEY=value` lines); failures are reported, never fatal.
    pub fn send(&self, state: &str) {
        if let Some((sock, addr)) = &self.target
            && let Err(e) = sock.send_to_addr(state.as_bytes(), addr)
        {
            tracing::warn!("notifying the service manager failed: {e}");
        }
    }

    /// Enforcement is in place: units ordered after this one may start.
    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// A reload (SIGHUP) began; `ready` follows when it ended (applied or refused).
    pub fn reloading(&self) {
        self.send(&format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading the policy",
            monotonic_usec()
        ));
    }

    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=stopping: the cgroup will no longer be confined");
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', " ")
}

/// `CLOCK_MONOTONIC` in microseconds, as `RELOADING=1` wants it.
fn monotonic_usec() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |ts| {
        ts.tv_sec().unsigned_abs() * 1_000_000 + ts.tv_nsec().unsigned_abs() / 1000
    })
}

/// Whether stderr is connected to the journal: `$JOURNAL_STREAM` (`dev:ino`) names the
/// stream systemd gave the service, and stderr is still that stream.
pub fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    nix::sys::stat::fstat(std::io::stderr()).is_ok_and(|st| st.st_dev == dev && st.st_ino == ino)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_the_socket() {
        let dir = std::env::temp_dir().join(format!("sandbox-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify");
        let listener = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            target: Some((
                UnixDatagram::unbound().unwrap(),
                SocketAddr::from_pathname(&path).unwrap(),
            )),
        };
        n.ready("enforcing\npolicy 'p'");
        n.reloading();
        n.stopping();
        let mut buf = [0u8; 256];
        let mut got = Vec::new();
        for _ in 0..3 {
            let len = listener.recv(&mut buf).unwrap();
            got.push(String::from_utf8_lossy(&buf[..len]).into_owned());
        }
        assert_eq!(got[0], "READY=1\nSTATUS=enforcing policy 'p'");
        assert!(
            got[1].starts_with("RELOADING=1\nMONOTONIC_USEC="),
            "{}",
            got[1]
        );
        assert!(got[2].starts_with("STOPPING=1\n"), "{}", got[2]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
