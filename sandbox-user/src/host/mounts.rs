//! The mount table: which canonical path each superblock is mounted at. The kernel rebuilds
//! paths only up to a superblock's root; the loader supplies where that root is, or, when
//! only directories below the root are mounted (btrfs subvolumes, a bind mount of a
//! subdirectory whose parent was unmounted), where each of those is.

use std::collections::BTreeMap;

/// One superblock: kernel `s_dev` encoding and its canonical mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub dev: u32,
    /// Where the superblock's root is mounted ("" when it is not: see `dirs`).
    pub mount_point: String,
    pub fstype: String,
    /// Mounted directories that place the paths below them: every mounted directory when
    /// the root is not mounted; btrfs subvolume mounts when it is. Shallowest first.
    pub dirs: Vec<MountedDir>,
}

/// A directory of a superblock (`root`, its path within the superblock: `/@home`) mounted
/// at `mount_point` (`/home`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountedDir {
    pub root: String,
    pub mount_point: String,
    /// A btrfs subvolume mount (`subvol=` is its root): places its paths even below another
    /// mounted directory.
    pub subvol: bool,
}

impl Superblock {
    pub fn root_mounted(&self) -> bool {
        !self.mount_point.is_empty()
    }

    /// `ScanStart::flags` of this superblock.
    pub fn flags(&self) -> u32 {
        let mut f = 0;
        if multi_root(&self.fstype) {
            f |= sandbox_common::SB_F_MULTI_ROOT;
        }
        if !self.root_mounted() {
            f |= sandbox_common::SB_F_SUBDIRS;
        } else if !self.dirs.is_empty() {
            f |= sandbox_common::SB_F_SUBVOLS;
        }
        f
    }

    /// The full path of `sb_path` (a path within the superblock), placed as the programs
    /// place it: below the first mounted directory it is in, else below the root's mount
    /// point. `None`: the root is not mounted and the path is below no mounted directory.
    pub fn place(&self, sb_path: &[u8]) -> Option<Vec<u8>> {
        // As the programs: the shallowest mounted directory, then deeper subvolume mounts.
        let mut placed = None;
        for d in &self.dirs {
            let r = d.root.as_bytes();
            if let Some(rest) = sb_path.strip_prefix(r)
                && (rest.is_empty() || rest[0] == b'/')
                && (d.subvol || (placed.is_none() && !self.root_mounted()))
            {
                placed = Some(join(&d.mount_point, rest));
            }
        }
        placed.or_else(|| {
            self.root_mounted().then(|| {
                join(
                    &self.mount_point,
                    if sb_path == b"/" { b"" } else { sb_path },
                )
            })
        })
    }
}

/// `mount_point` + `rest` (empty or starting with `/`).
fn join(mount_point: &str, rest: &[u8]) -> Vec<u8> {
    if rest.is_empty() {
        return mount_point.as_bytes().to_vec();
    }
    [prefix(mount_point).as_bytes(), rest].concat()
}

/// Kernel `s_dev` encoding: `(major << 20) | minor` (stat's `st_dev` is encoded differently).
pub fn kernel_dev(major: u32, minor: u32) -> u32 {
    (major << 20) | minor
}

/// Kernel encoding of a `stat` `st_dev`.
pub fn kernel_dev_of(st_dev: u64) -> u32 {
    kernel_dev(libc::major(st_dev), libc::minor(st_dev))
}

/// Reads `/proc/self/mountinfo`.
/// Wakes up when the mount table of this mount namespace changes (the kernel signals it
/// with `POLLPRI` on mountinfo), so the loader can tell the programs where a new file
/// system sits before anyone uses it.
pub struct MountWatch(tokio::io::unix::AsyncFd<std::fs::File>);

impl MountWatch {
    pub fn new() -> std::io::Result<Self> {
        let f = std::fs::File::open("/proc/self/mountinfo")?;
        // SAFETY: the File owns its descriptor for as long as the AsyncFd exists.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(f, tokio::io::Interest::PRIORITY)
        }?;
        Ok(Self(fd))
    }

    pub async fn changed(&mut self) -> std::io::Result<()> {
        let mut g = self.0.ready(tokio::io::Interest::PRIORITY).await?;
        g.clear_ready();
        Ok(())
    }
}

