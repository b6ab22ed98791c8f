//! The audit log file: owner-only, append-only, rotated by size, never turned against root.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::record::Record;
use crate::host::safepath;

/// An append-only JSON-lines file, created with mode 0600, written through a buffer
/// (flushed after every batch of records and on every tick), rotated by size
/// (`path.1` .. `path.N`). A write that fails (disk full) does not stop enforcement: the
/// records are counted, reported on stderr, and written as an `audit_loss` record once
/// writing works again.
///
/// The file is opened so that the confined command cannot turn it against root or take
/// it away (see `safepath`): its directory must be one only root can change, as seen from
/// the command's user; the file is never a symlink, is root's with one link (or a
/// character device such as `/dev/null`), and rotation renames within the directory
/// descriptor opened at the start, so a later change of the path changes nothing.
pub struct AuditFile {
    /// As given, for messages.
    path: PathBuf,
    dir: safepath::Dir,
    name: std::ffi::OsString,
    out: std::io::BufWriter<File>,
    /// A regular file (rotated, mode fixed); a character device is left alone.
    regular: bool,
    /// Bytes in the current file.
    size: u64,
    max_size: u64,
    keep: u32,
    /// Records in the buffer, not yet handed to the kernel.
    buffered: u64,
    /// Records lost to write errors and not yet reported in the file.
    unwritten: u64,
    /// Records lost since the start (for metrics): to write errors, or rotated away.
    lost_total: u64,
    /// Records of this session in the current file, and in each file it rotated (the
    /// oldest first): past `keep` files, rotation deletes this session's own records,
    /// which are then counted as lost (a flood of distinct denials filling the budget).
    current_records: u64,
    rotated: std::collections::VecDeque<u64>,
    /// Whether the terminal was told that rotation deleted records of this session.
    told_rotated: bool,
    failing: bool,
    /// The line being written (kept: one allocation for the file, not one per record).
    line: Vec<u8>,
}

impl Drop for AuditFile {
    fn drop(&mut self) {
        self.say_unwritten();
    }
}

/// Why an audit log was refused or could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum AuditOpenError {
    #[error(
        "refusing audit log {path}: {cause}. The command could replace or remove its log, or \
         plant a link that makes sandbox (root) write to another file. Use a directory only \
         root can write, e.g. --audit-log /var/log/sandbox/audit.jsonl",
        path = path.display()
    )]
    Unsafe {
        path: PathBuf,
        cause: safepath::SafeError,
    },
    #[error("opening audit log {path}: {cause}", path = path.display())]
    Io {
        path: PathBuf,
        cause: safepath::SafeError,
    },
}

