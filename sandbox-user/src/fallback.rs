//! The fallback backend's file and exec half: a policy turned into a Landlock ruleset, and
//! an honest account of what that ruleset cannot do, rule by rule.
//!
//! Landlock only grants: every access it handles is denied unless a rule on the path or one
//! of its ancestors grants it, and a grant covers the whole tree below. So:
//! - areas (`/` or the `read` list; `/` or the `write` list plus the workspace; `exec.allow`)
//!   become grants of read, write and exec rights;
//! - literal `deny`, `read_only` and `exec.deny` rules are holes: a grant with a hole below
//!   it is split, the directories on the way to the hole keep only the right to list them
//!   and each of their other entries (as found when the run starts) is granted on its own;
//! - globs: on the allowed side (`write`, `read`, `exec.allow`) the names that exist when the
//!   run starts are granted (nothing more: stricter); on the denied side they cannot be
//!   expressed for names created later, so they are reported as not enforced (the names
//!   that exist at the start are still made holes when the glob has no `**`).
//!
//! Nothing here loads or restricts anything: [`plan`] reads the file system (directory
//! listings, `lstat`) and returns the grants and the [`Coverage`]; `run` builds the ruleset
//! from the grants before the fork and the child restricts itself.

use std::path::{Path, PathBuf};

use crate::landlock::{self, Rights, fs};
use crate::policy::{Mode, Policy};

/// A rule (or implicit protection) the fallback does not enforce as the BPF-LSM backend
/// would: `sandbox run` refuses such a policy unless the user accepts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The rule: `files.deny[32] '/**/.env'`, or a protection (`network.sockets`).
    pub rule: String,
    /// What is not enforced, and why.
    pub why: String,
    /// A rule the policy states (a run needs the user's consent), rather than a protection
    /// the BPF-LSM backend adds to every policy (listed, not asked about).
    pub explicit: bool,
}

/// What the fallback does with a policy.
#[derive(Debug, Default, Clone)]
pub struct Coverage {
    /// Not enforced. A run needs `--allow-degraded` or `fallback.allow_degraded` when any
    /// of them is `explicit`.
    pub gaps: Vec<Gap>,
    /// Enforced differently, said at every start: stricter than the policy, or weaker in a
    /// way that does not let the command past the rule's purpose.
    pub notes: Vec<String>,
}

impl Coverage {
    fn gap(&mut self, rule: impl Into<String>, why: impl Into<String>) {
        self.gaps.push(Gap {
            rule: rule.into(),
            why: why.into(),
            explicit: true,
        });
    }

    /// A protection every policy gets from the BPF-LSM backend, missing here.
    fn implicit(&mut self, what: impl Into<String>, why: impl Into<String>) {
        self.gaps.push(Gap {
            rule: what.into(),
            why: why.into(),
            explicit: false,
        });
    }

    /// The rules of the policy that are not enforced.
    pub fn refused(&self) -> impl Iterator<Item = &Gap> {
        self.gaps.iter().filter(|g| g.explicit)
    }
}

/// The Landlock grants for one run.
#[derive(Debug, Default, Clone)]
pub struct Plan {
    pub abi: u32,
    /// Handled rights: everything not granted below is denied.
    pub handled: u64,
    /// `landlock::scope::*` bits (ABI 6).
    pub scoped: u64,
    /// (path, rights, is a directory).
    pub grants: Vec<(PathBuf, u64, bool)>,
    /// Directories split around a hole (listing only; their other entries granted one by one).
    pub split: Vec<PathBuf>,
}

impl Plan {
    /// The ruleset, built in sandbox (before the fork).
    pub fn ruleset(&self) -> std::io::Result<landlock::Ruleset> {
        let mut r = landlock::Ruleset::new(self.handled, self.scoped)?;
        for (p, access, dir) in &self.grants {
            match r.allow(p, *access, *dir) {
                Ok(()) => {}
                // Gone since it was listed: nothing to grant.
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => {
                    return Err(std::io::Error::new(
                        e.kind(),
                        format!("landlock rule on {}: {e}", p.display()),
                    ));
                }
            }
        }
        Ok(r)
    }
}

