//! Prometheus metrics (`--metrics [ADDR]`, loopback by default): what the audit pipeline
//! saw, counted in sandbox itself, served as the text exposition format on a plain TCP
//! listener (one request, one response; no HTTP library needed for that).
//!
//! - `sandbox_records_total{class, decision, rule}`: records written, by OCSF class
//!   (`file`, `process`, `network`, `audit`), `deny`/`audit` and the rule as the policy
//!   names it (bounded by the policy's size).
//! - `sandbox_records_lost_total{cause}`: `ring_buffer` (the kernel could not deliver),
//!   `log_write` (the log could not be written).
//! - `sandbox_reloads_total{result}`: `applied`, `refused` (`sandbox attach`).
//! - `sandbox_aggregates_total`: records that stand for identical denials counted in the
//!   kernel (a record with `count` > 1); the denials themselves are in `records_total`.
//! - `sandbox_host_lookups_total{result}`: rounds of `allow_hosts` lookups, `ok` or
//!   `failed` (some name not resolved; its expired addresses left the allowlist);
//!   `sandbox_host_addresses`: addresses the names allow now;
//!   `sandbox_host_write_errors_total`: updates of the kernel's `allow_hosts` entries that
//!   could not all be written (the entries not written stay as they were; expiry goes on).
//! - `sandbox_policy_info{name}`: 1, the policy in force.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::audit::Record;

/// The default address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:9464";

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    records: BTreeMap<(&'static str, &'static str, String), u64>,
    lost_ring: u64,
    lost_write: u64,
    reloads_applied: u64,
    reloads_refused: u64,
    aggregates: u64,
    lookups_ok: u64,
    lookups_failed: u64,
    host_addresses: u64,
    host_write_errors: u64,
    policy: String,
}

