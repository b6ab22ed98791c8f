//! Name changes (create, mknod, mkdir, symlink, unlink, rmdir, link, rename) and attribute
//! changes (truncate, chmod, chown, times, xattrs, ACLs): each is a write to the name,
//! denied where a write would be. One name per program: link and rename are checked at two
//! hooks each (the source at one, the destination at the other), which keeps every program
//! within the verifier's budget.

use sandbox_common::decide::{self, fmode, imode};
use sandbox_common::{hook, policy_flags};

use super::file::{check, offsets_or_deny};
use super::hook;
use crate::kread;
use crate::path;
use crate::scope::Scope;

#[inline(always)]
fn check_name(hook_id: u32, scope: Scope, dentry: *const u8) -> i32 {
    let audit = scope.audits(policy_flags::AUDIT_FILES);
    let off = match offsets_or_deny(hook_id, scope, audit) {
        Ok(off) => off,
        Err(v) => return v,
    };
    let facts = path::dentry_facts(dentry, &off);
    check(hook_id, scope, facts, fmode::WRITE, audit, 0, |m, facts| {
        decide::file(scope.flags(), fmode::WRITE, imode::is_dir(facts.mode), m)
    })
}

/// A name-change program: `dentry N` names the dentry parameter, `path N` a `struct path *`
/// parameter.
macro_rules! name_hook {
    ($name:ident, $hook:literal, $id:expr, dentry $arg:literal) => {
        hook!($name, $hook, |ctx, scope| {
            check_name($id, scope, ctx.arg::<*const u8>($arg))
        });
    };
    ($name:ident, $hook:literal, $id:expr, path $arg:literal) => {
        hook!($name, $hook, |ctx, scope| {
            let p: *const u8 = ctx.arg($arg);
            let dentry =
                kread::read_ptr(p, kread::offsets().path_dentry).unwrap_or(core::ptr::null());
            check_name($id, scope, dentry)
        });
    };
}

name_hook!(inode_create, "inode_create", hook::CREATE, dentry 1);
name_hook!(inode_mknod, "inode_mknod", hook::CREATE, dentry 1);
name_hook!(inode_mkdir, "inode_mkdir", hook::MKDIR, dentry 1);
name_hook!(inode_symlink, "inode_symlink", hook::SYMLINK, dentry 1);
name_hook!(inode_unlink, "inode_unlink", hook::UNLINK, dentry 1);
name_hook!(inode_rmdir, "inode_rmdir", hook::RMDIR, dentry 1);
// link(old, new): the new name at inode_link, the file linked to at path_link (a new name
// for a protected file is a way around its path rules).
name_hook!(inode_link, "inode_link", hook::LINK, dentry 2);
name_hook!(path_link, "path_link", hook::LINK, dentry 0);
// rename(old, new): the old name at inode_rename, the new one at path_rename (both names
// change, also with RENAME_EXCHANGE).
name_hook!(inode_rename, "inode_rename", hook::RENAME, dentry 1);
name_hook!(path_rename, "path_rename", hook::RENAME, dentry 3);
// Attribute changes through a path or an fd (truncate(2), chmod/fchmod, chown/fchown).
name_hook!(path_truncate, "path_truncate", hook::TRUNCATE, path 0);
name_hook!(path_chmod, "path_chmod", hook::CHMOD, path 0);
name_hook!(path_chown, "path_chown", hook::CHOWN, path 0);
// Every other attribute change (utimes, ...) goes through inode_setattr, which gained an
// idmap parameter in 6.3: one program per form. Extended attributes likewise.
name_hook!(inode_setattr_2, "inode_setattr", hook::SETATTR, dentry 0);
name_hook!(inode_setattr_3, "inode_setattr", hook::SETATTR, dentry 1);
name_hook!(inode_setxattr, "inode_setxattr", hook::XATTR, dentry 1);
name_hook!(inode_removexattr, "inode_removexattr", hook::XATTR, dentry 1);
name_hook!(inode_set_acl, "inode_set_acl", hook::XATTR, dentry 1);
name_hook!(inode_remove_acl, "inode_remove_acl", hook::XATTR, dentry 1);
