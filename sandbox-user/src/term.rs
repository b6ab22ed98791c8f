//! The terminal: human-readable lines on stderr that can never stop sandbox.
//!
//! While `sandbox run` or `sandbox attach` enforces, stderr may be a terminal stopped with
//! ctrl-S, a terminal of a background job (`SIGTTOU`), a pipe whose reader stopped reading
//! or died, or a terminal that hung up. A blocking write there would stall the event pump
//! (the ring buffer then fills and records are lost) or the teardown; a broken pipe would
//! kill it. So lines go through a bounded queue to a writer thread: when the queue is full
//! the line is dropped and counted, never waited for; when stderr fails for good the
//! writer drops everything after. The audit file is written by the pump itself and gets
//! every record regardless. Open file descriptions are shared with the command, so stderr
//! is never switched to non-blocking mode (that would break the command's own writes).
//!
//! Text from the kernel or the agent (paths, command names) goes through [`escape`]: no
//! terminal control bytes reach the terminal.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::os::fd::AsFd as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Lines queued for the terminal at most; past this, lines are dropped (and counted).
pub const QUEUE_LINES: usize = 1024;

struct Terminal {
    tx: Mutex<Option<SyncSender<Vec<u8>>>>,
    /// Lines queued and not yet written or dropped.
    pending: AtomicUsize,
    dropped: AtomicU64,
    /// stderr failed (broken pipe, hung-up terminal): nothing more is written.
    dead: AtomicBool,
}

static TERM: OnceLock<Terminal> = OnceLock::new();

/// stderr is the journal: lines carry a syslog level prefix (`<4>` for warnings, ...).
static JOURNAL: AtomicBool = AtomicBool::new(false);
/// The command's output is relayed to this terminal (`runtime::pty`): lines start with
/// an attribute reset, so that what the command left on (concealed text) does not hide
/// them.
static RELAYED: AtomicBool = AtomicBool::new(false);

/// Lines start with `CSI 0m` while `on`.
pub fn relayed(on: bool) {
    RELAYED.store(on, Ordering::Relaxed);
}

/// Lines get syslog level prefixes from now on (stderr is the journal, see
/// `host::systemd::stderr_is_journal`).
pub fn journal_levels() {
    JOURNAL.store(true, Ordering::Relaxed);
}

/// The syslog level of one of sandbox's lines, from how it starts.
fn level(text: &str) -> u8 {
    let body = text.strip_prefix("sandbox: ").unwrap_or(text);
    if body.starts_with("debug") || body.starts_with("trace") {
        7
    } else if body.starts_with("warning") {
        4
    } else if body.starts_with("denied") || body.starts_with("would deny") {
        5
    } else if body.starts_with("error")
        || body.starts_with("refusing")
        || body.starts_with("reload refused")
    {
        3
    } else {
        6
    }
}

/// Starts the writer thread; from now on [`line`] never blocks. Also makes sure that
/// writing to a terminal of a background job does not stop sandbox (`SIGTTOU`) and that a
/// closed pipe does not kill it (`SIGPIPE`): both are ignored, and the command gets the
/// default back before it starts (see `run`).
pub fn start() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: setting dispositions to SIG_IGN; no handler runs.
    unsafe {
        let _ = signal(Signal::SIGTTOU, SigHandler::SigIgn);
        let _ = signal(Signal::SIGPIPE, SigHandler::SigIgn);
    }
    TERM.get_or_init(|| {
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE_LINES);
        let spawned = std::thread::Builder::new()
            .name("sandbox-terminal".into())
            .spawn(move || {
                // TERM is set as soon as this closure returns; the thread may start first.
                let t = loop {
                    if let Some(t) = TERM.get() {
                        break t;
                    }
                    std::thread::yield_now();
                };
                for bytes in rx {
                    if t.dead.load(Ordering::Relaxed) || write_all(&bytes).is_err() {
                        t.dead.store(true, Ordering::Relaxed);
                        t.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    t.pending.fetch_sub(1, Ordering::Release);
                }
            });
        Terminal {
            tx: Mutex::new(spawned.ok().map(|_| tx)),
            pending: AtomicUsize::new(0),
            dropped: AtomicU64::new(0),
            dead: AtomicBool::new(false),
        }
    });
}

