//! BPF-LSM programs of `sandbox`. Thin hooks: all policy lives in maps that the loader fills;
//! these programs only find the policy of the current task's cgroup, resolve what is being
//! accessed (canonical path, address, binary), look it up and report denies.
#![no_std]
#![no_main]

mod event;
mod kread;
mod maps;
mod net;
mod path;
mod scope;

use aya_ebpf::macros::lsm;
use aya_ebpf::programs::LsmContext;
use sandbox_common::{NO_RULE, accept, decision, errno, hook, policy_flags, reason};

use crate::event::Report;
use crate::path::Resolved;

/// `f_mode` bits (include/linux/fs.h); stable since the beginning of git history.
const FMODE_READ: u32 = 1;
const FMODE_WRITE: u32 = 2;
const FMODE_EXEC: u32 = 0x20;
/// `i_mode` bits (include/uapi/linux/stat.h).
const S_IFMT: u16 = 0o170_000;
const S_IFDIR: u16 = 0o040_000;
const S_ISUID: u16 = 0o4000;
const S_ISGID: u16 = 0o2000;
const S_IXGRP: u16 = 0o0010;

/// A deny decision before it is turned into an errno and an event.
#[derive(Clone, Copy)]
struct Verdict {
    reason: u32,
    rule: u16,
}

#[lsm(hook = "file_open")]
pub fn file_open(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(1);
    if prev != 0 {
        return honour(prev);
    }
    match try_file_open(&ctx) {
        Ok(v) => v,
        // A kernel read failed for an in-scope task: fail closed.
        Err(_) => -errno::EACCES,
    }
}

fn try_file_open(ctx: &LsmContext) -> Result<i32, i32> {
    let Some((policy_id, info)) = scope::current_policy() else {
        return Ok(0);
    };
    let file: *const u8 = ctx.arg(0);
    let off = path::offsets();
    let audit = info.flags & policy_flags::AUDIT_FILES != 0;
    if off.valid == 0 {
        return Ok(deny_unresolved(
            hook::FILE_OPEN,
            policy_id,
            reason::NO_OFFSETS,
            audit,
        ));
    }
    let mut f_mode: u32 = kread::read(file, off.file_f_mode).unwrap_or(0);
    // execve opens the binary with __FMODE_EXEC in f_flags (same value as FMODE_EXEC);
    // f_mode does not carry it yet when file_open runs.
    let f_flags: u32 = kread::read(file, off.file_f_flags).unwrap_or(0);
    if f_flags & FMODE_EXEC != 0 {
        f_mode |= FMODE_EXEC;
    }
    let escape = f_mode & FMODE_WRITE != 0 && path::cgroup_outside_scope(file, &off);
    Ok(check_file(
        hook::FILE_OPEN,
        policy_id,
        info,
        file,
        f_mode,
        audit,
        |acc, facts| {
            if escape {
                return Some(Verdict {
                    reason: reason::SELF_PROTECTION,
                    rule: NO_RULE,
                });
            }
            file_verdict(info.flags, f_mode, facts.mode, acc)
        },
    ))
}

/// Resolves `file`, lets `decide` judge what matched, reports a deny and returns the hook's
/// value. A path that cannot be resolved is denied (fail closed).
#[inline(always)]
fn check_file(
    hook_id: u32,
    policy_id: u32,
    info: &sandbox_common::PolicyInfo,
    file: *const u8,
    f_mode: u32,
    audit: bool,
    decide: impl Fn(&path::Match, &path::FileFacts) -> Option<Verdict>,
) -> i32 {
    let off = path::offsets();
    let facts = path::file_facts(file, &off);
    check_facts(hook_id, policy_id, info, facts, f_mode, audit, decide)
}

#[inline(always)]
fn check_facts(
    hook_id: u32,
    policy_id: u32,
    info: &sandbox_common::PolicyInfo,
    mut facts: path::FileFacts,
    f_mode: u32,
    audit: bool,
    decide: impl Fn(&path::Match, &path::FileFacts) -> Option<Verdict>,
) -> i32 {
    let (v, flags) = match path::resolve(policy_id, info, &mut facts) {
        Resolved::Matched(acc) => match decide(&acc, &facts) {
            Some(v) => (v, 0),
            None => return 0,
        },
        Resolved::Unresolved(flags) => (
            Verdict {
                reason: reason::PATH_UNRESOLVED,
                rule: NO_RULE,
            },
            flags,
        ),
        Resolved::Unplaced => (
            Verdict {
                reason: reason::UNPLACED_MOUNT,
                rule: NO_RULE,
            },
            0,
        ),
    };
    finish(
        Report::file(hook_id, policy_id, &facts, f_mode, flags),
        v,
        audit,
        errno::EACCES,
    )
}

