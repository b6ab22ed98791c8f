//! Name changes (create, mknod, mkdir, symlink, unlink, rmdir, link, rename) and attribute
//! changes (truncate, chmod, chown, times, xattrs, ACLs): each is a write to the name,
//! denied where a write would be. One name per program: link and rename are checked at two
//! hooks each (the source at one, the destination at the other), which keeps every program
//! within the verifier's budget.

use sandbox_common::decide::{self, Deny, FileMatch, fmode, guard, imode};
use sandbox_common::{accept, hook, policy_flags, reason};

use super::file::{check, offsets_or_deny};
use super::hook;
use crate::kread;
use crate::maps::{RENAME_DEST, RenameDest};
use crate::path;
use crate::scope::Scope;

/// Judges a change to the name `dentry` (see `decide::name_change` for `guard`).
/// `EXISTING`: the name may name a file already (removed, renamed, replaced, linked,
/// changed), whose inode is judged too; a name being made has none. `mode`: the mode the
/// change gives the file ([`NO_MODE`], a mode made or set, or [`LINKED`]), for
/// [`set_id_made`].
#[inline(always)]
fn check_name<const EXISTING: bool>(
    hook_id: u32,
    scope: Scope,
    dentry: *const u8,
    guard: u32,
    mode: u32,
) -> i32 {
    check_name_noting::<EXISTING, false>(
        hook_id,
        scope,
        (dentry, core::ptr::null()),
        guard,
        mode,
        |_| {},
    )
}

/// The change gives the file no mode.
const NO_MODE: u32 = 1 << 16;
/// The change is a new name for the file as it is (a hard link).
const LINKED: u32 = 1 << 17;
/// The change sets an extended attribute or ACL (an ACL rewrites the group's bits of the
/// mode inside the file system, past `inode_setattr`).
const ACL: u32 = 1 << 18;
/// The set-id bits.
const SET_ID_BITS: u16 = imode::S_ISUID | imode::S_ISGID;

/// The change makes a set-user-ID or set-group-ID file (`reason::SET_ID`), which would run
/// later outside the sandbox with its owner's powers (a root command's copy of a shell,
/// `chmod 4755`, is a root shell for every user of the host): a file made with either bit,
/// a mode that adds one (group-executable or not: an ACL can make it so later), an ACL or
/// extended attribute set on a file that has one, a name given to one that has none (an
/// unnamed `O_TMPFILE` made with the bits, which passes no name hook, or a deleted one).
/// Directories are not (set-group-ID on a directory only passes its group on); a new name
/// for a set-id file that has one already (a package manager's backup link) is not.
/// `nlink`: the file's link count, read only for a link.
#[inline(always)]
fn set_id_made(mode: u32, file_mode: u16, nlink: impl FnOnce() -> u32) -> bool {
    if mode == NO_MODE || imode::is_dir(file_mode) {
        return false;
    }
    if mode == LINKED {
        return file_mode & SET_ID_BITS != 0 && nlink() == 0;
    }
    if mode == ACL {
        return file_mode & SET_ID_BITS != 0;
    }
    #[expect(clippy::cast_possible_truncation, reason = "modes are 16 bits")]
    let new = mode as u16;
    !imode::is_dir(new) && new & !file_mode & SET_ID_BITS != 0
}

