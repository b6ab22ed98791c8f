//! Policy pipeline, first two stages: text -> [`raw::RawPolicy`] (syntax, types, unknown and
//! duplicate keys, with line:column) -> [`Policy`] (globs and CIDRs parsed, variables
//! expanded, paths canonicalised). Compilation to maps is `compile`.

pub mod expand;
pub mod limits;
pub mod lint;
pub mod locate;
pub mod raw;
pub mod schema;

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
pub use raw::{AuditFormat, Mode, NetDefault};

/// The built-in default policy.
pub const DEFAULT_POLICY: &str = include_str!("default.yaml");

/// Where policies live when none is named on the command line: only root can change it
/// (sandbox refuses a policy the command's user could change, so a file in the user's own
/// home could never be used).
pub const SYSTEM_DIR: &str = "/etc/sandbox";

/// The policy file to use when `--policy` is not given, in this order:
/// `/etc/sandbox/users/USER.yaml` (USER: the user the command runs as),
/// `/etc/sandbox/policy.yaml`; `None` means the built-in policy. A file that is there is
/// used even when it is broken (a broken policy is an error, never a silent fallback).
/// Absence counts only when the kernel says "no such file" in a directory `agent` cannot
/// change (else removing a file would choose the policy): the deepest of `/etc/sandbox/users`,
/// `/etc/sandbox` and `/etc` that exists is checked as `safepath` checks the policy's own
/// directory. Any other error stops the lookup.
pub fn lookup(
    user: Option<&str>,
    agent: Option<&crate::host::safepath::Agent>,
) -> Result<Option<PathBuf>, crate::host::safepath::SafeError> {
    use crate::host::safepath::{self, SafeError};
    let dir = Path::new(SYSTEM_DIR);
    let user_file = user
        .filter(|u| !u.is_empty() && !u.contains('/') && !u.starts_with('.'))
        .map(|u| dir.join("users").join(format!("{u}.yaml")));
    if let Some(agent) = agent {
        let deepest = [dir.join("users"), dir.to_path_buf(), PathBuf::from("/etc")]
            .into_iter()
            .find(|d| d.symlink_metadata().is_ok());
        if let Some(d) = deepest {
            safepath::open_dir(&d, agent, false)?;
        }
    }
    for p in user_file.into_iter().chain([dir.join("policy.yaml")]) {
        match p.symlink_metadata() {
            Ok(_) => return Ok(Some(p)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(SafeError::Io { path: p, err }),
        }
    }
    Ok(None)
}

/// Newest policy schema version this build understands.
pub const SCHEMA_VERSION: u32 = 1;

/// A validated policy: everything parsed, expanded and absolute.
#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub files: Files,
    pub network: Network,
    pub exec: Exec,
    pub process: Process,
    /// `limits`: the run cgroup's memory and task limits.
    pub limits: limits::Limits,
    pub audit: Audit,
    /// `fallback.allow_degraded`: on a host without BPF LSM, run even when some rules
    /// cannot be enforced (they are listed at every start).
    pub allow_degraded: bool,
}

/// The privileges the command starts with (applied by `run` between fork and exec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// `PR_SET_NO_NEW_PRIVS`: setuid/setgid and file capabilities do not elevate (default).
    pub no_new_privs: bool,
    /// Capabilities kept beyond [`crate::host::caps::CapSet::default_kept`] when the command runs
    /// as root (`process.keep_capabilities`; `--keep-cap` adds to it).
    pub keep_caps: crate::host::caps::CapSet,
    /// `process.user_namespaces`: the command may make user namespaces (default false).
    pub user_namespaces: bool,
}

#[derive(Debug, Clone)]
pub struct Files {
    pub mode: Mode,
    pub workspace: PathBuf,
    pub deny: Vec<PathRule>,
    pub read_only: Vec<PathRule>,
    pub write: Vec<PathRule>,
    pub read: Vec<PathRule>,
    /// The mounts every path rule is compiled through too (`compile::alias`).
    pub aliases: Vec<crate::host::mounts::Alias>,
}

