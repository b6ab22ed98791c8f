//! Canonical path resolution and matching.
//!
//! The path is rebuilt from the dentry chain up to the root of the file's superblock, so
//! symlinks, `..`, relative names, chroot, `/proc/self/root` and bind mounts do not change
//! it. The superblock's canonical mount point is not rebuilt: the loader has already fed it
//! through the policy's DFA and stored the resulting state in `SB_START`. The path bytes are
//! then run through the DFA; the final state's match classes say which rules match.

use core::ffi::c_void;

use aya_ebpf::Global;
use aya_ebpf::helpers::generated::bpf_loop;
use sandbox_common::{
    Accept, InodeKey, KernelOffsets, MAX_DEPTH, NAME_MAX, NO_RULE, PATH_MAX, PolicyInfo, SbKey,
    accept, reason,
};

use crate::kread;
use crate::maps::{DFA_ACCEPT, DFA_CLASSES, DFA_TRANS, INODE_RULES, SB_START, SCRATCH};

/// Struct offsets of the running kernel, written by the loader from BTF before load.
#[unsafe(no_mangle)]
static OFFSETS: Global<KernelOffsets> = Global::new(KernelOffsets::ZERO);

#[inline(always)]
pub fn offsets() -> KernelOffsets {
    OFFSETS.load()
}

/// Path bytes live in `SCRATCH.path[start..PATH_END]`.
pub const PATH_END: u32 = PATH_MAX as u32 - 1;
const MASK: u32 = PATH_MAX as u32 - 1;

/// What the hooks know about a file before matching.
pub struct FileFacts {
    pub dentry: *const u8,
    pub dev: u32,
    pub ino: u64,
    pub mode: u16,
    /// Start of the path in `SCRATCH.path` once resolved.
    pub start: u32,
}