/// [`check_name`], telling `note` what matched the name first. `(dentry, file)`: the name,
/// and with `FILE` the open file it is the name of, whose inode is read from the file
/// (`f_inode`) rather than the dentry: from 6.12 the verifier trusts for inode storage an
/// inode read from a hook's `struct file`, not one read through its `f_path.dentry`. (The
/// name's directory is not judged then: a change through a file makes no name.)
#[inline(always)]
fn check_name_noting<const EXISTING: bool, const FILE: bool>(
    hook_id: u32,
    scope: Scope,
    (dentry, file): (*const u8, *const u8),
    guard: u32,
    mode: u32,
    note: impl Fn(&FileMatch),
) -> i32 {
    let audit = scope.audits(policy_flags::AUDIT_FILES);
    let off = match offsets_or_deny(hook_id, scope, audit) {
        Ok(off) => off,
        Err(v) => return v,
    };
    let inode_of = || -> *const u8 {
        if FILE {
            kread::field(file, off.file_f_inode).unwrap_or(core::ptr::null())
        } else {
            kread::field(dentry, off.dentry_d_inode).unwrap_or(core::ptr::null())
        }
    };
    let facts = path::dentry_facts(dentry, &off);
    // A name of shared memory that no confined process made (`shm.rs`): removed, renamed,
    // replaced, linked or changed, it is another program's segment; a name made or
    // changed in a directory there that no confined process made changes another
    // program's directory.
    let shm_dev = scope.info.shm_dev;
    let foreign_shm = shm_dev != 0
        && facts.dev == shm_dev
        && (crate::shm::foreign(dentry, inode_of(), off)
            || !FILE && crate::shm::foreign_parent(dentry, off));
    // A device node that is not the command's own (a pty it made, its terminal): removed,
    // renamed, replaced, linked or changed, it is the host's (`/dev/null` replaced by a
    // file, `/dev/urandom` by a symlink, `/dev/ptmx` or another shell's terminal
    // `chmod`ed); only its contents are the policy's to allow.
    let foreign_device = if EXISTING && (imode::is_chr(facts.mode) || imode::is_blk(facts.mode)) {
        let inode = inode_of();
        // A whiteout (character device 0:0, which anyone may make: `RENAME_WHITEOUT`,
        // container image layers unpacked by `tar`) has no driver behind it.
        let whiteout = imode::is_chr(facts.mode)
            && kread::field::<u32>(inode, off.inode_i_rdev).unwrap_or(u32::MAX) == 0;
        if whiteout {
            0
        } else if inode.is_null() {
            // Not read (fail closed); tested apart so that the verifier knows the inode
            // below is one.
            reason::HOST_DEVICE
        } else if crate::own::ours(inode) {
            0
        } else if imode::is_chr(facts.mode) && crate::terminal::is_terminal(dentry, inode, off) {
            reason::FOREIGN_TERMINAL
        } else {
            reason::HOST_DEVICE
        }
    } else {
        0
    };
    // One number the verifier does not know, rather than a boolean each: each kept a
    // state of its own through the whole resolve (on 6.1 `inode_setattr` twice over).
    let foreign = kread::forget(
        if foreign_shm {
            reason::FOREIGN_SHARED_MEMORY
        } else if foreign_device != 0 {
            foreign_device
        } else if set_id_made(mode, facts.mode, || {
            kread::field(inode_of(), off.inode_i_nlink).unwrap_or(0)
        }) {
            reason::SET_ID
        } else {
            0
        },
        scope.info.flags,
    );
    check(
        hook_id,
        scope,
        facts,
        fmode::WRITE,
        policy_flags::AUDIT_FILES,
        0,
        |m, facts| {
            note(m);
            decide::name_change(scope.flags(), imode::is_dir(facts.mode), guard, m)
                .or((foreign != 0).then_some(Deny::because(foreign)))
        },
    )
}

#[inline(always)]
fn pid_tgid() -> u64 {
    // SAFETY: plain helper call.
    unsafe { aya_ebpf::helpers::generated::bpf_get_current_pid_tgid() }
}

/// A name-change program: `dentry N` names the dentry parameter; `guard` what else the
/// change does (`decide::guard`).
macro_rules! name_hook {
    ($name:ident, $hook:literal, $id:expr, dentry $arg:literal, $guard:expr) => {
        name_hook!($name, $hook, $id, dentry $arg, $guard, |_ctx| NO_MODE);
    };
    ($name:ident, $hook:literal, $id:expr, dentry $arg:literal, $guard:expr, $mode:expr) => {
        hook!($name, $hook, |ctx, scope| {
            check_name::<true>($id, scope, ctx.arg::<*const u8>($arg), $guard, ($mode)(&ctx))
        });
    };
    ($name:ident, $hook:literal, $id:expr, new dentry $arg:literal, $guard:expr) => {
        name_hook!($name, $hook, $id, new dentry $arg, $guard, |_ctx| NO_MODE);
    };
    ($name:ident, $hook:literal, $id:expr, new dentry $arg:literal, $guard:expr, $mode:expr) => {
        hook!($name, $hook, |ctx, scope| {
            check_name::<false>($id, scope, ctx.arg::<*const u8>($arg), $guard, ($mode)(&ctx))
        });
    };
}

