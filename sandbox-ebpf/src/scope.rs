//! Which policy, if any, applies to the current task: the set's bound cgroup, if it is
//! among the task's ancestors. A set of programs binds one cgroup (a run's, or `attach`'s),
//! so every task, in scope or not, pays one array lookup, one helper call and a compare.

use core::ffi::c_void;

use aya_ebpf::helpers::bpf_get_current_ancestor_cgroup_id;
use aya_ebpf::helpers::generated::bpf_loop;
use sandbox_common::{MAX_CGROUP_LEVEL, PolicyInfo, policy_flags};

use crate::kread;
use crate::work::Claim;

use crate::maps::{POLICIES, SCOPE};

/// The policy an in-scope task is confined by.
#[derive(Clone, Copy)]
pub struct Scope {
    pub policy_id: u32,
    pub info: &'static PolicyInfo,
    /// The bound cgroup (id) the task is confined by: the sandbox is this cgroup's subtree.
    pub cgroup: u64,
    /// The decision's working memory, taken when first needed (`work.rs`).
    pub mem: Claim,
}

impl Scope {
    #[inline(always)]
    pub fn flags(&self) -> u32 {
        self.info.flags
    }

    /// The section behind `audit_flag` (`policy_flags::AUDIT_*`) reports instead of denying.
    #[inline(always)]
    pub fn audits(&self, audit_flag: u32) -> bool {
        self.info.flags & audit_flag != 0
    }

    /// The whole policy is in audit mode (self-protection follows the whole policy).
    #[inline(always)]
    pub fn audits_all(&self) -> bool {
        let all = policy_flags::AUDIT_FILES | policy_flags::AUDIT_NET | policy_flags::AUDIT_EXEC;
        self.info.flags & all == all
    }
}

/// The bound cgroup, if the current task is in it or below it: (cgroup id, policy id).
#[inline(always)]
fn binding() -> Option<(u64, u32)> {
    let ctl = SCOPE.get(0)?;
    let bound = ctl.id;
    if bound == 0 {
        return None;
    }
    // SAFETY: plain helper call; returns 0 when the task's cgroup is shallower.
    let id = unsafe { bpf_get_current_ancestor_cgroup_id(ctl.level as i32) };
    (id == bound).then_some((bound, ctl.policy_id))
}

/// The current task is in this set's scope (whatever its policy's state).
#[inline(always)]
pub fn confined() -> bool {
    binding().is_some()
}

/// `decide(scope)` for an in-scope task, `outside` for the rest. The slot of working memory
/// the decision takes, if it needs one ([`Scope::mem`]), is given back once it has decided:
/// every program decides through here.
#[inline(always)]
pub fn decide<R>(outside: R, decide: impl FnOnce(Scope) -> R) -> R {
    let mut cell = Claim::EMPTY;
    let Some(scope) = current(&raw mut cell) else {
        return outside;
    };
    let verdict = decide(scope);
    scope.mem.release();
    verdict
}

/// [`decide`] for tasks outside the scope too: `decide(scope, false)` for a task in scope,
/// `decide(bound, true)` for any other, given this set's live bound policy (allowed when
/// the set binds none). For tasks outside that reach into the sandbox; the record such a
/// decision writes is the bound policy's, with the outside task as its actor.
#[inline(always)]
pub fn decide_both(decide: impl FnOnce(Scope, bool) -> i32) -> i32 {
    let mut cell = Claim::EMPTY;
    let (scope, inbound) = match current(&raw mut cell) {
        Some(s) => (s, false),
        None => match bound(&raw mut cell) {
            Some(s) => (s, true),
            None => return 0,
        },
    };
    // Read back as a number LLVM knows nothing of, and returned as one of the constants the
    // hooks return: 6.8+ wants the value provably in [-4095, 0], and LLVM folded a verdict
    // into arithmetic (`-(c & 1)`) whose range 6.12's verifier loses.
    let verdict = kread::opaque(decide(scope, inbound) as u32);
    scope.mem.release();
    use sandbox_common::errno::{EACCES, EPERM};
    if verdict == 0 {
        0
    } else if verdict == (-EACCES) as u32 {
        -EACCES
    } else {
        -EPERM
    }
}

