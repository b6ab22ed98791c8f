//! The one session loop of `sandbox run` and `sandbox attach` (rust-analyzer's `main_loop`
//! shape): everything a running session waits for is an [`Event`] of one closed set, and
//! what enforcement needs from any of them (records from the ring, flood counts and drops,
//! mount and address changes, `allow_hosts` lookups) is handled here, once. The events
//! that are the command's to decide (a signal, the command's exit, a deadline it set) are
//! handed back by [`Session::next`].

use std::pin::Pin;
use std::process::ExitStatus;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use aya::maps::{Array, MapData, RingBuf};
use tokio::io::unix::AsyncFd;
use tokio::signal::unix::Signal;
use tokio::task::JoinHandle;
use tokio::time::{Instant, Interval, Sleep};

use crate::audit::aggregate::{Aggregates, Repeat};
use crate::audit::{AuditFile, Event as Kernel, Formatter, Lines, Record};
use crate::compile::CompiledPolicy;
use crate::host::cgroup::Cgroup;
use crate::host::mounts::{MountWatch, Superblock};
use crate::kernel::loader::Enforcer;
use crate::runtime::arm::{Armed, HostAddrs, remount};
use crate::runtime::hosts::{HostState, Round};
use crate::runtime::metrics::Metrics;
use crate::term;

/// The event ring buffer, polled by the runtime.
pub type Ring = AsyncFd<RingBuf<MapData>>;

/// Registers the ring buffer of `armed` with the runtime.
pub fn events(armed: &mut Armed) -> anyhow::Result<Ring> {
    let ring = armed.enforcer.take_events()?;
    // SAFETY: the ring buffer owns its fd for as long as the AsyncFd exists; nothing else
    // closes it.
    unsafe { AsyncFd::register(ring) }
        .map_err(|e| anyhow::anyhow!("polling the event ring buffer: {e}"))
}

/// Everything a session waits for.
#[derive(Debug)]
pub enum Event {
    /// The ring buffer had records; `more`: it still has (a flood), so the loop lets the
    /// runtime look at signals and timers before reading on.
    Records { more: bool },
    /// The periodic look at the counts of floods that stopped and at drops.
    Tick,
    /// The mount table changed.
    Mounts,
    /// This host's network addresses changed.
    HostAddrs,
    /// Time to look the `allow_hosts` names up again.
    LookupDue,
    /// A lookup round finished.
    LookedUp(Result<Round, tokio::task::JoinError>),
    /// `allow_hosts` addresses whose TTL is over are due to leave (whether or not a lookup
    /// is under way).
    HostsExpire,
    /// A watched signal arrived (the command decides).
    Signal(i32),
    /// The command exited (`run`; the command decides).
    Exited(ExitStatus),
    /// The deadline set with [`Session::deadline`] passed (the command decides).
    Deadline,
}

/// One armed set of programs being served: its records pumped to the sinks, its maps kept
/// current.
pub struct Session<'a> {
    enforcer: &'a mut Enforcer,
    compiled: &'a CompiledPolicy,
    mounts: &'a mut Vec<Superblock>,
    mount_watch: &'a mut MountWatch,
    hosts: &'a mut HostState,
    host_addrs: &'a mut HostAddrs,
    reported_map: Option<&'a mut Array<MapData, u64>>,
    /// Where the pump's drop count and flood counts go back when the session ends
    /// (`attach` serves one armed set in several sessions).
    kept: (&'a mut u64, &'a mut Aggregates),
    /// The bound cgroup.
    pub cgroup: &'a Cgroup,
    ring: &'a mut Ring,
    pub pump: Pump<'a>,
    signals: &'a mut [(i32, Signal)],
    child: Option<tokio::process::Child>,
    tick: Interval,
    lookup: Pin<Box<Sleep>>,
    expiry: Pin<Box<Sleep>>,
    resolving: Option<JoinHandle<Round>>,
    deadline: Option<Pin<Box<Sleep>>>,
    /// What the terminal filter dropped ([`Session::terminal_reports`]).
    terminal: Option<std::sync::mpsc::Receiver<&'static str>>,
    /// Mounts gained while running that the policy was not compiled through, said once.
    warned_aliases: Vec<crate::host::mounts::Alias>,
}

