//! Can BPF-LSM enforcement work on this host? Each check says what failed and how to fix it
//! in plain words. Privileges and BTF are needed by both backends (`sandbox run` refuses
//! without them); the LSM list and the load decide between BPF-LSM and the fallback
//! (`backend`).

use std::path::Path;

/// The outcome of one check.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
}

const CAP_SYS_ADMIN: u32 = 21;
const CAP_MAC_ADMIN: u32 = 33;

/// The checks that need no BPF program: privileges, LSM list, BTF, cgroup v2, the
/// controllers `limits` needs.
pub fn static_checks() -> Vec<Check> {
    vec![privileges(), bpf_lsm(), btf(), cgroup2(), limits()]
}

/// What both backends need: root's privileges and BTF. (The LSM list and the cgroup v2
/// mount only decide the backend: see `backend`.)
pub fn hard_checks() -> Vec<Check> {
    vec![privileges(), btf()]
}

fn privileges() -> Check {
    let caps = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("CapEff:")
                    .map(|v| u64::from_str_radix(v.trim(), 16).unwrap_or(0))
            })
        })
        .unwrap_or(0);
    let has = |c: u32| caps & (1u64 << c) != 0;
    let ok = has(CAP_SYS_ADMIN) && has(CAP_MAC_ADMIN);
    Check {
        name: "privileges",
        ok,
        detail: if ok {
            "running with CAP_SYS_ADMIN and CAP_MAC_ADMIN".into()
        } else {
            "loading BPF-LSM programs needs root (CAP_SYS_ADMIN and CAP_MAC_ADMIN): run sandbox with sudo".into()
        },
    }
}

/// The active LSM list, from securityfs or, when it is not mounted, mounting it is the fix.
pub fn lsm_list() -> Result<String, String> {
    let p = Path::new("/sys/kernel/security/lsm");
    match std::fs::read_to_string(p) {
        Ok(s) => Ok(s.trim().to_owned()),
        Err(_) => Err(
            "cannot read /sys/kernel/security/lsm: securityfs is not mounted (mount -t securityfs securityfs /sys/kernel/security)".into(),
        ),
    }
}

/// Whether kernel lockdown is in its confidentiality mode (`/sys/kernel/security/lockdown`
/// reads `none integrity [confidentiality]`): the kernel then refuses BPF programs'
/// reads of kernel memory (`bpf_probe_read_kernel`), which every path decision makes.
/// False when the file cannot be read (no lockdown LSM, or securityfs not mounted).
pub fn lockdown_confidentiality() -> bool {
    std::fs::read_to_string("/sys/kernel/security/lockdown")
        .is_ok_and(|s| lockdown_mode_is_confidentiality(&s))
}

fn lockdown_mode_is_confidentiality(s: &str) -> bool {
    s.split_whitespace().any(|w| w == "[confidentiality]")
}

fn bpf_lsm() -> Check {
    match lsm_list() {
        Ok(list) if list.split(',').any(|l| l == "bpf") => Check {
            name: "bpf-lsm",
            ok: true,
            detail: format!("bpf is an active LSM ({list})"),
        },
        Ok(list) => Check {
            name: "bpf-lsm",
            ok: false,
            detail: format!(
                "BPF LSM is not enabled (active LSMs: {list}). Enable it by adding `lsm={list},bpf` to the kernel command line: \
                 on GRUB systems append it to GRUB_CMDLINE_LINUX in /etc/default/grub, run update-grub and reboot. \
                 The kernel must be built with CONFIG_BPF_LSM=y{}",
                kernel_config_hint()
            ),
        },
        Err(e) => Check {
            name: "bpf-lsm",
            ok: false,
            detail: e,
        },
    }
}

fn kernel_config_hint() -> String {
    let Ok(rel) = std::fs::read_to_string("/proc/sys/kernel/osrelease") else {
        return String::new();
    };
    let cfg = format!("/boot/config-{}", rel.trim());
    match std::fs::read_to_string(&cfg) {
        Ok(c) if c.lines().any(|l| l == "CONFIG_BPF_LSM=y") => format!(" (it is: {cfg})."),
        Ok(_) => format!(" ({cfg} says it is not: this kernel cannot do BPF LSM)."),
        Err(_) => ".".into(),
    }
}

fn btf() -> Check {
    let ok = Path::new("/sys/kernel/btf/vmlinux").exists();
    Check {
        name: "btf",
        ok,
        detail: if ok {
            "kernel BTF at /sys/kernel/btf/vmlinux".into()
        } else {
            "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing): it needs CONFIG_DEBUG_INFO_BTF=y".into()
        },
    }
}

fn cgroup2() -> Check {
    match crate::host::cgroup::root() {
        Ok(p) => Check {
            name: "cgroup2",
            ok: true,
            detail: format!("cgroup v2 at {}", p.display()),
        },
        Err(e) => Check {
            name: "cgroup2",
            ok: false,
            detail: e.to_string(),
        },
    }
}

/// cgroup v2 offers the controllers of `limits` at its root: without memory or pids their
/// default limit is skipped (with a warning); without any of them (cpu and io have no
/// default) a limit the policy writes stops the run.
fn limits() -> Check {
    let have = crate::host::cgroup::root()
        .ok()
        .and_then(|r| std::fs::read_to_string(r.join("cgroup.controllers")).ok())
        .unwrap_or_default();
    let missing: Vec<&str> = ["memory", "pids", "cpu", "io"]
        .into_iter()
        .filter(|c| !have.split_whitespace().any(|h| h == *c))
        .collect();
    Check {
        name: "limits",
        ok: missing.is_empty(),
        detail: if missing.is_empty() {
            "cgroup v2 has the memory, pids, cpu and io controllers (limits.memory, \
             limits.pids, limits.cpu, limits.io)"
                .into()
        } else {
            format!(
                "cgroup v2 lacks the {} controller(s) (cgroup v1 holds them?): a limit the \
                 policy writes for them stops the run{}; boot with \
                 systemd.unified_cgroup_hierarchy=1",
                missing.join(" and "),
                if missing.iter().any(|m| ["memory", "pids"].contains(m)) {
                    ", the default memory and task limits are skipped with a warning"
                } else {
                    ""
                }
            )
        },
    }
}

/// Explains a load/attach failure in plain words.
pub fn explain_load_failure(e: &crate::kernel::loader::LoadError) -> String {
    let text = e.to_string();
    let refused = text.contains("Operation not permitted")
        || text.contains("EPERM")
        || text.contains("os error 1)");
    if refused {
        format!(
            "{text}\n\nThe kernel refused a BPF-LSM program. That happens when BPF LSM is not active, when the kernel \
             cannot create BPF trampolines (some virtualised or hardened kernels), or without CAP_SYS_ADMIN/CAP_MAC_ADMIN. \
             Run `sandbox preflight` for each check. Nothing was started."
        )
    } else {
        format!("{text}\n\nNothing was started. Run `sandbox preflight` for each check.")
    }
}

#[cfg(test)]
mod lockdown_tests {
    #[test]
    fn the_active_lockdown_mode_is_the_bracketed_one() {
        use super::lockdown_mode_is_confidentiality as conf;
        assert!(!conf("[none] integrity confidentiality\n"));
        assert!(!conf("none [integrity] confidentiality\n"));
        assert!(conf("none integrity [confidentiality]\n"));
        assert!(!conf(""));
    }
}
