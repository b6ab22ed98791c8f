//! The embedded BPF object against the Rust types, without root and without a kernel: every
//! map the programs declare has the type, key size and value size of the `sandbox-common`
//! types the loader reads and writes it with (tetragon checks its structs the same way).
//! A map added on one side only, or a struct changed on one side only, fails here instead
//! of at load time in the VM (or, worse, silently reading the wrong bytes).

use std::collections::BTreeMap;

use sandbox_user::kernel::maps::{SHAPES, Shape};

/// Every map the loader has a typed handle for (`kernel::maps`), by name. A map in the
/// object that is not in this table fails the test.
fn expected() -> BTreeMap<&'static str, Shape> {
    SHAPES.iter().map(|s| (s.name, *s)).collect()
}

/// Maps only the programs use (userspace never opens them, so no shared type exists).
const KERNEL_ONLY: &[&str] = &[
    // Per-CPU working memory of the hooks (`sandbox-ebpf/src/maps.rs`).
    "SCRATCH",
    // The new name of a rename in progress, from path_rename to inode_rename.
    "RENAME_DEST",
    // Directories' scan states (`sandbox-ebpf/src/dircache.rs`).
    "DIR_CACHE",
    // What names matched in kept directory states (`sandbox-ebpf/src/namecache.rs`).
    "NAME_CACHE",
    // What opened files' paths matched (`sandbox-ebpf/src/filecache.rs`).
    "FILE_CACHE",
    // Each task's frames of calls that move dentries (`sandbox-ebpf/src/moves.rs`).
    "MOVE_FRAMES",
    // The programs' diagnostics (aya-log; read by `aya_log::EbpfLogger` when on).
    "AYA_LOGS",
];

#[test]
fn every_map_matches_the_shared_types() {
    let obj = aya_obj::Object::parse(sandbox_user::BPF_OBJECT).expect("embedded BPF object");
    let mut expected = expected();
    let mut wrong = Vec::new();
    for (name, map) in &obj.maps {
        // Globals (`.rodata`, `.bss`, `.data`) are maps too; `OFFSETS` is checked by size in
        // `sandbox-common` and filled by name through `override_global`.
        if name.starts_with('.') || KERNEL_ONLY.contains(&name.as_str()) {
            continue;
        }
        let Some(want) = expected.remove(name.as_str()) else {
            wrong.push(format!(
                "{name}: in the object, but without a handle in kernel::maps (nor in KERNEL_ONLY)"
            ));
            continue;
        };
        let got = Shape {
            name: want.name,
            map_type: map.map_type(),
            key: map.key_size() as usize,
            value: map.value_size() as usize,
        };
        if got != want {
            wrong.push(format!(
                "{name}: the object has {got:?}, the Rust types {want:?}"
            ));
        }
    }
    for name in expected.keys() {
        wrong.push(format!("{name}: has a handle, but is not in the object"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn kernel_only_maps_are_in_the_object() {
    let obj = aya_obj::Object::parse(sandbox_user::BPF_OBJECT).expect("embedded BPF object");
    for name in KERNEL_ONLY {
        assert!(
            obj.maps.contains_key(*name),
            "{name} is gone: drop it from KERNEL_ONLY"
        );
    }
}

/// No LSM program (nor a global function they call, in `.text`) calls `memset`, `memcpy`,
/// `memmove`, `memcmp` or `bcmp`: in BPF these are loops over single bytes, which the
/// verifier walks a byte at a time at every visit (they were a third of what it checked
/// per start) and which cost a few ns per byte at run time. ARCHITECTURE: "No `memset` or
/// `memcpy` on a hot path".
#[test]
fn no_program_calls_a_byte_loop() {
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _, RelocationTarget};
    const BYTE_LOOPS: &[&str] = &["memset", "memcpy", "memmove", "memcmp", "bcmp"];
    let file = object::File::parse(sandbox_user::BPF_OBJECT).expect("embedded BPF object");
    let mut calls = Vec::new();
    let mut seen = 0;
    for section in file.sections() {
        let name = section.name().unwrap_or_default();
        if !(name.starts_with("lsm/") || name == ".text") {
            continue;
        }
        seen += 1;
        for (offset, rel) in section.relocations() {
            let RelocationTarget::Symbol(i) = rel.target() else {
                continue;
            };
            let target = file
                .symbol_by_index(i)
                .and_then(|s| s.name())
                .unwrap_or_default();
            if BYTE_LOOPS.contains(&target) {
                calls.push(format!("{name}+{offset:#x} calls {target}"));
            }
        }
    }
    assert!(seen > 30, "only {seen} program sections found");
    assert!(calls.is_empty(), "{}", calls.join("\n"));
}

/// The object has no CO-RE relocations: the loader loads it without the kernel's BTF
/// (`.btf(None)`, with which aya would skip them without a word) and gives the programs
/// the struct offsets it read itself.
#[test]
fn the_object_has_no_core_relocations() {
    let obj = aya_obj::Object::parse(sandbox_user::BPF_OBJECT).expect("embedded BPF object");
    assert!(
        obj.btf_ext.is_some(),
        "the object has no .BTF.ext to hold relocations"
    );
    assert!(!obj.has_btf_relocations());
}

/// The embedded object has its BTF and line info (`.BTF`, `.BTF.ext`) but no DWARF
/// (`build.rs` drops it: three quarters of the bytes the loader would parse at each start).
#[test]
fn the_object_carries_btf_but_no_dwarf() {
    use object::{Object as _, ObjectSection as _};
    let file = object::File::parse(sandbox_user::BPF_OBJECT).expect("embedded BPF object");
    let names: Vec<&str> = file.sections().filter_map(|s| s.name().ok()).collect();
    for needed in [".BTF", ".BTF.ext", ".symtab"] {
        assert!(names.contains(&needed), "{needed} is missing: {names:?}");
    }
    let dwarf: Vec<_> = names.iter().filter(|n| n.contains(".debug_")).collect();
    assert!(dwarf.is_empty(), "{dwarf:?}");
}