/// Where the host is: what the analysis needs besides the policy.
#[derive(Debug, Clone)]
pub struct HostFacts {
    /// Landlock ABI, or why there is none.
    pub landlock: Result<u32, String>,
    /// The cgroup v2 mount (read-only for the command: writing another cgroup's
    /// `cgroup.procs` would take it out of the network programs' reach).
    pub cgroup_root: PathBuf,
    /// The command runs as root (capabilities cut, file powers kept).
    pub root_command: bool,
    /// `sandbox attach`: existing processes, no Landlock.
    pub attach: bool,
}

/// A grant of `rights` on `path` and below.
#[derive(Debug, Clone)]
struct Area {
    path: PathBuf,
    rights: u64,
}

/// Rights taken away at `path` and below.
#[derive(Debug, Clone)]
struct Hole {
    path: PathBuf,
    removed: u64,
}

/// Kernel settings and the cgroup tree: read-only whatever the policy says (as the BPF-LSM
/// backend's implicit rules), as whole directories.
const IMPLICIT_READ_ONLY: &[&str] = &[
    "/proc/sys",
    "/proc/sysrq-trigger",
    "/proc/irq",
    "/proc/bus",
    "/sys",
];

/// Raw disks and memory: denied whatever the policy says (the devices present at start).
const IMPLICIT_DENY_PREFIXES: &[&str] = &[
    "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "dm-", "md", "loop", "nbd", "sr", "sg", "ng",
    "zram", "zd", "rbd", "pmem", "ram", "ublkb", "bcache", "drbd", "mtd", "ubi", "dax", "watchdog",
];
const IMPLICIT_DENY: &[&str] = &[
    "/dev/mapper",
    "/dev/bsg",
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
];

/// Devices every program writes to (as `compile::IMPLICIT_DEVICE_WRITES`).
const DEVICE_WRITES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/random",
    "/dev/urandom",
];

/// The literal directory a glob starts from, and the components after it.
fn glob_head(glob: &str) -> (PathBuf, Vec<String>) {
    let mut head = PathBuf::from("/");
    let mut rest = Vec::new();
    for c in glob.split('/').filter(|c| !c.is_empty()) {
        if rest.is_empty() && !c.contains(['*', '?', '[', '{', '\\']) {
            head.push(c);
        } else {
            rest.push(c.to_owned());
        }
    }
    (head, rest)
}

/// Names matching `glob` that exist now, when it has no `**` (a bounded walk from its
/// literal head); `None` for `**` globs.
fn existing_matches(glob: &str) -> Option<Vec<PathBuf>> {
    let (head, rest) = glob_head(glob);
    if rest.iter().any(|c| c.contains("**")) {
        return None;
    }
    let matcher = crate::compile::matcher::glob(glob).ok()?.compile_matcher();
    let mut level = vec![head];
    for _ in 0..rest.len() {
        let mut next = Vec::new();
        for dir in &level {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            next.extend(rd.flatten().map(|e| e.path()));
        }
        level = next;
    }
    Some(level.into_iter().filter(|p| matcher.is_match(p)).collect())
}

/// `a` is `b` or below it.
fn within(a: &Path, b: &Path) -> bool {
    a.starts_with(b)
}

fn describe(field: &str, source: &str) -> String {
    format!("{field} '{source}'")
}

