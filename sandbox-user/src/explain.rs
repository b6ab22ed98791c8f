//! `sandbox explain` and `sandbox check`'s summary. Decisions are computed from the same
//! `CompiledPolicy` the kernel receives (the same DFA tables and LPM entries), following the
//! same order as the BPF programs; the VM tests check both agree.

use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use sandbox_common::decide::{self, Deny, FileMatch, fmode, imode};
use sandbox_common::{accept, policy_flags, reason};

use crate::compile::{CompiledPolicy, net};
use crate::policy::Policy;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Decision {
    pub allowed: bool,
    pub what: String,
    /// The rule that decides (`files.deny[0] '~/.ssh'`), or why nothing does.
    pub because: String,
    pub audit_only: bool,
}

impl Decision {
    /// `allow`, `deny` or `audit`.
    pub fn verdict(&self) -> &'static str {
        match (self.allowed, self.audit_only) {
            (true, _) => "allow",
            (false, false) => "deny",
            (false, true) => "audit",
        }
    }

    /// `--json`: the decision as one object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "decision": self.verdict(), "allowed": self.allowed, "audit_only": self.audit_only,
            "what": self.what, "because": self.because,
        })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verdict = match (self.allowed, self.audit_only) {
            (true, _) => "allow",
            (false, false) => "deny",
            (false, true) => "audit (would deny; the section is in audit mode)",
        };
        write!(f, "{verdict}: {} ({})", self.what, self.because)
    }
}

fn rule_text(c: &CompiledPolicy, id: u16) -> String {
    c.rule(id).map_or_else(
        || format!("rule {id}"),
        |r| format!("{} '{}'", r.field, r.source),
    )
}

/// The canonical path the kernel would see: symlinks resolved (for a path that does not
/// exist yet, its existing parent's).
pub fn canonical(p: &Path) -> std::io::Result<PathBuf> {
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    if let Ok(c) = std::fs::canonicalize(&abs) {
        return Ok(c);
    }
    let parent = abs
        .parent()
        .map(canonical)
        .transpose()?
        .unwrap_or_else(|| PathBuf::from("/"));
    Ok(parent.join(abs.file_name().unwrap_or_default()))
}

/// The name the programs give the file at `p` (canonical): below a mount whose root they
/// place elsewhere (`host::mounts::Alias`: `/home` a bind of `/data/home`), the placed
/// path (`/data/home/...`), the deepest such mount deciding; else `p`.
pub fn placed(c: &CompiledPolicy, p: &Path) -> PathBuf {
    c.aliases
        .iter()
        .filter_map(|a| p.strip_prefix(&a.mount_point).ok().map(|rest| (a, rest)))
        .max_by_key(|(a, _)| a.mount_point.len())
        .map_or_else(
            || p.to_path_buf(),
            |(a, rest)| {
                if rest.as_os_str().is_empty() {
                    PathBuf::from(&a.placed)
                } else {
                    Path::new(&a.placed).join(rest)
                }
            },
        )
}

/// `p` as `explain` says it: with the programs' name for it where that differs.
fn shown(c: &CompiledPolicy, p: &Path) -> String {
    let named = placed(c, p);
    if named == p {
        p.display().to_string()
    } else {
        format!("{} (to the kernel: {})", p.display(), named.display())
    }
}

/// What the kernel would match for a file: kinds by path (its placed name, `named`),
/// plus kinds by identity (hard links to protected files) of the file at `p`.
fn kinds(c: &CompiledPolicy, named: &Path, p: &Path) -> (u32, u32) {
    let by_path = c.match_path(named.as_os_str().as_encoded_bytes());
    let by_inode = std::fs::metadata(p).map_or(0, |m| {
        use std::os::unix::fs::MetadataExt;
        let ids = crate::kernel::loader::identities(c, 0);
        let dev = crate::host::mounts::kernel_dev_of(m.dev());
        ids.entries
            .iter()
            .find(|(k, _)| k.dev == dev && k.ino == m.ino())
            .map_or(0, |(_, mask)| *mask)
    });
    (by_path, by_inode)
}

fn named(c: &CompiledPolicy, slot: usize, p: &Path, by_path: u32) -> String {
    let named = placed(c, p);
    let bytes = named.as_os_str().as_encoded_bytes();
    match c.rule_for(slot, bytes) {
        Some(r) if by_path & (1 << slot) != 0 => format!("{} '{}'", r.field, r.source),
        _ => "a protected file reached through another name (same inode)".into(),
    }
}