impl<'a> Session<'a> {
    /// Starts serving `armed` (whose ring is `ring`): first writes what runs whose sandbox
    /// died left behind. `signals` are the signals the caller decides on.
    pub fn new(
        armed: &'a mut Armed,
        ring: &'a mut Ring,
        audit: &'a mut AuditFile,
        sinks: &Sinks,
        signals: &'a mut [(i32, Signal)],
    ) -> anyhow::Result<Self> {
        let Armed {
            enforcer,
            compiled,
            mounts,
            mount_watch,
            identities,
            hosts,
            reported_drops,
            agg,
            reported_map,
            orphans,
            cgroup,
            host_addrs,
        } = armed;
        let orphans = std::mem::take(orphans);
        let mut pump = Pump {
            fmt: Formatter::new(compiled, mounts.clone(), identities)?,
            audit,
            sinks: sinks.clone(),
            reported_drops: *reported_drops,
            exec_denials: 0,
            agg: std::mem::take(agg),
        };
        pump.write_orphans(orphans)?;
        let lookup = Box::pin(tokio::time::sleep_until(hosts.next_lookup()));
        let expiry = Box::pin(tokio::time::sleep_until(hosts.next_expiry()));
        Ok(Self {
            enforcer,
            compiled,
            mounts,
            mount_watch,
            hosts,
            host_addrs,
            reported_map: reported_map.as_mut(),
            kept: (reported_drops, agg),
            cgroup,
            ring,
            pump,
            signals,
            child: None,
            tick: tokio::time::interval(Duration::from_millis(500)),
            lookup,
            expiry,
            resolving: None,
            deadline: None,
            terminal: None,
            warned_aliases: Vec::new(),
        })
    }

    /// From now on the session also waits for `child` to exit ([`Event::Exited`]).
    pub fn watch_child(&mut self, child: tokio::process::Child) {
        self.child = Some(child);
    }

    /// Sets (or clears) the moment for [`Event::Deadline`].
    pub fn deadline(&mut self, at: Option<Instant>) {
        self.deadline = at.map(|t| Box::pin(tokio::time::sleep_until(t)));
    }

    /// Serves the session until an event that is the caller's to decide.
    pub async fn next(&mut self) -> anyhow::Result<Event> {
        loop {
            let event = self.wait().await?;
            if let Some(theirs) = self.handle(event).await? {
                return Ok(theirs);
            }
        }
    }

