//! `sandbox run`: confine one command and everything it starts.
//!
//! Sequence (the command never runs unconfined): decide who the command runs as (root only
//! when asked for), read the policy and open the audit log where the command cannot reach
//! them (`safepath`), make both read-only for the command, compile the policy, run the
//! preflight checks, load and attach the programs, fill the maps, create the run's cgroup
//! and bind it, and only then fork: the child joins the cgroup in `pre_exec`, cuts its
//! capabilities, changes user, sets `no_new_privs` and the parent-death signal, before
//! `execve` of the command, so even that exec is checked. Events are streamed until the
//! command exits (terminal lines through `term`, which never blocks); then every process
//! left in the cgroup is killed and the cgroup removed.

use std::ffi::{CString, OsString};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use aya::maps::{Array, MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::audit::aggregate::{Aggregates, Repeat};
use crate::audit::{AuditFile, Event, Formatter, Record};
use crate::backend::{self, Host};
use crate::compile::{self, CompiledPolicy};
use crate::host::caps::{self, CapSet};
use crate::host::cgroup::Cgroup;
use crate::host::mounts::{self, Superblock};
use crate::host::safepath::{self, Agent};
use crate::kernel::loader::{self, Enforcer};
use crate::policy::{self, Context, PathRule, Policy};
use crate::runtime::hosts::HostState;
use crate::runtime::metrics::Metrics;
use crate::{preflight, term};

/// Where the audit log goes when neither `--audit-log` nor `audit.path` says.
pub const DEFAULT_AUDIT_LOG: &str = "/var/log/sandbox/audit.jsonl";

/// After a request to stop (SIGTERM, terminal hangup) the command has this long to exit
/// before everything in its cgroup is killed.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

pub struct RunOptions {
    pub policy: Option<PathBuf>,
    pub audit_log: Option<PathBuf>,
    /// No line per denial on stderr (`--quiet`; by default when stderr is the journal).
    pub quiet: bool,
    /// `--metrics`: serve Prometheus metrics on this address.
    pub metrics: Option<std::net::SocketAddr>,
    pub as_root: bool,
    /// Run the command as this user (name or uid) instead.
    pub user: Option<String>,
    /// `--keep-cap`: capabilities a root command keeps beyond the default set.
    pub keep_caps: Vec<String>,
    /// `--allow-degraded`: run in the fallback backend even with rules it cannot enforce.
    pub allow_degraded: bool,
    pub command: Vec<OsString>,
}

/// Who the command runs as.
#[derive(Debug, Clone)]
pub struct Target {
    pub uid: u32,
    pub gid: u32,
    pub name: Option<String>,
    pub home: PathBuf,
    /// Change to `uid`/`gid` (sandbox is root, the command is not).
    pub drop: bool,
}

/// Why `sandbox run` as root without sudo does not start anything.
const ROOT_WITHOUT_SUDO: &str = "sandbox is running as root, not through sudo (no SUDO_UID), so \
     the command would run as root. Say who it should run as: run `sudo sandbox run ...` from \
     your own account (the command runs as you), or `sandbox run --user NAME ...`, or \
     `sandbox run --as-root ...` to run it as root (without the capabilities that reach past \
     the policy; see --keep-cap)";

/// A user account: (name, uid, primary gid, home).
type Account = (String, u32, u32, PathBuf);

impl Target {
    /// Who `sandbox run` starts the command as: the user who called `sudo`, the `--user`,
    /// or root when `--as-root` says so. Root by default (no sudo, no flag) is refused.
    pub fn for_run(as_root: bool, user: Option<&str>) -> anyhow::Result<Self> {
        // SAFETY: plain syscall.
        let euid = unsafe { libc::geteuid() };
        if let Some(u) = user {
            if euid != 0 {
                bail!(
                    "--user needs sandbox to run as root (it becomes that user just before starting the command)"
                );
            }
            let (name, uid, gid, home) =
                account(u).ok_or_else(|| anyhow!("--user {u}: no such user"))?;
            if uid == 0 {
                bail!("--user {u} is root: say --as-root to run the command as root");
            }
            return Ok(Self {
                uid,
                gid,
                name: Some(name),
                home,
                drop: true,
            });
        }
        if euid == 0 && !as_root {
            return Self::sudo_caller()?.ok_or_else(|| anyhow!(ROOT_WITHOUT_SUDO));
        }
        Ok(Self::current())
    }

    /// The invoking user, for commands that only read (`check`, `explain`): the sudo
    /// caller under sudo, else this process's user.
    pub fn detect() -> anyhow::Result<Self> {
        Ok(Self::sudo_caller()?.unwrap_or_else(Self::current))
    }

    fn sudo_caller() -> anyhow::Result<Option<Self>> {
        // SAFETY: plain syscall.
        let euid = unsafe { libc::geteuid() };
        let sudo = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
        if euid == 0
            && let (Some(uid), Some(gid)) = (sudo("SUDO_UID"), sudo("SUDO_GID"))
            && uid != 0
        {
            let (name, _, _, home) =
                passwd(uid).ok_or_else(|| anyhow!("SUDO_UID {uid} has no passwd entry"))?;
            return Ok(Some(Self {
                uid,
                gid,
                name: Some(name),
                home,
                drop: true,
            }));
        }
        Ok(None)
    }

    fn current() -> Self {
        // SAFETY: plain syscalls.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .or_else(|| passwd(uid).map(|p| p.3))
            .unwrap_or_else(|| "/".into());
        Self {
            uid,
            gid,
            name: passwd(uid).map(|p| p.0),
            home,
            drop: false,
        }
    }

    /// Whose writes sandbox must not trust for its own files.
    pub fn agent(&self) -> Agent {
        if self.uid == 0 {
            Agent::AnyNonRoot
        } else {
            Agent::user(self.uid, self.gid, self.name.as_deref())
        }
    }
}

/// A user by name or number.
fn account(user: &str) -> Option<Account> {
    if let Ok(uid) = user.parse::<u32>() {
        return passwd(uid);
    }
    let c = CString::new(user).ok()?;
    lookup(|pw, buf, out| {
        // SAFETY: see `lookup`.
        unsafe { libc::getpwnam_r(c.as_ptr(), pw, buf.as_mut_ptr().cast(), buf.len(), out) }
    })
}

fn passwd(uid: u32) -> Option<Account> {
    lookup(|pw, buf, out| {
        // SAFETY: see `lookup`.
        unsafe { libc::getpwuid_r(uid, pw, buf.as_mut_ptr().cast(), buf.len(), out) }
    })
}

/// Runs a `getpw*_r` call and copies the entry out.
fn lookup(
    call: impl FnOnce(*mut libc::passwd, &mut [u8], *mut *mut libc::passwd) -> libc::c_int,
) -> Option<Account> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter; the call writes strings into `buf`,
    // which outlives the reads below.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let rc = call(&raw mut pw, &mut buf, &raw mut out);
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: on success both fields point to NUL-terminated strings inside `buf`.
    let (name, dir) = unsafe {
        (
            std::ffi::CStr::from_ptr(pw.pw_name),
            std::ffi::CStr::from_ptr(pw.pw_dir),
        )
    };
    Some((
        name.to_string_lossy().into_owned(),
        pw.pw_uid,
        pw.pw_gid,
        PathBuf::from(dir.to_string_lossy().into_owned()),
    ))
}

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