/// A deny by a kind of rule: the event carries the kind; userspace names the rule.
#[inline(always)]
fn by(acc: &path::Match, slot: usize) -> Verdict {
    Verdict {
        reason: acc.reason(slot),
        rule: slot as u16,
    }
}

/// The file rules, in order: deny > write rules > read rules.
#[inline(always)]
fn file_verdict(flags: u32, f_mode: u32, i_mode: u16, acc: &path::Match) -> Option<Verdict> {
    if acc.has(accept::FILE_DENY) {
        return Some(by(acc, accept::FILE_DENY));
    }
    let exec_open = f_mode & FMODE_EXEC != 0;
    // A denied binary may not be read either: no copying it, no `ld.so denied`.
    if !exec_open && acc.has(accept::EXEC_DENY) {
        return Some(by(acc, accept::EXEC_DENY));
    }
    if f_mode & FMODE_WRITE != 0 {
        if acc.has(accept::FILE_READ_ONLY) {
            return Some(by(acc, accept::FILE_READ_ONLY));
        }
        if flags & policy_flags::WRITE_ALLOWLIST != 0
            && acc.sb_known
            && !acc.has(accept::FILE_WRITE)
        {
            return Some(Verdict {
                reason: reason::NOT_IN_WRITE_ALLOWLIST,
                rule: NO_RULE,
            });
        }
    }
    let is_dir = i_mode & S_IFMT == S_IFDIR;
    if f_mode & FMODE_READ != 0
        && !exec_open
        && !is_dir
        && flags & policy_flags::READ_ALLOWLIST != 0
        && acc.sb_known
        && !acc.has(accept::FILE_READ)
        && !acc.has(accept::FILE_WRITE)
    {
        return Some(Verdict {
            reason: reason::NOT_IN_READ_ALLOWLIST,
            rule: NO_RULE,
        });
    }
    None
}

#[lsm(hook = "bprm_check_security")]
pub fn bprm_check_security(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(1);
    if prev != 0 {
        return honour(prev);
    }
    match try_bprm_check(&ctx) {
        Ok(v) => v,
        // A kernel read failed for an in-scope task: fail closed.
        Err(_) => -errno::EACCES,
    }
}

fn try_bprm_check(ctx: &LsmContext) -> Result<i32, i32> {
    let Some((policy_id, info)) = scope::current_policy() else {
        return Ok(0);
    };
    let bprm: *const u8 = ctx.arg(0);
    let off = path::offsets();
    let audit = info.flags & policy_flags::AUDIT_EXEC != 0;
    if off.valid == 0 {
        return Ok(deny_unresolved(
            hook::BPRM_CHECK,
            policy_id,
            reason::NO_OFFSETS,
            audit,
        ));
    }
    // bprm->file is the binary being checked: on the second round of a shebang script it is
    // the interpreter, so a denied interpreter is caught as well.
    let file = kread::read_ptr(bprm, off.linux_binprm_file)?;
    Ok(check_file(
        hook::BPRM_CHECK,
        policy_id,
        info,
        file,
        0,
        audit,
        |acc, facts| {
            if acc.has(accept::EXEC_DENY) {
                Some(by(acc, accept::EXEC_DENY))
            } else if acc.has(accept::FILE_DENY) {
                Some(by(acc, accept::FILE_DENY))
            } else if info.flags & policy_flags::EXEC_ALLOWLIST != 0 && !acc.has(accept::EXEC_ALLOW)
            {
                Some(Verdict {
                    reason: reason::NOT_IN_EXEC_ALLOWLIST,
                    rule: NO_RULE,
                })
            } else if info.flags & policy_flags::DENY_PRIVILEGED != 0
                && (facts.mode & S_ISUID != 0
                    || facts.mode & (S_ISGID | S_IXGRP) == (S_ISGID | S_IXGRP))
            {
                Some(Verdict {
                    reason: reason::PRIVILEGED_BINARY,
                    rule: NO_RULE,
                })
            } else {
                None
            }
        },
    ))
}