#[derive(Debug, Clone)]
pub struct Network {
    pub mode: Mode,
    pub block_private: bool,
    pub allow: Vec<NetRule>,
    pub deny: Vec<NetRule>,
    pub allow_hosts: Vec<HostRule>,
    pub default: NetDefault,
    /// Nameservers reachable on port 53 (`allow_dns`, from /etc/resolv.conf).
    pub resolvers: Vec<IpAddr>,
    /// Unix socket peers outside the sandbox that may be reached (`network.unix`):
    /// canonical path globs, or `@name` globs for abstract sockets.
    pub unix: Vec<PathRule>,
    /// Socket families in-scope tasks may create (bit `1 << AF_*`), and the inet protocol
    /// flags (`policy_flags::SOCK_*`), from `network.sockets`.
    pub sock_families: u64,
    pub sock_flags: u32,
    /// Local addresses the command may listen on (`network.listen`; default loopback).
    pub listen: Vec<NetRule>,
    /// What reaches this host: its interfaces' addresses and its local prefixes (private
    /// with `block_private`: they reach the host's own services as loopback does).
    pub host_addrs: Vec<IpNet>,
}

/// Names `network.sockets` accepts: address families (`AF_*`), and `raw`, `sctp`, `mptcp`
/// for the inet protocols that reach addresses past `connect`.
pub const SOCKET_NAMES: &[(&str, u32)] = &[
    ("unix", 1),
    ("inet", 2),
    ("ax25", 3),
    ("ipx", 4),
    ("appletalk", 5),
    ("netrom", 6),
    ("bridge", 7),
    ("atmpvc", 8),
    ("x25", 9),
    ("inet6", 10),
    ("rose", 11),
    ("decnet", 12),
    ("netbeui", 13),
    ("security", 14),
    ("key", 15),
    ("netlink", 16),
    ("packet", 17),
    ("econet", 19),
    ("atmsvc", 20),
    ("rds", 21),
    ("irda", 23),
    ("pppox", 24),
    ("wanpipe", 25),
    ("llc", 26),
    ("ib", 27),
    ("mpls", 28),
    ("can", 29),
    ("tipc", 30),
    ("bluetooth", 31),
    ("iucv", 32),
    ("rxrpc", 33),
    ("isdn", 34),
    ("phonet", 35),
    ("ieee802154", 36),
    ("caif", 37),
    ("alg", 38),
    ("nfc", 39),
    ("vsock", 40),
    ("kcm", 41),
    ("qipcrtr", 42),
    ("smc", 43),
    ("xdp", 44),
    ("mctp", 45),
];

/// `network.sockets` when the policy does not say: unix, IPv4 and IPv6 (TCP, UDP, ping),
/// and netlink (the C library reads interface addresses through it).
pub const DEFAULT_SOCKETS: &[&str] = &["unix", "inet", "inet6", "netlink"];

/// `network.listen` when the policy does not say: loopback only.
pub const DEFAULT_LISTEN: &[&str] = &["127.0.0.0/8", "::1"];

/// One `allow_hosts` entry: a name resolved by sandbox, with a port range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRule {
    pub field: String,
    pub source: String,
    pub host: String,
    pub ports: (u16, u16),
}

#[derive(Debug, Clone)]
pub struct Exec {
    pub mode: Mode,
    pub deny: Vec<PathRule>,
    pub allow: Vec<PathRule>,
    pub allow_privileged: bool,
}

#[derive(Debug, Clone)]
pub struct Audit {
    pub path: Option<PathBuf>,
    pub format: AuditFormat,
    /// Rotation: the size (bytes) past which the file is rotated, and how many old files
    /// are kept.
    pub max_size: u64,
    pub keep: u32,
}

/// Default rotation: 100 MiB per file, 5 old files.
pub const AUDIT_MAX_SIZE_MB: u64 = 100;
pub const AUDIT_KEEP: u32 = 5;

/// One path or exec pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRule {
    /// Where it came from, e.g. `files.deny[2]`.
    pub field: String,
    /// As written in the policy.
    pub source: String,
    /// Absolute, expanded, canonical glob (globset syntax). A literal path also matches
    /// everything below it; a glob matches exactly what globset says.
    pub glob: String,
    /// The canonical path when the pattern has no glob characters.
    pub literal: Option<PathBuf>,
    /// The glob as written (expanded, normalised, symlinks not followed) when a symlink
    /// makes it differ from `glob`. Protective rules match it too: the link itself (and
    /// whatever replaces it) is protected, not only its target.
    pub written: Option<String>,
}

/// One network rule: a prefix and a port range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetRule {
    pub field: String,
    pub source: String,
    pub net: IpNet,
    pub ports: (u16, u16),
}

