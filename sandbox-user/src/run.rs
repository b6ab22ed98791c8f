//! `sandbox run`: confine one command and everything it starts.
//!
//! Sequence (the command never runs unconfined): validate and compile the policy, run the
//! preflight checks, load and attach the programs, fill the maps, create the run's cgroup
//! and bind it, and only then fork: the child joins the cgroup in `pre_exec`, before
//! `execve` of the command, so even that exec is checked. Events are streamed until the
//! command exits; then every process left in the cgroup is killed and the cgroup removed.

use std::ffi::{CString, OsString};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::{SignalKind, signal};

use crate::audit::{AuditFile, Event, Formatter};
use crate::cgroup::{self, Cgroup};
use crate::compile::{self, CompiledPolicy};
use crate::hosts::HostState;
use crate::loader::{self, Enforcer};
use crate::mounts::{self, Superblock};
use crate::policy::{self, Context, Policy};
use crate::preflight;

/// Where the audit log goes when neither `--audit-log` nor `audit.path` says.
pub const DEFAULT_AUDIT_LOG: &str = "/var/log/sandbox/audit.jsonl";

pub struct RunOptions {
    pub policy: Option<PathBuf>,
    pub audit_log: Option<PathBuf>,
    pub quiet: bool,
    pub as_root: bool,
    pub command: Vec<OsString>,
}

/// Who the command runs as: the user who called `sudo sandbox run`, unless `--as-root`.
#[derive(Debug, Clone)]
pub struct Target {
    pub uid: u32,
    pub gid: u32,
    pub name: Option<String>,
    pub home: PathBuf,
    pub drop: bool,
}

impl Target {
    pub fn detect(as_root: bool) -> anyhow::Result<Self> {
        // SAFETY: plain syscalls.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        let sudo = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
        if euid == 0
            && !as_root
            && let (Some(uid), Some(gid)) = (sudo("SUDO_UID"), sudo("SUDO_GID"))
            && uid != 0
        {
            let (name, home) =
                passwd(uid).ok_or_else(|| anyhow!("SUDO_UID {uid} has no passwd entry"))?;
            return Ok(Self {
                uid,
                gid,
                name: Some(name),
                home,
                drop: true,
            });
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .or_else(|| passwd(euid).map(|p| p.1))
            .unwrap_or_else(|| "/".into());
        Ok(Self {
            uid: euid,
            gid: egid,
            name: passwd(euid).map(|p| p.0),
            home,
            drop: false,
        })
    }
}

fn passwd(uid: u32) -> Option<(String, PathBuf)> {
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: zeroed passwd is a valid out-parameter; getpwuid_r writes strings into `buf`,
    // which outlives the reads below.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &raw mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &raw mut out,
        )
    };
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
    pub cgroup: Cgroup,
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
        eprintln!(
            "sandbox: debug: mount table changed: {} file systems",
            m.len()
        );
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

