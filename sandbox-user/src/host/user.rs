//! The user a command runs as (`sandbox run`: the sudo caller, `--user`, or root when
//! asked), from the passwd database.

use std::ffi::CString;
use std::path::PathBuf;

use anyhow::{anyhow, bail};

use crate::host::safepath::Agent;

/// Who the command runs as.
#[derive(Debug, Clone)]
pub struct Target {
    pub uid: u32,
    pub gid: u32,
    pub name: Option<String>,
    pub home: PathBuf,
    /// Change to `uid`/`gid` (sandbox is root, the command is not).
    pub drop: bool,
}

/// Why `sandbox run` as root without sudo does not start anything.
const ROOT_WITHOUT_SUDO: &str = "sandbox is running as root, not through sudo (no SUDO_UID), so \
     the command would run as root. Say who it should run as: run `sudo sandbox run ...` from \
     your own account (the command runs as you), or `sandbox run --user NAME ...`, or \
     `sandbox run --as-root ...` to run it as root (without the capabilities that reach past \
     the policy; see --keep-cap)";

/// A user account: (name, uid, primary gid, home).
type Account = (String, u32, u32, PathBuf);

impl Target {
    /// Who `sandbox run` starts the command as: the user who called `sudo`, the `--user`,
    /// or root when `--as-root` says so. Root by default (no sudo, no flag) is refused.
    pub fn for_run(as_root: bool, user: Option<&str>) -> anyhow::Result<Self> {
        // SAFETY: plain syscall.
        let euid = unsafe { libc::geteuid() };
        if let Some(u) = user {
            if euid != 0 {
                bail!(
                    "--user needs sandbox to run as root (it becomes that user just before starting the command)"
                );
            }
            let (name, uid, gid, home) =
                account(u).ok_or_else(|| anyhow!("--user {u}: no such user"))?;
            if uid == 0 {
                bail!("--user {u} is root: say --as-root to run the command as root");
            }
            return Ok(Self {
                uid,
                gid,
                name: Some(name),
                home,
                drop: true,
            });
        }
        if euid == 0 && !as_root {
            return Self::sudo_caller()?.ok_or_else(|| anyhow!(ROOT_WITHOUT_SUDO));
        }
        Ok(Self::current())
    }

    /// The invoking user, for commands that only read (`check`, `explain`): the sudo
    /// caller under sudo, else this process's user.
    pub fn detect() -> anyhow::Result<Self> {
        Ok(Self::sudo_caller()?.unwrap_or_else(Self::current))
    }

    fn sudo_caller() -> anyhow::Result<Option<Self>> {
        // SAFETY: plain syscall.
        let euid = unsafe { libc::geteuid() };
        let sudo = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
        if euid == 0
            && let (Some(uid), Some(gid)) = (sudo("SUDO_UID"), sudo("SUDO_GID"))
            && uid != 0
        {
            let (name, _, _, home) =
                passwd(uid).ok_or_else(|| anyhow!("SUDO_UID {uid} has no passwd entry"))?;
            return Ok(Some(Self {
                uid,
                gid,
                name: Some(name),
                home,
                drop: true,
            }));
        }
        Ok(None)
    }

    fn current() -> Self {
        // SAFETY: plain syscalls.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .or_else(|| passwd(uid).map(|p| p.3))
            .unwrap_or_else(|| "/".into());
        Self {
            uid,
            gid,
            name: passwd(uid).map(|p| p.0),
            home,
            drop: false,
        }
    }

    /// Whose writes sandbox must not trust for its own files.
    pub fn agent(&self) -> Agent {
        if self.uid == 0 {
            Agent::AnyNonRoot
        } else {
            Agent::user(self.uid, self.gid, self.name.as_deref())
        }
    }
}

/// A user by name or number.
fn account(user: &str) -> Option<Account> {
    if let Ok(uid) = user.parse::<u32>() {
        return passwd(uid);
    }
    let c = CString::new(user).ok()?;
    lookup(|pw, buf, out| {
        // SAFETY: see `lookup`.
        unsafe { libc::getpwnam_r(c.as_ptr(), pw, buf.as_mut_ptr().cast(), buf.len(), out) }
    })
}

fn passwd(uid: u32) -> Option<Account> {
    lookup(|pw, buf, out| {
        // SAFETY: see `lookup`.
        unsafe { libc::getpwuid_r(uid, pw, buf.as_mut_ptr().cast(), buf.len(), out) }
    })
}

/// Runs a `getpw*_r` call and copies the entry out.
fn lookup(
    call: impl FnOnce(*mut libc::passwd, &mut [u8], *mut *mut libc::passwd) -> libc::c_int,
) -> Option<Account> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter; the call writes strings into `buf`,
    // which outlives the reads below.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let rc = call(&raw mut pw, &mut buf, &raw mut out);
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: on success both fields point to NUL-terminated strings inside `buf`.
    let (name, dir) = unsafe {
        (
            std::ffi::CStr::from_ptr(pw.pw_name),
            std::ffi::CStr::from_ptr(pw.pw_dir),
        )
    };
    Some((
        name.to_string_lossy().into_owned(),
        pw.pw_uid,
        pw.pw_gid,
        PathBuf::from(dir.to_string_lossy().into_owned()),
    ))
}
