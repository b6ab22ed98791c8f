//! `sandbox attach`: enforce a policy on an existing cgroup (a systemd service, a container-
//! less daemon) until stopped, with atomic reloads.
//!
//! - Every process in the cgroup and below is confined from the moment of binding; sandbox
//!   never creates, kills or removes the cgroup.
//! - `SIGHUP` re-reads the policy file. A policy with errors is reported (`file:line:column`)
//!   and changes nothing; so is a file a non-root user could have changed (it must be
//!   root's, in directories only root can change: see `safepath`). A good one is loaded as a second, complete set of programs and
//!   maps and bound *before* the old set is released: during the switch both decide (a
//!   denial by either stands), so there is no moment with no policy or half of one.
//! - `SIGTERM`/`SIGINT` end enforcement (the operator's decision) and say so. If sandbox
//!   dies instead, the pinned programs keep enforcing (see `pins`).

use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::audit::AuditFile;
use crate::backend::Host;
use crate::compile::{self, CompiledPolicy};
use crate::host::safepath::Agent;
use crate::policy::{self, Context, Policy};
use crate::runtime::arm::{self, Armed, Bind};
use crate::runtime::run;
use crate::runtime::session::{self, Event, Ring, Session, Sinks};
use crate::term;

pub struct AttachOptions {
    pub cgroup: PathBuf,
    pub policy: Option<PathBuf>,
    pub audit_log: Option<PathBuf>,
    /// No line per denial on stderr (`--quiet`; by default when stderr is the journal).
    pub quiet: bool,
    /// `--metrics`: serve Prometheus metrics on this address.
    pub metrics: Option<std::net::SocketAddr>,
    /// `--allow-degraded`: in the fallback backend, enforce the network part even when the
    /// policy has file or exec rules (which cannot be enforced on running processes).
    pub allow_degraded: bool,
}

/// In the fallback backend: says what is not enforced on an existing cgroup (files and
/// exec: Landlock cannot be applied from outside) and refuses a policy with such rules
/// unless the user accepted that.
fn fallback_check(p: &Policy, host: &Host, allow_degraded: bool) -> anyhow::Result<()> {
    let crate::backend::Backend::Fallback { landlock, .. } = &host.backend else {
        return Ok(());
    };
    let facts = crate::fallback::HostFacts {
        landlock: landlock.clone(),
        cgroup_root: host.cgroup_root.clone(),
        root_command: false,
        attach: true,
    };
    let (_, cov) = crate::fallback::plan(p, &facts);
    let refused: Vec<String> = cov
        .refused()
        .map(|g| format!("  {}: {}", g.rule, g.why))
        .collect();
    if !refused.is_empty() && !allow_degraded && !p.allow_degraded {
        anyhow::bail!(
            "in the fallback backend `sandbox attach` enforces the network rules only; {} \
             rule(s) of this policy would not be enforced:\n{}\nTo attach anyway, pass \
             --allow-degraded or set `fallback: {{allow_degraded: true}}` in the policy",
            refused.len(),
            refused.join("\n")
        );
    }
    term::line(
        "sandbox: the network rules are enforced; files and exec are not (Landlock \
                cannot be applied to processes that already run)",
    );
    for line in crate::fallback::report(&cov) {
        term::line(&format!("sandbox: {line}"));
    }
    Ok(())
}

/// Reads and validates the policy (the built-in one without a file). The file is re-read
/// on every SIGHUP while the confined processes run, so one they could change (or a link
/// to one) is refused: it must be root's, in directories only root can write. Which user
/// the service runs as is not known here, so no non-root user may be able to change it.
fn read_policy(path: Option<&Path>, ctx: &Context) -> anyhow::Result<Policy> {
    let p = arm::load_trusted_policy(path, ctx, &Agent::AnyNonRoot)?;
    for w in policy::lint::lint(&p) {
        tracing::warn!("{w}");
    }
    let l = &p.limits;
    if [
        l.memory,
        l.pids,
        l.cpu,
        l.io_read,
        l.io_write,
        l.io_read_iops,
        l.io_write_iops,
    ]
    .iter()
    .any(|l| l.written)
    {
        tracing::warn!(
            "limits: the cgroup attached to is not sandbox's, so its limits stay as they \
             are; set them where it is made (systemd: MemoryMax=, TasksMax=, CPUQuota=, IOReadBandwidthMax=)"
        );
    }
    Ok(p)
}