/// Makes sandbox's own files read-only for the command, whatever the policy says and even
/// when the command runs as root: the audit log (and its rotated copies), the policy
/// file, `/etc/sandbox` (where later runs find theirs), and sandbox's own `/proc/PID`
/// entries. Added as `files.read_only` rules, which beat `files.write`.
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
    let dir = PathBuf::from(policy::SYSTEM_DIR);
    let canonical = std::fs::canonicalize(&dir).ok().filter(|c| *c != dir);
    for p in std::iter::once(dir).chain(canonical) {
        add(
            "policies of later runs",
            policy::expand::escape_glob(&p.display().to_string()),
            Some(p),
        );
    }
    if let Some(p) = policy_file.and_then(|p| std::fs::canonicalize(p).ok()) {
        add(
            "policy file",
            policy::expand::escape_glob(&p.display().to_string()),
            Some(p),
        );
    }
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

/// The host's own addresses, followed while sandbox runs (with `block_private`).
pub struct HostAddrs {
    /// Opened before the addresses are read again, so no change goes unnoticed.
    pub watch: Option<crate::host::netif::AddrWatch>,
    /// Added after compilation (the compiled ones are in the policy).
    pub added: std::collections::BTreeSet<std::net::IpAddr>,
}

impl HostAddrs {
    /// Starts following the addresses and denies those gained since the policy was
    /// compiled. Without `block_private` there is nothing to follow.
    fn start(enforcer: &mut Enforcer, compiled: &CompiledPolicy) -> anyhow::Result<Self> {
        let mut me = Self {
            watch: None,
            added: std::collections::BTreeSet::new(),
        };
        if compiled.net.host_rule.is_some() {
            me.watch = Some(
                crate::host::netif::AddrWatch::new()
                    .context("watching this host's network addresses (netlink)")?,
            );
            me.refresh(enforcer, compiled)?;
        }
        Ok(me)
    }

