//! `limits`: how much memory, how many tasks, how much CPU time and disk bandwidth the
//! command's cgroup may hold (cgroup v2's `memory.max`, `pids.max`, `cpu.max`, `io.max`),
//! as written, checked, and resolved for a host. Applying them is `host::cgroup::Cgroup::limit`.
//!
//! Without them a command inside could take the host down: a fork bomb takes every pid
//! and thread of the host, and memory the command fills but maps nowhere (a memfd, files
//! in a tmpfs) counts toward no process, so the global OOM killer would kill processes
//! outside the sandbox for it. With `memory.max` the kernel reclaims and, at the limit,
//! kills inside the cgroup only (sandbox itself runs outside it). CPU time is not limited
//! by default (a busy command slows the host as any program of its user would); `cpu.max`
//! holds a command that would otherwise keep every CPU busy (a build, a runaway loop) to
//! its share, and the host's other programs keep the rest.

use super::raw::RawAmount;

/// Default `limits.memory`: this share of the host's memory.
pub const DEFAULT_MEMORY_PERCENT: u64 = 80;
/// Default `limits.pids`: tasks (processes and threads). Podman's default is 2,048.
pub const DEFAULT_PIDS: u64 = 4096;
/// Most tasks a kernel has (`PID_MAX_LIMIT` on 64-bit): the most `pids.max` takes.
pub const PID_MAX_LIMIT: u64 = 4 << 20;
/// Least `limits.memory` accepted: below it no agent starts.
pub const MIN_MEMORY: u64 = 16 << 20;
/// The period of the `cpu.max` sandbox writes, in microseconds (the kernel's default,
/// 100 ms): `limits.cpu` is a quota of CPU time in each, `Amount::Exact` in these units
/// (100,000 is one CPU).
pub const CPU_PERIOD: u64 = 100_000;
/// The least quota the kernel takes (1 ms a period): 0.01 CPUs.
pub const MIN_CPU_QUOTA: u64 = 1_000;
/// Most CPUs `limits.cpu` names: as many as Debian's kernels run (`NR_CPUS`).
pub const MAX_CPUS: u64 = 8192;
/// Least `limits.io` rate accepted, bytes a second: below it a command's reads of its own
/// program and libraries would take minutes.
pub const MIN_IO_RATE: u64 = 64 << 10;

/// One limit: unlimited, a number (bytes, tasks), or a share of the host's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    Max,
    Exact(u64),
    Percent(u64),
}

/// One limit and whether the policy wrote it: a limit written that cannot be applied stops
/// the run; the default one is then only said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub amount: Amount,
    pub written: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub memory: Limit,
    pub pids: Limit,
    pub cpu: Limit,
    /// Bytes and requests a second of each disk (`io.max`'s `rbps`, `wbps`, `riops`,
    /// `wiops`).
    pub io_read: Limit,
    pub io_write: Limit,
    pub io_read_iops: Limit,
    pub io_write_iops: Limit,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory: Limit {
                amount: Amount::Percent(DEFAULT_MEMORY_PERCENT),
                written: false,
            },
            pids: Limit {
                amount: Amount::Exact(DEFAULT_PIDS),
                written: false,
            },
            cpu: Limit {
                amount: Amount::Max,
                written: false,
            },
            io_read: Limit {
                amount: Amount::Max,
                written: false,
            },
            io_write: Limit {
                amount: Amount::Max,
                written: false,
            },
            io_read_iops: Limit {
                amount: Amount::Max,
                written: false,
            },
            io_write_iops: Limit {
                amount: Amount::Max,
                written: false,
            },
        }
    }
}

impl Amount {
    /// The value for the cgroup file: `None` is `max`; a share is of `total`.
    pub fn resolve(self, total: u64) -> Option<u64> {
        match self {
            Self::Max => None,
            Self::Exact(n) => Some(n),
            Self::Percent(p) => Some(total / 100 * p),
        }
    }
}