/// Opens (or creates) the log file `name` in `dir`; see [`AuditFile`] for what is refused.
/// Returns the file and whether it is a regular file.
fn open_log(
    dir: &safepath::Dir,
    name: &std::ffi::OsStr,
) -> Result<(File, bool), safepath::SafeError> {
    let here = dir.path.join(name);
    let unsafe_file = |why: String| safepath::SafeError::Unsafe {
        path: here.clone(),
        why,
    };
    // O_NONBLOCK: a FIFO planted here must not hang sandbox (it is refused below).
    let base =
        libc::O_WRONLY | libc::O_APPEND | libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_NONBLOCK;
    let mut created = false;
    let mut fd = None;
    for _ in 0..3 {
        match safepath::openat(&dir.fd, name, base | libc::O_CREAT | libc::O_EXCL, 0o600) {
            Ok(f) => {
                created = true;
                fd = Some(f);
                break;
            }
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
            Err(e) => return Err(safepath::SafeError::Io { path: here, err: e }),
        }
        match safepath::openat(&dir.fd, name, base, 0) {
            Ok(f) => {
                fd = Some(f);
                break;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                return Err(unsafe_file("is a symbolic link".into()));
            }
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                return Err(unsafe_file("is a FIFO or socket, not a file".into()));
            }
            Err(e) => return Err(safepath::SafeError::Io { path: here, err: e }),
        }
    }
    let fd = fd.ok_or_else(|| unsafe_file("keeps appearing and disappearing".into()))?;
    let st = safepath::fstat(&fd).map_err(|err| safepath::SafeError::Io {
        path: here.clone(),
        err,
    })?;
    let regular = match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => true,
        libc::S_IFCHR => false,
        _ => {
            return Err(unsafe_file(
                "is neither a regular file nor a character device".into(),
            ));
        }
    };
    if regular && !created {
        if st.st_uid != 0 {
            return Err(unsafe_file(format!(
                "is owned by uid {}, not root: sandbox does not append to files it did not make",
                st.st_uid
            )));
        }
        if st.st_nlink != 1 {
            return Err(unsafe_file(format!(
                "has {} hard links: it may be another file under a second name",
                st.st_nlink
            )));
        }
        if st.st_size > 0 && !is_a_log(dir, name, &st) {
            return Err(unsafe_file(
                "is not a sandbox audit log (its first line is not a record with a \
                 schema_version): sandbox appends only to its own logs"
                    .into(),
            ));
        }
    }
    if regular {
        // Our log (made now, or root's and already in our format) with one name: make it
        // owner-only (fchmod on what was opened, never on a name).
        if st.st_mode & 0o077 != 0
            && let Err(e) =
                nix::sys::stat::fchmod(&fd, nix::sys::stat::Mode::from_bits_retain(0o600))
        {
            return Err(safepath::SafeError::Io {
                path: here,
                err: e.into(),
            });
        }
    }
    // Back to blocking writes: the file is ours (this open file description is not shared).
    {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        if let Ok(fl) = fcntl(&fd, FcntlArg::F_GETFL) {
            let fl = OFlag::from_bits_retain(fl) & !OFlag::O_NONBLOCK;
            let _ = fcntl(&fd, FcntlArg::F_SETFL(fl));
        }
    }
    Ok((File::from(fd), regular))
}

/// Whether the file `name` in `dir`, which must be the inode `st`, is a sandbox audit log:
/// its first line is a record of ours (`unmapped.schema_version`, or the top-level
/// `schema_version` of the records before OCSF).
fn is_a_log(dir: &safepath::Dir, name: &std::ffi::OsStr, st: &libc::stat) -> bool {
    use std::io::Read;

    let Ok(fd) = safepath::openat(
        &dir.fd,
        name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    ) else {
        return false;
    };
    if !safepath::fstat(&fd).is_ok_and(|r| r.st_dev == st.st_dev && r.st_ino == st.st_ino) {
        return false;
    }
    let mut head = Vec::new();
    if File::from(fd).take(1 << 16).read_to_end(&mut head).is_err() {
        return false;
    }
    let Some(line) = head
        .split(|b| *b == b'\n')
        .next()
        .filter(|_| head.contains(&b'\n'))
    else {
        return false;
    };
    serde_json::from_slice::<serde_json::Value>(line).is_ok_and(|v| {
        v.get("schema_version").is_some() || v.pointer("/unmapped/schema_version").is_some()
    })
}

impl AuditFile {
    /// Opens `path` with the default rotation, trusted only if no non-root user can
    /// change it.
    pub fn open(path: &Path) -> Result<Self, AuditOpenError> {
        Self::with_rotation(
            path,
            crate::policy::AUDIT_MAX_SIZE_MB << 20,
            crate::policy::AUDIT_KEEP,
            &safepath::Agent::AnyNonRoot,
        )
    }

    /// Opens `path` (creating it and its directory as needed) for a command that runs as
    /// `agent`.
    pub fn with_rotation(
        path: &Path,
        max_size: u64,
        keep: u32,
        agent: &safepath::Agent,
    ) -> Result<Self, AuditOpenError> {
        let wrap = |cause: safepath::SafeError| match cause {
            safepath::SafeError::Unsafe { .. } => AuditOpenError::Unsafe {
                path: path.to_path_buf(),
                cause,
            },
            safepath::SafeError::Io { .. } => AuditOpenError::Io {
                path: path.to_path_buf(),
                cause,
            },
        };
        let (dir, name) = safepath::split(path).map_err(wrap)?;
        let dir = safepath::open_dir(&dir, agent, true).map_err(wrap)?;
        let (file, regular) = open_log(&dir, &name).map_err(wrap)?;
        let size = file.metadata().map_or(0, |m| m.len());
        Ok(Self {
            path: path.to_path_buf(),
            dir,
            name,
            out: std::io::BufWriter::with_capacity(1 << 16, file),
            regular,
            size,
            max_size,
            keep,
            buffered: 0,
            unwritten: 0,
            lost_total: 0,
            current_records: 0,
            rotated: std::collections::VecDeque::new(),
            told_rotated: false,
            failing: false,
            line: Vec::with_capacity(4096),
        })
    }

