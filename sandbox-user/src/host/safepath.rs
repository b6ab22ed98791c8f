//! Opening the files sandbox trusts (its audit log, the policy `attach` re-reads) so that
//! the confined command cannot steer them.
//!
//! sandbox runs as root; the command it confines may not be. A file root opens by name in a
//! directory the command can write is the command's to choose: a symlink planted there makes
//! root append to (or chmod) any file, a replaced policy makes the next reload the
//! command's policy. So:
//! - paths are walked one component at a time from `/`, each directory opened relative to
//!   the one before (`openat`, `O_NOFOLLOW`) and checked on the descriptor that was opened:
//!   owned by root (or, for a command running as a user, not by that user) and writable by
//!   no one the command can act as. Group- or world-writable directories are accepted only
//!   with the sticky bit (there, others may add names but cannot remove or replace root's).
//!   Symlinks on the way are followed only when root owns them (their directory has already
//!   passed the check, so nobody else can have put them there).
//! - the audit file itself is never a symlink (`O_NOFOLLOW`), must be a regular file owned by
//!   root with one link (or a character device such as `/dev/null`), is created with
//!   `O_EXCL`, and everything after (rotation) happens relative to the directory descriptor.
//!
//! "Someone the command can act as" is [`Agent`]: the user it runs as, or, for a command that
//! runs as root (which can become any user), every non-root user. For the latter, groups
//! below 1000 (system groups such as `syslog`, which owns `/var/log` on Ubuntu) are trusted
//! like root: they have no human members by convention.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::OwnedFd;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Whose writes sandbox must not trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agent {
    /// The command runs as this user, with these groups.
    User { uid: u32, gids: Vec<u32> },
    /// The command runs as root (or is unknown, as for `attach`): any non-root user.
    AnyNonRoot,
}

impl Agent {
    /// The user `uid` with primary group `gid` and, when `name` is known, its
    /// supplementary groups (from the group database).
    pub fn user(uid: u32, gid: u32, name: Option<&str>) -> Self {
        let mut gids = vec![gid];
        if let Some(c) = name.and_then(|n| CString::new(n).ok())
            && let Ok(all) = nix::unistd::getgrouplist(&c, nix::unistd::Gid::from_raw(gid))
        {
            gids.extend(all.into_iter().map(nix::unistd::Gid::as_raw));
        }
        gids.sort_unstable();
        gids.dedup();
        Self::User { uid, gids }
    }

    fn describe(&self) -> String {
        match self {
            Self::User { uid, .. } => format!("uid {uid}, the user the command runs as"),
            Self::AnyNonRoot => "non-root users (the command runs as root and can become any \
                                 of them)"
                .into(),
        }
    }
}

/// Why a path cannot be trusted, or could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SafeError {
    #[error("{path}: {why}", path = path.display())]
    Unsafe { path: PathBuf, why: String },
    #[error("{path}: {err}", path = path.display())]
    Io { path: PathBuf, err: std::io::Error },
}

impl SafeError {
    fn io(path: &Path, err: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            err,
        }
    }
}

/// Who other than root can change an inode with this owner, group and mode, as seen from
/// `agent`; `None` when nobody `agent` can act as can. `sticky_ok`: for a directory, the
/// sticky bit makes group and world write safe for root's entries (`/tmp`).
pub fn writable_by(
    uid: u32,
    gid: u32,
    mode: u32,
    agent: &Agent,
    sticky_ok: bool,
) -> Option<String> {
    let sticky = sticky_ok && uid == 0 && mode & libc::S_ISVTX != 0;
    match agent {
        Agent::User { uid: a, gids } => {
            if uid == *a {
                return Some(format!("is owned by {}", agent.describe()));
            }
            if sticky {
                return None;
            }
            if mode & 0o002 != 0 {
                return Some(format!(
                    "is writable by every user, including {}",
                    agent.describe()
                ));
            }
            if mode & 0o020 != 0 && gids.contains(&gid) {
                return Some(format!(
                    "is writable by group {gid}, a group of {}",
                    agent.describe()
                ));
            }
            None
        }
        Agent::AnyNonRoot => {
            if uid != 0 {
                return Some(format!(
                    "is owned by uid {uid}, not root; {}",
                    agent.describe()
                ));
            }
            if sticky {
                return None;
            }
            if mode & 0o002 != 0 {
                return Some(format!("is writable by every user; {}", agent.describe()));
            }
            if mode & 0o020 != 0 && gid >= 1000 {
                return Some(format!("is writable by group {gid}; {}", agent.describe()));
            }
            None
        }
    }
}