/// The mode argument (`umode_t`) of `inode_create` and `inode_mknod`: the new file's.
#[inline(always)]
fn mode_arg(ctx: &aya_ebpf::programs::LsmContext) -> u32 {
    // The hooks' third argument is the mode, passed as an integer.
    u32::from(ctx.arg::<u16>(2))
}

const NONE: u32 = guard::NONE;
const NEW: u32 = guard::NEW;
const NEW_LINK: u32 = guard::NEW_LINK;
const NEW_DIR: u32 = guard::NEW_DIR;
const OLD: u32 = guard::OLD;

/// `renameat2`'s flag that swaps the two names (include/uapi/linux/fs.h).
const RENAME_EXCHANGE: u32 = 1 << 1;

/// A directory renamed within its directory arrives from nowhere new (`NEW`: still judged
/// as new at an ancestor's name, not as brought into a read-only span, `accept::SPAN`,
/// where it stood already).
#[inline(always)]
fn in_place(guard: u32, same_dir: bool) -> u32 {
    if guard == NEW_DIR && same_dir {
        NEW
    } else {
        guard
    }
}

/// `a` and `b` are names in the same directory (fail closed: not when unread).
#[inline(always)]
fn same_parent(a: *const u8, b: *const u8) -> bool {
    let off = kread::offsets();
    match (
        kread::read_ptr(a, off.dentry_d_parent),
        kread::read_ptr(b, off.dentry_d_parent),
    ) {
        (Ok(pa), Ok(pb)) => !pa.is_null() && pa == pb,
        _ => false,
    }
}

/// The guard of a name that `old` (the file renamed or linked) will stand at: `NEW_LINK`
/// for a symlink (or one that cannot be read: fail closed), `NEW_DIR` for a directory,
/// else `NEW`.
#[inline(always)]
fn new_guard(old: *const u8) -> u32 {
    let off = kread::offsets();
    let inode: *const u8 = kread::read_ptr(old, off.dentry_d_inode).unwrap_or(core::ptr::null());
    let mode: u16 = kread::read(inode, off.inode_i_mode).unwrap_or(imode::S_IFLNK);
    if imode::is_lnk(mode) {
        NEW_LINK
    } else if imode::is_dir(mode) {
        NEW_DIR
    } else {
        NEW
    }
}

