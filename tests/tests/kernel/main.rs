//! Enforcement tests against the real kernel: the real `sandbox` binary, real cgroups, real
//! files, real sockets, a real audit file. They need root and BPF LSM, so on a development
//! machine they run inside a VM: `cargo xtask test`. On the host they are ignored (never
//! passed); where they do run, a kernel that cannot enforce makes them fail loudly.
//!
//! One test binary (the policy programs load once per `sandbox run`, and the tests run one
//! at a time: LSM state is global), one module per area. Each test is one or more
//! `sandbox run`s, each in its own cgroup, written as tables (see `sandbox_tests`): the
//! operations with the errno each must get, then the audit records they must leave.

mod boundary;
mod exec;
mod explain;
mod files;
mod hosts;
mod integrity;
mod lifecycle;
mod limits;
mod mounts;
mod names;
mod net;
mod protect;
