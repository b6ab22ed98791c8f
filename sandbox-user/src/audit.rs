//! Audit records: decoding kernel events, the JSON-lines schema, the terminal line, and the
//! owner-only file sink.

use std::fs::File;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sandbox_common::{EventHeader, NO_RULE, decision, hook, reason};
use serde_json::{Value, json};

use crate::compile::CompiledPolicy;
use crate::host::mounts::Superblock;
use crate::host::safepath;

/// Version of the JSON record layout; bumped on incompatible changes.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    FileOpen,
    /// Reaching an address: `connect`, or `send` with a destination address.
    Net(&'static str),
    Exec,
    /// A change of names, judged as a write: the activity (`create`, `unlink`, ...).
    Name(&'static str),
    /// Self-protection and the boundary with other processes: `bpf`, `signal`, `ptrace`,
    /// `mount`, `task` (scheduling/priority of another process), `ioctl` (terminal input).
    Protect(&'static str),
    /// A unix socket peer: `connect` (stream) or `send` (datagram).
    Unix(&'static str),
    /// `socket(2)` of a family/type/protocol outside `network.sockets`.
    SocketCreate,
}

impl TryFrom<u32> for Hook {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        match v {
            hook::FILE_OPEN => Ok(Self::FileOpen),
            hook::SOCKET_CONNECT => Ok(Self::Net("connect")),
            hook::SOCKET_SENDMSG => Ok(Self::Net("send")),
            hook::BPF => Ok(Self::Protect("bpf")),
            hook::SIGNAL => Ok(Self::Protect("signal")),
            hook::PTRACE => Ok(Self::Protect("ptrace")),
            hook::MOUNT => Ok(Self::Protect("mount")),
            hook::BPRM_CHECK => Ok(Self::Exec),
            hook::CREATE => Ok(Self::Name("create")),
            hook::MKDIR => Ok(Self::Name("mkdir")),
            hook::SYMLINK => Ok(Self::Name("symlink")),
            hook::UNLINK => Ok(Self::Name("unlink")),
            hook::RMDIR => Ok(Self::Name("rmdir")),
            hook::LINK => Ok(Self::Name("link")),
            hook::RENAME => Ok(Self::Name("rename")),
            hook::TRUNCATE => Ok(Self::Name("truncate")),
            hook::CHMOD => Ok(Self::Name("chmod")),
            hook::CHOWN => Ok(Self::Name("chown")),
            hook::SETATTR => Ok(Self::Name("setattr")),
            hook::XATTR => Ok(Self::Name("xattr")),
            hook::UNIX_CONNECT => Ok(Self::Unix("connect")),
            hook::UNIX_SEND => Ok(Self::Unix("send")),
            hook::SOCKET_CREATE => Ok(Self::SocketCreate),
            hook::LISTEN => Ok(Self::Net("listen")),
            hook::IOCTL => Ok(Self::Protect("ioctl")),
            hook::TASK => Ok(Self::Protect("task")),
            hook::UMOUNT => Ok(Self::Protect("umount")),
            hook::KERNEL => Ok(Self::Protect("kernel")),
            hook::CLONE_INTO_CGROUP => Ok(Self::Protect("clone_into_cgroup")),
            other => Err(other),
        }
    }
}

/// A decoded kernel record.
#[derive(Debug, Clone)]
pub struct Event {
    pub header: EventHeader,
    pub hook: Hook,
    /// Path relative to the superblock root (file and exec events).
    pub sb_path: Vec<u8>,
    /// The acting process's executable, relative to the root of `header.exe_dev`.
    pub exe_path: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than the header")]
    Short(usize),
    #[error("unknown hook {0}")]
    Hook(u32),
    #[error("path length {len} exceeds the record ({avail} bytes)")]
    PathLen { len: u32, avail: usize },
}

impl Event {
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let n = size_of::<EventHeader>();
        if bytes.len() < n {
            return Err(DecodeError::Short(bytes.len()));
        }
        // SAFETY: EventHeader is repr(C) plain integers (any bit pattern is valid) and the
        // slice holds at least size_of::<EventHeader>() bytes; read_unaligned copes with
        // any alignment.
        let header: EventHeader = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let hook = Hook::try_from(header.hook).map_err(DecodeError::Hook)?;
        let avail = bytes.len() - n;
        let (p, x) = (header.path_len as usize, header.exe_len as usize);
        if p + x > avail {
            return Err(DecodeError::PathLen {
                len: header.path_len + header.exe_len,
                avail,
            });
        }
        Ok(Self {
            header,
            hook,
            sb_path: bytes[n..n + p].to_vec(),
            exe_path: bytes[n + p..n + p + x].to_vec(),
        })
    }
}

/// Turns records into JSON and text, with the policy and mount table for names.
pub struct Formatter<'a> {
    pub policy: &'a CompiledPolicy,
    /// Updated when the mount table changes (see `mounts::MountWatch`).
    pub mounts: Vec<Superblock>,
    pub identities: &'a crate::kernel::loader::Identities,
    /// cgroup id -> path, resolved from the cgroup tree (not from /proc, which races with
    /// the process exiting).
    pub cgroups: crate::host::cgroup::Names,
}

