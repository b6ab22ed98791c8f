//! Audit records: the kernel's bytes decoded (`decode`), named with the policy and the host
//! (`name`), typed as OCSF events (`record`, the schema), told as one line on the terminal
//! (`line`), encoded (`json`: serde_json's bytes, cheaper) and written to the owner-only log
//! (`sink`). Counts of identical denials the
//! kernel did not send are matched to their first record by `aggregate`.

pub mod aggregate;
mod decode;
pub mod json;
mod line;
mod name;
mod record;
mod sink;

#[cfg(test)]
mod ocsf_check;

pub use decode::{DecodeError, Event, Hook};
pub use name::{Formatter, Named};
pub use record::{OCSF_VERSION, Record, SCHEMA_VERSION, boot_ns_now, rfc3339_ms, wall_ms};
pub use sink::{AuditFile, AuditOpenError, Lines};

/// The built-in policy, compiled for a user `u` working in `/work` (tests of records).
#[cfg(test)]
pub(crate) fn built_in_policy() -> crate::compile::CompiledPolicy {
    let ctx = crate::policy::Context {
        home: "/home/u".into(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    let p = crate::policy::load_str(crate::policy::DEFAULT_POLICY, "default", &ctx).unwrap();
    crate::compile::compile(&p, 1).unwrap()
}