    /// After a change: denies the addresses gained.
    pub fn refresh(
        &mut self,
        enforcer: &mut Enforcer,
        compiled: &CompiledPolicy,
    ) -> anyhow::Result<()> {
        let now = crate::host::netif::addresses();
        match enforcer.deny_host_addrs(compiled, &now, &mut self.added) {
            Ok(new) if !new.is_empty() && std::env::var_os("SANDBOX_DEBUG").is_some() => {
                term::line(&format!("sandbox: debug: this host gained {new:?}: denied"));
            }
            Ok(_) => {}
            // Enforcement goes on; the address is what the policy said about it before.
            Err(e) => term::line(&format!(
                "sandbox: warning: this host gained a network address that could not be added \
                 to the private set ({e}); connections to it are judged by the rest of the \
                 policy"
            )),
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
    if std::env::var_os("SANDBOX_DEBUG").is_some() {
        term::line(&format!(
            "sandbox: debug: mount table changed: {} file systems",
            m.len()
        ));
    }
    Ok(m)
}

/// Which cgroup a policy is bound to.
#[derive(Debug, Clone, Copy)]
pub enum Bind<'a> {
    /// A new cgroup `<root>/sandbox/<name>`, created once the programs are attached.
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
            Some(Cgroup::open(&root, &abs)?)
        }
        Bind::NewRun(_) => None,
    };
    let pin_dir = crate::kernel::pins::own_dir(existing.as_ref().map(|c| c.id))
        .inspect_err(|w| term::line(&format!("sandbox: warning: {w}")))
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
            .inspect_err(|w| term::line(&format!("sandbox: warning: {w}")))
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
    let mut hosts = HostState::default();
    if !compiled.net.hosts.is_empty() {
        let round = crate::runtime::hosts::resolve(compiled);
        for w in &round.warnings {
            term::line(&format!("sandbox: warning: {w}"));
        }
        hosts.install(&round, enforcer, compiled)?;
    }
    let host_addrs = HostAddrs::start(enforcer, compiled)?;
    t.lap("apply");
    let cgroup = match (existing, bind) {
        (Some(c), _) => {
            enforcer.bind(&c)?;
            c
        }
        (None, Bind::NewRun(name)) => {
            let cgroup = Cgroup::create(root, name)?;
            if let Err(e) = enforcer.bind(&cgroup) {
                let _ = cgroup.destroy();
                return Err(e.into());
            }
            cgroup
        }
        (None, Bind::Existing(p)) => bail!("cgroup {} was not opened", p.display()),
    };
    // The fallback's programs run for the cgroup they are attached to: attached now,
    // before anything joins it (the maps are complete and the cgroup bound).
    if fallback && let Err(e) = enforcer.attach_cgroup(&cgroup) {
        if matches!(bind, Bind::NewRun(_)) {
            let _ = cgroup.destroy();
        }
        return Err(anyhow!(preflight::explain_load_failure(&e)));
    }
    t.lap("cgroup bound");
    Ok((mounts, mount_watch, hosts, host_addrs, cgroup))
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
    if std::env::var_os("SANDBOX_DEBUG").is_some() {
        term::line(&format!(
            "sandbox: debug: Landlock ABI {}: {} rules, {} split directories",
            plan.abi,
            rs.rules,
            plan.split.len()
        ));
    }
    Ok(Some(rs))
}

