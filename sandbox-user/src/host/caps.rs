//! The capabilities a confined command keeps. A command that runs as root (`--as-root`)
//! would otherwise hold every capability, and several of them reach past anything a file,
//! network or exec rule can say: loading kernel modules, raw disk and memory access,
//! reconfiguring the network, tracing other processes, setting file capabilities on a
//! binary that runs later outside. The table below is the decision, one line per
//! capability, with the reason; [`drop_in_child`] applies it between fork and exec.
//!
//! What is dropped goes from every set: bounding (so no exec can bring it back, not even of
//! a root or file-capability binary), inheritable, permitted, effective and ambient. The
//! same mask applies when the command runs as a user (there the permitted set is already
//! empty; the bounding set matters if `process.no_new_privs: false` lets a setuid binary
//! make it root again). Capabilities this table does not know (newer kernels) are dropped.

use std::fmt;

/// One capability and whether a root command keeps it by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cap {
    /// Name without the `CAP_` prefix, lowercase, as in `capabilities(7)`.
    pub name: &'static str,
    pub number: u32,
    /// Kept by a command running as root unless the policy or `--keep-cap` says otherwise.
    pub keep: bool,
    pub why: &'static str,
}

const fn keep(name: &'static str, number: u32, why: &'static str) -> Cap {
    Cap {
        name,
        number,
        keep: true,
        why,
    }
}

const fn drop(name: &'static str, number: u32, why: &'static str) -> Cap {
    Cap {
        name,
        number,
        keep: false,
        why,
    }
}

/// Every capability of Linux 6.x/7.x (include/uapi/linux/capability.h), in number order.
/// Kept: the file-ownership powers that make root root, which the file policy then
/// governs (every open, name change and attribute change is still checked), plus binding
/// low ports and chroot. Dropped: everything that acts on the kernel, devices, other
/// processes, the network stack or files that run later.
pub const CAPS: &[Cap] = &[
    keep(
        "chown",
        0,
        "changing file owners is judged as a write by the file policy",
    ),
    keep(
        "dac_override",
        1,
        "root's file access; the file policy decides every open",
    ),
    keep(
        "dac_read_search",
        2,
        "open_by_handle_at is checked by the same file hooks",
    ),
    keep(
        "fowner",
        3,
        "chmod/utimes/xattrs on any file are judged as writes",
    ),
    drop(
        "fsetid",
        4,
        "a write would keep a set-id file's bits (a set-id root binary the policy lets it \
         write becomes its code): without it the kernel drops them",
    ),
    drop(
        "kill",
        5,
        "no pid namespace: it would reach every process of every user",
    ),
    keep(
        "setgid",
        6,
        "dropping to another group (package managers, servers)",
    ),
    keep(
        "setuid",
        7,
        "dropping to another user (package managers, servers)",
    ),
    drop(
        "setpcap",
        8,
        "no changing capability sets or securebits of its own",
    ),
    drop(
        "linux_immutable",
        9,
        "chattr +i/+a could make files (the audit log) unremovable",
    ),
    keep(
        "net_bind_service",
        10,
        "binding ports below 1024 (a dev server on :80)",
    ),
    drop(
        "net_broadcast",
        11,
        "NETLINK_LISTEN_ALL_NSID: other network namespaces' route and address notices",
    ),
    drop(
        "net_admin",
        12,
        "firewall, routes, interfaces: the network outside the policy",
    ),
    drop(
        "net_raw",
        13,
        "raw and packet sockets: packets the connect/send hooks never see",
    ),
    drop("ipc_lock", 14, "unbounded locked memory"),
    drop(
        "ipc_owner",
        15,
        "other users' SysV shared memory and queues",
    ),
    drop("sys_module", 16, "loading kernel code"),
    drop(
        "sys_rawio",
        17,
        "/dev/mem, I/O ports, raw SCSI: under every file rule",
    ),
    keep(
        "sys_chroot",
        18,
        "chroot does not change decisions on canonical paths",
    ),
    drop(
        "sys_ptrace",
        19,
        "tracing and injecting code into processes outside the sandbox",
    ),
    drop("sys_pacct", 20, "process accounting is host configuration"),
    drop(
        "sys_admin",
        21,
        "mounts, namespaces, bpf, keyrings, quotas: the catch-all",
    ),
    drop("sys_boot", 22, "reboot, kexec"),
    drop(
        "sys_nice",
        23,
        "real-time priorities could starve the host (and sandbox)",
    ),
    drop(
        "sys_resource",
        24,
        "exceeding limits and reserved disk space; lowering oom scores",
    ),
    drop(
        "sys_time",
        25,
        "the clock other systems trust (certificates, logs)",
    ),
    drop(
        "sys_tty_config",
        26,
        "vhangup and terminal configuration of other sessions",
    ),
    drop(
        "mknod",
        27,
        "device nodes: a block device is every file at once",
    ),
    drop("lease", 28, "leases on files it does not own"),
    drop(
        "audit_write",
        29,
        "forging records in the kernel's audit trail",
    ),
    drop("audit_control", 30, "turning kernel auditing off"),
    drop(
        "setfcap",
        31,
        "file capabilities on a binary that runs later, outside",
    ),
    drop("mac_override", 32, "overriding mandatory access control"),
    drop("mac_admin", 33, "changing mandatory access control policy"),
    drop("syslog", 34, "kernel log and kernel addresses"),
    drop("wake_alarm", 35, "waking the machine"),
    drop("block_suspend", 36, "keeping the machine from suspending"),
    drop("audit_read", 37, "reading every process's audit events"),
    drop("perfmon", 38, "perf events on the whole system"),
    drop("bpf", 39, "loading BPF programs (and detaching sandbox's)"),
    drop(
        "checkpoint_restore",
        40,
        "choosing pids, restoring process state",
    ),
];