/// `limits.memory`: bytes (a number, or with a `K`, `M`, `G` or `T` suffix, 1024-based,
/// optionally followed by `B` or `iB`), `N%` of the host's memory, or `max`.
pub fn memory(raw: &RawAmount) -> Result<Amount, String> {
    let text = match raw {
        RawAmount::Number(n) => return at_least_min(*n),
        RawAmount::Decimal(d) => {
            return Err(format!(
                "{d}: not an amount of memory (whole bytes, or e.g. 4G, 512M, 80%, or max)"
            ));
        }
        RawAmount::Text(t) => t.trim(),
    };
    if text == "max" {
        return Ok(Amount::Max);
    }
    if let Some(share) = share(text, "memory") {
        return share;
    }
    match bytes(text) {
        Some(b) => at_least_min(b),
        None => Err(format!(
            "'{text}': not an amount of memory (e.g. 4G, 512M, 80%, or max)"
        )),
    }
}

/// Bytes as written: a number with an optional `K`, `M`, `G` or `T` (1024-based), itself
/// optionally followed by `B` or `iB`.
fn bytes(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let unit = lower.trim_end_matches("ib").trim_end_matches('b');
    let (digits, shift) = match unit.chars().last() {
        Some('k') => (&unit[..unit.len() - 1], 10),
        Some('m') => (&unit[..unit.len() - 1], 20),
        Some('g') => (&unit[..unit.len() - 1], 30),
        Some('t') => (&unit[..unit.len() - 1], 40),
        _ => (unit, 0),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
}

/// `limits.io.read`, `limits.io.write`: bytes a second (a number, or with a `K`, `M`, `G`
/// suffix as for memory, optionally ending in `/s`), or `max`.
pub fn io_rate(raw: &RawAmount) -> Result<Amount, String> {
    let rate = match raw {
        RawAmount::Number(n) => Some(*n),
        RawAmount::Decimal(d) => return Err(format!("{d}: not a whole number of bytes")),
        RawAmount::Text(t) => {
            let text = t.trim();
            if text == "max" {
                return Ok(Amount::Max);
            }
            bytes(text.strip_suffix("/s").unwrap_or(text))
        }
    };
    match rate {
        Some(r) if r >= MIN_IO_RATE => Ok(Amount::Exact(r)),
        Some(r) => Err(format!(
            "{r} bytes a second is less than the {} KiB/s a command needs to start",
            MIN_IO_RATE >> 10
        )),
        None => Err(format!(
            "'{}': not a rate (bytes a second, e.g. 50M, 100M/s, or max)",
            match raw {
                RawAmount::Text(t) => t.trim(),
                _ => "",
            }
        )),
    }
}

/// `limits.io.read_iops`, `limits.io.write_iops`: requests a second (at least 10, at most
/// what the kernel keeps, 2^32 - 1; optionally ending in `/s`), or `max`.
pub fn io_ops(raw: &RawAmount) -> Result<Amount, String> {
    let n = match raw {
        RawAmount::Number(n) => *n,
        RawAmount::Text(t) if t.trim() == "max" => return Ok(Amount::Max),
        RawAmount::Text(t) => {
            let text = t.trim();
            let digits = text.strip_suffix("/s").unwrap_or(text).trim();
            digits.parse::<u64>().map_err(|_| {
                format!("'{text}': not a number of requests a second (e.g. 1000, or max)")
            })?
        }
        RawAmount::Decimal(d) => return Err(format!("{d}: not a whole number of requests")),
    };
    if n < 10 {
        return Err(format!(
            "{n} requests a second are too few for a command to start (10 at least)"
        ));
    }
    if n > u64::from(u32::MAX) {
        return Err(format!(
            "{n} requests a second are more than the kernel keeps ({}); `max` for no limit",
            u32::MAX
        ));
    }
    Ok(Amount::Exact(n))
}

/// `N%` (1 to 100) of the host's `what`, if `text` ends in `%`.
fn share(text: &str, what: &str) -> Option<Result<Amount, String>> {
    let p = text.strip_suffix('%')?;
    Some(
        match p.trim().parse::<u64>().ok().filter(|_| !p.starts_with('+')) {
            Some(p @ 1..=100) => Ok(Amount::Percent(p)),
            _ => Err(format!(
                "'{text}': a share of the host's {what} is 1% to 100%"
            )),
        },
    )
}

fn at_least_min(bytes: u64) -> Result<Amount, String> {
    if bytes < MIN_MEMORY {
        return Err(format!(
            "{bytes} bytes is less than the {} MiB a command needs to start",
            MIN_MEMORY >> 20
        ));
    }
    Ok(Amount::Exact(bytes))
}

/// `limits.pids`: a number of tasks (processes and threads, at least 16), or `max`.
pub fn pids(raw: &RawAmount) -> Result<Amount, String> {
    let n = match raw {
        RawAmount::Number(n) => *n,
        RawAmount::Decimal(d) => return Err(format!("{d}: not a whole number of tasks")),
        RawAmount::Text(t) if t.trim() == "max" => return Ok(Amount::Max),
        RawAmount::Text(t) => t
            .trim()
            .parse::<u64>()
            .map_err(|_| format!("'{t}': not a number of tasks (e.g. 4096, or max)"))?,
    };
    if n < 16 {
        return Err(format!(
            "{n} tasks are too few for a command to start (16 at least)"
        ));
    }
    if n > PID_MAX_LIMIT {
        return Err(format!(
            "{n} tasks are more than any kernel runs ({PID_MAX_LIMIT}); `max` for no limit"
        ));
    }
    Ok(Amount::Exact(n))
}

/// `limits.cpu`: CPUs' worth of CPU time (`2`, `0.5`, at least 0.01), `N%` of the host's
/// CPUs, or `max`; as a quota of microseconds in each [`CPU_PERIOD`].
pub fn cpu(raw: &RawAmount) -> Result<Amount, String> {
    let cpus = match raw {
        RawAmount::Number(n) => *n as f64,
        RawAmount::Decimal(d) => *d,
        RawAmount::Text(t) => {
            let text = t.trim();
            if text == "max" {
                return Ok(Amount::Max);
            }
            if let Some(share) = share(text, "CPUs") {
                return share;
            }
            text.parse::<f64>()
                .map_err(|_| format!("'{text}': not a number of CPUs (e.g. 2, 0.5, 50%, or max)"))?
        }
    };
    let most = MAX_CPUS as f64;
    if !cpus.is_finite() {
        return Err(format!(
            "'{cpus}': not a number of CPUs (e.g. 2, 0.5, 50%, or max)"
        ));
    }
    if cpus > most {
        return Err(format!(
            "{cpus} CPUs are more than any kernel runs ({MAX_CPUS}); `max` for no limit"
        ));
    }
    let quota = (cpus * CPU_PERIOD as f64).round();
    if quota < MIN_CPU_QUOTA as f64 {
        return Err(format!(
            "{cpus} CPUs is less than the kernel gives (0.01: 1 ms in every 100 ms)"
        ));
    }
    #[allow(clippy::cast_sign_loss)]
    Ok(Amount::Exact(quota as u64))
}

/// A `cpu.max` quota per [`CPU_PERIOD`] as people say it: `0.5 CPUs`, `1 CPU`.
pub fn human_cpus(quota: u64) -> String {
    let whole = quota / CPU_PERIOD;
    let hundredths = (quota % CPU_PERIOD + CPU_PERIOD / 200) / (CPU_PERIOD / 100);
    let (whole, hundredths) = if hundredths == 100 {
        (whole + 1, 0)
    } else {
        (whole, hundredths)
    };
    let n = if hundredths == 0 {
        whole.to_string()
    } else {
        format!("{whole}.{hundredths:02}")
            .trim_end_matches('0')
            .to_owned()
    };
    format!("{n} CPU{}", if n == "1" { "" } else { "s" })
}

/// Bytes as people write them: `4.0 GiB`, `512 MiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} bytes")
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> RawAmount {
        RawAmount::Text(s.to_owned())
    }

    #[test]
    fn memory_is_read_as_people_write_it() {
        for (s, want) in [
            ("4G", Amount::Exact(4 << 30)),
            ("4GiB", Amount::Exact(4 << 30)),
            ("512m", Amount::Exact(512 << 20)),
            ("512 MB", Amount::Exact(512 << 20)),
            ("1T", Amount::Exact(1 << 40)),
            ("65536k", Amount::Exact(64 << 20)),
            ("80%", Amount::Percent(80)),
            ("max", Amount::Max),
        ] {
            assert_eq!(memory(&text(s)), Ok(want), "{s}");
        }
        assert_eq!(
            memory(&RawAmount::Number(1 << 30)),
            Ok(Amount::Exact(1 << 30))
        );
        for bad in [
            "",
            "lots",
            "0%",
            "101%",
            "+80%",
            "4X",
            "-1G",
            "1M",
            "99999999999T",
        ] {
            assert!(memory(&text(bad)).is_err(), "{bad}");
        }
        assert!(memory(&RawAmount::Number(4096)).is_err());
    }

    #[test]
    fn pids_are_a_count_or_max() {
        assert_eq!(pids(&RawAmount::Number(64)), Ok(Amount::Exact(64)));
        assert_eq!(pids(&text("512")), Ok(Amount::Exact(512)));
        assert_eq!(pids(&text("max")), Ok(Amount::Max));
        for bad in ["", "many", "10%", "4k"] {
            assert!(pids(&text(bad)).is_err(), "{bad}");
        }
        assert!(pids(&RawAmount::Number(3)).is_err());
        assert_eq!(
            pids(&RawAmount::Number(4 << 20)),
            Ok(Amount::Exact(4 << 20))
        );
        assert!(pids(&RawAmount::Number((4 << 20) + 1)).is_err());
    }

    #[test]
    fn cpu_is_cpus_worth_of_time_a_share_or_max() {
        for (raw, want) in [
            (RawAmount::Number(2), Amount::Exact(200_000)),
            (RawAmount::Decimal(0.5), Amount::Exact(50_000)),
            (RawAmount::Decimal(0.01), Amount::Exact(1_000)),
            (text("1.5"), Amount::Exact(150_000)),
            (text("50%"), Amount::Percent(50)),
            (text("max"), Amount::Max),
        ] {
            assert_eq!(cpu(&raw), Ok(want), "{raw:?}");
        }
        for bad in [
            RawAmount::Number(0),
            RawAmount::Number(9000),
            RawAmount::Decimal(0.001),
            RawAmount::Decimal(-1.0),
            text(""),
            text("two"),
            text("inf"),
            text("NaN"),
            text("0%"),
            text("150%"),
        ] {
            assert!(cpu(&bad).is_err(), "{bad:?}");
        }
        assert!(memory(&RawAmount::Decimal(1.5)).is_err());
        for (raw, want) in [
            (text("50M"), Amount::Exact(50 << 20)),
            (text("100M/s"), Amount::Exact(100 << 20)),
            (text("1GiB/s"), Amount::Exact(1 << 30)),
            (RawAmount::Number(1 << 20), Amount::Exact(1 << 20)),
            (text("max"), Amount::Max),
        ] {
            assert_eq!(io_rate(&raw), Ok(want), "{raw:?}");
        }
        assert_eq!(io_ops(&RawAmount::Number(500)), Ok(Amount::Exact(500)));
        assert_eq!(io_ops(&text("max")), Ok(Amount::Max));
        assert_eq!(io_ops(&text("1000/s")), Ok(Amount::Exact(1000)));
        for bad in [
            RawAmount::Number(5),
            RawAmount::Number(1 << 32),
            text("1k"),
            RawAmount::Decimal(20.5),
        ] {
            assert!(io_ops(&bad).is_err(), "{bad:?}");
        }
        for bad in [
            text("fast"),
            text("10%"),
            text("1K"),
            RawAmount::Decimal(1.5),
            RawAmount::Number(100),
        ] {
            assert!(io_rate(&bad).is_err(), "{bad:?}");
        }
        assert!(pids(&RawAmount::Decimal(64.5)).is_err());
        for (quota, said) in [
            (50_000, "0.5 CPUs"),
            (100_000, "1 CPU"),
            (125_000, "1.25 CPUs"),
            (200_000, "2 CPUs"),
            (1_000, "0.01 CPUs"),
            (199_999, "2 CPUs"),
        ] {
            assert_eq!(human_cpus(quota), said, "{quota}");
        }
    }

    #[test]
    fn a_share_is_of_the_hosts_memory() {
        assert_eq!(Amount::Percent(80).resolve(1000 << 20), Some(800 << 20));
        assert_eq!(Amount::Max.resolve(1 << 30), None);
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(100), "100 bytes");
    }
}
