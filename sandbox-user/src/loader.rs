//! Policy pipeline, last stage: load the embedded BPF object with this kernel's offsets and
//! maps sized for the compiled policy, fill the maps, attach the programs, bind cgroups.
//!
//! Order matters: maps are complete before a cgroup is bound, and nothing is bound before
//! the programs are attached, so a bound cgroup never sees half a policy.

use std::collections::HashMap as StdHashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use aya::maps::lpm_trie::Key;
use aya::maps::{Array, HashMap, LpmTrie, MapData, PerCpuArray, RingBuf};
use aya::programs::Lsm;
use aya::{Btf, Ebpf, EbpfLoader};
use sandbox_common::{
    Accept, ByteClasses, InodeKey, KernelOffsets, NetKeyV4, NetKeyV6, OFFSETS_GLOBAL, SbKey,
    map_names as m,
};

use crate::cgroup::Cgroup;
use crate::compile::CompiledPolicy;
use crate::mounts::{self, Superblock};

/// The hooks, in attach order. The last attached runs first.
pub const HOOKS: &[&str] = &["file_open", "bprm_check_security", "socket_connect"];

/// Files protected by identity at most (a larger subtree is still protected by path).
const MAX_IDENTITY_FILES: usize = 65_536;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read kernel BTF: {0}")]
    Btf(String),
    #[error("the kernel refused to load the BPF programs: {0}")]
    Load(String),
    #[error("the kernel refused to load or attach the BPF-LSM program `{hook}`: {detail}")]
    Attach { hook: String, detail: String },
    #[error("map {map}: {detail}")]
    Map { map: &'static str, detail: String },
}

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> LoadError {
    move |e| LoadError::Map {
        map,
        detail: e.to_string(),
    }
}

/// The loaded programs and their maps, with one policy (id 0) applied.
pub struct Enforcer {
    ebpf: Ebpf,
    pub policy_id: u32,
    levels: u64,
}