    /// The next event, from whichever source is ready first. Records are drained here,
    /// where the ring says it is readable (its readiness is cleared only once it is empty).
    async fn wait(&mut self) -> anyhow::Result<Event> {
        let Self {
            ring,
            pump,
            signals,
            child,
            tick,
            mount_watch,
            host_addrs,
            lookup,
            expiry,
            resolving,
            deadline,
            compiled,
            ..
        } = self;
        let has_hosts = !compiled.net.hosts.is_empty();
        Ok(tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                let empty = pump.drain(guard.get_inner_mut(), DRAIN_BATCH)?;
                if empty {
                    guard.clear_ready();
                }
                Event::Records { more: !empty }
            }
            sig = next_signal(signals) => Event::Signal(sig),
            status = async { child.as_mut().expect("guarded").wait().await }, if child.is_some() => {
                *child = None;
                Event::Exited(status?)
            }
            () = async { deadline.as_mut().expect("guarded").await }, if deadline.is_some() => {
                *deadline = None;
                Event::Deadline
            }
            _ = tick.tick() => Event::Tick,
            changed = mount_watch.changed() => {
                changed?;
                Event::Mounts
            }
            changed = host_addrs.changed() => {
                changed?;
                Event::HostAddrs
            }
            () = lookup.as_mut(), if has_hosts && resolving.is_none() => Event::LookupDue,
            () = expiry.as_mut(), if has_hosts => Event::HostsExpire,
            done = async { resolving.as_mut().expect("guarded").await }, if resolving.is_some() => {
                *resolving = None;
                Event::LookedUp(done)
            }
        })
    }

    /// Does what enforcement needs for `event`; hands back the caller's events.
    async fn handle(&mut self, event: Event) -> anyhow::Result<Option<Event>> {
        match event {
            // A flood: let the runtime look at signals and timers before reading on (the
            // loop would otherwise never give it the chance).
            Event::Records { more: true } => tokio::task::yield_now().await,
            Event::Records { more: false } => {}
            Event::Tick => {
                self.own_records()?;
                self.enforcer.flush_kernel_log();
                self.pump
                    .check_drops(self.enforcer, self.reported_map.as_deref_mut())?;
            }
            Event::Mounts => {
                let m = remount(self.enforcer, self.compiled)?;
                self.pump.fmt.set_mounts(&m);
                *self.mounts = m;
                self.new_aliases();
            }
            Event::HostAddrs => {
                self.host_addrs.refresh(self.enforcer, self.compiled)?;
                // An address the host gained is withdrawn from the names that had it now,
                // not at their next lookup.
                if self
                    .hosts
                    .installed
                    .keys()
                    .any(|a| self.host_addrs.seen.iter().any(|n| n.contains(a)))
                {
                    let r = self
                        .hosts
                        .sync(self.enforcer, self.compiled, &self.host_addrs.seen);
                    self.hosts_written(r);
                }
            }
            Event::LookupDue => {
                self.resolving = Some(HostState::start_lookup(
                    self.compiled,
                    &self.host_addrs.seen,
                ));
            }
            Event::LookedUp(done) => {
                let failed = done.as_ref().map_or(true, |r| r.failed);
                let r = self.hosts.take_round(
                    done,
                    self.enforcer,
                    self.compiled,
                    &self.host_addrs.seen,
                );
                self.hosts_written(r);
                let addresses = self.hosts.installed.len();
                self.pump.sinks.metrics(|m| m.lookup(failed, addresses));
                self.lookup.as_mut().reset(self.hosts.next_lookup());
            }
            Event::HostsExpire => {
                let r = self
                    .hosts
                    .sync(self.enforcer, self.compiled, &self.host_addrs.seen);
                self.hosts_written(r);
            }
            theirs @ (Event::Signal(_) | Event::Exited(_) | Event::Deadline) => {
                return Ok(Some(theirs));
            }
        }
        Ok(None)
    }

    /// Says so when the mount table gained a mount whose files the programs name by
    /// another path (`host::mounts::Alias`) than the policy was compiled through: rules
    /// written for paths below it do not hold there until the policy is compiled again
    /// (the next run; `attach`'s reload). The host's root mounts there, or an automounter
    /// on first access (which a confined process may cause).
    fn new_aliases(&mut self) {
        for a in crate::host::mounts::aliases() {
            if self.compiled.aliases.contains(&a) || self.warned_aliases.contains(&a) {
                continue;
            }
            let line = format!(
                "sandbox: warning: {} is now a mount of what the programs name {}: rules for \
                 paths below {} do not hold there until the policy is loaded again (a new \
                 run, or SIGHUP for `sandbox attach`); rules for {} do",
                a.mount_point, a.placed, a.mount_point, a.placed
            );
            tracing::warn!("{line}");
            crate::term::line(&line);
            self.warned_aliases.push(a);
        }
    }

    /// After the `allow_hosts` entries were written: a write that failed is a warning and a
    /// metric, not the end of the session (the entries it could not change stay as they
    /// were, expiry goes on, the next write, in `RETRY` at most, tries again); the expiry timer follows
    /// the table.
    fn hosts_written(&mut self, r: Result<(), crate::kernel::loader::LoadError>) {
        let failed = r.is_err();
        if let Err(e) = r {
            tracing::warn!(
                "allow_hosts: the kernel's entries could not all be written ({e}); those \
                 not written stay as they were until the next update"
            );
            self.pump.sinks.metrics(Metrics::host_write_failed);
        }
        let addresses = self.hosts.installed.len();
        self.pump.sinks.metrics(|m| m.host_addresses(addresses));
        let mut next = self.hosts.next_expiry();
        if failed {
            next = next.min(Instant::now() + crate::runtime::hosts::RETRY);
        }
        self.expiry.as_mut().reset(next);
    }

    /// The last drain, once the programs have nothing more to judge (see
    /// [`Pump::last_drain`]).
    pub fn last_drain(&mut self) -> anyhow::Result<()> {
        self.own_records()?;
        self.enforcer.flush_kernel_log();
        self.pump.last_drain(
            self.ring.get_mut(),
            self.enforcer,
            self.reported_map.as_deref_mut(),
        )
    }

    /// Records of sandbox's own making from its other threads: the terminal filter's
    /// (`Pty::report_to`), written at each tick and at the end.
    pub fn terminal_reports(&mut self, rx: std::sync::mpsc::Receiver<&'static str>) {
        self.terminal = Some(rx);
    }

    fn own_records(&mut self) -> std::io::Result<()> {
        let Some(rx) = &self.terminal else {
            return Ok(());
        };
        let what: Vec<&'static str> = rx.try_iter().collect();
        for w in what {
            self.pump.write(Record::terminal_filtered(w))?;
        }
        Ok(())
    }

    /// Ends the session with the armed set still enforcing: drops written, the log
    /// flushed, the counts kept for the next session of the same set.
    pub fn close(mut self) -> anyhow::Result<()> {
        self.pump
            .check_drops(self.enforcer, self.reported_map.as_deref_mut())?;
        self.pump.flush()?;
        *self.kept.0 = self.pump.reported_drops;
        *self.kept.1 = std::mem::take(&mut self.pump.agg);
        Ok(())
    }

    /// Ends the session of a released set: whatever is left in its ring is written.
    pub fn finish(mut self) -> anyhow::Result<()> {
        self.last_drain()?;
        *self.kept.0 = self.pump.reported_drops;
        Ok(())
    }
}

