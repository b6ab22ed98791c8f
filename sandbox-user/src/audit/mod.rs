//! Audit records: the kernel's bytes decoded (`decode`), named with the policy and the host
//! (`name`), typed as OCSF events (`record`, the schema), told as one line on the terminal
//! (`line`), and written to the owner-only log (`sink`).

mod decode;
mod line;
mod name;
mod record;
mod sink;

#[cfg(test)]
mod ocsf_check;

pub use decode::{DecodeError, Event, Hook};
pub use name::Formatter;
pub use record::{OCSF_VERSION, Record, SCHEMA_VERSION, rfc3339_ms, wall_ms};
pub use sink::{AuditFile, AuditOpenError};
