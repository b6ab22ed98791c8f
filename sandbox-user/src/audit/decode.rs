//! Kernel records: the ring buffer's bytes as a header, the hook and the two paths.

use sandbox_common::{EventHeader, hook};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    FileOpen,
    /// Reaching an address: `connect`, or `send` with a destination address.
    Net(&'static str),
    Exec,
    /// A change of names, judged as a write: the activity (`create`, `unlink`, ...).
    Name(&'static str),
    /// Self-protection and the boundary with other processes: `bpf`, `signal`, `ptrace`,
    /// `mount`, `task` (scheduling/priority of another process), `ioctl` (terminal input).
    Protect(&'static str),
    /// A unix socket peer: `connect` (stream) or `send` (datagram).
    Unix(&'static str),
    /// `socket(2)` of a family/type/protocol outside `network.sockets`.
    SocketCreate,
    /// `setsockopt(2)` of an option that takes packets past the network policy.
    SocketOption,
}

impl TryFrom<u32> for Hook {
    type Error = u32;
    fn try_from(v: u32) -> Result<Self, u32> {
        match v {
            hook::FILE_OPEN => Ok(Self::FileOpen),
            hook::SOCKET_CONNECT => Ok(Self::Net("connect")),
            hook::SOCKET_SENDMSG => Ok(Self::Net("send")),
            hook::BPF => Ok(Self::Protect("bpf")),
            hook::SIGNAL => Ok(Self::Protect("signal")),
            hook::PTRACE => Ok(Self::Protect("ptrace")),
            hook::MOUNT => Ok(Self::Protect("mount")),
            hook::BPRM_CHECK => Ok(Self::Exec),
            hook::CREATE => Ok(Self::Name("create")),
            hook::MKDIR => Ok(Self::Name("mkdir")),
            hook::SYMLINK => Ok(Self::Name("symlink")),
            hook::UNLINK => Ok(Self::Name("unlink")),
            hook::RMDIR => Ok(Self::Name("rmdir")),
            hook::LINK => Ok(Self::Name("link")),
            hook::RENAME => Ok(Self::Name("rename")),
            hook::TRUNCATE => Ok(Self::Name("truncate")),
            hook::CHMOD => Ok(Self::Name("chmod")),
            hook::CHOWN => Ok(Self::Name("chown")),
            hook::SETATTR => Ok(Self::Name("setattr")),
            hook::XATTR => Ok(Self::Name("xattr")),
            hook::UNIX_CONNECT => Ok(Self::Unix("connect")),
            hook::UNIX_SEND => Ok(Self::Unix("send")),
            hook::SOCKET_CREATE => Ok(Self::SocketCreate),
            hook::SOCKET_OPTION => Ok(Self::SocketOption),
            hook::LISTEN => Ok(Self::Net("listen")),
            hook::IOCTL => Ok(Self::Protect("ioctl")),
            hook::TASK => Ok(Self::Protect("task")),
            hook::UMOUNT => Ok(Self::Protect("umount")),
            hook::PIVOT_ROOT => Ok(Self::Protect("pivot_root")),
            hook::KERNEL => Ok(Self::Protect("kernel")),
            hook::CLONE_INTO_CGROUP => Ok(Self::Protect("clone_into_cgroup")),
            hook::KEY => Ok(Self::Protect("key")),
            hook::USER_NAMESPACE => Ok(Self::Protect("user_namespace")),
            hook::NOTIFY => Ok(Self::Name("watch")),
            other => Err(other),
        }
    }
}

/// A decoded kernel record.
#[derive(Debug, Clone)]
pub struct Event {
    pub header: EventHeader,
    pub hook: Hook,
    /// Path relative to the superblock root (file and exec events).
    pub sb_path: Vec<u8>,
    /// The acting process's executable, relative to the root of `header.exe_dev`.
    pub exe_path: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than the header")]
    Short(usize),
    #[error("unknown hook {0}")]
    Hook(u32),
    #[error("path length {len} exceeds the record ({avail} bytes)")]
    PathLen { len: u32, avail: usize },
}

impl Event {
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let n = size_of::<EventHeader>();
        if bytes.len() < n {
            return Err(DecodeError::Short(bytes.len()));
        }
        // SAFETY: EventHeader is repr(C) plain integers (any bit pattern is valid) and the
        // slice holds at least size_of::<EventHeader>() bytes; read_unaligned copes with
        // any alignment.
        let header: EventHeader = unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) };
        let hook = match Hook::try_from(header.hook).map_err(DecodeError::Hook)? {
            // The kernel opening a file to run it (execve's binary, the ELF interpreter it
            // names, `uselib`'s library): refused at the open, a launch refused.
            Hook::FileOpen if header.access & sandbox_common::decide::fmode::EXEC != 0 => {
                Hook::Exec
            }
            h => h,
        };
        let avail = bytes.len() - n;
        let (p, x) = (header.path_len as usize, header.exe_len as usize);
        if p + x > avail {
            return Err(DecodeError::PathLen {
                len: header.path_len + header.exe_len,
                avail,
            });
        }
        Ok(Self {
            header,
            hook,
            sb_path: bytes[n..n + p].to_vec(),
            exe_path: bytes[n + p..n + p + x].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_rejects_bad_records_without_panicking() {
        assert_eq!(
            Event::decode(&[0u8; 10]).unwrap_err(),
            DecodeError::Short(10)
        );
        let mut h = EventHeader {
            hook: 99,
            ..EventHeader::default()
        };
        let bytes = |h: &EventHeader| {
            // SAFETY: EventHeader is plain old data.
            unsafe {
                std::slice::from_raw_parts(
                    (h as *const EventHeader).cast::<u8>(),
                    size_of::<EventHeader>(),
                )
            }
            .to_vec()
        };
        assert_eq!(
            Event::decode(&bytes(&h)).unwrap_err(),
            DecodeError::Hook(99)
        );
        h.hook = hook::FILE_OPEN;
        h.path_len = 5;
        assert!(matches!(
            Event::decode(&bytes(&h)),
            Err(DecodeError::PathLen { .. })
        ));
        let mut b = bytes(&h);
        b.extend_from_slice(b"/a/bc");
        assert_eq!(Event::decode(&b).unwrap().sb_path, b"/a/bc");
    }
}