/// The first of `signals` to arrive.
async fn next_signal(signals: &mut [(i32, Signal)]) -> i32 {
    std::future::poll_fn(|cx| {
        for (n, s) in signals.iter_mut() {
            if let Poll::Ready(Some(())) = s.poll_recv(cx) {
                return Poll::Ready(*n);
            }
        }
        Poll::Pending
    })
    .await
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

impl<'a> Pump<'a> {
    /// A pump of its own (nothing counted yet) writing only to `audit`: no terminal lines,
    /// no metrics (the benchmark, tests).
    pub fn quiet(fmt: Formatter<'a>, audit: &'a mut AuditFile) -> Self {
        Self {
            fmt,
            audit,
            sinks: Sinks {
                quiet: true,
                metrics: None,
            },
            reported_drops: 0,
            exec_denials: 0,
            agg: Aggregates::default(),
        }
    }
}

/// Records written after the command ended (bounded: processes it left may still be
/// producing them until the cgroup is killed).
pub const FINAL_DRAIN: usize = 1 << 20;

/// Records handled per wake-up before the event loop looks at signals and timers again: a
/// process flooding denials must not starve the rest of sandbox.
pub const DRAIN_BATCH: usize = 4096;

/// Records after which a drain hands the encoding and writing of the rest of its batch to
/// a second thread (with more than one CPU): the pump then builds the next records while
/// the last ones are encoded, about twice the records a second under a flood of distinct
/// denials. Smaller batches are written by the pump itself (no thread started).
const PIPELINE_AFTER: usize = 256;

/// [`PIPELINE_AFTER`], or `SANDBOX_PIPELINE_AFTER` (at least 1): the tests set it low, so
/// that the writing thread runs under a flood an emulated guest cannot make fast enough
/// to fill a drain of 256.
fn pipeline_after() -> usize {
    static N: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *N.get_or_init(|| {
        std::env::var("SANDBOX_PIPELINE_AFTER")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .map_or(PIPELINE_AFTER, |n| n.max(1))
    })
}

/// Records handed to the writing thread at a time (one wake-up of it per batch, not per
/// record: a hand-over per record cost more than the encoding it moved), and batches in
/// flight (bounded: the ring holds the rest).
const PIPELINE_BATCH: usize = 64;
const PIPELINE_DEPTH: usize = 16;

/// Where the pump reads kernel records: the ring buffer (tests: records made up).
trait Source {
    type Item<'a>: std::ops::Deref<Target = [u8]>
    where
        Self: 'a;
    fn next(&mut self) -> Option<Self::Item<'_>>;
}

impl Source for RingBuf<MapData> {
    type Item<'a> = aya::maps::ring_buf::RingBufItem<'a>;

    fn next(&mut self) -> Option<Self::Item<'_>> {
        RingBuf::next(self)
    }
}