// A directory may be made at an ancestor's name (the rules below it apply as before);
// anything else made there would stand where a protected tree is expected.
name_hook!(inode_create, "inode_create", hook::CREATE, new dentry 1, NEW, mode_arg);
name_hook!(inode_mknod, "inode_mknod", hook::CREATE, new dentry 1, NEW, mode_arg);
name_hook!(inode_mkdir, "inode_mkdir", hook::MKDIR, new dentry 1, NONE);
name_hook!(inode_symlink, "inode_symlink", hook::SYMLINK, new dentry 1, NEW_LINK);
name_hook!(inode_unlink, "inode_unlink", hook::UNLINK, dentry 1, NONE);
name_hook!(inode_rmdir, "inode_rmdir", hook::RMDIR, dentry 1, OLD);
// link(old, new): the new name at inode_link, the file linked to at path_link (a new name
// for a protected file is a way around its path rules).
hook!(inode_link, "inode_link", |ctx, scope| {
    let guard = new_guard(ctx.arg::<*const u8>(0));
    check_name::<false>(hook::LINK, scope, ctx.arg::<*const u8>(2), guard, NO_MODE)
});
name_hook!(path_link, "path_link", hook::LINK, dentry 0, NONE, |_ctx| LINKED);
// rename(old, new): the old name at inode_rename, the new one at path_rename (both names
// change). The kernel calls inode_rename a second time with the names swapped for
// RENAME_EXCHANGE (first `new, old`, then `old, new`), so each moving name is seen there
// as the old one, with its directories, and as the name the other file arrives at
// (path_rename notes the exchange).
// Before the scope lookup, for any task: the loader's check that the directory cache
// reads the right rename count (`dircache::note_rename`).
hook!(
    inode_rename,
    "inode_rename",
    |ctx, scope| {
    let (old_dir, new_dir): (*const u8, *const u8) = (ctx.arg(0), ctx.arg(2));
    let (old, new): (*const u8, *const u8) = (ctx.arg(1), ctx.arg(3));
    let key = pid_tgid();
    // SAFETY: the value is plain data copied out immediately.
    let dest = unsafe { RENAME_DEST.get(&key) }.copied();
    // The rename path_rename noted, if this is it (or one of an exchange's two calls).
    let noted = dest.filter(|d| {
        d.old == old as u64 && d.new == new as u64 || d.old == new as u64 && d.new == old as u64
    });
    // An exchange. Without a note (the LRU map lost it to other tasks' renames, or the
    // kernel renames without path_rename): one when the new name has a file, which would
    // then arrive here (fail closed).
    let swap = match noted {
        Some(d) => d.exchange != 0,
        None => kread::read_ptr(new, kread::offsets().dentry_d_inode)
            .map_or(true, |inode| !inode.is_null()),
    };
    // Kept for an exchange's second call, the one in the rename's own order.
    let last = noted.is_none_or(|d| d.exchange == 0 || d.old == old as u64);
    if last {
        let _ = RENAME_DEST.remove(&key);
    }
    // Moving into a protected area too keeps the files protected (the destination as
    // path_rename matched it; unknown for the second name of RENAME_EXCHANGE: not kept).
    let stays =
        dest.is_some_and(|d| d.dentry == new as u64 && d.mask & (1 << accept::CONTAINED) != 0);
    let leaves = if old_dir == new_dir || stays {
        guard::OLD
    } else {
        guard::MOVE
    };
    // What arrives at the name in its place, for an exchange.
    let guard = if swap {
        leaves + guard::ARRIVES * in_place(new_guard(new), old_dir == new_dir)
    } else {
        leaves
    };
    let v = check_name::<true>(hook::RENAME, scope, old, guard, NO_MODE);
    if v != 0 && !last {
        // Refused at the first call: there is no second.
        let _ = RENAME_DEST.remove(&key);
    }
    v
    },
    if crate::dircache::note_rename()
        && crate::moves::rename_begins(ctx.arg::<*const u8>(1), ctx.arg::<*const u8>(3))
);
hook!(path_rename, "path_rename", |ctx, scope| {
    let (old, new): (*const u8, *const u8) = (ctx.arg(1), ctx.arg(3));
    // RENAME_EXCHANGE: the new name's file arrives at the old name too. The name judged
    // as new is the one a symlink arrives at, if one does (the other name's write and
    // ancestry are judged at `inode_rename`, which the kernel calls for both names).
    let flags: u32 = ctx.arg(4);
    let exchange = flags & RENAME_EXCHANGE != 0;
    let (name, guard) = if exchange && new_guard(new) == NEW_LINK {
        (old, NEW_LINK)
    } else {
        (new, in_place(new_guard(old), same_parent(old, new)))
    };
    let judged = (name, core::ptr::null());
    check_name_noting::<true, false>(hook::RENAME, scope, judged, guard, NO_MODE, |m| {
        let v = RenameDest {
            dentry: name as u64,
            mask: m.path,
            exchange: u32::from(exchange),
            old: old as u64,
            new: new as u64,
        };
        let _ = RENAME_DEST.insert(&pid_tgid(), &v, 0);
    })
});
// Attribute changes: every one goes through `notify_change`, and so through inode_setattr
// (truncate(2), ftruncate, O_TRUNC, chmod/fchmod, chown/fchown, utimes, the set-id bits a
// write drops: recorded as chmod). Its LSM hook gained an idmap parameter (two parameters
// on 6.1, three on 6.12 and 7.3): one program per form, the loader picks by BTF. What
// changes (`iattr.ia_valid`) names the record's operation; the decision is the same write
// to the name. One program and one decision where path_truncate, path_chmod and
// path_chown each added theirs before it.
macro_rules! setattr_hook {
    ($name:ident, dentry $arg:literal, iattr $attr:literal) => {
        hook!($name, "inode_setattr", |ctx, scope| {
            let attr: *const u8 = ctx.arg($attr);
            // `ia_valid` is the first field of `struct iattr` in every kernel, `ia_mode`
            // (the new mode, type bits included) the second.
            let valid: u32 = kread::field(attr, 0).unwrap_or(0);
            let mode = if valid & ATTR_MODE != 0 {
                u32::from(kread::field::<u16>(attr, 4).unwrap_or(imode::S_ISUID))
            } else {
                NO_MODE
            };
            check_name::<true>(
                setattr_id(valid),
                scope,
                ctx.arg::<*const u8>($arg),
                NONE,
                mode,
            )
        });
    };
}

