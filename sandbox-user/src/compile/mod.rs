//! Policy pipeline, third stage: [`Policy`] -> [`CompiledPolicy`], the exact contents of the
//! BPF maps for one policy. Pure: no I/O, and the same policy always gives the same output.
//!
//! - File and exec patterns become a literal-path hash set and two DFAs over canonical
//!   paths (see `matcher`).
//! - Network rules become LPM-trie entries whose values already hold the inherited rules of
//!   shorter prefixes (see `net`), so the kernel needs one lookup.

pub mod alias;
pub mod matcher;
pub mod net;

use sandbox_common::{DfaInfo, NO_RULE, PolicyInfo, accept, policy_flags};

use crate::policy::{Mode, NetDefault, PathRule, Policy};

/// What a rule id stands for (ids index this table; the kernel reports ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleInfo {
    /// e.g. `files.deny[2]`, `network.block_private`.
    pub field: String,
    /// The rule as written, e.g. `~/.ssh`.
    pub source: String,
}

/// A path rule that protects existing files by identity too (see `loader`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRule {
    pub path: std::path::PathBuf,
    pub slot: usize,
    pub rule: u16,
}

#[derive(Debug, Clone)]
pub struct CompiledPolicy {
    pub name: String,
    pub flags: u32,
    /// Socket families in-scope tasks may create (`PolicyInfo::sock_families`).
    pub sock_families: u64,
    pub matcher: matcher::Matcher,
    /// Names the rule behind a kernel decision (kind + path).
    pub attribution: matcher::Attribution,
    pub rules: Vec<RuleInfo>,
    pub identity: Vec<IdentityRule>,
    pub net: net::NetCompiled,
    /// The mounts the path rules were compiled through (`alias.rs`).
    pub aliases: Vec<crate::host::mounts::Alias>,
    /// `limits`, for the run's cgroup.
    pub limits: crate::policy::limits::Limits,
}

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("file and exec patterns: {0}")]
    Dfa(String),
    #[error("network rules: {0}")]
    Net(String),
    #[error("{0} rules: rule ids are 16-bit, at most {max} fit", max = NO_RULE - 1)]
    TooManyRules(usize),
}