/// This set's bound policy, when it is live, whatever the current task's cgroup.
#[inline(always)]
fn bound(cell: *mut u32) -> Option<Scope> {
    let ctl = SCOPE.get(0)?;
    if ctl.id == 0 {
        return None;
    }
    let info = POLICIES.get(ctl.policy_id)?;
    (info.live != 0).then_some(Scope {
        policy_id: ctl.policy_id,
        info,
        cgroup: ctl.id,
        mem: Claim::new(cell),
    })
}

/// The live policy of the current task, if it is in scope. `cell`: where the program keeps
/// the slot of working memory its decision takes ([`Claim`]).
#[inline(always)]
fn current(cell: *mut u32) -> Option<Scope> {
    let (cgroup, policy_id) = binding()?;
    let info = POLICIES.get(policy_id)?;
    (info.live != 0).then_some(Scope {
        policy_id,
        info,
        cgroup,
        mem: Claim::new(cell),
    })
}

/// `cgrp` (a `struct cgroup *`) is `bound` or below it: inside the same sandbox. A cgroup
/// that cannot be read is outside (fail closed).
#[inline(always)]
pub fn cgroup_within(cgrp: *const u8, bound: u64) -> bool {
    let mut walk = Within {
        cgroup: cgrp as u64,
        bound,
        inside: 0,
    };
    // SAFETY: bpf_loop calls within_step with a pointer to `walk`, which outlives the call.
    unsafe {
        bpf_loop(
            MAX_CGROUP_LEVEL + 1,
            within_step as *mut c_void,
            (&raw mut walk).cast(),
            0,
        );
    }
    // Volatile: the verifier knows only what the callback may have written.
    // SAFETY: `walk` is a live local.
    unsafe { core::ptr::read_volatile(&raw const walk.inside) != 0 }
}

/// The state of [`cgroup_within`]'s walk up the cgroup tree, on the caller's stack: two
/// numbers the verifier cannot know, so `within_step` verifies once (an unrolled loop was
/// verified once per level, in every program that asks) and the verdict. No counter or
/// depth here: see `path::CgroupWalk`.
#[repr(C)]
struct Within {
    cgroup: u64,
    bound: u64,
    /// Set when `bound` is found on the way up.
    inside: u64,
}

/// One level of [`cgroup_within`]: stops (returns 1) at `bound` (inside), at the root or
/// at a cgroup that cannot be read (outside).
#[inline(never)]
extern "C" fn within_step(_index: u64, ctx: *mut c_void) -> i64 {
    // SAFETY: bpf_loop passes the `Within` of `cgroup_within`.
    let Some(w) = (unsafe { ctx.cast::<Within>().as_mut() }) else {
        return 1;
    };
    let off = kread::offsets();
    let c = w.cgroup as *const u8;
    let Ok(kn) = kread::read_ptr(c, off.cgroup_kn) else {
        return 1;
    };
    let Ok(id) = kread::read::<u64>(kn, off.kernfs_node_id) else {
        return 1;
    };
    if id == w.bound {
        w.inside = 1;
        return 1;
    }
    match kread::read_ptr(c, off.cgroup_parent) {
        Ok(p) if !p.is_null() => {
            w.cgroup = p as u64;
            0
        }
        _ => 1,
    }
}

/// The task `task` runs inside the sandbox bound at `bound` (its default-hierarchy cgroup).
#[inline(always)]
pub fn task_within(task: *const u8, bound: u64) -> bool {
    let off = kread::offsets();
    let Ok(cset) = kread::read_ptr(task, off.task_struct_cgroups) else {
        return false;
    };
    let Ok(cgrp) = kread::read_ptr(cset, off.css_set_dfl_cgrp) else {
        return false;
    };
    cgroup_within(cgrp, bound)
}

/// The socket `sk` (a `struct sock *`) was made inside the sandbox bound at `bound`.
#[inline(always)]
pub fn sock_within(sk: *const u8, bound: u64) -> bool {
    let off = kread::offsets();
    let Ok(cgrp) = kread::read_ptr(sk, off.sock_cgroup) else {
        return false;
    };
    cgroup_within(cgrp, bound)
}