/// A policy that cannot be used, with where and why.
#[derive(Debug)]
pub enum PolicyError {
    /// YAML syntax or type error, at a position in the file.
    Syntax {
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// One or more semantic errors: field path, value, reason, and where the field is
    /// written (line, column), when it could be found in the text.
    Invalid {
        file: String,
        errors: Vec<(FieldError, Option<(usize, usize)>)>,
    },
    Io {
        file: String,
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Syntax {
                file,
                line,
                column,
                message,
            } => write!(f, "{file}:{line}:{column}: {message}"),
            Self::Invalid { file, errors } => {
                for (i, (e, at)) in errors.iter().enumerate() {
                    if i > 0 {
                        writeln!(f)?;
                    }
                    match at {
                        Some((line, column)) => {
                            write!(f, "{file}:{line}:{column}: {}: {}", e.field, e.message)?;
                        }
                        None => write!(f, "{file}: {}: {}", e.field, e.message)?,
                    }
                }
                Ok(())
            }
            Self::Io { file, message } => write!(f, "{file}: {message}"),
        }
    }
}

impl std::error::Error for PolicyError {}

/// What validation needs from the environment: the process environment for `$VAR`, the
/// home directory for `~`, the working directory for a relative workspace.
#[derive(Debug, Clone)]
pub struct Context {
    pub home: PathBuf,
    pub cwd: PathBuf,
    pub env: std::collections::HashMap<String, String>,
    /// Nameservers of this host (/etc/resolv.conf), for `network.allow_dns`.
    pub resolvers: Vec<IpAddr>,
    /// Addresses and local prefixes of this host (`netif::local`), private with
    /// `network.block_private`.
    pub host_addrs: Vec<IpNet>,
    /// For a command running as root: the other users' home directories (canonical), where
    /// the protective rules written with `~` (`files.deny`, `files.read_only`,
    /// `exec.deny`) apply too, since root reads every user's files. Empty otherwise.
    pub other_homes: Vec<PathBuf>,
    /// Mounts whose files the programs name by another path (`host::mounts::aliases`):
    /// rules below them are compiled for both.
    pub mount_aliases: Vec<crate::host::mounts::Alias>,
}

impl Context {
    /// The context of this process, with `~` meaning `home`; `root`: the command runs as
    /// root (see [`Context::other_homes`]).
    pub fn from_process(home: PathBuf, root: bool) -> std::io::Result<Self> {
        let own = canonical_or_self(&home);
        Ok(Self {
            other_homes: if root {
                crate::host::user::homes()
                    .into_iter()
                    .filter(|h| *h != own)
                    .collect()
            } else {
                Vec::new()
            },
            home,
            cwd: std::env::current_dir()?,
            env: std::env::vars().collect(),
            resolvers: resolvers(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default()),
            host_addrs: crate::host::netif::local(),
            mount_aliases: crate::host::mounts::aliases(),
        })
    }
}

/// `nameserver` addresses of a resolv.conf.
pub fn resolvers(text: &str) -> Vec<IpAddr> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().split('%').next()?.parse().ok())
        .collect()
}

/// Reads and validates a policy file.
pub fn load_file(path: &Path, ctx: &Context) -> Result<Policy, PolicyError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| PolicyError::Io {
        file: file.clone(),
        message: e.to_string(),
    })?;
    load_str(&text, &file, ctx)
}

/// Validates policy text; `file` names it in errors.
pub fn load_str(text: &str, file: &str, ctx: &Context) -> Result<Policy, PolicyError> {
    let raw = raw::parse(text).map_err(|e| PolicyError::Syntax {
        file: file.to_owned(),
        line: e.line,
        column: e.column,
        message: e.message,
    })?;
    validate(raw, ctx).map_err(|errors| PolicyError::Invalid {
        file: file.to_owned(),
        errors: errors
            .into_iter()
            .map(|e| {
                let at = locate::locate(text, &e.field);
                (e, at)
            })
            .collect(),
    })
}

/// Most rules one policy may hold (rule ids are 16-bit in the kernel).
pub const MAX_RULES: usize = 60_000;

