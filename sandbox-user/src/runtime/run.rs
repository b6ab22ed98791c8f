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
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use nix::sys::signal::{SigHandler, Signal as NixSignal};
use nix::unistd::Pid;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;

use crate::audit::AuditFile;
use crate::backend;
use crate::compile;
use crate::host::caps::{self, CapSet};
use crate::host::cgroup::Cgroup;
use crate::host::user::Target;
use crate::policy::{self, Context, PathRule};
use crate::runtime::arm::{
    Armed, Bind, Timer, arm, fallback_rules, load_trusted_policy, protect_own_files,
};
use crate::runtime::pty::{ChildTerminal, Pty, TerminalMode};
use crate::runtime::session::{self, Event, Session, Sinks};
use crate::term;

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
    /// `--pass-fd`: inherited descriptors (3 or more) the command keeps, checked by
    /// [`inherited_fds`]; it gets no other but 0, 1 and 2.
    pub pass_fds: Vec<u32>,
    /// `--terminal`: a pty of sandbox's own between the command and the terminal, or the
    /// terminal itself.
    pub terminal: TerminalMode,
    /// `--allow-degraded`: run in the fallback backend even with rules it cannot enforce.
    pub allow_degraded: bool,
    pub command: Vec<OsString>,
}

/// `--pass-fd`'s descriptors, ascending, once each, if every one is open. Called before
/// sandbox opens anything of its own (the async runtime included): a number it opened
/// could not be told from an inherited one.
pub fn inherited_fds(fds: &[u32]) -> anyhow::Result<Vec<u32>> {
    let mut fds = fds.to_vec();
    fds.sort_unstable();
    fds.dedup();
    if let Some(fd) = fds.iter().find(|&&fd| !crate::sys::fd_is_open(fd)) {
        bail!("--pass-fd {fd}: sandbox was started without a descriptor {fd} open");
    }
    Ok(fds)
}

