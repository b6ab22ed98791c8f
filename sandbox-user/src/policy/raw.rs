//! The policy file as written: serde types only. `serde_yaml` is used here and nowhere else.

use schemars::JsonSchema;
use serde::Deserialize;

/// enforce: deny and report; audit: report what would have been denied, deny nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Enforce,
    Audit,
}

/// The audit log's format: JSON lines (OCSF records).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AuditFormat {
    Json,
}

/// A sandbox policy: what the confined command may open, execute and connect to.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(title = "sandbox policy")]
#[serde(
    deny_unknown_fields,
    expecting = "a policy: a mapping with version, name, mode, files, network, exec, process, limits, audit, fallback"
)]
pub struct RawPolicy {
    /// Schema version of the policy (1).
    #[schemars(range(min = 1, max = 1))]
    pub version: Option<u32>,
    /// Shown in audit records (`policy.name`).
    pub name: Option<String>,
    /// `enforce`: deny and record; `audit`: record what would be denied, deny nothing.
    /// Each section may override it.
    pub mode: Option<Mode>,
    /// File rules: deny, read-only, write and read areas.
    #[serde(default)]
    pub files: RawFiles,
    /// Network rules: addresses, hosts, unix sockets, socket families, listening.
    #[serde(default)]
    pub network: RawNetwork,
    /// Exec rules: binaries that may not (or only these may) run.
    #[serde(default)]
    pub exec: RawExec,
    /// The privileges the command starts with.
    #[serde(default)]
    pub process: RawProcess,
    /// How much memory and how many tasks the command may use (`sandbox run`).
    #[serde(default)]
    pub limits: RawLimits,
    /// Where and how records are written.
    #[serde(default)]
    pub audit: RawAudit,
    /// What to do on a host without BPF LSM.
    #[serde(default)]
    pub fallback: RawFallback,
}

/// What to do on a host where only the fallback backend (cgroup socket-address programs
/// and Landlock) can enforce.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, expecting = "a mapping of fallback settings")]
pub struct RawFallback {
    /// Run even when rules of the policy cannot be enforced there (they are listed at
    /// every start). Default false.
    pub allow_degraded: Option<bool>,
}

/// File rules. Paths and globs (globset syntax); `~` is the home of the user the command
/// runs as; `$VAR`, `${VAR:-default}` come from sandbox's environment; a relative pattern is
/// relative to the workspace. A pattern without glob characters covers everything below it.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, expecting = "a mapping of file rules")]
pub struct RawFiles {
    /// Overrides the policy's `mode` for file rules.
    pub mode: Option<Mode>,
    /// The directory the command works in (default: where sandbox was started).
    pub workspace: Option<String>,
    /// No open at all (read or write), no exec.
    #[serde(default)]
    pub deny: Vec<String>,
    /// May be read, not written, renamed or removed.
    #[serde(default)]
    pub read_only: Vec<String>,
    /// When non-empty: writes only here (and in the workspace).
    #[serde(default)]
    pub write: Vec<String>,
    /// When non-empty: content reads only here (and in the workspace).
    #[serde(default)]
    pub read: Vec<String>,
}

