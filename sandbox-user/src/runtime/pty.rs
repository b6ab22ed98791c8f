//! The command's terminal: a pty of sandbox's own between the command and the user's
//! terminal (`--terminal pty`, the default whenever 0, 1 or 2 is a terminal).
//!
//! Given the user's terminal itself, the command could write escape sequences to the
//! terminal emulator: set the clipboard (OSC 52, pasted later into a shell outside the
//! sandbox), have files written by the emulator (iTerm2's OSC 1337 `File=`, kitty's OSC
//! 5113), have the emulator answer with text it chose into the input queue that the shell
//! reads once sandbox exits (the window title report, DECRQSS), or wrap any of that for an
//! outer multiplexer (tmux's DCS passthrough). With a pty in between, the command's
//! terminal is the pty's slave (its controlling terminal: `/dev/tty`, job control and
//! window size work as on a terminal), sandbox copies keys from the user's terminal (in
//! raw mode while the command runs) to the pty, and the pty's output to the user's terminal
//! through [`Filter`], which passes text, colours, cursor movement and the common
//! sequences, and drops the rest. The user's terminal device is denied to the command by
//! path (`files.deny (implicit: the terminal sandbox was started from)`).
//!
//! The copying runs on two threads of their own: a terminal stopped with ctrl-S blocks the
//! output thread (and then the command's writes, as the terminal itself would), never the
//! event pump. The input thread reads only while the command runs: keys typed after it
//! ended stay in the terminal for the shell.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// The rule that denies the user's terminal device to the command. The fallback backend
/// leaves it out: a Landlock hole for it would split `/dev/pts` (the ptys the command makes
/// later could not be opened by path), and with `--terminal pty` the command has no
/// descriptor of the terminal to begin with.
pub const TERMINAL_RULE: &str = "files.deny (implicit: the terminal sandbox was started from)";

/// How the command gets the terminal sandbox was started from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TerminalMode {
    /// A pty of sandbox's own, its output filtered (default).
    Pty,
    /// The terminal itself, unfiltered.
    Direct,
}

/// The pty and the threads that copy between it and the user's terminal.
pub struct Pty {
    master: OwnedFd,
    /// Given to the command (dropped in sandbox once it is spawned).
    slave: Option<OwnedFd>,
    /// Which of 0, 1, 2 were the user's terminal: the command gets the slave there.
    on: [bool; 3],
    /// A descriptor of the user's terminal to write the output to (1 if it is the
    /// terminal, else 2) and to read the window size from.
    out: RawFd,
    /// The terminal's mode before sandbox made it raw; restored at the end.
    saved: Option<libc::termios>,
    /// The user's terminal's device (`/dev/pts/N`), denied to the command by path.
    pub device: Option<PathBuf>,
    /// Written to when the input thread must stop reading.
    stop: Option<OwnedFd>,
    input: Option<std::thread::JoinHandle<()>>,
    /// Says when the output thread has copied everything (the slave's last holder closed).
    output_done: Option<mpsc::Receiver<()>>,
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn is_terminal(fd: RawFd) -> bool {
    // SAFETY: plain syscall.
    unsafe { libc::isatty(fd) == 1 }
}

impl Pty {
    /// A pty for the command when any of 0, 1, 2 is a terminal (`None` otherwise), with the
    /// terminal's mode and window size; its slave owned by `owner` (uid, gid), the user the
    /// command runs as, as a login's terminal is.
    pub fn open(owner: Option<(u32, u32)>) -> io::Result<Option<Self>> {
        let on = [0, 1, 2].map(is_terminal);
        let Some(first) = (0..3).find(|&fd: &RawFd| on[fd.unsigned_abs() as usize]) else {
            return Ok(None);
        };
        let out = if on[1] {
            1
        } else if on[2] {
            2
        } else {
            first
        };
        // SAFETY: termios and winsize are plain data filled by the calls.
        let (mut mode, size) = unsafe {
            let mut mode: libc::termios = std::mem::zeroed();
            check(libc::tcgetattr(first, &raw mut mode))?;
            let mut size: libc::winsize = std::mem::zeroed();
            check(libc::ioctl(first, libc::TIOCGWINSZ, &raw mut size))?;
            (mode, size)
        };
        // ctrl-Z reaches the command as a key: a command stopped inside a pty that
        // sandbox keeps copying would look like a hang (sandbox does not stop with it).
        mode.c_cc[libc::VSUSP] = 0;
        // SAFETY: plain syscalls; the descriptors are owned from here on.
        let (master, slave) = unsafe {
            let m = check(libc::posix_openpt(
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            ))?;
            let master = OwnedFd::from_raw_fd(m);
            check(libc::grantpt(m))?;
            check(libc::unlockpt(m))?;
            let mut name = [0 as libc::c_char; 64];
            let r = libc::ptsname_r(m, name.as_mut_ptr(), name.len());
            if r != 0 {
                return Err(io::Error::from_raw_os_error(r));
            }
            let s = check(libc::open(
                name.as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            ))?;
            (master, OwnedFd::from_raw_fd(s))
        };
        let s = slave.as_raw_fd();
        // SAFETY: plain syscalls on our descriptor with initialised arguments.
        unsafe {
            check(libc::tcsetattr(s, libc::TCSANOW, &raw const mode))?;
            check(libc::ioctl(s, libc::TIOCSWINSZ, &raw const size))?;
            if let Some((uid, gid)) = owner {
                check(libc::fchown(s, uid, gid))?;
                check(libc::fchmod(s, 0o620))?;
            }
        }
        let device = std::fs::read_link(format!("/proc/self/fd/{first}"))
            .ok()
            .filter(|p| p.starts_with("/dev/"));
        Ok(Some(Self {
            master,
            slave: Some(slave),
            on,
            out,
            saved: None,
            device,
            stop: None,
            input: None,
            output_done: None,
        }))
    }