fn cstr(name: &OsStr) -> std::io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn fstatat(dir: &OwnedFd, name: &OsStr) -> std::io::Result<libc::stat> {
    Ok(nix::sys::stat::fstatat(
        dir,
        cstr(name)?.as_c_str(),
        nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
    )?)
}

pub fn fstat(fd: impl std::os::fd::AsFd) -> std::io::Result<libc::stat> {
    Ok(nix::sys::stat::fstat(fd)?)
}

/// `openat(dir, name, flags, mode)` as an owned descriptor (always `O_CLOEXEC`).
pub fn openat(dir: &OwnedFd, name: &OsStr, flags: i32, mode: u32) -> std::io::Result<OwnedFd> {
    Ok(nix::fcntl::openat(
        dir,
        cstr(name)?.as_c_str(),
        OFlag::from_bits_retain(flags) | OFlag::O_CLOEXEC,
        Mode::from_bits_retain(mode),
    )?)
}

fn readlinkat(dir: &OwnedFd, name: &OsStr) -> std::io::Result<PathBuf> {
    Ok(PathBuf::from(nix::fcntl::readlinkat(
        dir,
        cstr(name)?.as_c_str(),
    )?))
}

/// A directory opened through [`open_dir`]: every later operation goes through `fd`.
#[derive(Debug)]
pub struct Dir {
    pub fd: OwnedFd,
    /// Where it was found (symlinks resolved), for messages.
    pub path: PathBuf,
}

/// Symlinks followed at most while resolving one path (as the kernel's `MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

struct Walker<'a> {
    agent: &'a Agent,
    create: bool,
    links: u32,
}

fn absolute(path: &Path) -> std::io::Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        Ok(std::env::current_dir()?.join(path))
    }
}

fn parts(path: &Path) -> std::collections::VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

impl Walker<'_> {
    fn check_dir(&self, fd: &OwnedFd, path: &Path) -> Result<(), SafeError> {
        let st = fstat(fd).map_err(|e| SafeError::io(path, e))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
            return Err(SafeError::io(
                path,
                std::io::Error::from_raw_os_error(libc::ENOTDIR),
            ));
        }
        match writable_by(st.st_uid, st.st_gid, st.st_mode, self.agent, true) {
            Some(why) => Err(SafeError::Unsafe {
                path: path.to_path_buf(),
                why: format!("this directory {why}"),
            }),
            None => Ok(()),
        }
    }

    /// Opens the directory `path`, checking every directory on the way.
    fn open_dir(&mut self, path: &Path) -> Result<Dir, SafeError> {
        let abs = absolute(path).map_err(|e| SafeError::io(path, e))?;
        let open_root = || -> Result<OwnedFd, SafeError> {
            nix::fcntl::open(
                c"/",
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| SafeError::io(Path::new("/"), e.into()))
        };
        let root = open_root()?;
        self.check_dir(&root, Path::new("/"))?;
        let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(root, PathBuf::from("/"))];
        let mut todo = parts(&abs);
        while let Some(name) = todo.pop_front() {
            if name == ".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                continue;
            }
            let (cur, cur_path) = stack.last().expect("root stays");
            let here = cur_path.join(&name);
            let st = match fstatat(cur, &name) {
                Ok(st) => st,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && self.create => {
                    let mode = if todo.is_empty() { 0o700 } else { 0o755 };
                    let c = cstr(&name).map_err(|e| SafeError::io(&here, e))?;
                    match nix::sys::stat::mkdirat(cur, c.as_c_str(), Mode::from_bits_retain(mode)) {
                        Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                        Err(e) => return Err(SafeError::io(&here, e.into())),
                    }
                    fstatat(cur, &name).map_err(|e| SafeError::io(&here, e))?
                }
                Err(e) => return Err(SafeError::io(&here, e)),
            };
            match st.st_mode & libc::S_IFMT {
                libc::S_IFLNK => {
                    if st.st_uid != 0 {
                        return Err(SafeError::Unsafe {
                            path: here,
                            why: format!(
                                "is a symbolic link owned by uid {}: only links root made are \
                                 followed",
                                st.st_uid
                            ),
                        });
                    }
                    self.links += 1;
                    if self.links > MAX_LINKS {
                        return Err(SafeError::io(
                            &here,
                            std::io::Error::from_raw_os_error(libc::ELOOP),
                        ));
                    }
                    let target = readlinkat(cur, &name).map_err(|e| SafeError::io(&here, e))?;
                    if target.is_absolute() {
                        stack.truncate(1);
                    }
                    let mut next = parts(&target);
                    next.extend(todo);
                    todo = next;
                }
                libc::S_IFDIR => {
                    let fd = openat(
                        cur,
                        &name,
                        libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                        0,
                    )
                    .map_err(|e| SafeError::io(&here, e))?;
                    self.check_dir(&fd, &here)?;
                    stack.push((fd, here));
                }
                _ => {
                    return Err(SafeError::io(
                        &here,
                        std::io::Error::from_raw_os_error(libc::ENOTDIR),
                    ));
                }
            }
        }
        let (fd, path) = stack.pop().expect("root stays");
        Ok(Dir { fd, path })
    }
}

