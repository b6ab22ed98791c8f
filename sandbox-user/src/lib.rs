//! `sandbox`: confine AI agents (or any program) with BPF-LSM, in the kernel, with no
//! container runtime. This library is everything but argument parsing; `main.rs` is thin.
//!
//! Data flows once, left to right: policy text -> [`policy`] (validated `Policy`) ->
//! [`compile`] (`CompiledPolicy`, pure) -> [`loader`] (maps, programs, cgroup binding) ->
//! kernel hooks -> ring buffer -> [`audit`] sinks.

pub mod audit;
pub mod backend;
pub mod cli;
pub mod compile;
pub mod diag;
pub mod events;
pub mod explain;
pub mod fallback;
pub mod host;
pub mod kernel;
pub mod landlock;
pub mod policy;
pub mod preflight;
pub mod runtime;
pub mod sys;
pub mod term;

/// The BPF object built from `sandbox-ebpf` by build.rs, embedded so that kernel and user
/// code always come from the same build.
pub static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sandbox"));
