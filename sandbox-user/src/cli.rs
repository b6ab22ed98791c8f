//! Command-line interface: argument types and dispatch.

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

use crate::host::user::Target;
use crate::runtime::run::RunOptions;
use crate::{compile, explain, kernel::loader, policy, preflight, runtime::run};

/// Exit status when sandbox itself fails (as `env` and `timeout` do): the command did not run.
pub const EXIT_SANDBOX_FAILED: u8 = 125;

#[derive(Debug, Parser)]
#[command(
    name = "sandbox",
    version,
    about = "Confine AI agents and their children with BPF-LSM: files, network and exec, enforced in the kernel"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What `run` and `attach` share: the policy and where its records go.
#[derive(Debug, clap::Args)]
pub struct EnforceArgs {
    /// Policy file (YAML). Without it: /etc/sandbox/users/USER.yaml (`run`: USER is who the
    /// command runs as), else /etc/sandbox/policy.yaml, else the built-in default policy.
    #[arg(long, short)]
    pub policy: Option<PathBuf>,
    /// Audit log (JSON lines, mode 0600). Default: the policy's audit.path, else
    /// /var/log/sandbox/audit.jsonl. Its directory must be one the command cannot write
    /// (only root can, or it is root's and sticky like /tmp): otherwise sandbox refuses.
    #[arg(long)]
    pub audit_log: Option<PathBuf>,
    /// No per-deny lines on stderr (the audit log still gets every record).
    #[arg(long, short)]
    pub quiet: bool,
    /// A line per deny on stderr even when stderr is the journal (by default there is
    /// none: the audit log has every record, and a denial flood would flood the journal).
    #[arg(long, conflicts_with = "quiet")]
    pub denial_lines: bool,
    /// Serve Prometheus metrics (records by class, decision and rule; losses; reloads) on
    /// ADDR, default 127.0.0.1:9464 (loopback: anyone who can reach it learns what the
    /// confined command tried).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = crate::runtime::metrics::DEFAULT_ADDR)]
    pub metrics: Option<std::net::SocketAddr>,
    /// On a host without BPF LSM (the fallback backend), run even when the policy has rules
    /// the fallback cannot enforce; they are listed at the start. (Policy setting:
    /// `fallback: {allow_degraded: true}`.)
    #[arg(long)]
    pub allow_degraded: bool,
}

impl EnforceArgs {
    /// No line per denial: asked for, or stderr is the journal and lines were not asked
    /// for (a denial flood would flood the journal; the audit log has every record).
    fn quiet(&self) -> bool {
        self.quiet || (crate::host::systemd::stderr_is_journal() && !self.denial_lines)
    }
}

