//! Names for what the kernel reports: full paths from superblock-relative ones (the mount
//! table), the rule behind a decision (the compiled policy, identities), reasons, cgroups.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use sandbox_common::{NO_RULE, reason};

use super::decode::{Event, Hook};
use super::record::{Actor, ActorExtra, Encoded};
use crate::compile::CompiledPolicy;
use crate::host::mounts::Superblock;

/// Turns records into JSON and text, with the policy and mount table for names.
pub struct Formatter<'a> {
    pub policy: &'a CompiledPolicy,
    /// Updated when the mount table changes (see `mounts::MountWatch`).
    pub mounts: Vec<Superblock>,
    pub identities: &'a crate::kernel::loader::Identities,
    /// cgroup id -> path, resolved from the cgroup tree (not from /proc, which races with
    /// the process exiting).
    pub cgroups: crate::host::cgroup::Names,
    /// This machine, for `device`.
    pub device: Arc<Encoded<super::record::Device>>,
    /// The policy's name, for `policy.name`.
    pub policy_name: Arc<str>,
    /// The last acting process seen per pid slot, with what its records say of it.
    pub(super) actors: Mutex<[Option<KeptActor>; ACTOR_SLOTS]>,
}

/// Slots of [`Formatter::actors`] (by pid).
pub(super) const ACTOR_SLOTS: usize = 16;

pub(super) type KeptActor = (ActorKey, Arc<Encoded<Actor>>, Arc<Encoded<ActorExtra>>);

/// Everything an event's actor is made of.
#[derive(PartialEq, Eq)]
pub(super) struct ActorKey {
    ids: [u32; 6],
    cgroup_id: u64,
    comm: [u8; 16],
    exe: Vec<u8>,
}

impl ActorKey {
    fn ids(e: &Event) -> [u32; 6] {
        let h = &e.header;
        [h.pid, h.tgid, h.ppid, h.uid, h.gid, h.exe_dev]
    }

    /// `None` when the executable is not in the event (it is read from /proc then).
    pub(super) fn of(e: &Event) -> Option<Self> {
        (e.header.exe_len > 0).then(|| Self {
            ids: Self::ids(e),
            cgroup_id: e.header.cgroup_id,
            comm: e.header.comm,
            exe: e.exe_path.clone(),
        })
    }

    /// Whether `e`'s actor is made of the same fields.
    pub(super) fn is_of(&self, e: &Event) -> bool {
        e.header.exe_len > 0
            && self.ids == Self::ids(e)
            && self.cgroup_id == e.header.cgroup_id
            && self.comm == e.header.comm
            && self.exe == e.exe_path
    }
}

impl<'a> Formatter<'a> {
    pub fn new(
        policy: &'a CompiledPolicy,
        mounts: Vec<Superblock>,
        identities: &'a crate::kernel::loader::Identities,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            policy,
            mounts,
            identities,
            cgroups: crate::host::cgroup::Names::new(crate::host::cgroup::mount()?),
            device: Arc::new(Encoded::new(super::record::Device::this_host())),
            policy_name: policy.name.as_str().into(),
            actors: Mutex::new(Default::default()),
        })
    }
}

/// What a record says of an event's objects, worked out once for its record and its
/// line: the full path and the rule behind the decision.
pub struct Named {
    /// The full path: superblock mount point + path inside it (invalid UTF-8 shown as
    /// U+FFFD).
    pub path: String,
    /// The path's exact bytes, when they are not valid UTF-8.
    pub raw: Option<Vec<u8>>,
    /// The rule as the policy names it (`files.deny[0]`), and as written (`~/.ssh`).
    pub rule: String,
    pub source: String,
}

impl Named {
    /// The full path as the kernel saw it, byte for byte.
    pub fn bytes(&self) -> &[u8] {
        self.raw.as_deref().unwrap_or(self.path.as_bytes())
    }
}

