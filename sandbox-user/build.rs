//! Builds the BPF programs (`sandbox-ebpf`) for `bpfel-unknown-none` with the pinned eBPF
//! toolchain and puts the object in OUT_DIR, where `loader.rs` embeds it. Kernel and user
//! code therefore always come from the same commit.

use std::path::Path;

fn main() -> anyhow::Result<()> {
    println!("cargo:rerun-if-env-changed=SANDBOX_EBPF_TOOLCHAIN");
    // `cargo xtask clippy` lints this crate with an empty object in place of the programs:
    // clippy never runs what it checks, the BPF crate is linted on its own target, and the
    // build in clippy's profile cost about a minute of every CI run. Any other build (the
    // variable unset: cargo runs this script again) embeds the real object.
    println!("cargo:rerun-if-env-changed=SANDBOX_EBPF_PLACEHOLDER");
    if std::env::var_os("SANDBOX_EBPF_PLACEHOLDER").is_some() {
        let out = std::env::var("OUT_DIR")?;
        std::fs::write(Path::new(&out).join("sandbox"), [])?;
        return Ok(());
    }
    let toolchain = std::env::var("SANDBOX_EBPF_TOOLCHAIN").map_err(|_| {
        anyhow::anyhow!("SANDBOX_EBPF_TOOLCHAIN is not set (see .cargo/config.toml)")
    })?;
    let manifest = std::env::var("CARGO_MANIFEST_DIR")?;
    let root = Path::new(&manifest).join("../sandbox-ebpf");
    let root = root.canonicalize()?;
    let root = root
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("non-UTF-8 path {}", root.display()))?;
    // aya-build watches the BPF crate's own directory; the programs also compile
    // `sandbox-common` (the decisions, the record layout), whose changes alone must rebuild
    // them too, or the object embedded would be an older one's.
    let common = Path::new(&manifest).join("../sandbox-common");
    println!("cargo:rerun-if-changed={}", common.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        common.join("Cargo.toml").display()
    );
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
    )?;
    let object = Path::new(&std::env::var("OUT_DIR")?).join("sandbox");
    let data = std::fs::read(&object)?;
    match without_dwarf(&data) {
        Ok(out) => std::fs::write(&object, out)?,
        // Only bytes the loader reads for nothing: the object as built still loads (and
        // `tests/bpf_object.rs` says the DWARF is there).
        Err(e) => println!("cargo:warning=the BPF object keeps its DWARF: {e}"),
    }
    Ok(())
}

/// The object without its DWARF (`.debug_*` and their relocations): three quarters of its
/// bytes, which the loader parses at every start and nothing reads (the verifier's line
/// info and the BTF the programs carry are in `.BTF` and `.BTF.ext`, made from it by
/// bpf-linker). Every other section is written back with the same bytes and as many
/// relocations (checked: the writer drops a relocation whose symbol it dropped).
fn without_dwarf(data: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut elf = object::build::elf::Builder::read(data)?;
    let dwarf: Vec<_> = elf
        .sections
        .iter()
        .filter(|s| s.name.as_slice().starts_with(b".debug_"))
        .map(object::build::elf::Section::id)
        .collect();
    if dwarf.is_empty() {
        anyhow::bail!("no DWARF sections");
    }
    for s in &mut elf.sections {
        // The DWARF, and the relocations of its sections.
        if dwarf.contains(&s.id()) || s.sh_info_section.is_some_and(|id| dwarf.contains(&id)) {
            s.delete = true;
        }
    }
    // bpf-linker keeps the section names in `.strtab` with the symbols' names; the writer
    // wants a table of their own.
    if !elf
        .sections
        .iter()
        .any(|s| matches!(s.data, object::build::elf::SectionData::SectionString) && !s.delete)
    {
        let names = elf.sections.add();
        names.name = object::build::ByteString::from(&b".shstrtab"[..]);
        names.sh_type = object::elf::SHT_STRTAB;
        names.sh_addralign = 1;
        names.data = object::build::elf::SectionData::SectionString;
    }
    let mut out = Vec::with_capacity(data.len());
    elf.write(&mut out)?;
    let kept = |d| -> anyhow::Result<Sections> {
        Ok(sections(d)?
            .into_iter()
            .filter(|(name, _)| !name.starts_with(".debug_"))
            .collect())
    };
    if kept(data)? != kept(&out)? {
        anyhow::bail!("a section other than the DWARF changed");
    }
    Ok(out)
}

/// Each section's name, with its bytes and its relocations (offset, symbol name), in
/// order; not the tables that name or number things (symbols, strings, relocations,
/// compared through the sections they relocate), which the writer renumbers.
type Sections = Vec<(String, (Vec<u8>, Vec<(u64, String)>))>;

fn sections(data: &[u8]) -> anyhow::Result<Sections> {
    use object::read::{Object as _, ObjectSection as _, ObjectSymbol as _, RelocationTarget};
    let file = object::read::elf::ElfFile64::<object::Endianness>::parse(data)?;
    let mut out = Vec::new();
    for s in file.sections() {
        let name = s.name()?.to_owned();
        if name.starts_with(".rel") || [".symtab", ".strtab", ".shstrtab"].contains(&&*name) {
            continue;
        }
        let rels = s
            .relocations()
            .map(|(at, r)| {
                let target = match r.target() {
                    RelocationTarget::Symbol(i) => file
                        .symbol_by_index(i)
                        .and_then(|sym| sym.name().map(str::to_owned))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                (at, target)
            })
            .collect();
        out.push((name, (s.data()?.to_vec(), rels)));
    }
    Ok(out)
}
