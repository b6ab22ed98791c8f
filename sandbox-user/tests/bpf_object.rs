//! The embedded BPF object against the Rust types, without root and without a kernel: every
//! map the programs declare has the type, key size and value size of the `sandbox-common`
//! types the loader reads and writes it with (tetragon checks its structs the same way).
//! A map added on one side only, or a struct changed on one side only, fails here instead
//! of at load time in the VM (or, worse, silently reading the wrong bytes).

use std::collections::BTreeMap;

use aya_obj::generated::bpf_map_type::{
    self, BPF_MAP_TYPE_ARRAY, BPF_MAP_TYPE_HASH, BPF_MAP_TYPE_LPM_TRIE, BPF_MAP_TYPE_PERCPU_ARRAY,
    BPF_MAP_TYPE_RINGBUF,
};
use sandbox_common::{
    ByteClasses, DfaAccept, InodeKey, LiteralKey, LpmKey, NetKeyV4, NetKeyV6, NetRules, PolicyInfo,
    SbKey, SbRootKey, ScanStart, map_names,
};

/// What the userspace side expects of a map: its type, key size and value size.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    map_type: u32,
    key: usize,
    value: usize,
}

fn shape<K, V>(map_type: bpf_map_type) -> Shape {
    Shape {
        map_type: map_type as u32,
        key: size_of::<K>(),
        value: size_of::<V>(),
    }
}

/// Every map `sandbox_common::map_names` names, with the types the loader uses for it.
/// Written once, here; a map in the object that is not in this table fails the test.
fn expected() -> BTreeMap<&'static str, Shape> {
    BTreeMap::from([
        (
            map_names::SCOPE_LEVELS,
            shape::<u32, u64>(BPF_MAP_TYPE_ARRAY),
        ),
        (
            map_names::CGROUP_POLICY,
            shape::<u64, u32>(BPF_MAP_TYPE_HASH),
        ),
        (
            map_names::POLICIES,
            shape::<u32, PolicyInfo>(BPF_MAP_TYPE_ARRAY),
        ),
        (
            map_names::DFA_CLASSES,
            shape::<u32, ByteClasses>(BPF_MAP_TYPE_ARRAY),
        ),
        (map_names::DFA_TRANS, shape::<u32, u32>(BPF_MAP_TYPE_ARRAY)),
        (
            map_names::DFA_ACCEPT,
            shape::<u32, DfaAccept>(BPF_MAP_TYPE_ARRAY),
        ),
        (
            map_names::SB_START,
            shape::<SbKey, ScanStart>(BPF_MAP_TYPE_HASH),
        ),
        (
            map_names::SB_ROOTS,
            shape::<SbRootKey, ScanStart>(BPF_MAP_TYPE_HASH),
        ),
        (
            map_names::LITERALS,
            shape::<LiteralKey, u32>(BPF_MAP_TYPE_HASH),
        ),
        (
            map_names::INODE_RULES,
            shape::<InodeKey, u32>(BPF_MAP_TYPE_HASH),
        ),
        (
            map_names::NET_V4,
            shape::<LpmKey<NetKeyV4>, NetRules>(BPF_MAP_TYPE_LPM_TRIE),
        ),
        (
            map_names::NET_V6,
            shape::<LpmKey<NetKeyV6>, NetRules>(BPF_MAP_TYPE_LPM_TRIE),
        ),
        (map_names::PROTECTED, shape::<u32, u32>(BPF_MAP_TYPE_HASH)),
        // A ring buffer has no key or value: records are sized one by one.
        (map_names::EVENTS, shape::<(), ()>(BPF_MAP_TYPE_RINGBUF)),
        (
            map_names::DROPS,
            shape::<u32, u64>(BPF_MAP_TYPE_PERCPU_ARRAY),
        ),
        (
            map_names::AGG,
            shape::<u32, sandbox_common::AggSlot>(BPF_MAP_TYPE_PERCPU_ARRAY),
        ),
        (
            map_names::DIR_CACHE_CTL,
            shape::<u32, sandbox_common::DirCacheCtl>(BPF_MAP_TYPE_ARRAY),
        ),
        (
            map_names::DIR_CACHE_PROBE,
            shape::<u32, u64>(BPF_MAP_TYPE_ARRAY),
        ),
    ])
}

/// Maps only the programs use (userspace never opens them, so no shared type exists).
const KERNEL_ONLY: &[&str] = &[
    // Per-CPU working memory of the hooks (`sandbox-ebpf/src/maps.rs`).
    "SCRATCH",
    // The new name of a rename in progress, from path_rename to inode_rename.
    "RENAME_DEST",
    // Directories' scan states (`sandbox-ebpf/src/dircache.rs`).
    "DIR_CACHE",
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
                "{name}: in the object, but not in this test's table (nor in map_names?)"
            ));
            continue;
        };
        let got = Shape {
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
        wrong.push(format!("{name}: named in map_names, but not in the object"));
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
