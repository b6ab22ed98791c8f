//! The service manager, when sandbox runs under one: readiness and reload notifications
//! (`sd_notify`'s datagram protocol on `$NOTIFY_SOCKET`, for `Type=notify` units, which
//! `Type=notify-reload` also understands) and whether stderr is the journal (`$JOURNAL_STREAM`).
//! Both are plain protocols on real sockets; no library is needed.
//!
//! Under systemd, `sandbox run` also moves itself into a transient scope with
//! `Delegate=yes` ([`enter_delegated_scope`]) and makes the run's cgroup there: systemd owns
//! the cgroup tree, and a directory made outside what it delegated is one it may trim or
//! move processes out of.

use std::ffi::OsString;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

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

/// The slice every `sandbox run` scope goes in (`systemd-cgls /sandbox.slice` lists the
/// runs).
pub const SLICE: &str = "sandbox.slice";

/// Set by `sandbox run` for itself when it re-executes inside its scope: the scope's unit
/// name. `SANDBOX_SCOPE=none` (set by the user) keeps the old layout (`<cgroup root>/sandbox`).
pub const SCOPE_ENV: &str = "SANDBOX_SCOPE";
/// The cgroup `sandbox run` was started in, passed over the re-execution into the scope:
/// the limits it ran under hold for the run too (`invoker_cgroup`).
const INVOKER_ENV: &str = "SANDBOX_INVOKER_CGROUP";

/// systemd is this host's service manager (`sd_booted(3)`).
pub fn booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Under systemd, re-executes this very command (same pid, terminal, arguments) through
/// `systemd-run --scope -p Delegate=yes` in [`SLICE`]: systemd makes the scope, hands its
/// cgroup subtree to sandbox, and removes it once every process in it has ended. Returns
/// when there is nothing to do (no systemd, already in the scope, `SANDBOX_SCOPE=none`);
/// does not return when the re-execution starts. Fails closed: when `systemd-run` cannot be
/// executed, the error says how to run without a scope.
pub fn enter_delegated_scope() -> anyhow::Result<()> {
    // Read once and removed while sandbox is still one thread (nothing it starts inherits
    // it); `delegated_scope` uses what was read.
    let given = std::env::var(SCOPE_ENV).ok();
    let invoker = std::env::var(INVOKER_ENV).ok();
    // SAFETY: called first thing in `run`, before sandbox starts any other thread.
    unsafe {
        std::env::remove_var(SCOPE_ENV);
        std::env::remove_var(INVOKER_ENV);
    }
    let own = own_cgroup();
    // Taken from the variable only in the re-execution below (the scope it names is this
    // very run's), never with `..` in it; else this process's own cgroup.
    let ours = format!("sandbox-run-{}.scope", std::process::id());
    let reexecuted = given.as_deref() == Some(ours.as_str());
    let invoker = invoker.filter(|p| reexecuted && !p.split('/').any(|c| c == ".."));
    let _ = INVOKER.set(if reexecuted { invoker } else { own.clone() });
    let given = SCOPE.get_or_init(|| given);
    if given.is_some() || !booted() || !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    let Some(systemd_run) = ["/usr/bin/systemd-run", "/bin/systemd-run"]
        .iter()
        .map(Path::new)
        .find(|p| p.exists())
    else {
        anyhow::bail!(
            "systemd is this host's service manager but systemd-run is missing: sandbox runs \
             the command in a transient scope systemd delegates to it. Install systemd-run, \
             or set SANDBOX_SCOPE=none to make the run's cgroup under /sandbox of the \
             cgroup tree instead"
        );
    };
    // systemd-run (as root) talks to systemd on its private socket: without it (a systemd
    // that is shutting down, a container that shares /run/systemd/system but not the
    // socket), the scope cannot be made; the run's cgroup then goes under /sandbox, as on
    // hosts without systemd (enforcement is the same; only where the cgroup sits differs).
    if !Path::new("/run/systemd/private").exists() {
        tracing::warn!(
            "systemd is this host's service manager, but its socket /run/systemd/private is \
             missing: the run's cgroup goes under /sandbox of the cgroup tree, not in a \
             delegated scope"
        );
        return Ok(());
    }
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("finding sandbox's own binary: {e}"))?;
    let unit = format!("sandbox-run-{}.scope", std::process::id());
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    tracing::debug!("under systemd: re-executing in the delegated scope {unit} ({SLICE})");
    let err = std::process::Command::new(systemd_run)
        .args(["--scope", "--quiet", "--collect", "--property=Delegate=yes"])
        .arg(format!("--slice={SLICE}"))
        .arg(format!("--unit={unit}"))
        .arg("--description=sandbox run")
        .arg("--")
        .arg(exe)
        .args(args)
        .env(SCOPE_ENV, &unit)
        .env(INVOKER_ENV, own.unwrap_or_default())
        .exec();
    anyhow::bail!(
        "cannot execute {}: {err} (set SANDBOX_SCOPE=none to run without a systemd scope)",
        systemd_run.display()
    )
}

/// This process's cgroup v2 path (`/user.slice/...`), from `/proc/self/cgroup`.
fn own_cgroup() -> Option<String> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    own.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
}

/// The cgroup `sandbox run` was started in (before the re-execution into its scope), as
/// `/proc/PID/cgroup` names it. The run's cgroup is not below it, so the limits of that
/// cgroup and those above it (a CI runner's `MemoryMax=`, a user slice's `TasksMax=`) are
/// applied to the run's cgroup as well, or the run would leave them behind.
pub fn invoker_cgroup() -> Option<&'static str> {
    INVOKER.get()?.as_deref().filter(|p| p.starts_with('/'))
}

static INVOKER: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// `SANDBOX_SCOPE` as this process started with it (read by [`enter_delegated_scope`]).
static SCOPE: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// The delegated scope this process runs in, as made by [`enter_delegated_scope`]: the
/// scope's cgroup directory, only when `SANDBOX_SCOPE` names this very run's scope
/// (`sandbox-run-<own pid>.scope`) and this process's cgroup is that scope in
/// [`SLICE`]: a variable set by hand (`sudo -E`, a unit's `Environment=`) cannot make
/// sandbox use a cgroup systemd did not delegate to it.
pub fn delegated_scope(cgroup_root: &Path) -> Option<PathBuf> {
    let unit = SCOPE.get()?.as_deref()?;
    if unit == "none" {
        return None;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::"))?;
    let expected = format!("sandbox-run-{}.scope", std::process::id());
    if unit != expected || path != format!("/{SLICE}/{expected}") {
        tracing::warn!(
            "{SCOPE_ENV}={unit}, but sandbox runs in the cgroup {path}: ignored (the run's \
             cgroup goes under /sandbox)"
        );
        return None;
    }
    Some(cgroup_root.join(path.trim_start_matches('/')))
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
