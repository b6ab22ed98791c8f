//! Typed handles on the programs' maps: the only code that spells a map name. Each map is
//! declared once, in the table below, with the types the loader reads and writes it with
//! (cilium/ebpf's `bpf2go` objects, by hand). The same table gives [`SHAPES`], which
//! `tests/bpf_object.rs` checks against the embedded object without root: a handle cannot
//! disagree with the map the programs declare.
//!
//! A handle derefs to aya's typed map; its errors name the map ([`Handle::err`]).

use std::marker::PhantomData;
use std::net::IpAddr;
use std::ops::{Deref, DerefMut};

use aya::Ebpf;
use aya::maps::lpm_trie::Key;
use aya::maps::{
    Array, HashMap, InodeStorage, LpmTrie, Map, MapData, MapError, MapType, PerCpuArray, RingBuf,
};
use sandbox_common::{
    AggSlot, ByteClasses, DfaAccept, DirCacheCtl, InodeKey, LiteralKey, LpmKey, NetKeyV4, NetKeyV6,
    NetRules, PolicyInfo, SbKey, SbRootKey, ScanStart, ScopeCtl, map_names as m,
};

use super::loader::LoadError;

/// A map as the loader uses it: BPF map type, key and value sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub name: &'static str,
    pub map_type: u32,
    pub key: usize,
    pub value: usize,
}

/// A typed map and its name, for errors.
pub struct Handle<T> {
    map: T,
    name: &'static str,
}

impl<T> Handle<T> {
    /// Turns an error of this map into a [`LoadError`] that names it.
    pub fn err(&self) -> impl Fn(MapError) -> LoadError + use<T> {
        map_err(self.name)
    }
}

impl<T> Deref for Handle<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.map
    }
}

impl<T> DerefMut for Handle<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.map
    }
}

/// A map written whole from userspace in one go (see `bulk`): the DFA arrays through a
/// memory mapping, the hash sets with batch updates.
pub struct Bulk<'a, K, V> {
    pub(super) data: &'a mut MapData,
    pub(super) name: &'static str,
    _types: PhantomData<(K, V)>,
}

pub fn map_err(map: &'static str) -> impl Fn(MapError) -> LoadError {
    move |e| LoadError::Map {
        map,
        detail: e.to_string(),
    }
}

/// The maps of one loaded object.
pub struct Maps<'a>(pub(super) &'a mut Ebpf);

impl Maps<'_> {
    fn map(&mut self, name: &'static str) -> Result<&mut Map, LoadError> {
        self.0.map_mut(name).ok_or(LoadError::Map {
            map: name,
            detail: "missing from the object".into(),
        })
    }

    fn typed<'m, T>(&'m mut self, name: &'static str) -> Result<Handle<T>, LoadError>
    where
        T: TryFrom<&'m mut Map, Error = MapError>,
    {
        let map = T::try_from(self.map(name)?).map_err(map_err(name))?;
        Ok(Handle { map, name })
    }

    fn bulk<K, V>(&mut self, name: &'static str) -> Result<Bulk<'_, K, V>, LoadError> {
        match self.map(name)? {
            Map::Array(data) | Map::HashMap(data) => Ok(Bulk {
                data,
                name,
                _types: PhantomData,
            }),
            _ => Err(LoadError::Map {
                map: name,
                detail: "not an array or hash map".into(),
            }),
        }
    }

    /// Makes the file open at `fd` the sandbox's own (`own.rs` in the programs): a terminal
    /// (sandbox's pty for the command, one a bound process holds) or a shared-memory file a
    /// bound process holds, which the confined processes may then open by path too; every
    /// one not made in the sandbox is refused to them. The mark goes with the inode;
    /// `value` is how much is theirs (`sandbox_common::own_mark`).
    pub fn own_file(
        &mut self,
        fd: &impl std::os::fd::AsRawFd,
        value: u32,
    ) -> Result<(), LoadError> {
        let mut t = self.own_inodes()?;
        t.insert(fd, value, 0).map_err(t.err())
    }

    /// The event ring buffer, taken out of the object (it can be taken once).
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, LoadError> {
        let map = self.0.take_map(m::EVENTS).ok_or(LoadError::Map {
            map: m::EVENTS,
            detail: "already taken".into(),
        })?;
        RingBuf::try_from(map).map_err(map_err(m::EVENTS))
    }

    /// Writes `rules` for `addr`/`prefix` (the address's own length: 32 or 128 for one
    /// address) of policy `pid` into the trie of its family.
    pub fn net_insert(
        &mut self,
        pid: u32,
        addr: IpAddr,
        prefix: u8,
        rules: NetRules,
    ) -> Result<(), LoadError> {
        // The policy id is the key's first 32 bits, matched whole.
        let bits = 32 + u32::from(prefix);
        let policy_id_be = pid.to_be_bytes();
        match addr {
            IpAddr::V4(a) => {
                let mut t = self.net_v4()?;
                let key = Key::new(
                    bits,
                    NetKeyV4 {
                        policy_id_be,
                        addr: a.octets(),
                    },
                );
                t.insert(&key, rules, 0).map_err(t.err())
            }
            IpAddr::V6(a) => {
                let mut t = self.net_v6()?;
                let key = Key::new(
                    bits,
                    NetKeyV6 {
                        policy_id_be,
                        addr: a.octets(),
                    },
                );
                t.insert(&key, rules, 0).map_err(t.err())
            }
        }
    }

    /// Removes the entry for `addr`/`prefix` of policy `pid`.
    pub fn net_remove(&mut self, pid: u32, addr: IpAddr, prefix: u8) -> Result<(), LoadError> {
        let bits = 32 + u32::from(prefix);
        let policy_id_be = pid.to_be_bytes();
        match addr {
            IpAddr::V4(a) => {
                let mut t = self.net_v4()?;
                let key = Key::new(
                    bits,
                    NetKeyV4 {
                        policy_id_be,
                        addr: a.octets(),
                    },
                );
                t.remove(&key).map_err(t.err())
            }
            IpAddr::V6(a) => {
                let mut t = self.net_v6()?;
                let key = Key::new(
                    bits,
                    NetKeyV6 {
                        policy_id_be,
                        addr: a.octets(),
                    },
                );
                t.remove(&key).map_err(t.err())
            }
        }
    }
}

