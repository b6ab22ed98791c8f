//! Which backend enforces on this host, decided once per run by trying, not by guessing:
//! - **BPF-LSM** (the design): a BPF-LSM program loads and `bpf` is an active LSM. Every
//!   rule is enforced.
//! - **fallback**: the kernel cannot run BPF-LSM programs (no `CONFIG_BPF_LSM`, `bpf` not in
//!   the LSM list, trampolines refused). The network rules are enforced by cgroup
//!   socket-address programs over the same maps (`hooks/sockaddr.rs`), files and exec by
//!   Landlock in the child before `exec` (`fallback`); what that cannot enforce is listed
//!   rule by rule, and a policy with such rules runs only when the user accepts it.
//!
//! `SANDBOX_BACKEND=fallback` forces the fallback on a host that could do BPF-LSM (to try it,
//! or to test it in the VM); `SANDBOX_BACKEND=bpf-lsm` refuses to fall back.

use std::path::PathBuf;

use anyhow::{anyhow, bail};

use crate::kernel::loader::{self, KernelFit};
use crate::preflight;

/// The backend in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    BpfLsm,
    Fallback {
        /// Why BPF-LSM cannot be used here (with the fix).
        why: String,
        /// The Landlock ABI, or why there is none.
        landlock: Result<u32, String>,
    },
}

impl Backend {
    pub fn is_fallback(&self) -> bool {
        matches!(self, Self::Fallback { .. })
    }

    /// One line for the terminal.
    pub fn describe(&self) -> String {
        match self {
            Self::BpfLsm => "backend: BPF-LSM (every rule enforced in the kernel)".into(),
            Self::Fallback { why, landlock } => format!(
                "backend: fallback (cgroup socket-address programs for the network, {} for \
                 files and exec), because {why}",
                match landlock {
                    Ok(abi) => format!("Landlock ABI {abi}"),
                    Err(_) => "no Landlock".into(),
                }
            ),
        }
    }
}

/// What a run needs to know about the host: the backend, the kernel's BTF, the cgroup v2
/// mount.
#[derive(Debug)]
pub struct Host {
    pub backend: Backend,
    pub kernel: KernelFit,
    pub cgroup_root: PathBuf,
}

/// Runs the checks and picks the backend. Fails (nothing can be enforced) without root's
/// privileges, without BTF, or when neither backend loads.
pub fn detect() -> anyhow::Result<Host> {
    let hard: Vec<String> = preflight::hard_checks()
        .into_iter()
        .filter(|c| !c.ok)
        .map(|c| format!("  {}: {}", c.name, c.detail))
        .collect();
    if !hard.is_empty() {
        bail!(
            "cannot enforce the policy on this host; nothing was started:\n{}",
            hard.join("\n")
        );
    }
    let forced = std::env::var("SANDBOX_BACKEND").ok();
    let lsm = match forced.as_deref() {
        Some("fallback") => Err("SANDBOX_BACKEND=fallback".to_owned()),
        Some("bpf-lsm") | None => lsm_usable(),
        Some(other) => bail!("SANDBOX_BACKEND={other}: expected bpf-lsm or fallback"),
    };
    match lsm {
        Ok(kernel) => {
            let cgroup_root = crate::host::cgroup::root()?;
            Ok(Host {
                backend: Backend::BpfLsm,
                kernel,
                cgroup_root,
            })
        }
        Err(why) if forced.as_deref() == Some("bpf-lsm") => {
            bail!("SANDBOX_BACKEND=bpf-lsm, but {why}; nothing was started")
        }
        Err(why) => {
            let kernel = loader::kernel_fit_without_lsm()?;
            loader::probe_cgroup(&kernel).map_err(|e| {
                anyhow!(
                    "BPF-LSM cannot be used ({why}), and neither can the fallback: {e}. \
                     Nothing was started. Run `sandbox preflight` for each check"
                )
            })?;
            let (cgroup_root, mounted) = crate::host::cgroup::root_or_mount()?;
            if mounted {
                crate::term::line(&format!(
                    "sandbox: no cgroup v2 hierarchy was mounted: mounted one at {} (it stays \
                     mounted; `umount {}` removes it when no sandbox runs)",
                    cgroup_root.display(),
                    cgroup_root.display()
                ));
            }
            Ok(Host {
                backend: Backend::Fallback {
                    why,
                    landlock: crate::landlock::abi(),
                },
                kernel,
                cgroup_root,
            })
        }
    }
}

/// The kernel fit when BPF-LSM programs load and `bpf` is an active LSM, else why not.
fn lsm_usable() -> Result<KernelFit, String> {
    let mut t = crate::runtime::arm::Timer::new();
    let kernel = loader::kernel_fit()
        .map_err(|e| format!("this kernel has no usable BPF-LSM hooks ({e})"))?;
    t.lap("kernel BTF read");
    let probed = loader::probe_lsm(&kernel);
    t.lap("BPF-LSM probe");
    // The probe's program reads no kernel memory; the real ones do, which lockdown's
    // confidentiality mode refuses.
    if preflight::lockdown_confidentiality() {
        return Err(
            "kernel lockdown is in confidentiality mode, which refuses the kernel-memory reads              every BPF-LSM path decision makes (boot with lockdown=integrity to use it)"
                .to_owned(),
        );
    }
    if let Err(e) = probed {
        return Err(format!(
            "the kernel refused to load a BPF-LSM program ({e}): BPF LSM is not built in, or \
             the kernel cannot create BPF trampolines (some virtualised kernels)"
        ));
    }
    match preflight::lsm_list() {
        Ok(list) if list.split(',').any(|l| l == "bpf") => Ok(kernel),
        Ok(list) => Err(format!(
            "BPF LSM is not active (active LSMs: {list}); add bpf to the kernel's lsm= list \
             and reboot to get every rule enforced"
        )),
        Err(e) => Err(format!("whether BPF LSM is active cannot be known: {e}")),
    }
}
