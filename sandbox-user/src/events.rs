//! `sandbox events`: the audit log as a person reads it. Rotated files first (oldest
//! first), then the current one; `--follow` keeps reading across rotations. Lines are the
//! records' `message` with their time, coloured on a terminal (not with `NO_COLOR`), and
//! escaped: paths in records come from the confined command, and none of their bytes reach
//! the terminal as a control sequence. `-o json` prints the matching records as they are.

use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use crate::audit::rfc3339_ms;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClassFilter {
    /// File System Activity.
    File,
    /// Process Activity (exec, signals, ptrace, self-protection).
    Process,
    /// Network Activity (addresses, unix peers, listening, sockets).
    Network,
    /// The audit pipeline's own records (records lost, errors).
    Audit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DecisionFilter {
    /// Denied.
    Deny,
    /// Audit mode: would have been denied.
    Audit,
}

/// Which records to show.
#[derive(Debug, Default)]
pub struct Filter {
    pub class: Option<ClassFilter>,
    pub decision: Option<DecisionFilter>,
    /// A prefix of `unmapped.rule` (`files.deny`, `network.block_private`).
    pub rule: Option<String>,
    pub pid: Option<u32>,
    /// Epoch milliseconds.
    pub since: Option<u64>,
}

impl Filter {
    pub fn keeps(&self, r: &Value) -> bool {
        if let Some(c) = self.class {
            let uid = r["class_uid"].as_u64();
            let want = match c {
                ClassFilter::File => uid == Some(1001),
                ClassFilter::Process => uid == Some(1007),
                ClassFilter::Network => uid == Some(4001),
                ClassFilter::Audit => uid == Some(0),
            };
            if !want {
                return false;
            }
        }
        if let Some(d) = self.decision {
            let want = match d {
                DecisionFilter::Deny => "Denied",
                DecisionFilter::Audit => "Allowed",
            };
            if r["action"] != want {
                return false;
            }
        }
        if let Some(rule) = &self.rule
            && !r["unmapped"]["rule"]
                .as_str()
                .is_some_and(|x| x.starts_with(rule.as_str()))
        {
            return false;
        }
        if let Some(pid) = self.pid
            && r["actor"]["process"]["pid"].as_u64() != Some(u64::from(pid))
        {
            return false;
        }
        if let Some(since) = self.since
            && r["time"].as_u64().is_none_or(|t| t < since)
        {
            return false;
        }
        true
    }
}

/// `--since`: a duration back from `now_ms` (`30s`, `10m`, `2h`, `1d`, `1h 30m`: humantime's
/// units) or an RFC 3339 UTC time (`2026-11-23T01:02:03Z`, fractions allowed).
pub fn parse_since(s: &str, now_ms: u64) -> anyhow::Result<u64> {
    let s = s.trim();
    if let Ok(d) = humantime::parse_duration(s) {
        return Ok(now_ms.saturating_sub(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)));
    }
    let t = humantime::parse_rfc3339(s).with_context(|| {
        format!("--since {s}: expected a duration (30s, 10m, 2h, 1d) or a UTC time like 2026-11-23T01:02:03Z")
    })?;
    let since = t
        .duration_since(std::time::UNIX_EPOCH)
        .with_context(|| format!("--since {s}: before 1970"))?;
    Ok(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// The log's files, oldest first: `path.N` .. `path.1`, then `path`.
fn rotated(path: &Path) -> Vec<PathBuf> {
    let mut older = Vec::new();
    for n in 1.. {
        let mut p = path.as_os_str().to_owned();
        p.push(format!(".{n}"));
        let p = PathBuf::from(p);
        if !p.exists() {
            break;
        }
        older.push(p);
    }
    older.reverse();
    older.push(path.to_path_buf());
    older
}

/// How records are printed.
pub struct Printer<W: Write> {
    pub out: W,
    pub output: Output,
    pub color: bool,
}

impl<W: Write> Printer<W> {
    /// One line of the log: printed if it is a record the filter keeps. A line that is not
    /// JSON (a torn write, another file) is shown as such, escaped.
    pub fn line(&mut self, line: &str, filter: &Filter) -> std::io::Result<()> {
        let line = line.trim_end();
        if line.is_empty() {
            return Ok(());
        }
        let Ok(r) = serde_json::from_str::<Value>(line) else {
            return writeln!(self.out, "(not a record) {}", crate::term::escape(line));
        };
        if !filter.keeps(&r) {
            return Ok(());
        }
        match self.output {
            Output::Json => writeln!(self.out, "{line}"),
            Output::Text => {
                let text = self.text(&r);
                writeln!(self.out, "{text}")
            }
        }
    }

    fn text(&self, r: &Value) -> String {
        let time = r["time"]
            .as_u64()
            .map(rfc3339_ms)
            .or_else(|| r["time"].as_str().map(str::to_owned))
            .unwrap_or_default();
        let message = match r["message"].as_str() {
            Some(m) => m.to_owned(),
            // A record from before OCSF (schema 1): its fields, compactly.
            None => r.to_string(),
        };
        let message = crate::term::escape(&message);
        let (color, tag) = match (r["class_uid"].as_u64(), r["action"].as_str()) {
            (Some(0), _) => ("\x1b[1;35m", "audit "),
            (_, Some("Denied")) => ("\x1b[31m", "deny  "),
            (_, Some("Allowed")) => ("\x1b[33m", "audit "),
            _ => ("", "      "),
        };
        if self.color && !color.is_empty() {
            format!("\x1b[2m{time}\x1b[0m {color}{tag}\x1b[0m{message}")
        } else {
            format!("{time} {tag}{message}")
        }
    }
}

/// Prints the log at `path` (and its rotated files); with `follow`, keeps printing what is
/// appended, across rotations, until `follow` says to stop (the command: never).
pub fn show<W: Write>(
    path: &Path,
    filter: &Filter,
    printer: &mut Printer<W>,
    follow: Option<&dyn Fn() -> bool>,
) -> anyhow::Result<()> {
    let files = rotated(path);
    let (current, older) = files.split_last().expect("at least the log itself");
    for f in older {
        let file = std::fs::File::open(f).with_context(|| format!("reading {}", f.display()))?;
        for line in BufReader::new(file).lines() {
            printer.line(&line?, filter)?;
        }
    }
    let mut file = match std::fs::File::open(current) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && follow.is_some() => {
            wait_for(current)?
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", current.display())),
    };
    let mut pending = Vec::new();
    loop {
        let mut chunk = Vec::new();
        file.read_to_end(&mut chunk)?;
        pending.extend_from_slice(&chunk);
        while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            printer.line(&String::from_utf8_lossy(&line), filter)?;
        }
        printer.out.flush()?;
        if follow.is_none_or(|stop| stop()) {
            if !pending.is_empty() {
                printer.line(&String::from_utf8_lossy(&pending), filter)?;
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(250));
        // Rotated (another file at the name) or truncated: finish this one, then read the
        // new file from its start.
        let here = file.metadata()?;
        match std::fs::metadata(current) {
            Ok(now) if now.ino() != here.ino() || now.dev() != here.dev() => {
                let mut rest = Vec::new();
                file.read_to_end(&mut rest)?;
                pending.extend_from_slice(&rest);
                while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=nl).collect();
                    printer.line(&String::from_utf8_lossy(&line), filter)?;
                }
                pending.clear();
                file = std::fs::File::open(current)?;
            }
            Ok(now) if now.len() < file.stream_position()? => {
                file.rewind()?;
                pending.clear();
            }
            _ => {}
        }
    }
}

