//! What sandbox reads and guards on the host: the mount table, cgroups, interface
//! addresses, the capabilities a command keeps, directories opened safely, and the service
//! manager (readiness notifications, the journal), the user a command runs as.

pub mod caps;
pub mod cgroup;
pub mod mounts;
pub mod netif;
pub mod safepath;
pub mod systemd;
pub mod user;