fn validate(raw: raw::RawPolicy, ctx: &Context) -> Result<Policy, Vec<FieldError>> {
    let mut errs = Vec::new();
    if let Some(v) = raw.version
        && (v == 0 || v > SCHEMA_VERSION)
    {
        errs.push(FieldError {
            field: "version".into(),
            message: format!(
                "unsupported version {v} (this sandbox reads version {SCHEMA_VERSION})"
            ),
        });
    }
    let mode = raw.mode.unwrap_or(Mode::Enforce);
    let workspace = match &raw.files.workspace {
        None => ctx.cwd.clone(),
        Some(w) => match expand::expand(w, ctx, &ctx.cwd) {
            Ok(p) => canonical_or_self(Path::new(&expand::normalize(&p))),
            Err(m) => {
                errs.push(FieldError {
                    field: "files.workspace".into(),
                    message: format!("'{w}': {m}"),
                });
                ctx.cwd.clone()
            }
        },
    };
    let mut canon = expand::Canonicalizer::default();
    let mut paths = |section: &str, list: &[String], exec: bool| -> Vec<PathRule> {
        // A root command's protective `~` rules cover every user's home (a second rule of
        // the same field, over the others).
        let protective = matches!(section, "files.deny" | "files.read_only" | "exec.deny");
        let mut out = Vec::new();
        for (i, s) in list.iter().enumerate() {
            let field = format!("{section}[{i}]");
            if section == "exec.allow" && bare_name(s) {
                let path = on_path(s, ctx).map_or_else(
                    || "e.g. /usr/bin/".to_owned() + s,
                    |p| p.display().to_string(),
                );
                errs.push(FieldError {
                    field,
                    message: format!(
                        "'{s}': a name without a path would allow every file of that name, \
                         one the command writes itself too; name the binary by its path \
                         ({path})"
                    ),
                });
                continue;
            }
            let others = (protective && (s == "~" || s.starts_with("~/")))
                .then(|| other_homes(&s[1..], &ctx.other_homes))
                .flatten();
            for s2 in std::iter::once(s.as_str()).chain(others.as_deref()) {
                match path_rule(s2, ctx, &workspace, exec, &mut canon) {
                    Ok((glob, literal, written)) => out.push(PathRule {
                        field: field.clone(),
                        source: s.clone(),
                        glob,
                        literal,
                        written,
                    }),
                    Err(message) => {
                        errs.push(FieldError {
                            field: field.clone(),
                            message: format!("'{s}': {message}"),
                        });
                        break;
                    }
                }
            }
        }
        out
    };
    let files = Files {
        mode: raw.files.mode.unwrap_or(mode),
        deny: paths("files.deny", &raw.files.deny, false),
        read_only: paths("files.read_only", &raw.files.read_only, false),
        write: paths("files.write", &raw.files.write, false),
        read: paths("files.read", &raw.files.read, false),
        workspace: workspace.clone(),
        aliases: ctx.mount_aliases.clone(),
    };
    let exec = Exec {
        mode: raw.exec.mode.unwrap_or(mode),
        deny: paths("exec.deny", &raw.exec.deny, true),
        allow: paths("exec.allow", &raw.exec.allow, true),
        allow_privileged: raw.exec.allow_privileged.unwrap_or(true),
    };
    // A grant that a symlink turned into the home directory or above: `ln -s ~ ~/.claude`,
    // made by the command in an earlier run, would make this run's `~/.claude` grant all
    // of the home directory.
    let home = canonical_or_self(&ctx.home);
    for r in &files.write {
        if let (Some(_), Some(target)) = (&r.written, &r.literal)
            && home.starts_with(target)
        {
            errs.push(FieldError {
                field: r.field.clone(),
                message: format!(
                    "'{}' leads through a symlink to {}, which holds the whole home \
                     directory: refused (a link made by an earlier command would widen this \
                     grant). Remove the link, or name the directory itself",
                    r.source,
                    target.display()
                ),
            });
        }
    }
    let mut unix = Vec::new();
    for (i, u) in raw.network.unix.iter().enumerate() {
        let field = format!("network.unix[{i}]");
        if let Some(name) = u.strip_prefix('@') {
            // An abstract socket name: matched as written, `@` included.
            if let Err(e) = crate::compile::matcher::glob(u) {
                errs.push(FieldError {
                    field,
                    message: format!("'{u}': {e}"),
                });
                continue;
            }
            let literal = !name.contains(['*', '?', '[', '{']);
            unix.push(PathRule {
                field,
                source: u.clone(),
                glob: u.clone(),
                literal: literal.then(|| PathBuf::from(u)),
                written: None,
            });
            continue;
        }
        match path_rule(u, ctx, &workspace, false, &mut canon) {
            Ok((glob, literal, written)) => unix.push(PathRule {
                field,
                source: u.clone(),
                glob,
                literal,
                written,
            }),
            Err(message) => errs.push(FieldError {
                field,
                message: format!("'{u}': {message} (abstract socket names start with @)"),
            }),
        }
    }
    let (mut sock_families, mut sock_flags) = (0u64, 0u32);
    if raw.network.unix_inbound == Some(true) {
        sock_flags |= sandbox_common::policy_flags::UNIX_INBOUND;
    }
    let sockets: Vec<String> = raw
        .network
        .sockets
        .clone()
        .unwrap_or_else(|| DEFAULT_SOCKETS.iter().map(|s| (*s).to_owned()).collect());
    for (i, name) in sockets.iter().enumerate() {
        match name.as_str() {
            "raw" => sock_flags |= sandbox_common::policy_flags::SOCK_RAW,
            "sctp" => sock_flags |= sandbox_common::policy_flags::SOCK_SCTP,
            "mptcp" => sock_flags |= sandbox_common::policy_flags::SOCK_MPTCP,
            n => match SOCKET_NAMES.iter().find(|(k, _)| *k == n) {
                Some((_, af)) => sock_families |= 1u64 << af,
                None => errs.push(FieldError {
                    field: format!("network.sockets[{i}]"),
                    message: format!(
                        "'{n}': not a socket family; known: {}, raw, sctp, mptcp",
                        SOCKET_NAMES
                            .iter()
                            .map(|(k, _)| *k)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }),
            },
        }
    }
    let listen_src: Vec<String> = raw
        .network
        .listen
        .clone()
        .unwrap_or_else(|| DEFAULT_LISTEN.iter().map(|s| (*s).to_owned()).collect());
    let process = process(&raw.process, &mut errs);
    let mut nets = |section: &str, list: &[String]| -> Vec<NetRule> {
        list.iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let field = format!("{section}[{i}]");
                match parse_net(s) {
                    Ok((net, ports)) => Some(NetRule {
                        field,
                        source: s.clone(),
                        net,
                        ports,
                    }),
                    Err(message) => {
                        errs.push(FieldError {
                            field,
                            message: format!("'{s}': {message}"),
                        });
                        None
                    }
                }
            })
            .collect()
    };
    let listen = nets("network.listen", &listen_src);
    let allow = nets("network.allow", &raw.network.allow);
    let deny = nets("network.deny", &raw.network.deny);
    let mut allow_hosts = Vec::new();
    for (i, h) in raw.network.allow_hosts.iter().enumerate() {
        let field = format!("network.allow_hosts[{i}]");
        let (host, ports) = match h.rsplit_once(':') {
            Some((host, p)) => match parse_ports(p) {
                Ok(ports) => (host, ports),
                Err(m) => {
                    errs.push(FieldError {
                        field,
                        message: format!("'{h}': {m}"),
                    });
                    continue;
                }
            },
            None => (h.as_str(), (0, u16::MAX)),
        };
        if !is_hostname(host) || host.starts_with("*.") {
            errs.push(FieldError {
                field,
                message: format!("'{h}': not a host name (wildcards cannot be resolved)"),
            });
            continue;
        }
        allow_hosts.push(HostRule {
            field,
            source: h.clone(),
            host: host.to_owned(),
            ports,
        });
    }
    let network = Network {
        mode: raw.network.mode.unwrap_or(mode),
        block_private: raw.network.block_private.unwrap_or(true),
        default: raw
            .network
            .default
            .unwrap_or(if raw.network.allow_hosts.is_empty() {
                NetDefault::Allow
            } else {
                NetDefault::Deny
            }),
        allow,
        deny,
        allow_hosts,
        resolvers: if raw.network.allow_dns.unwrap_or(true) {
            ctx.resolvers.clone()
        } else {
            Vec::new()
        },
        unix,
        sock_families,
        sock_flags,
        listen,
        host_addrs: ctx.host_addrs.clone(),
    };
    let audit = Audit {
        path: raw
            .audit
            .path
            .as_ref()
            .and_then(|p| match expand::expand(p, ctx, &workspace) {
                Ok(p) => Some(PathBuf::from(p)),
                Err(m) => {
                    errs.push(FieldError {
                        field: "audit.path".into(),
                        message: format!("'{p}': {m}"),
                    });
                    None
                }
            }),
        format: raw.audit.format.unwrap_or(AuditFormat::Json),
        max_size: match raw.audit.max_size_mb {
            Some(0) => {
                errs.push(FieldError {
                    field: "audit.max_size_mb".into(),
                    message: "must be at least 1".into(),
                });
                AUDIT_MAX_SIZE_MB << 20
            }
            Some(n) if n > 1 << 20 => {
                errs.push(FieldError {
                    field: "audit.max_size_mb".into(),
                    message: format!("{n} MiB is more than 1 TiB"),
                });
                AUDIT_MAX_SIZE_MB << 20
            }
            n => n.unwrap_or(AUDIT_MAX_SIZE_MB) << 20,
        },
        keep: raw.audit.keep.unwrap_or(AUDIT_KEEP),
    };
    let limits = limits(&raw.limits, &mut errs);
    let policy = Policy {
        name: raw.name.unwrap_or_else(|| "unnamed".into()),
        files,
        network,
        exec,
        process,
        limits,
        audit,
        allow_degraded: raw.fallback.allow_degraded.unwrap_or(false),
    };
    let total = policy.rule_count();
    if total > MAX_RULES {
        errs.push(FieldError {
            field: "(policy)".into(),
            message: format!("{total} rules; at most {MAX_RULES} are supported"),
        });
    }
    if errs.is_empty() {
        Ok(policy)
    } else {
        Err(errs)
    }
}

