//! The running session: `arm` (policy to programs enforcing on a bound cgroup), `session`
//! (the one event loop and the record pump), `run` (start the command, serve until it
//! ends), `attach` (existing cgroups, under systemd, reloads), and the `allow_hosts`
//! lookups with their DNS client.

pub mod arm;
pub mod attach;
pub mod dns;
pub mod hosts;
pub mod metrics;
pub mod pty;
pub mod run;
pub mod session;