/// Compiles `p` with sandbox's own files (the audit log, the policy file) read-only.
fn compile_policy(
    mut p: Policy,
    audit: &AuditFile,
    path: Option<&Path>,
) -> anyhow::Result<CompiledPolicy> {
    arm::protect_own_files(&mut p, audit, path);
    Ok(compile::compile(&p, compile::random_seed())?)
}

pub async fn attach(opts: AttachOptions) -> anyhow::Result<i32> {
    term::start();
    let notify = crate::host::systemd::Notifier::from_env();
    if crate::host::systemd::stderr_is_journal() {
        term::journal_levels();
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/root"), PathBuf::from);
    // The bound processes may be any user's: a root's view of the homes, as for a root
    // command.
    let ctx = Context::from_process(home, true)?;
    let mut opts = opts;
    // Without --policy: /etc/sandbox/policy.yaml if there is one (a service has no user
    // of its own to look up), re-read on SIGHUP like a named one.
    if opts.policy.is_none() {
        opts.policy = policy::lookup(None, Some(&crate::host::safepath::Agent::AnyNonRoot))
            .context("looking for the policy in /etc/sandbox")?;
    }
    let policy = read_policy(opts.policy.as_deref(), &ctx)?;
    let audit_path = opts
        .audit_log
        .clone()
        .or(policy.audit.path.clone())
        .unwrap_or_else(|| run::DEFAULT_AUDIT_LOG.into());
    let mut audit = AuditFile::with_rotation(
        &audit_path,
        policy.audit.max_size,
        policy.audit.keep,
        &Agent::AnyNonRoot,
    )?;
    let compiled = compile_policy(policy.clone(), &audit, opts.policy.as_deref())?;
    let host = crate::backend::detect()?;
    term::line(&format!("sandbox: {}", host.backend.describe()));
    fallback_check(&policy, &host, opts.allow_degraded)?;
    drop(std::fs::write("/proc/self/oom_score_adj", b"-1000"));
    let mut armed = arm::arm(compiled, Bind::Existing(&opts.cgroup), &host)?;
    held_files_are_theirs(&mut armed, None, &host);
    let mut ring = session::events(&mut armed)?;
    armed
        .orphans
        .extend(crate::kernel::pins::remove_stale_attach(armed.cgroup.id));
    // Before the line that says SIGHUP reloads: a SIGHUP that arrives before the handler
    // would end sandbox (the signal's default action).
    let mut signals = [
        (libc::SIGHUP, signal(SignalKind::hangup())?),
        (libc::SIGTERM, signal(SignalKind::terminate())?),
        (libc::SIGINT, signal(SignalKind::interrupt())?),
    ];
    term::line(&format!(
        "sandbox: enforcing policy '{}' on {} (SIGHUP reloads {}, SIGTERM stops)",
        armed.compiled.name,
        armed.cgroup.path.display(),
        opts.policy
            .as_deref()
            .map_or_else(|| "the built-in policy".into(), |p| p.display().to_string()),
    ));
    let sinks = Sinks::start(opts.quiet, opts.metrics, &armed.compiled.name).await?;
    // Ready only now: the cgroup is bound, so units ordered after this one start confined.
    notify.ready(&format!(
        "enforcing policy '{}' on {}",
        armed.compiled.name,
        armed.cgroup.path.display()
    ));
    let removed = loop {
        let stop = serve(&mut armed, &mut ring, &mut audit, &sinks, &mut signals).await?;
        if stop != Stop::Reload {
            break stop == Stop::Removed;
        }
        tracing::debug!("reload requested");
        notify.reloading();
        let next = read_policy(opts.policy.as_deref(), &ctx).and_then(|p| {
            fallback_check(&p, &host, opts.allow_degraded)?;
            let c = compile_policy(p, &audit, opts.policy.as_deref())?;
            let mut new = arm::arm(c, Bind::Existing(&armed.cgroup.path), &host)?;
            held_files_are_theirs(&mut new, Some(&mut armed), &host);
            let new_ring = session::events(&mut new)?;
            Ok((new, new_ring))
        });
        match next {
            Ok((new, new_ring)) => {
                // Both sets enforce now; the old one leaves the scope, then its last
                // records are written; its links detach meanwhile on their own thread.
                let mut old = std::mem::replace(&mut armed, new);
                let mut old_ring = std::mem::replace(&mut ring, new_ring);
                tracing::debug!("new set bound");
                if let Err(e) = old.enforcer.release_in_background() {
                    tracing::warn!("the old set stays attached until its links close: {e}");
                    old.enforcer.release();
                }
                finish(&mut old, &mut old_ring, &mut audit, &sinks)?;
                tracing::debug!("old set released and drained");
                term::line(&format!(
                    "sandbox: reloaded: policy '{}' in force on {}",
                    armed.compiled.name,
                    armed.cgroup.path.display()
                ));
                sinks.metrics(|m| {
                    m.reload(true);
                    m.policy(&armed.compiled.name);
                });
                notify.ready(&format!(
                    "enforcing policy '{}' on {} (reloaded)",
                    armed.compiled.name,
                    armed.cgroup.path.display()
                ));
            }
            Err(e) => {
                term::line(&format!(
                    "sandbox: reload refused, the policy in force stays: {}",
                    crate::kernel::loader::error_chain(e.as_ref())
                ));
                sinks.metrics(|m| m.reload(false));
                notify.ready(&format!(
                    "enforcing policy '{}' on {} (the last reload was refused: see the log)",
                    armed.compiled.name,
                    armed.cgroup.path.display()
                ));
            }
        }
    };
    notify.stopping();
    armed.enforcer.release();
    finish(&mut armed, &mut ring, &mut audit, &sinks)?;
    if removed {
        term::line(&format!(
            "sandbox: error: the cgroup {} was removed, so this binding confines nothing: a \
             cgroup made again at its path (a service's restart makes a new one) is not \
             bound. Bind a slice, which outlives its services' restarts (see \
             sandbox-attach@.service), or run sandbox attach again",
            armed.cgroup.path.display()
        ));
        return Ok(crate::cli::EXIT_SANDBOX_FAILED.into());
    }
    term::line(&format!(
        "sandbox: stopped: {} is no longer confined",
        armed.cgroup.path.display()
    ));
    Ok(0)
}

/// Why [`serve`] ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    /// SIGHUP: read the policy again.
    Reload,
    /// SIGTERM or SIGINT.
    Signal,
    /// The bound cgroup is gone ([`watch_cgroup`]).
    Removed,
}