#[inline(always)]
pub fn file_facts(file: *const u8, off: &KernelOffsets) -> FileFacts {
    let dentry = kread::read_ptr(file, off.file_f_path_dentry).unwrap_or(core::ptr::null());
    let inode = kread::read_ptr(file, off.file_f_inode).unwrap_or(core::ptr::null());
    let sb = kread::read_ptr(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    FileFacts {
        dentry,
        dev: kread::read(sb, off.super_block_s_dev).unwrap_or(0),
        ino: kread::read(inode, off.inode_i_ino).unwrap_or(0),
        mode: kread::read(inode, off.inode_i_mode).unwrap_or(0),
        start: PATH_END,
    }
}

/// Rules that match a file, and whether they matched by identity.
pub struct Match {
    pub rules: [u16; accept::SLOTS],
    pub by_inode: bool,
    /// The file's superblock is mounted somewhere (it is in `SB_START`). Kernel-internal
    /// ones (pipes, sockets, memfd) are not; allowlists do not apply to them.
    pub sb_known: bool,
}

impl Match {
    pub fn reason(&self, _slot: usize) -> u32 {
        if self.by_inode {
            reason::INODE
        } else {
            reason::RULE
        }
    }
}

pub enum Resolved {
    Matched(Match),
    /// Could not resolve within the limits: fail closed. Carries event flags.
    Unresolved(u32),
}

/// Loop state of the dentry walk. It lives in the per-CPU scratch map, not on the stack:
/// values loaded from a map are unknown to the verifier, so the loop body verifies once.
/// (On the stack, `off` becomes a precise scalar that differs on every iteration, and
/// kernels that verify `bpf_loop` callbacks as loops, 6.8 and later, never converge.)
#[repr(C)]
pub struct Walk {
    dentry: u64,
    off: u32,
    done: u32,
    failed: u32,
    _pad: u32,
}

/// Loop state of the DFA scan (in the scratch map for the same reason).
#[repr(C)]
pub struct Scan {
    pos: u32,
    state: u32,
    policy_id: u32,
    trans_base: u32,
    stride: u32,
    dead: u32,
}

/// One dentry level: prepend "/name". Stops (returns 1) at the superblock root.
#[inline(never)]
extern "C" fn walk_step(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: per-CPU map value, exclusively ours while this program runs.
    let s = unsafe { &mut *scratch };
    let off = offsets();
    let dentry = s.walk.dentry as *const u8;
    let Ok(parent) = kread::read_ptr(dentry, off.dentry_d_parent) else {
        s.walk.failed = 1;
        return 1;
    };
    if parent == dentry || parent.is_null() {
        s.walk.done = 1;
        return 1;
    }
    let len: u32 = kread::read(dentry, off.dentry_d_name_len).unwrap_or(0);
    let name = kread::read_ptr(dentry, off.dentry_d_name_name).unwrap_or(core::ptr::null());
    let pos = s.walk.off;
    if len >= NAME_MAX as u32 || len + 1 > pos {
        s.walk.failed = 1;
        return 1;
    }
    let pos = pos - len;
    // SAFETY: `pos & MASK` < PATH_MAX and len < NAME_MAX: inside the PATH_BUF-sized buffer.
    let dst = unsafe {
        s.path
            .as_mut_ptr()
            .add((kread::opaque(pos) & MASK) as usize)
    };
    if kread::read_bytes(dst, len, name).is_err() {
        s.walk.failed = 1;
        return 1;
    }
    let pos = pos - 1;
    s.path[(kread::opaque(pos) & MASK) as usize] = b'/';
    s.walk.off = pos;
    s.walk.dentry = parent as u64;
    0
}

/// One path byte through the DFA. Stops at the end of the path or in the dead state.
#[inline(never)]
extern "C" fn scan_step(_index: u64, _ctx: *mut c_void) -> i64 {
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: per-CPU map value, exclusively ours while this program runs.
    let s = unsafe { &mut *scratch };
    let pos = s.scan.pos;
    if pos >= PATH_END {
        return 1;
    }
    let Some(classes) = DFA_CLASSES.get(s.scan.policy_id) else {
        return 1;
    };
    let byte = s.path[(kread::opaque(pos) & MASK) as usize];
    let class = u32::from(classes.classes[byte as usize]);
    let idx = s.scan.trans_base + s.scan.state * s.scan.stride + class;
    let Some(next) = DFA_TRANS.get(idx) else {
        s.scan.state = s.scan.dead;
        return 1;
    };
    s.scan.state = *next;
    s.scan.pos = pos + 1;
    i64::from(s.scan.state == s.scan.dead)
}

/// Resolves the canonical path of `facts.dentry` and matches it (and the inode) against the
/// policy.
#[inline(always)]
pub fn resolve(policy_id: u32, info: &PolicyInfo, facts: &mut FileFacts) -> Resolved {
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        return Resolved::Unresolved(0);
    };
    // SAFETY: per-CPU map value, exclusively ours while this program runs; the loop
    // callbacks below look it up again themselves.
    let s = unsafe { &mut *scratch };
    s.walk = Walk {
        dentry: facts.dentry as u64,
        off: PATH_END,
        done: 0,
        failed: 0,
        _pad: 0,
    };
    // SAFETY: bpf_loop calls walk_step, which needs no context.
    unsafe {
        bpf_loop(
            MAX_DEPTH,
            walk_step as *mut c_void,
            core::ptr::null_mut(),
            0,
        );
    }
    if s.walk.done == 0 || s.walk.failed != 0 {
        return Resolved::Unresolved(sandbox_common::EVENT_F_PATH_TRUNCATED);
    }
    let mut start_off = s.walk.off;
    if start_off >= PATH_END {
        // The superblock root itself.
        start_off = PATH_END - 1;
        s.path[start_off as usize] = b'/';
    }
    // The path is SCRATCH.path[start_off..PATH_END]; the event copies it from there.
    facts.start = start_off;

    let key = SbKey {
        policy_id,
        dev: facts.dev,
    };
    // SAFETY: the value is a plain u32 copied out immediately.
    let sb_start = unsafe { SB_START.get(&key) }.copied();
    let sb_known = sb_start.is_some();
    let start = sb_start.unwrap_or(info.dfa_start);
    s.scan = Scan {
        pos: start_off,
        state: start,
        policy_id,
        trans_base: info.dfa_trans_base,
        stride: info.dfa_stride,
        dead: info.dfa_dead,
    };
    // SAFETY: bpf_loop calls scan_step, which needs no context.
    unsafe {
        bpf_loop(
            PATH_MAX as u32,
            scan_step as *mut c_void,
            core::ptr::null_mut(),
            0,
        );
    }
    let final_state = s.scan.state;
    let mut rules = [NO_RULE; accept::SLOTS];
    if final_state != info.dfa_dead {
        if let Some(acc) = DFA_ACCEPT.get(info.dfa_accept_base + final_state) {
            rules = acc.rules;
        }
    }
    let mut by_inode = false;
    let ikey = InodeKey {
        ino: facts.ino,
        dev: facts.dev,
        policy_id,
    };
    // SAFETY: the value is copied out immediately.
    if let Some(acc) = unsafe { INODE_RULES.get(&ikey) } {
        let acc: Accept = *acc;
        for slot in [accept::FILE_DENY, accept::FILE_READ_ONLY, accept::EXEC_DENY] {
            if acc.rules[slot] < rules[slot] {
                rules[slot] = acc.rules[slot];
                by_inode = true;
            }
        }
    }
    Resolved::Matched(Match {
        rules,
        by_inode,
        sb_known,
    })
}