impl Policy {
    pub fn rule_count(&self) -> usize {
        let f = &self.files;
        f.deny.len()
            + f.read_only.len()
            + f.write.len()
            + f.read.len()
            + self.exec.deny.len()
            + self.exec.allow.len()
            + self.network.allow.len()
            + self.network.deny.len()
    }
}

/// The `process` section: capability names checked.
fn process(raw: &raw::RawProcess, errs: &mut Vec<FieldError>) -> Process {
    let mut keep_caps = crate::host::caps::CapSet::default();
    for (i, c) in raw.keep_capabilities.iter().enumerate() {
        match crate::host::caps::parse(c) {
            Ok(set) => keep_caps = keep_caps.union(set),
            Err(message) => errs.push(FieldError {
                field: format!("process.keep_capabilities[{i}]"),
                message,
            }),
        }
    }
    Process {
        no_new_privs: raw.no_new_privs.unwrap_or(true),
        keep_caps,
        user_namespaces: raw.user_namespaces.unwrap_or(false),
    }
}

/// The `limits` section: amounts checked; what is not written is the default.
fn limits(raw: &raw::RawLimits, errs: &mut Vec<FieldError>) -> limits::Limits {
    let mut out = limits::Limits::default();
    let io = raw.io.as_ref();
    let fields = [
        (
            "limits.memory",
            raw.memory.as_ref(),
            limits::memory as fn(&raw::RawAmount) -> _,
            &mut out.memory,
        ),
        (
            "limits.pids",
            raw.pids.as_ref(),
            limits::pids,
            &mut out.pids,
        ),
        ("limits.cpu", raw.cpu.as_ref(), limits::cpu, &mut out.cpu),
        (
            "limits.io.read",
            io.and_then(|i| i.read.as_ref()),
            limits::io_rate,
            &mut out.io_read,
        ),
        (
            "limits.io.write",
            io.and_then(|i| i.write.as_ref()),
            limits::io_rate,
            &mut out.io_write,
        ),
        (
            "limits.io.read_iops",
            io.and_then(|i| i.read_iops.as_ref()),
            limits::io_ops,
            &mut out.io_read_iops,
        ),
        (
            "limits.io.write_iops",
            io.and_then(|i| i.write_iops.as_ref()),
            limits::io_ops,
            &mut out.io_write_iops,
        ),
    ];
    for (field, written, parse, limit) in fields {
        let Some(w) = written else { continue };
        match parse(w) {
            Ok(amount) => {
                *limit = limits::Limit {
                    amount,
                    written: true,
                };
            }
            Err(message) => errs.push(FieldError {
                field: field.into(),
                message,
            }),
        }
    }
    out
}

