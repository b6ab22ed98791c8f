//! Builds the BPF programs (`sandbox-ebpf`) for `bpfel-unknown-none` with the pinned eBPF
//! toolchain and puts the object in OUT_DIR, where `loader.rs` embeds it. Kernel and user
//! code therefore always come from the same commit.

use std::path::Path;

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=SANDBOX_EBPF_TOOLCHAIN");
    let toolchain = std::env::var("SANDBOX_EBPF_TOOLCHAIN").map_err(|_| {
        anyhow::anyhow!("SANDBOX_EBPF_TOOLCHAIN is not set (see .cargo/config.toml)")
    })?;
    let manifest = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = Path::new(&manifest).join("../sandbox-ebpf");
    let root = root.canonicalize()?;
    let root = root
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", root.display()))?;
    let linker = Path::new(&manifest).join("../.tools/bin/bpf-linker");
    if !linker.exists() {
        anyhow::bail!(
            "bpf-linker is missing at {}: run `cargo xtask setup` first",
            linker.display()
        );
    }
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "sandbox-ebpf",
            root_dir: root,
            ..Default::default()
        }],
        aya_build::Toolchain::Custom(&toolchain),
    )
}