/// Runs a daemon-style command on a single-threaded runtime. Its messages, the last one
/// (an error) included, go through `term`, which never blocks on a terminal that does not
/// read: an error is printed here and becomes exit status 125.
fn block_on(f: impl std::future::Future<Output = anyhow::Result<i32>>) -> anyhow::Result<i32> {
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(f);
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            crate::term::line(&format!("sandbox: {e:#}"));
            i32::from(EXIT_SANDBOX_FAILED)
        }
    };
    crate::term::finish(std::time::Duration::from_millis(500));
    Ok(code)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run COMMAND confined by a policy (--policy, else one found in /etc/sandbox, else the
    /// built-in default).
    Run {
        #[command(flatten)]
        enforce: EnforceArgs,
        /// Run COMMAND as root (instead of as the user who called sudo). It still loses
        /// the capabilities that reach past the policy (see --keep-cap) and cannot gain
        /// privileges through setuid binaries. Without sudo, sandbox refuses to run a
        /// command as root unless this (or --user) says so.
        #[arg(long, conflicts_with = "user")]
        as_root: bool,
        /// Run COMMAND as this user (name or uid): `~` in the policy is its home.
        #[arg(long, value_name = "NAME")]
        user: Option<String>,
        /// A capability a root command keeps (e.g. `net_raw`, `CAP_SYS_PTRACE`; `all` keeps
        /// every one); repeatable. Adds to the policy's `process.keep_capabilities`.
        #[arg(long = "keep-cap", value_name = "CAP")]
        keep_caps: Vec<String>,
        /// An inherited file descriptor (3 or more) the command keeps; repeatable. Without
        /// it the command gets 0, 1 and 2 only: a descriptor opened outside the sandbox (a
        /// file, a connected socket) is used without any of the policy's checks.
        #[arg(long = "pass-fd", value_name = "FD", value_parser = clap::value_parser!(u32).range(3..))]
        pass_fds: Vec<u32>,
        /// How the command gets the terminal sandbox was started from (when 0, 1 or 2 is
        /// one): `pty`, a pty of sandbox's own whose output reaches the terminal filtered
        /// (no clipboard writes, file transfers, reports or passthrough); `direct`, the
        /// terminal itself, unfiltered.
        #[arg(long, value_enum, value_name = "MODE", default_value = "pty")]
        terminal: crate::runtime::pty::TerminalMode,
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<OsString>,
    },
    /// Enforce a policy on an existing cgroup (a systemd service, a daemon) until stopped.
    /// SIGHUP reloads the policy file (a bad one changes nothing); SIGTERM stops.
    Attach {
        /// The cgroup: a path under the cgroup v2 mount, or relative to it
        /// (e.g. system.slice/nginx.service).
        #[arg(long)]
        cgroup: PathBuf,
        #[command(flatten)]
        enforce: EnforceArgs,
    },
    /// Validate a policy file and summarise what it enforces. Exit status 1 when it is not
    /// valid.
    Check {
        file: PathBuf,
        /// One JSON object: `ok`, `errors` (each with `message`, and `file`, `line`,
        /// `column`, `field` where known), `warnings`, `summary`.
        #[arg(long)]
        json: bool,
    },
    /// Print the built-in default policy.
    DefaultPolicy,
    /// Print the JSON Schema of policy files, for editors (e.g. yaml-language-server:
    /// `# yaml-language-server: $schema=/usr/share/sandbox/policy.schema.json`).
    Schema,
    /// Print a completion script for SHELL on stdout (e.g.
    /// `sandbox completions bash > /etc/bash_completion.d/sandbox`).
    Completions { shell: clap_complete::Shell },
    /// Write the man pages (sandbox.1 and one per command, sandbox-run.1 ...) into DIR.
    #[command(hide = true)]
    Manpages { dir: PathBuf },
    /// Check that this host can enforce policies (privileges, BPF LSM, BTF, cgroup v2,
    /// loading), say which backend would be used and, in the fallback, what it does not
    /// enforce of the policy (the built-in one without --policy).
    Preflight {
        /// Policy whose coverage to report (default: the one `sandbox run` would use).
        #[arg(long, short)]
        policy: Option<PathBuf>,
        /// One JSON object: `ok`, `backend`, `checks` (status, name, detail), `notes`.
        #[arg(long)]
        json: bool,
    },
    /// Show the audit log: one line per record (coloured on a terminal; NO_COLOR turns that
    /// off) or the records as JSON; rotated files first. Exit with ctrl-C when following.
    Events {
        /// The audit log (default /var/log/sandbox/audit.jsonl).
        #[arg(long, value_name = "PATH")]
        audit_log: Option<PathBuf>,
        /// Keep printing records as they are written, across rotations.
        #[arg(long, short)]
        follow: bool,
        /// `text`: one line per record; `json`: the records as they are.
        #[arg(long, short, value_enum, default_value = "text")]
        output: crate::events::Output,
        /// Only records of this class.
        #[arg(long, value_enum)]
        class: Option<crate::events::ClassFilter>,
        /// Only denied or only audit-mode records.
        #[arg(long, value_enum)]
        decision: Option<crate::events::DecisionFilter>,
        /// Only records of rules whose name starts with this (`files.deny`,
        /// `network.block_private`).
        #[arg(long)]
        rule: Option<String>,
        /// Only records of this process id.
        #[arg(long)]
        pid: Option<u32>,
        /// Only records since: a duration ago (30s, 10m, 2h, 1d) or a UTC time
        /// (2026-11-23T01:02:03Z).
        #[arg(long)]
        since: Option<String>,
    },
    /// Say what a policy decides for an operation (or for many: `-`), and which rule decides it.
    Explain {
        /// Policy file (default: the one `sandbox run` would use).
        #[arg(long, short)]
        policy: Option<PathBuf>,
        /// One JSON object: `decision` (`allow`, `deny`, `audit`), `what`, `because`.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        what: ExplainWhat,
    },
}

