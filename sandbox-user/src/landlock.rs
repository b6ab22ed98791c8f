//! Landlock, through its three system calls (raw `libc::syscall`: the ABI is three calls and
//! two structs, smaller than any wrapper crate's surface). The fallback backend builds a
//! ruleset in sandbox (before the fork: opening the paths allocates and may block), and the
//! child only calls `landlock_restrict_self` between fork and exec.
//!
//! ABI versions: 1 (5.13) files; 2 (5.19) `REFER` (renames and links across directories);
//! 3 (6.2) `TRUNCATE`; 4 (6.7) TCP ports; 5 (6.10) device ioctls; 6 (6.12) scoping of
//! signals and abstract unix sockets; 7 (6.15) audit logging flags.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `LANDLOCK_ACCESS_FS_*` (include/uapi/linux/landlock.h).
pub mod fs {
    pub const EXECUTE: u64 = 1 << 0;
    pub const WRITE_FILE: u64 = 1 << 1;
    pub const READ_FILE: u64 = 1 << 2;
    pub const READ_DIR: u64 = 1 << 3;
    pub const REMOVE_DIR: u64 = 1 << 4;
    pub const REMOVE_FILE: u64 = 1 << 5;
    pub const MAKE_CHAR: u64 = 1 << 6;
    pub const MAKE_DIR: u64 = 1 << 7;
    pub const MAKE_REG: u64 = 1 << 8;
    pub const MAKE_SOCK: u64 = 1 << 9;
    pub const MAKE_FIFO: u64 = 1 << 10;
    pub const MAKE_BLOCK: u64 = 1 << 11;
    pub const MAKE_SYM: u64 = 1 << 12;
    /// ABI 2.
    pub const REFER: u64 = 1 << 13;
    /// ABI 3.
    pub const TRUNCATE: u64 = 1 << 14;

    /// Rights that make sense on a file (not a directory) in a path-beneath rule.
    pub const FILE_ONLY: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE;
}

/// `LANDLOCK_SCOPE_*` (ABI 6).
pub mod scope {
    pub const ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
    pub const SIGNAL: u64 = 1 << 1;
}

/// What the policy's three kinds of access are in Landlock rights, on ABI `abi`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rights {
    pub read: u64,
    pub write: u64,
    pub exec: u64,
}

impl Rights {
    pub fn for_abi(abi: u32) -> Self {
        use fs::{
            EXECUTE, MAKE_BLOCK, MAKE_CHAR, MAKE_DIR, MAKE_FIFO, MAKE_REG, MAKE_SOCK, MAKE_SYM,
            READ_DIR, READ_FILE, REFER, REMOVE_DIR, REMOVE_FILE, TRUNCATE, WRITE_FILE,
        };
        let mut write = WRITE_FILE
            | REMOVE_DIR
            | REMOVE_FILE
            | MAKE_CHAR
            | MAKE_DIR
            | MAKE_REG
            | MAKE_SOCK
            | MAKE_FIFO
            | MAKE_BLOCK
            | MAKE_SYM;
        if abi >= 2 {
            write |= REFER;
        }
        if abi >= 3 {
            write |= TRUNCATE;
        }
        Self {
            read: READ_FILE | READ_DIR,
            write,
            exec: EXECUTE,
        }
    }

    pub fn all(&self) -> u64 {
        self.read | self.write | self.exec
    }
}

const SYS_CREATE_RULESET: libc::c_long = 444;
const SYS_ADD_RULE: libc::c_long = 445;
const SYS_RESTRICT_SELF: libc::c_long = 446;
const CREATE_RULESET_VERSION: u32 = 1 << 0;
const RULE_PATH_BENEATH: libc::c_int = 1;

#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The Landlock ABI of the running kernel, or why there is none (not built in, or not in
/// the active LSM list: `lsm=...,landlock`).
pub fn abi() -> Result<u32, String> {
    // SAFETY: the version query takes no attribute.
    let v = unsafe {
        libc::syscall(
            SYS_CREATE_RULESET,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    if v >= 1 {
        return Ok(u32::try_from(v).unwrap_or(u32::MAX));
    }
    let e = std::io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(libc::ENOSYS) => "the kernel has no Landlock (CONFIG_SECURITY_LANDLOCK)".into(),
        Some(libc::EOPNOTSUPP) => "Landlock is built in but not active: add `landlock` to the \
             kernel's lsm= list (e.g. lsm=landlock,lockdown,yama,integrity,apparmor) and reboot"
            .into(),
        _ => format!("landlock_create_ruleset: {e}"),
    })
}

/// A ruleset being built (in sandbox, before the fork).
#[derive(Debug)]
pub struct Ruleset {
    fd: OwnedFd,
    pub handled: u64,
    pub scoped: u64,
    pub rules: usize,
}

impl Ruleset {
    /// A ruleset that denies every access in `handled` not granted by a rule, and
    /// restricts `scoped` (`scope::*`; ABI 6).
    pub fn new(handled: u64, scoped: u64) -> std::io::Result<Self> {
        let attr = RulesetAttr {
            handled_access_fs: handled,
            handled_access_net: 0,
            scoped,
        };
        // Older kernels reject an attribute larger than they know unless the tail is zero;
        // pass only the part they know when nothing is scoped.
        let size = if scoped == 0 {
            2 * size_of::<u64>()
        } else {
            size_of::<RulesetAttr>()
        };
        // SAFETY: `attr` is a valid landlock_ruleset_attr of at least `size` bytes.
        let fd = unsafe { libc::syscall(SYS_CREATE_RULESET, &raw const attr, size, 0u32) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            // SAFETY: a new descriptor the kernel returned, owned here.
            fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
            handled,
            scoped,
            rules: 0,
        })
    }

    /// Grants `access` on `path` and everything below it (just the file, for a file).
    /// Symlinks are not followed: the caller never passes one.
    pub fn allow(&mut self, path: &Path, access: u64, is_dir: bool) -> std::io::Result<()> {
        let access = access & self.handled & if is_dir { u64::MAX } else { fs::FILE_ONLY };
        if access == 0 {
            return Ok(());
        }
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new descriptor, owned here.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let attr = PathBeneathAttr {
            allowed_access: access,
            parent_fd: fd.as_raw_fd(),
        };
        // SAFETY: a valid landlock_path_beneath_attr; the kernel only reads it.
        let r = unsafe {
            libc::syscall(
                SYS_ADD_RULE,
                self.fd.as_raw_fd(),
                RULE_PATH_BENEATH,
                &raw const attr,
                0u32,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.rules += 1;
        Ok(())
    }

    /// The descriptor `restrict` needs in the child.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }
}

/// Confines the calling thread (and what it execs) with ruleset `fd`. Async-signal-safe:
/// for the child between fork and exec. Needs `no_new_privs` or `CAP_SYS_ADMIN`.
///
/// # Safety
/// `fd` must be a Landlock ruleset descriptor.
pub unsafe fn restrict(fd: i32) -> std::io::Result<()> {
    // SAFETY: plain syscall on a descriptor the caller vouches for.
    let r = unsafe { libc::syscall(SYS_RESTRICT_SELF, fd, 0u32) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
