//! Deny/audit records: filled in the decision's working memory and copied to the ring buffer in
//! one `bpf_ringbuf_output` of exactly header + path bytes. A record that does not fit is
//! counted in `DROPS`, never lost silently.

use core::ffi::c_void;

use aya_ebpf::helpers::generated::{
    bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
    bpf_get_current_task, bpf_get_current_uid_gid, bpf_get_smp_processor_id, bpf_ktime_get_boot_ns,
    bpf_ringbuf_output,
};
use sandbox_common::{
    AGG_KEY_WORDS, AGG_WINDOW_NS, AggSlot, EVENT_F_AGG_KEY, EVENT_F_REPEATS, EventHeader, NO_RULE,
    PATH_MAX,
};

use crate::addr::Dest;
use crate::kread;
use crate::maps::{AGG, DROPS, EVENTS};
use crate::path::{FileFacts, PATH_END};
use crate::work::{Claim, Work};

/// What a hook wants to report; the task fields are filled in by `send`. Laid out without
/// holes (9 words): the aggregation compares it as words.
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
    /// Path start in the working memory's `Scratch::path` (`PATH_END` = no path).
    pub path_start: u32,
    pub target: u32,
    pub rule: u16,
    pub family: u16,
    pub port: u16,
    pub _pad: [u16; 3],
}
const _: () = assert!(size_of::<Report>() == 8 * AGG_KEY_WORDS);
const _: () = assert!(core::mem::offset_of!(Report, addr) % 8 == 0);
const _: () = assert!(core::mem::offset_of!(EventHeader, addr) % 8 == 0);
const _: () = assert!(size_of::<EventHeader>() % 8 == 0);

/// Zeroes `e` a word at a time (see [`Report::bare`]: not a `memset`).
#[inline(always)]
fn zero_header(e: &mut EventHeader) {
    let w = core::ptr::from_mut(e).cast::<u64>();
    let mut i = 0;
    while i < size_of::<EventHeader>() / 8 {
        // SAFETY: inside the header, which is 8-aligned (it holds u64 fields) and a whole
        // number of words long.
        unsafe { core::ptr::write_volatile(w.add(i), 0) };
        i += 1;
    }
}

/// Copies `N` words from `src` to `dst`, a word at a time (see [`Report::bare`]: not a
/// `memcpy`, which BPF makes a loop of single bytes; and a plain copy lets LLVM build the
/// source in place with a `memset` of its zeros).
///
/// # Safety
/// Both point to `N` 8-aligned words.
#[inline(always)]
unsafe fn copy_words<const N: usize>(dst: *mut u64, src: *const u64) {
    let mut i = 0;
    while i < N {
        // SAFETY: the caller's.
        unsafe { core::ptr::write_volatile(dst.add(i), core::ptr::read_volatile(src.add(i))) };
        i += 1;
    }
}

/// Copies the 16 address bytes of a report into a record as two words.
#[inline(always)]
fn copy_addr(dst: &mut [u8; 16], src: &[u8; 16]) {
    // SAFETY: both arrays sit at 8-aligned offsets of 8-aligned structs (asserted above).
    unsafe { copy_words::<2>(dst.as_mut_ptr().cast(), src.as_ptr().cast()) }
}

/// Copies a report (into the working memory, for [`sandbox_send`]).
#[inline(always)]
fn copy_report(dst: &mut Report, src: &Report) {
    // SAFETY: reports are 8-aligned (they hold a u64) and `AGG_KEY_WORDS` words long
    // (asserted above).
    unsafe {
        copy_words::<AGG_KEY_WORDS>(
            core::ptr::from_mut(dst).cast(),
            core::ptr::from_ref(src).cast(),
        );
    }
}

