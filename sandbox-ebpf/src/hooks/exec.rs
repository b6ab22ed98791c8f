//! Exec: the deny rules are decided when the kernel opens a file to run it (`file_open`
//! with `__FMODE_EXEC`: execve's binary, a script's interpreter, the ELF interpreter a
//! program names, which passes no `bprm_check_security` of its own); then
//! `bprm_check_security` judges the binary the kernel will run (`bprm->file`) against
//! `exec.allow` and the set-id rule: on the second round of a shebang script that is the
//! interpreter. Never `comm` or argv text.

use sandbox_common::decide::{self, imode};
use sandbox_common::{hook, policy_flags};

use super::file::{check, offsets_or_deny};
use super::hook;
use crate::kread;
use crate::path;
use crate::scope::Scope;

#[inline(always)]
fn bprm_check(bprm: *const u8, scope: Scope) -> i32 {
    let audit = scope.audits(policy_flags::AUDIT_EXEC);
    let off = match offsets_or_deny(hook::BPRM_CHECK, scope, audit) {
        Ok(off) => off,
        Err(v) => return v,
    };
    let Ok(file) = kread::read_ptr(bprm, off.linux_binprm_file) else {
        // A kernel read failed for an in-scope task: fail closed.
        return -sandbox_common::errno::EACCES;
    };
    let facts = path::file_facts(file, &off);
    check(
        hook::BPRM_CHECK,
        scope,
        facts,
        0,
        policy_flags::AUDIT_EXEC,
        0,
        // The deny rules were decided when the kernel opened the binary (`file_open`).
        |m, facts| decide::exec_binary(scope.flags(), imode::privileged(facts.mode), m),
    )
}

hook!(bprm_check_security, "bprm_check_security", |ctx, scope| {
    bprm_check(ctx.arg(0), scope)
});
