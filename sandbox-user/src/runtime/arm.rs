//! Arming: everything between a policy file and programs enforcing on a bound cgroup, for
//! `run` and `attach` alike. The policy is read where the command cannot change it
//! (`safepath`), sandbox's own files become read-only rules, then load, apply, bind (see
//! `kernel::loader` for the order), with the mount table and this host's addresses
//! followed from before they are read.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use aya::maps::{Array, MapData};

use crate::audit::AuditFile;
use crate::audit::aggregate::Aggregates;
use crate::backend::{self, Host};
use crate::compile::CompiledPolicy;
use crate::host::cgroup::Cgroup;
use crate::host::mounts::{self, Superblock};
use crate::host::safepath::{self, Agent};
use crate::host::user::Target;
use crate::kernel::loader::{self, Enforcer};
use crate::policy::limits::{Amount, Limits};
use crate::policy::{self, Context, PathRule, Policy};
use crate::runtime::hosts::HostState;
use crate::{preflight, term};

/// Loads the policy named on the command line, or the built-in default.
pub fn load_policy(path: Option<&Path>, ctx: &Context) -> anyhow::Result<Policy> {
    Ok(match path {
        Some(p) => policy::load_file(p, ctx)?,
        None => policy::load_str(policy::DEFAULT_POLICY, "<built-in default policy>", ctx)?,
    })
}

/// Loads the policy for enforcement, read through `safepath`: a policy file that `agent`
/// could change (or a link it planted) is refused. `attach` re-reads the file on SIGHUP
/// while the agent runs; `run` reads it once, before the command starts (and the command
/// cannot change it while it runs, see [`protect_own_files`]), but a command that could
/// change it between runs would decide the next run's rules, capabilities and where root
/// writes its log.
pub fn load_trusted_policy(
    path: Option<&Path>,
    ctx: &Context,
    agent: &Agent,
) -> anyhow::Result<Policy> {
    let Some(p) = path else {
        return load_policy(None, ctx);
    };
    let text = match safepath::read_file(p, agent) {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| anyhow!("{}: the policy is not valid UTF-8", p.display()))?,
        Err(e @ safepath::SafeError::Unsafe { .. }) => bail!(
            "refusing policy {}: {e}. Whoever can change it decides the next run (or reload): \
             its rules, its capabilities, where root writes the log. Keep policies where only \
             root can write, e.g. `sudo install -m 644 {} /etc/sandbox/`",
            p.display(),
            p.display()
        ),
        Err(e) => bail!("{e}"),
    };
    Ok(policy::load_str(&text, &p.display().to_string(), ctx)?)
}

/// The files name resolution reads (sandbox's `allow_hosts` lookups and `getaddrinfo`).
pub const RESOLVER_FILES: [&str; 3] = ["/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf"];

/// The rule that denies sandboxed commands the attach turn (`pins::TURNS`).
pub const TURN_RULE: &str = "files.deny (implicit: sandbox's attach turn)";