    /// The file as found (directory with symlinks resolved, then the name), when it is a
    /// regular file (not a device such as `/dev/null`).
    pub fn regular_file(&self) -> Option<PathBuf> {
        self.regular.then(|| self.dir.path.join(&self.name))
    }

    /// Writes one record (buffered).
    pub fn write(&mut self, v: &impl Serialize) -> std::io::Result<()> {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        super::json::write(&mut line, v)?;
        line.push(b'\n');
        self.write_line(&line);
        self.line = line;
        Ok(())
    }

    /// Writes a record encoded already (one of [`Lines::iter`]), as [`AuditFile::write`].
    pub fn write_encoded(&mut self, line: &[u8]) {
        self.write_line(line);
    }

    /// A line to the buffer; a failure is counted (see [`AuditFile::lost`]), never returned.
    fn write_line(&mut self, line: &[u8]) {
        if self.regular && self.size > 0 && self.size + line.len() as u64 > self.max_size {
            self.rotate();
        }
        if self.out.write_all(line).is_err() {
            let n = 1 + std::mem::take(&mut self.buffered);
            self.lost(n);
            return;
        }
        self.size += line.len() as u64;
        self.buffered += 1;
        self.current_records += 1;
    }

    /// Hands the buffer to the kernel; reports records lost to earlier failures once
    /// writing works again.
    pub fn flush(&mut self) -> std::io::Result<()> {
        if self.out.flush().is_err() {
            let n = std::mem::take(&mut self.buffered);
            self.lost(n);
            return Ok(());
        }
        self.buffered = 0;
        if self.unwritten > 0 {
            let n = std::mem::take(&mut self.unwritten);
            let mut line = serde_json::to_vec(&Record::loss(n, "audit log write failed", None))?;
            line.push(b'\n');
            if self
                .out
                .write_all(&line)
                .and_then(|()| self.out.flush())
                .is_err()
            {
                self.unwritten += n;
                return Ok(());
            }
            self.size += line.len() as u64;
            crate::term::line(&format!(
                "sandbox: audit log {} is writable again; {n} records were lost (recorded)",
                self.path.display()
            ));
            self.failing = false;
        }
        Ok(())
    }

    /// Records lost to write errors since the log was opened.
    pub fn lost_total(&self) -> u64 {
        self.lost_total
    }

    fn lost(&mut self, n: u64) {
        self.unwritten += n;
        self.lost_total += n;
        if !self.failing {
            self.failing = true;
            tracing::warn!(
                "cannot write the audit log {}: records are counted and \
                 reported when writing works again; enforcement continues",
                self.path.display()
            );
        }
        // Drop what is stuck in the buffer (it is counted), keep the file.
        if let Ok(f) = self.out.get_ref().try_clone() {
            let stuck =
                std::mem::replace(&mut self.out, std::io::BufWriter::with_capacity(1 << 16, f));
            drop(stuck.into_parts());
        }
    }

    /// Said when the log closes with records it could never write (the file system stayed
    /// full or failing to the end): they are gone, and only the terminal can say so.
    fn say_unwritten(&mut self) {
        let _ = self.flush();
        if self.unwritten > 0 {
            crate::term::line(&format!(
                "sandbox: {} audit records could not be written to {} and are lost (the file \
                 system stayed full or failing to the end of the run)",
                self.unwritten,
                self.path.display()
            ));
        }
    }

    fn numbered(&self, n: u32) -> std::ffi::OsString {
        let mut p = self.name.clone();
        p.push(format!(".{n}"));
        p
    }