/// The maps of a run whose sandbox died, found by name through its pinned link (`pins`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Orphaned {
    Events,
    Agg,
    Drops,
}

impl Orphaned {
    pub fn of(name: Option<&str>) -> Option<Self> {
        match name? {
            m::EVENTS => Some(Self::Events),
            m::AGG => Some(Self::Agg),
            m::DROPS => Some(Self::Drops),
            _ => None,
        }
    }
}

/// Maps sized for the compiled policy when the object is loaded: (name, entries).
pub fn sizes(
    dfa_trans: usize,
    dfa_accept: usize,
    literals: usize,
    identities: usize,
    net: (usize, usize),
) -> [(&'static str, u32); 6] {
    let size = |n: usize| u32::try_from(n.max(1)).unwrap_or(u32::MAX);
    [
        (m::DFA_TRANS, size(dfa_trans)),
        (m::DFA_ACCEPT, size(dfa_accept)),
        (m::LITERALS, size(literals)),
        (m::INODE_RULES, size(identities)),
        (m::NET_V4, size(net.0)),
        (m::NET_V6, size(net.1)),
    ]
}

/// The table: `handle -> NAME: kind [key => value]`. Kinds: `array`, `percpu` (per-CPU
/// array), `hash`, `lpm` (the key is the data after the prefix length), `mmap` (an array
/// written whole through a mapping), `batch` (a hash map written with batch updates),
/// `ring` (no key or value; see [`Maps::take_events`]).
macro_rules! maps {
    ($( $(#[$doc:meta])* $f:ident -> $name:ident: $kind:ident [$key:ty => $value:ty]; )*) => {
        impl Maps<'_> {
            $( maps!(@handle $(#[$doc])* $f, $name, $kind, $key, $value); )*
        }
        /// Every map the loader uses, with the shape its handle gives it.
        pub const SHAPES: &[Shape] = &[$(
            Shape {
                name: m::$name,
                map_type: maps!(@type $kind) as u32,
                key: maps!(@key $kind, $key),
                value: size_of::<$value>(),
            },
        )*];
    };
    (@handle $(#[$doc:meta])* $f:ident, $name:ident, array, $k:ty, $v:ty) => {
        $(#[$doc])*
        pub fn $f(&mut self) -> Result<Handle<Array<&mut MapData, $v>>, LoadError> {
            self.typed(m::$name)
        }
    };
    (@handle $(#[$doc:meta])* $f:ident, $name:ident, percpu, $k:ty, $v:ty) => {
        $(#[$doc])*
        pub fn $f(&mut self) -> Result<Handle<PerCpuArray<&mut MapData, $v>>, LoadError> {
            self.typed(m::$name)
        }
    };
    (@handle $(#[$doc:meta])* $f:ident, $name:ident, hash, $k:ty, $v:ty) => {
        $(#[$doc])*
        pub fn $f(&mut self) -> Result<Handle<HashMap<&mut MapData, $k, $v>>, LoadError> {
            self.typed(m::$name)
        }
    };
    (@handle $(#[$doc:meta])* $f:ident, $name:ident, lpm, $k:ty, $v:ty) => {
        $(#[$doc])*
        pub fn $f(&mut self) -> Result<Handle<LpmTrie<&mut MapData, $k, $v>>, LoadError> {
            self.typed(m::$name)
        }
    };
    (@handle $(#[$doc:meta])* $f:ident, $name:ident, mmap, $k:ty, $v:ty) => {
        $(#[$doc])*
        pub fn $f(&mut self) -> Result<Bulk<'_, $k, $v>, LoadError> {
            self.bulk(m::$name)
        }
    };
    (@handle $(#[$doc:meta])* $f:ident, $name:ident, batch, $k:ty, $v:ty) => {
        $(#[$doc])*
        pub fn $f(&mut self) -> Result<Bulk<'_, $k, $v>, LoadError> {
            self.bulk(m::$name)
        }
    };
    (@handle $(#[$doc:meta])* $f:ident, $name:ident, inode, $k:ty, $v:ty) => {
        $(#[$doc])*
        pub fn $f(&mut self) -> Result<Handle<InodeStorage<&mut MapData, $v>>, LoadError> {
            self.typed(m::$name)
        }
    };
    (@handle $(#[$doc:meta])* $f:ident, $name:ident, ring, $k:ty, $v:ty) => {};
    (@type array) => { MapType::Array };
    (@type mmap) => { MapType::Array };
    (@type percpu) => { MapType::PerCpuArray };
    (@type hash) => { MapType::Hash };
    (@type batch) => { MapType::Hash };
    (@type lpm) => { MapType::LpmTrie };
    (@type ring) => { MapType::RingBuf };
    (@type inode) => { MapType::InodeStorage };
    (@key lpm, $k:ty) => { size_of::<LpmKey<$k>>() };
    (@key $kind:ident, $k:ty) => { size_of::<$k>() };
}

maps! {
    /// The cgroup the set confines (id 0: none).
    scope -> SCOPE: array [u32 => ScopeCtl];
    /// Policy id -> its header (`live` last).
    policies -> POLICIES: array [u32 => PolicyInfo];
    /// (policy id, DFA) -> byte classes.
    dfa_classes -> DFA_CLASSES: array [u32 => ByteClasses];
    /// Both DFAs' transitions, back to back.
    dfa_trans -> DFA_TRANS: mmap [u32 => u32];
    /// Both DFAs' per-state match classes.
    dfa_accept -> DFA_ACCEPT: mmap [u32 => DfaAccept];
    /// (policy, superblock) -> scan state of its mount point.
    sb_start -> SB_START: hash [SbKey => ScanStart];
    /// (policy, superblock, mounted directory) -> scan state of its mount point.
    sb_roots -> SB_ROOTS: hash [SbRootKey => ScanStart];
    /// Literal path hashes -> kind mask.
    literals -> LITERALS: batch [LiteralKey => u32];
    /// Protected files by identity -> kind mask.
    inode_rules -> INODE_RULES: batch [InodeKey => u32];
    /// One bit per key of `LITERALS` and `INODE_RULES` (`sandbox_common::filter`).
    lookup_filter -> LOOKUP_FILTER: mmap [u32 => u64];
    /// IPv4 rules (policy id, then the address).
    net_v4 -> NET_V4: lpm [NetKeyV4 => NetRules];
    /// IPv6 rules (policy id, then the address).
    net_v6 -> NET_V6: lpm [NetKeyV6 => NetRules];
    /// Processes in-scope tasks may not signal or trace (sandbox itself).
    protected -> PROTECTED: hash [u32 => u32];
    /// Namespaces (inode numbers) whose files the command may open.
    namespaces -> NAMESPACES: hash [u32 => u32];
    /// Terminals the command may open (keyed by a descriptor of the file).
    own_inodes -> OWN_INODES: inode [i32 => u32];
    /// Records for userspace.
    _events -> EVENTS: ring [() => ()];
    /// Records dropped because the ring was full, per CPU.
    drops -> DROPS: percpu [u32 => u64];
    /// Identical denials being counted, per CPU.
    agg -> AGG: percpu [u32 => AggSlot];
    /// The directory cache's switch and validity stamp.
    dir_cache_ctl -> DIR_CACHE_CTL: array [u32 => DirCacheCtl];
    /// What `inode_rename` read of the rename count, for the loader's own check.
    dir_cache_probe -> DIR_CACHE_PROBE: array [u32 => u64];
    /// Directory moves begun and in progress (`moves.rs`), for the loader's own check.
    dir_moves -> DIR_MOVES: array [u32 => u64];
}