    /// What the command's side needs between fork and exec: the slave and where it goes.
    pub fn for_child(&self) -> Option<ChildTerminal> {
        self.slave.as_ref().map(|s| ChildTerminal {
            slave: s.as_raw_fd(),
            on: self.on,
        })
    }

    /// Once the command is spawned: sandbox closes its copy of the slave, makes the
    /// user's terminal raw (when sandbox reads it: 0 is the terminal and sandbox's job is
    /// in the foreground) and starts copying.
    pub fn start(&mut self) -> io::Result<()> {
        self.slave = None;
        // SAFETY: plain syscalls.
        let foreground = self.on[0] && unsafe { libc::tcgetpgrp(0) == libc::getpgrp() };
        if foreground {
            // SAFETY: termios is plain data filled by the call.
            let mut mode: libc::termios = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            check(unsafe { libc::tcgetattr(0, &raw mut mode) })?;
            let mut raw = mode;
            // SAFETY: modifies the copy only.
            unsafe { libc::cfmakeraw(&raw mut raw) };
            // SAFETY: plain syscall with an initialised termios.
            check(unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw const raw) })?;
            self.saved = Some(mode);
            // sandbox's own lines on stderr need their carriage return if it is a terminal
            // (the same one, as a rule).
            crate::term::raw(is_terminal(2));
            let (r, w) = pipe()?;
            self.stop = Some(w);
            let master = self.master.as_raw_fd();
            self.input = Some(
                std::thread::Builder::new()
                    .name("sandbox-pty-in".into())
                    .spawn(move || copy_input(&r, master))?,
            );
        }
        let (tx, rx) = mpsc::channel();
        let (master, out) = (self.master.as_raw_fd(), self.out);
        std::thread::Builder::new()
            .name("sandbox-pty-out".into())
            .spawn(move || {
                copy_output(master, out);
                let _ = tx.send(());
            })?;
        self.output_done = Some(rx);
        Ok(())
    }

    /// The user's terminal changed size: so does the pty (the kernel tells the command's
    /// foreground group with `SIGWINCH`).
    pub fn resize(&self) {
        // SAFETY: winsize is plain data; plain ioctls on open descriptors.
        unsafe {
            let mut size: libc::winsize = std::mem::zeroed();
            if libc::ioctl(self.out, libc::TIOCGWINSZ, &raw mut size) == 0 {
                libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &raw const size);
            }
        }
    }

    /// Once the command and everything it left are gone: stops reading keys, lets the
    /// output already made reach the terminal (up to `wait`: a terminal stopped with
    /// ctrl-S is not waited for), gives the terminal its mode back.
    pub fn finish(&mut self, wait: Duration) {
        if let Some(w) = self.stop.take() {
            // SAFETY: one byte to our own pipe.
            unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) };
            if let Some(t) = self.input.take() {
                let _ = t.join();
            }
        }
        if let Some(rx) = self.output_done.take() {
            let _ = rx.recv_timeout(wait);
        }
        self.restore();
    }

    fn restore(&mut self) {
        if let Some(mode) = self.saved.take() {
            // SAFETY: plain syscall with the termios read at the start.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw const mode) };
            crate::term::raw(false);
        }
    }
}