/// Character devices every program writes to; writable whenever `files.write` restricts
/// writes (as in bubblewrap's `--dev`). Listed as rules so audit and explain name them.
pub const IMPLICIT_DEVICE_WRITES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts/*",
    "/dev/random",
    "/dev/urandom",
];

/// What no sandboxed process may change, whatever the policy says: the kernel's settings,
/// including those that start programs as root outside any sandbox (`core_pattern`,
/// `modprobe`, binfmt_misc, `uevent_helper`), devices and drivers (`/sys/bus/.../unbind`),
/// and the BPF file system where sandbox pins its programs. Only a root command with the
/// capabilities kept could write most of them; this is the layer under the capabilities.
/// `/sys/fs/cgroup` is not listed: the run's own subtree stays writable (child cgroups),
/// every other cgroup is refused by the programs themselves.
const IMPLICIT_READ_ONLY: &[&str] = &[
    "/proc/sys/**",
    "/proc/sysrq-trigger",
    // Interrupt affinity (a root command could pin the host's interrupts on one CPU) and
    // the PCI buses' configuration space.
    "/proc/irq/**",
    "/proc/bus/**",
    "/sys/block/**",
    "/sys/bus/**",
    "/sys/class/**",
    "/sys/dev/**",
    "/sys/devices/**",
    "/sys/firmware/**",
    "/sys/hypervisor/**",
    "/sys/kernel/**",
    "/sys/module/**",
    "/sys/power/**",
    "/sys/fs/bpf/**",
    "/sys/fs/fuse/**",
    "/sys/fs/pstore/**",
    "/sys/fs/selinux/**",
    "/sys/fs/smackfs/**",
    "/sys/fs/ext4/**",
    "/sys/fs/btrfs/**",
    "/sys/fs/xfs/**",
];

/// What no sandboxed process may open at all, whatever the policy says: disks and memory
/// as raw devices. Reading a disk reads every file on it past every path rule (a root
/// command keeps `CAP_DAC_OVERRIDE`), writing it rewrites them.
const IMPLICIT_DENY: &[&str] = &[
    "/dev/sd*",
    "/dev/hd*",
    "/dev/vd*",
    "/dev/xvd*",
    "/dev/nvme*",
    "/dev/mmcblk*",
    "/dev/dm-*",
    "/dev/md*",
    "/dev/loop*",
    "/dev/nbd*",
    "/dev/sr*",
    // Block devices of other names (the kernel refuses every block device by its inode
    // too): compressed swap, ZFS volumes, Ceph, persistent memory, RAM disks, ublk,
    // bcache, DRBD; and the character devices of raw flash and persistent memory.
    "/dev/zram*",
    "/dev/zd*",
    "/dev/rbd*",
    "/dev/pmem*",
    "/dev/ram*",
    "/dev/ublkb*",
    "/dev/bcache*",
    "/dev/drbd*",
    "/dev/mtd*",
    "/dev/ubi*",
    "/dev/dax*",
    // A watchdog starts counting down when opened, even for reading: the host reboots
    // unless someone keeps writing to it.
    "/dev/watchdog*",
    // ZFS's control device: `zfs send` of a dataset (where `zfs allow` grants it) streams
    // every file in it.
    "/dev/zfs",
    // SCSI generic, NVMe generic and block SCSI generic: raw commands, reads included.
    "/dev/sg*",
    "/dev/ng*",
    "/dev/bsg/**",
    "/dev/mapper/**",
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
];

/// The host's POSIX message queues: `sandbox run`'s command has an IPC namespace of its
/// own, whose queues live on that namespace's internal mount; a file of the host's mount
/// opened by path is a host queue whose messages `mq_timedreceive` reads (and takes).
const IMPLICIT_DENY_QUEUES: &[&str] = &["/dev/mqueue", "/dev/mqueue/**"];

fn implicit(field: &str, globs: &[&str]) -> Vec<PathRule> {
    globs
        .iter()
        .map(|d| PathRule {
            field: field.into(),
            source: (*d).to_owned(),
            glob: (*d).to_owned(),
            literal: None,
            written: None,
        })
        .collect()
}

fn implicit_device_writes() -> Vec<PathRule> {
    IMPLICIT_DEVICE_WRITES
        .iter()
        .map(|d| PathRule {
            field: "files.write (implicit)".into(),
            source: (*d).to_owned(),
            glob: (*d).to_owned(),
            literal: None,
            written: None,
        })
        .collect()
}

/// Seed for compilations whose literal hashes never reach a kernel (`check`, `explain`).
pub const FIXED_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// A random seed for the literal-path hash of a policy that will be loaded.
pub fn random_seed() -> u64 {
    if let Ok(b) = crate::sys::random::<8>() {
        u64::from_ne_bytes(b)
    } else {
        FIXED_SEED
            ^ u64::from(std::process::id())
            ^ std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
    }
}

/// Compiles `policy`; `seed` keys the literal-path hash (the loader picks a random one).
pub fn compile(policy: &Policy, seed: u64) -> Result<CompiledPolicy, CompileError> {
    let mut rules: Vec<RuleInfo> = Vec::new();
    let mut patterns: Vec<(matcher::Pattern, usize)> = Vec::new();
    let mut identity = Vec::new();
    let aliases = &policy.files.aliases;
    let mut add_paths = |list: &[PathRule], slot: usize, rules: &mut Vec<RuleInfo>| {
        for r in list {
            let id = rules.len();
            rules.push(RuleInfo {
                field: r.field.clone(),
                source: r.source.clone(),
            });
            // The rule's glob, then the same files where a mount shows them at another path
            // than the programs name them by (`alias.rs`): every kind of rule, grants too.
            let placed = alias::through_all(&r.glob, r.literal.is_some(), aliases);
            let mut globs: Vec<&String> = std::iter::once(&r.glob).chain(&placed).collect();
            // `~/.bashrc -> dotfiles/bashrc`: the link (and whatever replaces it) too. Not
            // for rules that grant: their aliases would widen them.
            let written = r.written.as_ref().filter(|_| {
                matches!(
                    slot,
                    accept::FILE_DENY | accept::FILE_READ_ONLY | accept::EXEC_DENY
                )
            });
            let written_placed = written
                .map(|w| alias::through_all(w, r.literal.is_some(), aliases))
                .unwrap_or_default();
            globs.extend(written.into_iter().chain(&written_placed));
            for g in globs {
                patterns.push((
                    matcher::Pattern {
                        glob: g.clone(),
                        shape: matcher::Shape::of(r.literal.is_some()),
                        slot,
                    },
                    id,
                ));
            }
            // A literal grant's name (and its target's, when a symlink leads there): no
            // symlink may be made or moved there, or the next run's grant would follow it.
            if r.literal.is_some() && matches!(slot, accept::FILE_WRITE | accept::FILE_READ) {
                for glob in std::iter::once(&r.glob)
                    .chain(r.written.as_ref())
                    .chain(&placed)
                {
                    let shape = if matcher::is_plain(glob) {
                        matcher::Shape::Name
                    } else {
                        matcher::Shape::Glob
                    };
                    patterns.push((
                        matcher::Pattern {
                            glob: glob.clone(),
                            shape,
                            slot: accept::GRANT_NAME,
                        },
                        id,
                    ));
                }
            }
            if let Some(p) = &r.literal
                && matches!(
                    slot,
                    accept::FILE_DENY | accept::FILE_READ_ONLY | accept::EXEC_DENY
                )
            {
                identity.push(IdentityRule {
                    path: p.clone(),
                    slot,
                    rule: id as u16,
                });
            }
        }
    };
    let f = &policy.files;
    add_paths(&f.deny, accept::FILE_DENY, &mut rules);
    add_paths(&f.read_only, accept::FILE_READ_ONLY, &mut rules);
    add_paths(
        &implicit(
            "files.read_only (implicit: kernel settings)",
            IMPLICIT_READ_ONLY,
        ),
        accept::FILE_READ_ONLY,
        &mut rules,
    );
    add_paths(
        &implicit("files.deny (implicit: raw disks and memory)", IMPLICIT_DENY),
        accept::FILE_DENY,
        &mut rules,
    );
    add_paths(
        &implicit(
            "files.deny (implicit: the host's message queues)",
            IMPLICIT_DENY_QUEUES,
        ),
        accept::FILE_DENY,
        &mut rules,
    );
    let workspace = PathRule {
        field: "files.workspace".into(),
        source: f.workspace.display().to_string(),
        glob: crate::policy::expand::escape_glob(&f.workspace.display().to_string()),
        literal: Some(f.workspace.clone()),
        written: None,
    };
    if !f.write.is_empty() {
        add_paths(&f.write, accept::FILE_WRITE, &mut rules);
        add_paths(
            std::slice::from_ref(&workspace),
            accept::FILE_WRITE,
            &mut rules,
        );
        add_paths(&implicit_device_writes(), accept::FILE_WRITE, &mut rules);
    }
    if !f.read.is_empty() {
        add_paths(&f.read, accept::FILE_READ, &mut rules);
        add_paths(
            std::slice::from_ref(&workspace),
            accept::FILE_READ,
            &mut rules,
        );
    }
    add_paths(&policy.exec.deny, accept::EXEC_DENY, &mut rules);
    add_paths(&policy.exec.allow, accept::EXEC_ALLOW, &mut rules);
    add_paths(&policy.network.unix, accept::UNIX_ALLOW, &mut rules);

    add_ancestors(&mut patterns);

    let net = net::compile(&policy.network, &mut rules).map_err(CompileError::Net)?;
    if rules.len() >= usize::from(NO_RULE) {
        return Err(CompileError::TooManyRules(rules.len()));
    }
    let matcher =
        matcher::build(patterns.iter().map(|(p, _)| p), seed).map_err(CompileError::Dfa)?;
    let attribution = matcher::Attribution::new(patterns);

    let mut flags = 0;
    let mut set = |cond: bool, flag: u32| {
        if cond {
            flags |= flag;
        }
    };
    set(!f.write.is_empty(), policy_flags::WRITE_ALLOWLIST);
    set(!f.read.is_empty(), policy_flags::READ_ALLOWLIST);
    set(!policy.exec.allow.is_empty(), policy_flags::EXEC_ALLOWLIST);
    set(!policy.exec.allow_privileged, policy_flags::DENY_PRIVILEGED);
    set(
        policy.network.default == NetDefault::Deny,
        policy_flags::NET_DEFAULT_DENY,
    );
    set(f.mode == Mode::Audit, policy_flags::AUDIT_FILES);
    set(policy.network.mode == Mode::Audit, policy_flags::AUDIT_NET);
    set(policy.exec.mode == Mode::Audit, policy_flags::AUDIT_EXEC);
    set(
        policy.process.user_namespaces,
        policy_flags::USER_NAMESPACES,
    );
    flags |= policy.network.sock_flags;

    Ok(CompiledPolicy {
        name: policy.name.clone(),
        flags,
        sock_families: policy.network.sock_families,
        matcher,
        attribution,
        rules,
        identity,
        net,
        aliases: policy.files.aliases.clone(),
        limits: policy.limits,
    })
}

/// The names above protected paths (`accept::ANCESTOR`; `accept::HOLDS_DENIED` above
/// denied ones), the areas denied files may not be moved out of (`accept::CONTAINED`)
/// and the read-only spans nothing is moved into (`accept::SPAN`), each attributed to the
/// first rule that needs it.
fn add_ancestors(patterns: &mut Vec<(matcher::Pattern, usize)>) {
    let mut seen = std::collections::HashSet::new();
    let mut extra = Vec::new();
    for (p, id) in patterns.iter() {
        if !matches!(
            p.slot,
            accept::FILE_DENY | accept::FILE_READ_ONLY | accept::EXEC_DENY
        ) {
            continue;
        }
        let (ancestors, areas) =
            matcher::protected_ancestors(&p.glob, p.shape == matcher::Shape::Literal);
        // Moving read-only files away is harmless (they no longer stand where they would
        // run); moving denied files away exposes them.
        let denied = p.slot != accept::FILE_READ_ONLY;
        let holds: Vec<(String, usize)> = if denied {
            ancestors
                .iter()
                .map(|g| (g.clone(), accept::HOLDS_DENIED))
                .collect()
        } else {
            Vec::new()
        };
        // Below a read-only rule's area that the rule names by a pattern (`**/.git` of
        // `**/.git/**/config`: the command made none of them), no directory or symlink
        // arrives. Not below a plain area (the workspace of `**/.git/**/config`, `~/proj`
        // of `~/proj/**/Makefile`): every directory moved there would be refused.
        let spans: Vec<(String, usize)> = if denied {
            Vec::new()
        } else {
            areas
                .iter()
                .filter(|l| !matcher::is_plain(l))
                .map(|l| (format!("{l}/**"), accept::SPAN))
                .collect()
        };
        let areas = if denied { areas } else { Vec::new() };
        let wanted = ancestors
            .into_iter()
            .map(|g| (g, accept::ANCESTOR))
            .chain(holds)
            .chain(
                areas
                    .into_iter()
                    .map(|l| (format!("{l}/**"), accept::CONTAINED)),
            )
            .chain(spans);
        for (glob, slot) in wanted {
            if seen.insert((glob.clone(), slot)) {
                // A name with no glob character is matched through the hash set, exactly.
                let shape = if slot != accept::CONTAINED && matcher::is_plain(&glob) {
                    matcher::Shape::Name
                } else {
                    matcher::Shape::Glob
                };
                extra.push((matcher::Pattern { glob, shape, slot }, *id));
            }
        }
    }
    patterns.extend(extra);
}

impl CompiledPolicy {
    /// The `POLICIES` entry, given where the two DFAs sit in the shared arrays:
    /// `[(trans_base, accept_base); 2]`.
    pub fn info(&self, bases: [(u32, u32); 2]) -> PolicyInfo {
        let geo = |d: &matcher::Dfa, (trans_base, accept_base): (u32, u32)| DfaInfo {
            stride: d.stride,
            trans_base,
            accept_base,
            start: d.start,
            dead: d.dead,
        };
        PolicyInfo {
            flags: self.flags,
            live: 1,
            dfa: [
                geo(&self.matcher.anchored, bases[0]),
                geo(&self.matcher.floating, bases[1]),
            ],
            seed: self.matcher.seed,
            sock_families: self.sock_families,
            shm_dev: 0,
            _pad: 0,
        }
    }

    /// Kinds of rule (bitmask) matching an absolute canonical path, as the kernel computes.
    pub fn match_path(&self, path: &[u8]) -> u32 {
        self.matcher.match_path(path)
    }

    /// The first rule of kind `slot` that matches `path`.
    pub fn rule_for(&self, slot: usize, path: &[u8]) -> Option<&RuleInfo> {
        self.attribution
            .first(slot, path)
            .and_then(|id| self.rules.get(id))
    }

    pub fn rule(&self, id: u16) -> Option<&RuleInfo> {
        self.rules.get(usize::from(id))
    }
}

#[cfg(test)]
mod tests;