/// The Landlock grants for `policy` and what they do not cover. `None` for the plan when
/// Landlock cannot be used (every file and exec rule is then a gap).
#[expect(
    clippy::too_many_lines,
    reason = "one pass over the policy's sections, each a few lines; split it would scatter the rule-by-rule account"
)]
pub fn plan(policy: &Policy, host: &HostFacts) -> (Option<Plan>, Coverage) {
    let mut cov = Coverage::default();
    network_coverage(policy, host, &mut cov);
    let f = &policy.files;
    let file_rules = || {
        f.deny
            .iter()
            .chain(&f.read_only)
            .chain(&f.write)
            .chain(&f.read)
            .chain(&policy.exec.deny)
            .chain(&policy.exec.allow)
    };
    let abi = match (&host.landlock, host.attach) {
        (_, true) => {
            for r in file_rules() {
                cov.gap(
                    describe(&r.field, &r.source),
                    "not enforced by `sandbox attach` in the fallback: Landlock applies only to \
                     a process that restricts itself, and the processes of an existing cgroup \
                     are already running",
                );
            }
            if !policy.exec.allow_privileged {
                cov.gap(
                    "exec.allow_privileged: false",
                    "not enforced by `sandbox attach` in the fallback",
                );
            }
            return (None, cov);
        }
        (Err(why), false) => {
            for r in file_rules() {
                cov.gap(
                    describe(&r.field, &r.source),
                    format!("not enforced: {why}"),
                );
            }
            if !policy.exec.allow_privileged {
                cov.gap(
                    "exec.allow_privileged: false",
                    format!("not enforced: {why}"),
                );
            }
            return (None, cov);
        }
        (Ok(abi), false) => *abi,
    };
    let rights = Rights::for_abi(abi);
    let (r, w, x) = (rights.read, rights.write, rights.exec);
    let mut areas: Vec<Area> = Vec::new();
    let mut holes: Vec<Hole> = Vec::new();
    let files_audit = f.mode == Mode::Audit;
    let exec_audit = policy.exec.mode == Mode::Audit;
    if files_audit {
        for rule in f
            .deny
            .iter()
            .chain(&f.read_only)
            .chain(&f.write)
            .chain(&f.read)
        {
            cov.gap(
                describe(&rule.field, &rule.source),
                "not enforced and not reported: files.mode is audit, and Landlock cannot report \
                 an access without denying it",
            );
        }
    }
    if exec_audit {
        for rule in policy.exec.deny.iter().chain(&policy.exec.allow) {
            cov.gap(
                describe(&rule.field, &rule.source),
                "not enforced and not reported: exec.mode is audit, and Landlock cannot report \
                 an exec without denying it",
            );
        }
    }

    // Areas. Exec goes with reading unless exec.allow lists the binaries.
    let exec_allowlist = !policy.exec.allow.is_empty() && !exec_audit;
    let read_rights = if exec_allowlist { r } else { r | x };
    if exec_allowlist {
        cov.notes.push(
            "exec.allow: a copy of any binary in a memfd runs (fexecve: Landlock judges no \
             file of the kernel's internal mounts), and so does what an allowed dynamic \
             loader is given"
                .into(),
        );
    }
    let allow_side = |rules: &[crate::policy::PathRule],
                      rights: u64,
                      areas: &mut Vec<Area>,
                      cov: &mut Coverage| {
        for rule in rules {
            if let Some(l) = &rule.literal {
                areas.push(Area {
                    path: l.clone(),
                    rights,
                });
                continue;
            }
            match existing_matches(&rule.glob) {
                Some(found) => {
                    cov.notes.push(format!(
                        "{}: granted to the {} name(s) that exist now; names created later that \
                         match it are refused (Landlock grants by location)",
                        describe(&rule.field, &rule.source),
                        found.len()
                    ));
                    areas.extend(found.into_iter().map(|path| Area { path, rights }));
                }
                None => cov.notes.push(format!(
                    "{}: not granted (a `**` pattern cannot be listed in advance): what only it \
                     allows is refused",
                    describe(&rule.field, &rule.source)
                )),
            }
        }
    };
    if f.read.is_empty() || files_audit {
        areas.push(Area {
            path: "/".into(),
            rights: read_rights,
        });
    } else {
        allow_side(&f.read, read_rights, &mut areas, &mut cov);
        areas.push(Area {
            path: f.workspace.clone(),
            rights: read_rights,
        });
    }
    if f.write.is_empty() || files_audit {
        areas.push(Area {
            path: "/".into(),
            rights: w,
        });
    } else {
        allow_side(&f.write, w, &mut areas, &mut cov);
        areas.push(Area {
            path: f.workspace.clone(),
            rights: w,
        });
        for d in DEVICE_WRITES {
            areas.push(Area {
                path: (*d).into(),
                rights: w,
            });
        }
    }
    if exec_allowlist {
        allow_side(&policy.exec.allow, r | x, &mut areas, &mut cov);
    }

    // Holes.
    let deny_side = |rules: &[crate::policy::PathRule],
                     removed: u64,
                     what: &str,
                     holes: &mut Vec<Hole>,
                     cov: &mut Coverage| {
        for rule in rules {
            // The attach turn exists where BPF-LSM programs attach; the fallback attaches
            // none, and a hole for a file that may not exist would split its directory.
            if rule.field == crate::runtime::arm::TURN_RULE
                || rule.field == crate::runtime::pty::TERMINAL_RULE
            {
                continue;
            }
            let name = describe(&rule.field, &rule.source);
            // Written through a symlink: the hole is at the target. The link's own name is
            // as removable as anything else in its directory.
            if let Some(w) = &rule.written {
                let (link, _) = glob_head(w);
                let parent = link.parent().unwrap_or(Path::new("/"));
                // Unless the target is below the link's directory: nothing is removed in a
                // directory on the way to a hole.
                let (target, _) = glob_head(&rule.glob);
                if !within(&target, parent)
                    && areas
                        .iter()
                        .any(|a| a.rights & removed != 0 && within(parent, &a.path))
                {
                    let why = format!(
                        "{what} for the file the symlink {} leads to, not for the link: the \
                         command may remove or replace it (Landlock protects files by \
                         location, not names)",
                        link.display()
                    );
                    if rule.field.contains("(implicit") {
                        cov.implicit(name.clone(), why);
                    } else {
                        cov.gap(name.clone(), why);
                    }
                }
            }
            if let Some(l) = &rule.literal {
                holes.push(Hole {
                    path: l.clone(),
                    removed,
                });
                continue;
            }
            // `X/**` (everything below X): a hole at X, which is X's contents and X itself
            // (stricter by one name).
            if let Some(x) = rule.glob.strip_suffix("/**")
                && !x.contains(['*', '?', '[', '{', '\\'])
            {
                holes.push(Hole {
                    path: x.into(),
                    removed,
                });
                continue;
            }
            // Rules sandbox adds itself (its own files) are protections, not the policy's.
            let explicit = !rule.field.contains("(implicit");
            let mut gap = |why: String| {
                if explicit {
                    cov.gap(name.clone(), why);
                } else {
                    cov.implicit(name.clone(), why);
                }
            };
            // A pattern whose every match lies where nothing grants `removed` needs no hole.
            let (head, _) = glob_head(&rule.glob);
            let granted_there = areas.iter().any(|a| {
                a.rights & removed != 0 && (within(&head, &a.path) || within(&a.path, &head))
            });
            if !granted_there {
                continue;
            }
            match existing_matches(&rule.glob) {
                Some(found) => {
                    let n = found.len();
                    holes.extend(found.into_iter().map(|path| Hole { path, removed }));
                    gap(format!(
                        "{what} only for the {n} name(s) that match it now: Landlock cannot \
                         take rights away from names created later"
                    ));
                }
                None => gap(
                    "not enforced: a pattern that matches at any depth (`**`); Landlock \
                     grants and denies by location, not by name"
                        .into(),
                ),
            }
        }
    };
    if !files_audit {
        deny_side(&f.deny, r | w | x, "denied", &mut holes, &mut cov);
        deny_side(&f.read_only, w, "read-only", &mut holes, &mut cov);
    }
    if !exec_audit {
        deny_side(&policy.exec.deny, r | w | x, "denied", &mut holes, &mut cov);
    }
    // Implicit protections (the BPF-LSM backend's implicit rules, as whole directories).
    for p in IMPLICIT_READ_ONLY {
        holes.push(Hole {
            path: (*p).into(),
            removed: w,
        });
    }
    holes.push(Hole {
        path: host.cgroup_root.clone(),
        removed: w,
    });
    for p in IMPLICIT_DENY {
        holes.push(Hole {
            path: (*p).into(),
            removed: r | w | x,
        });
    }
    if let Ok(rd) = std::fs::read_dir("/dev") {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if IMPLICIT_DENY_PREFIXES.iter().any(|p| n.starts_with(p)) {
                holes.push(Hole {
                    path: e.path(),
                    removed: r | w | x,
                });
            }
        }
    }
    cov.notes.push(
        "raw disks and memory (/dev/sd*, /dev/nvme*, /dev/loop*, /dev/mem, ...): denied as they \
         exist at the start; a disk attached later is not"
            .into(),
    );

    let mut plan = Plan {
        abi,
        handled: rights.all(),
        // ABI 6: no signals to, and no abstract unix sockets of, processes outside the
        // Landlock domain (what the coverage report promises; attach cannot use Landlock).
        scoped: if abi >= 6 && !host.attach {
            landlock::scope::ABSTRACT_UNIX_SOCKET | landlock::scope::SIGNAL
        } else {
            0
        },
        ..Plan::default()
    };
    for a in &areas {
        let removed: u64 = holes
            .iter()
            .filter(|h| within(&a.path, &h.path))
            .fold(0, |m, h| m | h.removed);
        let rights = a.rights & !removed;
        if rights == 0 {
            continue;
        }
        let below: Vec<&Hole> = holes
            .iter()
            .filter(|h| h.path != a.path && within(&h.path, &a.path) && h.removed & rights != 0)
            .collect();
        place(&a.path, rights, &below, &mut plan);
    }
    plan.split.sort();
    plan.split.dedup();

    // What the ruleset does differently, said at every start.
    if !plan.split.is_empty() {
        let shown: Vec<String> = plan
            .split
            .iter()
            .take(6)
            .map(|p| p.display().to_string())
            .collect();
        cov.notes.push(format!(
            "{} director{} ({}{}) hold a denied or read-only name: in them, names cannot be \
             created, removed or renamed, and entries that appear after the start cannot be \
             opened; a denied directory's names can still be listed (not its files read)",
            plan.split.len(),
            if plan.split.len() == 1 { "y" } else { "ies" },
            shown.join(", "),
            if plan.split.len() > 6 { ", ..." } else { "" }
        ));
    }
    cov.notes.push(
        "file and exec denials come from Landlock: the command gets EACCES, and the record is \
         in the kernel's audit log (auditd, Landlock ABI 7+), not in sandbox's"
            .into(),
    );
    cov.notes.push(
        "attribute changes (chmod, chown, utimes, extended attributes) are not judged by \
         Landlock; contents and names are"
            .into(),
    );
    if abi < 3 {
        let why = format!(
            "truncate(2) by path of a file that may not be written is not judged (Landlock \
             ABI {abi}; TRUNCATE needs ABI 3, Linux 6.2)"
        );
        // The policy's own rules need consent; sandbox's own (the audit log's protection)
        // are listed with the other missing protections.
        let explicit = |rules: &[crate::policy::PathRule]| {
            rules.iter().any(|r| !r.field.contains("(implicit"))
        };
        if explicit(&f.read_only) || explicit(&f.write) || explicit(&f.deny) {
            cov.gap("files (truncate)", why);
        } else if !f.read_only.is_empty() || !f.deny.is_empty() {
            cov.implicit("files (truncate)", why);
        }
    }
    if abi < 2 {
        cov.notes.push(
            "renames and links across directories are refused (EXDEV): Landlock ABI 1 cannot \
             judge them"
                .into(),
        );
    }
    if !policy.process.user_namespaces {
        cov.implicit(
            "user namespaces refused (process.user_namespaces: false)",
            "not enforced: the command may make user namespaces where the host lets users \
             (no userns_create hook without BPF LSM)",
        );
    }
    if !policy.exec.allow_privileged {
        if policy.process.no_new_privs {
            cov.notes.push(
                "exec.allow_privileged: false: setuid/setgid binaries run, without their \
                 privileges (no_new_privs)"
                    .into(),
            );
        } else {
            cov.gap(
                "exec.allow_privileged: false",
                "not enforced: Landlock cannot tell setuid binaries apart, and \
                 process.no_new_privs is false",
            );
        }
    }
    (Some(plan), cov)
}

