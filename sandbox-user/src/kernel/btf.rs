//! Struct offsets of the running kernel, read from its BTF.
//!
//! Rust eBPF cannot emit CO-RE relocations, and layouts differ between the kernels we support
//! (`file.f_path` is at 64 on 6.1 and 16 on 6.18, and a union member on newer kernels). So
//! the loader resolves every field the programs read here, checks its size, and hands the
//! offsets to the programs as the `OFFSETS` global.

use std::path::Path;

use sandbox_common::KernelOffsets;

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read kernel BTF from {path}: {why}")]
    Read { path: String, why: String },
    #[error("kernel BTF has no struct {0}")]
    NoStruct(String),
    #[error("kernel BTF: struct {strukt} has no member {member}")]
    NoMember { strukt: String, member: String },
    #[error("kernel BTF: {field} is {got} bytes, expected {want}")]
    Size {
        field: String,
        got: usize,
        want: usize,
    },
    #[error("kernel BTF: {0}")]
    Other(String),
}

/// Reads offsets from a BTF file (normally `/sys/kernel/btf/vmlinux`).
pub fn offsets_from_file(path: &Path) -> Result<KernelOffsets, BtfError> {
    offsets(&load(path)?)
}

pub fn offsets(btf: &Btf) -> Result<KernelOffsets, BtfError> {
    let r = Resolver { btf };
    let f = |s: &str, p: &[&str], size: Option<usize>| r.offset(s, p, size);
    Ok(KernelOffsets {
        file_f_path_dentry: f("file", &["f_path", "dentry"], Some(8))?,
        file_f_inode: f("file", &["f_inode"], Some(8))?,
        file_f_mode: f("file", &["f_mode"], Some(4))?,
        file_f_flags: f("file", &["f_flags"], Some(4))?,
        dentry_d_parent: f("dentry", &["d_parent"], Some(8))?,
        dentry_d_name_len: f("dentry", &["d_name", "len"], Some(4))?,
        dentry_d_name_name: f("dentry", &["d_name", "name"], Some(8))?,
        dentry_d_inode: f("dentry", &["d_inode"], Some(8))?,
        dentry_d_sb: f("dentry", &["d_sb"], Some(8))?,
        inode_i_ino: f("inode", &["i_ino"], Some(8))?,
        inode_i_mode: f("inode", &["i_mode"], Some(2))?,
        super_block_s_dev: f("super_block", &["s_dev"], Some(4))?,
        linux_binprm_file: f("linux_binprm", &["file"], Some(8))?,
        task_struct_real_parent: f("task_struct", &["real_parent"], Some(8))?,
        task_struct_tgid: f("task_struct", &["tgid"], Some(4))?,
        task_struct_mm: f("task_struct", &["mm"], Some(8))?,
        mm_struct_exe_file: f("mm_struct", &["exe_file"], Some(8))?,
        msghdr_msg_name: f("msghdr", &["msg_name"], Some(8))?,
        msghdr_msg_namelen: f("msghdr", &["msg_namelen"], Some(4))?,
        super_block_s_magic: f("super_block", &["s_magic"], Some(8))?,
        super_block_s_flags: f("super_block", &["s_flags"], Some(8))?,
        socket_sk: f("socket", &["sk"], Some(8))?,
        socket_type: f("socket", &["type"], Some(2))?,
        sock_family: f("sock", &["__sk_common", "skc_family"], Some(2))?,
        sock_cgroup: f("sock", &["sk_cgrp_data", "cgroup"], Some(8))?,
        sock_peer_pid: f("sock", &["sk_peer_pid"], Some(8))?,
        pid_nr: f("pid", &["numbers"], None)? + f("upid", &["nr"], Some(4))?,
        sock_rcv_saddr: f("sock", &["__sk_common", "skc_rcv_saddr"], Some(4))?,
        sock_v6_rcv_saddr: f("sock", &["__sk_common", "skc_v6_rcv_saddr"], Some(16))?,
        sock_num: f("sock", &["__sk_common", "skc_num"], Some(2))?,
        unix_sock_path_dentry: f("unix_sock", &["path", "dentry"], Some(8))?,
        unix_sock_addr: f("unix_sock", &["addr"], Some(8))?,
        unix_address_len: f("unix_address", &["len"], Some(4))?,
        unix_address_name: f("unix_address", &["name"], None)?,
        unix_sock_peer: f("unix_sock", &["peer"], Some(8))?,
        cgroup_kn: f("cgroup", &["kn"], Some(8))?,
        kernfs_node_id: f("kernfs_node", &["id"], Some(8))?,
        cgroup_parent: f("cgroup", &["self", "parent"], Some(8))?,
        task_struct_cgroups: f("task_struct", &["cgroups"], Some(8))?,
        css_set_dfl_cgrp: f("css_set", &["dfl_cgrp"], Some(8))?,
        super_block_s_root: f("super_block", &["s_root"], Some(8))?,
        dentry_d_flags: f("dentry", &["d_flags"], Some(4))?,
        dentry_d_iname: r.inline_name(),
        task_struct_real_cred: f("task_struct", &["real_cred"], Some(8))?,
        task_struct_cred: f("task_struct", &["cred"], Some(8))?,
        cred_fsuid: f("cred", &["fsuid"], Some(4))?,
        cred_thread_keyring: f("cred", &["thread_keyring"], Some(8))?,
        cred_uid: f("cred", &["uid"], Some(4))?,
        cred_euid: f("cred", &["euid"], Some(4))?,
        cred_suid: f("cred", &["suid"], Some(4))?,
        key_uid: f("key", &["uid"], Some(4))?,
        key_serial: f("key", &["serial"], Some(4))?,
        path_dentry: f("path", &["dentry"], Some(8))?,
        inode_i_rdev: f("inode", &["i_rdev"], Some(4))?,
        // The native benchmark's only (0 where a kernel has them otherwise: a load never
        // fails for them).
        task_struct_files: f("task_struct", &["files"], Some(8)).unwrap_or(0),
        files_struct_fdt: f("files_struct", &["fdt"], Some(8)).unwrap_or(0),
        files_struct_fd_array: f("files_struct", &["fd_array"], None).unwrap_or(0),
        fdtable_fd: f("fdtable", &["fd"], Some(8)).unwrap_or(0),
        inode_i_nlink: f("inode", &["i_nlink"], Some(4))?,
        inode_i_dentry: f("inode", &["i_dentry", "first"], Some(8))?,
        dentry_d_seq: f("dentry", &["d_seq", "seqcount", "sequence"], Some(4)).unwrap_or(0),
        proc_inode_pid: f("proc_inode", &["pid"], Some(8))?,
        proc_inode_vfs_inode: f("proc_inode", &["vfs_inode"], None)?,
        pid_tasks: f("pid", &["tasks"], None)?,
        task_struct_pid_links: f("task_struct", &["pid_links"], None)?,
        msghdr_msg_control: f("msghdr", &["msg_control"], Some(8))?,
        msghdr_msg_controllen: f("msghdr", &["msg_controllen"], Some(8))?,
        msghdr_msg_control_is_user: f("msghdr", &["msg_control_is_user"], Some(1))?,
        task_struct_nsproxy: f("task_struct", &["nsproxy"], Some(8))?,
        nsproxy_ipc_ns: f("nsproxy", &["ipc_ns"], Some(8))?,
        ipc_namespace_inum: f("ipc_namespace", &["ns", "inum"], Some(4))?,
        sock_protocol: f("sock", &["sk_protocol"], Some(2))?,
        valid: 1,
    })
}