impl Drop for Pty {
    /// An error on the way out still gives the terminal its mode back.
    fn drop(&mut self) {
        if let Some(w) = self.stop.take() {
            // SAFETY: one byte to our own pipe.
            unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        }
        self.restore();
    }
}

/// The slave's descriptor and which of 0, 1, 2 it replaces, for the child.
#[derive(Clone, Copy)]
pub struct ChildTerminal {
    slave: RawFd,
    on: [bool; 3],
}

impl ChildTerminal {
    /// Makes the slave the controlling terminal of the command's new session and its 0, 1,
    /// 2 where those were the user's terminal. Async-signal-safe.
    ///
    /// # Safety
    /// Call only in the child of a fork, before exec, after `setsid`.
    pub unsafe fn attach(self) -> io::Result<()> {
        // SAFETY: plain syscalls on descriptors inherited from the parent.
        unsafe {
            check(libc::ioctl(self.slave, libc::TIOCSCTTY, 0))?;
            for (fd, on) in (0..).zip(self.on) {
                if on {
                    check(libc::dup2(self.slave, fd))?;
                }
            }
        }
        Ok(())
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: plain syscall filling `fds`.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: both descriptors are new and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Writes all of `bytes` to `fd`, waiting when it is non-blocking and full.
fn write_all(fd: RawFd, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => {
                    let mut p = libc::pollfd {
                        fd,
                        events: libc::POLLOUT,
                        revents: 0,
                    };
                    // SAFETY: one pollfd.
                    unsafe { libc::poll(&raw mut p, 1, -1) };
                    continue;
                }
                _ => return Err(e),
            }
        }
        bytes = &bytes[n.cast_unsigned()..];
    }
    Ok(())
}

/// Keys from the user's terminal (0) to the pty, until `stop` is written to.
fn copy_input(stop: &OwnedFd, master: RawFd) {
    let mut buf = [0u8; 4096];
    loop {
        let mut p = [
            libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: two pollfds.
        if unsafe { libc::poll(p.as_mut_ptr(), 2, -1) } < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        if p[1].revents != 0 {
            return;
        }
        if p[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
            && p[0].revents & libc::POLLIN == 0
        {
            return;
        }
        // SAFETY: reads into a live buffer.
        let n = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR | libc::EAGAIN) => continue,
                _ => return,
            }
        }
        if n == 0 || write_all(master, &buf[..n.cast_unsigned()]).is_err() {
            return;
        }
    }
}

/// The pty's output to the user's terminal through [`Filter`], until every holder of the
/// slave has closed it (`EIO`).
fn copy_output(master: RawFd, out: RawFd) {
    let mut buf = [0u8; 8192];
    let mut filter = Filter::default();
    let mut passed = Vec::with_capacity(buf.len());
    let mut told = 0u32;
    loop {
        // SAFETY: reads into a live buffer.
        let n = unsafe { libc::read(master, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break;
        }
        if n == 0 {
            break;
        }
        passed.clear();
        filter.feed(&buf[..n.cast_unsigned()], &mut passed);
        if write_all(out, &passed).is_err() {
            // The terminal is gone: keep reading so that the command is not blocked.
            continue;
        }
        for kind in Dropped::ALL {
            if filter.dropped & kind.bit() != 0 && told & kind.bit() == 0 {
                told |= kind.bit();
                crate::term::line(&format!(
                    "sandbox: the command wrote {} to the terminal: not passed on",
                    kind.what()
                ));
            }
        }
    }
}

/// The kinds of escape sequences [`Filter`] drops, as named to the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
    /// OSC 52: sets (or reads) the clipboard.
    Clipboard,
    /// Any other OSC but the allowed ones (file transfers, fonts, notifications).
    Osc,
    /// DCS, APC, PM, SOS strings (DECRQSS, terminal capability queries, tmux passthrough,
    /// graphics).
    String,
    /// `CSI ... t`: window manipulation and reports (the title report answers text the
    /// command chose into the input queue).
    Window,
    /// `ESC Z` and over-long sequences.
    Other,
}

impl Dropped {
    const ALL: [Self; 5] = [
        Self::Clipboard,
        Self::Osc,
        Self::String,
        Self::Window,
        Self::Other,
    ];