/// A set of capabilities by number (bit `n` = capability `n`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapSet(pub u64);

impl CapSet {
    pub const ALL: Self = Self(u64::MAX);

    pub fn contains(self, n: u32) -> bool {
        n < 64 && self.0 & (1 << n) != 0
    }

    #[must_use]
    pub fn with(self, n: u32) -> Self {
        Self(self.0 | (1u64 << n))
    }

    #[must_use]
    pub fn union(self, other: Self) -> Self {
        Self(self.0 | other.0)
    }

    /// The set kept by default by a command running as root.
    pub fn default_kept() -> Self {
        CAPS.iter()
            .filter(|c| c.keep)
            .fold(Self::default(), |s, c| s.with(c.number))
    }

    /// Names of the capabilities in the set (known ones, in number order).
    pub fn names(self) -> Vec<&'static str> {
        CAPS.iter()
            .filter(|c| self.contains(c.number))
            .map(|c| c.name)
            .collect()
    }
}

impl fmt::Display for CapSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::ALL {
            return f.write_str("all");
        }
        f.write_str(&self.names().join(","))
    }
}

/// `CAP_NET_RAW`, `net_raw`, `NET_RAW` or `all` -> the set it names.
pub fn parse(name: &str) -> Result<CapSet, String> {
    let lower = name.trim().to_ascii_lowercase();
    if lower == "all" {
        return Ok(CapSet::ALL);
    }
    let bare = lower.strip_prefix("cap_").unwrap_or(&lower);
    if let Some(c) = CAPS.iter().find(|c| c.name == bare) {
        return Ok(CapSet::default().with(c.number));
    }
    let best = CAPS
        .iter()
        .map(|c| (crate::policy::raw::edit_distance(bare, c.name), c.name))
        .min()
        .filter(|(d, _)| *d <= 2);
    Err(match best {
        Some((_, c)) => format!("unknown capability '{name}'; did you mean '{c}'?"),
        None => format!("unknown capability '{name}' (see capabilities(7), e.g. net_raw, or all)"),
    })
}