pub async fn run(opts: RunOptions) -> anyhow::Result<i32> {
    term::start();
    if crate::host::systemd::stderr_is_journal() {
        term::journal_levels();
    }
    let Some((prog, args)) = opts.command.split_first() else {
        bail!("no command given: sandbox run [--policy FILE] -- COMMAND [ARGS...]");
    };
    let target = Target::for_run(opts.as_root, opts.user.as_deref())?;
    let agent = target.agent();
    let ctx = Context::from_process(target.home.clone())?;
    let policy_file = match &opts.policy {
        Some(p) => Some(p.clone()),
        None => {
            let found = policy::lookup(target.name.as_deref(), Some(&agent))
                .context("looking for the policy in /etc/sandbox")?;
            term::line(&match &found {
                Some(f) => format!("sandbox: policy {} (no --policy given)", f.display()),
                None => format!(
                    "sandbox: policy: the built-in one (no --policy given, none in {})",
                    policy::SYSTEM_DIR
                ),
            });
            found
        }
    };
    let mut policy = load_trusted_policy(policy_file.as_deref(), &ctx, &agent)?;
    for w in policy::lint::lint(&policy) {
        term::line(&format!("sandbox: warning: {w}"));
    }
    if !policy.files.write.is_empty() && target.home.starts_with(&policy.files.workspace) {
        term::line(&format!(
            "sandbox: warning: the workspace {} holds the home directory {}: the command may \
             write anywhere in it but the policy's read_only list. Start sandbox in a \
             project directory to keep its writes there",
            policy.files.workspace.display(),
            target.home.display()
        ));
    }
    let mut keep = CapSet::default_kept().union(policy.process.keep_caps);
    for c in &opts.keep_caps {
        keep = keep.union(caps::parse(c).map_err(|e| anyhow!("--keep-cap: {e}"))?);
    }
    let audit_path = opts
        .audit_log
        .clone()
        .or(policy.audit.path.clone())
        .unwrap_or_else(|| DEFAULT_AUDIT_LOG.into());
    let mut audit = AuditFile::with_rotation(
        &audit_path,
        policy.audit.max_size,
        policy.audit.keep,
        &agent,
    )?;
    protect_own_files(&mut policy, &audit, policy_file.as_deref());
    let mut t = Timer::new();
    let compiled = compile::compile(&policy, compile::random_seed())?;
    t.lap("compile");
    let host = backend::detect(&compiled)?;
    t.lap("preflight and backend");
    let landlock = fallback_rules(&policy, &host, &target, opts.allow_degraded)?;

    // The OOM killer should take the agent, not its supervisor (the command gets the
    // default back before exec). Pinned programs keep the agent confined even then.
    drop(std::fs::write("/proc/self/oom_score_adj", b"-1000"));
    // Per-program run counts and times for the debug summary below: BPF_ENABLE_STATS
    // keeps them on while the returned descriptor is open (they cost a little on every
    // BPF program of the host: debug only).
    let _stats = t.on.then(|| {
        let mut attr = [0u32; 4]; // { type: BPF_STATS_RUN_TIME }
        // SAFETY: BPF_ENABLE_STATS (32) reads `type` from the attribute.
        let fd = unsafe { libc::syscall(libc::SYS_bpf, 32, attr.as_mut_ptr(), 16usize) };
        // SAFETY: a descriptor the kernel just returned, owned here.
        (fd >= 0).then(|| unsafe {
            <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32)
        })
    });
    let name = format!("run-{}", std::process::id());
    let mut armed = arm(compiled, Bind::NewRun(&name), &host)?;
    t.lap("arm (total)");
    let privileges = Privileges {
        drop_to: target
            .drop
            .then(|| {
                let user = target.name.as_deref().map(CString::new).transpose()?;
                Ok::<_, std::ffi::NulError>((target.uid, target.gid, user))
            })
            .transpose()?,
        keep,
        last_cap: caps::last_cap(),
        no_new_privs: policy.process.no_new_privs,
        // SAFETY: plain syscall.
        parent: unsafe { libc::getpid() },
    };
    let sinks = Sinks::start(opts.quiet, opts.metrics, &armed.compiled.name).await?;
    let result = supervise(
        &mut armed,
        &mut audit,
        &target,
        (
            privileges,
            landlock.as_ref().map(crate::landlock::Ruleset::raw_fd),
        ),
        prog,
        args,
        &sinks,
    )
    .await;
    t.lap("supervise");
    if t.on {
        for (name, runs, time) in armed.enforcer.program_stats() {
            term::line(&format!(
                "sandbox: debug: {name}: {runs} runs, {:.0} ns each",
                time.as_nanos() as f64 / runs as f64
            ));
        }
    }
    match armed.cgroup.destroy() {
        // Only with the cgroup gone may the programs go.
        Ok(()) => armed.enforcer.release_later(),
        Err(e) => term::line(&format!(
            "sandbox: warning: removing {}: {e}; its programs stay pinned until the next \
             sandbox run cleans up",
            armed.cgroup.path.display()
        )),
    }
    t.lap("teardown");
    result
}

/// What the command starts with, decided before the fork (nothing is allocated between
/// fork and exec).
struct Privileges {
    /// Become this user (uid, gid, name for its groups); `None`: stay root.
    drop_to: Option<(u32, u32, Option<CString>)>,
    /// Capabilities kept (see `caps`); all others go from every set.
    keep: CapSet,
    last_cap: u32,
    no_new_privs: bool,
    /// sandbox's pid: the command must still be its child once the parent-death signal
    /// is set.
    parent: libc::pid_t,
}