/// What the kernel would match for `p`, as the decision functions take it.
fn file_match(c: &CompiledPolicy, p: &Path) -> FileMatch {
    let (path, inode) = kinds(c, &placed(c, p), p);
    FileMatch {
        path,
        inode,
        sb_known: true,
    }
}

/// Words for a deny: the rule of a kind slot, or what the reason means.
fn deny_text(c: &CompiledPolicy, p: &Path, m: &FileMatch, d: Deny) -> String {
    match d.reason {
        reason::RULE | reason::INODE => {
            let slot = usize::from(d.rule);
            let named = named(c, slot, p, m.path);
            if slot == accept::EXEC_DENY {
                format!("{named} (a denied binary cannot be read or written either)")
            } else {
                named
            }
        }
        reason::NOT_IN_WRITE_ALLOWLIST => "files.write is set and no write rule matches".into(),
        reason::NOT_IN_READ_ALLOWLIST => "files.read is set and no read rule matches".into(),
        reason::NOT_IN_EXEC_ALLOWLIST => "exec.allow is set and no allow rule matches".into(),
        reason::PRIVILEGED_BINARY => {
            "setuid/setgid binary and exec.allow_privileged is false".into()
        }
        other => format!("reason {other}"),
    }
}

/// The file decision (`sandbox_common::decide::file`, as the kernel takes it).
pub fn file_rules(c: &CompiledPolicy, p: &Path, access: Access, is_dir: bool) -> Option<String> {
    let m = file_match(c, p);
    let f_mode = match access {
        Access::Read => fmode::READ,
        Access::Write => fmode::WRITE,
    };
    decide::file(c.flags, f_mode, is_dir, &m).map(|d| deny_text(c, p, &m, d))
}

pub fn file(c: &CompiledPolicy, path: &Path, access: Access) -> std::io::Result<Decision> {
    let p = canonical(path)?;
    let deny = file_rules(c, &p, access, p.is_dir()).or_else(|| {
        use std::os::unix::fs::PermissionsExt;
        #[expect(clippy::cast_possible_truncation, reason = "st_mode fits 16 bits")]
        let mode = std::fs::metadata(&p).ok()?.permissions().mode() as u16;
        let f_mode = if access == Access::Write {
            fmode::WRITE
        } else {
            fmode::READ
        };
        let set_id = decide::set_id_write(f_mode, mode)
            .map(|_| "a set-user-ID or set-group-ID file: it would run outside".to_owned());
        set_id.or_else(|| {
            decide::block_device(mode)
                .map(|_| "a block device: its blocks hold files past the path rules".to_owned())
        })
    });
    let verb = if access == Access::Read {
        "read"
    } else {
        "write"
    };
    Ok(decision(
        format!("{verb} {}", shown(c, &p)),
        deny,
        c.flags & policy_flags::AUDIT_FILES != 0,
        "no file rule matches",
    ))
}

pub fn exec(c: &CompiledPolicy, path: &Path) -> std::io::Result<Decision> {
    let p = canonical(path)?;
    let m = file_match(c, &p);
    let deny = decide::exec(c.flags, is_privileged(&p), &m).map(|d| deny_text(c, &p, &m, d));
    Ok(decision(
        format!("exec {}", shown(c, &p)),
        deny,
        c.flags & policy_flags::AUDIT_EXEC != 0,
        "no exec rule matches",
    ))
}

fn is_privileged(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    #[expect(clippy::cast_possible_truncation, reason = "st_mode fits 16 bits")]
    std::fs::metadata(p).is_ok_and(|m| imode::privileged(m.permissions().mode() as u16))
}