/// Network rules.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, expecting = "a mapping of network rules")]
pub struct RawNetwork {
    /// Overrides the policy's `mode` for network rules.
    pub mode: Option<Mode>,
    /// Default true: private, loopback, link-local (cloud metadata) and this host's own
    /// addresses are denied.
    pub block_private: Option<bool>,
    /// Exceptions: CIDR or address, optional `:PORT` or `:LO-HI` (IPv6 in `[..]` with a
    /// port), e.g. `10.1.2.3:443`.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Denied destinations: CIDR or address, optional `:PORT` or `:LO-HI`.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Host names (optional `:PORT`), resolved by sandbox and followed by DNS TTL; makes
    /// the network an allowlist unless `default` says otherwise.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Default true: the nameservers of /etc/resolv.conf stay reachable on port 53.
    pub allow_dns: Option<bool>,
    /// What no rule matches: `allow`, or `deny` (the default when `allow_hosts` is set).
    pub default: Option<NetDefault>,
    /// Unix socket peers outside the sandbox that may be reached: paths, globs, `@name`.
    #[serde(default)]
    pub unix: Vec<String>,
    /// Socket families (and inet protocols) that may be created: `unix`, `inet`, `inet6`,
    /// `netlink`, `raw` (ICMP raw sockets, with `CAP_NET_RAW`), `sctp`, `mptcp`... Default
    /// `[unix, inet, inet6, netlink]`.
    pub sockets: Option<Vec<String>>,
    /// Local addresses (CIDR[:PORTS]) the command may listen on. Default: loopback only.
    pub listen: Option<Vec<String>>,
    /// Default false: processes outside the sandbox may not connect or send to unix
    /// sockets the command made (named or abstract). A server of the command's at a name
    /// an outside program trusts (tmux's socket, an ssh agent's) would tell that program
    /// what to run, or take what it sends. True for a service whose clients are outside.
    pub unix_inbound: Option<bool>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NetDefault {
    Allow,
    Deny,
}

/// Exec rules.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, expecting = "a mapping of exec rules")]
pub struct RawExec {
    /// Overrides the policy's `mode` for exec rules.
    pub mode: Option<Mode>,
    /// Binaries that may not run (nor be opened): paths, globs, or a bare name (`sudo`:
    /// that name anywhere).
    #[serde(default)]
    pub deny: Vec<String>,
    /// When non-empty: only these binaries may run.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Default true; false: setuid/setgid binaries may not run.
    pub allow_privileged: Option<bool>,
}

/// The privileges the command starts with.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, expecting = "a mapping of process settings")]
pub struct RawProcess {
    /// Default true: setuid/setgid bits and file capabilities do not raise privileges.
    pub no_new_privs: Option<bool>,
    /// Capabilities a command running as root keeps beyond the default set (`all`: all).
    #[serde(default)]
    pub keep_capabilities: Vec<String>,
    /// Default false: the command may not make user namespaces (as in Docker's default
    /// seccomp profile). In one it holds every capability over what it then makes: the
    /// kernel code most local privilege escalations start in. True for programs that
    /// sandbox themselves with them (bubblewrap, Chrome's sandbox, rootless Podman).
    pub user_namespaces: Option<bool>,
}

/// The resources of the command's cgroup (`memory.max`, `pids.max`, `cpu.max`), set by
/// `sandbox run`
/// (`sandbox attach` leaves the cgroup's own limits as they are).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, expecting = "a mapping of limits")]
pub struct RawLimits {
    /// Memory the command may use, page cache and tmpfs files it wrote included: bytes,
    /// `4G`, `512M`, `80%` of the host's memory, or `max`. Default `80%`. At the limit the
    /// kernel's OOM killer kills in the sandbox only.
    pub memory: Option<RawAmount>,
    /// Tasks (processes and threads) at once: a number or `max`. Default 4096. At the
    /// limit `fork` and `clone` fail with EAGAIN.
    pub pids: Option<RawAmount>,
    /// CPU time: CPUs' worth (`2`, `0.5`), `N%` of the host's CPUs, or `max`. Default
    /// `max`. At the limit the command's threads wait for the next 100 ms period.
    pub cpu: Option<RawAmount>,
    /// Disk bandwidth, for each disk of the host. Default none.
    pub io: Option<RawIo>,
}

/// Bytes a second the command may read from and write to each disk (`io.max`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(
    deny_unknown_fields,
    expecting = "a mapping with read, write, read_iops and write_iops"
)]
pub struct RawIo {
    /// Bytes a second read from each disk: `100M`, `100M/s`, or `max`.
    pub read: Option<RawAmount>,
    /// Bytes a second written to each disk (as the kernel writes the command's data back,
    /// page cache included): `50M`, or `max`.
    pub write: Option<RawAmount>,
    /// Read requests a second to each disk: a number, or `max`.
    pub read_iops: Option<RawAmount>,
    /// Write requests a second to each disk: a number, or `max`.
    pub write_iops: Option<RawAmount>,
}

/// A number, or text such as `4G`, `80%`, `max`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(untagged, expecting = "a number, or text such as 4G, 80% or max")]
pub enum RawAmount {
    Number(u64),
    /// Not whole, or below zero (`0.5` CPUs; refused where a count is asked for).
    Decimal(f64),
    Text(String),
}

/// Where and how records are written.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, expecting = "a mapping of audit settings")]
pub struct RawAudit {
    /// The audit log (JSON lines, mode 0600), in a directory the command cannot write.
    /// Default /var/log/sandbox/audit.jsonl.
    pub path: Option<String>,
    /// `json` (the only format).
    pub format: Option<AuditFormat>,
    /// Rotate when the file would grow past this many MiB (default 100).
    pub max_size_mb: Option<u64>,
    /// Rotated files kept (`audit.jsonl.1` .. `.N`; default 5, 0 keeps none).
    pub keep: Option<u32>,
}

/// A YAML or type error with its position (1-based line and column).
#[derive(Debug)]
pub struct SyntaxError {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

pub fn parse(text: &str) -> Result<RawPolicy, SyntaxError> {
    if text.trim().is_empty() {
        return Ok(RawPolicy::default());
    }
    serde_yaml::from_str::<RawPolicy>(text).map_err(|e| {
        let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
        let message = strip_location(&e.to_string());
        SyntaxError {
            line,
            column,
            message: with_suggestion(&message),
        }
    })
}

/// serde_yaml appends " at line L column C"; the caller prints the position itself.
fn strip_location(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}

/// Adds "did you mean ..." to serde's "unknown field `x`, expected one of `a`, `b`".
fn with_suggestion(msg: &str) -> String {
    let Some(at) = msg.find("unknown field `") else {
        return msg.to_owned();
    };
    let rest = &msg[at + "unknown field `".len()..];
    let Some((unknown, tail)) = rest.split_once('`') else {
        return msg.to_owned();
    };
    let candidates: Vec<&str> = tail.split('`').skip(1).step_by(2).collect();
    let best = candidates
        .iter()
        .map(|c| (edit_distance(unknown, c), *c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min();
    match best {
        Some((_, c)) => format!("{msg}; did you mean `{c}`?"),
        None => msg.to_owned(),
    }
}

/// Edits between `a` and `b` (for "did you mean").
pub fn edit_distance(a: &str, b: &str) -> usize {
    strsim::levenshtein(a, b)
}