/// Writes `bytes` to stderr, retrying on interruption (and waiting when someone made the
/// descriptor non-blocking). Runs on the writer thread only: it may block there.
fn write_all(mut bytes: &[u8]) -> std::io::Result<()> {
    use nix::errno::Errno;
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let err = std::io::stderr();
    while !bytes.is_empty() {
        match nix::unistd::write(&err, bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let mut p = [PollFd::new(err.as_fd(), PollFlags::POLLOUT)];
                let _ = poll(&mut p, PollTimeout::NONE);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Shows one line on stderr (a newline is added). Never blocks once [`start`] ran; before
/// that (or in commands that do not enforce) it writes directly.
pub fn line(text: &str) {
    let mut bytes = Vec::with_capacity(text.len() + 4);
    if JOURNAL.load(Ordering::Relaxed) {
        bytes.extend_from_slice(format!("<{}>", level(text)).as_bytes());
    }
    if RELAYED.load(Ordering::Relaxed) {
        bytes.extend_from_slice(b"\x1b[0m");
    }
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(b'\n');
    let Some(t) = TERM.get() else {
        drop(write_all(&bytes));
        return;
    };
    let guard =
        t.tx.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some(tx) = guard.as_ref() else {
        t.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    };
    t.pending.fetch_add(1, Ordering::Acquire);
    match tx.try_send(bytes) {
        Ok(()) => {}
        Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
            t.pending.fetch_sub(1, Ordering::Release);
            t.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Lines dropped so far because the terminal did not keep up (or failed).
pub fn dropped() -> u64 {
    TERM.get().map_or(0, |t| t.dropped.load(Ordering::Relaxed))
}

/// Gives the writer up to `wait` to show what is queued, then says how many lines were
/// dropped (if any; that line may itself be dropped). Returns without waiting longer, so a
/// stopped terminal cannot hold up sandbox's exit.
pub fn finish(wait: Duration) {
    let Some(t) = TERM.get() else { return };
    let drain = |t: &Terminal, until: Instant| {
        while t.pending.load(Ordering::Acquire) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    drain(t, Instant::now() + wait);
    // Lines still queued now will not be shown either.
    let n = dropped() + t.pending.load(Ordering::Acquire) as u64;
    if n > 0 {
        line(&format!(
            "sandbox: {n} terminal line(s) dropped: stderr did not keep up (the audit log has \
             every record)"
        ));
        drain(t, Instant::now() + Duration::from_millis(100));
    }
}

/// Makes text from the kernel or the agent safe to show on a terminal: C0 controls
/// (including ESC, newline, tab), DEL and C1 controls become `\xNN` / `\u{NN}`, as do the
/// Unicode direction overrides that make a line read differently from what it says;
/// backslashes are doubled so the result is unambiguous. Everything else is unchanged.
pub fn escape(s: &str) -> Cow<'_, str> {
    let needs = |c: char| {
        c == '\\'
            || c.is_ascii_control()
            || ('\u{80}'..='\u{9f}').contains(&c)
            || is_bidi_control(c)
    };
    if !s.chars().any(needs) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if c.is_ascii_control() {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else if needs(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Unicode formatting characters that reorder how a line is displayed (Trojan Source).
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_control_bytes_are_escaped() {
        let cases: &[(&str, &str)] = &[
            ("/home/u/file.txt", "/home/u/file.txt"),
            (
                "/tmp/\x1b[2J\x1b]0;owned\x07",
                "/tmp/\\x1b[2J\\x1b]0;owned\\x07",
            ),
            ("a\nb\rc\td", "a\\x0ab\\x0dc\\x09d"),
            ("del\x7f", "del\\x7f"),
            ("nul\0", "nul\\x00"),
            // C1: CSI (U+009B) and OSC (U+009D) as characters.
            ("c1\u{9b}31m\u{9d}x", "c1\\u{9b}31m\\u{9d}x"),
            ("rtl\u{202e}txt.exe", "rtl\\u{202e}txt.exe"),
            ("back\\slash", "back\\\\slash"),
            ("ünïcødé ✓", "ünïcødé ✓"),
            ("lossy \u{fffd}", "lossy \u{fffd}"),
        ];
        for (input, want) in cases {
            assert_eq!(escape(input), *want, "{input:?}");
        }
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        // Nothing that a terminal interprets survives, for every char below U+00A0.
        for c in (0u32..0xa0).filter_map(char::from_u32) {
            let e = escape(&c.to_string()).into_owned();
            assert!(
                e.chars().all(|x| (' '..='~').contains(&x)),
                "{c:?} -> {e:?}"
            );
        }
    }
}
