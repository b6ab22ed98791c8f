//! Stock Debian kernels for the VM tests, fetched with `apt-get download` (never installed)
//! through a private APT configuration per suite, so the system's apt is never pointed at
//! another release. Resolved through the `linux-image-amd64` metapackage (ABI packages vanish
//! after point releases) and cached by version.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, anyhow, bail};

use crate::sh;

pub const DEFAULT_KERNELS: &str = "6.1,6.12,7.2";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Label {
    V6_1,
    V6_12,
    V7_2,
}

impl Label {
    pub fn suite(self) -> &'static str {
        match self {
            Self::V6_1 => "bookworm",
            Self::V6_12 => "bookworm-backports",
            Self::V7_2 => "trixie-backports",
        }
    }
}

pub fn parse_labels(s: &str) -> anyhow::Result<Vec<Label>> {
    s.split(',')
        .map(|l| match l.trim() {
            "6.1" => Ok(Label::V6_1),
            "6.12" => Ok(Label::V6_12),
            "7.2" => Ok(Label::V7_2),
            other => bail!("unknown kernel '{other}' (known: {DEFAULT_KERNELS})"),
        })
        .collect()
}

/// A kernel ready to boot.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub label: Label,
    /// e.g. `6.12.95+deb12-amd64`.
    pub version: String,
    pub vmlinuz: PathBuf,
    /// Modules the guest loads at boot (see [`GUEST_MODULES`]): `NAME.ko` files and
    /// `order`, the names in load order. Empty when they could not be had.
    pub modules: PathBuf,
}

/// Modules the tests need that Debian builds as modules: loop devices, ext4 (for file
/// systems on a disk image: evictable dentries, file handles, subdirectory mounts) and
/// btrfs (subvolumes). Their dependencies come along.
const GUEST_MODULES: &[&str] = &["loop", "ext4", "btrfs"];
/// Loaded where the package has them: smc (a TCP socket turned into an SMC one by
/// `TCP_ULP` before 7.0, a route past the network hooks that the tests show works
/// outside; 7.x packages may not build it).
const GUEST_OPTIONAL_MODULES: &[&str] = &["smc"];

/// What the extracted modules' marker records: a list that grew is extracted again.
fn modules_marker() -> String {
    GUEST_MODULES
        .iter()
        .chain(GUEST_OPTIONAL_MODULES)
        .copied()
        .collect::<Vec<_>>()
        .join(",")
}
/// Loaded first where the package has them: what the modules above ask the crypto API
/// for at run time (ext4's checksums before 7.x), which `depends=` does not list.
const GUEST_SOFT_MODULES: &[&str] = &["crc32c_generic"];

/// Where downloads are kept between runs (outside the work tree, so fresh clones reuse them).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SANDBOX_XTASK_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache/sandbox-xtask")
}

/// The Debian mirror this machine uses.
fn mirror() -> String {
    let text =
        std::fs::read_to_string("/etc/apt/sources.list.d/debian.sources").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.strip_prefix("URIs:"))
        .map(str::trim)
        .find(|u| !u.contains("security"))
        .map_or_else(|| "http://deb.debian.org/debian".to_owned(), str::to_owned)
}

/// A private APT configuration for one suite.
fn apt_config(suite: &str) -> anyhow::Result<PathBuf> {
    let dir = cache_dir().join(format!("apt-{suite}"));
    for sub in [
        "lists/partial",
        "cache/archives/partial",
        "sources.list.d",
        "prefs.d",
    ] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    std::fs::write(
        dir.join("sources.list.d/kernels.sources"),
        format!(
            "Types: deb\nURIs: {}\nSuites: {suite}\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n",
            mirror()
        ),
    )?;
    let conf = dir.join("apt.conf");
    std::fs::write(
        &conf,
        format!(
            "Dir::Etc::SourceList \"/dev/null\";\nDir::Etc::SourceParts \"{0}/sources.list.d\";\nDir::State::Lists \"{0}/lists\";\n\
             Dir::Cache \"{0}/cache\";\nDir::Etc::Preferences \"/dev/null\";\nDir::Etc::PreferencesParts \"{0}/prefs.d\";\n\
             APT::Sandbox::User \"root\";\n",
            dir.display()
        ),
    )?;
    Ok(conf)
}

fn apt(conf: &Path, program: &str) -> Command {
    let mut c = Command::new(program);
    c.env("APT_CONFIG", conf);
    c
}

