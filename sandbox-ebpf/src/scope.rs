//! Which policy, if any, applies to the current task: the first bound cgroup among its
//! ancestors. A set of programs binds one cgroup (a run's, or `attach`'s): then every task
//! pays one array lookup, one helper call and a compare. With several bindings, a task
//! pays a filter bit and a hash lookup per level that has one.

use aya_ebpf::helpers::bpf_get_current_ancestor_cgroup_id;
use sandbox_common::{MAX_CGROUP_LEVEL, PolicyInfo, filter, policy_flags};

use crate::kread;

use crate::maps::{CGROUP_FILTER, CGROUP_POLICY, POLICIES, SCOPE};

/// The policy an in-scope task is confined by.
#[derive(Clone, Copy)]
pub struct Scope {
    pub policy_id: u32,
    pub info: &'static PolicyInfo,
    /// The bound cgroup (id) the task is confined by: the sandbox is this cgroup's subtree.
    pub cgroup: u64,
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

/// Whether cgroup `id` may be bound (its bit in `CGROUP_FILTER`; true when the filter
/// cannot be read): where it is not, the hash lookup is spared.
#[inline(always)]
fn may_be_bound(id: u64) -> bool {
    let (word, bit) = filter::cgroup_slot(id);
    CGROUP_FILTER
        .get(word)
        .is_none_or(|w| (*w >> (bit & 63)) & 1 != 0)
}

/// The nearest bound ancestor of the current task's cgroup: (cgroup id, policy id).
#[inline(always)]
fn nearest_binding() -> Option<(u64, u32)> {
    let ctl = SCOPE.get(0)?;
    let mask = ctl.levels;
    if mask == 0 {
        return None;
    }
    if ctl.sole != 0 {
        // The set's one binding: the task is in scope if its ancestor at that level is the
        // bound cgroup (a task less deep has none there: 0).
        // SAFETY: plain helper call.
        let id = unsafe { bpf_get_current_ancestor_cgroup_id(ctl.sole_level as i32) };
        return (id == ctl.sole).then_some((id, ctl.sole_policy));
    }
    let mut level = 0;
    // Up to the deepest bound level only: a task outside every sandbox (most of the host)
    // does not walk the levels above it.
    while level < MAX_CGROUP_LEVEL && mask >> level != 0 {
        if mask & (1u64 << level) != 0 {
            // SAFETY: plain helper call; returns 0 when the task's cgroup is shallower.
            let id = unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) };
            if id == 0 {
                return None;
            }
            // SAFETY: the value is a plain u32 copied out immediately.
            if may_be_bound(id)
                && let Some(policy_id) = unsafe { CGROUP_POLICY.get(&id) }
            {
                return Some((id, *policy_id));
            }
        }
        level += 1;
    }
    None
}

/// The id of the bound cgroup the current task is confined by (its nearest bound
/// ancestor), 0 when none.
#[inline(always)]
pub fn bound_cgroup() -> u64 {
    nearest_binding().map_or(0, |(id, _)| id)
}

/// The live policy of the current task, if it is in scope.
#[inline(always)]
pub fn current() -> Option<Scope> {
    let (cgroup, policy_id) = nearest_binding()?;
    let info = POLICIES.get(policy_id)?;
    (info.live != 0).then_some(Scope {
        policy_id,
        info,
        cgroup,
    })
}

/// `cgrp` (a `struct cgroup *`) is `bound` or below it: inside the same sandbox. A cgroup
/// that cannot be read is outside (fail closed).
#[inline(always)]
pub fn cgroup_within(cgrp: *const u8, bound: u64) -> bool {
    let off = kread::offsets();
    let mut c = cgrp;
    let mut i = 0;
    while i <= MAX_CGROUP_LEVEL {
        let Ok(kn) = kread::read_ptr(c, off.cgroup_kn) else {
            return false;
        };
        let Ok(id) = kread::read::<u64>(kn, off.kernfs_node_id) else {
            return false;
        };
        if id == bound {
            return true;
        }
        match kread::read_ptr(c, off.cgroup_parent) {
            Ok(p) if !p.is_null() => c = p,
            _ => return false,
        }
        i += 1;
    }
    false
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
