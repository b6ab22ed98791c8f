//! Exec: `bprm_check_security` judges the binary the kernel will run (`bprm->file`): on
//! the second round of a shebang script that is the interpreter, so a denied interpreter
//! is caught as well. Never `comm` or argv text.

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
        |m, facts| decide::exec(scope.flags(), imode::privileged(facts.mode), m),
    )
}

hook!(bprm_check_security, "bprm_check_security", |ctx, scope| {
    bprm_check(ctx.arg(0), scope)
});
