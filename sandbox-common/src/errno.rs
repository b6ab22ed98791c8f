//! The errno values the programs return. The BPF target has no libc, so they are written
//! here once; a userspace test checks them against `libc`.

/// Returned for denied network operations (`connect`, `sendmsg`).
pub const EPERM: i32 = 1;
/// Returned for denied file opens and execs ("Permission denied").
pub const EACCES: i32 = 13;
