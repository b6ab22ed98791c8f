//! Raw reads of kernel memory. The only module that dereferences kernel pointers, at
//! offsets the loader read from the running kernel's BTF: through `bpf_probe_read_kernel`
//! (which faults safely, returning an error, on a bad address), or, for pointers the
//! verifier types from BTF, with a guarded load ([`field`]: a fault reads 0).

use aya_ebpf::Global;
use aya_ebpf::helpers::bpf_probe_read_kernel;
use sandbox_common::KernelOffsets;

/// Struct offsets of the running kernel, written by the loader from BTF before load
/// (`sandbox_common::OFFSETS_GLOBAL`). Every read below takes its offset from here.
#[unsafe(no_mangle)]
static OFFSETS: Global<KernelOffsets> = Global::new(KernelOffsets::ZERO);

/// The offsets, as a reference through which only the fields used are loaded.
/// `Global::load` is a volatile read of the whole struct: every hook that called it loaded
/// all of its fields (over 40 loads) at every call. The pointer is hidden from the
/// optimiser instead (a volatile read of it), so the loader's values are read, never the
/// initialiser's zeros; the verifier still sees a pointer into the frozen `.rodata`, whose
/// loads it knows as constants.
#[inline(always)]
pub fn offsets() -> &'static KernelOffsets {
    let p: *const KernelOffsets = (&raw const OFFSETS).cast();
    // SAFETY: `Global` is `repr(transparent)` over an initialised `KernelOffsets`, and the
    // static lives as long as the program; reading the local pointer back is plain.
    unsafe { &*core::ptr::read_volatile(&raw const p) }
}

/// Reads a `T` at `base + off`.
#[inline(always)]
pub fn read<T: Copy>(base: *const u8, off: u32) -> Result<T, i32> {
    if base.is_null() {
        return Err(-1);
    }
    // SAFETY: bpf_probe_read_kernel validates the address; a bad one yields Err, never a
    // fault. `T: Copy` is a plain integer or pointer here.
    unsafe { bpf_probe_read_kernel(base.wrapping_add(off as usize).cast::<T>()) }
}

/// Reads a `T` at `base + off` where `base` is a pointer the verifier types from BTF (a
/// hook's argument, or a pointer field read with this function from one; never a number
/// that came from a map or from [`read`]): one load instruction, which the kernel guards
/// as it does a probe read (a fault reads 0), without the helper call. The offset is a
/// constant to the verifier (the loader writes `OFFSETS` into the frozen `.rodata`), so it
/// checks the access against the field's BTF type and size; a wrong use fails the load,
/// never a decision.
#[inline(always)]
pub fn field<T: Copy>(base: *const u8, off: u32) -> Result<T, i32> {
    if base.is_null() {
        return Err(-1);
    }
    // SAFETY: a BPF_PROBE_MEM load: the verifier checks it against BTF, the JIT guards it.
    Ok(unsafe { core::ptr::read_volatile(base.wrapping_add(off as usize).cast::<T>()) })
}

/// The magic number of the file system of `dentry` (typed by the verifier): what
/// `procfs.rs` and `nsfs.rs` tell their files by.
#[inline(always)]
pub fn sb_magic(dentry: *const u8, off: &KernelOffsets) -> u64 {
    let sb: *const u8 = field(dentry, off.dentry_d_sb).unwrap_or(core::ptr::null());
    field::<u64>(sb, off.super_block_s_magic).unwrap_or(0)
}

/// Reads a kernel pointer at `base + off`.
#[inline(always)]
pub fn read_ptr(base: *const u8, off: u32) -> Result<*const u8, i32> {
    read::<*const u8>(base, off)
}

/// Hides a value from the optimiser, so that a following mask is kept: LLVM drops masks it
/// can prove redundant from an earlier check on another register, and then the verifier no
/// longer sees the bound on the register that is used.
#[inline(always)]
pub fn opaque(v: u32) -> u32 {
    // SAFETY: a volatile read of a local.
    unsafe { core::ptr::read_volatile(&raw const v) }
}