pub fn connect(c: &CompiledPolicy, addr: IpAddr, port: u16) -> Decision {
    let what = match addr {
        IpAddr::V4(a) => format!("connect {a}:{port}"),
        IpAddr::V6(a) => format!("connect [{a}]:{port}"),
    };
    let mut hit = net::lookup(&c.net.v4, &c.net.v6, addr, port);
    // The kernel sends the unspecified address to loopback: those rules decide too (the
    // first that denies).
    for loopback in net::unspecified_as_loopback(addr) {
        if decide::net(c.flags, hit).is_some() {
            break;
        }
        hit = net::lookup(&c.net.v4, &c.net.v6, loopback, port);
    }
    let audit = c.flags & policy_flags::AUDIT_NET != 0;
    match (decide::net(c.flags, hit), hit) {
        (None, Some((_, rule))) => decision(what, None, audit, &rule_text(c, rule)),
        (None, None) => decision(what, None, audit, "no network rule matches"),
        (Some(d), _) if d.reason == reason::RULE => {
            decision(what, Some(rule_text(c, d.rule)), audit, "")
        }
        (Some(_), _) => decision(
            what,
            Some("network.default is deny and no allow rule matches".into()),
            audit,
            "",
        ),
    }
}

fn decision(what: String, deny: Option<String>, audit: bool, none: &str) -> Decision {
    match deny {
        Some(because) => Decision {
            allowed: audit,
            what,
            because,
            audit_only: audit,
        },
        None => Decision {
            allowed: true,
            what,
            because: none.to_owned(),
            audit_only: false,
        },
    }
}

/// A limit as `sandbox check` says it.
fn amount(a: crate::policy::limits::Amount, show: fn(u64) -> String) -> String {
    use crate::policy::limits::Amount;
    match a {
        Amount::Max => "max".into(),
        Amount::Percent(p) => format!("{p}% of the host's"),
        Amount::Exact(n) => show(n),
    }
}

/// What `sandbox check` prints after "ok".
pub fn summary(p: &Policy, c: &CompiledPolicy) -> String {
    let f = &p.files;
    let n = &p.network;
    let e = &p.exec;
    format!(
        "policy '{}': {} rules\n  files ({:?}): workspace {}, {} deny, {} read_only, {} write, {} read\n  network ({:?}): block_private {}, {} allow, {} deny, default {:?}\n  exec ({:?}): {} deny, {} allow, allow_privileged {}\n  process: no_new_privs {}, user_namespaces {}\n  limits: memory {}, pids {}, cpu {}, disk read {} write {} a second ({} and {} requests)\n  kernel form: {} literal paths, DFAs of {} (anchored) and {} (floating) states, {} IPv4 + {} IPv6 prefixes",
        p.name,
        p.rule_count(),
        f.mode,
        f.workspace.display(),
        f.deny.len(),
        f.read_only.len(),
        f.write.len(),
        f.read.len(),
        n.mode,
        n.block_private,
        n.allow.len(),
        n.deny.len(),
        n.default,
        e.mode,
        e.deny.len(),
        e.allow.len(),
        e.allow_privileged,
        p.process.no_new_privs,
        p.process.user_namespaces,
        amount(p.limits.memory.amount, crate::policy::limits::human_bytes),
        amount(p.limits.pids.amount, |n| n.to_string()),
        amount(p.limits.cpu.amount, crate::policy::limits::human_cpus),
        amount(p.limits.io_read.amount, crate::policy::limits::human_bytes),
        amount(p.limits.io_write.amount, crate::policy::limits::human_bytes),
        amount(p.limits.io_read_iops.amount, |n| n.to_string()),
        amount(p.limits.io_write_iops.amount, |n| n.to_string()),
        c.matcher.literals.len(),
        c.matcher.anchored.states(),
        c.matcher.floating.states(),
        c.net.v4.len(),
        c.net.v6.len(),
    )
}

/// One question of `sandbox explain -` (a line of its input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Question {
    Read(PathBuf),
    Write(PathBuf),
    Exec(PathBuf),
    Connect(IpAddr, u16),
}

/// The questions `sandbox explain -` takes, for messages.
pub const QUESTIONS: &str = "read PATH, write PATH, exec PATH or connect ADDR PORT";