struct Resolver<'a> {
    btf: &'a Btf,
}

impl Resolver<'_> {
    /// Byte offset of `path` (a chain of member names) inside `struct strukt`; anonymous
    /// struct/union members are searched through. Checks the final member's size.
    fn offset(&self, strukt: &str, path: &[&str], size: Option<usize>) -> Result<u32, BtfError> {
        let mut ty = self.btf.find_struct(strukt)?;
        let mut total_bits = 0u32;
        let mut last = None;
        for (i, name) in path.iter().enumerate() {
            let (bits, member_ty) =
                self.btf
                    .find_member(ty, name)?
                    .ok_or_else(|| BtfError::NoMember {
                        strukt: strukt.to_owned(),
                        member: path[..=i].join("."),
                    })?;
            total_bits += bits;
            if i + 1 < path.len() {
                ty = self.btf.strip(member_ty)?;
            }
            last = Some(member_ty);
        }
        if total_bits % 8 != 0 {
            return Err(BtfError::Other(format!(
                "{strukt}.{} is a bitfield",
                path.join(".")
            )));
        }
        if let (Some(want), Some(t)) = (size, last) {
            let got = self.btf.size_of(t)?;
            if got != want {
                return Err(BtfError::Size {
                    field: format!("{strukt}.{}", path.join(".")),
                    got,
                    want,
                });
            }
        }
        Ok(total_bits / 8)
    }

    /// Where a dentry keeps a short name itself: `d_iname` (up to 6.13), `d_shortname`
    /// (6.14 on); 0 when neither is there or it holds fewer than
    /// `sandbox_common::DNAME_INLINE_MIN` bytes (the programs then read every name with a
    /// probe read).
    fn inline_name(&self) -> u32 {
        let found = || -> Result<u32, BtfError> {
            let dentry = self.btf.find_struct("dentry")?;
            for name in ["d_iname", "d_shortname"] {
                if let Some((bits, ty)) = self.btf.find_member(dentry, name)? {
                    let fits = self.btf.size_of(ty)? >= sandbox_common::DNAME_INLINE_MIN;
                    return Ok(if fits && bits % 64 == 0 { bits / 8 } else { 0 });
                }
            }
            Ok(0)
        };
        found().unwrap_or(0)
    }
}