    fn bit(self) -> u32 {
        1 << self as u32
    }

    fn what(self) -> &'static str {
        match self {
            Self::Clipboard => "an escape sequence that sets the clipboard (OSC 52)",
            Self::Osc => {
                "an operating system command escape sequence (OSC) other than titles, colours, links and prompt marks"
            }
            Self::String => {
                "a device control string (DCS, APC, PM or SOS: queries, passthrough, graphics)"
            }
            Self::Window => "a window manipulation or report sequence (CSI ... t)",
            Self::Other => "an identification request or an over-long escape sequence",
        }
    }
}

/// OSC numbers passed on: titles (0-2), colours and their resets (4, 10-12, 104, 110-112),
/// the working directory (7), hyperlinks (8), prompt marks (133).
const OSC_ALLOWED: &[u32] = &[0, 1, 2, 4, 7, 8, 10, 11, 12, 104, 110, 111, 112, 133];
/// A control sequence longer than this is dropped whole.
const CSI_MAX: usize = 64;
/// An OSC longer than this is dropped whole (a hyperlink with a long URL fits).
const OSC_MAX: usize = 4096;

#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    #[default]
    Ground,
    Esc,
    /// `ESC` and an intermediate byte (`(`, `#`, ...): one more byte ends it.
    EscIntermediate,
    Csi,
    Osc,
    /// In an OSC, after `ESC` (a string terminator `ESC \` if `\` follows).
    OscEsc,
    /// A DCS, APC, PM or SOS string: dropped to its terminator.
    Str,
    StrEsc,
}

/// A streaming filter of terminal output: text and allowed sequences pass, the others are
/// dropped (recorded in `dropped`, a bit per [`Dropped`] kind). Sequences split across
/// reads are held until complete.
#[derive(Default)]
pub struct Filter {
    state: State,
    /// The sequence being collected (from its `ESC`).
    seq: Vec<u8>,
    /// Set when the sequence being collected is already judged dropped (too long).
    dropping: bool,
    /// Continuation bytes the UTF-8 character being passed still has.
    utf8_left: u8,
    /// A `0xC2` held back: followed by `0x80..=0x9F` it encodes a C1 control.
    held_c2: bool,
    pub dropped: u32,
}