pub fn read() -> std::io::Result<Vec<Superblock>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The kernel's device number of the tmpfs mounted at `/dev/shm` (POSIX shared memory,
/// whose files the programs keep to their makers: `shm.rs` there), 0 when there is none:
/// only a tmpfs whose root is mounted at that very directory (wherever `/dev/shm` leads),
/// so that no other file system's files are judged as shared memory.
pub fn shm_dev() -> u32 {
    let Ok(at) = std::fs::canonicalize("/dev/shm") else {
        return 0;
    };
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return 0;
    };
    shm_dev_in(&text, &at.to_string_lossy())
}

/// [`shm_dev`] of a mountinfo text, the shared memory directory being `at`. The last mount
/// there is the one in view.
fn shm_dev_in(text: &str, at: &str) -> u32 {
    text.lines()
        .filter_map(MountInfo::of)
        .rfind(|m| m.mount_point == at)
        .filter(|m| m.fstype == "tmpfs" && m.root == "/")
        .map_or(0, |m| m.dev)
}

/// One line of mountinfo: the fields sandbox uses.
struct MountInfo<'a> {
    dev: u32,
    /// The mounted directory within its superblock, escapes undone.
    root: String,
    mount_point: String,
    fstype: &'a str,
    /// The superblock's options (btrfs's `subvol=`).
    options: Option<&'a str>,
}

impl<'a> MountInfo<'a> {
    fn of(line: &'a str) -> Option<Self> {
        let f: Vec<&str> = line.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        if f.len() < 5 || sep + 1 >= f.len() {
            return None;
        }
        let (maj, min) = f[2].split_once(':')?;
        Some(MountInfo {
            dev: kernel_dev(maj.parse().ok()?, min.parse().ok()?),
            root: unescape(f[3]),
            mount_point: unescape(f[4]),
            fstype: f[sep + 1],
            options: f.get(sep + 3).copied(),
        })
    }
}

/// One entry per superblock. Where its root (`root == "/"`) is mounted several times, the
/// shortest mount point wins, and bind mounts of subdirectories are aliases, except btrfs
/// subvolume mounts (`subvol=` is the mount's root), which place their own paths. Where the
/// root is not mounted, every mounted directory places the paths below it (for a directory
/// mounted several times, at its shortest mount point).
pub fn parse(text: &str) -> Vec<Superblock> {
    // dev -> (fstype, root mount points, (root, mount point, is a subvolume))
    type Mounts = (String, Vec<String>, Vec<(String, String, bool)>);
    let mut by_dev: BTreeMap<u32, Mounts> = BTreeMap::new();
    // A file bind-mounted and then replaced shows as `...//deleted`.
    let live_root = |r: String| r.strip_suffix("//deleted").map_or(r.clone(), str::to_owned);
    for m in text.lines().filter_map(MountInfo::of) {
        let (root, mount_point) = (live_root(m.root), m.mount_point);
        let e = by_dev
            .entry(m.dev)
            .or_insert_with(|| (m.fstype.to_owned(), Vec::new(), Vec::new()));
        if root == "/" {
            e.1.push(mount_point);
        } else {
            let subvol = m.fstype == "btrfs"
                && m.options.is_some_and(|o| {
                    o.split(',').any(|o| {
                        o.strip_prefix("subvol=")
                            .is_some_and(|v| unescape(v) == root)
                    })
                });
            e.2.push((root, mount_point, subvol));
        }
    }
    let shortest = |a: &String, b: &String| (a.len(), a).cmp(&(b.len(), b));
    by_dev
        .into_iter()
        .map(|(dev, (fstype, roots, subdirs))| {
            let mount_point = roots.into_iter().min_by(shortest).unwrap_or_default();
            let mut dirs: BTreeMap<String, (String, bool)> = BTreeMap::new();
            for (root, mp, subvol) in subdirs {
                if !mount_point.is_empty() && !subvol {
                    continue;
                }
                let root = root.trim_end_matches('/').to_owned();
                match dirs.get(&root) {
                    Some((old, _)) if shortest(old, &mp).is_le() => {}
                    _ => {
                        dirs.insert(root, (mp, subvol));
                    }
                }
            }
            let mut dirs: Vec<MountedDir> = dirs
                .into_iter()
                .map(|(root, (mount_point, subvol))| MountedDir {
                    root,
                    mount_point,
                    subvol,
                })
                .collect();
            dirs.sort_by(|a, b| shortest(&a.root, &b.root));
            Superblock {
                dev,
                mount_point,
                fstype,
                dirs,
            }
        })
        .collect()
}