impl Privileges {
    /// Runs in the child between fork and exec: only async-signal-safe system calls on
    /// memory prepared before the fork. The order matters: the bounding set can only be
    /// cut while still root (`CAP_SETPCAP`); changing uid clears the parent-death signal,
    /// so it is set last, and then the parent is checked again (it may have died already,
    /// and nobody would then kill this process).
    ///
    /// # Safety
    /// Call only in the child of a fork, before exec.
    unsafe fn apply(&self) -> std::io::Result<()> {
        // SAFETY: plain syscalls (see above).
        unsafe {
            // A root command with a capability left is refused rather than started; for a
            // user the bounding set only matters without no_new_privs.
            let must_cut = self.drop_to.is_none() || !self.no_new_privs;
            if let Err(e) = caps::drop_bounding(self.keep, self.last_cap)
                && must_cut
            {
                return Err(e);
            }
            if let Some((uid, gid, user)) = &self.drop_to {
                let ok = match user {
                    Some(u) => libc::initgroups(u.as_ptr(), *gid) == 0,
                    None => libc::setgroups(0, std::ptr::null()) == 0,
                };
                if !ok || libc::setgid(*gid) != 0 || libc::setuid(*uid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            caps::drop_process_sets(self.keep)?;
            if self.no_new_privs && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // If sandbox dies, the command does not go on unsupervised. Set after the
            // change of user, which clears it.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != self.parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        Ok(())
    }
}

/// The command, set up to join the run's cgroup (through `procs`, open for writing) and
/// take `privileges` between fork and exec.
fn command(
    prog: &OsString,
    args: &[OsString],
    target: &Target,
    procs: &std::fs::File,
    privileges: Privileges,
    landlock: Option<i32>,
) -> tokio::process::Command {
    let procs_fd = procs.as_raw_fd();
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args);
    if target.drop {
        cmd.env("HOME", &target.home);
        if let Some(n) = &target.name {
            cmd.env("USER", n).env("LOGNAME", n);
        }
    }
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // syscalls on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // Give the command the default OOM score back (before joining the cgroup, so
            // this write of sandbox's own is not judged by the command's policy).
            let oom = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
            if oom >= 0 {
                libc::write(oom, b"0".as_ptr().cast(), 1);
                libc::close(oom);
            }
            // Join the run's cgroup: from here on every operation is checked.
            if libc::write(procs_fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            // A session of its own: the user's terminal is no longer the command's
            // controlling terminal, so it cannot queue input into the shell that runs after
            // sandbox (TIOCSTI, CVE-2017-5226) nor signal the shell's process group.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // sandbox ignores SIGTTOU (see `term`); the command gets the default.
            libc::signal(libc::SIGTTOU, libc::SIG_DFL);
            // The fallback's file and exec rules (built before the fork), while still root
            // (CAP_SYS_ADMIN: no_new_privs is not needed, and stays the policy's choice).
            if let Some(fd) = landlock {
                crate::landlock::restrict(fd)?;
            }
            privileges.apply()
        });
    }
    cmd
}

/// Whether `sig` is ignored now (inherited from whoever started sandbox, e.g. `nohup`):
/// then sandbox leaves it ignored, and so does the command.
fn ignored(sig: i32) -> bool {
    // SAFETY: querying the disposition into a zeroed sigaction.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    unsafe { libc::sigaction(sig, std::ptr::null(), &raw mut old) };
    old.sa_sigaction == libc::SIG_IGN
}

/// A signal stream unless the signal is ignored.
fn watch(sig: i32) -> anyhow::Result<Option<Signal>> {
    if ignored(sig) {
        return Ok(None);
    }
    Ok(Some(signal(SignalKind::from_raw(sig))?))
}

