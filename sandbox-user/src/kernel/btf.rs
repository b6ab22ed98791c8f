//! Struct offsets of the running kernel, read from its BTF.
//!
//! Rust eBPF cannot emit CO-RE relocations, and layouts differ between the kernels we support
//! (`file.f_path` is at 64 on 6.1 and 16 on 6.18, and a union member on newer kernels). So
//! the loader resolves every field the programs read here, checks its size, and hands the
//! offsets to the programs as the `OFFSETS` global.

use std::path::Path;

use btf_rs::{Btf, Type};
use sandbox_common::KernelOffsets;

#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read kernel BTF from {path}: {source}")]
    Read { path: String, source: btf_rs::Error },
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
    let btf = Btf::from_file(path).map_err(|source| BtfError::Read {
        path: path.display().to_string(),
        source,
    })?;
    offsets(&btf)
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
        path_dentry: f("path", &["dentry"], Some(8))?,
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
        cgroup_kn: f("cgroup", &["kn"], Some(8))?,
        kernfs_node_id: f("kernfs_node", &["id"], Some(8))?,
        cgroup_parent: f("cgroup", &["self", "parent"], Some(8))?,
        task_struct_cgroups: f("task_struct", &["cgroups"], Some(8))?,
        css_set_dfl_cgrp: f("css_set", &["dfl_cgrp"], Some(8))?,
        super_block_s_root: f("super_block", &["s_root"], Some(8))?,
        dentry_d_flags: f("dentry", &["d_flags"], Some(4))?,
        dentry_d_iname: r.inline_name()?,
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
        let mut ty = self.find_struct(strukt)?;
        let mut total_bits = 0u32;
        let mut last: Option<Type> = None;
        for (i, name) in path.iter().enumerate() {
            let (bits, member_ty) =
                self.find_member(&ty, name)?
                    .ok_or_else(|| BtfError::NoMember {
                        strukt: strukt.to_owned(),
                        member: path[..=i].join("."),
                    })?;
            total_bits += bits;
            if i + 1 < path.len() {
                ty = self.strip(member_ty.clone())?;
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
            let got = self.size_of(&t)?;
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
    fn inline_name(&self) -> Result<u32, BtfError> {
        let dentry = self.find_struct("dentry")?;
        for name in ["d_iname", "d_shortname"] {
            if let Some((bits, ty)) = self.find_member(&dentry, name)? {
                let fits = self.size_of(&ty)? >= sandbox_common::DNAME_INLINE_MIN;
                return Ok(if fits && bits % 64 == 0 { bits / 8 } else { 0 });
            }
        }
        Ok(0)
    }

    fn find_struct(&self, name: &str) -> Result<Type, BtfError> {
        let types = self
            .btf
            .resolve_types_by_name(name)
            .map_err(|_| BtfError::NoStruct(name.to_owned()))?;
        types
            .into_iter()
            .find(|t| matches!(t, Type::Struct(s) if !s.members.is_empty()))
            .ok_or_else(|| BtfError::NoStruct(name.to_owned()))
    }

    /// Finds `name` in a struct/union, descending into anonymous members. Returns the bit
    /// offset relative to `ty` and the member's type.
    fn find_member(&self, ty: &Type, name: &str) -> Result<Option<(u32, Type)>, BtfError> {
        let (Type::Struct(s) | Type::Union(s)) = ty else {
            return Ok(None);
        };
        for m in &s.members {
            let mname = self.btf.resolve_name(m).unwrap_or_default();
            let mty = self
                .btf
                .resolve_chained_type(m)
                .map_err(|e| BtfError::Other(e.to_string()))?;
            if mname == name {
                return Ok(Some((m.bit_offset(), mty)));
            }
            if mname.is_empty() {
                let inner = self.strip(mty)?;
                if let Some((bits, t)) = self.find_member(&inner, name)? {
                    return Ok(Some((m.bit_offset() + bits, t)));
                }
            }
        }
        Ok(None)
    }

    /// Follows typedefs and qualifiers to the underlying type.
    fn strip(&self, mut ty: Type) -> Result<Type, BtfError> {
        for _ in 0..32 {
            ty = match &ty {
                Type::Typedef(_)
                | Type::Const(_)
                | Type::Volatile(_)
                | Type::Restrict(_)
                | Type::TypeTag(_) => {
                    let bt = ty
                        .as_btf_type()
                        .ok_or_else(|| BtfError::Other("untyped qualifier".into()))?;
                    self.btf
                        .resolve_chained_type(bt)
                        .map_err(|e| BtfError::Other(e.to_string()))?
                }
                _ => return Ok(ty),
            };
        }
        Err(BtfError::Other("type chain too long".into()))
    }

    fn size_of(&self, ty: &Type) -> Result<usize, BtfError> {
        Ok(match self.strip(ty.clone())? {
            Type::Int(i) => i.size(),
            Type::Ptr(_) => 8,
            Type::Enum(e) => e.size(),
            Type::Struct(s) | Type::Union(s) => s.size(),
            Type::Array(a) => {
                let elem = self
                    .btf
                    .resolve_chained_type(&a)
                    .map_err(|e| BtfError::Other(e.to_string()))?;
                a.len() * self.size_of(&elem)?
            }
            other => return Err(BtfError::Other(format!("cannot size a {}", other.name()))),
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
    }
}

/// Number of parameters of the kernel's BPF-LSM attach point for `hook`
/// (`bpf_lsm_<hook>`). The programs read the previous program's verdict right after the
/// last parameter, so a kernel whose hook has another arity must not get them.
pub fn lsm_hook_arity(btf: &Btf, hook: &str) -> Result<usize, BtfError> {
    let name = format!("bpf_lsm_{hook}");
    let types = btf
        .resolve_types_by_name(&name)
        .map_err(|_| BtfError::Other(format!("no {name} in kernel BTF")))?;
    let func = types
        .into_iter()
        .find(|t| matches!(t, Type::Func(_)))
        .ok_or_else(|| BtfError::Other(format!("{name} is not a function in kernel BTF")))?;
    let bt = func
        .as_btf_type()
        .ok_or_else(|| BtfError::Other(format!("{name}: untyped")))?;
    match btf
        .resolve_chained_type(bt)
        .map_err(|e| BtfError::Other(e.to_string()))?
    {
        Type::FuncProto(p) => Ok(p.parameters.len()),
        other => Err(BtfError::Other(format!(
            "{name}: prototype is a {}",
            other.name()
        ))),
    }
}

/// Reads BTF from a file (normally `/sys/kernel/btf/vmlinux`).
pub fn load(path: &Path) -> Result<Btf, BtfError> {
    Btf::from_file(path).map_err(|source| BtfError::Read {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod arity_tests {
    use super::*;

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