/// Ends the binding when the bound cgroup (`path`, inode number `id`: its cgroup id) is
/// removed or another one stands at its path: the programs would go on matching an id no
/// process has, while a service restarted into a new cgroup there runs unconfined and
/// sandbox said it was enforcing. Checked every second; ends `serve` by a SIGTERM to this
/// process (its handler is `serve`'s).
async fn watch_cgroup(path: PathBuf, id: u64, gone: std::sync::Arc<AtomicBool>) {
    use std::os::unix::fs::MetadataExt as _;
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        if !std::fs::metadata(&path).is_ok_and(|m| m.ino() == id) {
            gone.store(true, Ordering::SeqCst);
            // SAFETY: a signal to this process, which handles SIGTERM.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            return;
        }
    }
}

/// The terminals and shared-memory files the confined processes hold (a service on a
/// console, an agent started in a terminal and bound later, the segments a program made
/// before it was bound) stay theirs to open by name: each is marked in the set's map
/// through a copy of the holder's descriptor (the same open file), or for a segment only
/// mapped, through its mapping (`/proc/PID/map_files`). Terminals and segments they
/// neither hold nor made are refused to them (`terminal.rs`, `shm.rs` in the programs).
/// At a reload (`old`: the set in force), only what the old set had marked is marked
/// again: a descriptor a bound process was sent meanwhile gives the cgroup no name. Only
/// with BPF LSM on, as for `run`. The same for the namespaces whose files open to them.
fn held_files_are_theirs(armed: &mut Armed, mut old: Option<&mut Armed>, host: &Host) {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    if host.backend.is_fallback() {
        return;
    }
    let shm = std::fs::metadata("/dev/shm")
        .ok()
        .filter(|_| crate::host::mounts::shm_dev() != 0)
        .map(|m| m.dev());
    let on_shm = |m: &std::fs::Metadata| Some(m.dev()) == shm && !m.is_dir();
    // What the open file is, read from the file itself (the magic link's target may have
    // changed since): a terminal, or a file of the shared memory.
    let kind = |f: &std::fs::File| {
        f.metadata().ok().and_then(|m| {
            if m.file_type().is_char_device() && nix::unistd::isatty(f).unwrap_or(false) {
                Some(true)
            } else if on_shm(&m) {
                Some(false)
            } else {
                None
            }
        })
    };
    // The namespaces the bound processes are in when they are bound are theirs to open (a
    // service's private mount namespace); at a reload, those the old set allowed (not the
    // ones its processes have made since).
    let namespaces = match old.as_deref() {
        Some(old) => armed.enforcer.allow_namespaces_like(&old.enforcer),
        None => armed.cgroup.members().try_fold(0, |n, m| {
            Ok(n + armed.enforcer.allow_namespaces_in(&m.proc_dir())?)
        }),
    };
    if let Err(e) = namespaces {
        tracing::warn!("the bound processes' namespaces: {e}: their files do not open");
    }
    let (mut terminals, mut segments) = (0, 0);
    let mut mark = |armed: &mut Armed, f: &std::fs::File| {
        let Some(tty) = kind(f) else {
            return;
        };
        // At a reload, the old set's mark as it was (a device node the command made is
        // its own by name only).
        let value = match old.as_deref_mut() {
            None => sandbox_common::own_mark::WHOLE,
            Some(old) => match old.enforcer.maps().own_inodes().map(|t| t.get(f, 0)) {
                Ok(Ok(v)) => v,
                _ => return,
            },
        };
        if armed.enforcer.maps().own_file(f, value).is_ok() {
            if tty {
                terminals += 1;
            } else {
                segments += 1;
            }
        }
    };
    // Each process is held while its files are read: none of another's is taken for its
    // own once its number is used again.
    let cgroup = armed.cgroup.clone();
    for m in cgroup.members() {
        if let Ok(fds) = std::fs::read_dir(m.proc_dir().join("fd")) {
            for entry in fds.flatten() {
                let wanted = std::fs::metadata(entry.path())
                    .is_ok_and(|m| m.file_type().is_char_device() || on_shm(&m));
                let Some(fd) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<i32>().ok())
                    .filter(|_| wanted)
                else {
                    continue;
                };
                if let Ok(copy) = m.fd(fd) {
                    mark(armed, &std::fs::File::from(copy));
                }
            }
        }
        // Segments mapped and no longer open (`shm_open`, `mmap`, `close`).
        if shm.is_none() {
            continue;
        }
        let Ok(maps) = std::fs::read_dir(m.proc_dir().join("map_files")) else {
            continue;
        };
        for entry in maps.flatten() {
            if std::fs::metadata(entry.path()).is_ok_and(|m| on_shm(&m))
                && let Ok(f) = std::fs::File::open(entry.path())
            {
                mark(armed, &f);
            }
        }
    }
    tracing::debug!(
        "held by the confined processes, theirs: {terminals} terminals, {segments} shared \
         memory files"
    );
}