async fn next(s: &mut Option<Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

async fn supervise(
    armed: &mut Armed,
    audit: &mut AuditFile,
    target: &Target,
    (privileges, landlock): (Privileges, Option<i32>),
    prog: &OsString,
    args: &[OsString],
    sinks: &Sinks,
) -> anyhow::Result<i32> {
    let ring = armed.enforcer.take_events()?;
    // SAFETY: the ring buffer owns its fd for as long as the AsyncFd exists; nothing else
    // closes it.
    let mut ring = unsafe { AsyncFd::register(ring) }
        .map_err(|e| anyhow!("polling the event ring buffer: {e}"))?;
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(armed.cgroup.procs_path())
        .with_context(|| format!("opening {}", armed.cgroup.procs_path().display()))?;
    let mut cmd = command(prog, args, target, &procs, privileges, landlock);
    let mut t = Timer::new();
    let orphans = std::mem::take(&mut armed.orphans);
    let fmt = Formatter::new(&armed.compiled, armed.mounts.clone(), &armed.identities)?;
    let mut pump = Pump {
        fmt,
        audit,
        sinks: sinks.clone(),
        reported_drops: 0,
        exec_denials: 0,
        agg: Aggregates::default(),
    };
    pump.write_orphans(orphans)?;
    let spawned = cmd.spawn();
    drop(procs);
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            // The command never ran. Its own exec may have been denied: that record is in
            // the ring already (the hook wrote it before exec failed) and goes to the log.
            pump.last_drain(
                ring.get_mut(),
                &mut armed.enforcer,
                armed.reported_map.as_mut(),
            )?;
            return cannot_start(prog, &err, pump.exec_denials > 0);
        }
    };
    t.lap("spawn");
    let child_pid = child.id();
    let mut sigterm = watch(libc::SIGTERM)?;
    let mut sigint = watch(libc::SIGINT)?;
    let mut sighup = watch(libc::SIGHUP)?;
    let mut sigquit = watch(libc::SIGQUIT)?;
    let mut sigwinch = watch(libc::SIGWINCH)?;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let has_hosts = !armed.compiled.net.hosts.is_empty();
    let lookup = tokio::time::sleep_until(armed.hosts.next_lookup());
    tokio::pin!(lookup);
    let mut resolving: Option<tokio::task::JoinHandle<crate::runtime::hosts::Round>> = None;
    // Set by a request to stop: when it passes, everything in the cgroup is killed.
    let grace = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(grace);
    let mut stopping = false;
    let status = loop {
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                if pump.drain(guard.get_inner_mut(), DRAIN_BATCH)? {
                    guard.clear_ready();
                } else {
                    // Still more: let the runtime look at signals and timers first (the
                    // loop would otherwise never give it the chance under a flood).
                    drop(guard);
                    tokio::task::yield_now().await;
                }
            }
            status = child.wait() => break status?,
            // A request to stop: SIGTERM, or the terminal hung up (SIGHUP). The command
            // gets the signal; whatever still runs after the grace period is killed. A
            // second request does not wait.
            () = next(&mut sigterm) => {
                if stopping {
                    kill_all(&armed.cgroup);
                }
                forward(child_pid, libc::SIGTERM);
                stopping = true;
                grace.as_mut().reset(tokio::time::Instant::now() + STOP_GRACE);
            }
            () = next(&mut sighup) => {
                // The command leads a session of its own: the terminal's hangup reaches
                // only sandbox, which passes it on.
                forward_group(child_pid, libc::SIGHUP);
                if !stopping {
                    stopping = true;
                    grace.as_mut().reset(tokio::time::Instant::now() + STOP_GRACE);
                }
            }
            () = &mut grace, if stopping => {
                kill_all(&armed.cgroup);
                stopping = false;
            }
            // The command runs in a session of its own (no terminal signals reach it): the
            // keys of the terminal reach sandbox, which passes them on to the command's
            // group; ctrl-C and ctrl-\ are the command's to handle, sandbox waits for it.
            () = next(&mut sigint) => forward_group(child_pid, libc::SIGINT),
            () = next(&mut sigquit) => forward_group(child_pid, libc::SIGQUIT),
            () = next(&mut sigwinch) => forward_group(child_pid, libc::SIGWINCH),
            _ = tick.tick() => pump.check_drops(&mut armed.enforcer, armed.reported_map.as_mut())?,
            changed = armed.mount_watch.changed() => {
                changed?;
                let m = remount(&mut armed.enforcer, &armed.compiled)?;
                pump.fmt.mounts.clone_from(&m);
                armed.mounts = m;
            }
            changed = armed.host_addrs.changed() => {
                changed?;
                armed.host_addrs.refresh(&mut armed.enforcer, &armed.compiled)?;
            }

            () = &mut lookup, if has_hosts && resolving.is_none() => {
                resolving = Some(HostState::start_lookup(&armed.compiled));
            }
            done = async { resolving.as_mut().expect("guarded").await }, if resolving.is_some() => {
                resolving = None;
                let next = armed.hosts.take_round(done, &mut armed.enforcer, &armed.compiled)?;
                lookup.as_mut().reset(next);
            }
        }
    };
    t.lap("command ran");
    // Events still in flight from the last moments of the command.
    tokio::time::sleep(Duration::from_millis(50)).await;
    pump.last_drain(
        ring.get_mut(),
        &mut armed.enforcer,
        armed.reported_map.as_mut(),
    )?;
    Ok(exit_code(status))
}

fn forward(pid: Option<u32>, sig: i32) {
    if let Some(pid) = pid {
        // SAFETY: plain syscall.
        unsafe { libc::kill(pid as i32, sig) };
    }
}

/// The end of the grace period after a request to stop: everything left in the cgroup is
/// killed (the cgroup stays, for the usual teardown).
fn kill_all(cg: &Cgroup) {
    term::line("sandbox: the command did not stop in time: killing everything in its cgroup");
    if std::fs::write(cg.path.join("cgroup.kill"), b"1").is_err() {
        for pid in cg.pids() {
            // SAFETY: plain syscall; a pid that is gone just fails.
            unsafe { libc::kill(pid.cast_signed(), libc::SIGKILL) };
        }
    }
}

/// Sends `sig` to the command's process group, as a terminal sends its keys to the
/// foreground group (the command leads its own session and group).
fn forward_group(pid: Option<u32>, sig: i32) {
    if let Some(pid) = pid {
        // SAFETY: plain syscall.
        unsafe { libc::kill(-pid.cast_signed(), sig) };
    }
}

/// The exit status when the command could not be started, as `env` and `timeout` report
/// it: 126 when it was found but could not run (its exec denied by the policy, not
/// executable), 127 when it was not found; anything else is sandbox's own failure (125).
fn cannot_start(prog: &OsString, err: &std::io::Error, denied: bool) -> anyhow::Result<i32> {
    let name = term::escape(&prog.to_string_lossy()).into_owned();
    let code = match err.raw_os_error() {
        _ if denied => {
            term::line(&format!(
                "sandbox: {name}: its exec was denied by the policy (recorded in the audit log)"
            ));
            126
        }
        Some(libc::ENOENT) => {
            term::line(&format!("sandbox: {name}: command not found"));
            127
        }
        Some(
            libc::EACCES
            | libc::ENOEXEC
            | libc::EISDIR
            | libc::ENOTDIR
            | libc::ELOOP
            | libc::ETXTBSY
            | libc::ENAMETOOLONG,
        ) => {
            term::line(&format!("sandbox: {name}: cannot execute: {err}"));
            126
        }
        _ => return Err(anyhow!("starting {name}: {err}")),
    };
    Ok(code)
}