/// Makes sandbox's own files read-only for the command, whatever the policy says and even
/// when the command runs as root: the audit log (and its rotated copies), the policy
/// file, `/etc/sandbox` (where later runs find theirs), the name resolution files
/// ([`RESOLVER_FILES`]) and sandbox's own `/proc/PID` entries. Added as `files.read_only`
/// rules, which beat `files.write`. The attach turn is denied ([`TURN_RULE`]).
pub fn protect_own_files(policy: &mut Policy, audit: &AuditFile, policy_file: Option<&Path>) {
    let mut add = |what: &str, glob: String, literal: Option<PathBuf>| {
        policy.files.read_only.push(PathRule {
            field: format!("files.read_only (implicit: {what})"),
            source: glob.clone(),
            glob,
            literal,
            written: None,
        });
    };
    if let Some(file) = audit.regular_file() {
        let glob = policy::expand::escape_glob(&file.display().to_string());
        add("audit log", glob.clone(), Some(file));
        add("rotated audit logs", format!("{glob}.*"), None);
    }
    // sandbox's own /proc entries: `oom_score_adj` (make the OOM killer pick sandbox),
    // `comm`, `attr/*`, ... are not all behind the kernel's ptrace check.
    add(
        "sandbox's own process",
        format!("/proc/{}/**", std::process::id()),
        None,
    );
    // The policies of later runs (`policy::lookup`): a command allowed to write to /etc
    // must not choose the next user's policy (its rules, capabilities, audit path), nor
    // make, rename, chown or chmod the directory. A literal rule covers the directory and
    // everything below it; both its written and its canonical form (the kernel matches
    // canonical paths, and /etc/sandbox may be a link root made).
    let mut add_both = |what: &str, path: &str| {
        let path = PathBuf::from(path);
        let canonical = std::fs::canonicalize(&path).ok().filter(|c| *c != path);
        for p in std::iter::once(path).chain(canonical) {
            add(
                what,
                policy::expand::escape_glob(&p.display().to_string()),
                Some(p),
            );
        }
    };
    add_both("policies of later runs", policy::SYSTEM_DIR);
    // What sandbox reads to resolve `allow_hosts` names while the command runs (its
    // nameservers; `getaddrinfo`'s names and sources, where `nsswitch.conf` also names the
    // modules libc loads into sandbox): a command that could write them would choose the
    // addresses its names open. Written and canonical forms (resolv.conf is often a link
    // into /run).
    for file in RESOLVER_FILES {
        add_both("name resolution", file);
    }
    if let Some(p) = policy_file.and_then(|p| std::fs::canonicalize(p).ok()) {
        add(
            "policy file",
            policy::expand::escape_glob(&p.display().to_string()),
            Some(p),
        );
    }
    // The turn of starts and detaches (`pins::attach_turn`): opened (for reading is enough
    // to lock it), it could be held to slow every later start and keep finished runs'
    // programs attached longer (never to weaken one).
    let turns = crate::kernel::pins::TURNS;
    crate::kernel::pins::make_turns_file();
    policy.files.deny.push(PathRule {
        field: TURN_RULE.into(),
        source: turns.into(),
        glob: policy::expand::escape_glob(turns),
        literal: Some(PathBuf::from(turns)),
        written: None,
    });
}

/// Everything set up and enforcing, before the command starts.
pub struct Armed {
    pub enforcer: Enforcer,
    pub compiled: CompiledPolicy,
    pub mounts: Vec<Superblock>,
    /// Opened before `mounts` was read, so no later change goes unnoticed.
    pub mount_watch: mounts::MountWatch,
    pub identities: loader::Identities,
    /// Installed `allow_hosts` addresses.
    pub hosts: HostState,
    /// Ring-buffer drops already written to the audit log.
    pub reported_drops: u64,
    /// Counts of identical denials already written (kept across `attach`'s pumps).
    pub agg: Aggregates,
    /// The drop count, pinned with the links: what a later clean-up need not report again
    /// if this sandbox dies (see `pins`).
    pub reported_map: Option<Array<MapData, u64>>,
    /// What runs whose sandbox died left in their ring buffers, for the audit log.
    pub orphans: Vec<crate::kernel::pins::Orphans>,
    pub cgroup: Cgroup,
    /// Addresses this host gained while sandbox runs, denied as its own (`block_private`).
    pub host_addrs: HostAddrs,
}

/// The host's own addresses, followed while sandbox runs (with `block_private`, or
/// `allow_hosts`: a name never allows one of them).
pub struct HostAddrs {
    /// Opened before the addresses are read again, so no change goes unnoticed.
    pub watch: Option<crate::host::netif::AddrWatch>,
    /// Added after compilation (the compiled ones are in the policy).
    pub added: crate::compile::net::HostNets,
    /// Every address and local prefix this host has had since sandbox started following
    /// them (kept when it goes away: a stale refusal fails closed).
    pub seen: crate::compile::net::HostNets,
}