    /// `name` -> `name.1` -> ... -> `name.keep` (the oldest goes), then a new `name`; all
    /// within the directory opened at the start (`renameat`/`unlinkat` on its descriptor).
    fn rotate(&mut self) {
        if self.flush().is_err() {
            return;
        }
        // This session's records in the file that rotation deletes.
        self.rotated
            .push_back(std::mem::take(&mut self.current_records));
        let deleted = if self.rotated.len() > self.keep as usize {
            self.rotated.pop_front().unwrap_or(0)
        } else {
            0
        };
        if self.keep == 0 {
            drop(unlinkat(&self.dir, &self.name));
        } else {
            drop(unlinkat(&self.dir, &self.numbered(self.keep)));
            for n in (1..self.keep).rev() {
                drop(renameat(
                    &self.dir,
                    &self.numbered(n),
                    &self.numbered(n + 1),
                ));
            }
            drop(renameat(&self.dir, &self.name, &self.numbered(1)));
        }
        // Someone else's file where ours should be (a sticky directory such as /tmp): it
        // goes, ours comes; a second failure loses records (counted) rather than trust it.
        let reopened = open_log(&self.dir, &self.name).or_else(|_| {
            drop(unlinkat(&self.dir, &self.name));
            open_log(&self.dir, &self.name)
        });
        match reopened {
            Ok((f, _)) => {
                self.out = std::io::BufWriter::with_capacity(1 << 16, f);
                self.size = 0;
            }
            Err(_) => self.lost(0),
        }
        if deleted > 0 {
            self.lost_total += deleted;
            if !self.told_rotated {
                self.told_rotated = true;
                crate::term::line(&format!(
                    "sandbox: the audit log {} rotated away records of this run (more than \
                     max_size_mb x (keep + 1) of them: a flood of denials?); each loss is \
                     recorded with its count",
                    self.path.display()
                ));
            }
            let why = "rotated out of the audit log (max_size_mb x (keep + 1) exceeded)";
            drop(self.write(&Record::loss(deleted, why, None)));
        }
    }
}

fn unlinkat(dir: &safepath::Dir, name: &std::ffi::OsStr) -> std::io::Result<()> {
    Ok(nix::unistd::unlinkat(
        &dir.fd,
        std::path::Path::new(name),
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    )?)
}

fn renameat(
    dir: &safepath::Dir,
    from: &std::ffi::OsStr,
    to: &std::ffi::OsStr,
) -> std::io::Result<()> {
    Ok(nix::fcntl::renameat(
        &dir.fd,
        std::path::Path::new(from),
        &dir.fd,
        std::path::Path::new(to),
    )?)
}

/// Records encoded as the log's lines, apart from the file (by the thread that made them,
/// while the file's own thread writes earlier ones).
#[derive(Default)]
pub struct Lines {
    bytes: Vec<u8>,
    /// Where each line ends in `bytes` (after its newline).
    ends: Vec<usize>,
}

impl Lines {
    /// One record, as [`AuditFile::write`] writes it (nothing of it if it fails).
    pub fn push(&mut self, v: &impl Serialize) -> std::io::Result<()> {
        let start = self.bytes.len();
        if let Err(e) = super::json::write(&mut self.bytes, v) {
            self.bytes.truncate(start);
            return Err(e.into());
        }
        self.bytes.push(b'\n');
        self.ends.push(self.bytes.len());
        Ok(())
    }