/// A change of names (create, mkdir, symlink, unlink, rmdir, link, rename) or of a file's
/// attributes (truncate, chmod, chown) is a write to the name: denied where a write would
/// be. One name per program: link and rename are checked at two hooks each (the source at
/// one, the destination at the other), which keeps every program within the verifier's
/// budget.
#[inline(always)]
fn check_name(hook_id: u32, dentry: *const u8) -> i32 {
    let Some((policy_id, info)) = scope::current_policy() else {
        return 0;
    };
    let audit = info.flags & policy_flags::AUDIT_FILES != 0;
    let off = path::offsets();
    if off.valid == 0 {
        return deny_unresolved(hook_id, policy_id, reason::NO_OFFSETS, audit);
    }
    let facts = path::dentry_facts(dentry, &off);
    check_facts(
        hook_id,
        policy_id,
        info,
        facts,
        FMODE_WRITE,
        audit,
        |acc, facts| file_verdict(info.flags, FMODE_WRITE, facts.mode, acc),
    )
}

/// The name-change hooks: `$arity` parameters, the earlier verdict after them; the loader
/// checks each arity against the running kernel's BTF before loading.
/// `dentry` names the dentry argument; `path` a `struct path *` argument.
macro_rules! name_hook {
    ($name:ident, $hook:literal, $id:expr, $prev:literal, dentry $arg:literal) => {
        #[lsm(hook = $hook)]
        pub fn $name(ctx: LsmContext) -> i32 {
            let prev: i32 = ctx.arg($prev);
            if prev != 0 {
                return honour(prev);
            }
            check_name($id, ctx.arg::<*const u8>($arg))
        }
    };
    ($name:ident, $hook:literal, $id:expr, $prev:literal, path $arg:literal) => {
        #[lsm(hook = $hook)]
        pub fn $name(ctx: LsmContext) -> i32 {
            let prev: i32 = ctx.arg($prev);
            if prev != 0 {
                return honour(prev);
            }
            let p: *const u8 = ctx.arg($arg);
            let dentry =
                kread::read_ptr(p, path::offsets().path_dentry).unwrap_or(core::ptr::null());
            check_name($id, dentry)
        }
    };
}

name_hook!(inode_create, "inode_create", hook::CREATE, 3, dentry 1);
name_hook!(inode_mknod, "inode_mknod", hook::CREATE, 4, dentry 1);
name_hook!(inode_mkdir, "inode_mkdir", hook::MKDIR, 3, dentry 1);
name_hook!(inode_symlink, "inode_symlink", hook::SYMLINK, 3, dentry 1);
name_hook!(inode_unlink, "inode_unlink", hook::UNLINK, 2, dentry 1);
name_hook!(inode_rmdir, "inode_rmdir", hook::RMDIR, 2, dentry 1);
// link(old, new): the new name at inode_link, the file linked to at path_link (a new name
// for a protected file is a way around its path rules).
name_hook!(inode_link, "inode_link", hook::LINK, 3, dentry 2);
name_hook!(path_link, "path_link", hook::LINK, 3, dentry 0);
// rename(old, new): the old name at inode_rename, the new one at path_rename (both names
// change, also with RENAME_EXCHANGE).
name_hook!(inode_rename, "inode_rename", hook::RENAME, 4, dentry 1);
name_hook!(path_rename, "path_rename", hook::RENAME, 5, dentry 3);
// Attribute changes through a path or an fd (truncate(2), chmod/fchmod, chown/fchown).
name_hook!(path_truncate, "path_truncate", hook::TRUNCATE, 1, path 0);
name_hook!(path_chmod, "path_chmod", hook::CHMOD, 2, path 0);
name_hook!(path_chown, "path_chown", hook::CHOWN, 3, path 0);
// Every other attribute change (utimes, ...) goes through inode_setattr, which gained an
// idmap parameter in 6.3: one program per form. Extended attributes likewise.
name_hook!(inode_setattr_2, "inode_setattr", hook::SETATTR, 2, dentry 0);
name_hook!(inode_setattr_3, "inode_setattr", hook::SETATTR, 3, dentry 1);
name_hook!(inode_setxattr, "inode_setxattr", hook::XATTR, 6, dentry 1);
name_hook!(inode_removexattr, "inode_removexattr", hook::XATTR, 3, dentry 1);
name_hook!(inode_set_acl, "inode_set_acl", hook::XATTR, 4, dentry 1);
name_hook!(inode_remove_acl, "inode_remove_acl", hook::XATTR, 3, dentry 1);