#[derive(Debug, Subcommand)]
pub enum ExplainWhat {
    /// Opening PATH for reading.
    Read { path: PathBuf },
    /// Opening PATH for writing.
    Write { path: PathBuf },
    /// Executing the binary at PATH.
    Exec { path: PathBuf },
    /// Connecting to ADDR PORT.
    Connect { addr: IpAddr, port: u16 },
    /// Many questions, one per line of standard input
    ///
    /// Each line is `read PATH`, `write PATH`, `exec PATH` or `connect ADDR PORT` (a path
    /// is the rest of the line, spaces included; empty lines and lines starting with `#`
    /// are skipped). One answer per line, in order, from one policy compile (`--json`: one
    /// object per line). Exit 0 if every answer is allow, 1 if any is not; a line that is
    /// no question stops with an error naming its line and column.
    #[command(name = "-")]
    Lines,
}

/// `sandbox explain -`: answers every line of standard input with one line of output.
/// A line that is no question stops it with an error naming its line and column (the
/// answers before it are printed).
fn explain_lines(c: &compile::CompiledPolicy, json: bool) -> anyhow::Result<i32> {
    use std::io::{BufRead, Write};
    let mut out = std::io::stdout().lock();
    let mut all_allowed = true;
    for (i, line) in std::io::stdin().lock().lines().enumerate() {
        let read = line.context("reading the questions from standard input")?;
        // A file written on Windows ends its lines in CR LF: the CR is not the path's.
        let line = read.strip_suffix('\r').unwrap_or(&read);
        let n = i + 1;
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let q = explain::question(line).map_err(|(col, msg)| {
            anyhow::anyhow!(
                "<stdin>:{n}:{col}: {msg}\n  {line}\n  {:>col$}",
                "^",
                line = crate::term::escape(line)
            )
        })?;
        let d = explain::answer(c, &q).with_context(|| format!("<stdin>:{n}: {line}"))?;
        all_allowed &= d.allowed;
        if json {
            writeln!(out, "{}", d.json())?;
        } else {
            writeln!(out, "{d}")?;
        }
    }
    out.flush()?;
    Ok(if all_allowed { 0 } else { 1 })
}

