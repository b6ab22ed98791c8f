//! The audit record: one OCSF event per line, typed. These structs are the schema: what
//! they serialize is what the log holds, and `ocsf_check` validates samples of every class
//! against the vendored OCSF dictionary (`sandbox-user/ocsf/`).
//!
//! Classes: File System Activity (1001) for opens and changes of names and attributes,
//! Process Activity (1007) for exec and for the boundary with other processes and the
//! kernel, Network Activity (4001) for addresses, unix peers, listening and socket
//! creation, and the Base Event (0) for what the audit pipeline itself reports (records
//! lost, records that could not be read). sandbox's own fields, under `unmapped`, keep the
//! vocabulary of the policy: the rule as named in the policy, the glob or CIDR as written,
//! the reason, the access mode, the verb of the hook.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use sandbox_common::{EVENT_F_DISCONNECTED, EVENT_F_OUTSIDE_MOUNTS, decision};
use serde::Serialize;

use super::decode::{Event, Hook};
use super::name::{ACTOR_SLOTS, ActorKey, Formatter, Named};

/// The OCSF version the records follow.
pub const OCSF_VERSION: &str = "1.8.0";
/// Version of sandbox's own fields (`unmapped`); bumped on incompatible changes. 1 was the
/// layout before OCSF.
pub const SCHEMA_VERSION: u32 = 2;
/// OCSF profiles the records use: `host` (actor, device), `security_control` (action,
/// disposition, policy), `datetime` (`time_dt`).
const PROFILES: [&str; 3] = ["host", "security_control", "datetime"];

/// One line of the audit log.
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    pub metadata: &'static Encoded<Metadata>,
    /// When it happened, epoch milliseconds: taken in the kernel for kernel records.
    pub time: u64,
    pub time_dt: String,
    pub category_uid: u32,
    pub category_name: &'static str,
    pub class_uid: u32,
    pub class_name: &'static str,
    pub activity_id: u32,
    pub activity_name: &'static str,
    pub type_uid: u64,
    pub type_name: &'static str,
    pub severity_id: u32,
    pub severity: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disposition_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disposition: Option<&'static str>,
    pub status_id: u32,
    pub status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_detail: Option<&'static str>,
    /// Records lost: how many. A denial record with a count: how many more identical
    /// denials the kernel counted instead of sending, between `start_time` (the first
    /// record of the run of them) and `end_time` (the last of them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_time: Option<u64>,
    /// The terminal line's text: what happened, in one sentence.
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<Policy>,
    /// Shared by the records of one process (see `Formatter::actor`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<Arc<Encoded<Actor>>>,
    /// The same for every record of a run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<Arc<Encoded<Device>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<File>,
    /// Exec: the program launched. Signals, ptrace, scheduling: the target process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub process: Option<Process>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src_endpoint: Option<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst_endpoint: Option<Endpoint>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connection_info: Option<ConnectionInfo>,
    pub unmapped: Unmapped,
}

/// A part of records the same in many of them (the acting process, this host, the
/// product), with its JSON made once: written as it is (`audit::json`, serde_json).
#[derive(Debug, Clone)]
pub struct Encoded<T> {
    pub value: T,
    json: Box<serde_json::value::RawValue>,
}

impl<T: Serialize> Encoded<T> {
    pub fn new(value: T) -> Self {
        let mut bytes = Vec::new();
        // Neither can fail: these are structs of strings and numbers.
        let json = super::json::write(&mut bytes, &value)
            .ok()
            .and_then(|()| String::from_utf8(bytes).ok())
            .and_then(|s| serde_json::value::RawValue::from_string(s).ok())
            .unwrap_or_else(|| serde_json::value::to_raw_value(&()).unwrap_or_default());
        Self { value, json }
    }
}

