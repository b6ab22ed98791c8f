//! Files: `file_open`, and the resolve-decide-report path that the exec and name hooks
//! share. A path that cannot be resolved is denied (fail closed).

use sandbox_common::decide::{self, Deny, FileMatch, fmode, imode, oflag};
use sandbox_common::{KernelOffsets, accept, errno, hook, policy_flags, reason};

use super::{deny_unresolved, finish, hook};
use crate::event::Report;
use crate::kread;
use crate::path::{self, FileFacts, Resolved};
use crate::scope::Scope;

/// The `file_open` decision after the prologue (also run by the native benchmark's
/// iterators, `bench.rs`). `TERMINALS`: whether the program may look terminals up (BPF
/// inode storage is for BPF-LSM programs: the benchmark's iterators may not use it, and
/// do without the check).
#[inline(always)]
pub(crate) fn open<const TERMINALS: bool>(file: *const u8, scope: Scope) -> i32 {
    let audit = scope.audits(policy_flags::AUDIT_FILES);
    let off = match offsets_or_deny(hook::FILE_OPEN, scope, audit) {
        Ok(off) => off,
        Err(v) => return v,
    };
    // `file` is the hook's typed argument: its fields are direct loads.
    let mut f_mode: u32 = kread::field(file, off.file_f_mode).unwrap_or(0);
    // execve opens the binary with __FMODE_EXEC in f_flags (same value as FMODE_EXEC);
    // f_mode does not carry it yet when file_open runs.
    let f_flags: u32 = kread::field(file, off.file_f_flags).unwrap_or(0);
    if f_flags & fmode::EXEC != 0 {
        f_mode |= fmode::EXEC;
    }
    // O_TRUNC empties the file, even opened for reading: the kernel wants write permission
    // for it, and FUSE (atomic_o_trunc) and CIFS truncate in their own open, after this
    // hook and before any later one (inode_setattr) could say no. A write.
    if f_flags & oflag::TRUNC != 0 {
        f_mode |= fmode::WRITE;
    }
    let escape = f_mode & fmode::WRITE != 0 && path::cgroup_write_refused(file, scope.cgroup, &off);
    let facts = path::typed_file_facts(file, &off);
    if TERMINALS {
        let dentry: *const u8 =
            kread::field(file, off.file_f_path_dentry).unwrap_or(core::ptr::null());
        let magic = kread::sb_magic(dentry, off);
        // A namespace's file (`nsfs.rs`): decided here, by the namespace. It has no path
        // a policy could name, and a bind mount of one (`ip netns`) places nsfs, whose
        // files then resolve to no mounted directory.
        if magic == crate::nsfs::NSFS_MAGIC {
            if !crate::nsfs::foreign(facts.ino, off) {
                return 0;
            }
            let mut rep = Report::bare(hook::FILE_OPEN, scope.policy_id);
            rep.ino = facts.ino;
            rep.dev = facts.dev;
            rep.access = f_mode;
            let v = Deny::because(reason::FOREIGN_NAMESPACE);
            return finish(scope.mem, rep, v, audit, errno::EACCES);
        }
        // Another process's `stat` or `status` (a process lister's first read of it):
        // refused without a record (`procfs.rs`); its other entries are refused after the
        // resolve, with one.
        if magic == crate::procfs::PROC_SUPER_MAGIC && quiet_other_process(dentry, scope, off) {
            return if audit { 0 } else { -errno::EACCES };
        }
    }
    check_with::<true>(
        hook::FILE_OPEN,
        scope,
        facts,
        f_mode,
        policy_flags::AUDIT_FILES,
        0,
        |m, facts| {
            if escape {
                return Some(Deny::because(reason::SELF_PROTECTION));
            }
            // A rule that names the file says more (the user's own terminal has one). Then
            // what is refused by the inode, whatever the path, decided here after the
            // resolve: values known before it kept a state each through it (on 6.1, 64,485
            // instructions verified against 30,600 without).
            decide::file(scope.flags(), f_mode, imode::is_dir(facts.mode), m)
                .or_else(|| decide::set_id_write(f_mode, facts.mode))
                .or_else(|| decide::block_device(facts.mode))
                .or_else(|| TERMINALS.then(|| refused_by_inode(file, facts, scope, off))?)
        },
    )
}