impl Formatter<'_> {
    /// The full path: superblock mount point + path inside it (invalid UTF-8 shown as
    /// U+FFFD; see [`Formatter::path_bytes`]).
    pub fn full_path(&self, e: &Event) -> String {
        self.join(e.header.dev, &e.sb_path)
    }

    /// The full path as the kernel saw it, byte for byte.
    pub fn path_bytes(&self, e: &Event) -> Vec<u8> {
        let dev = e.header.dev;
        if dev == 0 && e.sb_path.starts_with(b"@") {
            return e.sb_path.clone();
        }
        match self.mounts.iter().find(|m| m.dev == dev) {
            Some(m) => m
                .place(&e.sb_path)
                .unwrap_or_else(|| self.full_path(e).into_bytes()),
            None => self.full_path(e).into_bytes(),
        }
    }

    /// The `file` object of a record; a path that is not valid UTF-8 also comes as
    /// `path_hex`, the exact bytes.
    fn file_json(&self, e: &Event, access: &str) -> Value {
        let h = &e.header;
        let mut f = json!({
            "path": self.full_path(e), "inode": h.ino, "dev": h.dev, "access": access,
            "truncated": h.flags & sandbox_common::EVENT_F_PATH_TRUNCATED != 0,
        });
        if h.flags & sandbox_common::EVENT_F_DISCONNECTED != 0 {
            f["disconnected"] = json!(true);
        }
        if h.flags & sandbox_common::EVENT_F_OUTSIDE_MOUNTS != 0 {
            f["outside_mounts"] = json!(true);
        }
        let bytes = self.path_bytes(e);
        if std::str::from_utf8(&bytes).is_err() {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            f["path_hex"] = json!(hex);
        }
        f
    }

    /// The acting process's executable: from the kernel record, else (older record, kernel
    /// thread) from /proc while the process still exists.
    pub fn exe(&self, e: &Event) -> Option<String> {
        if e.header.exe_len > 0 {
            return Some(self.join(e.header.exe_dev, &e.exe_path));
        }
        std::fs::read_link(format!("/proc/{}/exe", e.header.tgid))
            .ok()
            .map(|p| p.display().to_string())
    }

    /// Mount point of superblock `dev` + a path inside it.
    fn join(&self, dev: u32, sb_path: &[u8]) -> String {
        let inner = String::from_utf8_lossy(sb_path);
        if dev == 0 && sb_path.starts_with(b"@") {
            // An abstract unix socket name: no file system.
            return inner.into_owned();
        }
        match self
            .mounts
            .iter()
            .find(|m| m.dev == dev)
            .and_then(|m| m.place(sb_path))
        {
            Some(p) => String::from_utf8_lossy(&p).into_owned(),
            // Unknown, or outside every mounted directory of its file system.
            None => format!("dev{}:{}:{inner}", dev >> 20, dev & 0xfffff),
        }
    }

    fn rule(&self, e: &Event) -> (String, String) {
        let id = e.header.rule;
        let found = if id == u32::from(NO_RULE) {
            None
        } else if matches!(e.hook, Hook::Net(_)) {
            // Network records carry the rule id itself.
            self.policy.rule(id as u16)
        } else {
            // File and exec records carry the kind of rule; name the first rule of that
            // kind matching the path (or, for an identity match, the rule of that inode).
            let slot = id as usize;
            match e.header.reason {
                reason::INODE => self
                    .identities
                    .rule(e.header.dev, e.header.ino, slot)
                    .and_then(|r| self.policy.rule(r)),
                _ => self.policy.rule_for(slot, &self.path_bytes(e)),
            }
        };
        if let Some(r) = found {
            return (r.field.clone(), r.source.clone());
        }
        let implicit = match e.header.reason {
            reason::NOT_IN_WRITE_ALLOWLIST => "files.write",
            reason::NOT_IN_READ_ALLOWLIST => "files.read",
            reason::NOT_IN_EXEC_ALLOWLIST => "exec.allow",
            reason::PRIVILEGED_BINARY => "exec.allow_privileged",
            reason::NOT_IN_NET_ALLOWLIST => "network.default",
            reason::PATH_UNRESOLVED
                if e.header.flags & sandbox_common::EVENT_F_DISCONNECTED != 0 =>
            {
                "(disconnected dentry: a file opened by handle, its path unknown)"
            }
            reason::PATH_UNRESOLVED => "(path too long or too deep)",
            reason::NO_OFFSETS => "(kernel offsets missing)",
            reason::SELF_PROTECTION => "self_protection",
            reason::UNPLACED_MOUNT => "(file system mounted after load, not placed yet)",
            reason::OUTSIDE_SCOPE if matches!(e.hook, Hook::Unix(_)) => "network.unix",
            reason::OUTSIDE_SCOPE => "(process outside the sandbox)",
            reason::SOCKET_KIND => "network.sockets",
            reason::NOT_IN_LISTEN_ALLOWLIST => "network.listen",
            reason::TTY_INJECTION => "(terminal input injection)",
            reason::SUBVOLUME => "(btrfs subvolume or snapshot made or removed by ioctl)",
            reason::PREEMPTED => "(decision interrupted by another task, fail closed)",
            _ => "(unknown)",
        };
        (implicit.to_owned(), String::new())
    }

    pub fn reason_name(r: u32) -> &'static str {
        match r {
            reason::RULE => "rule",
            reason::NOT_IN_WRITE_ALLOWLIST => "not_in_write_allowlist",
            reason::NOT_IN_READ_ALLOWLIST => "not_in_read_allowlist",
            reason::NOT_IN_EXEC_ALLOWLIST => "not_in_exec_allowlist",
            reason::PRIVILEGED_BINARY => "privileged_binary",
            reason::NOT_IN_NET_ALLOWLIST => "not_in_network_allowlist",
            reason::PATH_UNRESOLVED => "path_unresolved",
            reason::NO_OFFSETS => "no_offsets",
            reason::INODE => "inode_identity",
            reason::SELF_PROTECTION => "self_protection",
            reason::UNPLACED_MOUNT => "unplaced_mount",
            reason::OUTSIDE_SCOPE => "outside_scope",
            reason::SOCKET_KIND => "socket_kind",
            reason::NOT_IN_LISTEN_ALLOWLIST => "not_in_listen_allowlist",
            reason::TTY_INJECTION => "tty_injection",
            reason::PREEMPTED => "preempted",
            reason::ANCESTOR => "ancestor_of_protected_path",
            reason::MOVES_PROTECTED => "moves_protected_files",
            reason::SUBVOLUME => "btrfs_subvolume",
            _ => "unknown",
        }
    }

    pub fn dest(e: &Event) -> IpAddr {
        let a = e.header.addr;
        if u32::from(e.header.family) == libc::AF_INET as u32 {
            IpAddr::from([a[0], a[1], a[2], a[3]])
        } else {
            IpAddr::from(a)
        }
    }

    fn access(e: &Event) -> &'static str {
        match e.header.access & 3 {
            1 => "read",
            2 => "write",
            3 => "read_write",
            _ => "none",
        }
    }

    pub fn json(&self, e: &Event) -> Value {
        let (rule, source) = self.rule(e);
        self.json_with(
            e,
            &json!({
                "name": self.policy.name, "rule": rule, "rule_source": source,
                "reason": Self::reason_name(e.header.reason),
            }),
        )
    }

    /// A record a run whose sandbox died left in its ring buffer (found by the clean-up
    /// sweep of a later run): the same fields, except that the policy is that run's, which
    /// is gone, so only the reason is known; `orphaned.run` names the dead run.
    pub fn orphan_json(&self, e: &Event, run: &str) -> Value {
        let mut v = self.json_with(
            e,
            &json!({
                "name": null, "rule": null, "reason": Self::reason_name(e.header.reason),
            }),
        );
        v["orphaned"] = json!({ "run": run });
        if e.header.exe_len == 0 {
            // The process is long gone: its pid may name another one now.
            v["actor"]["process"]["exe"] = Value::Null;
        }
        v
    }

    fn json_with(&self, e: &Event, policy: &Value) -> Value {
        let h = &e.header;
        let comm = String::from_utf8_lossy(h.comm.split(|b| *b == 0).next().unwrap_or_default())
            .into_owned();
        let exe = self.exe(e);
        let cgroup = self.cgroups.name(h.cgroup_id);
        let blocked = h.decision == decision::DENY;
        let mut v = json!({
            "schema_version": SCHEMA_VERSION,
            "time": rfc3339(SystemTime::now()),
            "disposition": if blocked { "blocked" } else { "audited" },
            "decision": if blocked { "deny" } else { "audit" },
            "actor": { "process": {
                "pid": h.tgid, "tid": h.pid, "ppid": h.ppid, "uid": h.uid, "gid": h.gid,
                "comm": comm, "exe": exe, "cgroup": cgroup, "cgroup_id": h.cgroup_id,
            }},
            "policy": policy,
        });
        let obj = v.as_object_mut().expect("object");
        match e.hook {
            Hook::FileOpen => {
                obj.insert("class".into(), json!("file_activity"));
                obj.insert("class_uid".into(), json!(1001));
                obj.insert("activity".into(), json!("open"));
                obj.insert("file".into(), self.file_json(e, Self::access(e)));
            }
            Hook::Name(activity) => {
                obj.insert("class".into(), json!("file_activity"));
                obj.insert("class_uid".into(), json!(1001));
                obj.insert("activity".into(), json!(activity));
                obj.insert("file".into(), self.file_json(e, "write"));
            }
            Hook::Exec => {
                obj.insert("class".into(), json!("process_activity"));
                obj.insert("class_uid".into(), json!(1007));
                obj.insert("activity".into(), json!("launch"));
                obj.insert(
                    "process".into(),
                    json!({ "file": { "path": self.full_path(e), "inode": h.ino, "dev": h.dev } }),
                );
            }
            Hook::Protect(activity) => {
                obj.insert("class".into(), json!("process_activity"));
                obj.insert("class_uid".into(), json!(1007));
                obj.insert("activity".into(), json!(activity));
                match activity {
                    "bpf" => {
                        obj.insert("bpf_cmd".into(), json!(h.target));
                    }
                    "signal" => {
                        obj.insert("target".into(), json!({ "pid": h.target }));
                        obj.insert("signal".into(), json!(h.access));
                    }
                    "ptrace" => {
                        obj.insert("target".into(), json!({ "pid": h.target }));
                        obj.insert("ptrace_mode".into(), json!(h.access));
                    }
                    "task" => {
                        obj.insert("target".into(), json!({ "pid": h.target }));
                    }
                    "ioctl" => {
                        obj.insert("ioctl_cmd".into(), json!(h.access));
                    }
                    "kernel" => {
                        obj.insert("kernel".into(), kernel_detail(h.access, h.target));
                    }
                    _ => {}
                }
            }
            Hook::Unix(activity) => {
                obj.insert("class".into(), json!("network_activity"));
                obj.insert("class_uid".into(), json!(4001));
                obj.insert("activity".into(), json!(activity));
                let mut peer = json!({ "path": self.full_path(e), "family": "unix" });
                if h.target != 0 {
                    peer["pid"] = json!(h.target);
                }
                obj.insert("dst_endpoint".into(), peer);
            }
            Hook::SocketCreate => {
                obj.insert("class".into(), json!("network_activity"));
                obj.insert("class_uid".into(), json!(4001));
                obj.insert("activity".into(), json!("socket"));
                obj.insert(
                    "socket".into(),
                    json!({ "family": h.family, "type": h.access, "protocol": h.target }),
                );
            }
            Hook::Net(activity) => {
                obj.insert("class".into(), json!("network_activity"));
                obj.insert("class_uid".into(), json!(4001));
                obj.insert("activity".into(), json!(activity));
                let ip = Self::dest(e);
                let endpoint = if activity == "listen" {
                    "src_endpoint"
                } else {
                    "dst_endpoint"
                };
                obj.insert(
                    endpoint.into(),
                    json!({
                        "ip": ip.to_string(), "port": h.port,
                        "family": if ip.is_ipv4() { "ipv4" } else { "ipv6" },
                    }),
                );
            }
        }
        v
    }

    /// One readable line for the terminal. Paths, the command name and the rule as
    /// written are escaped (`term::escape`): nothing from the kernel or the agent reaches
    /// the terminal as a control sequence.
    pub fn line(&self, e: &Event) -> String {
        use crate::term::escape;

        let h = &e.header;
        let comm = String::from_utf8_lossy(h.comm.split(|b| *b == 0).next().unwrap_or_default())
            .into_owned();
        let comm = escape(&comm);
        let verb = if h.decision == decision::DENY {
            "denied"
        } else {
            "would deny (audit)"
        };
        let path = || escape(&self.full_path(e)).into_owned();
        let what = match e.hook {
            Hook::FileOpen => format!("open ({}) {}", Self::access(e), path()),
            Hook::Name(activity) => format!("{activity} {}", path()),
            Hook::Exec => format!("exec {}", path()),
            Hook::Protect("bpf") => format!("bpf() command {}", h.target),
            Hook::Protect("signal") => format!("signal {} to pid {}", h.access, h.target),
            Hook::Protect("ioctl") => format!("ioctl {:#x} (terminal input)", h.access),
            Hook::Protect("kernel") => match h.access {
                3 => format!("kernel lockdown check (reason {})", h.target),
                _ => format!("loading {} into the kernel", read_file_kind(h.target)),
            },
            Hook::Protect("clone_into_cgroup") => "clone3 into another cgroup".to_owned(),
            Hook::Protect(activity) if h.target != 0 => format!("{activity} of pid {}", h.target),
            Hook::Protect(activity) => activity.to_owned(),
            Hook::Unix(activity) => format!("unix {activity} {}", self.full_path(e)),
            Hook::SocketCreate => format!(
                "socket(family {}, type {}, protocol {})",
                h.family, h.access, h.target
            ),
            Hook::Net(activity) => match Self::dest(e) {
                IpAddr::V6(a) => format!("{activity} [{a}]:{}", h.port),
                IpAddr::V4(a) => format!("{activity} {a}:{}", h.port),
            },
        };
        let (rule, source) = self.rule(e);
        let source = if source.is_empty() {
            String::new()
        } else {
            format!(" '{}'", escape(&source))
        };
        format!(
            "sandbox: {verb} {what} by {rule}{source} [pid {} {comm}]",
            h.tgid
        )
    }
}

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
    failing: bool,
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
    use std::os::fd::AsRawFd;

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
    let st = safepath::fstat(fd.as_raw_fd()).map_err(|err| safepath::SafeError::Io {
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
        // SAFETY: plain syscall on our descriptor.
        if st.st_mode & 0o077 != 0 && unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) } != 0 {
            return Err(safepath::SafeError::Io {
                path: here,
                err: std::io::Error::last_os_error(),
            });
        }
    }
    // Back to blocking writes: the file is ours (this open file description is not shared).
    // SAFETY: fcntl on our descriptor.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl & !libc::O_NONBLOCK);
    }
    Ok((File::from(fd), regular))
}

