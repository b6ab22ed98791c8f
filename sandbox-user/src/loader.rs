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
    ByteClasses, DfaAccept, InodeKey, KernelOffsets, LiteralKey, NetKeyV4, NetKeyV6,
    OFFSETS_GLOBAL, SbKey, ScanStart, map_names as m,
};

use crate::cgroup::Cgroup;
use crate::compile::CompiledPolicy;
use crate::mounts::{self, Superblock};

/// The hooks, in attach order. The last attached runs first.
/// Each with the number of parameters the programs expect it to have (checked against the
/// kernel's BTF before loading: the earlier program's verdict is read right after them).
pub const HOOKS: &[(&str, usize)] = &[
    ("file_open", 1),
    ("bprm_check_security", 1),
    ("inode_create", 3),
    ("inode_mknod", 4),
    ("inode_mkdir", 3),
    ("inode_symlink", 3),
    ("inode_unlink", 2),
    ("inode_rmdir", 2),
    ("socket_connect", 3),
];

/// Addresses `allow_hosts` names may resolve to at once, per address family.
pub const MAX_HOST_ADDRESSES: usize = 1024;

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

/// Files protected by identity: every existing file named by a literal deny, read_only or
/// exec.deny rule (and, for directories, every file below them), by device and inode.
#[derive(Debug, Default, Clone)]
pub struct Identities {
    /// `INODE_RULES` entries: kind mask per file.
    pub entries: Vec<(InodeKey, u32)>,
    /// (dev, ino) -> (kind, rule id), to name the rule in audit records.
    pub rules: StdHashMap<(u32, u64), Vec<(usize, u16)>>,
}

impl Identities {
    pub fn rule(&self, dev: u32, ino: u64, slot: usize) -> Option<u16> {
        self.rules
            .get(&(dev, ino))?
            .iter()
            .find(|(s, _)| *s == slot)
            .map(|(_, r)| *r)
    }
}