pub fn main(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Run {
            enforce,
            as_root,
            user,
            keep_caps,
            pass_fds,
            terminal,
            command,
        } => {
            let pass_fds = run::inherited_fds(&pass_fds)?;
            block_on(run::run(RunOptions {
                quiet: enforce.quiet(),
                metrics: enforce.metrics,
                policy: enforce.policy,
                audit_log: enforce.audit_log,
                as_root,
                user,
                keep_caps,
                pass_fds,
                terminal,
                allow_degraded: enforce.allow_degraded,
                command,
            }))
        }
        Command::Attach { cgroup, enforce } => block_on(crate::runtime::attach::attach(
            crate::runtime::attach::AttachOptions {
                cgroup,
                quiet: enforce.quiet(),
                metrics: enforce.metrics,
                policy: enforce.policy,
                audit_log: enforce.audit_log,
                allow_degraded: enforce.allow_degraded,
            },
        )),
        Command::Check { file, json } => {
            let ctx = context()?;
            // A policy that does not load is the answer `check` gives, not a failure of
            // sandbox: exit 1 (125 stays for sandbox's own failures).
            let loaded = policy::load_file(&file, &ctx)
                .map_err(|e| (check_error_json(&e), anyhow::Error::from(e)))
                .and_then(|p| match compile::compile(&p, compile::FIXED_SEED) {
                    Ok(c) => Ok((c, p)),
                    Err(e) => Err((serde_json::json!([{ "message": e.to_string() }]), e.into())),
                });
            let (c, p) = match loaded {
                Ok(x) => x,
                Err((error, e)) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({ "file": file, "ok": false, "errors": error })
                        );
                    } else {
                        eprintln!("sandbox: {e:#}");
                    }
                    return Ok(1);
                }
            };
            let warnings: Vec<String> = policy::lint::lint(&p)
                .iter()
                .map(ToString::to_string)
                .collect();
            let summary = explain::summary(&p, &c);
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "file": file, "ok": true, "name": p.name, "warnings": warnings,
                        "summary": summary,
                    })
                );
            } else {
                println!("{}: ok", file.display());
                for w in warnings {
                    println!("warning: {w}");
                }
                println!("{summary}");
            }
            Ok(0)
        }
        Command::Events {
            audit_log,
            follow,
            output,
            class,
            decision,
            rule,
            pid,
            since,
        } => {
            let now = crate::audit::wall_ms(0);
            let filter = crate::events::Filter {
                class,
                decision,
                rule,
                pid,
                since: since
                    .map(|s| crate::events::parse_since(&s, now))
                    .transpose()?,
            };
            let color = output == crate::events::Output::Text
                && std::io::IsTerminal::is_terminal(&std::io::stdout())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            let mut printer = crate::events::Printer {
                out: std::io::stdout().lock(),
                output,
                color,
            };
            let path = audit_log.unwrap_or_else(|| run::DEFAULT_AUDIT_LOG.into());
            let never = || false;
            let follow: Option<&dyn Fn() -> bool> = if follow { Some(&never) } else { None };
            match crate::events::show(&path, &filter, &mut printer, follow) {
                Ok(()) => Ok(0),
                // `sandbox events | head`: the reader is gone.
                Err(e)
                    if e.downcast_ref::<std::io::Error>()
                        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
                {
                    Ok(0)
                }
                Err(e) => Err(e),
            }
        }
        Command::DefaultPolicy => print_all(policy::DEFAULT_POLICY.as_bytes()),
        Command::Schema => print_all(format!("{}\n", policy::schema::json()).as_bytes()),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "sandbox", &mut script);
            print_all(&script)
        }
        Command::Manpages { dir } => {
            std::fs::create_dir_all(&dir)?;
            clap_mangen::generate_to(<Cli as clap::CommandFactory>::command(), &dir)?;
            Ok(0)
        }
        Command::Preflight { policy, json } => preflight_cmd(
            match policy {
                Some(p) => Some(p),
                None => invoker_policy()?,
            }
            .as_deref(),
            json,
        ),
        Command::Explain { policy, json, what } => {
            let ctx = context()?;
            let file = match policy {
                Some(p) => Some(p),
                None => invoker_policy()?,
            };
            let p = crate::runtime::arm::load_policy(file.as_deref(), &ctx)?;
            let c = compile::compile(&p, compile::FIXED_SEED)?;
            if matches!(what, ExplainWhat::Lines) {
                return explain_lines(&c, json);
            }
            let d = match what {
                ExplainWhat::Lines => unreachable!("answered above"),
                ExplainWhat::Read { path } => explain::file(&c, &path, explain::Access::Read)?,
                ExplainWhat::Write { path } => explain::file(&c, &path, explain::Access::Write)?,
                ExplainWhat::Exec { path } => explain::exec(&c, &path)?,
                ExplainWhat::Connect { addr, port } => explain::connect(&c, addr, port),
            };
            if json {
                println!("{}", d.json());
            } else {
                println!("{d}");
            }
            Ok(if d.allowed { 0 } else { 1 })
        }
    }
}

/// A policy error for `check --json`: each problem with its position where known.
fn check_error_json(e: &policy::PolicyError) -> serde_json::Value {
    use serde_json::json;
    match e {
        policy::PolicyError::Syntax {
            file,
            line,
            column,
            message,
        } => json!([{ "file": file, "line": line, "column": column, "message": message }]),
        policy::PolicyError::Invalid { file, errors } => errors
            .iter()
            .map(|(fe, at)| {
                let mut v = json!({ "file": file, "field": fe.field, "message": fe.message });
                if let Some((line, column)) = at {
                    v["line"] = (*line).into();
                    v["column"] = (*column).into();
                }
                v
            })
            .collect(),
        policy::PolicyError::Io { file, message } => json!([{ "file": file, "message": message }]),
    }
}

fn context() -> anyhow::Result<policy::Context> {
    let t = Target::detect()?;
    Ok(policy::Context::from_process(t.home, t.uid == 0)?)
}

/// What `preflight` says: printed as it goes, or gathered into one JSON object.
struct PreflightOut {
    json: bool,
    checks: Vec<serde_json::Value>,
    notes: Vec<String>,
    backend: Option<&'static str>,
}

impl PreflightOut {
    fn check(&mut self, status: &str, name: &str, detail: &str) {
        if self.json {
            self.checks.push(serde_json::json!({
                "status": status.trim().to_lowercase(), "name": name, "detail": detail,
            }));
        } else {
            println!("{status:<4} {name:<11} {detail}");
        }
    }

    fn note(&mut self, text: &str) {
        if self.json {
            self.notes.push(text.trim_start_matches('\n').to_owned());
        } else {
            println!("{text}");
        }
    }

