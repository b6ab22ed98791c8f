//! Kernel-side diagnostics (aya-log), on the fail-closed branches only: a decision the
//! programs could not make (no offsets, a path that does not resolve, a mount without a
//! place, a preempted decision) says so, for whoever debugs a host. Never the audit path:
//! the record of the deny is sent as always. Off unless the loader turns it on
//! (`AYA_LOG_LEVEL` is read-only data fixed at load: off, the verifier sees a constant
//! and drops the logging code, so it costs nothing, not even verification).

/// A fail-closed deny of `hook_id` for `reason` (`sandbox_common::reason`), with the
/// event flags that say why a path did not resolve.
#[inline(always)]
pub fn fail_closed(hook_id: u32, reason: u32, flags: u32) {
    aya_log_ebpf::warn!(
        &(),
        "fail closed: hook {} reason {} flags {:x}",
        hook_id,
        reason,
        flags
    );
}