/// `ia_valid`'s bit for a new mode (include/linux/fs.h).
const ATTR_MODE: u32 = 1;

/// The record's operation for the attribute changes `ia_valid` (include/linux/fs.h, the
/// same bits in every kernel): a new size is a truncate, a new owner or group a chown, a
/// new mode a chmod (a chown of a set-id file drops its set-id bits too: a chown).
#[inline(always)]
fn setattr_id(ia_valid: u32) -> u32 {
    const ATTR_UID: u32 = 2;
    const ATTR_GID: u32 = 4;
    const ATTR_SIZE: u32 = 8;
    if ia_valid & ATTR_SIZE != 0 {
        hook::TRUNCATE
    } else if ia_valid & (ATTR_UID | ATTR_GID) != 0 {
        hook::CHOWN
    } else if ia_valid & ATTR_MODE != 0 {
        hook::CHMOD
    } else {
        hook::SETATTR
    }
}

setattr_hook!(inode_setattr_2, dentry 0, iattr 1);
setattr_hook!(inode_setattr_3, dentry 1, iattr 2);
// Extended attributes and ACLs have hooks of their own.
name_hook!(inode_setxattr, "inode_setxattr", hook::XATTR, dentry 1, NONE, |_ctx| ACL);
name_hook!(inode_removexattr, "inode_removexattr", hook::XATTR, dentry 1, NONE);
name_hook!(inode_set_acl, "inode_set_acl", hook::XATTR, dentry 1, NONE, |_ctx| ACL);
name_hook!(inode_remove_acl, "inode_remove_acl", hook::XATTR, dentry 1, NONE);
// File attributes (`chattr`'s flags, `fsxattr`: nodump, noatime, sync, a project id; a
// root command's immutable and append-only) from 6.17: `file_setattr(2)` by name and the
// ioctls below both reach `vfs_fileattr_set` and this hook.
name_hook!(inode_file_setattr, "inode_file_setattr", hook::SETATTR, dentry 0, NONE);

/// The ioctls that change a file's attributes through any descriptor of it, one opened
/// for reading too (include/uapi/linux/fs.h, fsverity.h, fscrypt.h): `FS_IOC_SETFLAGS`
/// (and its 32-bit form), `FS_IOC_FSSETXATTR`, `FS_IOC_SETVERSION` (and its 32-bit form),
/// `FS_IOC_ENABLE_VERITY` (read-only for good), `FS_IOC_SET_ENCRYPTION_POLICY` (an empty
/// directory's files encrypted from then on, with a key of the caller's); ext4's
/// `EXT4_IOC_SETVERSION` (and its 32-bit form) and btrfs's `BTRFS_IOC_SUBVOL_SETFLAGS` (a
/// subvolume made read-only or writable again). Before 6.17 only `file_ioctl` sees them:
/// each is judged as a write to the file's name.
const FILE_ATTR_IOCTLS: [u32; 10] = [
    0x4008_6602,
    0x4004_6602,
    0x401c_5820,
    0x4008_7602,
    0x4004_7602,
    0x4080_6685,
    0x800c_6613,
    0x4008_6604,
    0x4004_6604,
    0x4008_941a,
];

/// `cmd` changes the attributes of the file it is given (checked before the scope lookup:
/// every ioctl of the host runs this).
#[inline(always)]
pub(crate) fn sets_file_attributes(cmd: u32) -> bool {
    FILE_ATTR_IOCTLS.contains(&cmd)
}

/// An attribute ioctl (`sets_file_attributes`) on `file`: a write to its name.
#[inline(always)]
pub(crate) fn file_attributes(file: *const u8, scope: Scope) -> i32 {
    let off = kread::offsets();
    let dentry: *const u8 = kread::field(file, off.file_f_path_dentry).unwrap_or(core::ptr::null());
    check_name_noting::<true, true>(hook::SETATTR, scope, (dentry, file), NONE, NO_MODE, |_| {})
}
