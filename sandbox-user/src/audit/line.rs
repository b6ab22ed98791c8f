//! The terminal line of a record (and the record's `message`): one sentence a person reads.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::net::IpAddr;

use sandbox_common::decision;

use super::decode::{Event, Hook};
use super::name::{Formatter, Named};
use super::record::{key_need, read_file_kind};

impl Formatter<'_> {
    /// One readable line for the terminal. Paths, the command name and the rule as
    /// written are escaped (`term::escape`): nothing from the kernel or the agent reaches
    /// the terminal as a control sequence.
    pub fn line(&self, e: &Event, n: &Named) -> String {
        format!("sandbox: {}", Self::describe(e, n, crate::term::escape))
    }

    /// The same sentence for the record's `message`, escaped as the terminal line is:
    /// `jq -r .message` would turn a JSON-escaped `\u001b` of an agent's file name back
    /// into a control sequence (and C1 and bidi controls pass JSON as they are).
    pub fn message(e: &Event, n: &Named) -> String {
        Self::describe(e, n, crate::term::escape)
    }

    fn describe(e: &Event, n: &Named, escape: fn(&str) -> Cow<'_, str>) -> String {
        let h = &e.header;
        let comm = String::from_utf8_lossy(h.comm.split(|b| *b == 0).next().unwrap_or_default());
        let comm = escape(&comm);
        let verb = if h.decision == decision::DENY {
            "denied"
        } else {
            "would deny (audit)"
        };
        let path = || escape(&n.path);
        let what = match e.hook {
            Hook::FileOpen => format!("open ({}) {}", Self::access(e), path()),
            Hook::Name(activity) => format!("{activity} {}", path()),
            Hook::Exec => format!("exec {}", path()),
            Hook::Protect("bpf") => format!("bpf() command {}", h.target),
            Hook::Protect("signal") => format!("signal {} to pid {}", h.access, h.target),
            Hook::Protect("ioctl") if h.reason == sandbox_common::reason::TTY_INJECTION => {
                format!("ioctl {:#x} (terminal input)", h.access)
            }
            Hook::Protect("ioctl") => format!("ioctl {:#x}", h.access),
            Hook::Protect("kernel") => match h.access {
                3 => format!("kernel lockdown check (reason {})", h.target),
                _ => format!("loading {} into the kernel", read_file_kind(h.target)),
            },
            Hook::Protect("clone_into_cgroup") => "clone3 into another cgroup".to_owned(),
            Hook::Protect("user_namespace") => "a new user namespace".to_owned(),
            Hook::Protect("key") if h.target != 0 => {
                format!("{} of kernel key {}", key_need(h.access), h.target)
            }
            Hook::Protect("key") => format!("{} of a kernel key", key_need(h.access)),
            Hook::Protect(activity) if h.target != 0 => format!("{activity} of pid {}", h.target),
            Hook::Protect(activity) => activity.to_owned(),
            Hook::Unix(activity) => format!("unix {activity} {}", path()),
            Hook::SocketCreate => format!(
                "socket(family {}, type {}, protocol {})",
                h.family, h.access, h.target
            ),
            Hook::SocketOption => format!("setsockopt(level {}, option {})", h.access, h.target),
            Hook::Net(activity) => match Self::dest(e) {
                IpAddr::V6(a) => format!("{activity} [{a}]:{}", h.port),
                IpAddr::V4(a) => format!("{activity} {a}:{}", h.port),
            },
        };
        let mut s = format!("{verb} {what} by {}", n.rule);
        if !n.source.is_empty() {
            let _ = write!(s, " '{}'", escape(&n.source));
        }
        let _ = write!(s, " [pid {} {comm}]", h.tgid);
        s
    }
}
