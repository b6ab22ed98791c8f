//! Deny/audit records: filled in the per-CPU scratch area and copied to the ring buffer in
//! one `bpf_ringbuf_output` of exactly header + path bytes. A record that does not fit is
//! counted in `DROPS`, never lost silently.

use core::ffi::c_void;

use aya_ebpf::helpers::generated::{
    bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
    bpf_get_current_task, bpf_get_current_uid_gid, bpf_ktime_get_boot_ns, bpf_ringbuf_output,
};
use sandbox_common::{EventHeader, NO_RULE, PATH_MAX};

use crate::addr::Dest;
use crate::kread;
use crate::maps::{DROPS, EVENTS, scratch};
use crate::path::{FileFacts, PATH_END};

/// What a hook wants to report; the task fields are filled in by `send`. Laid out without
/// holes: it crosses into a global function by pointer, and the verifier checks the
/// pointed-to stack bytes are all written.
#[repr(C)]
pub struct Report {
    pub ino: u64,
    pub addr: [u8; 16],
    pub hook: u32,
    pub decision: u32,
    pub reason: u32,
    pub flags: u32,
    pub policy_id: u32,
    pub access: u32,
    pub dev: u32,
    /// Path start in `SCRATCH.path` (`PATH_END` = no path).
    pub path_start: u32,
    pub target: u32,
    pub rule: u16,
    pub family: u16,
    pub port: u16,
    pub _pad: [u16; 3],
}
const _: () = assert!(size_of::<Report>() == 72);

impl Report {
    #[inline(always)]
    pub fn bare(hook: u32, policy_id: u32) -> Self {
        Self {
            hook,
            decision: 0,
            reason: 0,
            flags: 0,
            policy_id,
            rule: NO_RULE,
            access: 0,
            dev: 0,
            ino: 0,
            path_start: PATH_END,
            family: 0,
            port: 0,
            addr: [0; 16],
            target: 0,
            _pad: [0; 3],
        }
    }

    #[inline(always)]
    pub fn file(hook: u32, policy_id: u32, f: &FileFacts, access: u32, flags: u32) -> Self {
        let mut r = Self::bare(hook, policy_id);
        r.access = access;
        r.flags = flags;
        r.dev = f.dev;
        r.ino = f.ino;
        r.path_start = f.start;
        r
    }

    #[inline(always)]
    pub fn net(hook_id: u32, policy_id: u32, d: &Dest) -> Self {
        let mut r = Self::bare(hook_id, policy_id);
        r.family = d.family;
        r.port = d.port;
        r.addr = d.addr;
        r
    }
}

/// Sends `rep` with the acting task's details (see [`sandbox_send`]).
#[inline(always)]
pub fn send(rep: &Report) {
    sandbox_send(core::ptr::from_ref(rep));
}

/// Fills in the record and puts it in the ring. A global function, checked by the verifier
/// once per program rather than at each of a hook's reports (as `path::sandbox_resolve`);
/// it must return a scalar, and returns 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_send(rep: *const Report) -> u32 {
    // SAFETY: the verifier passes a pointer to a whole `Report` or NULL.
    let Some(rep) = (unsafe { rep.as_ref() }) else {
        return 0;
    };
    send_here(rep);
    0
}