/// `v`, as a number the verifier no longer knows (at run time it is `v`): `unknown` is one
/// the verifier does not know (read from a map), and `v ^ (unknown ^ unknown)` through two
/// copies LLVM cannot merge is unknown to it too. A deny's reason and rule are constants
/// that differ at every `return` of a decision, and each kept a state of its own through
/// the whole report: on 6.1 a name hook's report was verified many times over.
#[inline(always)]
pub fn forget(v: u32, unknown: u32) -> u32 {
    v ^ (opaque(unknown) ^ opaque(unknown))
}

/// `*v = 0` as one store that LLVM does not merge with its neighbours into a `memset`
/// call (in BPF, a loop of byte stores: about a nanosecond a byte).
#[inline(always)]
pub fn zero<T: Default>(v: &mut T) {
    // SAFETY: a volatile write of a valid `T` through a unique reference.
    unsafe { core::ptr::write_volatile(v, T::default()) }
}

/// Copies `len` bytes (masked to below `NAME_MAX`) from kernel address `src` into `dst`.
#[inline(always)]
pub fn read_bytes(dst: *mut u8, len: u32, src: *const u8) -> Result<(), i32> {
    // SAFETY: `dst` points into a per-CPU map value with at least NAME_MAX bytes after it
    // (the callers mask the offset); the helper validates `src`.
    let ret = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            dst.cast(),
            opaque(len) & (sandbox_common::NAME_MAX as u32 - 1),
            src.cast(),
        )
    };
    if ret == 0 { Ok(()) } else { Err(ret as i32) }
}

/// A kernel pointer as a plain number, for the argument of a global function (which takes
/// scalars only: a pointer the verifier types from the hook's arguments, `ptr_dentry` and
/// the like, is refused). Copied through `bpf_probe_read_kernel`, whose output the verifier
/// knows nothing about; 0 (a NULL every reader fails closed on) if that fails.
#[inline(always)]
pub fn untyped(p: *const u8) -> u64 {
    let v = p;
    read::<u64>((&raw const v).cast(), 0).unwrap_or(0)
}

/// Takes a slot's sequence lock for writing: `Some(odd value)` when it was even and this
/// writer moved it on; `None` when another writer holds it (the caller gives up).
/// [`write_end`] releases it. Readers read the lock before and after their copy.
#[inline(always)]
pub fn write_begin(lock: *mut u64) -> Option<u64> {
    // SAFETY: `lock` points to an aligned u64 of a map value (the callers pass one).
    let seq = unsafe { core::ptr::read_volatile(lock) };
    (seq & 1 == 0 && compare_exchange(lock, seq, seq + 1)).then_some(seq + 1)
}

/// Releases a lock taken by [`write_begin`] (even again, two above where it was).
#[inline(always)]
pub fn write_end(lock: *mut u64) {
    atomic_add(lock, 1);
}

/// `*p += v` as one atomic instruction (`BPF_ATOMIC | BPF_ADD`, without fetch: any kernel
/// with BPF LSM has it). Programs preempted on the same CPU may add to the same per-CPU
/// counter; a plain load-add-store could lose one of the adds.
#[inline(always)]
pub fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: `p` points to an aligned u64 of a map value (the callers pass one).
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {v}",
            p = in(reg) p,
            v = in(reg) v,
            options(nostack),
        );
    }
}

/// `*p = new` if `*p == old`, as one atomic instruction (`BPF_ATOMIC | BPF_CMPXCHG`, 5.12+,
/// fully ordered); whether it swapped.
#[inline(always)]
pub fn compare_exchange(p: *mut u64, old: u64, new: u64) -> bool {
    let seen: u64;
    // SAFETY: `p` points to an aligned u64 of a map value (the callers pass one).
    unsafe {
        core::arch::asm!(
            "r0 = cmpxchg_64({p} + 0, r0, {new})",
            p = in(reg) p,
            new = in(reg) new,
            inout("r0") old => seen,
            options(nostack),
        );
    }
    seen == old
}