impl HostAddrs {
    /// Starts following the addresses and denies those gained since the policy was
    /// compiled. Without `block_private` or `allow_hosts` there is nothing to follow.
    fn start(enforcer: &mut Enforcer, compiled: &CompiledPolicy) -> anyhow::Result<Self> {
        let mut me = Self {
            watch: None,
            added: crate::compile::net::HostNets::new(),
            seen: crate::compile::net::HostNets::new(),
        };
        if compiled.net.host_rule.is_some() || !compiled.net.hosts.is_empty() {
            me.watch = Some(
                crate::host::netif::AddrWatch::new()
                    .context("watching this host's network addresses (netlink)")?,
            );
            me.refresh(enforcer, compiled)?;
        }
        Ok(me)
    }

    /// After a change: denies the addresses gained (with `block_private`), and remembers
    /// them all (`seen`, for `allow_hosts`).
    pub fn refresh(
        &mut self,
        enforcer: &mut Enforcer,
        compiled: &CompiledPolicy,
    ) -> anyhow::Result<()> {
        let now = crate::host::netif::local();
        self.seen.extend(now.iter().copied());
        match enforcer.deny_host_addrs(compiled, &now, &mut self.added) {
            Ok(new) if !new.is_empty() => {
                tracing::debug!("this host gained {new:?}: denied");
            }
            Ok(_) => {}
            // Enforcement goes on; the address is what the policy said about it before.
            Err(e) => tracing::warn!(
                "this host gained a network address that could not be added \
                 to the private set ({e}); connections to it are judged by the rest of the \
                 policy"
            ),
        }
        Ok(())
    }

    /// Waits for a change (never, when not following).
    pub async fn changed(&mut self) -> std::io::Result<()> {
        match &mut self.watch {
            Some(w) => w.changed().await,
            None => std::future::pending().await,
        }
    }
}

/// After the mount table changed (a file system mounted or moved after load): re-reads
/// it and tells the programs where every file system is, before it is used.
pub fn remount(
    enforcer: &mut Enforcer,
    compiled: &CompiledPolicy,
) -> anyhow::Result<Vec<Superblock>> {
    let m = mounts::read()?;
    enforcer.update_mounts(compiled, &m)?;
    tracing::debug!("mount table changed: {} file systems", m.len());
    Ok(m)
}

