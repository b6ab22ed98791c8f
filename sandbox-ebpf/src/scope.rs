//! Which policy, if any, applies to the current task: the first bound cgroup among its
//! ancestors. Out-of-scope tasks pay one array lookup and one hash lookup per level that
//! has a binding (usually one).

use aya_ebpf::helpers::bpf_get_current_ancestor_cgroup_id;
use sandbox_common::{MAX_CGROUP_LEVEL, PolicyInfo};

use crate::maps::{CGROUP_POLICY, POLICIES, SCOPE_LEVELS};

/// The id of the bound cgroup the current task is confined by (its nearest bound
/// ancestor), 0 when none.
#[inline(always)]
pub fn bound_cgroup() -> u64 {
    let Some(mask) = SCOPE_LEVELS.get(0).copied() else {
        return 0;
    };
    let mut level = 0;
    while level < MAX_CGROUP_LEVEL {
        if mask & (1u64 << level) != 0 {
            // SAFETY: plain helper call; returns 0 when the task's cgroup is shallower.
            let id = unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) };
            if id == 0 {
                return 0;
            }
            // SAFETY: only presence is checked.
            if unsafe { CGROUP_POLICY.get(&id) }.is_some() {
                return id;
            }
        }
        level += 1;
    }
    0
}

#[inline(always)]
pub fn current_policy() -> Option<(u32, &'static PolicyInfo)> {
    let mask = *SCOPE_LEVELS.get(0)?;
    if mask == 0 {
        return None;
    }
    let mut level = 0;
    while level < MAX_CGROUP_LEVEL {
        if mask & (1u64 << level) != 0 {
            // SAFETY: plain helper call; returns 0 when the task's cgroup is shallower.
            let id = unsafe { bpf_get_current_ancestor_cgroup_id(level as i32) };
            if id == 0 {
                return None;
            }
            // SAFETY: the value is a plain u32 copied out immediately.
            if let Some(policy_id) = unsafe { CGROUP_POLICY.get(&id) } {
                let policy_id = *policy_id;
                let info = POLICIES.get(policy_id)?;
                return (info.live != 0).then_some((policy_id, info));
            }
        }
        level += 1;
    }
    None
}