/// Records handed to the pump's writing thread: to encode and write, or encoded already.
enum Batch {
    Records(Vec<Record>),
    Lines(Lines),
}

/// The part of the pump that turns kernel records into audit records, apart from where they
/// go (`out`: the audit file, or the writing thread of a pipelined drain).
struct Producer<'p, 'a> {
    fmt: &'p Formatter<'a>,
    sinks: &'p Sinks,
    agg: &'p mut Aggregates,
    exec_denials: &'p mut u64,
}

impl Producer<'_, '_> {
    /// One record to the log, counted in the metrics.
    fn emit(
        &self,
        rec: Record,
        out: &mut impl FnMut(Record) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        self.sinks.metrics(|m| m.record(&rec));
        out(rec)
    }

    /// One item of the ring.
    fn item(
        &mut self,
        item: &[u8],
        out: &mut impl FnMut(Record) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        match Kernel::decode(item) {
            Ok(e) if e.header.flags & sandbox_common::EVENT_F_REPEATS != 0 => {
                if let Some(r) = self.agg.on_event(&e) {
                    self.repeat(r, None, out)?;
                }
            }
            Ok(e) => {
                self.agg.on_event(&e);
                if e.hook == crate::audit::Hook::Exec
                    && e.header.decision == sandbox_common::decision::DENY
                {
                    *self.exec_denials += 1;
                }
                let named = self.fmt.named(&e);
                let line = (!self.sinks.quiet).then(|| self.fmt.line(&e, &named));
                self.emit(self.fmt.record_named(&e, named), out)?;
                if let Some(line) = line {
                    term::line(&line);
                }
            }
            Err(err) => {
                self.emit(
                    Record::error(format!("undecodable kernel record: {err}"), None),
                    out,
                )?;
                tracing::warn!("undecodable kernel record: {err}");
            }
        }
        Ok(())
    }

    /// One record for denials the kernel counted: the record they repeat, with the count.
    fn repeat(
        &self,
        r: Repeat,
        orphaned: Option<&str>,
        out: &mut impl FnMut(Record) -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        match r {
            Repeat::Of {
                key,
                count,
                last_ns,
            } => {
                let named = self.fmt.named(&key);
                let line = (!self.sinks.quiet)
                    .then(|| format!("{} ({count} more times)", self.fmt.line(&key, &named)));
                let mut rec = match orphaned {
                    Some(run) => self.fmt.orphan_record_named(&key, &named, run),
                    None => self.fmt.record_named(&key, named),
                };
                let last = crate::audit::wall_ms(last_ns);
                rec.start_time = Some(rec.time);
                rec.end_time = Some(last);
                rec.time = last;
                rec.time_dt = crate::audit::rfc3339_ms(last);
                rec.count = Some(count);
                rec.message = format!("{} ({count} more times)", rec.message);
                self.emit(rec, out)?;
                if let Some(line) = line {
                    term::line(&line);
                }
                Ok(())
            }
            Repeat::Unknown { count } => {
                self.sinks.metrics(|m| m.ring_lost(count));
                out(Record::loss(
                    count,
                    "identical denials counted in the kernel whose first record was not read",
                    orphaned,
                ))
            }
        }
    }
}