/// The kernel's BTF (the raw type and string sections), with where each type starts and
/// the ids of the names the loader looks up: structs, unions and the attach points (the
/// BPF-LSM ones, `bpf_lsm_*`, and the move programs' functions). Our own reader: a general
/// one (btf-rs) spent 0.3 s natively, 2 s of every start under emulation, indexing
/// everything; this reads what sandbox asks.
pub struct Btf {
    data: Vec<u8>,
    /// Byte offset in `data` of each type (index: the type id; 0 is `void`).
    types: Vec<u32>,
    strings: std::ops::Range<usize>,
    names: std::collections::HashMap<Box<[u8]>, Vec<u32>>,
}

/// BTF kinds (include/uapi/linux/btf.h).
mod kind {
    pub const INT: u32 = 1;
    pub const PTR: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const STRUCT: u32 = 4;
    pub const UNION: u32 = 5;
    pub const ENUM: u32 = 6;
    pub const TYPEDEF: u32 = 8;
    pub const VOLATILE: u32 = 9;
    pub const CONST: u32 = 10;
    pub const RESTRICT: u32 = 11;
    pub const FUNC: u32 = 12;
    pub const FUNC_PROTO: u32 = 13;
    pub const TYPE_TAG: u32 = 18;
    pub const ENUM64: u32 = 19;
}

/// One type's common header (its name aside): kind, member count, kind flag, size or
/// type.
#[derive(Clone, Copy)]
struct Header {
    kind: u32,
    vlen: u32,
    kind_flag: bool,
    size_or_type: u32,
    /// Where its trailing data starts in `Btf::data`.
    at: usize,
}