/// Which cgroup a policy is bound to.
#[derive(Debug, Clone, Copy)]
pub enum Bind<'a> {
    /// A new cgroup `<root>/sandbox/<name>` (under systemd: in the run's delegated scope),
    /// created once the programs are attached.
    NewRun(&'a str),
    /// An existing cgroup (`sandbox attach`): never created or removed by sandbox.
    Existing(&'a Path),
}

/// Load, apply, create (or open) and bind the cgroup, with the backend `host` says
/// (`backend::detect` ran the preflight checks).
pub fn arm(compiled: CompiledPolicy, bind: Bind<'_>, host: &Host) -> anyhow::Result<Armed> {
    let mut t = Timer::new();
    let kernel = &host.kernel;
    let fallback = host.backend.is_fallback();
    // The fallback has no file programs: no identities to find.
    let ids = if fallback {
        loader::Identities::default()
    } else {
        loader::identities(&compiled, 0)
    };
    t.lap("identities");
    let root = host.cgroup_root.clone();
    let swept = crate::kernel::pins::sweep(&root);
    for line in &swept.lines {
        term::line(&format!("sandbox: {line}"));
    }
    let existing = match bind {
        Bind::Existing(p) => {
            let abs = if p.is_absolute() {
                p.to_path_buf()
            } else {
                root.join(p)
            };
            let c = Cgroup::open(&root, &abs)?;
            if c.level == 0 {
                bail!(
                    "{}: the root cgroup holds every process of the host, sandbox's own \
                     included; give a cgroup below it",
                    abs.display()
                );
            }
            Some(c)
        }
        Bind::NewRun(_) => None,
    };
    let pin_dir = crate::kernel::pins::own_dir(existing.as_ref().map(|c| c.id))
        .inspect_err(|w| tracing::warn!("{w}"))
        .ok();
    let enforcer = if fallback {
        Enforcer::load_fallback(&compiled, kernel, ids.entries.len(), pin_dir.as_deref())
    } else {
        Enforcer::load(&compiled, kernel, ids.entries.len(), pin_dir.as_deref())
    }
    .map_err(|e| anyhow!(preflight::explain_load_failure(&e)));
    if enforcer.is_err()
        && let Some(d) = &pin_dir
    {
        drop(crate::kernel::pins::remove_dir(d));
    }
    let mut enforcer = enforcer?;
    let reported_map = pin_dir.as_deref().and_then(|d| {
        crate::kernel::pins::reported_drops(d)
            .inspect_err(|w| tracing::warn!("{w}"))
            .ok()
    });
    t.lap("load and attach");
    match arm_loaded(
        &mut enforcer,
        &compiled,
        &ids,
        (&root, fallback),
        bind,
        existing,
        &mut t,
    ) {
        Ok((mounts, mount_watch, hosts, host_addrs, cgroup)) => Ok(Armed {
            enforcer,
            compiled,
            mounts,
            mount_watch,
            identities: ids,
            hosts,
            host_addrs,
            cgroup,
            reported_drops: 0,
            agg: Aggregates::default(),
            reported_map,
            orphans: swept.orphans,
        }),
        Err(e) => {
            enforcer.release();
            Err(e)
        }
    }
}

/// The steps after the programs are attached; on an error the caller unpins them.
fn arm_loaded(
    enforcer: &mut Enforcer,
    compiled: &CompiledPolicy,
    ids: &loader::Identities,
    (root, fallback): (&Path, bool),
    bind: Bind<'_>,
    existing: Option<Cgroup>,
    t: &mut Timer,
) -> anyhow::Result<(
    Vec<Superblock>,
    mounts::MountWatch,
    HostState,
    HostAddrs,
    Cgroup,
)> {
    let mount_watch = mounts::MountWatch::new().context("watching /proc/self/mountinfo")?;
    let mounts = mounts::read().context("reading /proc/self/mountinfo")?;
    enforcer.apply(compiled, &mounts, ids)?;
    if !fallback && mounts::shm_dev() == 0 && std::path::Path::new("/dev/shm").is_dir() {
        tracing::warn!(
            "/dev/shm is not a tmpfs mounted there, so other programs' shared memory in it is \
             not kept from the command. Fix: mount -t tmpfs -o nosuid,nodev,mode=1777 tmpfs \
             /dev/shm"
        );
    }
    // This host's addresses first: no name is allowed one of them.
    let host_addrs = HostAddrs::start(enforcer, compiled)?;
    let mut hosts = HostState::default();
    if !compiled.net.hosts.is_empty() {
        let round = crate::runtime::hosts::resolve(compiled, &host_addrs.seen);
        for w in &round.warnings {
            tracing::warn!("{w}");
        }
        // What could not be written is not allowed (fail closed); the lookups go on.
        if let Err(e) = hosts.install(&round, enforcer, compiled, &host_addrs.seen) {
            tracing::warn!("allow_hosts: some addresses could not be allowed: {e}");
        }
    }
    t.lap("apply");
    let cgroup = match (existing, bind) {
        (Some(c), _) => {
            enforcer.bind(&c)?;
            c
        }
        (None, Bind::NewRun(name)) => {
            let cgroup = Cgroup::create(root, name)?;
            let ready = enforcer
                .bind(&cgroup)
                .map_err(anyhow::Error::from)
                .and_then(|()| set_limits(&cgroup, root, &compiled.limits));
            if let Err(e) = ready {
                let _ = cgroup.destroy();
                return Err(e);
            }
            cgroup
        }
        (None, Bind::Existing(p)) => bail!("cgroup {} was not opened", p.display()),
    };
    // The cgroup programs run for the cgroup they are attached to: attached now, before
    // anything joins it (the maps are complete and the cgroup bound).
    if let Err(e) = enforcer.attach_cgroup(&cgroup, fallback) {
        if matches!(bind, Bind::NewRun(_)) {
            let _ = cgroup.destroy();
        }
        return Err(anyhow!(preflight::explain_load_failure(&e)));
    }
    t.lap("cgroup bound");
    Ok((mounts, mount_watch, hosts, host_addrs, cgroup))
}

/// The policy's `limits` on a new run's cgroup, before anything joins it, each no higher
/// than the limit the invoker ran under (`systemd::invoker_cgroup`: the run's cgroup is
/// not below it). A limit the policy wrote that cannot be set stops the run (it was asked
/// for); a default one is said, and the run goes on without it. `max` sets only the
/// invoker's. The memory limit holds as much swap (as Docker's `--memory` does): without
/// one, a command at its limit would push the host into swap instead.
fn set_limits(cgroup: &Cgroup, root: &Path, limits: &Limits) -> anyhow::Result<()> {
    use crate::host::cgroup::{CPU_MAX, Knob, MEMORY_MAX, MEMORY_SWAP_MAX, PIDS_MAX};
    let invoker = crate::host::systemd::invoker_cgroup().map(|c| root.join(&c[1..]));
    let kept = |knob: Knob| {
        invoker
            .as_deref()
            .and_then(|dir| crate::host::cgroup::lowest(root, dir, knob))
    };
    // A share is of what the run could have at most.
    let most = |host: u64, knob: Knob| {
        [
            Some(host).filter(|&h| h > 0),
            cgroup.ancestors_max(root, knob),
            kept(knob),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(0)
    };
    // The CPUs the invoker may run on, kept for the run: a share is of those.
    let cpus = keep_cpuset(cgroup, root, invoker.as_deref()).unwrap_or_else(host_cpus)
        * crate::policy::limits::CPU_PERIOD;
    for (field, knob, limit, total, of) in [
        (
            "limits.memory",
            MEMORY_MAX,
            limits.memory,
            most(host_memory(), MEMORY_MAX),
            "the host's memory (MemTotal in /proc/meminfo)",
        ),
        ("limits.pids", PIDS_MAX, limits.pids, 0, "the host's tasks"),
        (
            "limits.cpu",
            CPU_MAX,
            limits.cpu,
            most(cpus, CPU_MAX),
            "the host's number of CPUs",
        ),
    ] {
        let wanted = match limit.amount {
            Amount::Max => None,
            Amount::Percent(_) if total == 0 => {
                let e = format!("{field}: {of} is unknown");
                if limit.written {
                    bail!("{e}. Set `{field}: max` in the policy to run without this limit");
                }
                tracing::warn!("{e}; the command runs without the default {field}");
                None
            }
            a => a.resolve(total),
        };
        let inherited = kept(knob);
        let Some(value) = [wanted, inherited].into_iter().flatten().min() else {
            continue;
        };
        let set = cgroup.limit(root, field, knob, Some(value));
        // As much swap, or the invoker's if lower, where the kernel accounts swap (it may
        // not: `swapaccount=0`). sandbox's own addition: a failure is only said.
        if set.is_ok() && knob == MEMORY_MAX && cgroup.path.join(MEMORY_SWAP_MAX.file).exists() {
            let swap = kept(MEMORY_SWAP_MAX).map_or(value, |k| k.min(value));
            if let Err(e) = cgroup.limit(root, field, MEMORY_SWAP_MAX, Some(swap)) {
                tracing::warn!("{e}; memory.max is set, the command's swap is not limited");
            }
        }
        match set {
            Ok(()) => tracing::debug!(
                "{} of {}: {} (the invoker's: {inherited:?})",
                knob.file,
                cgroup.path.display(),
                knob.text(Some(value))
            ),
            Err(e) if limit.written && wanted.is_some() => {
                bail!("{e}. Set `{field}: max` in the policy to run without this limit")
            }
            Err(e) => tracing::warn!("{e}; the command runs without the default {field}"),
        }
    }
    set_io(cgroup, root, limits, invoker.as_deref())
}

/// `limits.io` on every disk of the host (`io.max`, one line each), each key no higher than
/// the invoker's for that disk. Disks attached later are not limited.
fn set_io(
    cgroup: &Cgroup,
    root: &Path,
    limits: &Limits,
    invoker: Option<&Path>,
) -> anyhow::Result<()> {
    use crate::host::cgroup::{IoLimits, disks, io_line, lowest_io};
    // As `IO_KEYS`: rbps, wbps, riops, wiops.
    let asked = [
        limits.io_read,
        limits.io_write,
        limits.io_read_iops,
        limits.io_write_iops,
    ];
    let ours: IoLimits = asked.map(|l| l.amount.resolve(0));
    let written = asked
        .iter()
        .zip(ours)
        .any(|(l, v)| l.written && v.is_some());
    let mut each = std::collections::BTreeMap::<String, IoLimits>::new();
    if ours.iter().any(Option::is_some) {
        for dev in disks() {
            each.insert(dev, ours);
        }
        if each.is_empty() {
            bail!("limits.io: the host has no disks in /sys/block to limit");
        }
    }
    for (dev, kept) in invoker.map(|d| lowest_io(root, d)).unwrap_or_default() {
        let ours = each.entry(dev).or_default();
        for (o, k) in ours.iter_mut().zip(kept) {
            *o = [*o, k].into_iter().flatten().min();
        }
    }
    each.retain(|_, l| l.iter().any(Option::is_some));
    if each.is_empty() {
        return Ok(());
    }
    let stop = |e: crate::host::cgroup::CgroupError| {
        anyhow!("{e}. Remove `limits.io` from the policy to run without disk limits")
    };
    // The kernel charges the write-back of a page to the cgroup whose memory holds it:
    // without the memory controller every buffered write would be written back as the
    // parent's, past `wbps`.
    if let Err(e) = cgroup.enable(root, "limits.io", "io") {
        if written {
            return Err(stop(e));
        }
        tracing::warn!("{e}; the command runs without the invoker's disk limits");
        return Ok(());
    }
    let writes = |l: &IoLimits| l[1].is_some() || l[3].is_some();
    if each.values().any(writes)
        && let Err(e) = cgroup.enable(root, "limits.io", "memory")
    {
        let asked = asked.iter().zip(ours).skip(1).step_by(2);
        if asked.into_iter().any(|(l, v)| l.written && v.is_some()) {
            return Err(stop(e));
        }
        tracing::warn!("{e}; buffered writes are written back without the disk limits");
    }
    for (dev, l) in &each {
        let line = io_line(dev, l);
        match cgroup.write_limit("limits.io", "io", "io.max", &line) {
            Ok(()) => tracing::debug!("io.max of {}: {line}", cgroup.path.display()),
            // A disk removed since it was listed.
            Err(e) if !Path::new("/sys/dev/block").join(dev).exists() => {
                tracing::debug!("{e}; disk {dev} is gone");
            }
            Err(e) if written => return Err(stop(e)),
            Err(e) => tracing::warn!("{e}; disk {dev} is not limited"),
        }
    }
    Ok(())
}

/// The invoker's CPUs and memory nodes (`cpuset.cpus.effective`, `cpuset.mems.effective`),
/// where they are fewer than the host's, set on the run's cgroup: a job pinned to some CPUs
/// stays on them. Returns how many CPUs that is. A failure is said (sandbox's own addition,
/// as the invoker's other limits are).
fn keep_cpuset(cgroup: &Cgroup, root: &Path, invoker: Option<&Path>) -> Option<u64> {
    let dir = invoker?;
    let read = |d: &Path, f: &str| {
        std::fs::read_to_string(d.join(f))
            .ok()
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
    };
    let mut cpus = None;
    for file in ["cpuset.cpus", "cpuset.mems"] {
        let effective = format!("{file}.effective");
        let (Some(theirs), Some(all)) = (read(dir, &effective), read(root, &effective)) else {
            continue;
        };
        if theirs == all {
            continue;
        }
        let set = cgroup
            .enable(root, "limits.cpu", "cpuset")
            .and_then(|()| cgroup.write_limit("limits.cpu", "cpuset", file, &theirs));
        // What the kernel made of it (CPUs the run's parent lacks are left out; none left:
        // the parent's).
        let got = read(&cgroup.path, &effective).unwrap_or_default();
        match &set {
            Ok(()) if got == theirs => {
                tracing::debug!(
                    "{file} of {}: {theirs} (the invoker's)",
                    cgroup.path.display()
                );
            }
            Ok(()) => tracing::warn!(
                "{file}: the invoker's {theirs} became {got} in {}",
                cgroup.path.display()
            ),
            Err(e) => tracing::warn!("{e}; the command may run on CPUs the invoker may not"),
        }
        if file == "cpuset.cpus" && set.is_ok() {
            cpus = Some(count_list(&got));
        }
    }
    cpus.filter(|&n| n > 0)
}

/// How many numbers a kernel list (`0-3,8`) names.
fn count_list(list: &str) -> u64 {
    list.split(',')
        .filter_map(|r| match r.split_once('-') {
            Some((a, b)) => {
                (b.trim().parse::<u64>().ok()? + 1).checked_sub(a.trim().parse::<u64>().ok()?)
            }
            None => r.trim().parse::<u64>().ok().map(|_| 1),
        })
        .sum()
}

/// The host's CPUs online; 0 when unknown.
fn host_cpus() -> u64 {
    // SAFETY: sysconf reads a value; no memory is passed.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    u64::try_from(n).unwrap_or(0)
}

/// The host's memory (`MemTotal`), in bytes; 0 when unreadable.
fn host_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb << 10)
}

