//! The sandbox's boundary with everything else on the host, in the kernel.
//! - Self-protection: an in-scope process may not undo enforcement or touch sandbox: no
//!   `bpf()` at all (no detaching, no map writes, no new programs), no signals or ptrace to
//!   sandbox's own processes, no mounts.
//! - Other processes (Landlock's scoping): no ptrace in any form (attach, `/proc/PID/mem`,
//!   `environ`, `fd`, `process_vm_*`, `pidfd_getfd`: all pass `ptrace_access_check`), no
//!   signals other than 0, no changes to scheduling, I/O priority or memory placement of a
//!   process outside the sandbox.
//! - Kernel keys: no key or keyring used or made (`keyctl`, `add_key`, `request_key`,
//!   `/proc/keys`) but the kernel's own, as Docker's default seccomp profile refuses those
//!   calls: the user and persistent keyrings are every process of the user's (a
//!   `KEYRING:` Kerberos credential cache holds the user's tickets there).
//! - The terminal: no ioctl that injects input (`TIOCSTI`, `TIOCLINUX`).
//! - btrfs: no subvolume or snapshot made or removed by ioctl (they bypass the name hooks).
//! - The kernel (the second layer under the capabilities a root command loses): no
//!   unmounting, no child started into a cgroup of its choice (`clone3(CLONE_INTO_CGROUP)`),
//!   no kernel modules or kexec images, no operation on the kernel's lockdown list (one hook:
//!   `/dev/mem`, `/dev/port`, I/O ports, MSRs, kprobes, BPF reads of kernel memory,
//!   hibernation, ...), no resource limits set on processes outside.
//!
//! The whole policy's mode decides audit vs enforce.

use sandbox_common::decide::Deny;
use sandbox_common::{errno, hook, reason};

use super::{finish, hook, names};
use crate::event::Report;
use crate::kread;
use crate::maps;
use crate::scope::{self, Scope};

/// `PTRACE_MODE_NOAUDIT` (include/linux/ptrace.h): the caller asks for no audit record
/// (e.g. `/proc/PID/stat` fields that `ps` reads for every process).
const PTRACE_MODE_NOAUDIT: u32 = 0x04;
/// `clone3`'s flag to start the child in a cgroup of the caller's choice (uapi/linux/sched.h).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// `READING_FIRMWARE` / `LOADING_FIRMWARE` (include/linux/kernel_read_file.h): a driver's
/// firmware, loaded in the context of whichever task made the device ask for it.
const FIRMWARE: u32 = 1;
/// Terminal ioctls that push bytes into a terminal's input (include/uapi/asm-generic/ioctls.h).
const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541C;
/// A file's owner, whom its `SIGIO` goes to: by ioctl (both read it from the caller's
/// memory after the hook, so they are refused whatever they name), and by `fcntl`.
const FIOSETOWN: u32 = 0x8901;
const SIOCSPGRP: u32 = 0x8902;
const F_SETOWN: u32 = 8;
const F_SETOWN_EX: u32 = 15;
/// Asynchronous I/O on: a terminal then makes its foreground process group the owner
/// itself (`__tty_fasync`), whoever asked.
const F_SETFL: u32 = 4;
const O_ASYNC: u64 = 0o20000;
const FIOASYNC: u32 = 0x5452;
/// The signal a file's owner is sent by default.
const SIGIO: u32 = 29;

#[inline(always)]
fn deny(rep: Report, why: u32, scope: Scope) -> i32 {
    finish(
        scope.mem,
        rep,
        Deny::because(why),
        scope.audits_all(),
        errno::EPERM,
    )
}

#[inline(always)]
fn bpf(cmd: u32, scope: Scope) -> i32 {
    let mut rep = Report::bare(hook::BPF, scope.policy_id);
    rep.target = cmd;
    deny(rep, reason::SELF_PROTECTION, scope)
}

/// Denies `hook_id` on `task` when it is a process of sandbox's own, or outside the
/// sandbox. `quiet`: deny without a record (the kernel's own "do not audit").
#[inline(always)]
fn task(hook_id: u32, scope: Scope, task: *const u8, detail: u32, quiet: bool) -> i32 {
    let off = kread::offsets();
    let tgid: u32 = if off.valid == 0 {
        0
    } else {
        kread::read(task, off.task_struct_tgid).unwrap_or(0)
    };
    // An unreadable target is treated as protected (fail closed).
    let why = if tgid == 0 || maps::PROTECTED.get_ptr(&tgid).is_some() {
        reason::SELF_PROTECTION
    } else if !scope::task_within(task, scope.cgroup) {
        reason::OUTSIDE_SCOPE
    } else {
        return 0;
    };
    if quiet {
        return if scope.audits_all() { 0 } else { -errno::EPERM };
    }
    let mut rep = Report::bare(hook_id, scope.policy_id);
    rep.target = tgid;
    rep.access = detail;
    deny(rep, why, scope)
}