/// The exit status a shell would report: the code, or 128 + signal.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Where records go besides the audit log: a line on the terminal (unless quiet), and the
/// metrics when they are served.
#[derive(Clone, Default)]
pub struct Sinks {
    pub quiet: bool,
    pub metrics: Option<Arc<Metrics>>,
}

impl Sinks {
    /// Starts serving metrics on `addr` (if any) for the policy `name`.
    pub async fn start(
        quiet: bool,
        addr: Option<std::net::SocketAddr>,
        name: &str,
    ) -> anyhow::Result<Self> {
        let metrics = match addr {
            Some(addr) => {
                let m = Arc::new(Metrics::default());
                m.policy(name);
                crate::runtime::metrics::serve(addr, m.clone()).await?;
                Some(m)
            }
            None => None,
        };
        Ok(Self { quiet, metrics })
    }

    pub fn metrics(&self, f: impl FnOnce(&Metrics)) {
        if let Some(m) = &self.metrics {
            f(m);
        }
    }
}

/// Moves records from the ring buffer to the audit sinks.
pub struct Pump<'a> {
    pub fmt: Formatter<'a>,
    pub audit: &'a mut AuditFile,
    pub sinks: Sinks,
    pub reported_drops: u64,
    /// Denied execs seen (`sandbox run`: was the command's own exec denied?).
    pub exec_denials: u64,
    /// Counts of identical denials, matched to their records.
    pub agg: Aggregates,
}

/// Records written after the command ended (bounded: processes it left may still be
/// producing them until the cgroup is killed).
pub const FINAL_DRAIN: usize = 1 << 20;

/// Records handled per wake-up before the event loop looks at signals and timers again: a
/// process flooding denials must not starve the rest of sandbox.
pub const DRAIN_BATCH: usize = 4096;