pub fn identities(policy: &CompiledPolicy, policy_id: u32) -> Identities {
    let mut masks: StdHashMap<InodeKey, u32> = StdHashMap::new();
    let mut out = Identities::default();
    for r in &policy.identity {
        let mut stack = vec![r.path.clone()];
        while let Some(p) = stack.pop() {
            if masks.len() >= MAX_IDENTITY_FILES {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let dev = mounts::kernel_dev_of(meta.dev());
            let key = InodeKey {
                ino: meta.ino(),
                dev,
                policy_id,
            };
            *masks.entry(key).or_default() |= 1 << r.slot;
            let rules = out.rules.entry((dev, meta.ino())).or_default();
            if !rules.iter().any(|(s, _)| *s == r.slot) {
                rules.push((r.slot, r.rule));
            }
            if meta.is_dir()
                && let Ok(rd) = std::fs::read_dir(&p)
            {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
    out.entries = masks.into_iter().collect();
    out.entries.sort_by_key(|(k, _)| (k.dev, k.ino));
    out
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
        let mt = &policy.matcher;
        let host_room = if policy.net.hosts.is_empty() {
            0
        } else {
            MAX_HOST_ADDRESSES
        };
        let size = |n: usize| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&btf))
            .override_global(OFFSETS_GLOBAL, offsets, true)
            .map_max_entries(
                m::DFA_TRANS,
                size(mt.anchored.trans.len() + mt.floating.trans.len()),
            )
            .map_max_entries(
                m::DFA_ACCEPT,
                size(mt.anchored.accept.len() + mt.floating.accept.len()),
            )
            .map_max_entries(m::LITERALS, size(mt.literals.len()))
            .map_max_entries(m::INODE_RULES, size(identity_count))
            .map_max_entries(m::NET_V4, size(policy.net.v4.len() + host_room))
            .map_max_entries(m::NET_V6, size(policy.net.v6.len() + host_room))
            .load(crate::BPF_OBJECT)
            .map_err(|e| LoadError::Load(error_chain(&e)))?;
        for (hook, _) in HOOKS {
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
        ids: &Identities,
    ) -> Result<(), LoadError> {
        let pid = self.policy_id;
        let mt = &policy.matcher;
        let dfas = [&mt.anchored, &mt.floating];
        let mut bases = [(0u32, 0u32); 2];
        {
            let mut t: Array<_, u32> =
                Array::try_from(self.map(m::DFA_TRANS)?).map_err(map_err(m::DFA_TRANS))?;
            let mut at = 0u32;
            for (k, d) in dfas.iter().enumerate() {
                bases[k].0 = at;
                for v in &d.trans {
                    t.set(at, v, 0).map_err(map_err(m::DFA_TRANS))?;
                    at += 1;
                }
            }
        }
        {
            let mut a: Array<_, DfaAccept> =
                Array::try_from(self.map(m::DFA_ACCEPT)?).map_err(map_err(m::DFA_ACCEPT))?;
            let mut at = 0u32;
            for (k, d) in dfas.iter().enumerate() {
                bases[k].1 = at;
                for v in &d.accept {
                    a.set(at, v, 0).map_err(map_err(m::DFA_ACCEPT))?;
                    at += 1;
                }
            }
        }
        {
            let mut c: Array<_, ByteClasses> =
                Array::try_from(self.map(m::DFA_CLASSES)?).map_err(map_err(m::DFA_CLASSES))?;
            for (k, d) in dfas.iter().enumerate() {
                c.set(2 * pid + k as u32, ByteClasses { classes: d.classes }, 0)
                    .map_err(map_err(m::DFA_CLASSES))?;
            }
        }
        {
            let mut h: HashMap<_, LiteralKey, u32> =
                HashMap::try_from(self.map(m::LITERALS)?).map_err(map_err(m::LITERALS))?;
            for (hash, mask) in &mt.literals {
                h.insert(
                    LiteralKey {
                        hash: *hash,
                        policy_id: pid,
                        _pad: 0,
                    },
                    mask,
                    0,
                )
                .map_err(map_err(m::LITERALS))?;
            }
        }
        self.update_mounts(policy, sbs)?;
        {
            let mut h: HashMap<_, InodeKey, u32> =
                HashMap::try_from(self.map(m::INODE_RULES)?).map_err(map_err(m::INODE_RULES))?;
            for (k, v) in &ids.entries {
                h.insert(k, v, 0).map_err(map_err(m::INODE_RULES))?;
            }
        }
        {
            let mut t: LpmTrie<_, NetKeyV4, sandbox_common::NetRules> =
                LpmTrie::try_from(self.map(m::NET_V4)?).map_err(map_err(m::NET_V4))?;
            for e in &policy.net.v4 {
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
            for e in &policy.net.v6 {
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
        p.set(pid, policy.info(bases), 0)
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
        let mut h: HashMap<_, SbKey, ScanStart> =
            HashMap::try_from(self.map(m::SB_START)?).map_err(map_err(m::SB_START))?;
        let mt = &policy.matcher;
        for sb in sbs {
            let s = mt.feed(mt.start(), mounts::prefix(&sb.mount_point).as_bytes());
            let v = ScanStart {
                anchored: s.anchored,
                floating: s.floating,
                hash: s.hash,
                mask: s.mask,
                _pad: 0,
            };
            h.insert(
                SbKey {
                    policy_id: pid,
                    dev: sb.dev,
                },
                v,
                0,
            )
            .map_err(map_err(m::SB_START))?;
        }
        Ok(())
    }

    /// Makes the LPM entries for resolved `allow_hosts` addresses match `want` (address ->
    /// allow rules). `have` is what was installed before; it is updated. An address that goes
    /// away gets back the policy's own entry for that exact prefix, if it has one.
    pub fn set_hosts(
        &mut self,
        policy: &CompiledPolicy,
        want: &std::collections::BTreeMap<std::net::IpAddr, Vec<sandbox_common::PortRule>>,
        have: &mut std::collections::BTreeMap<std::net::IpAddr, Vec<sandbox_common::PortRule>>,
    ) -> Result<(), LoadError> {
        use std::net::IpAddr;
        let pid = self.policy_id;
        for (addr, rules) in want {
            if have.get(addr) == Some(rules) {
                continue;
            }
            let Some(first) = rules.first() else { continue };
            let Some((_, mut e)) = crate::compile::net::host_entry(
                &policy.net,
                *addr,
                (first.port_lo, first.port_hi),
                first.rule,
            ) else {
                continue;
            };
            // Further host rules for the same address go in front as well.
            for extra in rules.iter().skip(1) {
                if (e.rules.count as usize) < sandbox_common::NET_RULES_PER_PREFIX {
                    e.rules.rules.copy_within(0..e.rules.count as usize, 1);
                    e.rules.rules[0] = *extra;
                    e.rules.count += 1;
                }
            }
            self.put_net(pid, *addr, e.rules)?;
            have.insert(*addr, rules.clone());
        }
        let gone: Vec<IpAddr> = have
            .keys()
            .filter(|a| !want.contains_key(a))
            .copied()
            .collect();
        for addr in gone {
            have.remove(&addr);
            let own = match addr {
                IpAddr::V4(a) => policy
                    .net
                    .v4
                    .iter()
                    .find(|e| e.prefix_len == 32 && e.addr == a.octets())
                    .map(|e| e.rules),
                IpAddr::V6(a) => policy
                    .net
                    .v6
                    .iter()
                    .find(|e| e.prefix_len == 128 && e.addr == a.octets())
                    .map(|e| e.rules),
            };
            match own {
                Some(r) => self.put_net(pid, addr, r)?,
                None => self.remove_net(pid, addr)?,
            }
        }
        Ok(())
    }

    fn put_net(
        &mut self,
        pid: u32,
        addr: std::net::IpAddr,
        rules: sandbox_common::NetRules,
    ) -> Result<(), LoadError> {
        match addr {
            std::net::IpAddr::V4(a) => {
                let mut t: LpmTrie<_, NetKeyV4, sandbox_common::NetRules> =
                    LpmTrie::try_from(self.map(m::NET_V4)?).map_err(map_err(m::NET_V4))?;
                t.insert(
                    &Key::new(
                        64,
                        NetKeyV4 {
                            policy_id_be: pid.to_be_bytes(),
                            addr: a.octets(),
                        },
                    ),
                    rules,
                    0,
                )
                .map_err(map_err(m::NET_V4))
            }
            std::net::IpAddr::V6(a) => {
                let mut t: LpmTrie<_, NetKeyV6, sandbox_common::NetRules> =
                    LpmTrie::try_from(self.map(m::NET_V6)?).map_err(map_err(m::NET_V6))?;
                t.insert(
                    &Key::new(
                        160,
                        NetKeyV6 {
                            policy_id_be: pid.to_be_bytes(),
                            addr: a.octets(),
                        },
                    ),
                    rules,
                    0,
                )
                .map_err(map_err(m::NET_V6))
            }
        }
    }

    fn remove_net(&mut self, pid: u32, addr: std::net::IpAddr) -> Result<(), LoadError> {
        match addr {
            std::net::IpAddr::V4(a) => {
                let mut t: LpmTrie<_, NetKeyV4, sandbox_common::NetRules> =
                    LpmTrie::try_from(self.map(m::NET_V4)?).map_err(map_err(m::NET_V4))?;
                t.remove(&Key::new(
                    64,
                    NetKeyV4 {
                        policy_id_be: pid.to_be_bytes(),
                        addr: a.octets(),
                    },
                ))
                .map_err(map_err(m::NET_V4))
            }
            std::net::IpAddr::V6(a) => {
                let mut t: LpmTrie<_, NetKeyV6, sandbox_common::NetRules> =
                    LpmTrie::try_from(self.map(m::NET_V6)?).map_err(map_err(m::NET_V6))?;
                t.remove(&Key::new(
                    160,
                    NetKeyV6 {
                        policy_id_be: pid.to_be_bytes(),
                        addr: a.octets(),
                    },
                ))
                .map_err(map_err(m::NET_V6))
            }
        }
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
/// Loads the offsets of the running kernel and checks that every hook has the arity the
/// programs expect.
pub fn kernel_offsets() -> Result<KernelOffsets, LoadError> {
    let btf = crate::btf::load(Path::new("/sys/kernel/btf/vmlinux"))
        .map_err(|e| LoadError::Btf(e.to_string()))?;
    for (hook, want) in HOOKS {
        let got =
            crate::btf::lsm_hook_arity(&btf, hook).map_err(|e| LoadError::Btf(e.to_string()))?;
        if got != *want {
            return Err(LoadError::Btf(format!(
                "the kernel's LSM hook {hook} takes {got} arguments; this build of sandbox expects {want}: \
                 it does not support this kernel yet"
            )));
        }
    }
    crate::btf::offsets(&btf).map_err(|e| LoadError::Btf(e.to_string()))
}
