//! sandbox's own diagnostics (not the audit records): `tracing` events, shown as
//! `sandbox: warning: ...` / `sandbox: debug: ...` lines through [`term`] (so they never
//! block the event pump, and carry syslog levels when stderr is the journal).
//!
//! Which are shown: `SANDBOX_LOG`, in `tracing`'s filter syntax (`debug`,
//! `sandbox_user::kernel=debug,info`); warnings and errors by default. `SANDBOX_DEBUG=1`
//! is the older spelling of `SANDBOX_LOG=debug`.

use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::term;

/// The environment variable with the filter.
pub const ENV: &str = "SANDBOX_LOG";

/// Installs the subscriber (once; later calls do nothing). A filter that does not parse
/// is reported and the default used.
pub fn init() {
    let spec = std::env::var(ENV).ok().or_else(|| {
        std::env::var_os("SANDBOX_DEBUG")
            .is_some()
            .then(|| "debug".to_owned())
    });
    let (filter, bad) = match spec.as_deref().map(EnvFilter::try_new) {
        None => (EnvFilter::new("warn"), None),
        Some(Ok(f)) => (f, None),
        Some(Err(e)) => (EnvFilter::new("warn"), Some(e)),
    };
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(TermLayer)
        .try_init();
    if let Some(e) = bad {
        tracing::warn!("{ENV}: {e}; showing warnings and errors only");
    }
}

/// Whether debug diagnostics are shown (for work done only to report them).
pub fn debug_on() -> bool {
    tracing::enabled!(target: "sandbox_user", Level::DEBUG)
}

/// The target of the programs' own diagnostics (aya-log): `SANDBOX_LOG=sandbox_bpf=debug`.
pub const KERNEL_TARGET: &str = "sandbox_bpf";

/// Whether the programs log their fail-closed decisions (off by default: only when
/// `sandbox_bpf` debug diagnostics are asked for).
pub fn kernel_log_on() -> bool {
    tracing::enabled!(target: "sandbox_bpf", Level::DEBUG)
}

/// Passes the programs' records (aya-log, through the `log` facade) on as debug
/// diagnostics of target [`KERNEL_TARGET`].
pub struct KernelLog;

impl log::Log for KernelLog {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        tracing::debug!(target: "sandbox_bpf", "bpf: {}", record.args());
    }

    fn flush(&self) {}
}

/// Writes each event as one line: `sandbox: LEVEL: message key=value ...`.
struct TermLayer;

impl<S: Subscriber> Layer<S> for TermLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            Level::INFO => "",
            Level::DEBUG => "debug: ",
            Level::TRACE => "trace: ",
        };
        let mut v = Line(String::new());
        event.record(&mut v);
        // Messages carry names the agent chose (paths, mount points, host names, and the
        // programs' own lines): one line, with no control bytes, whatever they hold.
        term::line(&format!("sandbox: {level}{}", term::escape(&v.0)));
    }
}

/// The message first, then the other fields as `key=value`.
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let rest = std::mem::take(&mut self.0);
            let _ = write!(self.0, "{value:?}{rest}");
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}