impl Filter {
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        for &b in input {
            self.byte(b, out);
        }
    }

    fn drop_seq(&mut self, kind: Dropped) {
        self.dropped |= kind.bit();
        self.seq.clear();
        self.dropping = false;
        self.state = State::Ground;
    }

    fn pass_seq(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.seq);
        self.seq.clear();
        self.state = State::Ground;
    }

    fn byte(&mut self, b: u8, out: &mut Vec<u8>) {
        match self.state {
            State::Ground => self.ground(b, out),
            State::Esc => {
                self.seq.push(b);
                match b {
                    b'[' => self.state = State::Csi,
                    b']' => self.state = State::Osc,
                    b'P' | b'_' | b'^' | b'X' => self.state = State::Str,
                    // DECID: the terminal answers.
                    b'Z' => self.drop_seq(Dropped::Other),
                    0x20..=0x2f => self.state = State::EscIntermediate,
                    // ESC ESC: the first is dropped, the second starts again.
                    0x1b => {
                        self.seq.clear();
                        self.seq.push(b);
                    }
                    _ => self.pass_seq(out),
                }
            }
            State::EscIntermediate => {
                self.seq.push(b);
                if !(0x20..=0x2f).contains(&b) {
                    self.pass_seq(out);
                } else if self.seq.len() > CSI_MAX {
                    self.drop_seq(Dropped::Other);
                }
            }
            State::Csi => {
                self.seq.push(b);
                match b {
                    0x40..=0x7e => {
                        if self.dropping {
                            self.drop_seq(Dropped::Other);
                        } else if b == b't' {
                            self.drop_seq(Dropped::Window);
                        } else {
                            self.pass_seq(out);
                        }
                    }
                    // CAN and SUB abort a sequence.
                    0x18 | 0x1a => {
                        self.seq.clear();
                        self.state = State::Ground;
                        self.dropping = false;
                    }
                    0x1b => {
                        // A new sequence starts: the unfinished one is dropped.
                        self.dropped |= Dropped::Other.bit();
                        self.seq.clear();
                        self.seq.push(b);
                        self.dropping = false;
                        self.state = State::Esc;
                    }
                    _ => {
                        if self.seq.len() > CSI_MAX {
                            // Keep consuming to the final byte, then drop.
                            self.dropping = true;
                            self.seq.truncate(2);
                        }
                    }
                }
            }
            State::Osc => match b {
                0x07 => {
                    self.seq.push(b);
                    self.end_osc(out);
                }
                0x1b => self.state = State::OscEsc,
                0x18 | 0x1a => {
                    self.seq.clear();
                    self.dropping = false;
                    self.state = State::Ground;
                }
                _ => {
                    self.seq.push(b);
                    if self.seq.len() > OSC_MAX {
                        self.dropping = true;
                        self.seq.truncate(2);
                    }
                }
            },
            State::OscEsc => {
                if b == b'\\' {
                    self.seq.extend_from_slice(b"\x1b\\");
                    self.end_osc(out);
                } else {
                    // Not a terminator: the OSC ends unfinished (dropped), a new escape
                    // starts.
                    self.dropped |= Dropped::Osc.bit();
                    self.seq.clear();
                    self.dropping = false;
                    self.seq.push(0x1b);
                    self.state = State::Esc;
                    self.byte(b, out);
                }
            }
            State::Str => match b {
                0x1b => self.state = State::StrEsc,
                // Ended by ST only (a BEL inside is data); CAN and SUB abort.
                0x18 | 0x1a => self.drop_seq(Dropped::String),
                _ => {}
            },
            State::StrEsc => {
                if b == b'\\' {
                    self.drop_seq(Dropped::String);
                } else {
                    // tmux and screen passthrough double the ESC inside: still inside.
                    self.state = State::Str;
                }
            }
        }
    }

    /// Text. C1 controls (CSI, OSC, DCS, ... as one byte, `0x80..=0x9F`) are dropped, both
    /// as bytes outside a UTF-8 character (a terminal not in UTF-8 mode takes `0x9D` for
    /// OSC) and as code points (`U+0080..=U+009F`, encoded `0xC2 0x80..=0x9F`, which some
    /// terminals act on): the filter would not see the sequence they start. UTF-8 text
    /// passes whole.
    fn ground(&mut self, b: u8, out: &mut Vec<u8>) {
        if self.held_c2 {
            self.held_c2 = false;
            if (0x80..=0x9f).contains(&b) {
                self.dropped |= Dropped::Other.bit();
                return;
            }
            out.push(0xc2);
            if (0xa0..=0xbf).contains(&b) {
                out.push(b);
                return;
            }
        }
        if self.utf8_left > 0 {
            if (0x80..=0xbf).contains(&b) {
                self.utf8_left -= 1;
                out.push(b);
                return;
            }
            self.utf8_left = 0;
        }
        match b {
            0x1b => {
                self.seq.clear();
                self.seq.push(b);
                self.state = State::Esc;
            }
            0x80..=0x9f => self.dropped |= Dropped::Other.bit(),
            0xc2 => self.held_c2 = true,
            0xc3..=0xdf => {
                self.utf8_left = 1;
                out.push(b);
            }
            0xe0..=0xef => {
                self.utf8_left = 2;
                out.push(b);
            }
            0xf0..=0xf4 => {
                self.utf8_left = 3;
                out.push(b);
            }
            _ => out.push(b),
        }
    }

    /// An OSC is complete (in `seq`, from `ESC ]` to its terminator): passed on if its
    /// number is allowed.
    fn end_osc(&mut self, out: &mut Vec<u8>) {
        if self.dropping {
            self.drop_seq(Dropped::Osc);
            return;
        }
        let body = &self.seq[2..];
        let digits: Vec<u8> = body
            .iter()
            .copied()
            .take_while(u8::is_ascii_digit)
            .collect();
        let number = std::str::from_utf8(&digits)
            .ok()
            .and_then(|d| d.parse::<u32>().ok());
        let terminated = matches!(body.get(digits.len()), Some(b';' | 0x07 | 0x1b));
        match number {
            Some(52) => self.drop_seq(Dropped::Clipboard),
            Some(n) if terminated && OSC_ALLOWED.contains(&n) => self.pass_seq(out),
            _ => self.drop_seq(Dropped::Osc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (Vec<u8>, u32) {
        let mut f = Filter::default();
        let mut out = Vec::new();
        f.feed(input, &mut out);
        (out, f.dropped)
    }

    /// The same input fed a byte at a time: sequences split across reads.
    fn run_split(input: &[u8]) -> (Vec<u8>, u32) {
        let mut f = Filter::default();
        let mut out = Vec::new();
        for b in input {
            f.feed(std::slice::from_ref(b), &mut out);
        }
        (out, f.dropped)
    }

    #[test]
    fn text_colours_and_cursor_pass() {
        let s = b"plain \x1b[1;31mred\x1b[0m \x1b[2J\x1b[H\x1b[?1049h\x1b[6n\x1b(B\x1b7\x1b8 \xc3\xa9\r\n";
        assert_eq!(run(s), (s.to_vec(), 0));
        assert_eq!(run_split(s), (s.to_vec(), 0));
    }

    #[test]
    fn titles_links_and_colours_pass() {
        let s = b"\x1b]0;my title\x07\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\\x1b]11;?\x07\x1b]133;A\x07";
        assert_eq!(run(s), (s.to_vec(), 0));
        assert_eq!(run_split(s), (s.to_vec(), 0));
    }

    #[test]
    fn clipboard_is_dropped() {
        for s in [
            &b"a\x1b]52;c;ZWNobyBwd25lZA==\x07b"[..],
            b"a\x1b]52;c;ZWNobyBwd25lZA==\x1b\\b",
            b"a\x1b]52;c;?\x07b",
        ] {
            assert_eq!(run(s), (b"ab".to_vec(), Dropped::Clipboard.bit()), "{s:?}");
            assert_eq!(run_split(s), (b"ab".to_vec(), Dropped::Clipboard.bit()));
        }
    }

    #[test]
    fn other_oscs_strings_and_window_ops_are_dropped() {
        let cases: [(&[u8], Dropped); 8] = [
            (b"a\x1b]1337;File=name=eA==:eA==\x07b", Dropped::Osc),
            (b"a\x1b]5113;ac=send\x1b\\b", Dropped::Osc),
            (b"a\x1b]50;?\x07b", Dropped::Osc),
            (b"a\x1bP$qm\x1b\\b", Dropped::String),
            (b"a\x1bPtmux;\x1b\x1b]52;c;eA==\x07\x1b\\b", Dropped::String),
            (b"a\x1b_Gf=100;AAAA\x1b\\b", Dropped::String),
            (b"a\x1b[21tb", Dropped::Window),
            (b"a\x1bZb", Dropped::Other),
        ];
        for (s, kind) in cases {
            assert_eq!(run(s), (b"ab".to_vec(), kind.bit()), "{s:?}");
            assert_eq!(run_split(s), (b"ab".to_vec(), kind.bit()), "{s:?}");
        }
    }

    #[test]
    fn over_long_sequences_are_dropped_whole() {
        let mut s = b"a\x1b[".to_vec();
        s.extend(std::iter::repeat_n(b'1', 500));
        s.extend_from_slice(b"mb");
        assert_eq!(run(&s), (b"ab".to_vec(), Dropped::Other.bit()));
        let mut s = b"a\x1b]0;".to_vec();
        s.extend(std::iter::repeat_n(b'x', OSC_MAX + 10));
        s.extend_from_slice(b"\x07b");
        assert_eq!(run(&s), (b"ab".to_vec(), Dropped::Osc.bit()));
    }

    #[test]
    fn c1_controls_are_dropped_and_utf8_passes() {
        // 0x9D is OSC to a terminal not in UTF-8 mode; U+009D (C2 9D) to some in it.
        for s in [&b"a\x9d52;c;eA==\x07b"[..], b"a\xc2\x9d52;c;eA==\x07b"] {
            let (out, dropped) = run(s);
            assert_eq!(dropped, Dropped::Other.bit(), "{s:?}");
            assert!(!out.contains(&0x9d), "{out:?}");
            assert_eq!(run_split(s), (out.clone(), dropped));
        }
        // Text whose characters have 0x80-0x9F continuation bytes, and a non-breaking space
        // (C2 A0).
        let text = "ŝ ĝ 日本 \u{a0} é 🦀".as_bytes();
        assert_eq!(run(text), (text.to_vec(), 0));
        assert_eq!(run_split(text), (text.to_vec(), 0));
    }

    #[test]
    fn an_unterminated_osc_cut_by_a_new_escape_is_dropped() {
        let (out, dropped) = run(b"a\x1b]52;c;eA==\x1b[1mb");
        assert_eq!(out, b"a\x1b[1mb");
        assert_eq!(dropped, Dropped::Osc.bit());
    }
}