/// Whether the file `name` in `dir`, which must be the inode `st`, is a sandbox audit log:
/// its first line is a JSON object with a `schema_version`.
fn is_a_log(dir: &safepath::Dir, name: &std::ffi::OsStr, st: &libc::stat) -> bool {
    use std::io::Read;
    use std::os::fd::AsRawFd;

    let Ok(fd) = safepath::openat(
        &dir.fd,
        name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    ) else {
        return false;
    };
    if !safepath::fstat(fd.as_raw_fd())
        .is_ok_and(|r| r.st_dev == st.st_dev && r.st_ino == st.st_ino)
    {
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
    serde_json::from_slice::<Value>(line).is_ok_and(|v| v.get("schema_version").is_some())
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
            failing: false,
        })
    }

    /// The file as found (directory with symlinks resolved, then the name), when it is a
    /// regular file (not a device such as `/dev/null`).
    pub fn regular_file(&self) -> Option<PathBuf> {
        self.regular.then(|| self.dir.path.join(&self.name))
    }

    /// Writes one record (buffered).
    pub fn write(&mut self, v: &Value) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(v)?;
        line.push(b'\n');
        if self.regular && self.size > 0 && self.size + line.len() as u64 > self.max_size {
            self.rotate();
        }
        if self.out.write_all(&line).is_err() {
            let n = 1 + std::mem::take(&mut self.buffered);
            self.lost(n);
            return Ok(());
        }
        self.size += line.len() as u64;
        self.buffered += 1;
        Ok(())
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
            let mut line = serde_json::to_vec(&json!({
                "schema_version": SCHEMA_VERSION,
                "time": rfc3339(SystemTime::now()),
                "class": "audit_loss",
                "dropped_events": n,
                "reason": "audit log write failed",
            }))?;
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

    fn lost(&mut self, n: u64) {
        self.unwritten += n;
        if !self.failing {
            self.failing = true;
            crate::term::line(&format!(
                "sandbox: warning: cannot write the audit log {}: records are counted and \
                 reported when writing works again; enforcement continues",
                self.path.display()
            ));
        }
        // Drop what is stuck in the buffer (it is counted), keep the file.
        if let Ok(f) = self.out.get_ref().try_clone() {
            let stuck =
                std::mem::replace(&mut self.out, std::io::BufWriter::with_capacity(1 << 16, f));
            drop(stuck.into_parts());
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
    }
}