/// Identity entries for the compiled policy's literal paths: every existing file (and, for
/// directories, every file below them) by device and inode.
pub fn identities(policy: &CompiledPolicy, policy_id: u32) -> Vec<(InodeKey, Accept)> {
    let mut out: StdHashMap<InodeKey, Accept> = StdHashMap::new();
    for r in &policy.identity {
        let mut stack = vec![r.path.clone()];
        while let Some(p) = stack.pop() {
            if out.len() >= MAX_IDENTITY_FILES {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let key = InodeKey {
                ino: meta.ino(),
                dev: mounts::kernel_dev_of(meta.dev()),
                policy_id,
            };
            let acc = out.entry(key).or_insert(Accept::NONE);
            acc.rules[r.slot] = acc.rules[r.slot].min(r.rule);
            if meta.is_dir()
                && let Ok(rd) = std::fs::read_dir(&p)
            {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
    let mut v: Vec<_> = out.into_iter().collect();
    v.sort_by_key(|(k, _)| (k.dev, k.ino));
    v
}

impl Enforcer {
    /// Loads the programs with maps sized for `policy` and attaches them. Nothing is
    /// enforced until [`Enforcer::bind`].
    pub fn load(
        policy: &CompiledPolicy,
        offsets: &KernelOffsets,
        identity_count: usize,
    ) -> Result<Self, LoadError> {
        let btf = Btf::from_sys_fs().map_err(|e| LoadError::Btf(e.to_string()))?;
        let size = |n: usize| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global(OFFSETS_GLOBAL, offsets, true)
            .map_max_entries(m::DFA_TRANS, size(policy.dfa.trans.len()))
            .map_max_entries(m::DFA_ACCEPT, size(policy.dfa.accept.len()))
            .map_max_entries(m::INODE_RULES, size(identity_count))
            .map_max_entries(m::NET_V4, size(policy.net_v4.len()))
            .map_max_entries(m::NET_V6, size(policy.net_v6.len()))
            .load(crate::BPF_OBJECT)
            .map_err(|e| LoadError::Load(error_chain(&e)))?;
        for hook in HOOKS {
            let prog: &mut Lsm = ebpf
                .program_mut(hook)
                .ok_or_else(|| LoadError::Attach {
                    hook: (*hook).into(),
                    detail: "missing from the object".into(),
                })?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| LoadError::Attach {
                    hook: (*hook).into(),
                    detail: e.to_string(),
                })?;
            prog.load(hook, &btf).map_err(|e| LoadError::Attach {
                hook: (*hook).into(),
                detail: error_chain(&e),
            })?;
            prog.attach().map_err(|e| LoadError::Attach {
                hook: (*hook).into(),
                detail: error_chain(&e),
            })?;
        }
        Ok(Self {
            ebpf,
            policy_id: 0,
            levels: 0,
        })
    }

    /// Writes every map of `policy` as policy `self.policy_id`. Call before `bind`.
    pub fn apply(
        &mut self,
        policy: &CompiledPolicy,
        sbs: &[Superblock],
        ids: &[(InodeKey, Accept)],
    ) -> Result<(), LoadError> {
        let pid = self.policy_id;
        {
            let mut t: Array<_, u32> =
                Array::try_from(self.map(m::DFA_TRANS)?).map_err(map_err(m::DFA_TRANS))?;
            for (i, v) in policy.dfa.trans.iter().enumerate() {
                t.set(i as u32, v, 0).map_err(map_err(m::DFA_TRANS))?;
            }
        }
        {
            let mut a: Array<_, Accept> =
                Array::try_from(self.map(m::DFA_ACCEPT)?).map_err(map_err(m::DFA_ACCEPT))?;
            for (i, v) in policy.dfa.accept.iter().enumerate() {
                a.set(i as u32, v, 0).map_err(map_err(m::DFA_ACCEPT))?;
            }
        }
        {
            let mut c: Array<_, ByteClasses> =
                Array::try_from(self.map(m::DFA_CLASSES)?).map_err(map_err(m::DFA_CLASSES))?;
            c.set(
                pid,
                ByteClasses {
                    classes: policy.dfa.classes,
                },
                0,
            )
            .map_err(map_err(m::DFA_CLASSES))?;
        }
        self.update_mounts(policy, sbs)?;
        {
            let mut h: HashMap<_, InodeKey, Accept> =
                HashMap::try_from(self.map(m::INODE_RULES)?).map_err(map_err(m::INODE_RULES))?;
            for (k, v) in ids {
                h.insert(k, v, 0).map_err(map_err(m::INODE_RULES))?;
            }
        }
        {
            let mut t: LpmTrie<_, NetKeyV4, sandbox_common::NetRules> =
                LpmTrie::try_from(self.map(m::NET_V4)?).map_err(map_err(m::NET_V4))?;
            for e in &policy.net_v4 {
                let key = Key::new(
                    32 + u32::from(e.prefix_len),
                    NetKeyV4 {
                        policy_id_be: pid.to_be_bytes(),
                        addr: e.addr,
                    },
                );
                t.insert(&key, e.rules, 0).map_err(map_err(m::NET_V4))?;
            }
        }
        {
            let mut t: LpmTrie<_, NetKeyV6, sandbox_common::NetRules> =
                LpmTrie::try_from(self.map(m::NET_V6)?).map_err(map_err(m::NET_V6))?;
            for e in &policy.net_v6 {
                let key = Key::new(
                    32 + u32::from(e.prefix_len),
                    NetKeyV6 {
                        policy_id_be: pid.to_be_bytes(),
                        addr: e.addr,
                    },
                );
                t.insert(&key, e.rules, 0).map_err(map_err(m::NET_V6))?;
            }
        }
        // The header last: until `live` is set the hooks treat the policy as absent.
        let mut p: Array<_, sandbox_common::PolicyInfo> =
            Array::try_from(self.map(m::POLICIES)?).map_err(map_err(m::POLICIES))?;
        p.set(pid, policy.info(0, 0), 0)
            .map_err(map_err(m::POLICIES))?;
        Ok(())
    }

    /// (Re)writes the superblock start states from the mount table.
    pub fn update_mounts(
        &mut self,
        policy: &CompiledPolicy,
        sbs: &[Superblock],
    ) -> Result<(), LoadError> {
        let pid = self.policy_id;
        let mut h: HashMap<_, SbKey, u32> =
            HashMap::try_from(self.map(m::SB_START)?).map_err(map_err(m::SB_START))?;
        for sb in sbs {
            let state = policy
                .dfa
                .feed(policy.dfa.start, mounts::prefix(&sb.mount_point).as_bytes());
            h.insert(
                SbKey {
                    policy_id: pid,
                    dev: sb.dev,
                },
                state,
                0,
            )
            .map_err(map_err(m::SB_START))?;
        }
        Ok(())
    }

    /// Puts `cgroup` (and everything below it) under the policy.
    pub fn bind(&mut self, cgroup: &Cgroup) -> Result<(), LoadError> {
        let policy_id = self.policy_id;
        let mut h: HashMap<_, u64, u32> =
            HashMap::try_from(self.map(m::CGROUP_POLICY)?).map_err(map_err(m::CGROUP_POLICY))?;
        h.insert(cgroup.id, policy_id, 0)
            .map_err(map_err(m::CGROUP_POLICY))?;
        self.levels |= 1 << cgroup.level;
        let levels = self.levels;
        let mut a: Array<_, u64> =
            Array::try_from(self.map(m::SCOPE_LEVELS)?).map_err(map_err(m::SCOPE_LEVELS))?;
        a.set(0, levels, 0).map_err(map_err(m::SCOPE_LEVELS))
    }

    /// The event ring buffer (can be taken once).
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, LoadError> {
        let map = self.ebpf.take_map(m::EVENTS).ok_or(LoadError::Map {
            map: m::EVENTS,
            detail: "already taken".into(),
        })?;
        RingBuf::try_from(map).map_err(map_err(m::EVENTS))
    }

    /// Records dropped because the ring buffer was full, summed over CPUs.
    pub fn drops(&mut self) -> Result<u64, LoadError> {
        let a: PerCpuArray<_, u64> =
            PerCpuArray::try_from(self.map(m::DROPS)?).map_err(map_err(m::DROPS))?;
        Ok(a.get(&0, 0).map_err(map_err(m::DROPS))?.iter().sum())
    }

    fn map(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, LoadError> {
        self.ebpf.map_mut(name).ok_or(LoadError::Map {
            map: name,
            detail: "missing from the object".into(),
        })
    }
}

/// An error and its sources on one line (aya puts the verifier log in a source).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Loads the offsets of the running kernel.
pub fn kernel_offsets() -> Result<KernelOffsets, LoadError> {
    crate::btf::offsets_from_file(Path::new("/sys/kernel/btf/vmlinux"))
        .map_err(|e| LoadError::Btf(e.to_string()))
}