#[lsm(hook = "socket_connect")]
pub fn socket_connect(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(3);
    if prev != 0 {
        return honour(prev);
    }
    match try_socket_connect(&ctx) {
        Ok(v) => v,
        // A kernel read failed for an in-scope task: fail closed.
        Err(_) => -errno::EACCES,
    }
}

fn try_socket_connect(ctx: &LsmContext) -> Result<i32, i32> {
    let Some((policy_id, info)) = scope::current_policy() else {
        return Ok(0);
    };
    let addr: *const u8 = ctx.arg(1);
    let addrlen: i32 = ctx.arg(2);
    Ok(check_dest(
        hook::SOCKET_CONNECT,
        policy_id,
        info,
        addr,
        addrlen,
    ))
}

/// Sends that name their destination get the decision `connect` to it would get: they are
/// how unconnected UDP (`sendto`, `sendmsg`, `sendmmsg`, io_uring sends) and TCP Fast Open
/// (`sendto(MSG_FASTOPEN)`) reach an address without `connect`. Sends on a connected socket
/// carry no address and were judged at `connect`.
#[lsm(hook = "socket_sendmsg")]
pub fn socket_sendmsg(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(3);
    if prev != 0 {
        return honour(prev);
    }
    match try_socket_sendmsg(&ctx) {
        Ok(v) => v,
        Err(_) => -errno::EPERM,
    }
}

fn try_socket_sendmsg(ctx: &LsmContext) -> Result<i32, i32> {
    let Some((policy_id, info)) = scope::current_policy() else {
        return Ok(0);
    };
    let off = path::offsets();
    if off.valid == 0 {
        let audit = info.flags & policy_flags::AUDIT_NET != 0;
        return Ok(deny_unresolved(
            hook::SOCKET_SENDMSG,
            policy_id,
            reason::NO_OFFSETS,
            audit,
        ));
    }
    let msg: *const u8 = ctx.arg(1);
    // The kernel has copied the address in (`move_addr_to_kernel`) before this hook.
    let name = kread::read_ptr(msg, off.msghdr_msg_name)?;
    if name.is_null() {
        return Ok(0);
    }
    let len: i32 = kread::read(msg, off.msghdr_msg_namelen)?;
    Ok(check_dest(hook::SOCKET_SENDMSG, policy_id, info, name, len))
}

/// The network decision for a destination `sockaddr` in kernel memory, reported as `hook_id`.
#[inline(always)]
fn check_dest(
    hook_id: u32,
    policy_id: u32,
    info: &sandbox_common::PolicyInfo,
    addr: *const u8,
    addrlen: i32,
) -> i32 {
    let Some(dest) = net::Dest::parse(addr, addrlen) else {
        return 0;
    };
    let Some(v) = net::verdict(policy_id, info.flags, &dest) else {
        return 0;
    };
    let audit = info.flags & policy_flags::AUDIT_NET != 0;
    let rep = Report::net(hook_id, policy_id, &dest);
    finish(rep, v, audit, errno::EPERM)
}

// Self-protection. An in-scope process may not undo enforcement or touch sandbox: no
// `bpf()` at all (no detaching, no map writes, no new programs), no signals or ptrace to
// sandbox's own processes, no mounts. The whole policy's mode decides audit vs enforce.

/// `security_bpf` took three parameters until a fourth (`kernel`) was added; one program
/// per form, the loader attaches the one the kernel's BTF says fits.
#[lsm(hook = "bpf")]
pub fn bpf_3(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(3);
    protect_bpf(&ctx, prev)
}

#[lsm(hook = "bpf")]
pub fn bpf_4(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(4);
    protect_bpf(&ctx, prev)
}

#[inline(always)]
fn protect_bpf(ctx: &LsmContext, prev: i32) -> i32 {
    if prev != 0 {
        return honour(prev);
    }
    let Some((policy_id, info)) = scope::current_policy() else {
        return 0;
    };
    let cmd: u32 = ctx.arg(0);
    let mut rep = Report::bare(hook::BPF, policy_id);
    rep.target = cmd;
    deny_protected(rep, info)
}

