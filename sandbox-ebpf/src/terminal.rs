//! Terminals. A confined process may open a pty's terminal side (a devpts slave,
//! `/dev/pts/N`) only when the pty was made in the sandbox (a confined process opened
//! `/dev/ptmx`: tmux, `script`, an editor's terminal) or is sandbox's own (the command's
//! terminal, marked by the loader through its descriptor). Every other terminal on the
//! host, of this user or another, in this devpts or any other, is refused: an open
//! terminal is the keyboard and screen of someone's shell, and what is written to it is
//! drawn there (a clipboard write, a title answered into the shell's input), what is read
//! from it is what they type. So are the virtual consoles (a console login makes its VT
//! the user's), what they show (`/dev/vcs*`), `/dev/console` and the 8250 serial ports,
//! unless given to the command (`--terminal direct` on a console).
//!
//! Invariants:
//! - A pty's slave inode is bound to its dentry by `devpts_pty_new`, in the task that opened
//!   `/dev/ptmx`, through `security_d_instantiate`: the `d_instantiate` program marks it
//!   there when that task is in scope (`own.rs`: the mark lives and dies with the inode, so
//!   a pty number used again, a new inode, starts unmarked; each set of programs has its
//!   own marks, so a run's confined processes never open another run's ptys either).

use sandbox_common::KernelOffsets;
use sandbox_common::decide::imode;

use crate::kread;

/// `DEVPTS_SUPER_MAGIC` (include/uapi/linux/magic.h).
const DEVPTS_SUPER_MAGIC: u64 = 0x1cd1;
/// devpts numbers its inodes: 1 the root, 2 `ptmx`, a pty's slave its index + 3.
const FIRST_SLAVE_INO: u64 = 3;

/// The kernel's device numbers: 12 bits of major above 20 of minor (`MINORBITS`).
const MINOR_BITS: u32 = 20;
/// `TTY_MAJOR`: the virtual consoles (`/dev/tty0`-`63`: a console login's keyboard and
/// screen) and the 8250 serial ports (`/dev/ttyS*`, a serial console).
const TTY_MAJOR: u32 = 4;
/// `TTYAUX_MAJOR` minor 1: `/dev/console` (minor 0 is `/dev/tty`, the caller's own
/// controlling terminal; minor 2 `/dev/ptmx`, a new pty).
const TTYAUX_MAJOR: u32 = 5;
const CONSOLE_MINOR: u32 = 1;
/// `VCS_MAJOR`: `/dev/vcs*`, `/dev/vcsa*`, `/dev/vcsu*`: what a virtual console shows.
const VCS_MAJOR: u32 = 7;

/// `inode` (typed by the verifier), a character device bound to `dentry`, is a terminal
/// that is someone's: a pty's slave (the kernel opens one only through its devpts name),
/// a virtual console (or what it shows), the console, a serial port of the 8250 driver,
/// the last three also through a node of their number made elsewhere (`mknod`).
#[inline(always)]
pub fn is_terminal(dentry: *const u8, inode: *const u8, off: &KernelOffsets) -> bool {
    if is_slave(dentry, inode, off) {
        return true;
    }
    let rdev: u32 = kread::field(inode, off.inode_i_rdev).unwrap_or(0);
    let (major, minor) = (rdev >> MINOR_BITS, rdev & ((1 << MINOR_BITS) - 1));
    major == TTY_MAJOR || major == VCS_MAJOR || (major == TTYAUX_MAJOR && minor == CONSOLE_MINOR)
}

/// `inode` (typed by the verifier), bound to `dentry`, is a pty's slave.
#[inline(always)]
pub fn is_slave(dentry: *const u8, inode: *const u8, off: &KernelOffsets) -> bool {
    let mode: u16 = kread::field(inode, off.inode_i_mode).unwrap_or(0);
    if !imode::is_chr(mode) {
        return false;
    }
    let sb: *const u8 = kread::field(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    let magic: u64 = kread::field(sb, off.super_block_s_magic).unwrap_or(0);
    let ino: u64 = kread::field(inode, off.inode_i_ino).unwrap_or(0);
    magic == DEVPTS_SUPER_MAGIC && ino >= FIRST_SLAVE_INO
}