#[inline(always)]
fn send_here(rep: &Report) {
    let Some(s) = scratch() else {
        count_drop();
        return;
    };
    let off = kread::offsets();
    let pid_tgid = unsafe { bpf_get_current_pid_tgid() };
    let uid_gid = unsafe { bpf_get_current_uid_gid() };
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let parent = kread::read_ptr(task, off.task_struct_real_parent).unwrap_or(core::ptr::null());
    let ppid: u32 = kread::read(parent, off.task_struct_tgid).unwrap_or(0);
    let path_len = (PATH_END.saturating_sub(rep.path_start)) & (PATH_MAX as u32 - 1);
    let e: &mut EventHeader = &mut s.event;
    e.hook = rep.hook;
    e.decision = rep.decision;
    e.reason = rep.reason;
    e.flags = rep.flags;
    e.pid = pid_tgid as u32;
    e.tgid = (pid_tgid >> 32) as u32;
    e.ppid = ppid;
    e.uid = uid_gid as u32;
    e.gid = (uid_gid >> 32) as u32;
    e.policy_id = rep.policy_id;
    e.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    e.time_ns = unsafe { bpf_ktime_get_boot_ns() };
    // SAFETY: the helper writes at most 16 bytes into the 16-byte array.
    unsafe { bpf_get_current_comm(e.comm.as_mut_ptr().cast(), 16) };
    e.rule = u32::from(rep.rule);
    e.access = rep.access;
    e.dev = rep.dev;
    e.path_len = path_len;
    e.ino = rep.ino;
    e.family = rep.family;
    e.port = rep.port;
    e.target = rep.target;
    e.exe_dev = 0;
    e.exe_len = 0;
    e.addr = rep.addr;
    if path_len > 0 {
        let path_len = kread::opaque(path_len) & (PATH_MAX as u32 - 1);
        let src = kread::opaque(rep.path_start) & (PATH_MAX as u32 - 1);
        // SAFETY: both ranges are inside the per-CPU value: src < PATH_MAX and
        // len < PATH_MAX within the PATH_BUF-sized path buffer, len < PATH_MAX for event_path.
        unsafe {
            aya_ebpf::helpers::generated::bpf_probe_read_kernel(
                s.event_path.as_mut_ptr().cast(),
                path_len,
                s.path.as_ptr().add(src as usize).cast(),
            );
        }
    }
    // The acting process's executable (the file path is already copied out of `path`).
    let (exe_dev, exe_len) = exe(task, &off, path_len);
    e.exe_dev = exe_dev;
    e.exe_len = exe_len;
    let size = size_of::<EventHeader>() as u64
        + u64::from(kread::opaque(path_len) & (PATH_MAX as u32 - 1))
        + u64::from(kread::opaque(exe_len) & (PATH_MAX as u32 - 1));
    // SAFETY: `event` and `event_path` are contiguous (repr(C), header size is a multiple of
    // 8) and `size` never exceeds their sum.
    let ret = unsafe {
        bpf_ringbuf_output(
            (&raw const EVENTS).cast_mut().cast::<c_void>(),
            (&raw mut s.event).cast(),
            size,
            0,
        )
    };
    if ret != 0 {
        count_drop();
    }
}

/// Builds the path of `current->mm->exe_file` and appends it to the record after the
/// `path_len` bytes of file path. Returns (s_dev, length), or (0, 0) for kernel threads and
/// paths that do not resolve.
#[inline(always)]
fn exe(task: *const u8, off: &sandbox_common::KernelOffsets, path_len: u32) -> (u32, u32) {
    let Ok(mm) = kread::read_ptr(task, off.task_struct_mm) else {
        return (0, 0);
    };
    let Ok(file) = kread::read_ptr(mm, off.mm_struct_exe_file) else {
        return (0, 0);
    };
    let Ok(dentry) = kread::read_ptr(file, off.file_f_path_dentry) else {
        return (0, 0);
    };
    let sb = kread::read_ptr(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    let dev: u32 = kread::read(sb, off.super_block_s_dev).unwrap_or(0);
    let Ok(start) = crate::path::build_path(dentry) else {
        return (0, 0);
    };
    let Some(s) = scratch() else {
        return (0, 0);
    };
    let len = kread::opaque(PATH_END.saturating_sub(start)) & (PATH_MAX as u32 - 1);
    let src = kread::opaque(start) & (PATH_MAX as u32 - 1);
    let at = kread::opaque(path_len) & (PATH_MAX as u32 - 1);
    // SAFETY: at < PATH_MAX and len < PATH_MAX inside the 2 * PATH_MAX event_path; src and
    // len inside the PATH_BUF-sized path buffer.
    let ret = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            s.event_path.as_mut_ptr().add(at as usize).cast(),
            len,
            s.path.as_ptr().add(src as usize).cast(),
        )
    };
    if ret == 0 { (dev, len) } else { (0, 0) }
}

#[inline(always)]
fn count_drop() {
    if let Some(n) = DROPS.get_ptr_mut(0) {
        // SAFETY: per-CPU counter, no concurrent writer on this CPU while we run.
        unsafe { *n += 1 };
    }
}