impl<'a> Pump<'a> {
    /// The record-making part, and the audit file its records go to.
    fn split(&mut self) -> (Producer<'_, 'a>, &mut AuditFile) {
        let Pump {
            fmt,
            audit,
            sinks,
            agg,
            exec_denials,
            ..
        } = self;
        (
            Producer {
                fmt,
                sinks,
                agg,
                exec_denials,
            },
            audit,
        )
    }

    /// One record to the log, counted in the metrics.
    fn write(&mut self, rec: Record) -> std::io::Result<()> {
        let (p, audit) = self.split();
        p.emit(rec, &mut |r| audit.write(&r))
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
        self.drain_from(ring, max)
    }

    /// [`Pump::drain`] from any source of kernel records.
    fn drain_from(&mut self, ring: &mut impl Source, max: usize) -> anyhow::Result<bool> {
        let mut n = 0;
        while n < max {
            if n == pipeline_after()
                && parallel()
                // More than the batch being written waits: the writer is behind, the next
                // batch is encoded here (a threshold of 1 or 2 gave the same figures; 0
                // left the writer idle half the time).
                && let Some(empty) =
                    self.drain_pipelined(ring, max - n, |waiting, _| waiting > 1)?
            {
                self.flush()?;
                return Ok(empty);
            }
            let Some(item) = ring.next() else {
                self.flush()?;
                return Ok(true);
            };
            let (mut p, audit) = self.split();
            p.item(&item, &mut |r| audit.write(&r))?;
            n += 1;
        }
        self.flush()?;
        Ok(false)
    }