/// Opens directory `path` for files only root may change (creating what is missing, as
/// root, when `create`): refused when `agent` (or anyone it can act as) could change it or
/// any directory above it.
pub fn open_dir(path: &Path, agent: &Agent, create: bool) -> Result<Dir, SafeError> {
    Walker {
        agent,
        create,
        links: 0,
    }
    .open_dir(path)
}

/// Splits a file path into its directory and name (`.` for a bare name).
pub fn split(path: &Path) -> Result<(PathBuf, OsString), SafeError> {
    let name = path
        .file_name()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| SafeError::Unsafe {
            path: path.to_path_buf(),
            why: "does not name a file".into(),
        })?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    Ok((dir, name.to_os_string()))
}

/// Reads a file (the policy) only root can change, as seen from `agent`: every directory
/// on the way checked as for [`open_dir`]; root's symlinks are followed; the file itself
/// must be a regular file nobody `agent` can act as may write.
pub fn read_file(path: &Path, agent: &Agent) -> Result<Vec<u8>, SafeError> {
    use std::io::Read;

    let mut w = Walker {
        agent,
        create: false,
        links: 0,
    };
    let mut p = absolute(path).map_err(|e| SafeError::io(path, e))?;
    loop {
        let (dir_path, name) = split(&p)?;
        let dir = w.open_dir(&dir_path)?;
        let here = dir.path.join(&name);
        let st = fstatat(&dir.fd, &name).map_err(|e| SafeError::io(&here, e))?;
        if st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            if st.st_uid != 0 {
                return Err(SafeError::Unsafe {
                    path: here,
                    why: format!(
                        "is a symbolic link owned by uid {}: only links root made are followed",
                        st.st_uid
                    ),
                });
            }
            w.links += 1;
            if w.links > MAX_LINKS {
                return Err(SafeError::io(
                    &here,
                    std::io::Error::from_raw_os_error(libc::ELOOP),
                ));
            }
            let target = readlinkat(&dir.fd, &name).map_err(|e| SafeError::io(&here, e))?;
            p = dir.path.join(target);
            continue;
        }
        let fd = openat(
            &dir.fd,
            &name,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        )
        .map_err(|e| SafeError::io(&here, e))?;
        let st = fstat(&fd).map_err(|e| SafeError::io(&here, e))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(SafeError::Unsafe {
                path: here,
                why: "is not a regular file".into(),
            });
        }
        if let Some(why) = writable_by(st.st_uid, st.st_gid, st.st_mode, agent, false) {
            return Err(SafeError::Unsafe {
                path: here,
                why: format!("this file {why}"),
            });
        }
        let mut out = Vec::new();
        std::fs::File::from(fd)
            .read_to_end(&mut out)
            .map_err(|e| SafeError::io(&here, e))?;
        return Ok(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: u32 = libc::S_IFDIR;

    #[test]
    fn who_can_change_a_directory() {
        let user = Agent::User {
            uid: 1000,
            gids: vec![1000, 27],
        };
        let any = Agent::AnyNonRoot;
        // (owner, group, mode) -> changeable by the user agent?, by any non-root user?
        let cases: &[((u32, u32, u32), bool, bool)] = &[
            ((0, 0, DIR | 0o755), false, false),
            ((0, 0, DIR | 0o700), false, false),
            // The agent's own directory, whatever its mode (the owner can chmod).
            ((1000, 1000, DIR | 0o500), true, true),
            // Another user's directory: not the user agent's, but a root agent can be them.
            ((1001, 1001, DIR | 0o755), false, true),
            ((0, 0, DIR | 0o777), true, true),
            // /tmp: root's entries cannot be removed or replaced by others.
            ((0, 0, DIR | 0o1777), false, false),
            // Sticky but not root's: the owner may remove anything in it.
            ((1001, 1001, DIR | 0o1777), true, true),
            // Group-writable by a group of the agent (27) or not (4).
            ((0, 27, DIR | 0o775), true, false),
            ((0, 4, DIR | 0o775), false, false),
            // Ubuntu's /var/log (root:syslog 0775): a system group is trusted.
            ((0, 102, DIR | 0o775), false, false),
            // A human group (gid >= 1000) is not, for a root command.
            ((0, 1500, DIR | 0o775), false, true),
            ((0, 1000, DIR | 0o775), true, true),
        ];
        for &((uid, gid, mode), by_user, by_any) in cases {
            assert_eq!(
                writable_by(uid, gid, mode, &user, true).is_some(),
                by_user,
                "user agent, {uid}:{gid} {mode:o}"
            );
            assert_eq!(
                writable_by(uid, gid, mode, &any, true).is_some(),
                by_any,
                "any non-root, {uid}:{gid} {mode:o}"
            );
        }
        // The sticky bit means nothing on a file.
        assert!(writable_by(0, 0, libc::S_IFREG | 0o1666, &user, false).is_some());
        assert!(writable_by(0, 0, libc::S_IFREG | 0o644, &user, false).is_none());
    }

    /// A scratch directory tree (root-owned when the tests run as root).
    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("sandbox-safepath-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        d
    }

    fn chown(p: &Path, uid: u32) {
        std::os::unix::fs::lchown(p, Some(uid), Some(uid)).unwrap();
    }

    #[test]
    fn symlinks_and_agent_directories_on_the_way_are_refused() {
        let d = scratch("walk");
        let me = nix::unistd::geteuid().as_raw();
        if me != 0 {
            // Not root: every directory made here is the agent's own, and is refused.
            let agent = Agent::User {
                uid: me,
                gids: vec![],
            };
            let e = open_dir(&d, &agent, false).unwrap_err();
            assert!(e.to_string().contains(&format!("owned by uid {me}")), "{e}");
            std::fs::remove_dir_all(&d).unwrap();
            return;
        }
        let agent = Agent::User {
            uid: 4242,
            gids: vec![4242],
        };
        std::fs::create_dir_all(d.join("root/logs")).unwrap();
        assert_eq!(
            open_dir(&d.join("root/logs"), &agent, false).unwrap().path,
            d.join("root/logs")
        );
        // Missing directories are created, as root, owner-only at the end.
        let made = open_dir(&d.join("root/new/deeper"), &agent, true).unwrap();
        let meta = std::fs::metadata(&made.path).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
            0o700
        );
        // The agent's directory, and anything below it.
        std::fs::create_dir_all(d.join("agent/sub")).unwrap();
        chown(&d.join("agent"), 4242);
        let e = open_dir(&d.join("agent/sub"), &agent, false).unwrap_err();
        assert!(e.to_string().contains("owned by uid 4242"), "{e}");
        // A symlink the agent made, even to a safe place.
        std::os::unix::fs::symlink(d.join("root/logs"), d.join("root/planted")).unwrap();
        chown(&d.join("root/planted"), 4242);
        let e = open_dir(&d.join("root/planted"), &agent, false).unwrap_err();
        assert!(
            e.to_string().contains("symbolic link owned by uid 4242"),
            "{e}"
        );
        // Root's own symlink is followed, and the target is checked.
        std::os::unix::fs::symlink(d.join("root/logs"), d.join("root/alias")).unwrap();
        assert_eq!(
            open_dir(&d.join("root/alias"), &agent, false).unwrap().path,
            d.join("root/logs")
        );
        std::os::unix::fs::symlink(d.join("agent/sub"), d.join("root/to-agent")).unwrap();
        assert!(open_dir(&d.join("root/to-agent"), &agent, false).is_err());
        // A policy file: root's is read; the agent's, or one the agent can write, is not.
        std::fs::write(d.join("root/p.yaml"), "name: x\n").unwrap();
        assert_eq!(
            read_file(&d.join("root/p.yaml"), &agent).unwrap(),
            b"name: x\n"
        );
        std::fs::set_permissions(
            d.join("root/p.yaml"),
            std::os::unix::fs::PermissionsExt::from_mode(0o666),
        )
        .unwrap();
        let e = read_file(&d.join("root/p.yaml"), &agent).unwrap_err();
        assert!(e.to_string().contains("writable by every user"), "{e}");
        std::fs::write(d.join("agent/p.yaml"), "name: y\n").unwrap();
        assert!(read_file(&d.join("agent/p.yaml"), &agent).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