/// Says which backend is in force; in the fallback, lists what it does not enforce,
/// refuses a policy with rules it cannot enforce unless the user accepted that
/// (`--allow-degraded`, `fallback.allow_degraded`), and builds the Landlock ruleset
/// (before the fork: the child only restricts itself).
pub fn fallback_rules(
    policy: &Policy,
    host: &Host,
    target: &Target,
    allow_degraded: bool,
) -> anyhow::Result<Option<crate::landlock::Ruleset>> {
    term::line(&format!("sandbox: {}", host.backend.describe()));
    let backend::Backend::Fallback { landlock, .. } = &host.backend else {
        return Ok(None);
    };
    let facts = crate::fallback::HostFacts {
        landlock: landlock.clone(),
        cgroup_root: host.cgroup_root.clone(),
        root_command: target.uid == 0,
        attach: false,
    };
    let (plan, cov) = crate::fallback::plan(policy, &facts);
    let refused: Vec<String> = cov
        .refused()
        .map(|g| format!("  {}: {}", g.rule, g.why))
        .collect();
    // Without Landlock no file rule holds at all: that is never accepted by the policy
    // alone (the built-in policy accepts the fallback's gaps), only on the command line.
    let no_landlock = landlock.is_err() && !refused.is_empty();
    if no_landlock && !allow_degraded {
        bail!(
            "this kernel has neither BPF LSM nor Landlock ({}), so no file or exec rule of \
             this policy can be enforced; nothing was started:\n{}\nTo run with the network \
             rules only, pass --allow-degraded. To enforce the policy, use a kernel with BPF \
             LSM or Landlock (see `sandbox preflight`)",
            landlock.as_ref().err().map_or("", String::as_str),
            refused.join("\n")
        );
    }
    if !refused.is_empty() && !allow_degraded && !policy.allow_degraded {
        bail!(
            "the fallback backend cannot enforce {} rule(s) of this policy; nothing was \
             started:\n{}\nTo run anyway with these rules not enforced, pass \
             --allow-degraded or set `fallback: {{allow_degraded: true}}` in the policy. To \
             enforce every rule, use a kernel with BPF LSM (see `sandbox preflight`)",
            refused.len(),
            refused.join("\n")
        );
    }
    for line in crate::fallback::report(&cov) {
        term::line(&format!("sandbox: {line}"));
    }
    let Some(plan) = plan else {
        return Ok(None);
    };
    let rs = plan
        .ruleset()
        .map_err(|e| anyhow!("building the Landlock ruleset: {e}; nothing was started"))?;
    tracing::debug!(
        "Landlock ABI {}: {} rules, {} split directories",
        plan.abi,
        rs.rules,
        plan.split.len()
    );
    Ok(Some(rs))
}