#[inline(always)]
fn signal(ctx: &aya_ebpf::programs::LsmContext, scope: Scope) -> i32 {
    let sig: u32 = ctx.arg(2);
    // Signal 0 only asks whether the process exists.
    if sig == 0 {
        return 0;
    }
    task(hook::SIGNAL, scope, ctx.arg(0), sig, false)
}

#[inline(always)]
fn ptrace(target: *const u8, mode: u32, scope: Scope) -> i32 {
    task(
        hook::PTRACE,
        scope,
        target,
        mode,
        mode & PTRACE_MODE_NOAUDIT != 0,
    )
}

/// A kernel key (`key`) used (`need`: the kernel's `key_need_perm`) or made
/// (`KEY_CREATE`) under the credentials `cred`. Every key is judged, whoever's credentials
/// the check names (`/proc/keys` checks with its opener's, which a fork or an exec leaves
/// behind as another object; a root task may set its uids apart), but:
/// - a lookup the kernel makes for itself: credentials it put on for the moment
///   (`override_creds`) with a thread keyring of their own, as the DNS resolver's, the NFS
///   id mapper's and the SMB upcall's caches are (a confined task's override, an io_uring
///   personality or `faccessat`'s, has none: it cannot make a keyring);
/// - root's keys (the kernel's keyrings: `.user_reg`, IMA's, the platform's) under a
///   non-root filesystem uid: used in any way when not possessed, which their "other"
///   permissions alone govern; searched or viewed by a task none of whose uids is root
///   (the kernel's own signature checks and user keyring lookups search its keyrings as
///   possessed, under the task's credentials). A possessed key otherwise (root's `@u`, a
///   session keyring of root's that sudo's `pam_keyinit` made) has its possessor's
///   permissions, which a root command gets by `setfsuid` alone (and a search is enough
///   to sign or decrypt with a key: `KEYCTL_PKEY_*`): judged; and no key is made under
///   the exemption.
/// `key_ref`: the key's address with the kernel's "possessed" bit (bit 0).
#[inline(always)]
fn key(key_ref: u64, cred: *const u8, need: u32, scope: Scope) -> i32 {
    let off = kread::offsets();
    let mut serial = 0;
    let key = key_ref & !1;
    let looks = need == KEY_NEED_VIEW || need == KEY_NEED_SEARCH;
    if off.valid != 0 {
        // As numbers: LLVM merged the tests' booleans into a register that held the typed
        // pointer on another path, which the verifier refuses.
        let cred = kread::untyped(cred);
        if kernel_lookup(cred) != 0
            || (key_ref & 1 == 0 || looks && unprivileged(cred) != 0)
                && kernel_keyring(key, cred) != 0
        {
            return 0;
        }
        serial = kread::read(key as *const u8, off.key_serial).unwrap_or(0);
    }
    let mut rep = Report::bare(hook::KEY, scope.policy_id);
    rep.access = need;
    rep.target = serial;
    deny(rep, reason::KERNEL_KEYS, scope)
}

/// The kernel's `enum key_need_perm` (include/linux/key.h): looking at a key, searching
/// a keyring.
const KEY_NEED_VIEW: u32 = 1;
const KEY_NEED_SEARCH: u32 = 4;

/// 1 when `cred` (an address) is credentials the kernel put on for a lookup of its own: an
/// override in force (`current->cred` is not `real_cred`), used by the check, with a
/// thread keyring (a function of its own: see [`key`]).
#[inline(never)]
fn kernel_lookup(cred: u64) -> u32 {
    let off = kread::offsets();
    // SAFETY: plain helper call.
    let task = unsafe { aya_ebpf::helpers::generated::bpf_get_current_task() } as *const u8;
    let (Ok(own), Ok(now)) = (
        kread::read::<u64>(task, off.task_struct_real_cred),
        kread::read::<u64>(task, off.task_struct_cred),
    ) else {
        return 0;
    };
    if now == own || cred != now {
        return 0;
    }
    match kread::read::<u64>(cred as *const u8, off.cred_thread_keyring) {
        Ok(keyring) if keyring != 0 => 1,
        _ => 0,
    }
}