    /// The exit status; in JSON mode the object is printed now.
    fn end(self, code: i32) -> i32 {
        if self.json {
            println!(
                "{}",
                serde_json::json!({
                    "ok": code == 0, "backend": self.backend, "checks": self.checks,
                    "notes": self.notes,
                })
            );
        }
        code
    }
}

/// Writes `bytes` to stdout; a reader that went away (`sandbox schema | head`) is not an
/// error.
fn print_all(bytes: &[u8]) -> anyhow::Result<i32> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(0),
    }
}

/// The policy `sandbox run` would find for whoever runs this command (the user `run`
/// would run it as, from the passwd entry of `SUDO_UID` or the caller) without `--policy`:
/// see [`policy::lookup`].
fn invoker_policy() -> anyhow::Result<Option<PathBuf>> {
    let target = crate::host::user::Target::detect()?;
    Ok(policy::lookup(
        target.name.as_deref(),
        Some(&target.agent()),
    )?)
}

fn preflight_cmd(policy_file: Option<&std::path::Path>, json: bool) -> anyhow::Result<i32> {
    let mut out = PreflightOut {
        json,
        checks: Vec::new(),
        notes: Vec::new(),
        backend: None,
    };
    let mut hard_ok = true;
    for c in preflight::static_checks() {
        let hard = preflight::hard_checks().iter().any(|h| h.name == c.name);
        let status = match (c.ok, hard) {
            (true, _) => "ok",
            (false, true) => "FAIL",
            (false, false) => "no",
        };
        out.check(status, c.name, &c.detail);
        hard_ok &= c.ok || !hard;
    }
    if !hard_ok {
        out.note("\nNo enforcement is possible here; `sandbox run` will refuse to start commands.");
        return Ok(out.end(1));
    }
    let ctx = context()?;
    let p = crate::runtime::arm::load_policy(policy_file, &ctx)?;
    let c = compile::compile(&p, compile::FIXED_SEED)?;
    let host = match crate::backend::detect() {
        Ok(h) => h,
        Err(e) => {
            out.check("FAIL", "load", &format!("{e:#}"));
            return Ok(out.end(1));
        }
    };
    match &host.backend {
        crate::backend::Backend::BpfLsm => {
            out.backend = Some("bpf-lsm");
            match loader::Enforcer::load(&c, &host.kernel, 1, None) {
                Ok(_) => out.check(
                    "ok",
                    "load",
                    &format!(
                        "BPF-LSM programs load and attach ({})",
                        host.kernel
                            .programs
                            .iter()
                            .map(|p| p.hook)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
                Err(e) => {
                    out.check("FAIL", "load", &preflight::explain_load_failure(&e));
                    return Ok(out.end(1));
                }
            }
            out.note(&format!("\n{}", host.backend.describe()));
        }
        crate::backend::Backend::Fallback { landlock, .. } => {
            out.backend = Some("fallback");
            out.check(
                "ok",
                "load",
                &format!(
                    "cgroup socket-address programs load ({}); cgroup v2 at {}",
                    sandbox_common::programs::CGROUP_PROGRAMS
                        .iter()
                        .map(|p| p.name)
                        .collect::<Vec<_>>()
                        .join(", "),
                    host.cgroup_root.display()
                ),
            );
            match landlock {
                Ok(abi) => out.check("ok", "landlock", &format!("Landlock ABI {abi}")),
                Err(e) => out.check("no", "landlock", e),
            }
            out.note(&format!("\n{}", host.backend.describe()));
            let t = Target::detect()?;
            let facts = crate::fallback::HostFacts {
                landlock: landlock.clone(),
                cgroup_root: host.cgroup_root.clone(),
                root_command: t.uid == 0,
                attach: false,
            };
            let (_, cov) = crate::fallback::plan(&p, &facts);
            out.note(&format!(
                "\nWith {} (`sandbox run` as {}):",
                policy_file.map_or_else(
                    || "the built-in policy".to_owned(),
                    |f| f.display().to_string()
                ),
                t.name.as_deref().unwrap_or("this user")
            ));
            for line in crate::fallback::report(&cov) {
                out.note(&line);
            }
            let refused = cov.refused().count();
            if refused > 0 {
                out.note(&format!(
                    "\n`sandbox run` refuses this policy here unless it sets \
                     `fallback: {{allow_degraded: true}}` or is given --allow-degraded{}",
                    if p.allow_degraded {
                        " (it sets it: it runs, with the rules above not enforced)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    Ok(out.end(0))
}