    /// The lines, each with its newline.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.bytes[a..b])
    }

    /// Bytes held (kept for the next batch after `clear`).
    pub fn capacity(&self) -> usize {
        self.bytes.capacity()
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Records encoded by another thread (`Lines`) land as records written one by one:
    /// the same bytes, rotated at the same lines.
    #[test]
    fn encoded_lines_are_written_as_records_are() {
        let dir = std::env::temp_dir().join(format!("sandbox-lines-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (one, many) = (dir.join("one.jsonl"), dir.join("many.jsonl"));
        let open = |p: &Path| AuditFile::with_rotation(p, 300, 5, &safepath::Agent::AnyNonRoot);
        let (mut a, mut b) = (open(&one).unwrap(), open(&many).unwrap());
        let mut lines = Lines::default();
        for i in 0..20 {
            let rec = json!({ "n": i, "pad": "x\n\"".repeat(i) });
            a.write(&rec).unwrap();
            lines.push(&rec).unwrap();
            if lines.len() == 3 {
                lines.iter().for_each(|l| b.write_encoded(l));
                lines.clear();
            }
        }
        lines.iter().for_each(|l| b.write_encoded(l));
        a.flush().unwrap();
        b.flush().unwrap();
        for k in ["", ".1", ".2", ".3"] {
            let read = |p: &Path| std::fs::read(format!("{}{k}", p.display())).unwrap();
            assert_eq!(read(&one), read(&many), "{k}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Records of this session that rotation deletes are counted in a loss record: every
    /// record written is in a file or in a count.
    #[test]
    fn records_rotated_away_are_counted() {
        let dir = std::env::temp_dir().join(format!("sandbox-audit-gone-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("a.jsonl");
        let mut f = AuditFile::with_rotation(&path, 2000, 1, &safepath::Agent::AnyNonRoot).unwrap();
        for i in 0..40 {
            f.write(&json!({ "n": i, "pad": "x".repeat(300) })).unwrap();
            f.flush().unwrap();
        }
        let lines: Vec<Value> = [dir.join("a.jsonl.1"), path.clone()]
            .iter()
            .flat_map(|p| {
                std::fs::read_to_string(p)
                    .unwrap()
                    .lines()
                    .map(|l| serde_json::from_str::<Value>(l).unwrap())
                    .collect::<Vec<_>>()
            })
            .collect();
        let kept = lines.iter().filter(|v| v["n"].is_u64()).count() as u64;
        let counted: u64 = lines.iter().filter_map(|v| v["count"].as_u64()).sum();
        // The loss records of files deleted before the two kept ones went with them: what
        // the kept files say plus the losses still in them covers the tail of the writes.
        assert!(kept > 0 && counted > 0, "{lines:#?}");
        assert!(
            f.lost_total() + kept >= 40 - 1,
            "{} + {kept}",
            f.lost_total()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn audit_file_rotates_by_size_and_keeps_n() {
        let dir = std::env::temp_dir().join(format!("sandbox-audit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("a.jsonl");
        let mut f = AuditFile::with_rotation(&path, 2000, 2, &safepath::Agent::AnyNonRoot).unwrap();
        for i in 0..40 {
            f.write(&json!({ "n": i, "pad": "x".repeat(300) })).unwrap();
            f.flush().unwrap();
        }
        let read = |p: &Path| -> Vec<u64> {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                // Records of the writes (loss records, for the files rotated away, have
                // no `n`).
                .filter_map(|l| serde_json::from_str::<Value>(l).unwrap()["n"].as_u64())
                .collect()
        };
        let (cur, one, two) = (
            read(&path),
            read(&dir.join("a.jsonl.1")),
            read(&dir.join("a.jsonl.2")),
        );
        assert!(!dir.join("a.jsonl.3").exists());
        // Newest in the file, then .1, then .2, each under the size, none lost in between.
        let all: Vec<u64> = [two, one, cur.clone()].concat();
        assert_eq!(*all.last().unwrap(), 39);
        assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "{all:?}");
        assert!(std::fs::metadata(&path).unwrap().len() <= 2000);
        let mode = std::fs::metadata(&path).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o600
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_full_disk_loses_records_countably_and_never_fails() {
        // /dev/full: every write fails with ENOSPC (and its mode is left alone).
        let before = std::fs::metadata("/dev/full").unwrap().permissions();
        let mut f = AuditFile::with_rotation(
            Path::new("/dev/full"),
            1 << 20,
            1,
            &safepath::Agent::AnyNonRoot,
        )
        .unwrap();
        for i in 0..10 {
            f.write(&json!({ "n": i })).unwrap();
        }
        f.flush().unwrap();
        assert_eq!(f.unwritten, 10);
        assert!(f.failing);
        assert_eq!(
            std::fs::metadata("/dev/full").unwrap().permissions(),
            before
        );
    }

    /// A planted link, a second name for another file, a file of someone else's: refused,
    /// and the file behind is neither written nor chmod-ed.
    #[test]
    fn the_audit_file_cannot_be_turned_against_root() {
        let dir = std::env::temp_dir().join(format!("sandbox-audit-safe-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let mode = |p: &Path| {
            std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).unwrap().permissions())
                & 0o777
        };
        std::fs::set_permissions(&victim, std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("link.jsonl")).unwrap();
        let e = AuditFile::open(&dir.join("link.jsonl")).err().unwrap();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        std::fs::hard_link(&victim, dir.join("hard.jsonl")).unwrap();
        let e = AuditFile::open(&dir.join("hard.jsonl")).err().unwrap();
        assert!(e.to_string().contains("hard links"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        assert_eq!(mode(&victim), 0o644);
        // A FIFO does not hang the open.
        nix::unistd::mkfifo(
            &dir.join("fifo.jsonl"),
            nix::sys::stat::Mode::from_bits_retain(0o600),
        )
        .unwrap();
        assert!(AuditFile::open(&dir.join("fifo.jsonl")).is_err());
        // A world-writable directory (not sticky): refused, with the way out.
        std::fs::create_dir(dir.join("open")).unwrap();
        std::fs::set_permissions(
            dir.join("open"),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let e = AuditFile::open(&dir.join("open/a.jsonl")).err().unwrap();
        assert!(matches!(e, AuditOpenError::Unsafe { .. }), "{e}");
        assert!(e.to_string().contains("/var/log/sandbox"), "{e}");
        // Root's file that is not a sandbox log: not appended to, not chmod-ed.
        std::fs::write(dir.join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::fs::set_permissions(
            dir.join("passwd"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        let e = AuditFile::open(&dir.join("passwd")).err().unwrap();
        assert!(e.to_string().contains("not a sandbox audit log"), "{e}");
        assert_eq!(mode(&dir.join("passwd")), 0o644);
        // An existing log of ours that others could read is made owner-only.
        std::fs::write(
            dir.join("ours.jsonl"),
            "{\"actor\":{},\"schema_version\":1}\n",
        )
        .unwrap();
        std::fs::set_permissions(
            dir.join("ours.jsonl"),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .unwrap();
        drop(AuditFile::open(&dir.join("ours.jsonl")).unwrap());
        // A log sandbox wrote is appended to on the next run.
        let mut f = AuditFile::open(&dir.join("new.jsonl")).unwrap();
        f.write(&Record::loss(1, "test", None)).unwrap();
        f.flush().unwrap();
        drop(f);
        let mut f = AuditFile::open(&dir.join("new.jsonl")).unwrap();
        f.write(&Record::loss(2, "test", None)).unwrap();
        f.flush().unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("new.jsonl"))
                .unwrap()
                .lines()
                .count(),
            2
        );
        assert_eq!(mode(&dir.join("ours.jsonl")), 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Rotation happens in the directory opened at the start, even when its path changes.
    #[test]
    fn rotation_stays_in_the_directory_it_opened() {
        let base = std::env::temp_dir().join(format!("sandbox-audit-rot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("logs")).unwrap();
        let mut f = AuditFile::with_rotation(
            &base.join("logs/a.jsonl"),
            100,
            3,
            &safepath::Agent::AnyNonRoot,
        )
        .unwrap();
        f.write(&json!({ "n": 0, "pad": "x".repeat(60) })).unwrap();
        f.flush().unwrap();
        // The directory moves; a symlink takes its old name.
        std::fs::rename(base.join("logs"), base.join("moved")).unwrap();
        std::fs::create_dir(base.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(base.join("elsewhere"), base.join("logs")).unwrap();
        for i in 1..5 {
            f.write(&json!({ "n": i, "pad": "x".repeat(60) })).unwrap();
            f.flush().unwrap();
        }
        assert_eq!(
            std::fs::read_dir(base.join("elsewhere")).unwrap().count(),
            0
        );
        assert!(base.join("moved/a.jsonl.1").exists() && base.join("moved/a.jsonl.3").exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