/// A binary named without a path (`sudo`): that name anywhere, for `exec.deny`.
fn bare_name(s: &str) -> bool {
    !s.contains('/') && !s.starts_with('~') && !s.starts_with('$')
}

/// Where `name` is found on the `PATH` sandbox was started with, canonical.
fn on_path(name: &str, ctx: &Context) -> Option<PathBuf> {
    let path = ctx.env.get("PATH")?;
    path.split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .map(|p| canonical_or_self(&p))
}

/// Expands and checks one path pattern. Returns the absolute glob, when there are no glob
/// characters the literal path, and the glob as written when a symlink changed it.
fn path_rule(
    s: &str,
    ctx: &Context,
    workspace: &Path,
    exec: bool,
    canon: &mut expand::Canonicalizer,
) -> Result<(String, Option<PathBuf>, Option<String>), String> {
    if s.is_empty() {
        return Err("empty pattern".into());
    }
    if s.contains('\0') {
        return Err("NUL byte in pattern".into());
    }
    // A binary named without a slash means that name anywhere.
    let s = if exec && bare_name(s) {
        format!("/**/{s}")
    } else {
        s.to_owned()
    };
    let expanded = expand::expand_glob(&s, ctx, workspace)?;
    let normalized = expand::normalize(&expanded);
    let (glob, literal, written) = canon.pattern(&normalized);
    crate::compile::matcher::glob(&glob).map_err(|e| format!("invalid glob: {}", e.kind()))?;
    if let Some(w) = &written {
        crate::compile::matcher::glob(w).map_err(|e| format!("invalid glob: {}", e.kind()))?;
    }
    Ok((glob, literal, written))
}