impl Report {
    /// A report with nothing but its hook and policy. The zeros are a number LLVM does
    /// not know (`kread::opaque`): it would make known zero bytes a call of `memset`, a
    /// loop of byte stores that the verifier walks byte by byte, at every report of every
    /// program.
    #[inline(always)]
    pub fn bare(hook: u32, policy_id: u32) -> Self {
        let z = u64::from(kread::opaque(0));
        #[allow(clippy::cast_possible_truncation)] // zero
        let z16 = z as u16;
        Self {
            hook,
            decision: 0,
            reason: 0,
            flags: 0,
            policy_id,
            rule: NO_RULE,
            access: 0,
            dev: 0,
            ino: z,
            path_start: PATH_END,
            family: 0,
            port: 0,
            // SAFETY: two words are 16 bytes.
            addr: unsafe { core::mem::transmute::<[u64; 2], [u8; 16]>([z, z]) },
            target: 0,
            _pad: [z16; 3],
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

/// Sends `rep` with the acting task's details (see [`sandbox_send`]), built in the
/// decision's working memory (`mem`; the path of `rep.path_start` is there). No working
/// memory free: counted as lost.
///
/// The report goes to [`sandbox_send`] in the working memory, not by a pointer to this
/// stack: 7.x kernels analyse a function that gets a stack pointer once more for every
/// call that passes one (`bpf_compute_subprog_arg_access`, before the verifier proper),
/// and a hook reports from several places (about a third of a small program's load).
#[inline(always)]
pub fn send(mem: Claim, rep: &Report) {
    match mem.work() {
        Some(w) => {
            if let Some(s) = w.mem() {
                copy_report(&mut s.report, rep);
                sandbox_send(w.index());
            } else {
                count_drop();
            }
        }
        None => count_drop(),
    }
}

/// Fills in the record of the report in working memory `work` (see [`send`]) and puts it
/// in the ring, or counts it when it repeats the last one of this CPU (see [`aggregate`]).
/// A global function, checked by the verifier once per program rather than at each of a
/// hook's reports (as `path::sandbox_resolve`); it must return a scalar, and returns 0.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_send(work: u32) -> u32 {
    send_here(Work::at(work));
    0
}

/// A denial the same process makes again and again (a retry loop, a scan through denied
/// files that always hits the same one) is sent once per [`AGG_WINDOW_NS`] and counted
/// the rest of the time: a flood costs a map lookup and a compare per denial, not a ring
/// record, and the log gets one record with a count. What identifies a denial: the whole
/// report (hook, reason, rule, access, file by device and inode, address, target), the
/// process and its executable (`exe`, the `mm->exe_file` pointer). Names being made have
/// no inode yet (`ino` 0 with a path): those are always sent. `Err` when `rep` was
/// counted (nothing more to send); else what the record to send carries.
///
/// The CPU's slot is shared by every decision on the CPU, and one can be preempted in the
/// middle of its update: each holds the slot's lock (`AggSlot::lock`) while it reads and
/// writes it, and a decision that finds it held sends its record unaggregated.
#[inline(always)]
fn aggregate(rep: &Report, e: &mut EventHeader, tgid: u32, exe: u64, now: u64) -> Result<Agg, ()> {
    let none = Agg {
        flags: 0,
        base: 0,
        seq: 0,
    };
    if rep.ino == 0 && rep.path_start != PATH_END {
        return Ok(none);
    }
    let Some(slot) = AGG.get_ptr_mut(0) else {
        return Ok(none);
    };
    // SAFETY: a per-CPU map value.
    let lock = unsafe { &raw mut (*slot).lock };
    if kread::write_begin(lock).is_none() {
        return Ok(none);
    }
    // SAFETY: a per-CPU map value, this decision's while it holds the lock; `Report` is 9
    // words without holes.
    let r = unsafe {
        aggregate_locked(
            e,
            &mut *slot,
            &*core::ptr::from_ref(rep).cast::<[u64; AGG_KEY_WORDS]>(),
            tgid,
            exe,
            now,
        )
    };
    kread::write_end(lock);
    r
}

/// [`aggregate`] with the slot's lock held.
#[inline(always)]
fn aggregate_locked(
    e: &mut EventHeader,
    slot: &mut AggSlot,
    words: &[u64; AGG_KEY_WORDS],
    tgid: u32,
    exe: u64,
    now: u64,
) -> Result<Agg, ()> {
    if slot.valid != 0
        && slot.tgid == tgid
        && slot.exe == exe
        && now.wrapping_sub(slot.since_ns) < AGG_WINDOW_NS
        && same(&slot.key, words)
    {
        // Atomic: userspace reads the count while the programs run.
        kread::atomic_add(&raw mut slot.suppressed, 1);
        slot.last_ns = now;
        return Err(());
    }
    let total = slot.suppressed;
    if slot.valid != 0 && total > slot.base {
        repeats(e, slot, total);
    }
    // The key changes: invalid until its record is in the ring; `base` and `key_seq`
    // before anything counts for it (see `AggSlot`).
    let seq = slot.key_seq.wrapping_add(1);
    slot.valid = 0;
    slot.base = total;
    slot.key_seq = seq;
    slot.key = *words;
    slot.tgid = tgid;
    slot.exe = exe;
    slot.since_ns = now;
    slot.last_ns = now;
    Ok(Agg {
        flags: EVENT_F_AGG_KEY,
        base: total,
        seq,
    })
}

/// What [`aggregate`] makes of a record: its flags, `agg_base` and `agg_key`.
struct Agg {
    flags: u32,
    base: u64,
    seq: u64,
}

#[inline(always)]
fn same(a: &[u64; AGG_KEY_WORDS], b: &[u64; AGG_KEY_WORDS]) -> bool {
    let mut i = 0;
    while i < AGG_KEY_WORDS {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Sends the count of the slot's key: denials `slot.base..total` of this CPU. If the ring
/// is full, they are counted as lost.
#[inline(always)]
fn repeats(e: &mut EventHeader, slot: &AggSlot, total: u64) {
    zero_header(e);
    e.hook = (slot.key[3] & 0xffff_ffff) as u32;
    e.flags = EVENT_F_REPEATS;
    e.tgid = slot.tgid;
    e.time_ns = slot.last_ns;
    // SAFETY: plain helper call.
    e.cpu = unsafe { bpf_get_smp_processor_id() };
    e.agg_base = slot.base;
    e.agg_total = total;
    e.agg_key = slot.key_seq;
    // SAFETY: `e` is a whole header (in the per-CPU value).
    let ret = unsafe {
        bpf_ringbuf_output(
            (&raw const EVENTS).cast_mut().cast::<c_void>(),
            core::ptr::from_mut(e).cast(),
            size_of::<EventHeader>() as u64,
            0,
        )
    };
    if ret != 0 {
        add_drops(total - slot.base);
    }
}

#[inline(always)]
fn send_here(w: Work) {
    let off = kread::offsets();
    let pid_tgid = unsafe { bpf_get_current_pid_tgid() };
    let now = unsafe { bpf_ktime_get_boot_ns() };
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let exe_file = kread::read_ptr(task, off.task_struct_mm)
        .and_then(|mm| kread::read_ptr(mm, off.mm_struct_exe_file))
        .map_or(0, |f| f as u64);
    let agg = sandbox_aggregate(w.index(), pid_tgid >> 32, exe_file, now);
    if agg & agg_ret::SEND == 0 {
        return;
    }
    let keyed = agg & agg_ret::KEYED != 0;
    let seq = agg >> agg_ret::SEQ;
    let Some(s) = w.mem() else {
        count_drop();
        return;
    };
    // Read where it is, not copied: the stacks of this function, `sandbox_aggregate` and
    // the hook's must fit in 512 bytes together.
    let rep = &s.report;
    let uid_gid = unsafe { bpf_get_current_uid_gid() };
    let parent = kread::read_ptr(task, off.task_struct_real_parent).unwrap_or(core::ptr::null());
    let ppid: u32 = kread::read(parent, off.task_struct_tgid).unwrap_or(0);
    let path_len = (PATH_END.saturating_sub(rep.path_start)) & (PATH_MAX as u32 - 1);
    let e: &mut EventHeader = &mut s.event;
    e.hook = rep.hook;
    e.decision = rep.decision;
    e.reason = rep.reason;
    e.flags = rep.flags | if keyed { EVENT_F_AGG_KEY } else { 0 };
    e.agg_key = seq;
    // SAFETY: plain helper call.
    e.cpu = unsafe { bpf_get_smp_processor_id() };
    e.pid = pid_tgid as u32;
    e.tgid = (pid_tgid >> 32) as u32;
    e.ppid = ppid;
    e.uid = uid_gid as u32;
    e.gid = (uid_gid >> 32) as u32;
    e.policy_id = rep.policy_id;
    e.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    e.time_ns = now;
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
    copy_addr(&mut e.addr, &rep.addr);
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
    let exe_len = sandbox_exe(w.index(), exe_file, path_len);
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
    } else if keyed && let Some(slot) = AGG.get_ptr_mut(0) {
        // SAFETY: a per-CPU map value, written under its lock (see `aggregate`). The key
        // counts from now on, unless another decision on this CPU made its own key
        // meanwhile; with the lock held by another decision it stays invalid (the next
        // identical denial is sent and becomes the key).
        unsafe {
            let lock = &raw mut (*slot).lock;
            if kread::write_begin(lock).is_some() {
                if (*slot).key_seq == seq {
                    (*slot).valid = 1;
                }
                kread::write_end(lock);
            }
        }
    }
}

/// What [`sandbox_aggregate`] returns: bit `SEND` clear when the denial was counted
/// (nothing to send); bit `KEYED` when the record starts a key, whose sequence number is
/// the rest (`>> SEQ`).
mod agg_ret {
    pub const SEND: u64 = 1;
    pub const KEYED: u64 = 2;
    pub const SEQ: u64 = 2;
}

/// [`aggregate`] of the report in working memory `work`, a global function: its outcomes
/// would otherwise be as many states of [`send_here`] for the verifier. Writes the
/// record's `agg_base` and `agg_total` in the working memory; returns the rest
/// ([`agg_ret`]).
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_aggregate(work: u32, tgid: u64, exe: u64, now: u64) -> u64 {
    let Some(s) = Work::at(work).mem() else {
        return agg_ret::SEND;
    };
    let Ok(agg) = aggregate(&s.report, &mut s.event, tgid as u32, exe, now) else {
        return 0;
    };
    // Volatile: two known zeros side by side would be a `memset` (see `Report::bare`).
    // SAFETY: fields of the per-CPU value.
    unsafe {
        core::ptr::write_volatile(&raw mut s.event.agg_base, agg.base);
        core::ptr::write_volatile(&raw mut s.event.agg_total, agg.base);
    }
    if agg.flags == 0 {
        agg_ret::SEND
    } else {
        agg_ret::SEND | agg_ret::KEYED | (agg.seq << agg_ret::SEQ)
    }
}

/// [`exe`], a global function: verified once per program, not once per state of
/// [`send_here`] that reaches it. Writes the record's `exe_dev` and `exe_len`; returns the
/// length.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn sandbox_exe(work: u32, file: u64, path_len: u32) -> u32 {
    let w = Work::at(work);
    let off = kread::offsets();
    let (dev, len) = exe(w, file as *const u8, off, path_len);
    if let Some(s) = w.mem() {
        s.event.exe_dev = dev;
        s.event.exe_len = len;
    }
    len
}

/// Builds the path of `file` (`current->mm->exe_file`, which the caller read once for the
/// aggregation key too) and appends it to the record after the `path_len` bytes of file
/// path. Returns (s_dev, length), or (0, 0) for kernel threads and
/// paths that do not resolve.
#[inline(always)]
fn exe(w: Work, file: *const u8, off: &sandbox_common::KernelOffsets, path_len: u32) -> (u32, u32) {
    let Ok(dentry) = kread::read_ptr(file, off.file_f_path_dentry) else {
        return (0, 0);
    };
    let sb = kread::read_ptr(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    let dev: u32 = kread::read(sb, off.super_block_s_dev).unwrap_or(0);
    let Ok(start) = crate::path::build_path(w, dentry) else {
        return (0, 0);
    };
    let Some(s) = w.mem() else {
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
    add_drops(1);
}

#[inline(always)]
fn add_drops(n: u64) {
    if let Some(c) = DROPS.get_ptr_mut(0) {
        kread::atomic_add(c, n);
    }
}