/// 1 when none of the real, effective and saved uids of `cred` (an address) is root's.
#[inline(never)]
fn unprivileged(cred: u64) -> u32 {
    let off = kread::offsets();
    let c = cred as *const u8;
    match (
        kread::read::<u32>(c, off.cred_uid),
        kread::read::<u32>(c, off.cred_euid),
        kread::read::<u32>(c, off.cred_suid),
    ) {
        (Ok(u), Ok(e), Ok(s)) if u != 0 && e != 0 && s != 0 => 1,
        _ => 0,
    }
}

/// 1 when `key` (an address) is root's and the check's credentials (`cred`) have a
/// non-root filesystem uid: the key's "other" permissions alone decide.
#[inline(never)]
fn kernel_keyring(key: u64, cred: u64) -> u32 {
    let off = kread::offsets();
    match (
        kread::read::<u32>(key as *const u8, off.key_uid),
        kread::read::<u32>(cred as *const u8, off.cred_fsuid),
    ) {
        (Ok(0), Ok(fsuid)) if fsuid != 0 => 1,
        _ => 0,
    }
}

/// `key_permission`'s key: argument 0 is a `key_ref_t` (the key's address with the
/// "possessed" bit 0), a pointer to a struct no kernel defines, whose load 6.1's verifier
/// refuses: read from the argument array as a number, the bit kept.
#[inline(always)]
fn key_ref(ctx: &aya_ebpf::programs::LsmContext) -> u64 {
    use aya_ebpf::EbpfContext as _;
    // Not read: possessed (no exemption), a null key.
    kread::read(ctx.as_ptr().cast_const().cast::<u8>(), 0).unwrap_or(1)
}

/// btrfs subvolume and snapshot ioctls (include/uapi/linux/btrfs.h: `_IOW(0x94, nr, 4096
/// bytes)`): `SNAP_CREATE` 1, `SUBVOL_CREATE` 14, `SNAP_DESTROY` 15, `SNAP_CREATE_V2` 23,
/// `SUBVOL_CREATE_V2` 24, `SNAP_DESTROY_V2` 63. They make and remove directories without
/// the name hooks (`btrfs_mksubvol` checks only permissions), and a snapshot is a readable
/// copy of everything below its source at a new path.
const BTRFS_SUBVOL_IOCTLS: [u32; 6] = [
    0x5000_9401,
    0x5000_940e,
    0x5000_940f,
    0x5000_9417,
    0x5000_9418,
    0x5000_943f,
];

/// Checked before the scope lookup: every ioctl of the host runs this hook.
#[inline(always)]
fn refused_ioctl(cmd: u32) -> bool {
    cmd == TIOCSTI
        || cmd == TIOCLINUX
        || cmd == FIOSETOWN
        || cmd == SIOCSPGRP
        || cmd == FIOASYNC
        || cmd & 0xffff_ff00 == 0x5000_9400 && subvolume(cmd)
}

#[inline(always)]
fn subvolume(cmd: u32) -> bool {
    BTRFS_SUBVOL_IOCTLS.contains(&cmd)
}

#[inline(always)]
fn ioctl(cmd: u32, scope: Scope) -> i32 {
    let mut rep = Report::bare(hook::IOCTL, scope.policy_id);
    rep.access = cmd;
    let why = if subvolume(cmd) {
        reason::SUBVOLUME
    } else if cmd == FIOSETOWN || cmd == SIOCSPGRP || cmd == FIOASYNC {
        reason::FILE_OWNER
    } else {
        reason::TTY_INJECTION
    };
    deny(rep, why, scope)
}

/// `fcntl(F_SETOWN, who)`: the command may own its files' `SIGIO` itself (`who` its own
/// process, or 0 to clear), not have it sent to another process or a process group: the
/// kernel sends it without the signal checks (`task_kill`) that `kill` would pass, so a
/// root command could signal any process of the host (`SIGRTMIN+4` to PID 1 powers it
/// off). `F_SETOWN_EX` names its owner in the caller's memory, read again after the hook:
/// refused, as the ioctls are. A command in a PID namespace of its own names itself by a
/// number of that namespace, which is not its number here: refused too.
#[inline(always)]
fn set_owner(file: *const u8, cmd: u32, arg: u64, scope: Scope) -> i32 {
    if cmd == F_SETFL {
        return async_io(file, scope);
    }
    let who = arg as i32;
    let tgid = (aya_ebpf::helpers::bpf_get_current_pid_tgid() >> 32) as u32;
    if cmd == F_SETOWN && (who == 0 || who as u32 == tgid) {
        return 0;
    }
    let mut rep = Report::bare(hook::SIGNAL, scope.policy_id);
    rep.access = SIGIO;
    rep.target = if cmd == F_SETOWN {
        who.unsigned_abs()
    } else {
        0
    };
    deny(rep, reason::FILE_OWNER, scope)
}