impl Metrics {
    fn with<T>(&self, f: impl FnOnce(&mut Inner) -> T) -> T {
        f(&mut self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// One record written to the log.
    pub fn record(&self, r: &Record) {
        let class = match r.class_uid {
            1001 => "file",
            1007 => "process",
            4001 => "network",
            _ => "audit",
        };
        let decision = match r.action {
            Some("Denied") => "deny",
            Some(_) => "audit",
            None => "none",
        };
        let rule = r.unmapped.rule.clone().unwrap_or_default();
        // A decision's record with a count stands for that many (a loss record's count is
        // the lost ones', counted by `ring_lost` and `set_write_lost`).
        let n = if r.action.is_some() {
            r.count.unwrap_or(1)
        } else {
            1
        };
        self.with(|m| {
            *m.records.entry((class, decision, rule)).or_default() += n;
            if n > 1 {
                m.aggregates += 1;
            }
        });
    }

    pub fn ring_lost(&self, n: u64) {
        self.with(|m| m.lost_ring += n);
    }

    /// The log's count of records it could not write, so far (a running total).
    pub fn set_write_lost(&self, total: u64) {
        self.with(|m| m.lost_write = total);
    }

    pub fn reload(&self, applied: bool) {
        self.with(|m| {
            if applied {
                m.reloads_applied += 1;
            } else {
                m.reloads_refused += 1;
            }
        });
    }

    /// A round of `allow_hosts` lookups; `addresses`: how many the names allow after it.
    pub fn lookup(&self, failed: bool, addresses: usize) {
        self.with(|m| {
            if failed {
                m.lookups_failed += 1;
            } else {
                m.lookups_ok += 1;
            }
            m.host_addresses = addresses as u64;
        });
    }

    /// How many addresses the names allow now.
    pub fn host_addresses(&self, addresses: usize) {
        self.with(|m| m.host_addresses = addresses as u64);
    }

    /// An update of the `allow_hosts` entries could not all be written.
    pub fn host_write_failed(&self) {
        self.with(|m| m.host_write_errors += 1);
    }

    pub fn policy(&self, name: &str) {
        self.with(|m| name.clone_into(&mut m.policy));
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        self.with(|m| {
            let mut out = String::new();
            out.push_str(
                "# HELP sandbox_records_total Audit records written, by class, decision and rule.\n\
                 # TYPE sandbox_records_total counter\n",
            );
            for ((class, decision, rule), n) in &m.records {
                let _ = writeln!(
                    out,
                    "sandbox_records_total{{class=\"{class}\",decision=\"{decision}\",rule=\"{}\"}} {n}",
                    label(rule)
                );
            }
            let counters = [
                (
                    "sandbox_records_lost_total",
                    "Records lost, by cause (each is also counted in the log).",
                    [("cause", "ring_buffer", m.lost_ring), ("cause", "log_write", m.lost_write)],
                ),
                (
                    "sandbox_reloads_total",
                    "Policy reloads (SIGHUP), by result.",
                    [
                        ("result", "applied", m.reloads_applied),
                        ("result", "refused", m.reloads_refused),
                    ],
                ),
            ];
            for (name, help, series) in counters {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
                for (key, value, n) in series {
                    let _ = writeln!(out, "{name}{{{key}=\"{value}\"}} {n}");
                }
            }
            let lookups = [("result", "ok", m.lookups_ok), ("result", "failed", m.lookups_failed)];
            let _ = writeln!(
                out,
                "# HELP sandbox_host_lookups_total Rounds of allow_hosts lookups, by result.\n\
                 # TYPE sandbox_host_lookups_total counter"
            );
            for (key, value, n) in lookups {
                let _ = writeln!(out, "sandbox_host_lookups_total{{{key}=\"{value}\"}} {n}");
            }
            let _ = writeln!(
                out,
                "# HELP sandbox_host_write_errors_total Updates of the allow_hosts entries that could not all be written.\n\
                 # TYPE sandbox_host_write_errors_total counter\nsandbox_host_write_errors_total {}",
                m.host_write_errors
            );
            let _ = writeln!(
                out,
                "# HELP sandbox_aggregates_total Records standing for identical denials counted in the kernel.\n\
                 # TYPE sandbox_aggregates_total counter\nsandbox_aggregates_total {}",
                m.aggregates
            );
            let _ = writeln!(
                out,
                "# HELP sandbox_host_addresses Addresses the allow_hosts names allow now.\n\
                 # TYPE sandbox_host_addresses gauge\nsandbox_host_addresses {}",
                m.host_addresses
            );
            out.push_str(
                "# HELP sandbox_policy_info The policy in force.\n# TYPE sandbox_policy_info gauge\n",
            );
            let _ = writeln!(out, "sandbox_policy_info{{name=\"{}\"}} 1", label(&m.policy));
            out
        })
    }
}

/// A label value: backslash, double quote and newline escaped.
fn label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Listens on `addr` and answers every request with the metrics, until the runtime ends.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("metrics: cannot listen on {addr}: {e}"))?;
    crate::term::line(&format!(
        "sandbox: metrics on http://{}/metrics",
        listener.local_addr().unwrap_or(addr)
    ));
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                continue;
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                // The request itself does not matter (every path gets the metrics); read
                // what arrived so that closing does not reset the connection.
                let mut buf = [0u8; 1024];
                let read =
                    tokio::time::timeout(std::time::Duration::from_secs(2), conn.read(&mut buf))
                        .await;
                if !matches!(read, Ok(Ok(_))) {
                    return;
                }
                let body = metrics.render();
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(body.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_counts_and_escapes() {
        let m = Metrics::default();
        m.policy("p\"1");
        let mut r = crate::audit::Record::loss(2, "ring buffer full", None);
        m.record(&r);
        r.class_uid = 1001;
        r.action = Some("Denied");
        r.count = None;
        r.unmapped.rule = Some("files.read_only (implicit: \"audit\" log)".into());
        m.record(&r);
        m.record(&r);
        // A record of 10 identical denials counts as 10.
        let mut many = r.clone();
        many.unmapped.rule = Some("files.deny[0]".into());
        many.count = Some(10);
        m.record(&many);
        m.ring_lost(5);
        m.set_write_lost(3);
        m.reload(true);
        m.reload(false);
        m.lookup(false, 3);
        m.lookup(true, 2);
        m.lookup(false, 4);
        m.host_write_failed();
        let text = m.render();
        for want in [
            "sandbox_aggregates_total 1",
            "sandbox_host_write_errors_total 1",
            "sandbox_host_lookups_total{result=\"ok\"} 2",
            "sandbox_host_lookups_total{result=\"failed\"} 1",
            "sandbox_host_addresses 4",
        ] {
            assert!(text.contains(want), "{want} missing from\n{text}");
        }
        assert!(text.contains(
            "sandbox_records_total{class=\"file\",decision=\"deny\",rule=\"files.read_only (implicit: \\\"audit\\\" log)\"} 2"
        ), "{text}");
        assert!(
            text.contains(
                "sandbox_records_total{class=\"file\",decision=\"deny\",rule=\"files.deny[0]\"} 10"
            ),
            "{text}"
        );
        assert!(
            text.contains("sandbox_records_total{class=\"audit\",decision=\"none\",rule=\"\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sandbox_records_lost_total{cause=\"ring_buffer\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("sandbox_records_lost_total{cause=\"log_write\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("sandbox_reloads_total{result=\"refused\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sandbox_policy_info{name=\"p\\\"1\"} 1"),
            "{text}"
        );
    }

    #[test]
    fn served_over_tcp() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let m = Arc::new(Metrics::default());
            m.ring_lost(7);
            // Port 0: find the port from a listener of our own first.
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = probe.local_addr().unwrap();
            drop(probe);
            serve(addr, m.clone()).await.unwrap();
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut resp = String::new();
            c.read_to_string(&mut resp).await.unwrap();
            assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
            assert!(
                resp.contains("sandbox_records_lost_total{cause=\"ring_buffer\"} 7"),
                "{resp}"
            );
        });
    }
}