/// The other users' homes a root command's `~` rule covers: a glob of more alternatives
/// than the matcher expands (256: each home twice for a literal rule, the path and what
/// is below it) is refused.
const MAX_OTHER_HOMES: usize = 100;

/// `rest` (a `~` pattern without its `~`) under each of `homes`, as one glob: `/{root,
/// home/a}/rest`; `None` without homes. A home whose path a glob could not name as
/// written (glob characters, a comma) is left out.
fn other_homes(rest: &str, homes: &[PathBuf]) -> Option<String> {
    let names: Vec<String> = homes
        .iter()
        .filter_map(|h| h.to_str()?.strip_prefix('/'))
        .filter(|h| !h.contains([',', '*', '?', '[', ']', '{', '}', '\\']))
        .take(MAX_OTHER_HOMES)
        .map(str::to_owned)
        .collect();
    // A literal path covers what is below it too; as a glob that is said outright.
    let below = if rest.contains(['*', '?', '[', ']', '{', '}', '\\']) {
        ""
    } else {
        "{,/**}"
    };
    match names.as_slice() {
        [] => None,
        [one] => Some(format!("/{one}{rest}")),
        many => Some(format!("/{{{}}}{rest}{below}", many.join(","))),
    }
}

fn canonical_or_self(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// `CIDR`, `ADDR`, `ADDR:PORT`, `CIDR:LO-HI`, `[V6]:PORT`, `[V6/LEN]:PORT`.
pub fn parse_net(s: &str) -> Result<(IpNet, (u16, u16)), String> {
    let s = s.trim();
    let (addr, port) = if let Some(rest) = s.strip_prefix('[') {
        let (a, tail) = rest.split_once(']').ok_or("missing ']'")?;
        let port = match tail {
            "" => None,
            t => Some(t.strip_prefix(':').ok_or("expected ':PORT' after ']'")?),
        };
        (a, port)
    } else if s.matches(':').count() == 1 {
        let (a, p) = s.split_once(':').unwrap_or((s, ""));
        (a, Some(p))
    } else {
        (s, None)
    };
    let net = if addr.contains('/') {
        let n: IpNet = addr.parse().map_err(|_| format!("invalid CIDR '{addr}'"))?;
        if n.trunc() != n {
            return Err(format!(
                "'{addr}' has host bits set; did you mean '{}'?",
                n.trunc()
            ));
        }
        n
    } else {
        let a: IpAddr = addr
            .parse()
            .map_err(|_| format!("invalid address '{addr}'"))?;
        IpNet::from(a)
    };
    let ports = match port {
        None => (0, u16::MAX),
        Some(p) => parse_ports(p)?,
    };
    Ok((net, ports))
}

fn parse_ports(p: &str) -> Result<(u16, u16), String> {
    let one = |x: &str| x.parse::<u16>().map_err(|_| format!("invalid port '{x}'"));
    let (lo, hi) = match p.split_once('-') {
        Some((a, b)) => (one(a)?, one(b)?),
        None => {
            let v = one(p)?;
            (v, v)
        }
    };
    if lo > hi {
        return Err(format!("port range {lo}-{hi} is empty"));
    }
    Ok((lo, hi))
}

fn is_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 253
        && h.trim_start_matches("*.").split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
        })
}

#[cfg(test)]
mod tests;