pub async fn run(opts: RunOptions) -> anyhow::Result<i32> {
    let pass_fds = opts.pass_fds.clone();
    crate::host::systemd::enter_delegated_scope()?;
    term::start();
    if crate::host::systemd::stderr_is_journal() {
        term::journal_levels();
    }
    let Some((prog, args)) = opts.command.split_first() else {
        bail!("no command given: sandbox run [--policy FILE] -- COMMAND [ARGS...]");
    };
    let target = Target::for_run(opts.as_root, opts.user.as_deref())?;
    let agent = target.agent();
    let ctx = Context::from_process(target.home.clone(), target.uid == 0)?;
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
        tracing::warn!("{w}");
    }
    if !policy.files.write.is_empty() && target.home.starts_with(&policy.files.workspace) {
        tracing::warn!(
            "the workspace {} holds the home directory {}: the command may \
             write anywhere in it but the policy's read_only list. Start sandbox in a \
             project directory to keep its writes there",
            policy.files.workspace.display(),
            target.home.display()
        );
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
    // The command's terminal, made before the policy compiles: the user's terminal device
    // is denied to the command by path (it gets the pty instead).
    let mut pty = match opts.terminal {
        TerminalMode::Pty => {
            Pty::open(target.drop.then_some((target.uid, target.gid))).map_err(|e| {
                anyhow!(
                    "making a pty for the command: {e}; `--terminal direct` gives it the \
                     terminal itself (its escape sequences then reach the terminal unfiltered)"
                )
            })?
        }
        TerminalMode::Direct => None,
    };
    let devices = pty.as_ref().map(|p| p.devices.clone()).unwrap_or_default();
    tracing::debug!("terminals denied to the command: {devices:?}");
    for dev in devices {
        let text = dev.display().to_string();
        policy.files.deny.push(PathRule {
            field: crate::runtime::pty::TERMINAL_RULE.into(),
            source: text.clone(),
            glob: crate::policy::expand::escape_glob(&text),
            literal: Some(dev),
            written: None,
        });
    }
    let mut t = Timer::new();
    let compiled = compile::compile(&policy, compile::random_seed())?;
    t.lap("compile");
    let host = backend::detect()?;
    t.lap("preflight and backend");
    let landlock = fallback_rules(&policy, &host, &target, opts.allow_degraded)?;

    // The OOM killer should take the agent, not its supervisor (the command gets the
    // default back before exec). Pinned programs keep the agent confined even then.
    drop(std::fs::write("/proc/self/oom_score_adj", b"-1000"));
    // Per-program run counts and times for the debug summary below: BPF_ENABLE_STATS
    // keeps them on while the returned descriptor is open (they cost a little on every
    // BPF program of the host: debug only).
    let _stats =
        t.on.then(|| aya::sys::enable_stats(aya::sys::Stats::RunTime).ok());
    let name = format!("run-{}", std::process::id());
    let mut armed = arm(compiled, Bind::NewRun(&name), &host)?;
    t.lap("arm (total)");
    // The command may open its own terminal by path (`tty`, `GPG_TTY`): the pty, or with
    // `--terminal direct` the terminal it is given as 0, 1, 2; every other one is refused
    // to it. Only with BPF LSM on: inode storage lives in its part of the inode's security
    // blob (the fallback lists other terminals as not enforced).
    if !host.backend.is_fallback() {
        // sandbox's pty is the command's, sessions and all; the user's terminal
        // (`--terminal direct`) is the command's to use, its sessions are the user's.
        let mark = if pty.is_some() {
            sandbox_common::own_mark::PTY
        } else {
            sandbox_common::own_mark::WHOLE
        };
        let own: Vec<std::os::fd::BorrowedFd<'_>> = match pty.as_ref() {
            Some(p) => p.slave().into_iter().collect(),
            None => [0, 1, 2]
                .into_iter()
                // SAFETY: 0, 1 and 2 stay open for the whole run.
                .map(|fd| unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) })
                .filter(|fd| nix::unistd::isatty(fd).unwrap_or(false))
                .collect(),
        };
        for fd in own {
            armed
                .enforcer
                .maps()
                .own_file(&fd, mark)
                .context("marking the command's terminal as its own")?;
        }
    }
    let privileges = Privileges {
        drop_to: target
            .drop
            .then(|| {
                // The user's groups, looked up now: the lookup goes through NSS (files,
                // sssd, LDAP), which has no place between fork and exec.
                let groups = match target.name.as_deref() {
                    Some(name) => nix::unistd::getgrouplist(
                        &CString::new(name)?,
                        nix::unistd::Gid::from_raw(target.gid),
                    )
                    .with_context(|| format!("looking up the groups of {name}"))?,
                    None => Vec::new(),
                };
                Ok::<_, anyhow::Error>((target.uid, target.gid, groups))
            })
            .transpose()?,
        keep,
        last_cap: caps::last_cap(),
        no_new_privs: policy.process.no_new_privs,
        // SAFETY: plain syscall.
        parent: nix::unistd::getpid(),
        pass_fds,
    };
    let sinks = Sinks::start(opts.quiet, opts.metrics, &armed.compiled.name).await?;
    let result = supervise(
        &mut armed,
        &mut audit,
        &target,
        (
            privileges,
            landlock.as_ref().map(crate::landlock::Ruleset::raw_fd),
            pty.as_mut(),
        ),
        prog,
        args,
        &sinks,
    )
    .await;
    t.lap("supervise");
    report_limits(&armed.cgroup, &mut audit);
    if t.on {
        for (name, runs, time) in armed.enforcer.program_stats() {
            tracing::debug!(
                "{name}: {runs} runs, {:.0} ns each",
                time.as_nanos() as f64 / runs as f64
            );
        }
    }
    match armed.cgroup.destroy() {
        // Only with the cgroup gone may the programs go.
        Ok(()) => armed.enforcer.release_later(),
        Err(e) => tracing::warn!(
            "removing {}: {e}; its programs stay pinned until the next \
             sandbox run cleans up",
            armed.cgroup.path.display()
        ),
    }
    t.lap("teardown");
    result
}

/// Says when the command met its limits (`limits`), on the terminal and in the audit log:
/// processes the OOM killer took at the memory limit, forks refused at the task limit. Time
/// held at the CPU limit is said on the terminal only: it refused nothing.
fn report_limits(cgroup: &Cgroup, audit: &mut AuditFile) {
    let (killed, refused) = cgroup.limit_events();
    let set = |file: &str| {
        std::fs::read_to_string(cgroup.path.join(file))
            .map(|t| t.trim().to_owned())
            .unwrap_or_default()
    };
    if killed > 0 {
        let max = set("memory.max");
        let shown = max
            .parse::<u64>()
            .map_or_else(|_| max.clone(), crate::policy::limits::human_bytes);
        let what = format!("the kernel killed {killed} of its processes");
        term::line(&format!(
            "sandbox: the command reached its memory limit ({shown}, limits.memory): {what}"
        ));
        write_limit(audit, "limits.memory", max, what);
    }
    if refused > 0 {
        let max = set("pids.max");
        let what = format!("{refused} forks failed");
        term::line(&format!(
            "sandbox: the command reached its task limit ({max}, limits.pids): {what}"
        ));
        write_limit(audit, "limits.pids", max, what);
    }
    let cpu_max = set("cpu.max");
    let quota = crate::host::cgroup::CPU_MAX.parse(&cpu_max);
    let period_ms = cpu_max
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse::<u64>().ok())
        .map_or(100, |us| us / 1000);
    if let (Some(quota), Some(periods @ 1..)) = (quota, cgroup.cpu_throttled()) {
        term::line(&format!(
            "sandbox: the command waited at its CPU limit ({}, limits.cpu) in {periods} \
             periods of {period_ms} ms",
            crate::policy::limits::human_cpus(quota)
        ));
    }
}

