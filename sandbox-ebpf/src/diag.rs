//! Kernel-side diagnostics (aya-log), on the fail-closed branches only: a decision the
//! programs could not make (no offsets, a path that does not resolve, a mount without a
//! place, no working memory free) says so, for whoever debugs a host. Never the audit path:
//! the record of the deny is sent as always. Off unless the loader turns it on
//! (`AYA_LOG_LEVEL` is read-only data fixed at load). The logging code is a global
//! function, verified once per program: a fail-closed branch costs one call, and with the
//! level off the verifier sees a constant and skips the rest.

/// A fail-closed deny of `hook_id` for `reason` (`sandbox_common::reason`), with the
/// event flags that say why a path did not resolve.
#[inline(always)]
pub fn fail_closed(hook_id: u32, reason: u32, flags: u32) {
    sandbox_fail_closed(hook_id, reason, flags);
}

/// [`fail_closed`] as a global function (`build.rs` keeps it global). Returns 0 (a global
/// function returns a scalar).
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_fail_closed(hook_id: u32, reason: u32, flags: u32) -> u32 {
    aya_log_ebpf::warn!(
        &(),
        "fail closed: hook {} reason {} flags {:x}",
        hook_id,
        reason,
        flags
    );
    0
}
