//! Names for what the kernel reports: full paths from superblock-relative ones (the mount
//! table), the rule behind a decision (the compiled policy, identities), reasons, cgroups.

use std::net::IpAddr;

use sandbox_common::{NO_RULE, reason};

use super::decode::{Event, Hook};
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
    pub device: super::record::Device,
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
            cgroups: crate::host::cgroup::Names::new(crate::host::cgroup::root()?),
            device: super::record::Device::this_host(),
        })
    }
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

    pub(super) fn rule(&self, e: &Event) -> (String, String) {
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

    pub(super) fn access(e: &Event) -> &'static str {
        match e.header.access & 3 {
            1 => "read",
            2 => "write",
            3 => "read_write",
            _ => "none",
        }
    }
}