/// Phase timings as debug diagnostics (`SANDBOX_LOG=debug`).
pub(crate) struct Timer {
    pub on: bool,
    last: std::time::Instant,
}

impl Timer {
    pub(crate) fn new() -> Self {
        Self {
            on: crate::diag::debug_on(),
            last: std::time::Instant::now(),
        }
    }

    pub fn lap(&mut self, what: &str) {
        if self.on {
            tracing::debug!("{what}: {} ms", self.last.elapsed().as_millis());
        }
        self.last = std::time::Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use sandbox_common::accept;

    use super::*;
    use crate::compile::matcher::has;

    #[test]
    fn cpu_lists_are_counted() {
        for (list, n) in [
            ("0-3", 4),
            ("0-3,8", 5),
            ("5", 1),
            ("0,2,4-5", 4),
            ("3-1", 0),
        ] {
            assert_eq!(count_list(list), n, "{list}");
        }
    }

    /// The files name resolution reads are read-only for the command even where the policy
    /// lets it write (the command would otherwise choose what `allow_hosts` names open),
    /// under their written and their canonical names; the rest of /etc stays writable.
    #[test]
    fn name_resolution_files_are_read_only_for_the_command() {
        let ctx = Context {
            home: "/home/u".into(),
            cwd: "/work".into(),
            env: Default::default(),
            resolvers: Vec::new(),
            host_addrs: Vec::new(),
            other_homes: Vec::new(),
            mount_aliases: Vec::new(),
        };
        let mut p = policy::load_str("files:\n  write: [/etc]\n", "p.yaml", &ctx).unwrap();
        let audit = AuditFile::open(Path::new("/dev/null")).unwrap();
        protect_own_files(&mut p, &audit, None);
        let c = crate::compile::compile(&p, 1).unwrap();
        let read_only = |f: &Path| {
            has(
                c.match_path(f.as_os_str().as_encoded_bytes()),
                accept::FILE_READ_ONLY,
            )
        };
        for f in RESOLVER_FILES {
            let f = Path::new(f);
            assert!(read_only(f), "{}", f.display());
            let rule = c.rule_for(accept::FILE_READ_ONLY, f.as_os_str().as_encoded_bytes());
            assert_eq!(
                rule.unwrap().field,
                "files.read_only (implicit: name resolution)"
            );
            if let Ok(target) = std::fs::canonicalize(f) {
                assert!(
                    read_only(&target),
                    "{} (of {})",
                    target.display(),
                    f.display()
                );
            }
        }
        assert!(!read_only(Path::new("/etc/motd")));
    }
}