impl Formatter<'_> {
    /// The mount table changed: paths are placed with the new one (and the kept actors,
    /// whose executables were placed with the old one, are made again).
    pub fn set_mounts(&mut self, mounts: &[Superblock]) {
        self.mounts = mounts.to_vec();
        if let Ok(kept) = self.actors.get_mut() {
            *kept = Default::default();
        }
    }

    /// The event's path and rule.
    pub fn named(&self, e: &Event) -> Named {
        let (path, raw) = self.place(e.header.dev, &e.sb_path);
        let (rule, source) = self.rule(e, raw.as_deref().unwrap_or(path.as_bytes()));
        Named {
            path,
            raw,
            rule,
            source,
        }
    }

    /// The full path of an event's object (see [`Named::path`]).
    pub fn full_path(&self, e: &Event) -> String {
        self.place(e.header.dev, &e.sb_path).0
    }

    /// The acting process's executable, from the kernel record only: none when the kernel
    /// could not name it (a kernel thread, a path too long or too deep). Never read from
    /// `/proc` later: by then the process may run another program (an agent can make its
    /// own path unresolvable, be denied, and exec `/usr/bin/git` before the record is read).
    pub fn exe(&self, e: &Event) -> Option<String> {
        (e.header.exe_len > 0).then(|| self.place(e.header.exe_dev, &e.exe_path).0)
    }

    /// Mount point of superblock `dev` + a path inside it, as text, and its bytes when
    /// they are not valid UTF-8.
    fn place(&self, dev: u32, sb_path: &[u8]) -> (String, Option<Vec<u8>>) {
        let text = |b: Vec<u8>| match String::from_utf8(b) {
            Ok(s) => (s, None),
            Err(e) => {
                let b = e.into_bytes();
                (String::from_utf8_lossy(&b).into_owned(), Some(b))
            }
        };
        if dev == 0 && sb_path.starts_with(b"@") {
            // An abstract unix socket name: no file system.
            return text(sb_path.to_vec());
        }
        match self
            .mounts
            .iter()
            .find(|m| m.dev == dev)
            .and_then(|m| m.place(sb_path))
        {
            Some(p) => text(p),
            // Unknown, or outside every mounted directory of its file system.
            None => (
                format!(
                    "dev{}:{}:{}",
                    dev >> 20,
                    dev & 0xfffff,
                    String::from_utf8_lossy(sb_path)
                ),
                None,
            ),
        }
    }

    /// The rule behind an event's decision; `path`: the event's full path, as bytes.
    fn rule(&self, e: &Event, path: &[u8]) -> (String, String) {
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
                _ => self.policy.rule_for(slot, path),
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
            reason::BUSY => "(no working memory free on this CPU, fail closed)",
            reason::KERNEL_KEYS => "(kernel keys: shared by every process of the user)",
            reason::FOREIGN_TERMINAL => "(a terminal that is not the command's own)",
            reason::FOREIGN_SHARED_MEMORY => {
                "(shared memory that is not the command's own: /dev/shm)"
            }
            reason::HOST_DEVICE => {
                "(a device node of the host: only its contents are the policy's)"
            }
            reason::SET_ID => "(a set-user-ID or set-group-ID file: it would run outside)",
            reason::SOCKET_OPTION => "(a socket option that routes past the network policy)",
            reason::BLOCK_DEVICE => "(a block device: its blocks hold files past the path rules)",
            reason::GRANT_LINK => {
                "(a symlink at a granted name: the next run would grant its target)"
            }
            reason::FOREIGN_NAMESPACE => {
                "(a namespace the command did not start in: other processes')"
            }
            reason::INTO_SPAN => "(a directory or symlink moved below a read-only area)",
            reason::OUTSIDE_CLIENT => "network.unix_inbound",
            reason::FILE_OWNER => "(a file's SIGIO sent to another process: F_SETOWN)",
            reason::USER_NAMESPACE => "process.user_namespaces",
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
            reason::BUSY => "busy",
            reason::ANCESTOR => "ancestor_of_protected_path",
            reason::MOVES_PROTECTED => "moves_protected_files",
            reason::SUBVOLUME => "btrfs_subvolume",
            reason::KERNEL_KEYS => "kernel_keys",
            reason::FOREIGN_TERMINAL => "foreign_terminal",
            reason::FOREIGN_SHARED_MEMORY => "foreign_shared_memory",
            reason::HOST_DEVICE => "host_device",
            reason::SET_ID => "set_id",
            reason::SOCKET_OPTION => "socket_option",
            reason::BLOCK_DEVICE => "block_device",
            reason::GRANT_LINK => "symlink_at_grant",
            reason::FOREIGN_NAMESPACE => "foreign_namespace",
            reason::INTO_SPAN => "moves_into_protected_area",
            reason::OUTSIDE_CLIENT => "outside_client",
            reason::FILE_OWNER => "file_owner",
            reason::USER_NAMESPACE => "user_namespace",
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

    pub(super) fn access(e: &Event) -> &'static str {
        match e.header.access & 3 {
            1 => "read",
            2 => "write",
            3 => "read_write",
            _ => "none",
        }
    }
}