pub fn ensure(label: Label) -> anyhow::Result<Kernel> {
    let suite = label.suite();
    let conf = apt_config(suite)?;
    let kdir_root = cache_dir().join("kernels");
    std::fs::create_dir_all(&kdir_root)?;
    let updated = sh::run(apt(&conf, "apt-get").args(["update", "-qq"]));
    let version = match resolve(&conf) {
        Ok(v) => v,
        Err(e) => {
            // Offline: use the newest kernel of this suite already in the cache.
            if let Some(k) = cached(&kdir_root, label) {
                eprintln!(
                    "xtask: warning: cannot resolve the {suite} kernel ({e:#}); using cached {}",
                    k.version
                );
                return Ok(k);
            }
            updated?;
            return Err(e);
        }
    };
    let kdir = kdir_root.join(&version);
    let marker = kdir.join(".complete");
    if !marker.exists() {
        println!("==> fetching Debian kernel {version} ({suite})");
        let _ = std::fs::remove_dir_all(&kdir);
        let dl = cache_dir().join("debs");
        std::fs::create_dir_all(&dl)?;
        let image = format!("linux-image-{version}");
        download(&conf, &dl, &[&image])?;
        extract(&find_deb(&dl, &image)?, &kdir)?;
        if find_file(&kdir, "vmlinuz").is_none() {
            // 7.x splits the image: the kernel in linux-binary-*, the config in linux-base-*.
            let bin = format!("linux-binary-{version}");
            let base = format!("linux-base-{version}");
            download(&conf, &dl, &[&bin, &base])?;
            extract(&find_deb(&dl, &bin)?, &kdir)?;
            extract(&find_deb(&dl, &base)?, &kdir)?;
        }
        check_config(&kdir, &version)?;
        std::fs::write(kdir.join("suite"), suite)?;
        std::fs::write(&marker, "")?;
    }
    // The marker names the modules extracted: a list that grew is extracted again.
    if std::fs::read_to_string(kdir.join("modules/.complete")).ok() != Some(modules_marker()) {
        println!("==> extracting modules {} for {version}", modules_marker());
        let dl = cache_dir().join("debs");
        std::fs::create_dir_all(&dl)?;
        let image = find_deb(&dl, &format!("linux-image-{version}")).or_else(|_| {
            download(&conf, &dl, &[&format!("linux-image-{version}")])?;
            find_deb(&dl, &format!("linux-image-{version}"))
        })?;
        // 7.x ships the modules in a package of their own.
        let deb = if deb_has_modules(&image)? {
            image
        } else {
            let pkg = format!("linux-modules-{version}");
            if find_deb(&dl, &pkg).is_err() {
                download(&conf, &dl, &[&pkg])?;
            }
            find_deb(&dl, &pkg)?
        };
        extract_modules(&deb, &kdir.join("modules"))?;
    }
    let vmlinuz =
        find_file(&kdir, "vmlinuz").ok_or_else(|| anyhow!("no vmlinuz in {}", kdir.display()))?;
    Ok(Kernel {
        label,
        version,
        vmlinuz,
        modules: kdir.join("modules"),
    })
}

fn deb_has_modules(deb: &Path) -> anyhow::Result<bool> {
    let list = sh::output(Command::new("dpkg-deb").arg("-c").arg(deb))?;
    Ok(list.contains("/kernel/drivers/block/loop.ko"))
}

/// Extracts [`GUEST_MODULES`] and what they depend on (the `depends=` of each module's
/// `.modinfo`), decompressed, into `into`, with `order`: dependencies first.
fn extract_modules(deb: &Path, into: &Path) -> anyhow::Result<()> {
    let tmp = into.with_extension("tmp");
    let _ = std::fs::remove_dir_all(&tmp);
    let _ = std::fs::remove_dir_all(into);
    std::fs::create_dir_all(&tmp)?;
    std::fs::create_dir_all(into)?;
    let script = "dpkg-deb --fsys-tarfile \"$1\" | tar -x -C \"$2\" --wildcards '*.ko' '*.ko.xz' '*.ko.zst' 2>/dev/null; exit 0";
    sh::run(
        Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(deb)
            .arg(&tmp),
    )?;
    // Module name (with `_`) -> file.
    let mut files = std::collections::BTreeMap::new();
    let mut stack = vec![tmp.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(stem) = ["ko", "ko.xz", "ko.zst"]
                .iter()
                .find_map(|x| name.strip_suffix(&format!(".{x}")))
            {
                files.insert(stem.replace('-', "_"), p);
            }
        }
    }
    let mut order: Vec<String> = Vec::new();
    for m in GUEST_SOFT_MODULES {
        if files.contains_key(*m) {
            visit_module(m, &files, into, &mut order)?;
        }
    }
    for m in GUEST_MODULES {
        visit_module(m, &files, into, &mut order)?;
    }
    for m in GUEST_OPTIONAL_MODULES {
        if files.contains_key(*m) {
            visit_module(m, &files, into, &mut order)?;
        }
    }
    std::fs::write(into.join("order"), order.join("\n") + "\n")?;
    std::fs::write(into.join(".complete"), modules_marker())?;
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}

