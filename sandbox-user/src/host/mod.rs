//! What sandbox reads and guards on the host: the mount table, cgroups, interface
//! addresses, the capabilities a command keeps, and directories opened safely.

pub mod caps;
pub mod cgroup;
pub mod mounts;
pub mod netif;
pub mod safepath;