/// A mounted directory whose files the programs name by another path than the one it is
/// mounted at: a subdirectory of a file system whose root is mounted elsewhere (`/data`
/// mounted, `/data/home` bind-mounted on `/home`), or a second mount of a directory placed
/// at a shorter mount point. Rules written for paths below `mount_point` are compiled for
/// `placed` too (`compile::alias`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Alias {
    pub mount_point: String,
    /// What the programs call the mounted directory (`Superblock::place` of its root).
    pub placed: String,
}

/// The aliases of this mount namespace's table.
pub fn aliases() -> Vec<Alias> {
    std::fs::read_to_string("/proc/self/mountinfo").map_or_else(|_| Vec::new(), |t| aliases_in(&t))
}

/// The aliases of a mountinfo text: mounts in view (no later mount at their mount point or
/// above it) whose root the programs place elsewhere. A mount whose root they do not place
/// has none: its files are denied (`reason: path_unresolved`).
pub fn aliases_in(text: &str) -> Vec<Alias> {
    let sbs = parse(text);
    let lines: Vec<MountInfo<'_>> = text.lines().filter_map(MountInfo::of).collect();
    let below = |p: &str, q: &str| {
        p == q || q == "/" || p.strip_prefix(q).is_some_and(|r| r.starts_with('/'))
    };
    let mut out: Vec<Alias> = Vec::new();
    for (i, m) in lines.iter().enumerate() {
        if lines[i + 1..]
            .iter()
            .any(|l| below(&m.mount_point, &l.mount_point))
        {
            continue;
        }
        let Some(sb) = sbs.iter().find(|s| s.dev == m.dev) else {
            continue;
        };
        let root = m.root.strip_suffix("//deleted").unwrap_or(&m.root);
        let Some(placed) = sb.place(root.as_bytes()) else {
            continue;
        };
        let placed = String::from_utf8_lossy(&placed).into_owned();
        if placed != m.mount_point {
            out.push(Alias {
                mount_point: m.mount_point.clone(),
                placed,
            });
        }
    }
    out.sort();
    out.dedup();
    out
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len() + 0
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// File systems whose superblock has several roots: network file systems give each
/// mounted server directory a root of its own, not connected to the superblock's. On every
/// other file system a path walk that ends at a root other than the superblock's is a
/// disconnected dentry, and the programs deny it.
pub fn multi_root(fstype: &str) -> bool {
    matches!(
        fstype,
        "nfs" | "nfs4" | "cifs" | "smb3" | "ceph" | "9p" | "afs" | "lustre"
    )
}

/// The path prefix the kernel's in-superblock path is appended to ("" for `/`).
pub fn prefix(mount_point: &str) -> &str {
    if mount_point == "/" {
        ""
    } else {
        mount_point.trim_end_matches('/')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_is_a_tmpfs_mounted_at_its_directory() {
        let text = "\
22 1 0:21 / / rw - ext4 /dev/vda rw
24 22 0:5 / /dev rw - devtmpfs udev rw
25 24 0:26 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw
26 22 0:27 / /run rw - tmpfs tmpfs rw
";
        assert_eq!(shm_dev_in(text, "/dev/shm"), kernel_dev(0, 26));
        // A directory of another file system, or a subdirectory of a tmpfs mounted there
        // (its other files are not shared memory), or a mount over it that is not a tmpfs:
        // nothing.
        assert_eq!(shm_dev_in(text, "/run/shm"), 0);
        let sub = format!("{text}27 24 0:27 /shm /dev/shm rw - tmpfs tmpfs rw\n");
        assert_eq!(shm_dev_in(&sub, "/dev/shm"), 0);
        let over = format!("{text}28 25 0:40 / /dev/shm rw - fuse.x x rw\n");
        assert_eq!(shm_dev_in(&over, "/dev/shm"), 0);
        // The last mount is the one in view.
        let again = format!("{text}29 25 0:41 / /dev/shm rw - tmpfs tmpfs rw\n");
        assert_eq!(shm_dev_in(&again, "/dev/shm"), kernel_dev(0, 41));
    }

    #[test]
    fn mounts_of_subdirectories_of_a_placed_root_are_aliases() {
        // A data disk with its home bind-mounted on /home; a second mount of a tmpfs.
        let text = "\
22 1 0:21 / / rw - ext4 /dev/vda rw
30 22 8:17 / /data rw - ext4 /dev/vdb rw
31 22 8:17 /home /home rw - ext4 /dev/vdb rw
32 22 0:30 / /a rw - tmpfs tmpfs rw
33 22 0:30 / /b/c rw - tmpfs tmpfs rw
34 22 0:30 /x /mnt/x rw - tmpfs tmpfs rw
";
        let a = |m: &str, p: &str| Alias {
            mount_point: m.into(),
            placed: p.into(),
        };
        assert_eq!(
            aliases_in(text),
            vec![
                a("/b/c", "/a"),
                a("/home", "/data/home"),
                a("/mnt/x", "/a/x")
            ]
        );
        // Hidden by a later mount at or above it: none.
        let hidden = format!(
            "{text}35 22 0:40 / /home rw - tmpfs tmpfs rw\n36 22 0:41 / /mnt rw - tmpfs tmpfs rw\n"
        );
        assert_eq!(aliases_in(&hidden), vec![a("/b/c", "/a")]);
        // OSTree: the physical root at /sysroot, `/` and `/var` subdirectories of it.
        let ostree = "\
20 1 8:3 /ostree/deploy/os/deploy/abc.0 / rw - xfs /dev/vda3 rw
21 20 8:3 / /sysroot rw - xfs /dev/vda3 rw
22 20 8:3 /ostree/deploy/os/var /var rw - xfs /dev/vda3 rw
";
        assert_eq!(
            aliases_in(ostree),
            vec![
                a("/", "/sysroot/ostree/deploy/os/deploy/abc.0"),
                a("/var", "/sysroot/ostree/deploy/os/var"),
            ]
        );
        // Only subdirectories mounted (the root not): each places its own files.
        assert!(aliases_in("22 1 8:1 /@ / rw - ext4 /dev/vda rw\n").is_empty());
    }

    #[test]
    fn picks_root_mounts_and_unescapes() {
        let text = "\
22 1 0:21 / / rw - ext4 /dev/vda rw
30 22 0:30 /sub /mnt/alias rw - tmpfs tmpfs rw
31 22 0:30 / /data/my\\040dir rw - tmpfs tmpfs rw
32 22 0:30 / /a rw - tmpfs tmpfs rw
";
        let sbs = parse(text);
        assert_eq!(sbs.len(), 2);
        assert_eq!(
            sbs[0],
            Superblock {
                dev: kernel_dev(0, 21),
                mount_point: "/".into(),
                fstype: "ext4".into(),
                dirs: vec![],
            }
        );
        assert_eq!(sbs[1].mount_point, "/a");
        assert_eq!(prefix("/"), "");
        assert_eq!(prefix("/a"), "/a");
        assert_eq!(unescape("/data/my\\040dir"), "/data/my dir");
    }

    #[test]
    fn places_paths_of_superblocks_mounted_by_subdirectory() {
        // Ubuntu on btrfs: the top level is not mounted, two subvolumes are. A bind mount of
        // a subdirectory of an ext4 file system whose root was unmounted.
        let text = "\
25 1 0:33 /@ / rw - btrfs /dev/sda2 rw,subvolid=256,subvol=/@
26 25 0:33 /@home /home rw - btrfs /dev/sda2 rw,subvolid=257,subvol=/@home
27 25 0:33 /@home/u/data /data rw - btrfs /dev/sda2 rw,subvolid=257,subvol=/@home
28 25 0:33 /@home /mnt/h rw - btrfs /dev/sda2 rw,subvolid=257,subvol=/@home
40 25 7:0 /vol /srv/my\\040vol rw - ext4 /dev/loop0 rw
";
        let sbs = parse(text);
        let btrfs = &sbs[0];
        assert!(!btrfs.root_mounted());
        assert_eq!(btrfs.flags(), sandbox_common::SB_F_SUBDIRS);
        let roots: Vec<(&str, &str)> = btrfs
            .dirs
            .iter()
            .map(|d| (d.root.as_str(), d.mount_point.as_str()))
            .collect();
        assert_eq!(
            roots,
            [("/@", "/"), ("/@home", "/home"), ("/@home/u/data", "/data")]
        );
        let place = |p: &str| {
            btrfs
                .place(p.as_bytes())
                .map(|v| String::from_utf8(v).unwrap())
        };
        assert_eq!(
            place("/@home/u/.ssh/id").as_deref(),
            Some("/home/u/.ssh/id")
        );
        assert_eq!(place("/@home").as_deref(), Some("/home"));
        assert_eq!(place("/@/etc/shadow").as_deref(), Some("/etc/shadow"));
        assert_eq!(place("/@").as_deref(), Some("/"));
        // The shallowest mounted directory places a path (as the programs do).
        assert_eq!(place("/@home/u/data/x").as_deref(), Some("/home/u/data/x"));
        // Below no mounted directory: not placed (the programs deny it).
        assert_eq!(place("/@snapshots/1/etc/shadow"), None);
        assert_eq!(place("/@homer/x"), None);
        assert_eq!(place("/"), None);
        let ext4 = &sbs[1];
        assert_eq!(ext4.flags(), sandbox_common::SB_F_SUBDIRS);
        assert_eq!(
            ext4.place(b"/vol/secret/key").as_deref(),
            Some(&b"/srv/my vol/secret/key"[..])
        );
    }

    #[test]
    fn subvolumes_place_their_paths_while_the_top_level_is_mounted_too() {
        // A snapshot tool mounts the top level; a bind mount of a plain directory stays an
        // alias.
        let text = "\
25 1 0:33 /@ / rw - btrfs /dev/sda2 rw,subvolid=256,subvol=/@
26 25 0:33 /@home /home rw - btrfs /dev/sda2 rw,subvolid=257,subvol=/@home
29 25 0:33 / /run/timeshift/backup rw - btrfs /dev/sda2 rw,subvolid=5,subvol=/
30 25 0:33 /@home/u/proj /work rw - btrfs /dev/sda2 rw,subvolid=257,subvol=/@home
";
        let sbs = parse(text);
        let b = &sbs[0];
        assert_eq!(b.mount_point, "/run/timeshift/backup");
        assert_eq!(b.flags(), sandbox_common::SB_F_SUBVOLS);
        assert_eq!(b.dirs.len(), 2);
        let place = |p: &str| String::from_utf8(b.place(p.as_bytes()).unwrap()).unwrap();
        assert_eq!(place("/@home/u/proj/x"), "/home/u/proj/x");
        assert_eq!(place("/@snapshots/1"), "/run/timeshift/backup/@snapshots/1");
        assert_eq!(place("/"), "/run/timeshift/backup");
    }

    #[test]
    fn nested_subvolume_mounts_place_their_paths() {
        // openSUSE with snapper: the root file system is a snapshot below `.snapshots`,
        // which is mounted too; a plain bind mount below a subvolume stays an alias.
        let text = "\
25 1 0:33 /@/.snapshots/1/snapshot / rw - btrfs /dev/sda2 rw,subvolid=268,subvol=/@/.snapshots/1/snapshot
26 25 0:33 /@/.snapshots /.snapshots rw - btrfs /dev/sda2 rw,subvolid=267,subvol=/@/.snapshots
27 25 0:33 /@/home /home rw - btrfs /dev/sda2 rw,subvolid=264,subvol=/@/home
28 25 0:33 /@/home/u/.ssh /mnt/keys rw - btrfs /dev/sda2 rw,subvolid=264,subvol=/@/home
29 25 0:33 /@/srv/conf.yaml//deleted /etc/conf.yaml rw - btrfs /dev/sda2 rw,subvolid=256,subvol=/@
";
        let sbs = parse(text);
        let b = &sbs[0];
        let place = |p: &str| b.place(p.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(
            place("/@/.snapshots/1/snapshot/etc/shadow").as_deref(),
            Some("/etc/shadow")
        );
        assert_eq!(place("/@/.snapshots/1/snapshot").as_deref(), Some("/"));
        assert_eq!(
            place("/@/.snapshots/2/snapshot/etc/shadow").as_deref(),
            Some("/.snapshots/2/snapshot/etc/shadow")
        );
        assert_eq!(
            place("/@/home/u/.ssh/id").as_deref(),
            Some("/home/u/.ssh/id")
        );
        assert_eq!(place("/@/srv/conf.yaml").as_deref(), Some("/etc/conf.yaml"));
        assert!(b.dirs.iter().any(|d| d.root == "/@/srv/conf.yaml"));
    }
}