/// The highest capability number of the running kernel (`/proc/sys/kernel/cap_last_cap`).
pub fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
        .min(63)
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Drops every capability not in `keep` (numbers up to `last`) from the bounding set.
/// Needs `CAP_SETPCAP`: call while still root, before changing uid.
///
/// # Safety
/// Only syscalls on the stack: async-signal-safe, callable between fork and exec.
pub unsafe fn drop_bounding(keep: CapSet, last: u32) -> std::io::Result<()> {
    for n in 0..=last {
        if keep.contains(n) {
            continue;
        }
        // SAFETY: plain prctl; EINVAL means the kernel has no such capability.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(n), 0, 0, 0) };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Removes every capability not in `keep` from the inheritable, permitted and effective
/// sets, and clears the ambient set.
///
/// # Safety
/// Only syscalls on the stack: async-signal-safe, callable between fork and exec.
pub unsafe fn drop_process_sets(keep: CapSet) -> std::io::Result<()> {
    let mut hdr = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget/capset with a version-3 header and two data words, as the ABI says.
    unsafe {
        if libc::syscall(libc::SYS_capget, &raw mut hdr, data.as_mut_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for (i, d) in data.iter_mut().enumerate() {
            let k = u32::try_from((keep.0 >> (32 * i)) & 0xffff_ffff).unwrap_or(u32::MAX);
            d.effective &= k;
            d.permitted &= k;
            d.inheritable &= k;
        }
        if libc::syscall(libc::SYS_capset, &raw mut hdr, data.as_ptr()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
            && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_capability_once_in_order() {
        for (i, c) in CAPS.iter().enumerate() {
            assert_eq!(c.number as usize, i, "{}", c.name);
            assert!(!c.why.is_empty());
        }
        // CAP_CHECKPOINT_RESTORE (40) is the last one of the kernels we support.
        assert_eq!(CAPS.len(), 41);
    }

    #[test]
    fn a_root_command_loses_what_reaches_past_the_policy() {
        let kept = CapSet::default_kept();
        for name in [
            "sys_module",
            "sys_rawio",
            "net_admin",
            "net_raw",
            "sys_admin",
            "bpf",
            "perfmon",
            "sys_ptrace",
            "sys_boot",
            "mknod",
            "sys_time",
            "mac_admin",
            "mac_override",
            "audit_control",
            "sys_resource",
            "sys_nice",
            "linux_immutable",
            "setfcap",
            "checkpoint_restore",
            "syslog",
            "wake_alarm",
            "block_suspend",
            "ipc_lock",
            "lease",
            "kill",
            "setpcap",
        ] {
            let set = parse(name).unwrap();
            assert!(!kept.contains(set.0.trailing_zeros()), "{name} is kept");
        }
        assert_eq!(
            kept.names(),
            [
                "chown",
                "dac_override",
                "dac_read_search",
                "fowner",
                "setgid",
                "setuid",
                "net_bind_service",
                "sys_chroot"
            ]
        );
        // Capabilities of newer kernels are not kept.
        assert!(!kept.contains(41) && !kept.contains(63));
    }

    #[test]
    fn capability_names_parse_in_every_usual_spelling() {
        let raw = CapSet::default().with(13);
        assert_eq!(parse("net_raw").unwrap(), raw);
        assert_eq!(parse("CAP_NET_RAW").unwrap(), raw);
        assert_eq!(parse(" Net_Raw ").unwrap(), raw);
        assert_eq!(parse("all").unwrap(), CapSet::ALL);
        assert_eq!(CapSet::ALL.to_string(), "all");
        assert_eq!(
            parse("net_rwa").unwrap_err(),
            "unknown capability 'net_rwa'; did you mean 'net_raw'?"
        );
        assert!(parse("flying").unwrap_err().contains("capabilities(7)"));
    }
}