impl<T> Serialize for Encoded<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.json.serialize(s)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Metadata {
    pub version: &'static str,
    pub product: Product,
    pub profiles: [&'static str; 3],
    pub log_name: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Product {
    pub name: &'static str,
    pub vendor_name: &'static str,
    pub version: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Policy {
    pub name: Arc<str>,
    /// `false` in audit mode: the policy only reported.
    pub is_applied: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Actor {
    pub user: User,
    pub process: Process,
}

#[derive(Debug, Clone, Serialize)]
pub struct User {
    pub uid: String,
}

// `parent_process` is OCSF's name.
#[allow(clippy::struct_field_names)]
#[derive(Debug, Clone, Default, Serialize)]
pub struct Process {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// The command name (`comm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The executable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<File>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_process: Option<Box<Process>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct File {
    pub name: String,
    pub path: String,
    pub type_id: u32,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl File {
    fn at(path: String, type_id: u32) -> Self {
        let name = path.rsplit('/').next().unwrap_or_default().to_owned();
        let kind = match type_id {
            1 => "Regular File",
            2 => "Folder",
            5 => "Local Socket",
            7 => "Symbolic Link",
            _ => "Unknown",
        };
        Self {
            name,
            path,
            type_id,
            kind,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Device {
    pub type_id: u32,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub hostname: String,
    pub os: Os,
}

#[derive(Debug, Clone, Serialize)]
pub struct Os {
    pub name: &'static str,
    pub type_id: u32,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub kernel_release: String,
}

impl Device {
    /// This machine, read once.
    pub fn this_host() -> Self {
        let read = |p: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_owned())
                .unwrap_or_default()
        };
        Self {
            type_id: 0,
            kind: "Unknown",
            hostname: read("/proc/sys/kernel/hostname"),
            os: Os {
                name: "Linux",
                type_id: 200,
                kind: "Linux",
                kernel_release: read("/proc/sys/kernel/osrelease"),
            },
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Endpoint {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// A unix socket: its path, or `@name` for an abstract one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConnectionInfo {
    pub direction_id: u32,
    pub direction: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_ver_id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol_ver: Option<&'static str>,
}

/// sandbox's own fields.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Unmapped {
    pub schema_version: u32,
    /// The hook's verb: `open`, `mkdir`, `rename`, `connect`, `send`, `signal`, ...;
    /// `audit_loss` and `audit_error` for the pipeline's own records.
    pub activity: &'static str,
    /// The rule that decided, as the policy names it (`files.deny[0]`, `network.default`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The rule as written (`~/.ssh/**`, `10.0.0.0/8`); empty for implicit rules.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// File opens: `read`, `write`, `read_write`; changes of names: `write`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor: Option<Arc<Encoded<ActorExtra>>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<FileExtra>,
    /// A unix socket's listening peer, where the kernel knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<Peer>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ptrace_mode: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ioctl_cmd: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bpf_cmd: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<KeyUse>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<Socket>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_option: Option<SocketOption>,
    /// Written by a later run for a run whose sandbox died.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphaned: Option<Orphaned>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ActorExtra {
    pub gid: u32,
    /// The cgroup, relative to the cgroup root (`/sandbox/run-...`).
    pub cgroup: Option<String>,
    pub cgroup_id: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileExtra {
    pub inode: u64,
    pub dev: u32,
    pub truncated: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub disconnected: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub outside_mounts: bool,
    /// The path's exact bytes when they are not valid UTF-8 (`file.path` shows U+FFFD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_hex: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Peer {
    pub pid: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Socket {
    pub family: u16,
    #[serde(rename = "type")]
    pub kind: u32,
    pub protocol: u32,
}

/// A `setsockopt(2)`: the level (`SOL_*`, a protocol number) and the option.
#[derive(Debug, Clone, Serialize)]
pub struct SocketOption {
    pub level: u32,
    pub option: u32,
}

/// A `kernel_read_file`/`kernel_load_data`/lockdown check.
#[derive(Debug, Clone, Serialize)]
pub struct KernelCheck {
    pub check: &'static str,
    /// Lockdown: the kernel's reason number (numbered differently between kernels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lockdown_reason: Option<u32>,
    /// Reading a file or loading data: the `kernel_read_file_id`, and what it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub what: Option<&'static str>,
}

/// A kernel key or keyring the command used or made (`keyctl`, `add_key`, `request_key`,
/// `/proc/keys`).
#[derive(Debug, Clone, Serialize)]
pub struct KeyUse {
    /// The key's serial number (what `keyctl show` lists; 0 for one being made).
    pub serial: u32,
    /// What was asked of it (the kernel's `key_need_perm`, or `create`).
    pub need: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Orphaned {
    pub run: String,
}

/// An OCSF class, with its category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Base,
    FileSystem,
    Process,
    Network,
}

impl Class {
    fn uid(self) -> u32 {
        match self {
            Self::Base => 0,
            Self::FileSystem => 1001,
            Self::Process => 1007,
            Self::Network => 4001,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Base => "Base Event",
            Self::FileSystem => "File System Activity",
            Self::Process => "Process Activity",
            Self::Network => "Network Activity",
        }
    }

    fn category(self) -> (u32, &'static str) {
        match self {
            Self::Base => (0, "Uncategorized"),
            Self::FileSystem | Self::Process => (1, "System Activity"),
            Self::Network => (4, "Network Activity"),
        }
    }
}

/// What a hook's record is in OCSF: class, activity id and caption, and sandbox's verb.
/// Activities with no OCSF caption are `99` "Other", with the caption sandbox gives.
pub fn classify(hook: Hook) -> (Class, u32, &'static str, &'static str) {
    use Class::{FileSystem as Fs, Network as Net, Process as Proc};
    match hook {
        Hook::FileOpen => (Fs, 14, "Open", "open"),
        Hook::Name(verb) => {
            let (id, caption) = match verb {
                "create" | "mkdir" | "symlink" | "link" => (1, "Create"),
                "unlink" | "rmdir" => (4, "Delete"),
                "rename" => (5, "Rename"),
                "truncate" => (3, "Update"),
                "chmod" | "chown" => (7, "Set Security"),
                "watch" => (2, "Read"),
                _ => (6, "Set Attributes"),
            };
            (Fs, id, caption, verb)
        }
        Hook::Exec => (Proc, 1, "Launch", "exec"),
        Hook::Protect(verb) => {
            let (id, caption) = match verb {
                "ptrace" => (3, "Open"),
                "signal" => (99, "Signal"),
                "bpf" => (99, "BPF"),
                "mount" => (99, "Mount"),
                "umount" => (99, "Unmount"),
                "pivot_root" => (99, "Change Root"),
                "task" => (99, "Set Scheduling"),
                "ioctl" => (99, "Terminal Input Injection"),
                "kernel" => (99, "Load Into Kernel"),
                "clone_into_cgroup" => (99, "Clone Into Cgroup"),
                "key" => (99, "Use Kernel Key"),
                "user_namespace" => (99, "Create User Namespace"),
                _ => (99, "Other"),
            };
            (Proc, id, caption, verb)
        }
        Hook::SocketCreate => (Net, 99, "Socket", "socket"),
        Hook::SocketOption => (Net, 99, "Set Socket Option", "setsockopt"),
        Hook::Net("listen") => (Net, 7, "Listen", "listen"),
        Hook::Unix("connect") | Hook::Net("connect") => (Net, 1, "Open", "connect"),
        Hook::Unix(verb) | Hook::Net(verb) => (Net, 6, "Traffic", verb),
    }
}

/// "Class: Activity", made once for each pair (a few dozen in all) and kept.
fn type_name(class: Class, activity: &'static str) -> &'static str {
    type Names = std::collections::HashMap<(u32, &'static str), &'static str>;
    static NAMES: std::sync::Mutex<Option<Names>> = std::sync::Mutex::new(None);
    let make = || format!("{}: {activity}", class.name());
    let Ok(mut names) = NAMES.lock() else {
        return make().leak();
    };
    names
        .get_or_insert_default()
        .entry((class.uid(), activity))
        .or_insert_with(|| make().leak())
}

/// Epoch milliseconds of a `CLOCK_BOOTTIME` instant (0: now).
pub fn wall_ms(boot_ns: u64) -> u64 {
    let now = now_ms();
    if boot_ns == 0 {
        return now;
    }
    match boot_ns_now() {
        0 => now,
        b => (now + boot_ns / 1_000_000).saturating_sub(b / 1_000_000),
    }
}

/// `CLOCK_BOOTTIME` now, in nanoseconds (the kernel's `bpf_ktime_get_boot_ns`); 0 if the
/// clock cannot be read.
pub fn boot_ns_now() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).map_or(0, |ts| {
        ts.tv_sec().unsigned_abs() * 1_000_000_000 + ts.tv_nsec().unsigned_abs()
    })
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// UTC time as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub fn rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + std::time::Duration::from_millis(ms)).to_string()
}

/// `metadata`: the same in every record.
static METADATA: std::sync::LazyLock<Encoded<Metadata>> = std::sync::LazyLock::new(|| {
    Encoded::new(Metadata {
        version: OCSF_VERSION,
        product: Product {
            name: "sandbox",
            vendor_name: "sandbox",
            version: env!("CARGO_PKG_VERSION"),
        },
        profiles: PROFILES,
        log_name: "audit",
    })
});

impl Record {
    /// The parts every record shares.
    fn base(
        class: Class,
        activity: (u32, &'static str),
        verb: &'static str,
        time: u64,
        message: String,
    ) -> Self {
        let (category_uid, category_name) = class.category();
        let (activity_id, activity_name) = activity;
        Self {
            metadata: &METADATA,
            time,
            time_dt: rfc3339_ms(time),
            category_uid,
            category_name,
            class_uid: class.uid(),
            class_name: class.name(),
            activity_id,
            activity_name,
            type_uid: u64::from(class.uid()) * 100 + u64::from(activity_id),
            type_name: type_name(class, activity_name),
            severity_id: 3,
            severity: "Medium",
            action_id: None,
            action: None,
            disposition_id: None,
            disposition: None,
            status_id: 0,
            status: "Unknown",
            status_detail: None,
            count: None,
            start_time: None,
            end_time: None,
            message,
            policy: None,
            actor: None,
            device: None,
            file: None,
            process: None,
            src_endpoint: None,
            dst_endpoint: None,
            connection_info: None,
            unmapped: Unmapped {
                schema_version: SCHEMA_VERSION,
                activity: verb,
                ..Unmapped::default()
            },
        }
    }

    /// Records the audit pipeline lost (ring buffer full, log not writable): how many and
    /// why; `orphaned` names the dead run whose records they were.
    pub fn loss(count: u64, why: &str, orphaned: Option<&str>) -> Self {
        let mut r = Self::base(
            Class::Base,
            (99, "Records Lost"),
            "audit_loss",
            now_ms(),
            format!("{count} audit record(s) lost: {why}"),
        );
        r.count = Some(count);
        r.unmapped.orphaned = orphaned.map(|run| Orphaned {
            run: run.to_owned(),
        });
        r
    }

    /// A kind of escape sequence the command wrote to its terminal and the pty's filter
    /// did not pass on (`what`, e.g. a clipboard write), once per kind and run: the
    /// terminal is the user's, and such a write is the command acting on it.
    pub fn terminal_filtered(what: &str) -> Self {
        let mut r = Self::base(
            Class::Base,
            (99, "Terminal Output Filtered"),
            "terminal_output",
            now_ms(),
            format!("the command wrote {what} to the terminal: not passed on"),
        );
        r.blocked();
        r
    }

    /// The command reached one of its `limits` (`rule`: `limits.memory`, `limits.pids`;
    /// `what` says what the kernel did), once per limit and run, at its end.
    pub fn limit_reached(rule: &str, source: String, what: String) -> Self {
        let mut r = Self::base(
            Class::Base,
            (99, "Limit Reached"),
            "limit_reached",
            now_ms(),
            what,
        );
        r.unmapped.rule = Some(rule.to_owned());
        r.unmapped.rule_source = Some(source);
        r.blocked();
        r
    }

    /// The operation did not happen: denied, blocked, failed.
    fn blocked(&mut self) {
        self.action_id = Some(2);
        self.action = Some("Denied");
        self.disposition_id = Some(2);
        self.disposition = Some("Blocked");
        self.status_id = 2;
        self.status = "Failure";
    }

    /// Bytes the audit pipeline could not turn into a record (their record is lost).
    pub fn error(message: String, orphaned: Option<&str>) -> Self {
        let mut r = Self::base(
            Class::Base,
            (99, "Audit Error"),
            "audit_error",
            now_ms(),
            message,
        );
        r.severity_id = 4;
        r.severity = "High";
        r.status_id = 2;
        r.status = "Failure";
        r.unmapped.orphaned = orphaned.map(|run| Orphaned {
            run: run.to_owned(),
        });
        r
    }
}

impl Formatter<'_> {
    /// The record of a kernel event, named with this run's policy.
    pub fn record(&self, e: &Event) -> Record {
        self.record_named(e, self.named(e))
    }

    /// [`Formatter::record`] with the event's names worked out already (shared with its
    /// terminal line).
    pub fn record_named(&self, e: &Event, n: Named) -> Record {
        let mut r = self.record_with(e, &n);
        r.policy = Some(Policy {
            name: self.policy_name.clone(),
            is_applied: e.header.decision == decision::DENY,
        });
        r.unmapped.rule = Some(n.rule);
        r.unmapped.rule_source = Some(n.source);
        r
    }

    /// A record a run whose sandbox died left in its ring buffer (found by the clean-up
    /// sweep of a later run): its policy is gone, so only the reason is known;
    /// `unmapped.orphaned.run` names the dead run.
    pub fn orphan_record(&self, e: &Event, run: &str) -> Record {
        self.orphan_record_named(e, &self.named(e), run)
    }

    /// [`Formatter::orphan_record`] with the event's names worked out already.
    pub fn orphan_record_named(&self, e: &Event, n: &Named, run: &str) -> Record {
        let mut r = self.record_with(e, n);
        r.unmapped.orphaned = Some(Orphaned {
            run: run.to_owned(),
        });
        if e.header.exe_len == 0
            && let Some(a) = r.actor.as_mut()
        {
            // The process is long gone: its pid may name another one now.
            let mut actor = a.value.clone();
            actor.process.file = None;
            *a = Arc::new(Encoded::new(actor));
        }
        r
    }

    fn record_with(&self, e: &Event, n: &Named) -> Record {
        let h = &e.header;
        let (class, activity_id, caption, verb) = classify(e.hook);
        let blocked = h.decision == decision::DENY;
        let mut r = Record::base(
            class,
            (activity_id, caption),
            verb,
            wall_ms(h.time_ns),
            Self::message(e, n),
        );
        if blocked {
            r.blocked();
            // Which errno (EACCES or EPERM) the hook returned is not in the event: a flag
            // for it made 6.1's path_truncate program return 0 on a deny (see ARCHITECTURE).
            r.status_detail = Some("denied by the policy");
        } else {
            // Audit mode: the operation went on; only this record says it would not have.
            r.action_id = Some(1);
            r.action = Some("Allowed");
            r.disposition_id = Some(17);
            r.disposition = Some("Logged");
        }
        r.unmapped.reason = Some(Self::reason_name(h.reason));
        let (actor, extra) = self.actor(e);
        r.actor = Some(actor);
        r.unmapped.actor = Some(extra);
        r.device = Some(self.device.clone());
        Self::object(e, n, verb, &mut r);
        r
    }

    /// The acting process, as `actor` and `unmapped.actor` say it: made once for a run
    /// of records of the same process (a flood is one process's), kept per pid in
    /// [`Formatter::actors`] while every field it is made of is the same.
    fn actor(&self, e: &Event) -> (Arc<Encoded<Actor>>, Arc<Encoded<ActorExtra>>) {
        let h = &e.header;
        let slot = h.pid as usize % ACTOR_SLOTS;
        if let Ok(kept) = self.actors.lock()
            && let Some((k, actor, extra)) = &kept[slot]
            && k.is_of(e)
        {
            return (actor.clone(), extra.clone());
        }
        let comm = String::from_utf8_lossy(h.comm.split(|b| *b == 0).next().unwrap_or_default())
            .into_owned();
        let actor = Arc::new(Encoded::new(Actor {
            user: User {
                uid: h.uid.to_string(),
            },
            process: Process {
                pid: Some(h.tgid),
                tid: Some(h.pid),
                name: Some(comm),
                file: self.exe(e).map(|p| File::at(p, 1)),
                parent_process: Some(Box::new(Process {
                    pid: Some(h.ppid),
                    ..Process::default()
                })),
            },
        }));
        let extra = Arc::new(Encoded::new(ActorExtra {
            gid: h.gid,
            cgroup: self.cgroups.name(h.cgroup_id),
            cgroup_id: h.cgroup_id,
        }));
        // The executable is read from /proc when the kernel did not record it: not kept.
        if let Some(key) = ActorKey::of(e)
            && let Ok(mut kept) = self.actors.lock()
        {
            kept[slot] = Some((key, actor.clone(), extra.clone()));
        }
        (actor, extra)
    }

    /// What the record is about: the file, the program, the target process, the address.
    fn object(e: &Event, n: &Named, verb: &'static str, r: &mut Record) {
        let h = &e.header;
        let target = || {
            Some(Process {
                pid: Some(h.target),
                ..Process::default()
            })
        };
        match e.hook {
            Hook::FileOpen | Hook::Name(_) => {
                let type_id = match verb {
                    "mkdir" | "rmdir" => 2,
                    "symlink" => 7,
                    _ => 0,
                };
                r.file = Some(File::at(n.path.clone(), type_id));
                r.unmapped.access = Some(if matches!(e.hook, Hook::FileOpen) {
                    Self::access(e)
                } else {
                    "write"
                });
                r.unmapped.file = Some(Self::file_extra(e, n));
            }
            Hook::Exec => {
                r.process = Some(Process {
                    pid: Some(h.tgid),
                    file: Some(File::at(n.path.clone(), 1)),
                    ..Process::default()
                });
                r.unmapped.file = Some(Self::file_extra(e, n));
            }
            Hook::Protect(_) => {
                match verb {
                    "bpf" => r.unmapped.bpf_cmd = Some(h.target),
                    "signal" => {
                        r.process = target();
                        r.unmapped.signal = Some(h.access);
                    }
                    "ptrace" => {
                        r.process = target();
                        r.unmapped.ptrace_mode = Some(h.access);
                    }
                    "task" => r.process = target(),
                    "ioctl" => r.unmapped.ioctl_cmd = Some(h.access),
                    "kernel" => r.unmapped.kernel = Some(kernel_check(h.access, h.target)),
                    "key" => {
                        r.unmapped.key = Some(KeyUse {
                            serial: h.target,
                            need: key_need(h.access),
                        });
                    }
                    _ => {}
                }
                // Process Activity names a process: the target, else the actor itself.
                if r.process.is_none() {
                    r.process = Some(Process {
                        pid: Some(h.tgid),
                        ..Process::default()
                    });
                }
            }
            Hook::Unix(_) => {
                r.dst_endpoint = Some(Endpoint {
                    name: Some(n.path.clone()),
                    ..Endpoint::default()
                });
                r.connection_info = Some(outbound(None));
                if h.target != 0 {
                    r.unmapped.peer = Some(Peer { pid: h.target });
                }
            }
            Hook::SocketCreate => {
                r.unmapped.socket = Some(Socket {
                    family: h.family,
                    kind: h.access,
                    protocol: h.target,
                });
            }
            Hook::SocketOption => {
                r.unmapped.socket_option = Some(SocketOption {
                    level: h.access,
                    option: h.target,
                });
            }
            Hook::Net(_) => {
                let ip = Self::dest(e);
                let endpoint = Some(Endpoint {
                    ip: Some(ip.to_string()),
                    port: Some(h.port),
                    name: None,
                });
                let mut info = outbound(Some(ip.is_ipv4()));
                if verb == "listen" {
                    info.direction_id = 1;
                    info.direction = "Inbound";
                    r.src_endpoint = endpoint;
                } else {
                    r.dst_endpoint = endpoint;
                }
                r.connection_info = Some(info);
            }
        }
    }

    fn file_extra(e: &Event, n: &Named) -> FileExtra {
        let h = &e.header;
        FileExtra {
            inode: h.ino,
            dev: h.dev,
            truncated: h.flags & sandbox_common::EVENT_F_PATH_TRUNCATED != 0,
            disconnected: h.flags & EVENT_F_DISCONNECTED != 0,
            outside_mounts: h.flags & EVENT_F_OUTSIDE_MOUNTS != 0,
            path_hex: n.raw.as_ref().map(|bytes| {
                bytes.iter().fold(String::new(), |mut s, b| {
                    let _ = write!(s, "{b:02x}");
                    s
                })
            }),
        }
    }
}

fn outbound(ipv4: Option<bool>) -> ConnectionInfo {
    ConnectionInfo {
        direction_id: 2,
        direction: "Outbound",
        protocol_ver_id: ipv4.map(|v4| if v4 { 4 } else { 6 }),
        protocol_ver: ipv4.map(|v4| {
            if v4 {
                "Internet Protocol version 4 (IPv4)"
            } else {
                "Internet Protocol version 6 (IPv6)"
            }
        }),
    }
}

/// The kind of code a `kernel_read_file`/`kernel_load_data` check was for (the kernel's
/// `kernel_read_file_id`, the same order in every kernel this project supports).
/// The kernel's `enum key_need_perm` (include/linux/key.h).
pub fn key_need(need: u32) -> &'static str {
    match need {
        1 => "view",
        2 => "read",
        3 => "write",
        4 => "search",
        5 => "link",
        6 => "setattr",
        7 => "unlink",
        8 => "sysadmin",
        9 => "revoke",
        10 => "assume_authority",
        11 => "deferred",
        sandbox_common::KEY_CREATE => "create",
        _ => "unspecified",
    }
}

pub fn read_file_kind(id: u32) -> &'static str {
    match id {
        2 => "a module",
        3 => "a kexec image",
        4 => "a kexec initramfs",
        5 => "a security policy",
        6 => "an x509 certificate",
        _ => "data",
    }
}

fn kernel_check(how: u32, id: u32) -> KernelCheck {
    match how {
        // Lockdown reasons are numbered differently between kernels: the number only.
        3 => KernelCheck {
            check: "lockdown",
            lockdown_reason: Some(id),
            id: None,
            what: None,
        },
        1 | 2 => KernelCheck {
            check: if how == 1 { "read_file" } else { "load_data" },
            lockdown_reason: None,
            id: Some(id),
            what: Some(read_file_kind(id)),
        },
        _ => KernelCheck {
            check: "unknown",
            lockdown_reason: None,
            id: Some(how),
            what: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of record the programs send has a caption of its own: none falls back
    /// to "Other" (a verb misspelt between `decode` and `classify` would).
    #[test]
    fn every_hook_has_its_own_caption() {
        let mut seen = 0;
        for id in 0..=255u32 {
            let Ok(hook) = Hook::try_from(id) else {
                continue;
            };
            seen += 1;
            let (_, _, caption, _) = classify(hook);
            assert_ne!(caption, "Other", "hook {id}: {hook:?}");
        }
        assert!(seen >= 33, "{seen} hooks decoded");
    }

    #[test]
    fn rfc3339_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_000_000_123), "2026-11-18T11:06:40.123Z");
    }
}
