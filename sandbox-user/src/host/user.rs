//! The user a command runs as (`sandbox run`: the sudo caller, `--user`, or root when
//! asked), from the passwd database.

use std::path::{Path, PathBuf};

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
        let euid = nix::unistd::geteuid().as_raw();
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
        let euid = nix::unistd::geteuid().as_raw();
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
        let (uid, gid) = (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        );
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

/// The home directories of the host's users (canonical, each once): those of `/etc/passwd`
/// for root and for uids from 1000 (below `nobody`), and every directory in `/home` (users
/// of a directory service have theirs there). What a root command's `~` deny rules cover
/// besides its own home: root reads every user's files.
pub fn homes() -> Vec<PathBuf> {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let listed = passwd.lines().filter_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        let uid: u32 = f.get(2)?.parse().ok()?;
        let home = PathBuf::from(f.get(5)?);
        (uid == 0 || (1000..65534).contains(&uid)).then_some(home)
    });
    // Listing an automounted /home shows what is mounted (or, browsable, the names)
    // without mounting anything.
    let in_home = std::fs::read_dir("/home")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path());
    let autofs: Vec<PathBuf> = crate::host::mounts::read()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| s.fstype == "autofs" && !s.mount_point.is_empty())
        .map(|s| PathBuf::from(s.mount_point))
        .collect();
    pick_homes(listed.chain(in_home), &autofs, |p| {
        std::fs::canonicalize(p).ok().filter(|c| c.is_dir())
    })
}

/// [`homes`] from its candidates: each made canonical by `canonical` (`None`: not a
/// directory there), except those at or below an automount point (`autofs`), taken as
/// written: resolving one would mount it (a network file system, whose server may not
/// answer: the run would wait for it).
fn pick_homes(
    candidates: impl Iterator<Item = PathBuf>,
    autofs: &[PathBuf],
    canonical: impl Fn(&Path) -> Option<PathBuf>,
) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = candidates
        .filter(|p| p.is_absolute())
        .filter_map(|p| {
            if autofs.iter().any(|a| p.starts_with(a)) {
                Some(p)
            } else {
                canonical(&p)
            }
        })
        .filter(|p| p != Path::new("/"))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A user by name or number.
fn account(user: &str) -> Option<Account> {
    if let Ok(uid) = user.parse::<u32>() {
        return passwd(uid);
    }
    entry(nix::unistd::User::from_name(user))
}

fn passwd(uid: u32) -> Option<Account> {
    entry(nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)))
}

fn entry(found: nix::Result<Option<nix::unistd::User>>) -> Option<Account> {
    let u = found.ok()??;
    Some((u.name, u.uid.as_raw(), u.gid.as_raw(), u.dir))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// Homes below an automount point are never resolved (that would mount them); the
    /// others are made canonical, and those that are no directory, or `/`, are left out.
    #[test]
    fn homes_below_an_automount_are_not_touched() {
        let candidates = [
            "/home/a",
            "/net/home/b",
            "relative",
            "/",
            "/gone",
            "/home/link",
        ]
        .map(PathBuf::from);
        let autofs = [PathBuf::from("/net")];
        let got = super::pick_homes(candidates.into_iter(), &autofs, |p: &Path| {
            assert!(!p.starts_with("/net"), "{} was resolved", p.display());
            match p.to_str()? {
                "/home/link" => Some(PathBuf::from("/srv/home/link")),
                "/gone" => None,
                other => Some(PathBuf::from(other)),
            }
        });
        assert_eq!(
            got,
            ["/home/a", "/net/home/b", "/srv/home/link"].map(PathBuf::from)
        );
    }
}