/// Parses one line of `sandbox explain -`: a verb, one space, then a path (the rest of the
/// line, spaces included) or an address and a port. `Err((column, message))`, the column
/// 1-based, in characters.
pub fn question(line: &str) -> Result<Question, (usize, String)> {
    // A file written on Windows ends its lines in CR LF: the CR is not the path's.
    let line = line.strip_suffix('\r').unwrap_or(line);
    let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
    let at = verb.chars().count() + 2;
    let path = || {
        if rest.is_empty() {
            Err((at, format!("'{verb}' wants a path")))
        } else {
            Ok(PathBuf::from(rest))
        }
    };
    match verb {
        "read" => path().map(Question::Read),
        "write" => path().map(Question::Write),
        "exec" => path().map(Question::Exec),
        "connect" => {
            let mut words = rest.split(' ');
            let (Some(addr), Some(port), None) = (words.next(), words.next(), words.next()) else {
                return Err((at, "'connect' wants an address and a port".into()));
            };
            let addr: IpAddr = addr
                .parse()
                .map_err(|_| (at, format!("'{addr}' is not an IP address")))?;
            let port_at = at + rest.split(' ').next().map_or(0, |a| a.chars().count()) + 1;
            let port: u16 = port
                .parse()
                .map_err(|_| (port_at, format!("'{port}' is not a port (0-65535)")))?;
            Ok(Question::Connect(addr, port))
        }
        _ => Err((1, format!("'{verb}' is not a question: {QUESTIONS}"))),
    }
}

/// The decision on `q`.
pub fn answer(c: &CompiledPolicy, q: &Question) -> std::io::Result<Decision> {
    match q {
        Question::Read(p) => file(c, p, Access::Read),
        Question::Write(p) => file(c, p, Access::Write),
        Question::Exec(p) => exec(c, p),
        Question::Connect(a, port) => Ok(connect(c, *a, *port)),
    }
}

#[cfg(test)]
mod question_tests {
    use super::*;

    #[test]
    fn questions_parse_with_spaces_in_paths() {
        assert_eq!(
            question("read /a b/c"),
            Ok(Question::Read(PathBuf::from("/a b/c")))
        );
        assert_eq!(
            question("write rel"),
            Ok(Question::Write(PathBuf::from("rel")))
        );
        assert_eq!(question("exec /bin/x"), Ok(Question::Exec("/bin/x".into())));
        assert_eq!(question("read /a\r"), Ok(Question::Read("/a".into())));
        assert_eq!(
            question("connect 10.0.0.1 80\r"),
            Ok(Question::Connect("10.0.0.1".parse().unwrap(), 80))
        );
        assert_eq!(
            question("connect ::1 443"),
            Ok(Question::Connect("::1".parse().unwrap(), 443))
        );
    }

    #[test]
    fn bad_questions_point_at_the_column() {
        assert_eq!(question("open /x").unwrap_err().0, 1);
        assert_eq!(question("read").unwrap_err().0, 6);
        assert_eq!(question("connect 1.2.3 80").unwrap_err().0, 9);
        let (col, msg) = question("connect 1.2.3.4 http").unwrap_err();
        assert_eq!(col, 17, "{msg}");
        assert!(msg.contains("'http'"), "{msg}");
        assert!(question("connect 1.2.3.4").is_err());
        assert!(question("connect 1.2.3.4 80 9").is_err());
    }
}

#[cfg(test)]
mod placement_tests {
    use super::*;

    /// `/home` a bind of `/data/home`: the kernel names `/home/u/secret`
    /// `/data/home/u/secret`, so a rule written for that name decides it, and explain
    /// says so.
    #[test]
    fn explain_answers_for_the_name_the_kernel_gives() {
        let ctx = crate::policy::Context {
            home: "/home/u".into(),
            cwd: "/work/ws".into(),
            env: std::collections::HashMap::new(),
            resolvers: Vec::new(),
            host_addrs: Vec::new(),
            other_homes: Vec::new(),
            mount_aliases: vec![crate::host::mounts::Alias {
                mount_point: "/home".into(),
                placed: "/data/home".into(),
            }],
        };
        let p =
            crate::policy::load_str("files: {deny: ['/data/home/*/secret']}", "p", &ctx).unwrap();
        let c = crate::compile::compile(&p, 7).unwrap();
        let at = Path::new("/home/u/secret");
        assert_eq!(placed(&c, at), Path::new("/data/home/u/secret"));
        assert_eq!(placed(&c, Path::new("/home")), Path::new("/data/home"));
        assert_eq!(placed(&c, Path::new("/homely/x")), Path::new("/homely/x"));
        assert_eq!(
            file_rules(&c, at, Access::Read, false).as_deref(),
            Some("files.deny[0] '/data/home/*/secret'")
        );
        assert_eq!(
            shown(&c, at),
            "/home/u/secret (to the kernel: /data/home/u/secret)"
        );
    }
}