impl Pump<'_> {
    /// One record to the log, counted in the metrics.
    fn write(&mut self, rec: &Record) -> std::io::Result<()> {
        self.sinks.metrics(|m| m.record(rec));
        self.audit.write(rec)
    }

    /// Hands what is buffered to the log file; the metrics learn what it could not write.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.audit.flush()?;
        let lost = self.audit.lost_total();
        self.sinks.metrics(|m| m.set_write_lost(lost));
        Ok(())
    }

    /// Writes up to `max` records; `true` when the ring buffer is empty.
    pub fn drain(&mut self, ring: &mut RingBuf<MapData>, max: usize) -> anyhow::Result<bool> {
        for _ in 0..max {
            let Some(item) = ring.next() else {
                self.flush()?;
                return Ok(true);
            };
            match Event::decode(&item) {
                Ok(e) if e.header.flags & sandbox_common::EVENT_F_REPEATS != 0 => {
                    if let Some(r) = self.agg.on_event(&e) {
                        self.write_repeat(r, None)?;
                    }
                }
                Ok(e) => {
                    self.agg.on_event(&e);
                    if e.hook == crate::audit::Hook::Exec
                        && e.header.decision == sandbox_common::decision::DENY
                    {
                        self.exec_denials += 1;
                    }
                    let rec = self.fmt.record(&e);
                    self.write(&rec)?;
                    if !self.sinks.quiet {
                        term::line(&self.fmt.line(&e));
                    }
                }
                Err(err) => {
                    self.write(&Record::error(
                        format!("undecodable kernel record: {err}"),
                        None,
                    ))?;
                    term::line(&format!(
                        "sandbox: warning: undecodable kernel record: {err}"
                    ));
                }
            }
        }
        self.flush()?;
        Ok(false)
    }

    /// One record for denials the kernel counted: the record they repeat, with the count.
    fn write_repeat(&mut self, r: Repeat, orphaned: Option<&str>) -> std::io::Result<()> {
        match r {
            Repeat::Of {
                key,
                count,
                last_ns,
            } => {
                let mut rec = match orphaned {
                    Some(run) => self.fmt.orphan_record(&key, run),
                    None => self.fmt.record(&key),
                };
                let last = crate::audit::wall_ms(last_ns);
                rec.start_time = Some(rec.time);
                rec.end_time = Some(last);
                rec.time = last;
                rec.time_dt = crate::audit::rfc3339_ms(last);
                rec.count = Some(count);
                rec.message = format!("{} ({count} more times)", rec.message);
                self.write(&rec)?;
                if !self.sinks.quiet {
                    term::line(&format!("{} ({count} more times)", self.fmt.line(&key)));
                }
                Ok(())
            }
            Repeat::Unknown { count } => {
                self.sinks.metrics(|m| m.ring_lost(count));
                self.audit.write(&Record::loss(
                    count,
                    "identical denials counted in the kernel whose first record was not read",
                    orphaned,
                ))
            }
        }
    }

    /// Writes the counts the CPUs' slots hold for floods that stopped (`end`: all of them;
    /// after the last drain).
    pub fn sweep(&mut self, enforcer: &mut Enforcer, end: bool) -> anyhow::Result<()> {
        let slots = enforcer.agg_slots()?;
        let now = (!end).then(crate::audit::boot_ns_now);
        for r in self.agg.sweep(&slots, now) {
            self.write_repeat(r, None)?;
        }
        Ok(())
    }

    /// The drain once the programs have nothing more to judge: what is in the ring (up to
    /// [`FINAL_DRAIN`]), every count still in the slots, the drops.
    pub fn last_drain(
        &mut self,
        ring: &mut RingBuf<MapData>,
        enforcer: &mut Enforcer,
        reported: Option<&mut Array<MapData, u64>>,
    ) -> anyhow::Result<()> {
        self.drain(ring, FINAL_DRAIN)?;
        self.sweep(enforcer, true)?;
        self.check_drops(enforcer, reported)?;
        self.flush()?;
        Ok(())
    }

    /// Writes drops the kernel counted since the last call as one `audit_loss` record, and
    /// the new total where a later clean-up finds it (`reported`) if this sandbox dies.
    pub fn check_drops(
        &mut self,
        enforcer: &mut Enforcer,
        reported: Option<&mut Array<MapData, u64>>,
    ) -> anyhow::Result<()> {
        self.sweep(enforcer, false)?;
        let total = enforcer.drops()?;
        if total > self.reported_drops {
            let n = total - self.reported_drops;
            self.audit
                .write(&Record::loss(n, "ring buffer full", None))?;
            self.flush()?;
            term::line(&format!(
                "sandbox: warning: {n} audit records lost (ring buffer full); counted in the audit log"
            ));
            self.reported_drops = total;
            if let Some(r) = reported {
                drop(r.set(0, total, 0));
            }
        }
        Ok(())
    }

    /// Writes what runs whose sandbox died left in their ring buffers (see `pins`).
    pub fn write_orphans(
        &mut self,
        orphans: Vec<crate::kernel::pins::Orphans>,
    ) -> anyhow::Result<()> {
        for o in orphans {
            let mut n = 0u64;
            let mut agg = Aggregates::default();
            for bytes in &o.records {
                match Event::decode(bytes) {
                    Ok(e) if e.header.flags & sandbox_common::EVENT_F_REPEATS != 0 => {
                        if let Some(r) = agg.on_event(&e) {
                            self.write_repeat(r, Some(&o.run))?;
                        }
                    }
                    Ok(e) => {
                        agg.on_event(&e);
                        self.write(&self.fmt.orphan_record(&e, &o.run))?;
                    }
                    Err(err) => self.write(&Record::error(
                        format!("undecodable kernel record: {err}"),
                        Some(&o.run),
                    ))?,
                }
                n += 1;
            }
            // Counts the dead run's slots still hold (some may have been written by the
            // dead run itself already: counted again rather than lost).
            for r in agg.sweep(&o.pending, None) {
                self.write_repeat(r, Some(&o.run))?;
            }
            if o.lost > 0 {
                self.write(&Record::loss(
                    o.lost,
                    "ring buffer full after the run's sandbox died",
                    Some(&o.run),
                ))?;
            }
            if let Some(err) = &o.error {
                self.write(&Record::error(
                    format!("records left by a sandbox that died could not be read: {err}"),
                    Some(&o.run),
                ))?;
                term::line(&format!(
                    "sandbox: warning: records left by a sandbox that died ({}) could not be \
                     read: {err}",
                    o.run
                ));
            }
            if n > 0 || o.lost > 0 {
                term::line(&format!(
                    "sandbox: {n} record(s) left by a sandbox that died ({}) written to the \
                     audit log{}",
                    o.run,
                    if o.lost > 0 {
                        format!(", {} more lost (ring buffer full)", o.lost)
                    } else {
                        String::new()
                    }
                ));
            }
        }
        self.flush()?;
        Ok(())
    }
}

/// Phase timings on stderr when `SANDBOX_DEBUG` is set.
struct Timer {
    on: bool,
    last: std::time::Instant,
}

impl Timer {
    fn new() -> Self {
        Self {
            on: std::env::var_os("SANDBOX_DEBUG").is_some(),
            last: std::time::Instant::now(),
        }
    }

    fn lap(&mut self, what: &str) {
        if self.on {
            term::line(&format!(
                "sandbox: debug: {what}: {:.0?}",
                self.last.elapsed()
            ));
        }
        self.last = std::time::Instant::now();
    }
}