fn wait_for(path: &Path) -> anyhow::Result<std::fs::File> {
    loop {
        match std::fs::File::open(path) {
            Ok(f) => return Ok(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_durations_and_times() {
        let now = 1_795_000_000_000;
        assert_eq!(parse_since("10m", now).unwrap(), now - 600_000);
        assert_eq!(parse_since("1d", now).unwrap(), now - 86_400_000);
        assert_eq!(
            parse_since("2026-11-18T11:06:40.123Z", now).unwrap(),
            1_795_000_000_123
        );
        assert_eq!(parse_since("1970-01-01T00:00:00Z", now).unwrap(), 0);
        assert_eq!(parse_since("1h 30m", now).unwrap(), now - 5_400_000);
        assert!(parse_since("ten minutes", now).is_err());
        assert!(parse_since("2026-13-01T00:00:00Z", now).is_err());
        assert!(parse_since("5 parsecs", now).is_err());
        assert!(parse_since("2026-11-18T11:06:40", now).is_err());
    }

    #[test]
    fn filters_and_lines() {
        let deny = r#"{"time":1795000000123,"class_uid":1001,"action":"Denied","message":"denied open (read) /x\u001b[2J by files.deny[0] [pid 7 cat]","actor":{"process":{"pid":7}},"unmapped":{"rule":"files.deny[0]"}}"#;
        let audit = r#"{"time":1795000001000,"class_uid":4001,"action":"Allowed","message":"would deny (audit) connect 10.0.0.1:80 by network.block_private [pid 8 curl]","actor":{"process":{"pid":8}},"unmapped":{"rule":"network.block_private"}}"#;
        let loss = r#"{"time":1795000002000,"class_uid":0,"count":3,"message":"3 audit record(s) lost: ring buffer full","unmapped":{"activity":"audit_loss"}}"#;
        let run = |filter: &Filter, output: Output| {
            let mut p = Printer {
                out: Vec::new(),
                output,
                color: false,
            };
            for l in [deny, audit, loss, "garbage\x1b[31m"] {
                p.line(l, filter).unwrap();
            }
            String::from_utf8(p.out).unwrap()
        };
        let all = run(&Filter::default(), Output::Text);
        assert_eq!(all.lines().count(), 4, "{all}");
        assert!(all.starts_with("2026-11-18T11:06:40.123Z deny  denied open (read) /x"));
        // Nothing from a record reaches the terminal as a control sequence.
        assert!(!all.contains('\x1b'), "{all:?}");
        let f = Filter {
            class: Some(ClassFilter::Network),
            ..Filter::default()
        };
        assert!(run(&f, Output::Text).contains("connect 10.0.0.1:80"));
        let f = Filter {
            decision: Some(DecisionFilter::Deny),
            rule: Some("files.".into()),
            pid: Some(7),
            ..Filter::default()
        };
        let out = run(&f, Output::Json);
        assert_eq!(out.lines().next(), Some(deny));
        let f = Filter {
            since: Some(1_795_000_001_500),
            ..Filter::default()
        };
        assert!(
            run(&f, Output::Text).contains("records lost")
                || run(&f, Output::Text).contains("record(s) lost")
        );
    }

    #[test]
    fn reads_rotated_files_oldest_first_and_follows_rotation() {
        let dir = std::env::temp_dir().join(format!("sandbox-events-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("a.jsonl");
        let rec = |n: u64| {
            format!(
                "{{\"time\":{n},\"class_uid\":1001,\"action\":\"Denied\",\"message\":\"m{n}\"}}\n"
            )
        };
        std::fs::write(dir.join("a.jsonl.2"), rec(1)).unwrap();
        std::fs::write(dir.join("a.jsonl.1"), rec(2)).unwrap();
        std::fs::write(&log, rec(3)).unwrap();
        let mut p = Printer {
            out: Vec::new(),
            output: Output::Text,
            color: false,
        };
        show(&log, &Filter::default(), &mut p, None).unwrap();
        let out = String::from_utf8(p.out).unwrap();
        let order: Vec<&str> = out.lines().map(|l| l.rsplit(' ').next().unwrap()).collect();
        assert_eq!(order, ["m1", "m2", "m3"]);

        // Following: an append, then a rotation (the old file gets one more record after
        // the new one appeared, as a writer finishing its buffer), then the new file.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (log, dir, stop) = (log.clone(), dir.clone(), stop.clone());
            std::thread::spawn(move || {
                let append = |p: &Path, s: String| {
                    let mut f = std::fs::OpenOptions::new()
                        .append(true)
                        .create(true)
                        .open(p)
                        .unwrap();
                    f.write_all(s.as_bytes()).unwrap();
                };
                std::thread::sleep(Duration::from_millis(400));
                append(&log, rec(4));
                std::thread::sleep(Duration::from_millis(400));
                std::fs::rename(&log, dir.join("a.jsonl.1")).unwrap();
                append(&dir.join("a.jsonl.1"), rec(5));
                append(&log, rec(6));
                std::thread::sleep(Duration::from_secs(1));
                stop.store(true, std::sync::atomic::Ordering::SeqCst);
            })
        };
        let mut p = Printer {
            out: Vec::new(),
            output: Output::Text,
            color: false,
        };
        let stopped = || stop.load(std::sync::atomic::Ordering::SeqCst);
        show(&log, &Filter::default(), &mut p, Some(&stopped)).unwrap();
        writer.join().unwrap();
        let out = String::from_utf8(p.out).unwrap();
        let order: Vec<&str> = out.lines().map(|l| l.rsplit(' ').next().unwrap()).collect();
        assert_eq!(order[order.len() - 3..], ["m4", "m5", "m6"], "{out}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
