//! A minimal writer for the `newc` cpio format the kernel unpacks as an initramfs
//! (uncompressed: the kernel accepts it as is, and it saves a gzip step).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;

pub struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

const S_IFDIR: u32 = 0o040_000;
const S_IFREG: u32 = 0o100_000;

impl Cpio {
    pub fn new() -> Self {
        Self {
            out: Vec::new(),
            ino: 1,
            dirs: BTreeSet::new(),
        }
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        let name = name.trim_start_matches('/');
        let namesize = name.len() + 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            namesize,
            0
        );
        self.ino += 1;
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    /// Creates `path` and its parents.
    pub fn dir(&mut self, path: &str) {
        let mut cur = String::new();
        for c in path.split('/').filter(|c| !c.is_empty()) {
            cur.push('/');
            cur.push_str(c);
            if self.dirs.insert(cur.clone()) {
                let name = cur.clone();
                self.entry(&name, S_IFDIR | 0o755, &[]);
            }
        }
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        if let Some((parent, _)) = path.rsplit_once('/') {
            self.dir(parent);
        }
        self.entry(path, S_IFREG | mode, data);
    }

    /// Copies a host file (following symlinks) to `path`, keeping its permission bits.
    pub fn copy(&mut self, host: &Path, path: &str) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let data = std::fs::read(host)?;
        let mode = std::fs::metadata(host)?.permissions().mode() & 0o7777;
        self.file(path, mode, &data);
        Ok(())
    }

    pub fn finish(mut self, to: &Path) -> std::io::Result<()> {
        self.entry("TRAILER!!!", 0, &[]);
        let mut f = std::fs::File::create(to)?;
        f.write_all(&self.out)
    }
}