impl Btf {
    /// Parses BTF (as in `/sys/kernel/btf/vmlinux`: little-endian, this machine's order).
    pub fn parse(data: Vec<u8>) -> Result<Self, BtfError> {
        let bad = |what: &str| BtfError::Other(format!("malformed BTF: {what}"));
        let u32_at = |d: &[u8], at: usize| -> Result<u32, BtfError> {
            d.get(at..at + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .ok_or_else(|| bad("truncated"))
        };
        if data.get(0..2) != Some(&[0x9f, 0xeb]) {
            return Err(bad("not little-endian BTF (magic)"));
        }
        let hdr = u32_at(&data, 4)? as usize;
        let (type_off, type_len) = (u32_at(&data, 8)? as usize, u32_at(&data, 12)? as usize);
        let (str_off, str_len) = (u32_at(&data, 16)? as usize, u32_at(&data, 20)? as usize);
        let types_at = hdr + type_off;
        let types_end = types_at + type_len;
        let strings = hdr + str_off..hdr + str_off + str_len;
        if types_end > data.len() || strings.end > data.len() {
            return Err(bad("sections past the end"));
        }
        let mut btf = Self {
            types: vec![0],
            strings,
            names: std::collections::HashMap::new(),
            data: Vec::new(),
        };
        let mut at = types_at;
        while at < types_end {
            let info = u32_at(&data, at + 4)?;
            let (k, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
            let trailing = match k {
                kind::INT | 14 | 17 => 4,
                kind::ARRAY => 12,
                kind::STRUCT | kind::UNION | 15 | kind::ENUM64 => 12 * vlen,
                kind::ENUM | kind::FUNC_PROTO => 8 * vlen,
                kind::PTR | 7..=kind::FUNC | 16 | kind::TYPE_TAG => 0,
                other => return Err(bad(&format!("unknown kind {other}"))),
            };
            let id = u32::try_from(btf.types.len()).map_err(|_| bad("too many types"))?;
            btf.types
                .push(u32::try_from(at).map_err(|_| bad("too large"))?);
            if matches!(k, kind::STRUCT | kind::UNION | kind::FUNC) {
                let name = btf.name_in(&data, u32_at(&data, at)?);
                if !name.is_empty()
                    && (k != kind::FUNC || name.starts_with(b"bpf_lsm_") || move_target(name))
                {
                    btf.names.entry(name.into()).or_default().push(id);
                }
            }
            at += 12 + trailing;
        }
        if at != types_end {
            return Err(bad("types overrun their section"));
        }
        btf.data = data;
        Ok(btf)
    }

    fn name_in<'d>(&self, data: &'d [u8], off: u32) -> &'d [u8] {
        let from = self.strings.start + off as usize;
        let s = data.get(from..self.strings.end).unwrap_or_default();
        &s[..s.iter().position(|b| *b == 0).unwrap_or(s.len())]
    }