/// What `file_open` refuses by the inode, whatever the path: a terminal that is not the
/// command's own (`terminal.rs`); shared memory that no confined process made (`shm.rs`;
/// one compare of the device for every other file); an entry in `/proc` of a process
/// outside the sandbox (`procfs.rs`; a superblock's magic read for every other file).
/// (Namespace files are decided before the resolve.)
#[inline(always)]
fn refused_by_inode(
    file: *const u8,
    facts: &FileFacts,
    scope: Scope,
    off: &KernelOffsets,
) -> Option<Deny> {
    // The file's own pointers, typed by the verifier, read from it only when asked.
    let dentry = || kread::field(file, off.file_f_path_dentry).unwrap_or(core::ptr::null());
    let inode = || kread::field(file, off.file_f_inode).unwrap_or(core::ptr::null());
    if imode::is_chr(facts.mode) {
        let inode: *const u8 = inode();
        if crate::terminal::is_terminal(dentry(), inode, off) && !crate::own::wholly_ours(inode) {
            return Some(Deny::because(reason::FOREIGN_TERMINAL));
        }
    }
    let shm_dev = scope.info.shm_dev;
    if shm_dev != 0 && facts.dev == shm_dev && crate::shm::foreign(dentry(), inode(), off) {
        return Some(Deny::because(reason::FOREIGN_SHARED_MEMORY));
    }
    crate::procfs::outside(dentry(), off, scope.cgroup)
        .then_some(Deny::because(reason::OUTSIDE_SCOPE))
}

/// The procfs file `dentry` is the `stat` or `status` of a process outside the sandbox
/// (`procfs.rs`).
#[inline(always)]
fn quiet_other_process(dentry: *const u8, scope: Scope, off: &KernelOffsets) -> bool {
    crate::procfs::listed_first(dentry, off)
        && crate::procfs::sandbox_proc_outside(kread::untyped(dentry), scope.cgroup) != 0
}

/// Resolves the file of `facts`, lets `decide` judge what matched, reports a deny (with
/// `target` in the record) and returns the hook's value: audited, not denied, when the
/// policy audits `audit_flag`'s section (`policy_flags::AUDIT_*`). A path that cannot be
/// resolved is denied (fail closed).
#[inline(always)]
pub fn check(
    hook_id: u32,
    scope: Scope,
    facts: FileFacts,
    f_mode: u32,
    audit_flag: u32,
    target: u32,
    decide: impl Fn(&FileMatch, &FileFacts) -> Option<Deny>,
) -> i32 {
    check_with::<false>(hook_id, scope, facts, f_mode, audit_flag, target, decide)
}

/// [`check`]; `TYPED`: the facts' dentry is one the verifier types, resolved with
/// `path::resolve_typed` (a function passed as a value would put a function pointer type
/// in the object's BTF, which the kernel refuses).
#[inline(always)]
fn check_with<const TYPED: bool>(
    hook_id: u32,
    scope: Scope,
    mut facts: FileFacts,
    f_mode: u32,
    audit_flag: u32,
    target: u32,
    decide: impl Fn(&FileMatch, &FileFacts) -> Option<Deny>,
) -> i32 {
    let resolved = if TYPED {
        path::resolve_typed(scope.mem, scope.policy_id, &mut facts)
    } else {
        path::resolve(scope.mem, scope.policy_id, &mut facts)
    };
    let (v, flags) = match resolved {
        Resolved::Matched(m) => match decide(&m, &facts) {
            Some(v) => (v, 0),
            None => return 0,
        },
        Resolved::Unresolved => fail_closed(hook_id, reason::PATH_UNRESOLVED, facts.flags),
        Resolved::Unplaced => fail_closed(hook_id, reason::UNPLACED_MOUNT, 0),
        Resolved::Busy => fail_closed(hook_id, reason::BUSY, 0),
    };
    // One state for the verifier from here, whatever the deny (on 6.1 a name hook's
    // report was verified several times over: 18,500 instructions against 12,400). The
    // policy's flags, read from their map value, are a number it does not know.
    // SAFETY: a read of the policy's map value.
    let unknown = unsafe { core::ptr::read_volatile(&raw const scope.info.flags) };
    let v = super::forget(v, unknown);
    // Audit or deny, read here rather than before the resolve: a value held across it is
    // a stack slot more in the hook's frame, which is at the verifier's limit with the
    // global functions below it (`file_open` 248 of the 256 its share of 512 rounds to).
    // An `exec.deny` rule that refuses the kernel's open of a binary to run it (execve's,
    // a script's interpreter, an ELF interpreter) or a read of it (to copy it, `ld.so
    // binary`) is the exec section's, in its mode, also where file rules are only
    // audited. One that refuses a write or a name change is the file section's: its
    // verdict comes before the read-only rules' (`decide::file`), so it keeps their mode
    // (`~/.local/bin/sudo` made under `exec.mode: audit`). (Both sections' mode for reads
    // took a stack slot more than `file_open` has.)
    let exec_rule = f_mode & fmode::WRITE == 0
        && u32::from(v.rule) == accept::EXEC_DENY as u32
        && (v.reason == reason::RULE || v.reason == reason::INODE);
    let audit_flag = if exec_rule {
        policy_flags::AUDIT_EXEC
    } else {
        audit_flag
    };
    let audit = unknown & audit_flag != 0;
    let flags = kread::forget(flags, unknown);
    // Where the path starts and whether it is only the last component are constants on
    // many of the ways here too (a state each, through the rest, on 6.1).
    facts.start = kread::forget(facts.start, unknown);
    let partial = kread::forget(u32::from(facts.partial), unknown);
    // The record names the whole path, not only the last component the decision needed.
    path::whole_path_if(scope.mem, partial, &mut facts);
    let mut rep = Report::file(hook_id, scope.policy_id, &facts, f_mode, flags);
    rep.target = target;
    finish(scope.mem, rep, v, audit, errno::EACCES)
}

