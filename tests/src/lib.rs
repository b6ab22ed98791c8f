//! The harness of the kernel tests (`tests/tests/kernel/`): start the real `sandbox` with a
//! policy, let `sandbox-probe` make real system calls inside it, and check what the kernel
//! answered and what the audit log says.
//!
//! - [`run`]: one `sandbox run` ([`run_in`], [`probe`], [`check`], their `_as` forms for the
//!   guest's non-root user), its outcome ([`Run`]), and the tables the tests are written as:
//!   operations with the errno each must give ([`check`]) and the audit records they must
//!   leave ([`rec`]).
//! - [`fixtures`]: things a test sets up and that undo themselves: a tmpfs mounted late, a
//!   disk file system on a loop device, name resolution, a DNS server.
//!
//! A test moves into an area module with one line, `use sandbox_tests::*;`: this crate also
//! re-exports the few std and `serde_json` names every test uses.

pub mod fixtures;
pub mod run;

use std::fmt::Write as _;

pub use std::os::unix::fs::PermissionsExt;
pub use std::path::{Path, PathBuf};
pub use std::process::{Command, Stdio};
pub use std::time::{Duration, Instant};

pub use serde_json::{Value, json};

pub use crate::fixtures::{
    Attached, Bind, DiskFs, DnsServer, HostAddr, Resolution, Tmpfs, sandbox_runs,
    wait_for_sandbox_run,
};
pub use crate::run::{
    ANY, Case, EACCES, ENETUNREACH, EPERM, OK, Rec, Run, as_user, check, check_as, check_as_env,
    hold, probe, probe_as, probe_command, probe_in_cgroup, probe_outside, probe_outside_as,
    read_audit, rec, run_as, run_as_env, run_as_holding, run_as_prepared, run_as_started_in,
    run_as_under_rlimit, run_in, start_probe, trusted_dir, under_rlimit, wait_probe,
};

/// The binaries under test, from the environment `cargo xtask test` sets in the guest.
pub struct Bins {
    pub sandbox: PathBuf,
    pub probe: PathBuf,
}

/// The binaries under test. Panics (the test fails, never passes) when BPF LSM is not
/// active: a kernel that cannot enforce cannot run these tests.
pub fn bins() -> Bins {
    let lsm = std::fs::read_to_string("/sys/kernel/security/lsm").unwrap_or_default();
    assert!(
        lsm.split(',').any(|l| l.trim() == "bpf"),
        "BPF LSM is not active here (lsm: '{}'): these tests cannot run on this kernel",
        lsm.trim()
    );
    let get = |k: &str| {
        PathBuf::from(
            std::env::var(k)
                .unwrap_or_else(|_| panic!("{k} is not set (cargo xtask test sets it)")),
        )
    };
    Bins {
        sandbox: get("SANDBOX_BIN"),
        probe: get("SANDBOX_PROBE"),
    }
}

/// Who a command runs as. In the guest (`cargo xtask test`), `agent` (uid and gid 1000,
/// home `/home/agent`) is the non-root user, the one who types `sudo sandbox run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum User {
    Root,
    Agent,
}

impl User {
    pub const fn uid(self) -> u32 {
        match self {
            Self::Root => 0,
            Self::Agent => 1000,
        }
    }

    pub const fn gid(self) -> u32 {
        self.uid()
    }

    pub const fn name(self) -> &'static str {
        match self {
            Self::Root => "root",
            Self::Agent => "agent",
        }
    }

    /// The home directory in the guest's passwd (what `~` means for this user).
    pub fn home(self) -> &'static Path {
        Path::new(match self {
            Self::Root => "/root",
            Self::Agent => "/home/agent",
        })
    }

    /// Makes `path`, and everything below it when it is a directory, this user's.
    pub fn own(self, path: &Path) {
        std::os::unix::fs::lchown(path, Some(self.uid()), Some(self.gid()))
            .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
        if path.is_dir() && !path.is_symlink() {
            for entry in std::fs::read_dir(path).unwrap() {
                self.own(&entry.unwrap().path());
            }
        }
    }
}

/// A fresh directory for one test, canonical (the kernel reports canonical paths).
pub fn workdir(name: &str) -> PathBuf {
    let d = PathBuf::from("/tmp/kt").join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d.canonicalize().unwrap()
}

/// [`workdir`], owned by `user`: where a command run as that user can create files.
pub fn workdir_as(user: User, name: &str) -> PathBuf {
    let d = workdir(name);
    user.own(&d);
    d
}

/// A directory the agent user owns (and its home, for `~`): where tests that run the
/// command as the agent work.
pub fn agent_dir(name: &str) -> PathBuf {
    std::fs::create_dir_all(User::Agent.home()).unwrap();
    User::Agent.own(User::Agent.home());
    workdir_as(User::Agent, name)
}

/// The running kernel's version, (major, minor).
pub fn kernel_version() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .split(['.', '-'])
        .map(|n| n.trim().parse::<u32>().unwrap_or(0));
    (v.next().unwrap_or(0), v.next().unwrap_or(0))
}

/// `dir/rel` as text, the way records name it.
pub fn path_str(dir: &Path, rel: &str) -> String {
    dir.join(rel).display().to_string()
}

/// Writes `text` to `p`, creating its parent directories.
pub fn write(p: &Path, text: &str) {
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(p, text).unwrap();
}

/// Copies an executable (a copy of the probe serves as any binary an exec test needs).
pub fn copy_exec(from: &Path, to: &Path) {
    std::fs::copy(from, to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Hex of a path's bytes, for the probe's `open-hex` and the records' `unmapped.file.path_hex`.
pub fn hex(b: &[u8]) -> String {
    b.iter().fold(String::new(), |mut out, x| {
        let _ = write!(out, "{x:02x}");
        out
    })
}

/// Waits up to `secs` for `p` to exist.
pub fn wait_for(p: &Path, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !p.exists() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Waits up to `secs` for `p` to hold a whole line: a shell's `> FILE` makes the file before
/// the command it redirects writes to it.
pub fn wait_for_line(p: &Path, secs: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !std::fs::read_to_string(p).is_ok_and(|t| t.contains('\n')) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Sends `sig` to `pid` (a child of the test).
pub fn signal(pid: u32, sig: i32) {
    let pid = i32::try_from(pid).expect("pid fits in pid_t");
    // SAFETY: plain kill(2); no memory is involved.
    unsafe { libc::kill(pid, sig) };
}

/// The pinned links of the run whose sandbox had process id `pid`.
pub fn pins_of_run(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("run-{pid}-");
    std::fs::read_dir("/sys/fs/bpf/sandbox")
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
                })
                .collect()
        })
        .unwrap_or_default()
}