/// Streams events of `armed` and keeps its maps current until a signal: `true` for a
/// reload (SIGHUP), `false` to stop.
async fn serve(
    armed: &mut Armed,
    ring: &mut Ring,
    audit: &mut AuditFile,
    sinks: &Sinks,
    signals: &mut [(i32, Signal)],
) -> anyhow::Result<Stop> {
    let gone = std::sync::Arc::new(AtomicBool::new(false));
    let watch = tokio::spawn(watch_cgroup(
        armed.cgroup.path.clone(),
        armed.cgroup.id,
        gone.clone(),
    ));
    let mut session = Session::new(armed, ring, audit, sinks, signals)?;
    let reload = loop {
        if let Event::Signal(sig) = session.next().await? {
            break sig == libc::SIGHUP;
        }
    };
    watch.abort();
    session.close()?;
    Ok(if gone.load(Ordering::SeqCst) {
        Stop::Removed
    } else if reload {
        Stop::Reload
    } else {
        Stop::Signal
    })
}

/// Writes what is left in the ring of a released set of programs, and its drop count.
fn finish(
    armed: &mut Armed,
    ring: &mut Ring,
    audit: &mut AuditFile,
    sinks: &Sinks,
) -> anyhow::Result<()> {
    Session::new(armed, ring, audit, sinks, &mut [])?.finish()
}