/// Loading code into the kernel (`how`: 1 from a file, 2 from memory; `id` the kind) or
/// passing one of the kernel's lockdown checks (`how` 3, `id` the reason).
#[inline(always)]
fn kernel(how: u32, id: u32, scope: Scope) -> i32 {
    let mut rep = Report::bare(hook::KERNEL, scope.policy_id);
    rep.access = how;
    rep.target = id;
    deny(rep, reason::SELF_PROTECTION, scope)
}

// `security_bpf` took three parameters until a fourth (`kernel`) was added; one program
// per form, the loader attaches the one the kernel's BTF says fits.
hook!(bpf_3, "bpf", |ctx, scope| bpf(ctx.arg(0), scope));
hook!(bpf_4, "bpf", |ctx, scope| bpf(ctx.arg(0), scope));
hook!(task_kill, "task_kill", |ctx, scope| signal(&ctx, scope));
hook!(ptrace_access_check, "ptrace_access_check", |ctx, scope| {
    ptrace(ctx.arg(0), ctx.arg(1), scope)
});
hook!(task_setnice, "task_setnice", |ctx, scope| {
    task(hook::TASK, scope, ctx.arg(0), 0, false)
});
hook!(key_permission, "key_permission", |ctx, scope| key(
    key_ref(&ctx),
    ctx.arg(1),
    ctx.arg(2),
    scope
));
// A key being made is judged as possessed: the maker's.
hook!(key_alloc, "key_alloc", |ctx, scope| key(
    kread::untyped(ctx.arg(0)) | 1,
    ctx.arg(1),
    sandbox_common::KEY_CREATE,
    scope
));
hook!(task_setioprio, "task_setioprio", |ctx, scope| {
    task(hook::TASK, scope, ctx.arg(0), 0, false)
});
hook!(task_setscheduler, "task_setscheduler", |ctx, scope| {
    task(hook::TASK, scope, ctx.arg(0), 0, false)
});
hook!(task_movememory, "task_movememory", |ctx, scope| {
    task(hook::TASK, scope, ctx.arg(0), 0, false)
});
// Attribute ioctls are writes to the file's name (`names.rs`); the others here are refused.
hook!(
    file_ioctl,
    "file_ioctl",
    |ctx, scope| if names::sets_file_attributes(ctx.arg(1)) {
        names::file_attributes(ctx.arg(0), scope)
    } else {
        ioctl(ctx.arg(1), scope)
    },
    if refused_ioctl(ctx.arg(1)) || names::sets_file_attributes(ctx.arg(1))
);
hook!(
    file_ioctl_compat,
    "file_ioctl_compat",
    |ctx, scope| if names::sets_file_attributes(ctx.arg(1)) {
        names::file_attributes(ctx.arg(0), scope)
    } else {
        ioctl(ctx.arg(1), scope)
    },
    if refused_ioctl(ctx.arg(1)) || names::sets_file_attributes(ctx.arg(1))
);
/// Asynchronous I/O turned on for `file` (`O_ASYNC`, `FIOASYNC`): refused on every
/// character device but a pty whose sessions are the command's (`own_mark::PTY`). The
/// kernel sends a terminal's `SIGIO` to its foreground process group (`__tty_fasync`): with
/// `--terminal direct`, through `/dev/tty`, or on a console of any driver (`hvc`, USB
/// serial: more than `terminal.rs` knows by number), the user's shell or whatever job holds
/// it. A socket's, a pipe's owner stays the caller. (`FIOASYNC` is refused on every file:
/// in `file_ioctl`, LLVM merged this read of the file's inode with the attribute ioctls'
/// into one load from a pointer that may be null, which 6.1 refuses; `fcntl` is the usual
/// way.)
#[inline(always)]
fn async_io(file: *const u8, scope: Scope) -> i32 {
    let off = kread::offsets();
    let inode: *const u8 = kread::field(file, off.file_f_inode).unwrap_or(core::ptr::null());
    let mode: u16 = kread::field(inode, off.inode_i_mode).unwrap_or(0);
    if !sandbox_common::decide::imode::is_chr(mode) || crate::own::pty_ours(inode) {
        return 0;
    }
    let mut rep = Report::bare(hook::SIGNAL, scope.policy_id);
    rep.access = SIGIO;
    deny(rep, reason::FILE_OWNER, scope)
}

