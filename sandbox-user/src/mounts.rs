//! The mount table: which canonical path each superblock is mounted at. The kernel rebuilds
//! paths only up to a superblock's root; the loader supplies where that root is.

use std::collections::BTreeMap;

/// One superblock: kernel `s_dev` encoding and its canonical mount point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Superblock {
    pub dev: u32,
    pub mount_point: String,
    pub fstype: String,
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

/// One entry per superblock. Where a superblock is mounted several times, the mount of its
/// root (`root == "/"`) with the shortest mount point wins; bind mounts of subdirectories
/// never define it (their paths are aliases).
pub fn parse(text: &str) -> Vec<Superblock> {
    let mut best: BTreeMap<u32, (bool, Superblock)> = BTreeMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let Some(sep) = f.iter().position(|x| *x == "-") else {
            continue;
        };
        if f.len() < 5 || sep + 1 >= f.len() {
            continue;
        }
        let Some((maj, min)) = f[2].split_once(':') else {
            continue;
        };
        let (Ok(maj), Ok(min)) = (maj.parse(), min.parse()) else {
            continue;
        };
        let dev = kernel_dev(maj, min);
        let root_is_sb_root = f[3] == "/";
        let sb = Superblock {
            dev,
            mount_point: unescape(f[4]),
            fstype: f[sep + 1].to_owned(),
        };
        let better = match best.get(&dev) {
            None => true,
            Some((had_root, old)) => {
                (root_is_sb_root && !had_root)
                    || (root_is_sb_root == *had_root
                        && sb.mount_point.len() < old.mount_point.len())
            }
        };
        if better {
            best.insert(dev, (root_is_sb_root, sb));
        }
    }
    best.into_values().map(|(_, sb)| sb).collect()
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
                fstype: "ext4".into()
            }
        );
        assert_eq!(sbs[1].mount_point, "/a");
        assert_eq!(prefix("/"), "");
        assert_eq!(prefix("/a"), "/a");
        assert_eq!(unescape("/data/my\\040dir"), "/data/my dir");
    }
}