/// Adds module `name` to `into` after its dependencies (post-order).
fn visit_module(
    name: &str,
    files: &std::collections::BTreeMap<String, PathBuf>,
    into: &Path,
    order: &mut Vec<String>,
) -> anyhow::Result<()> {
    if order.iter().any(|o| o == name) {
        return Ok(());
    }
    let src = files
        .get(name)
        .ok_or_else(|| anyhow!("module {name} is not in the package"))?;
    let bytes = decompress(src)?;
    for dep in depends(&bytes) {
        visit_module(&dep, files, into, order)?;
    }
    std::fs::write(into.join(format!("{name}.ko")), &bytes)?;
    order.push(name.to_owned());
    Ok(())
}

fn decompress(p: &Path) -> anyhow::Result<Vec<u8>> {
    let name = p.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some("xz")
    } else if name.ends_with(".zst") {
        Some("zstd")
    } else {
        None
    };
    match tool {
        None => Ok(std::fs::read(p)?),
        Some(t) => {
            let out = Command::new(t)
                .args(["-dc"])
                .arg(p)
                .output()
                .with_context(|| format!("{t} (needed to unpack kernel modules)"))?;
            if !out.status.success() {
                bail!("{t} -dc {name} failed");
            }
            Ok(out.stdout)
        }
    }
}

/// The `depends=` list of a module's `.modinfo`.
fn depends(ko: &[u8]) -> Vec<String> {
    let key = b"depends=";
    ko.windows(key.len())
        .position(|w| w == key)
        .map(|i| {
            let rest = &ko[i + key.len()..];
            let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end])
                .split(',')
                .filter(|d| !d.is_empty())
                .map(|d| d.replace('-', "_"))
                .collect()
        })
        .unwrap_or_default()
}

/// `linux-image-amd64` -> `6.12.95+deb12-amd64`.
fn resolve(conf: &Path) -> anyhow::Result<String> {
    let out = sh::output(apt(conf, "apt-cache").args(["depends", "linux-image-amd64"]))?;
    out.lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: linux-image-"))
        .find(|v| v.starts_with(|c: char| c.is_ascii_digit()) && v.ends_with("-amd64"))
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("linux-image-amd64 names no kernel package"))
}

fn cached(root: &Path, label: Label) -> Option<Kernel> {
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(root)
        .ok()?
        .flatten()
        .filter(|e| e.path().join(".complete").exists())
        .filter(|e| {
            std::fs::read_to_string(e.path().join("suite")).is_ok_and(|s| s == label.suite())
        })
        .filter_map(|e| {
            Some((
                e.file_name().into_string().ok()?,
                find_file(&e.path(), "vmlinuz")?,
            ))
        })
        .collect();
    found.sort();
    found.pop().map(|(version, vmlinuz)| Kernel {
        label,
        modules: root.join(&version).join("modules"),
        version,
        vmlinuz,
    })
}

fn download(conf: &Path, dir: &Path, pkgs: &[&str]) -> anyhow::Result<()> {
    sh::run(
        apt(conf, "apt-get")
            .args(["download", "-qq"])
            .args(pkgs)
            .current_dir(dir),
    )
    .with_context(|| format!("downloading {}", pkgs.join(" ")))
}

fn find_deb(dir: &Path, pkg: &str) -> anyhow::Result<PathBuf> {
    let prefix = format!("{pkg}_");
    let mut debs: Vec<PathBuf> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    debs.sort();
    debs.pop()
        .ok_or_else(|| anyhow!("{pkg} was not downloaded"))
}

/// Extracts only the kernel image and its config (not hundreds of MB of modules).
fn extract(deb: &Path, into: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(into)?;
    // 6.1/6.12 keep them in /boot; 7.x in /usr/lib/modules/<version>/. A pattern that
    // matches nothing in this package makes tar complain: that is expected.
    let script = "dpkg-deb --fsys-tarfile \"$1\" | tar -x -C \"$2\" --wildcards './boot/vmlinuz-*' './boot/config-*' \
                  './usr/lib/modules/*/vmlinuz' './usr/lib/modules/*/config' 2>/dev/null; exit 0";
    sh::run(
        Command::new("sh")
            .args(["-c", script, "sh"])
            .arg(deb)
            .arg(into),
    )
}

fn find_file(dir: &Path, prefix: &str) -> Option<PathBuf> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).ok()?.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.file_name().to_string_lossy().split('-').next() == Some(prefix) {
                return Some(p);
            }
        }
    }
    None
}

fn check_config(kdir: &Path, version: &str) -> anyhow::Result<()> {
    let cfg = find_file(kdir, "config")
        .ok_or_else(|| anyhow!("kernel {version}: no config found in its packages"))?;
    let text = std::fs::read_to_string(&cfg)?;
    for opt in [
        "CONFIG_BPF_LSM",
        "CONFIG_DEBUG_INFO_BTF",
        "CONFIG_BPF_SYSCALL",
        "CONFIG_SECURITYFS",
        "CONFIG_CGROUP_BPF",
    ] {
        if !text.lines().any(|l| l == format!("{opt}=y")) {
            bail!("kernel {version}: {opt} is not =y; it cannot run the enforcement tests");
        }
    }
    Ok(())
}
