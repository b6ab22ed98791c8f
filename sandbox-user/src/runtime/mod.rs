//! The running session: `run` (arm, start the command, pump records until it ends),
//! `attach` (existing cgroups, under systemd), and the `allow_hosts` lookups with their DNS
//! client.

pub mod attach;
pub mod dns;
pub mod hosts;
pub mod metrics;
pub mod run;