    /// [`Pump::drain`]'s records from the ring in this thread, their writing in a second
    /// one, in the same order (one channel). Which thread encodes a batch balances itself:
    /// the writing thread encodes the records it is handed while it keeps up; when a batch
    /// is already waiting for it, this thread encodes the next one itself (as the log's
    /// lines) and the writing thread only writes it. `None`: the thread could not be
    /// started (a pids limit), nothing was taken from the ring, the caller goes on alone.
    /// If the writing thread stops, the records made but not written are counted in an
    /// `audit_loss` record before the error is returned. `encode_here(waiting, batch)`:
    /// whether this thread encodes batch number `batch`, with `waiting` batches handed
    /// over and not written (more than the one being written: the writer is behind).
    fn drain_pipelined(
        &mut self,
        ring: &mut impl Source,
        max: usize,
        encode_here: impl Fn(usize, usize) -> bool,
    ) -> anyhow::Result<Option<bool>> {
        use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
        /// Said once (`SANDBOX_DEBUG`): the flood test requires the thread to have run.
        static WROTE: std::sync::Once = std::sync::Once::new();
        let written = AtomicU64::new(0);
        // Batches handed over and not written yet.
        let waiting = AtomicUsize::new(0);
        let mut made = 0u64;
        let outcome = {
            let (mut p, audit) = self.split();
            let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(PIPELINE_DEPTH);
            // Written batches come back to be freed (or their buffers used again) here:
            // memory freed by the thread that allocated it stays out of the allocator's
            // locks (freeing them in the writer doubled the cost of a record).
            let (back_tx, back_rx) = std::sync::mpsc::channel::<Batch>();
            let (written, waiting) = (&written, &waiting);
            let made = &mut made;
            std::thread::scope(|scope| {
                let writer = std::thread::Builder::new()
                    .name("sandbox-audit".into())
                    .spawn_scoped(scope, move || -> std::io::Result<()> {
                        for batch in rx {
                            match &batch {
                                Batch::Records(recs) => {
                                    for rec in recs {
                                        audit.write(rec)?;
                                        written.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                                Batch::Lines(lines) => {
                                    for line in lines.iter() {
                                        audit.write_encoded(line);
                                        written.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            }
                            waiting.fetch_sub(1, Ordering::Relaxed);
                            let _ = back_tx.send(batch);
                            WROTE.call_once(|| {
                                tracing::debug!("the pump's writing thread wrote records");
                            });
                        }
                        Ok(())
                    });
                let Ok(writer) = writer else {
                    return Ok(None);
                };
                let mut batch = Vec::with_capacity(PIPELINE_BATCH);
                let mut spare_lines = Vec::new();
                let mut batches = 0;
                let mut hand_over = |batch: &mut Vec<Record>| -> std::io::Result<()> {
                    let mut spare = None;
                    while let Ok(done) = back_rx.try_recv() {
                        match done {
                            Batch::Records(mut recs) => {
                                recs.clear();
                                spare = Some(recs);
                            }
                            // Two kept at most, none grown past 1 MiB (paths of
                            // control bytes are six times their size escaped).
                            Batch::Lines(mut lines)
                                if spare_lines.len() < 2 && lines.capacity() <= 1 << 20 =>
                            {
                                lines.clear();
                                spare_lines.push(lines);
                            }
                            Batch::Lines(_) => {}
                        }
                    }
                    let spare = spare.unwrap_or_else(|| Vec::with_capacity(PIPELINE_BATCH));
                    let full = std::mem::replace(batch, spare);
                    batches += 1;
                    let out = if encode_here(waiting.load(Ordering::Relaxed), batches - 1) {
                        let mut lines = spare_lines.pop().unwrap_or_default();
                        for rec in &full {
                            lines.push(rec)?;
                        }
                        Batch::Lines(lines)
                    } else {
                        Batch::Records(full)
                    };
                    waiting.fetch_add(1, Ordering::Relaxed);
                    tx.send(out)
                        .map_err(|_| std::io::Error::other("the audit writer stopped"))
                };
                let mut empty = false;
                let mut result = Ok(());
                for _ in 0..max {
                    let Some(item) = ring.next() else {
                        empty = true;
                        break;
                    };
                    result = p.item(&item, &mut |r| {
                        batch.push(r);
                        *made += 1;
                        Ok(())
                    });
                    if result.is_ok() && batch.len() >= PIPELINE_BATCH {
                        result = hand_over(&mut batch);
                    }
                    if result.is_err() {
                        break;
                    }
                }
                if result.is_ok() && !batch.is_empty() {
                    result = hand_over(&mut batch);
                }
                drop(tx);
                let stopped = writer
                    .join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("the audit writer panicked")));
                // The writer's error first: a hand-over that fails to send does so because the
                // writer stopped (one that fails to encode is this thread's own error).
                stopped.and(result).map(|()| Some(empty))
            })
        };
        match outcome {
            Ok(done) => Ok(done),
            Err(e) => {
                let lost = made.saturating_sub(written.load(std::sync::atomic::Ordering::Relaxed));
                if lost > 0 {
                    // Best effort: the file itself may be what failed.
                    let _ = self.audit.write(&Record::loss(
                        lost,
                        "records made but not written: the audit log's writing thread stopped",
                        None,
                    ));
                }
                Err(e.into())
            }
        }
    }

    /// One record for denials the kernel counted: the record they repeat, with the count.
    fn write_repeat(&mut self, r: Repeat, orphaned: Option<&str>) -> std::io::Result<()> {
        let (p, audit) = self.split();
        p.repeat(r, orphaned, &mut |rec| audit.write(&rec))
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
            tracing::warn!("{n} audit records lost (ring buffer full); counted in the audit log");
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
                match Kernel::decode(bytes) {
                    Ok(e) if e.header.flags & sandbox_common::EVENT_F_REPEATS != 0 => {
                        if let Some(r) = agg.on_event(&e) {
                            self.write_repeat(r, Some(&o.run))?;
                        }
                    }
                    Ok(e) => {
                        agg.on_event(&e);
                        {
                            let rec = self.fmt.orphan_record(&e, &o.run);
                            self.write(rec)?;
                        }
                    }
                    Err(err) => self.write(Record::error(
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
                self.write(Record::loss(
                    o.lost,
                    "ring buffer full after the run's sandbox died",
                    Some(&o.run),
                ))?;
            }
            if let Some(err) = &o.error {
                self.write(Record::error(
                    format!("records left by a sandbox that died could not be read: {err}"),
                    Some(&o.run),
                ))?;
                tracing::warn!(
                    "records left by a sandbox that died ({}) could not be \
                     read: {err}",
                    o.run
                );
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

/// More than one CPU to run the pump and its writing thread on.
fn parallel() -> bool {
    static N: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *N.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() > 1))
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use sandbox_common::{EventHeader, decision, hook, reason};

    use super::*;
    use crate::host::{mounts, safepath};

    /// Which batches the reading thread encodes (see `Pump::drain_pipelined`).
    type EncodeHere = fn(usize, usize) -> bool;

    /// Kernel records made up, as the ring would hand them over.
    struct Made(VecDeque<Vec<u8>>);

    impl Source for Made {
        type Item<'a> = Vec<u8>;

        fn next(&mut self) -> Option<Vec<u8>> {
            self.0.pop_front()
        }
    }

    /// A denied open of `path` by pid 40, as the programs send it.
    fn denial(path: &str) -> Vec<u8> {
        let exe = b"/usr/bin/cat";
        let mut h = EventHeader {
            hook: hook::FILE_OPEN,
            decision: decision::DENY,
            reason: reason::RULE,
            pid: 40,
            tgid: 40,
            ppid: 1,
            uid: 1000,
            gid: 1000,
            rule: u32::from(sandbox_common::NO_RULE),
            access: 1,
            path_len: u32::try_from(path.len()).unwrap(),
            time_ns: 1,
            dev: 0x80_0001,
            exe_dev: 0x80_0001,
            exe_len: u32::try_from(exe.len()).unwrap(),
            ..EventHeader::default()
        };
        h.comm[..4].copy_from_slice(b"cat\0");
        // SAFETY: EventHeader is plain old data.
        let mut b = unsafe {
            std::slice::from_raw_parts(
                (&raw const h).cast::<u8>(),
                std::mem::size_of::<EventHeader>(),
            )
        }
        .to_vec();
        b.extend_from_slice(path.as_bytes());
        b.extend_from_slice(exe);
        b
    }

    /// The pipelined drain writes every record, in the order made, whichever thread
    /// encodes each batch: the writing thread, this one, or every other batch each.
    #[test]
    fn a_pipelined_drain_writes_every_record_in_order_whoever_encodes_it() {
        let policy = crate::audit::built_in_policy();
        let ids = crate::kernel::loader::Identities::default();
        let root = mounts::Superblock {
            dev: 0x80_0001,
            mount_point: "/".into(),
            fstype: "ext4".into(),
            dirs: Vec::new(),
        };
        let dir = std::env::temp_dir().join(format!("sandbox-pump-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let n = PIPELINE_BATCH * 9 + 5;
        let splits: [(&str, EncodeHere); 3] = [
            ("the writer", |_, _| false),
            ("the reader", |_, _| true),
            ("every other batch each", |_, batch| batch % 2 == 1),
        ];
        for (who, encode_here) in splits {
            let log = dir.join(format!("{}.jsonl", who.replace(' ', "-")));
            let mut audit =
                AuditFile::with_rotation(&log, u64::MAX, 1, &safepath::Agent::AnyNonRoot).unwrap();
            let mut pump = Pump::quiet(
                Formatter::new(&policy, vec![root.clone()], &ids).unwrap(),
                &mut audit,
            );
            let mut made = Made((0..n).map(|i| denial(&format!("/tmp/f{i}"))).collect());
            let done = pump
                .drain_pipelined(&mut made, usize::MAX, encode_here)
                .unwrap();
            assert_eq!(done, Some(true), "{who}");
            pump.flush().unwrap();
            drop(pump);
            let text = std::fs::read_to_string(&log).unwrap();
            let paths: Vec<String> = text
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    v["file"]["path"].as_str().unwrap().to_owned()
                })
                .collect();
            let want: Vec<String> = (0..n).map(|i| format!("/tmp/f{i}")).collect();
            assert_eq!(paths, want, "encoded by {who}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