hook!(
    file_fcntl,
    "file_fcntl",
    |ctx, scope| set_owner(ctx.arg(0), ctx.arg(1), ctx.arg(2), scope),
    if matches!(ctx.arg::<u32>(1), F_SETOWN | F_SETOWN_EX)
        || ctx.arg::<u32>(1) == F_SETFL && ctx.arg::<u64>(2) & O_ASYNC != 0
);
// A user namespace: every capability over what is made in it (`process.user_namespaces`).
hook!(userns_create, "userns_create", |_ctx, scope| {
    if scope.flags() & sandbox_common::policy_flags::USER_NAMESPACES != 0 {
        return 0;
    }
    deny(
        Report::bare(hook::USER_NAMESPACE, scope.policy_id),
        reason::USER_NAMESPACE,
        scope,
    )
});
hook!(sb_mount, "sb_mount", |_ctx, scope| {
    deny(
        Report::bare(hook::MOUNT, scope.policy_id),
        reason::SELF_PROTECTION,
        scope,
    )
});
hook!(move_mount, "move_mount", |_ctx, scope| {
    deny(
        Report::bare(hook::MOUNT, scope.policy_id),
        reason::SELF_PROTECTION,
        scope,
    )
});
// pivot_root changes what a mount namespace's processes see as `/`: refused as mounts are.
hook!(sb_pivotroot, "sb_pivotroot", |_ctx, scope| {
    deny(
        Report::bare(hook::PIVOT_ROOT, scope.policy_id),
        reason::SELF_PROTECTION,
        scope,
    )
});
hook!(sb_umount, "sb_umount", |_ctx, scope| {
    deny(
        Report::bare(hook::UMOUNT, scope.policy_id),
        reason::SELF_PROTECTION,
        scope,
    )
});
// Checked before the scope lookup: every fork of the host runs this hook.
hook!(
    task_alloc,
    "task_alloc",
    |ctx, scope| deny(
        Report::bare(hook::CLONE_INTO_CGROUP, scope.policy_id),
        reason::SELF_PROTECTION,
        scope,
    ),
    if ctx.arg::<u64>(1) & CLONE_INTO_CGROUP != 0
);
hook!(task_setrlimit, "task_setrlimit", |ctx, scope| {
    task(hook::TASK, scope, ctx.arg(0), ctx.arg(1), false)
});
hook!(
    kernel_read_file,
    "kernel_read_file",
    |ctx, scope| kernel(1, ctx.arg(1), scope),
    if ctx.arg::<u32>(1) != FIRMWARE
);
hook!(
    kernel_load_data,
    "kernel_load_data",
    |ctx, scope| kernel(2, ctx.arg(0), scope),
    if ctx.arg::<u32>(0) != FIRMWARE
);
hook!(
    locked_down,
    "locked_down",
    |ctx, scope| kernel(3, ctx.arg(0), scope),
    if ctx.arg::<u32>(0) != 0
);

/// `SIGIO`/`SIGURG` (and the `F_SETSIG` signal) to a task that owns a file: delivered in
/// the context of whoever made the I/O happen, so there is no scope to look up. sandbox
/// never asks for them (`F_SETOWN`), so a delivery to one of its processes was arranged by
/// someone else (a confined root command that set sandbox as the owner of its file): it is
/// refused, without a record.
#[aya_ebpf::macros::lsm(hook = "file_send_sigiotask")]
pub fn file_send_sigiotask(ctx: aya_ebpf::programs::LsmContext) -> i32 {
    const PREV: usize = sandbox_common::programs::arity("file_send_sigiotask");
    let prev: i32 = ctx.arg(PREV);
    if prev != 0 {
        return super::honour(prev);
    }
    let off = kread::offsets();
    if off.valid == 0 {
        return 0;
    }
    let tgid: u32 = kread::read(ctx.arg::<*const u8>(0), off.task_struct_tgid).unwrap_or(0);
    if maps::PROTECTED.get_ptr(&tgid).is_some() {
        -errno::EPERM
    } else {
        0
    }
}