fn write_limit(audit: &mut AuditFile, rule: &str, max: String, what: String) {
    let r = crate::audit::Record::limit_reached(rule, max, what);
    if let Err(e) = audit.write(&r).and_then(|()| audit.flush()) {
        tracing::warn!("writing the {rule} record to the audit log: {e}");
    }
}

/// What the command starts with, decided before the fork (nothing is allocated between
/// fork and exec).
struct Privileges {
    /// Become this user (uid, gid, its groups); `None`: stay root.
    drop_to: Option<(u32, u32, Vec<nix::unistd::Gid>)>,
    /// Capabilities kept (see `caps`); all others go from every set.
    keep: CapSet,
    last_cap: u32,
    no_new_privs: bool,
    /// sandbox's pid: the command must still be its child once the parent-death signal
    /// is set.
    parent: Pid,
    /// Inherited descriptors the command keeps (`--pass-fd`, ascending): every other one
    /// from 3 up is closed at its exec. A descriptor opened outside the sandbox is used
    /// without the policy's checks (reads and writes of an open file, sends on a
    /// connected socket go through no hook sandbox decides on), as runc's leaked
    /// descriptors let containers reach the host (CVE-2024-21626).
    pass_fds: Vec<u32>,
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
        use nix::unistd::{Gid, Uid, getppid, setgid, setgroups, setuid};
        // A root command with a capability left is refused rather than started; for a
        // user the bounding set only matters without no_new_privs.
        let must_cut = self.drop_to.is_none() || !self.no_new_privs;
        // SAFETY: in the child before exec (the caller's promise).
        if let Err(e) = unsafe { caps::drop_bounding(self.keep, self.last_cap) }
            && must_cut
        {
            return Err(e);
        }
        if let Some((uid, gid, groups)) = &self.drop_to {
            setgroups(groups)?;
            setgid(Gid::from_raw(*gid))?;
            setuid(Uid::from_raw(*uid))?;
        }
        // SAFETY: as above.
        unsafe { caps::drop_process_sets(self.keep)? };
        if self.no_new_privs {
            nix::sys::prctl::set_no_new_privs()?;
        }
        // If sandbox dies, the command does not go on unsupervised. Set after the change
        // of user, which clears it.
        nix::sys::prctl::set_pdeathsig(NixSignal::SIGKILL)?;
        if getppid() != self.parent {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    }
}