fn cname(name: &std::ffi::OsStr) -> std::io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(name.as_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
}

fn unlinkat(dir: &safepath::Dir, name: &std::ffi::OsStr) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let c = cname(name)?;
    // SAFETY: NUL-terminated name relative to an open directory.
    if unsafe { libc::unlinkat(dir.fd.as_raw_fd(), c.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn renameat(
    dir: &safepath::Dir,
    from: &std::ffi::OsStr,
    to: &std::ffi::OsStr,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (f, t) = (cname(from)?, cname(to)?);
    let d = dir.fd.as_raw_fd();
    // SAFETY: NUL-terminated names relative to the same open directory.
    if unsafe { libc::renameat(d, f.as_ptr(), d, t.as_ptr()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A record for events the kernel could not deliver (ring buffer full).
pub fn drop_record(policy: &str, dropped: u64) -> Value {
    json!({
        "schema_version": SCHEMA_VERSION,
        "time": rfc3339(SystemTime::now()),
        "class": "audit_loss",
        "dropped_events": dropped,
        "policy": { "name": policy },
    })
}

/// Records a run whose sandbox died could not deliver (its ring buffer was full, and it
/// was no longer there to report them), found by a later run's clean-up.
pub fn orphan_loss_record(run: &str, lost: u64) -> Value {
    json!({
        "schema_version": SCHEMA_VERSION,
        "time": rfc3339(SystemTime::now()),
        "class": "audit_loss",
        "dropped_events": lost,
        "reason": "ring buffer full after the run's sandbox died",
        "orphaned": { "run": run },
    })
}

/// The ring buffer of a run whose sandbox died could not be read: its records are lost.
pub fn orphan_error_record(run: &str, error: &str) -> Value {
    json!({
        "schema_version": SCHEMA_VERSION,
        "time": rfc3339(SystemTime::now()),
        "class": "audit_error",
        "error": format!("records left by a sandbox that died could not be read: {error}"),
        "orphaned": { "run": run },
    })
}

/// A record for bytes from the kernel that could not be decoded.
pub fn undecodable_record(policy: &str, err: &DecodeError) -> Value {
    json!({
        "schema_version": SCHEMA_VERSION,
        "time": rfc3339(SystemTime::now()),
        "class": "audit_error",
        "error": err.to_string(),
        "policy": { "name": policy },
    })
}

/// UTC time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// The kind of code a `kernel_read_file`/`kernel_load_data` check was for (the kernel's
/// `kernel_read_file_id`, the same order in every kernel this project supports).
fn read_file_kind(id: u32) -> &'static str {
    match id {
        2 => "a module",
        3 => "a kexec image",
        4 => "a kexec initramfs",
        5 => "a security policy",
        6 => "an x509 certificate",
        _ => "data",
    }
}

/// The `kernel` object of a record of hook::KERNEL.
fn kernel_detail(how: u32, id: u32) -> Value {
    match how {
        // Lockdown reasons are numbered differently between kernels: the number only.
        3 => json!({ "check": "lockdown", "lockdown_reason": id }),
        1 | 2 => json!({
            "check": if how == 1 { "read_file" } else { "load_data" },
            "id": id,
            "what": read_file_kind(id),
        }),
        _ => json!({ "check": how }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_file_rotates_by_size_and_keeps_n() {
        let dir = std::env::temp_dir().join(format!("sandbox-audit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("a.jsonl");
        let mut f = AuditFile::with_rotation(&path, 200, 2, &safepath::Agent::AnyNonRoot).unwrap();
        for i in 0..20 {
            f.write(&json!({ "n": i, "pad": "x".repeat(40) })).unwrap();
            f.flush().unwrap();
        }
        let read = |p: &Path| -> Vec<u64> {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| {
                    serde_json::from_str::<Value>(l).unwrap()["n"]
                        .as_u64()
                        .unwrap()
                })
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
        assert_eq!(*all.last().unwrap(), 19);
        assert!(all.windows(2).all(|w| w[1] == w[0] + 1), "{all:?}");
        assert!(std::fs::metadata(&path).unwrap().len() <= 200);
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
        let fifo =
            std::ffi::CString::new(dir.join("fifo.jsonl").into_os_string().into_encoded_bytes())
                .unwrap();
        // SAFETY: plain syscall with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
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
        f.write(&drop_record("p", 1)).unwrap();
        f.flush().unwrap();
        drop(f);
        let mut f = AuditFile::open(&dir.join("new.jsonl")).unwrap();
        f.write(&drop_record("p", 2)).unwrap();
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

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + std::time::Duration::from_millis(1_795_000_000_123);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40.123Z");
    }

    #[test]
    fn decode_rejects_bad_records_without_panicking() {
        assert_eq!(
            Event::decode(&[0u8; 10]).unwrap_err(),
            DecodeError::Short(10)
        );
        let mut h = EventHeader {
            hook: 99,
            ..EventHeader::default()
        };
        let bytes = |h: &EventHeader| {
            // SAFETY: EventHeader is plain old data.
            unsafe {
                std::slice::from_raw_parts(
                    (h as *const EventHeader).cast::<u8>(),
                    size_of::<EventHeader>(),
                )
            }
            .to_vec()
        };
        assert_eq!(
            Event::decode(&bytes(&h)).unwrap_err(),
            DecodeError::Hook(99)
        );
        h.hook = hook::FILE_OPEN;
        h.path_len = 5;
        assert!(matches!(
            Event::decode(&bytes(&h)),
            Err(DecodeError::PathLen { .. })
        ));
        let mut b = bytes(&h);
        b.extend_from_slice(b"/a/bc");
        assert_eq!(Event::decode(&b).unwrap().sb_path, b"/a/bc");
    }
}