    fn u32_at(&self, at: usize) -> Result<u32, BtfError> {
        self.data
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| BtfError::Other("malformed BTF: truncated".into()))
    }

    fn header(&self, id: u32) -> Result<Header, BtfError> {
        let at = *self
            .types
            .get(id as usize)
            .filter(|_| id != 0)
            .ok_or_else(|| BtfError::Other(format!("BTF type {id} does not exist")))?
            as usize;
        let info = self.u32_at(at + 4)?;
        Ok(Header {
            kind: (info >> 24) & 0x1f,
            vlen: info & 0xffff,
            kind_flag: info >> 31 != 0,
            size_or_type: self.u32_at(at + 8)?,
            at: at + 12,
        })
    }

    /// The ids named `name`.
    fn named(&self, name: &str) -> &[u32] {
        self.names.get(name.as_bytes()).map_or(&[], Vec::as_slice)
    }

    /// The struct `name` that has members (not a declaration).
    fn find_struct(&self, name: &str) -> Result<u32, BtfError> {
        self.named(name)
            .iter()
            .copied()
            .find(|id| {
                self.header(*id)
                    .is_ok_and(|h| h.kind == kind::STRUCT && h.vlen > 0)
            })
            .ok_or_else(|| BtfError::NoStruct(name.to_owned()))
    }

    /// Finds `name` in the struct or union `ty`, descending into anonymous members: its
    /// bit offset within `ty` and its type.
    fn find_member(&self, ty: u32, name: &str) -> Result<Option<(u32, u32)>, BtfError> {
        self.find_member_at(ty, name.as_bytes(), 0)
    }

    fn find_member_at(
        &self,
        ty: u32,
        name: &[u8],
        depth: u32,
    ) -> Result<Option<(u32, u32)>, BtfError> {
        let h = self.header(ty)?;
        if !matches!(h.kind, kind::STRUCT | kind::UNION) || depth > 32 {
            return Ok(None);
        }
        for i in 0..h.vlen as usize {
            let at = h.at + 12 * i;
            let mname = self.name_in(&self.data, self.u32_at(at)?);
            let mty = self.u32_at(at + 4)?;
            let off = self.u32_at(at + 8)?;
            let bits = if h.kind_flag { off & 0x00ff_ffff } else { off };
            if mname == name {
                return Ok(Some((bits, mty)));
            }
            if mname.is_empty() {
                let inner = self.strip(mty)?;
                if let Some((b, t)) = self.find_member_at(inner, name, depth + 1)? {
                    return Ok(Some((bits + b, t)));
                }
            }
        }
        Ok(None)
    }

    /// Follows typedefs and qualifiers to the underlying type.
    fn strip(&self, mut ty: u32) -> Result<u32, BtfError> {
        for _ in 0..32 {
            let h = self.header(ty)?;
            match h.kind {
                kind::TYPEDEF | kind::VOLATILE | kind::CONST | kind::RESTRICT | kind::TYPE_TAG => {
                    ty = h.size_or_type;
                }
                _ => return Ok(ty),
            }
        }
        Err(BtfError::Other("type chain too long".into()))
    }

    fn size_of(&self, ty: u32) -> Result<usize, BtfError> {
        let h = self.header(self.strip(ty)?)?;
        Ok(match h.kind {
            kind::INT | kind::ENUM | kind::ENUM64 | kind::STRUCT | kind::UNION => {
                h.size_or_type as usize
            }
            kind::PTR => 8,
            kind::ARRAY => {
                let elem = self.u32_at(h.at)?;
                let n = self.u32_at(h.at + 8)? as usize;
                n * self.size_of(elem)?
            }
            other => return Err(BtfError::Other(format!("cannot size a BTF kind {other}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The machine running the unit tests has BTF (every kernel we support does); its layout
    /// differs from the guests', which is the point: the resolver must work on any of them.
    #[test]
    fn resolves_offsets_from_host_btf() {
        let path = Path::new("/sys/kernel/btf/vmlinux");
        assert!(path.exists(), "this test needs /sys/kernel/btf/vmlinux");
        let off = offsets_from_file(path).unwrap();
        assert_eq!(off.valid, 1);
        // struct qstr { union { struct { u32 hash; u32 len; }; u64 hash_len; }; const char *name; }
        assert_eq!(off.dentry_d_name_name, off.dentry_d_name_len + 4);
        assert!(off.file_f_path_dentry > 0 && off.linux_binprm_file > 0);
        // Every kernel we support keeps short names in the dentry (32 or 40 bytes).
        assert!(off.dentry_d_iname > off.dentry_d_name_name);
        assert_eq!(off.dentry_d_iname % 8, 0);
        // `d_seq` (a `seqcount_spinlock_t`) is found through its `seqcount`: without it the
        // file cache would go by every rename on the host.
        assert!(off.dentry_d_seq > 0 && off.dentry_d_seq < off.dentry_d_name_len);
    }
}

/// Number of parameters of the kernel's BPF-LSM attach point for `hook`
/// (`bpf_lsm_<hook>`). The programs read the previous program's verdict right after the
/// last parameter, so a kernel whose hook has another arity must not get them.
pub fn lsm_hook_arity(btf: &Btf, hook: &str) -> Result<usize, BtfError> {
    let name = format!("bpf_lsm_{hook}");
    let func = btf.header(lsm_hook_id(btf, hook)?)?;
    let proto = btf.header(func.size_or_type)?;
    if proto.kind != kind::FUNC_PROTO {
        return Err(BtfError::Other(format!(
            "{name}: prototype is a BTF kind {}",
            proto.kind
        )));
    }
    Ok(proto.vlen as usize)
}

/// The BTF id of the kernel's BPF-LSM attach point for `hook` (the function
/// `bpf_lsm_<hook>`), which a program's load names.
pub fn lsm_hook_id(btf: &Btf, hook: &str) -> Result<u32, BtfError> {
    func_id(btf, &format!("bpf_lsm_{hook}"))
}

/// The BTF id of the function `name` (the first of that name, as aya and libbpf take
/// it): a BPF-LSM attach point or a move program's function (the names indexed).
pub fn func_id(btf: &Btf, name: &str) -> Result<u32, BtfError> {
    let ids = btf.named(name);
    if ids.is_empty() {
        return Err(BtfError::Other(format!("no {name} in kernel BTF")));
    }
    ids.iter()
        .copied()
        .find(|id| btf.header(*id).is_ok_and(|h| h.kind == kind::FUNC))
        .ok_or_else(|| BtfError::Other(format!("{name} is not a function in kernel BTF")))
}

/// A function a move program attaches to (`programs::MOVE_PROGRAMS`).
fn move_target(name: &[u8]) -> bool {
    sandbox_common::programs::MOVE_PROGRAMS
        .iter()
        .any(|m| m.function.as_bytes() == name)
}

/// Reads BTF from a file (normally `/sys/kernel/btf/vmlinux`).
pub fn load(path: &Path) -> Result<Btf, BtfError> {
    let data = std::fs::read(path).map_err(|e| BtfError::Read {
        path: path.display().to_string(),
        why: e.to_string(),
    })?;
    Btf::parse(data)
}

#[cfg(test)]
mod arity_tests {
    use super::*;

    /// A BTF where the name `bpf_lsm_x` is a struct (id 2), then a function (id 4), then a
    /// function again (id 5): the attach point is the first function, for our reader, for
    /// aya's over the same BTF, and in the attach points' BTF given to aya's loads.
    #[test]
    fn the_attach_point_is_the_first_function_of_its_name() {
        fn ty(name: u32, kind: u32, size_or_type: u32, trailing: &[u8]) -> Vec<u8> {
            let mut t = Vec::new();
            t.extend(name.to_le_bytes());
            t.extend((kind << 24).to_le_bytes());
            t.extend(size_or_type.to_le_bytes());
            t.extend(trailing);
            t
        }
        let strings = b"\0int\0bpf_lsm_x\0";
        let (int, name) = (1, 5);
        let mut types = Vec::new();
        types.extend(ty(int, kind::INT, 4, &(32u32).to_le_bytes())); // 1
        types.extend(ty(name, kind::STRUCT, 0, &[])); // 2
        types.extend(ty(0, kind::FUNC_PROTO, 1, &[])); // 3
        types.extend(ty(name, kind::FUNC, 3, &[])); // 4
        types.extend(ty(name, kind::FUNC, 3, &[])); // 5
        let mut data = Vec::new();
        data.extend(0xeb9fu16.to_le_bytes());
        data.extend([1, 0]);
        data.extend(24u32.to_le_bytes());
        let type_len = u32::try_from(types.len()).unwrap();
        for v in [0, type_len, type_len, strings.len() as u32] {
            data.extend(v.to_le_bytes());
        }
        data.extend(&types);
        data.extend(strings);
        let ours = Btf::parse(data.clone()).unwrap();
        assert_eq!(lsm_hook_id(&ours, "x").unwrap(), 4);
        assert_eq!(lsm_hook_arity(&ours, "x").unwrap(), 0);
        let theirs = aya::Btf::parse(&data, aya::Endianness::Little).unwrap();
        let kind = aya_obj::btf::BtfKind::Func;
        assert_eq!(theirs.id_by_type_name_kind("bpf_lsm_x", kind).unwrap(), 4);
        let program = sandbox_common::programs::Program {
            name: "x",
            hook: "x",
            arity: 0,
            optional: false,
        };
        let points = crate::kernel::loader::attach_points(&ours, &[program]).unwrap();
        assert_eq!(points.id_by_type_name_kind("bpf_lsm_x", kind).unwrap(), 4);
    }

    /// btf-rs's offset and size of `strukt.path`, walked as `Resolver::offset` walks ours.
    fn theirs_path(b: &btf_rs::Btf, strukt: &str, path: &[&str]) -> (u32, usize) {
        fn strip(b: &btf_rs::Btf, mut t: btf_rs::Type) -> btf_rs::Type {
            while matches!(
                t,
                btf_rs::Type::Typedef(_)
                    | btf_rs::Type::Const(_)
                    | btf_rs::Type::Volatile(_)
                    | btf_rs::Type::Restrict(_)
                    | btf_rs::Type::TypeTag(_)
            ) {
                t = b.resolve_chained_type(t.as_btf_type().unwrap()).unwrap();
            }
            t
        }
        fn find(b: &btf_rs::Btf, t: &btf_rs::Type, name: &str) -> Option<(u32, btf_rs::Type)> {
            let (btf_rs::Type::Struct(s) | btf_rs::Type::Union(s)) = t else {
                return None;
            };
            for m in &s.members {
                let n = b.resolve_name(m).unwrap_or_default();
                let mt = b.resolve_chained_type(m).unwrap();
                if n == name {
                    return Some((m.bit_offset(), mt));
                }
                if n.is_empty()
                    && let Some((bits, t)) = find(b, &strip(b, mt), name)
                {
                    return Some((m.bit_offset() + bits, t));
                }
            }
            None
        }
        fn size(b: &btf_rs::Btf, t: btf_rs::Type) -> usize {
            match strip(b, t) {
                btf_rs::Type::Int(i) => i.size(),
                btf_rs::Type::Ptr(_) => 8,
                btf_rs::Type::Struct(s) | btf_rs::Type::Union(s) => s.size(),
                btf_rs::Type::Array(a) => a.len() * size(b, b.resolve_chained_type(&a).unwrap()),
                other => panic!("{}", other.name()),
            }
        }
        let mut t = b
            .resolve_types_by_name(strukt)
            .unwrap()
            .into_iter()
            .find(|t| matches!(t, btf_rs::Type::Struct(s) if !s.members.is_empty()))
            .unwrap();
        let (mut bits, mut last) = (0, None);
        for (i, name) in path.iter().enumerate() {
            let (b2, mt) = find(b, &t, name).unwrap_or_else(|| panic!("{strukt}.{name}"));
            bits += b2;
            if i + 1 < path.len() {
                t = strip(b, mt.clone());
            }
            last = Some(mt);
        }
        (bits / 8, size(b, last.unwrap()))
    }

    /// Our reader agrees with a general one (btf-rs) on every offset the programs use and
    /// every hook's arity, on this machine's kernel.
    #[test]
    fn agrees_with_a_general_btf_reader() {
        let path = Path::new("/sys/kernel/btf/vmlinux");
        let ours = load(path).unwrap();
        let theirs = btf_rs::Btf::from_file(path).unwrap();
        let mut hooks: Vec<&str> = crate::kernel::loader::PROGRAMS
            .iter()
            .map(|p| p.hook)
            .collect();
        hooks.push("no_such_hook");
        for h in hooks {
            let want = theirs
                .resolve_types_by_name(&format!("bpf_lsm_{h}"))
                .ok()
                .and_then(|ts| ts.into_iter().find(|t| matches!(t, btf_rs::Type::Func(_))))
                .and_then(|f| theirs.resolve_chained_type(f.as_btf_type()?).ok())
                .and_then(|p| match p {
                    btf_rs::Type::FuncProto(p) => Some(p.parameters.len()),
                    _ => None,
                });
            assert_eq!(lsm_hook_arity(&ours, h).ok(), want, "{h}");
        }
        // Offsets: every path `offsets` resolves, nested and anonymous members included,
        // against btf-rs walked the same way, and the final member's size.
        let off = offsets(&ours).unwrap();
        let r = Resolver { btf: &ours };
        for (strukt, path, want) in [
            ("file", &["f_path", "dentry"][..], off.file_f_path_dentry),
            ("file", &["f_inode"], off.file_f_inode),
            ("file", &["f_mode"], off.file_f_mode),
            ("dentry", &["d_parent"], off.dentry_d_parent),
            ("dentry", &["d_name", "len"], off.dentry_d_name_len),
            ("dentry", &["d_name", "name"], off.dentry_d_name_name),
            ("dentry", &["d_inode"], off.dentry_d_inode),
            ("dentry", &["d_sb"], off.dentry_d_sb),
            ("dentry", &["d_flags"], off.dentry_d_flags),
            ("inode", &["i_ino"], off.inode_i_ino),
            ("inode", &["i_mode"], off.inode_i_mode),
            ("super_block", &["s_dev"], off.super_block_s_dev),
            ("task_struct", &["tgid"], off.task_struct_tgid),
            ("task_struct", &["real_cred"], off.task_struct_real_cred),
            ("task_struct", &["cred"], off.task_struct_cred),
            ("cred", &["fsuid"], off.cred_fsuid),
            ("cred", &["thread_keyring"], off.cred_thread_keyring),
            ("cred", &["uid"], off.cred_uid),
            ("cred", &["euid"], off.cred_euid),
            ("cred", &["suid"], off.cred_suid),
            ("key", &["uid"], off.key_uid),
            ("key", &["serial"], off.key_serial),
            ("path", &["dentry"], off.path_dentry),
            ("inode", &["i_rdev"], off.inode_i_rdev),
            ("task_struct", &["files"], off.task_struct_files),
            ("socket", &["sk"], off.socket_sk),
            ("sock", &["__sk_common", "skc_family"], off.sock_family),
            ("sock", &["sk_cgrp_data", "cgroup"], off.sock_cgroup),
            ("sock", &["sk_protocol"], off.sock_protocol),
            (
                "sock",
                &["__sk_common", "skc_v6_rcv_saddr"],
                off.sock_v6_rcv_saddr,
            ),
            ("unix_sock", &["path", "dentry"], off.unix_sock_path_dentry),
            ("cgroup", &["self", "parent"], off.cgroup_parent),
            ("css_set", &["dfl_cgrp"], off.css_set_dfl_cgrp),
        ] {
            let (theirs_off, theirs_size) = theirs_path(&theirs, strukt, path);
            assert_eq!(want, theirs_off, "{strukt}.{}", path.join("."));
            assert_eq!(
                r.offset(strukt, path, Some(theirs_size)).unwrap(),
                theirs_off,
                "{strukt}.{} size",
                path.join(".")
            );
        }
        let iname = ["d_iname", "d_shortname"]
            .iter()
            .find_map(|n| {
                let t = theirs.resolve_types_by_name("dentry").ok()?;
                let s = t.into_iter().find_map(|t| match t {
                    btf_rs::Type::Struct(s) if !s.members.is_empty() => Some(s),
                    _ => None,
                })?;
                let m = s
                    .members
                    .iter()
                    .find(|m| theirs.resolve_name(*m).unwrap_or_default() == *n)?;
                Some(m.bit_offset() / 8)
            })
            .unwrap();
        assert_eq!(off.dentry_d_iname, iname);
    }

    /// The arity table the programs are built for matches this kernel (the VM tests check
    /// 6.1, 6.12 and 7.2; this catches a wrong table without a VM).
    #[test]
    fn every_hook_has_a_program_for_this_kernel() {
        let btf = load(Path::new("/sys/kernel/btf/vmlinux")).unwrap();
        let fit =
            crate::kernel::loader::fitting(|h| lsm_hook_arity(&btf, h).map_err(|e| e.to_string()))
                .unwrap();
        let mut hooks: Vec<&str> = Vec::new();
        for p in crate::kernel::loader::PROGRAMS {
            if !hooks.contains(&p.hook) {
                hooks.push(p.hook);
            }
        }
        // Every hook has its program, except newer ones this kernel may lack.
        for h in &hooks {
            let optional = crate::kernel::loader::PROGRAMS
                .iter()
                .any(|p| p.hook == *h && p.optional);
            assert!(
                fit.iter().any(|p| p.hook == *h) || (optional && lsm_hook_arity(&btf, h).is_err()),
                "{h}"
            );
        }
        for p in &fit {
            assert_eq!(lsm_hook_arity(&btf, p.hook).unwrap(), p.arity, "{}", p.name);
        }
        assert!(lsm_hook_arity(&btf, "no_such_hook").is_err());
        // A hook whose form no program has is refused with its name.
        let e = crate::kernel::loader::fitting(|h| match h {
            "bpf" => Ok(9),
            _ => lsm_hook_arity(&btf, h).map_err(|e| e.to_string()),
        })
        .unwrap_err();
        assert!(e.to_string().contains("bpf"), "{e}");
        // A kernel without the newer ACL hooks (6.1) loads without those programs; a kernel
        // without a required hook is refused.
        let no_acl = crate::kernel::loader::fitting(|h| {
            if h.contains("acl") {
                Err("absent".into())
            } else {
                lsm_hook_arity(&btf, h).map_err(|e| e.to_string())
            }
        })
        .unwrap();
        assert!(no_acl.iter().all(|p| !p.hook.contains("acl")));
        let e = crate::kernel::loader::fitting(|h| {
            if h == "file_open" {
                Err("absent".into())
            } else {
                lsm_hook_arity(&btf, h).map_err(|e| e.to_string())
            }
        })
        .unwrap_err();
        assert!(e.to_string().contains("absent"), "{e}");
    }
}
