//! The policy file as written: serde types only. `serde_yaml` is used here and nowhere else.

use serde::Deserialize;

/// enforce: deny and report; audit: report what would have been denied, deny nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Enforce,
    Audit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditFormat {
    Json,
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a policy: a mapping with version, name, mode, files, network, exec, process, audit, fallback"
)]
pub struct RawPolicy {
    pub version: Option<u32>,
    pub name: Option<String>,
    pub mode: Option<Mode>,
    #[serde(default)]
    pub files: RawFiles,
    #[serde(default)]
    pub network: RawNetwork,
    #[serde(default)]
    pub exec: RawExec,
    #[serde(default)]
    pub process: RawProcess,
    #[serde(default)]
    pub audit: RawAudit,
    #[serde(default)]
    pub fallback: RawFallback,
}

/// What to do on a host where only the fallback backend (cgroup socket-address programs
/// and Landlock) can enforce.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of fallback settings")]
pub struct RawFallback {
    /// Run even when rules of the policy cannot be enforced there (they are listed).
    pub allow_degraded: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of file rules")]
pub struct RawFiles {
    pub mode: Option<Mode>,
    pub workspace: Option<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub read_only: Vec<String>,
    #[serde(default)]
    pub write: Vec<String>,
    #[serde(default)]
    pub read: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of network rules")]
pub struct RawNetwork {
    pub mode: Option<Mode>,
    pub block_private: Option<bool>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    pub allow_dns: Option<bool>,
    pub default: Option<NetDefault>,
    /// Unix socket peers outside the sandbox that may be reached: paths, globs, `@name`.
    #[serde(default)]
    pub unix: Vec<String>,
    /// Socket families (and inet protocols) that may be created.
    pub sockets: Option<Vec<String>>,
    /// Local addresses (CIDR[:ports]) the command may listen on.
    pub listen: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NetDefault {
    Allow,
    Deny,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of exec rules")]
pub struct RawExec {
    pub mode: Option<Mode>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    pub allow_privileged: Option<bool>,
}

/// The privileges the command starts with.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of process settings")]
pub struct RawProcess {
    /// Default true: setuid/setgid bits and file capabilities do not raise privileges.
    pub no_new_privs: Option<bool>,
    /// Capabilities a command running as root keeps beyond the default set (`all`: all).
    #[serde(default)]
    pub keep_capabilities: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a mapping of audit settings")]
pub struct RawAudit {
    pub path: Option<String>,
    pub format: Option<AuditFormat>,
    /// Rotate when the file would grow past this many MiB.
    pub max_size_mb: Option<u64>,
    /// Rotated files kept (`audit.jsonl.1` .. `.N`).
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

pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}