#[lsm(hook = "task_kill")]
pub fn task_kill(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(4);
    if prev != 0 {
        return honour(prev);
    }
    let sig: u32 = ctx.arg(2);
    // Signal 0 only asks whether the process exists.
    if sig == 0 {
        return 0;
    }
    protect_task(hook::SIGNAL, ctx.arg(0), sig)
}

#[lsm(hook = "ptrace_access_check")]
pub fn ptrace_access_check(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(2);
    if prev != 0 {
        return honour(prev);
    }
    let mode: u32 = ctx.arg(1);
    protect_task(hook::PTRACE, ctx.arg(0), mode)
}

/// Denies `hook_id` when the target task belongs to a protected process.
#[inline(always)]
fn protect_task(hook_id: u32, task: *const u8, detail: u32) -> i32 {
    let Some((policy_id, info)) = scope::current_policy() else {
        return 0;
    };
    let off = path::offsets();
    let tgid: u32 = if off.valid == 0 {
        0
    } else {
        kread::read(task, off.task_struct_tgid).unwrap_or(0)
    };
    // An unreadable target is treated as protected (fail closed).
    if tgid != 0 && maps::PROTECTED.get_ptr(&tgid).is_none() {
        return 0;
    }
    let mut rep = Report::bare(hook_id, policy_id);
    rep.target = tgid;
    rep.access = detail;
    deny_protected(rep, info)
}

#[lsm(hook = "sb_mount")]
pub fn sb_mount(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(5);
    protect_mount(prev)
}

#[lsm(hook = "move_mount")]
pub fn move_mount(ctx: LsmContext) -> i32 {
    let prev: i32 = ctx.arg(2);
    protect_mount(prev)
}

#[inline(always)]
fn protect_mount(prev: i32) -> i32 {
    if prev != 0 {
        return honour(prev);
    }
    let Some((policy_id, info)) = scope::current_policy() else {
        return 0;
    };
    deny_protected(Report::bare(hook::MOUNT, policy_id), info)
}

#[inline(always)]
fn deny_protected(rep: Report, info: &sandbox_common::PolicyInfo) -> i32 {
    let all_audit = policy_flags::AUDIT_FILES | policy_flags::AUDIT_NET | policy_flags::AUDIT_EXEC;
    let audit = info.flags & all_audit == all_audit;
    finish(
        rep,
        Verdict {
            reason: reason::SELF_PROTECTION,
            rule: NO_RULE,
        },
        audit,
        errno::EPERM,
    )
}

/// A deny from an earlier LSM program on this hook stays a deny. The verifier (6.8+) wants
/// the return value provably in [-4095, 0], so the returned values are constants.
#[inline(always)]
fn honour(prev: i32) -> i32 {
    if prev == -errno::EACCES {
        -errno::EACCES
    } else {
        -errno::EPERM
    }
}

/// Reports a decision and turns it into the hook's return value.
#[inline(always)]
fn finish(mut rep: Report, v: Verdict, audit: bool, err: i32) -> i32 {
    rep.decision = if audit {
        decision::AUDIT
    } else {
        decision::DENY
    };
    rep.reason = v.reason;
    rep.rule = v.rule;
    event::send(&rep);
    match (audit, err) {
        (true, _) => 0,
        (false, errno::EPERM) => -errno::EPERM,
        (false, _) => -errno::EACCES,
    }
}

/// Fail closed when the programs cannot decide (no offsets supplied).
#[inline(always)]
fn deny_unresolved(hook_id: u32, policy_id: u32, why: u32, audit: bool) -> i32 {
    let rep = Report::bare(hook_id, policy_id);
    let err = if hook_id == hook::SOCKET_CONNECT || hook_id == hook::SOCKET_SENDMSG {
        errno::EPERM
    } else {
        errno::EACCES
    };
    finish(
        rep,
        Verdict {
            reason: why,
            rule: NO_RULE,
        },
        audit,
        err,
    )
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the programs are written so that no panicking path is reachable (indexes are
    // masked); the verifier rejects any program that could reach this.
    unsafe { core::hint::unreachable_unchecked() }
}