/// Grants `rights` on `path` and below, except at the holes below it.
fn place(path: &Path, rights: u64, holes: &[&Hole], plan: &mut Plan) {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.file_type().is_symlink() {
        // Judged where it points (canonical rules never name one).
        return;
    }
    if holes.is_empty() || !meta.is_dir() {
        plan.grants
            .push((path.to_path_buf(), rights, meta.is_dir()));
        return;
    }
    plan.split.push(path.to_path_buf());
    plan.grants
        .push((path.to_path_buf(), rights & fs::READ_DIR, true));
    let Ok(rd) = std::fs::read_dir(path) else {
        return;
    };
    for e in rd.flatten() {
        let child = e.path();
        let removed = holes
            .iter()
            .filter(|h| h.path == child)
            .fold(0, |m, h| m | h.removed);
        let r = rights & !removed;
        if r == 0 {
            continue;
        }
        let below: Vec<&Hole> = holes
            .iter()
            .copied()
            .filter(|h| h.path != child && within(&h.path, &child) && h.removed & r != 0)
            .collect();
        place(&child, r, &below, plan);
    }
}

/// The network half: what the cgroup socket-address programs do not see.
fn network_coverage(policy: &Policy, host: &HostFacts, cov: &mut Coverage) {
    let n = &policy.network;
    let default_sockets = n.sock_families == default_families()
        && n.sock_flags & !sandbox_common::policy_flags::UNIX_INBOUND == 0;
    let why = "not enforced: sockets of any family the kernel lets the user create can be \
               created (no socket_create hook without BPF LSM)";
    if default_sockets {
        cov.implicit("network.sockets (default: unix, inet, inet6, netlink)", why);
    } else {
        cov.gap("network.sockets", why);
    }
    let default_listen = n.listen.len() == crate::policy::DEFAULT_LISTEN.len()
        && n.listen
            .iter()
            .zip(crate::policy::DEFAULT_LISTEN)
            .all(|(l, d)| l.source == *d);
    let why = "not enforced: the command may listen or bind on any local address (no \
               socket_listen hook without BPF LSM)";
    if default_listen {
        cov.implicit("network.listen (default: loopback only)", why);
    } else {
        for l in &n.listen {
            cov.gap(describe(&l.field, &l.source), why);
        }
    }
    let scoped = matches!(host.landlock, Ok(abi) if abi >= 6) && !host.attach;
    let why = if scoped {
        "not enforced for sockets with a path (D-Bus, docker, ssh-agent, X11 sockets are \
         reachable); abstract names outside the sandbox are refused (Landlock scope)"
    } else {
        "not enforced: unix sockets outside the sandbox, by path or abstract name, are \
         reachable"
    };
    if n.unix.is_empty() {
        cov.implicit("unix socket peers outside the sandbox", why);
    } else {
        cov.gap(
            format!(
                "network.unix (only {} peer(s) outside the sandbox)",
                n.unix.len()
            ),
            why,
        );
    }
    if n.sock_flags & sandbox_common::policy_flags::UNIX_INBOUND == 0 {
        cov.implicit(
            "the command's unix sockets closed to processes outside (network.unix_inbound: \
             false)",
            "not enforced: a process outside the sandbox may connect and send to a unix \
             socket the command made (no unix_stream_connect hook without BPF LSM)",
        );
    }
    cov.notes.push(
        "network: TCP and UDP connects and UDP sends with a destination are judged by cgroup \
         programs (same rules, same records); ICMP (ping) and raw sockets' sends are not"
            .into(),
    );
    if host.attach {
        cov.implicit(
            "self-protection (signals, ptrace)",
            "not enforced by `sandbox attach` in the fallback (Landlock scoping applies only \
             to a process that restricts itself)",
        );
        cov.implicit(
            "self-protection (cgroup)",
            "bound processes running as root, or whose user owns a cgroup above the bound one \
             (a user's delegated manager), can move to another cgroup (cgroup.procs, clone3 \
             with CLONE_INTO_CGROUP), outside the network programs' reach; sockets made \
             outside the bound cgroup (systemd socket activation) are judged by the cgroup \
             they were made in",
        );
    } else {
        match host.landlock {
            Ok(abi) if abi >= 6 => cov.notes.push(
                "processes outside the sandbox: no signals, no ptrace (Landlock scope)".into(),
            ),
            Ok(_) => cov.implicit(
                "self-protection (signals)",
                "signals to processes outside the sandbox (sandbox included) are not judged \
                 (Landlock scoping needs ABI 6, Linux 6.12); ptrace is",
            ),
            Err(_) => cov.implicit(
                "self-protection (signals, ptrace)",
                "not enforced without Landlock",
            ),
        }
    }
    if policy
        .files
        .deny
        .iter()
        .any(|r| r.field == crate::runtime::pty::TERMINAL_RULE)
    {
        cov.implicit(
            "the terminal sandbox was started from",
            "can be opened by path and written to (escape sequences past the pty's filter): a \
             Landlock hole for it would split /dev/pts",
        );
    }
    cov.implicit(
        "other terminals",
        "the user's other terminals (/dev/pts/N of another shell) can be opened by path and \
         written to: the BPF-LSM backend tells ptys made in the sandbox from the rest, \
         Landlock cannot",
    );
    cov.implicit(
        "other programs' shared memory",
        "files in /dev/shm made outside the sandbox (other programs' POSIX shared memory and \
         semaphores) can be read, changed and removed where the policy lets the command \
         write there: the BPF-LSM backend tells files made in the sandbox from the rest, \
         Landlock cannot",
    );
    cov.implicit(
        "other processes' /proc entries",
        "the /proc/PID files of processes outside the sandbox that the kernel does not put \
         behind its ptrace check (cmdline, with secrets passed as arguments; status, \
         mountinfo) can be read: the BPF-LSM backend refuses them, Landlock cannot",
    );
    cov.implicit(
        "kernel keys",
        "the user's kernel keyrings (keyctl, add_key, request_key, /proc/keys; Kerberos \
         tickets of a KEYRING: credential cache) are usable: neither Landlock nor the cgroup \
         programs judge them",
    );
    if host.root_command {
        cov.implicit(
            "self-protection (cgroup)",
            "a command running as root keeps CAP_DAC_OVERRIDE and can start a child in another \
             cgroup (clone3 with CLONE_INTO_CGROUP), outside the network programs' reach",
        );
    }
}