/// No real-time scheduling for the command, which `cpu.max` does not hold (a `SCHED_FIFO`
/// loop would keep a CPU from the host and sandbox whatever `limits.cpu` says), nor a
/// real-time I/O class or a nice below 0 from the invoker: an inherited FIFO/RR policy
/// becomes normal (`SCHED_BATCH` and `SCHED_IDLE` are kept: they ask for less), the I/O
/// class best-effort, a negative nice 0; `RLIMIT_RTPRIO` (an `@audio` user's 95) and
/// `RLIMIT_NICE` are 0, hard too, so only `CAP_SYS_NICE` (dropped unless kept) could
/// choose them again, and raising a hard limit needs `CAP_SYS_RESOURCE`. Limits already 0
/// are left alone (a security module may check every change of one).
///
/// # Safety
/// Call only in the child of a fork, before exec, while root.
unsafe fn leave_real_time() -> std::io::Result<()> {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_RT: libc::c_long = 1;
    const IOPRIO_CLASS_SHIFT: libc::c_long = 13;
    const BEST_EFFORT_4: libc::c_long = (2 << IOPRIO_CLASS_SHIFT) | 4;
    let fail = || Err(std::io::Error::last_os_error());
    let normal = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain system calls on values on the stack (the caller's promise).
    unsafe {
        let policy = libc::sched_getscheduler(0) & !libc::SCHED_RESET_ON_FORK;
        if matches!(policy, libc::SCHED_FIFO | libc::SCHED_RR)
            && libc::sched_setscheduler(0, libc::SCHED_OTHER, &raw const normal) != 0
        {
            return fail();
        }
        let class = libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, 0);
        if class >= 0
            && class >> IOPRIO_CLASS_SHIFT == IOPRIO_CLASS_RT
            && libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, BEST_EFFORT_4) != 0
        {
            return fail();
        }
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice < 0
            && *libc::__errno_location() == 0
            && libc::setpriority(libc::PRIO_PROCESS, 0, 0) != 0
        {
            return fail();
        }
        for r in [libc::RLIMIT_RTPRIO, libc::RLIMIT_NICE] {
            let mut now = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(r, &raw mut now) != 0 {
                return fail();
            }
            if now.rlim_cur == 0 && now.rlim_max == 0 {
                continue;
            }
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::setrlimit(r, &raw const none) != 0 {
                return fail();
            }
        }
    }
    Ok(())
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
    terminal: Option<ChildTerminal>,
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
            use nix::fcntl::{OFlag, open};
            if let Ok(oom) = open(
                c"/proc/self/oom_score_adj",
                OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            ) {
                let _ = nix::unistd::write(&oom, b"0");
            }
            // Before joining too: a real-time task may not join a cgroup without real-time
            // time (kernels with `CONFIG_RT_GROUP_SCHED`).
            leave_real_time()?;
            // Join the run's cgroup: from here on every operation is checked. (`procs`
            // stays open in sandbox until the command is spawned.)
            // SAFETY: `procs` (the file) outlives the spawn, which is when this runs.
            let procs = BorrowedFd::borrow_raw(procs_fd);
            if nix::unistd::write(procs, b"0")? != 1 {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            // An IPC namespace of its own (while still root): System V shared memory,
            // semaphores and message queues have no hook the policy decides on, and the
            // user's other processes' (an X server's MIT-SHM images of other windows)
            // would otherwise be the command's to read, write or remove.
            if libc::unshare(libc::CLONE_NEWIPC) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // A session of its own: the user's terminal is no longer the command's
            // controlling terminal, so it cannot queue input into the shell that runs after
            // sandbox (TIOCSTI, CVE-2017-5226) nor signal the shell's process group.
            nix::unistd::setsid()?;
            // Its terminal: the pty's slave, as its controlling terminal (`--terminal pty`).
            if let Some(t) = terminal {
                // SAFETY: in the child, after setsid (the closure's promise).
                t.attach()?;
            }
            // sandbox ignores SIGTTOU (see `term`); the command gets the default.
            nix::sys::signal::signal(NixSignal::SIGTTOU, SigHandler::SigDfl)?;
            // The fallback's file and exec rules (built before the fork), while still root
            // (CAP_SYS_ADMIN: no_new_privs is not needed, and stays the policy's choice).
            if let Some(fd) = landlock {
                crate::landlock::restrict(fd)?;
            }
            privileges.apply()?;
            // Last: the descriptors used above (the cgroup's, the fallback's ruleset) are
            // sandbox's own, and go with the rest.
            crate::sys::cloexec_all_but(&privileges.pass_fds).map_err(|e| e.source)
        });
    }
    cmd
}

/// The signals sandbox passes on or acts on, but those that are ignored now (inherited
/// from whoever started sandbox, e.g. `nohup`): sandbox leaves them ignored, and so does
/// the command.
fn watch(sigs: &[i32]) -> anyhow::Result<Vec<(i32, Signal)>> {
    let mut out = Vec::new();
    for &sig in sigs {
        if !crate::sys::signal_ignored(sig) {
            out.push((sig, signal(SignalKind::from_raw(sig))?));
        }
    }
    Ok(out)
}

