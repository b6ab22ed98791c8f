//! The BPF-LSM programs, one file per concern (as Landlock's `fs.c`, `net.c`, `task.c`):
//! each file ends with the list of its programs. Every program has the same prologue,
//! written once in [`hook!`]: honour an earlier program's deny, then find the current
//! task's policy (out of scope: allow, having paid one scope lookup). The body decides with
//! `sandbox_common::decide` and reports through [`finish`]; the slot of working memory it
//! took, if any (`work.rs`), is given back when it has.

pub mod egress;
pub mod exec;
pub mod file;
pub mod names;
pub mod net;
pub mod protect;
pub mod sockaddr;

use sandbox_common::decide::Deny;
use sandbox_common::{decision, errno};

use crate::event::{self, Report};
use crate::work::Claim;

/// Defines the program `$prog` on LSM hook `$hook`. The body runs for in-scope tasks only,
/// with `$ctx` (the `LsmContext`) and `$scope` (the task's `Scope`), and returns the
/// hook's value. The earlier program's verdict is read at the hook's arity, taken from the
/// one program table (`sandbox_common::programs`) at compile time.
macro_rules! hook {
    ($prog:ident, $hook:literal, |$ctx:ident, $scope:ident| $body:expr) => {
        $crate::hooks::hook!($prog, $hook, |$ctx, $scope| $body, if true);
    };
    // `if $pre`: a test of the hook's own arguments made before the scope lookup, so that
    // hooks on hot paths (every ioctl of the host) pay for the lookup only when it matters.
    ($prog:ident, $hook:literal, |$ctx:ident, $scope:ident| $body:expr, if $pre:expr) => {
        $crate::hooks::hook!(@program $prog, $hook, $ctx, {
            // Bound first: `!` must apply to the whole test, whatever its operators.
            let pre: bool = $pre;
            if !pre {
                return 0;
            }
            $crate::scope::decide(0, |$scope| $body)
        });
    };
    // `|ctx, scope, inbound|`: the body decides for tasks outside the scope too, with
    // `inbound` true and this set's bound policy (a task outside reaching into the
    // sandbox: `scope::decide_both`).
    ($prog:ident, $hook:literal, |$ctx:ident, $scope:ident, $inbound:ident| $body:expr) => {
        $crate::hooks::hook!(@program $prog, $hook, $ctx, {
            $crate::scope::decide_both(|$scope, $inbound| $body)
        });
    };
    // The program around a decision: an earlier LSM program's deny on this hook stays a
    // deny (its return value is the hook's last argument), then `$decide`.
    (@program $prog:ident, $hook:literal, $ctx:ident, $decide:block) => {
        #[aya_ebpf::macros::lsm(hook = $hook)]
        pub fn $prog($ctx: aya_ebpf::programs::LsmContext) -> i32 {
            const PREV: usize = sandbox_common::programs::arity(stringify!($prog));
            let prev: i32 = $ctx.arg(PREV);
            if prev != 0 {
                return $crate::hooks::honour(prev);
            }
            $decide
        }
    };
}
pub(crate) use hook;

/// A deny from an earlier LSM program on this hook stays a deny. The verifier (6.8+) wants
/// the return value provably in [-4095, 0], so the returned values are constants.
#[inline(always)]
pub fn honour(prev: i32) -> i32 {
    if prev == -errno::EACCES {
        -errno::EACCES
    } else {
        -errno::EPERM
    }
}

/// Reports a decision (in the decision's working memory, `mem`) and turns it into the
/// hook's return value: 0 in audit mode, else `-err` (`errno::EPERM` or `errno::EACCES`).
#[inline(always)]
pub fn finish(mem: Claim, mut rep: Report, v: Deny, audit: bool, err: i32) -> i32 {
    rep.decision = if audit {
        decision::AUDIT
    } else {
        decision::DENY
    };
    rep.reason = v.reason;
    rep.rule = v.rule;
    event::send(mem, &rep);
    match (audit, err) {
        (true, _) => 0,
        (false, errno::EPERM) => -errno::EPERM,
        (false, _) => -errno::EACCES,
    }
}

/// `v` as values the verifier no longer knows (`kread::forget`, with `unknown`): one
/// state from here, whatever the deny.
#[inline(always)]
pub fn forget(v: Deny, unknown: u32) -> Deny {
    Deny {
        reason: crate::kread::forget(v.reason, unknown),
        #[allow(clippy::cast_possible_truncation)] // a u16 and zero bits
        rule: crate::kread::forget(u32::from(v.rule), unknown) as u16,
    }
}

/// Fail closed when the programs cannot decide (`why`: e.g. no offsets supplied).
#[inline(always)]
pub fn deny_unresolved(
    mem: Claim,
    hook_id: u32,
    policy_id: u32,
    why: u32,
    audit: bool,
    err: i32,
) -> i32 {
    crate::diag::fail_closed(hook_id, why, 0);
    finish(
        mem,
        Report::bare(hook_id, policy_id),
        Deny::because(why),
        audit,
        err,
    )
}