fn default_families() -> u64 {
    crate::policy::DEFAULT_SOCKETS
        .iter()
        .filter_map(|s| crate::policy::SOCKET_NAMES.iter().find(|(k, _)| k == s))
        .fold(0u64, |m, (_, af)| m | (1u64 << af))
}

/// The account printed by `sandbox run`, `attach` and `preflight`.
pub fn report(cov: &Coverage) -> Vec<String> {
    let mut out = Vec::new();
    let (rules, implicit): (Vec<&Gap>, Vec<&Gap>) = cov.gaps.iter().partition(|g| g.explicit);
    if rules.is_empty() {
        out.push("every rule of the policy is enforced".into());
    } else {
        out.push(format!("rules not enforced ({}):", rules.len()));
        for g in rules {
            out.push(format!("  {}: {}", g.rule, g.why));
        }
    }
    if !implicit.is_empty() {
        out.push("protections of the BPF-LSM backend missing here:".into());
        for g in implicit {
            out.push(format!("  {}: {}", g.rule, g.why));
        }
    }
    if !cov.notes.is_empty() {
        out.push("enforced differently:".into());
        for n in &cov.notes {
            out.push(format!("  {n}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(yaml: &str, dir: &Path) -> Policy {
        let ctx = crate::policy::Context {
            home: dir.join("home"),
            cwd: dir.to_path_buf(),
            env: std::collections::HashMap::new(),
            resolvers: Vec::new(),
            host_addrs: Vec::new(),
            other_homes: Vec::new(),
            mount_aliases: Vec::new(),
        };
        crate::policy::load_str(yaml, "test.yaml", &ctx).expect("valid policy")
    }

    fn host(abi: u32) -> HostFacts {
        HostFacts {
            landlock: Ok(abi),
            cgroup_root: "/sys/fs/cgroup".into(),
            root_command: false,
            attach: false,
        }
    }

    fn explicit(c: &Coverage) -> Vec<String> {
        c.refused().map(|g| g.rule.clone()).collect()
    }

    #[test]
    fn literal_rules_are_fully_covered_and_cut_holes() {
        let dir = std::env::temp_dir().join(format!("fallback-unit-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("ws/keep")).unwrap();
        std::fs::create_dir_all(dir.join("ws/secret")).unwrap();
        let d = dir.display();
        let p = policy(
            &format!("files:\n  workspace: {d}/ws\n  deny: [{d}/ws/secret, \"{d}/x/**\"]\n"),
            &dir,
        );
        let (plan, cov) = plan(&p, &host(7));
        let plan = plan.expect("landlock plan");
        assert_eq!(explicit(&cov), Vec::<String>::new());
        let secret = dir.join("ws/secret");
        assert!(
            !plan.grants.iter().any(|(g, _, _)| g.starts_with(&secret)),
            "the denied directory got a grant: {:?}",
            plan.grants
        );
        assert!(plan.split.contains(&dir.join("ws")), "{:?}", plan.split);
        assert!(
            plan.grants
                .iter()
                .any(|(g, r, _)| *g == dir.join("ws/keep") && r & fs::READ_FILE != 0),
            "its sibling lost its grant: {:?}",
            plan.grants
        );
        drop(std::fs::remove_dir_all(&dir));
    }

    #[test]
    fn a_protective_rule_through_a_symlink_names_the_unprotected_link() {
        let dir = std::env::temp_dir().join(format!("fallback-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ws/dotfiles")).unwrap();
        std::fs::create_dir_all(dir.join("other")).unwrap();
        std::fs::write(dir.join("ws/dotfiles/rc"), "").unwrap();
        std::fs::write(dir.join("other/rc2"), "").unwrap();
        std::os::unix::fs::symlink("dotfiles/rc", dir.join("ws/.rc")).unwrap();
        std::os::unix::fs::symlink("../other/rc2", dir.join("ws/.rc2")).unwrap();
        let d = dir.display();
        let p = policy(
            &format!("files:\n  workspace: {d}/ws\n  read_only: [{d}/ws/.rc, {d}/ws/.rc2]\n"),
            &dir,
        );
        let (_, cov) = plan(&p, &host(7));
        // `.rc` leads into its own directory, where nothing is removed (on the way to a
        // hole); `.rc2` leads elsewhere, and its directory is the command's to change.
        assert_eq!(
            explicit(&cov),
            vec![format!("files.read_only[1] '{d}/ws/.rc2'")]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn globs_at_any_depth_and_unenforceable_sections_are_named() {
        let dir = std::env::temp_dir();
        let p = policy(
            "files:\n  deny: [\"/**/.env\"]\nexec:\n  deny: [sudo]\nnetwork:\n  unix: [/run/x]\n  listen: [\"0.0.0.0/0\"]\n",
            &dir,
        );
        let (_, cov) = plan(&p, &host(7));
        assert_eq!(
            explicit(&cov),
            vec![
                "network.listen[0] '0.0.0.0/0'".to_owned(),
                "network.unix (only 1 peer(s) outside the sandbox)".to_owned(),
                "files.deny[0] '/**/.env'".to_owned(),
                "exec.deny[0] 'sudo'".to_owned(),
            ]
        );
    }

    #[test]
    fn attach_names_every_file_rule_and_old_abis_say_what_they_lack() {
        let dir = std::env::temp_dir();
        let p = policy("files:\n  deny: [/etc/shadow]\n  read_only: [/etc]\n", &dir);
        let (plan, cov) = plan(
            &p,
            &HostFacts {
                attach: true,
                ..host(7)
            },
        );
        assert!(plan.is_none());
        assert_eq!(explicit(&cov).len(), 2);
        let (_, cov) = plan_abi2(&p);
        assert!(explicit(&cov).contains(&"files (truncate)".to_owned()));
        assert!(
            cov.gaps
                .iter()
                .any(|g| g.rule == "self-protection (signals)")
        );
    }

    fn plan_abi2(p: &Policy) -> (Option<Plan>, Coverage) {
        plan(p, &host(2))
    }
}