async fn supervise(
    armed: &mut Armed,
    audit: &mut AuditFile,
    target: &Target,
    (privileges, landlock, mut pty): (Privileges, Option<i32>, Option<&mut Pty>),
    prog: &OsString,
    args: &[OsString],
    sinks: &Sinks,
) -> anyhow::Result<i32> {
    let mut ring = session::events(armed)?;
    let procs = std::fs::OpenOptions::new()
        .write(true)
        .open(armed.cgroup.procs_path())
        .with_context(|| format!("opening {}", armed.cgroup.procs_path().display()))?;
    let terminal = pty.as_ref().and_then(|p| p.for_child());
    let mut cmd = command(prog, args, target, &procs, privileges, landlock, terminal);
    let mut t = Timer::new();
    let mut signals = watch(&[
        libc::SIGTERM,
        libc::SIGINT,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGWINCH,
    ])?;
    let mut session = Session::new(armed, &mut ring, audit, sinks, &mut signals)?;
    if let Some(p) = pty.as_mut() {
        let (tx, rx) = std::sync::mpsc::channel();
        p.report_to(tx);
        session.terminal_reports(rx);
    }
    let spawned = cmd.spawn();
    drop(procs);
    let child = match spawned {
        Ok(child) => child,
        Err(err) => {
            // The command never ran. Its own exec may have been denied: that record is in
            // the ring already (the hook wrote it before exec failed) and goes to the log.
            session.last_drain()?;
            return cannot_start(prog, &err, session.pump.exec_denials > 0);
        }
    };
    t.lap("spawn");
    let child_pid = child.id();
    if let Some(p) = pty.as_mut()
        && let Err(e) = p.start(child_pid)
    {
        kill_all(session.cgroup);
        bail!("relaying the command's terminal: {e}");
    }
    session.watch_child(child);
    // Set by a request to stop: when its deadline passes, everything in the cgroup is
    // killed.
    let mut stopping = false;
    let status = loop {
        match session.next().await? {
            Event::Exited(status) => {
                // Keys typed from now on are the shell's.
                if let Some(p) = pty.as_mut() {
                    p.stop_input();
                }
                break status;
            }
            // A request to stop: SIGTERM, or the terminal hung up (SIGHUP). The command
            // gets the signal; whatever still runs after the grace period is killed. A
            // second SIGTERM does not wait.
            Event::Signal(libc::SIGTERM) => {
                if stopping {
                    kill_all(session.cgroup);
                }
                forward(child_pid, libc::SIGTERM);
                stopping = true;
                session.deadline(Some(Instant::now() + STOP_GRACE));
            }
            Event::Signal(libc::SIGHUP) => {
                // The command leads a session of its own: the terminal's hangup reaches
                // only sandbox, which passes it on.
                forward_group(child_pid, libc::SIGHUP);
                if !stopping {
                    stopping = true;
                    session.deadline(Some(Instant::now() + STOP_GRACE));
                }
            }
            Event::Deadline => {
                kill_all(session.cgroup);
                stopping = false;
            }
            // The command runs in a session of its own (no terminal signals reach it): the
            // keys of the terminal reach sandbox, which passes them on to the command's
            // group; ctrl-C and ctrl-\ are the command's to handle, sandbox waits for it.
            // With a pty the kernel tells the command's foreground group itself.
            Event::Signal(libc::SIGWINCH) if pty.is_some() => {
                if let Some(p) = pty.as_ref() {
                    p.resize();
                }
            }
            Event::Signal(sig) => forward_group(child_pid, sig),
            _ => {}
        }
    };
    t.lap("command ran");
    // What the command left running ends now, before the last drain: nothing can add
    // records once the cgroup is empty, so the drain reads everything, and what did not
    // fit in the ring is in the drop count it reads last (a process left behind cannot
    // act between the drain and the teardown, unrecorded).
    if let Err(e) = session.cgroup.kill_and_wait() {
        tracing::warn!("ending what the command left running: {e}");
    }
    // Nothing holds the pty's slave now: its last output reaches the terminal, which gets
    // its mode back.
    if let Some(p) = pty.as_mut() {
        p.finish(Duration::from_secs(1));
    }
    session.last_drain()?;
    Ok(exit_code(status))
}

fn forward(pid: Option<u32>, sig: i32) {
    if let (Some(pid), Ok(sig)) = (pid, NixSignal::try_from(sig)) {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid.cast_signed()), sig);
    }
}

/// The end of the grace period after a request to stop: everything left in the cgroup is
/// killed (the cgroup stays, for the usual teardown).
fn kill_all(cg: &Cgroup) {
    term::line("sandbox: the command did not stop in time: killing everything in its cgroup");
    cg.kill_now();
}

/// Sends `sig` to the command's process group, as a terminal sends its keys to the
/// foreground group (the command leads its own session and group).
fn forward_group(pid: Option<u32>, sig: i32) {
    if let (Some(pid), Ok(sig)) = (pid, NixSignal::try_from(sig)) {
        let _ = nix::sys::signal::killpg(Pid::from_raw(pid.cast_signed()), sig);
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