/// Preflight, load, apply, create (or open) and bind the cgroup.
pub fn arm(compiled: CompiledPolicy, bind: Bind<'_>) -> anyhow::Result<Armed> {
    let mut t = Timer::new();
    let failed: Vec<String> = preflight::static_checks()
        .into_iter()
        .filter(|c| !c.ok)
        .map(|c| format!("  {}: {}", c.name, c.detail))
        .collect();
    if !failed.is_empty() {
        bail!(
            "cannot enforce the policy on this host; nothing was started:\n{}",
            failed.join("\n")
        );
    }
    t.lap("preflight");
    let kernel = loader::kernel_fit()?;
    t.lap("kernel BTF (offsets, hook forms, for loading)");
    let ids = loader::identities(&compiled, 0);
    t.lap("identities");
    let root = cgroup::root()?;
    for line in crate::pins::sweep(&root) {
        eprintln!("sandbox: {line}");
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
    let pin_dir = crate::pins::own_dir(existing.as_ref().map(|c| c.id))
        .inspect_err(|w| eprintln!("sandbox: warning: {w}"))
        .ok();
    let enforcer = Enforcer::load(&compiled, &kernel, ids.entries.len(), pin_dir.as_deref())
        .map_err(|e| anyhow!(preflight::explain_load_failure(&e)));
    if enforcer.is_err()
        && let Some(d) = &pin_dir
    {
        drop(crate::pins::remove_dir(d));
    }
    let mut enforcer = enforcer?;
    t.lap("load and attach");
    match arm_loaded(
        &mut enforcer,
        &compiled,
        &ids,
        &root,
        bind,
        existing,
        &mut t,
    ) {
        Ok((mounts, mount_watch, hosts, cgroup)) => Ok(Armed {
            enforcer,
            compiled,
            mounts,
            mount_watch,
            identities: ids,
            hosts,
            cgroup,
            reported_drops: 0,
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
    root: &Path,
    bind: Bind<'_>,
    existing: Option<Cgroup>,
    t: &mut Timer,
) -> anyhow::Result<(Vec<Superblock>, mounts::MountWatch, HostState, Cgroup)> {
    let mount_watch = mounts::MountWatch::new().context("watching /proc/self/mountinfo")?;
    let mounts = mounts::read().context("reading /proc/self/mountinfo")?;
    enforcer.apply(compiled, &mounts, ids)?;
    let mut hosts = HostState::default();
    if !compiled.net.hosts.is_empty() {
        let round = crate::hosts::resolve(compiled);
        for w in &round.warnings {
            eprintln!("sandbox: warning: {w}");
        }
        hosts.install(&round, enforcer, compiled)?;
    }
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
    t.lap("cgroup bound");
    Ok((mounts, mount_watch, hosts, cgroup))
}

pub async fn run(opts: RunOptions) -> anyhow::Result<i32> {
    let Some((prog, args)) = opts.command.split_first() else {
        bail!("no command given: sandbox run [--policy FILE] -- COMMAND [ARGS...]");
    };
    let target = Target::detect(opts.as_root)?;
    let ctx = Context::from_process(target.home.clone())?;
    let policy = load_policy(opts.policy.as_deref(), &ctx)?;
    for w in policy::lint::lint(&policy) {
        eprintln!("sandbox: warning: {w}");
    }
    let mut t = Timer::new();
    let compiled = compile::compile(&policy, compile::random_seed())?;
    t.lap("compile");
    let audit_path = opts
        .audit_log
        .clone()
        .or(policy.audit.path.clone())
        .unwrap_or_else(|| DEFAULT_AUDIT_LOG.into());
    let mut audit = AuditFile::with_rotation(&audit_path, policy.audit.max_size, policy.audit.keep)
        .with_context(|| format!("opening audit log {}", audit_path.display()))?;

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
    let mut armed = arm(compiled, Bind::NewRun(&name))?;
    t.lap("arm (total)");
    let result = supervise(&mut armed, &mut audit, &target, prog, args, opts.quiet).await;
    t.lap("supervise");
    if t.on {
        for (name, runs, time) in armed.enforcer.program_stats() {
            eprintln!(
                "sandbox: debug: {name}: {runs} runs, {:.0} ns each",
                time.as_nanos() as f64 / runs as f64
            );
        }
    }
    match armed.cgroup.destroy() {
        // Only with the cgroup gone may the programs go.
        Ok(()) => armed.enforcer.release(),
        Err(e) => eprintln!(
            "sandbox: warning: removing {}: {e}; its programs stay pinned until the next \
             sandbox run cleans up",
            armed.cgroup.path.display()
        ),
    }
    t.lap("teardown");
    result
}

async fn supervise(
    armed: &mut Armed,
    audit: &mut AuditFile,
    target: &Target,
    prog: &OsString,
    args: &[OsString],
    quiet: bool,
) -> anyhow::Result<i32> {
    let ring = armed.enforcer.take_events()?;
    // SAFETY: the ring buffer owns its fd for as long as the AsyncFd exists; nothing else
    // closes it.
    let mut ring = unsafe { AsyncFd::register(ring) }
        .map_err(|e| anyhow!("polling the event ring buffer: {}", e))?;
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(armed.cgroup.procs_path())
        .with_context(|| format!("opening {}", armed.cgroup.procs_path().display()))?;
    let procs_fd = procs.as_raw_fd();
    let mut cmd = tokio::process::Command::new(prog);
    cmd.args(args);
    if target.drop {
        cmd.env("HOME", &target.home);
        if let Some(n) = &target.name {
            cmd.env("USER", n).env("LOGNAME", n);
        }
    }
    let (uid, gid, drop_privs) = (target.uid, target.gid, target.drop);
    let user = target.name.as_deref().map(CString::new).transpose()?;
    // SAFETY: the closure runs between fork and exec and only makes async-signal-safe
    // syscalls on memory prepared before the fork.
    unsafe {
        cmd.pre_exec(move || {
            // Join the run's cgroup first: from here on every operation is checked.
            if libc::write(procs_fd, b"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            // A session of its own: the user's terminal is no longer the command's
            // controlling terminal, so it cannot queue input into the shell that runs after
            // sandbox (TIOCSTI, CVE-2017-5226) nor signal the shell's process group.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // If sandbox dies, the command does not go on unsupervised.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let oom = libc::open(c"/proc/self/oom_score_adj".as_ptr(), libc::O_WRONLY);
            if oom >= 0 {
                libc::write(oom, b"0".as_ptr().cast(), 1);
                libc::close(oom);
            }
            if drop_privs {
                let ok = match &user {
                    Some(u) => libc::initgroups(u.as_ptr(), gid) == 0,
                    None => libc::setgroups(0, std::ptr::null()) == 0,
                };
                if !ok || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut t = Timer::new();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", prog.to_string_lossy()))?;
    t.lap("spawn");
    drop(procs);
    let child_pid = child.id();

    let fmt = Formatter {
        policy: &armed.compiled,
        mounts: armed.mounts.clone(),
        identities: &armed.identities,
        cgroups: cgroup::Names::new(cgroup::root()?),
    };
    let mut pump = Pump {
        fmt,
        audit,
        quiet,
        reported_drops: 0,
    };
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigquit = signal(SignalKind::quit())?;
    let mut sigwinch = signal(SignalKind::window_change())?;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let has_hosts = !armed.compiled.net.hosts.is_empty();
    let lookup = tokio::time::sleep_until(armed.hosts.next_lookup());
    tokio::pin!(lookup);
    let mut resolving: Option<tokio::task::JoinHandle<crate::hosts::Round>> = None;
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
            _ = sigterm.recv() => forward(child_pid, libc::SIGTERM),
            // The command runs in a session of its own (no terminal signals reach it): the
            // keys of the terminal reach sandbox, which passes them on.
            _ = sigint.recv() => forward_group(child_pid, libc::SIGINT),
            _ = sigquit.recv() => forward_group(child_pid, libc::SIGQUIT),
            _ = sigwinch.recv() => forward_group(child_pid, libc::SIGWINCH),
            _ = tick.tick() => pump.check_drops(&mut armed.enforcer)?,
            changed = armed.mount_watch.changed() => {
                changed?;
                let m = remount(&mut armed.enforcer, &armed.compiled)?;
                pump.fmt.mounts.clone_from(&m);
                armed.mounts = m;
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
    pump.drain(ring.get_mut(), FINAL_DRAIN)?;
    pump.check_drops(&mut armed.enforcer)?;
    pump.audit.flush()?;
    Ok(exit_code(status))
}

fn forward(pid: Option<u32>, sig: i32) {
    if let Some(pid) = pid {
        // SAFETY: plain syscall.
        unsafe { libc::kill(pid as i32, sig) };
    }
}

/// Sends `sig` to the command's process group, as a terminal sends its keys to the
/// foreground group (the command leads its own session and group).
fn forward_group(pid: Option<u32>, sig: i32) {
    if let Some(pid) = pid {
        // SAFETY: plain syscall.
        unsafe { libc::kill(-(pid as i32), sig) };
    }
}

/// The exit status a shell would report: the code, or 128 + signal.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Moves records from the ring buffer to the audit sinks.
pub struct Pump<'a> {
    pub fmt: Formatter<'a>,
    pub audit: &'a mut AuditFile,
    pub quiet: bool,
    pub reported_drops: u64,
}

/// Records written after the command ended (bounded: processes it left may still be
/// producing them until the cgroup is killed).
pub const FINAL_DRAIN: usize = 1 << 20;

/// Records handled per wake-up before the event loop looks at signals and timers again: a
/// process flooding denials must not starve the rest of sandbox.
pub const DRAIN_BATCH: usize = 4096;

impl Pump<'_> {
    /// Writes up to `max` records; `true` when the ring buffer is empty.
    pub fn drain(&mut self, ring: &mut RingBuf<MapData>, max: usize) -> anyhow::Result<bool> {
        for _ in 0..max {
            let Some(item) = ring.next() else {
                self.audit.flush()?;
                return Ok(true);
            };
            match Event::decode(&item) {
                Ok(e) => {
                    self.audit.write(&self.fmt.json(&e))?;
                    if !self.quiet {
                        eprintln!("{}", self.fmt.line(&e));
                    }
                }
                Err(err) => {
                    self.audit.write(&crate::audit::undecodable_record(
                        &self.fmt.policy.name,
                        &err,
                    ))?;
                    eprintln!("sandbox: warning: undecodable kernel record: {err}");
                }
            }
        }
        self.audit.flush()?;
        Ok(false)
    }

    pub fn check_drops(&mut self, enforcer: &mut Enforcer) -> anyhow::Result<()> {
        let total = enforcer.drops()?;
        if total > self.reported_drops {
            let n = total - self.reported_drops;
            self.audit
                .write(&crate::audit::drop_record(&self.fmt.policy.name, n))?;
            eprintln!(
                "sandbox: warning: {n} audit records lost (ring buffer full); counted in the audit log"
            );
            self.reported_drops = total;
        }
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
            eprintln!("sandbox: debug: {what}: {:.0?}", self.last.elapsed());
        }
        self.last = std::time::Instant::now();
    }
}