/// The verdict when the programs could not decide (`why`), said by the diagnostics too.
#[inline(always)]
fn fail_closed(hook_id: u32, why: u32, flags: u32) -> (Deny, u32) {
    crate::diag::fail_closed(hook_id, why, flags);
    (Deny::because(why), flags)
}

/// The offsets, or the fail-closed answer for `hook_id` when the loader supplied none.
#[inline(always)]
pub fn offsets_or_deny(
    hook_id: u32,
    scope: Scope,
    audit: bool,
) -> Result<&'static KernelOffsets, i32> {
    let off = kread::offsets();
    if off.valid == 0 {
        return Err(deny_unresolved(
            scope.mem,
            hook_id,
            scope.policy_id,
            reason::NO_OFFSETS,
            audit,
            errno::EACCES,
        ));
    }
    Ok(off)
}

hook!(file_open, "file_open", |ctx, scope| open::<true>(
    ctx.arg(0),
    scope
));

/// A watch on a path (`inotify_add_watch`, `fanotify_mark`; dnotify needs the directory
/// open, which `file_open` judged): what happens to the file and the names below it, when
/// and by which name, judged as a read of the path.
#[inline(always)]
fn notify(path: *const u8, scope: Scope) -> i32 {
    let audit = scope.audits(policy_flags::AUDIT_FILES);
    let off = match offsets_or_deny(hook::NOTIFY, scope, audit) {
        Ok(off) => off,
        Err(v) => return v,
    };
    let dentry = kread::read_ptr(path, off.path_dentry).unwrap_or(core::ptr::null());
    let facts = path::dentry_facts(dentry, off);
    check(
        hook::NOTIFY,
        scope,
        facts,
        fmode::READ,
        policy_flags::AUDIT_FILES,
        0,
        |m, facts| decide::file(scope.flags(), fmode::READ, imode::is_dir(facts.mode), m),
    )
}

hook!(path_notify, "path_notify", |ctx, scope| notify(
    ctx.arg(0),
    scope
));

/// Every inode freed on the host: a directory's slot in the directory cache is cleared
/// before its memory can hold another inode (`dircache.rs`). No scope: the directory may
/// have been used by a confined process and freed by anyone.
#[aya_ebpf::macros::lsm(hook = "inode_free_security")]
pub fn inode_free_security(ctx: aya_ebpf::programs::LsmContext) -> i32 {
    if !crate::dircache::enabled() {
        return 0;
    }
    // Every inode, whatever its mode says now: `make_bad_inode` (a corrupted file system)
    // turns a directory in use into a regular file before it is freed. `forget` clears a
    // slot only when it holds this inode.
    let inode: *const u8 = ctx.arg(0);
    crate::dircache::forget(kread::untyped(inode));
    0
}

/// Every dentry bound to an inode on the host (a new one, or one made positive again): a
/// file cache slot holding its address is cleared before a file can be opened through it
/// (`filecache.rs`); a pty or a shared-memory file a confined process made is marked as
/// the sandbox's own (`own.rs`). No scope: the old dentry at that address may have been opened by a
/// confined process and freed by anyone.
#[aya_ebpf::macros::lsm(hook = "d_instantiate")]
pub fn d_instantiate(ctx: aya_ebpf::programs::LsmContext) -> i32 {
    let dentry: *const u8 = ctx.arg(0);
    let inode: *const u8 = ctx.arg(1);
    let off = kread::offsets();
    // A directory that has a dentry already: a move may begin (`moves.rs`).
    crate::moves::splice_begins(dentry, inode);
    // A pty made by a confined process (`terminal.rs`); a device node made by one on a
    // tmpfs (`/tmp`, `/dev`: a root command that kept `CAP_MKNOD`), its name only (what it
    // reaches is the host's device); a file made by one in the shared memory (`shm.rs`).
    // The scope is looked up only for those.
    if off.valid != 0 && !inode.is_null() {
        if crate::terminal::is_slave(dentry, inode, off) {
            if crate::scope::confined() {
                crate::own::mark_pty(inode);
            }
        } else if crate::shm::made_on_tmpfs(dentry, inode, off) {
            let mode: u16 = kread::field(inode, off.inode_i_mode).unwrap_or(0);
            if imode::is_chr(mode) || imode::is_blk(mode) {
                if crate::scope::confined() {
                    crate::own::mark_name(inode);
                }
            } else {
                crate::shm::mark_if_made_inside(dentry, inode, off);
            }
        }
    }
    if !crate::dircache::enabled() {
        return 0;
    }
    let sb: *const u8 = kread::field(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    crate::filecache::forget(&crate::filecache::Key {
        dentry,
        ino: kread::field(inode, off.inode_i_ino).unwrap_or(0),
        dev: kread::field(sb, off.super_block_s_dev).unwrap_or(0),
    });
    0
}
