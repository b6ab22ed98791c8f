//! The native benchmark's programs (`sandbox-user/benches/native.rs`, `cargo xtask bench
//! --native`): BPF iterators over a task's open files (`iter/task_file`) that run, for each
//! file, a part of what a `file_open` decision runs, with the same functions and the same
//! maps. They load and run on kernels that refuse BPF-LSM programs (any BPF trampoline),
//! so the decision's cost is measured at native speed, phase by phase, with the kernel's
//! BPF run statistics.
//!
//! No production path loads or attaches them: the loader attaches only the programs of
//! `sandbox_common::programs`, and aya loads a program only when asked. Each program is
//! one phase (a program per phase, so no map or global is added for a switch):
//!
//! | program | per file |
//! | --- | --- |
//! | `bench_empty` | nothing: the iterator's call and the statistics' own clock reads |
//! | `bench_facts` | `file_open`'s reads before resolving (mode, flags, dentry, inode, superblock) |
//! | `bench_walk` | the facts, then the dentry walk that builds the path |
//! | `bench_scope` | the scope lookup of the prologue (`hook!`), for the reading task |
//! | `bench_resolve` | the facts, then `path::resolve` (walk, scan, lookups; the directory cache as `DIR_CACHE_CTL` says) |
//! | `bench_resolve_cold` | the same after emptying the file's and the directory's cache slots (a miss, and the slot filled) |
//! | `bench_resolve_dir` | the same after emptying the file's and the name's slots only (the name scanned from the directory's state) |
//! | `bench_resolve_name` | the same after emptying the file's slot only (the name cache decides, and fills the file's slot) |
//! | `bench_forget_name` | emptying the file's and the name's slots alone (what the `_dir` rows spend on it) |
//! | `bench_open` | the whole `file_open` body after the prologue's verdict check: scope, decision, record on a deny |
//! | `bench_open_cold` | the same after emptying the directory's cache slot |
//! | `bench_open_dir` | the same after emptying the name's slot only |
//!
//! The task whose files are iterated is chosen by the link (`bpf_iter_link_info.task`).
//! The programs write nothing to the iterator's output.
//!
//! Beside them, the floor of the hook-overhead benchmark (`cargo xtask bench`, in a guest):
//! BPF-LSM programs that decide nothing (`floor_*`: an earlier program's verdict passed
//! on, the rest allowed), on the hooks that benchmark's loops go
//! through, attached by `sandbox-user/examples/floor.rs`. What any BPF-LSM program costs
//! there (the BPF LSM's call of the hook, the trampoline, the program's entry and exit),
//! which sandbox's programs are then measured against. Never loaded by the loader either.

use core::ffi::c_void;

use crate::dircache;
use crate::filecache;
use crate::kread;
use crate::namecache;
use crate::path;

/// The policy the benchmark applies (the loader's `Enforcer` writes policy 0).
const POLICY: u32 = 0;

/// `struct bpf_iter__task_file`: meta, task, fd (u32, padded), file.
const CTX_FILE: usize = 3;

/// The file of this call, typed by the verifier as `file_open`'s argument is (NULL: the
/// call that ends the iteration; the programs test it first).
#[inline(always)]
fn file_of(ctx: *mut c_void) -> *const u8 {
    // SAFETY: the iterator's context holds `CTX_FILE + 1` pointer-sized fields.
    unsafe { *ctx.cast::<*const u8>().add(CTX_FILE) }
}

/// The file's dentry and its directory's inode.
#[inline(always)]
fn dentry_and_directory(file: *const u8) -> Option<(*const u8, u64)> {
    let off = kread::offsets();
    let dentry = kread::read_ptr(file, off.file_f_path_dentry).ok()?;
    let parent = kread::read_ptr(dentry, off.dentry_d_parent).ok()?;
    let inode = kread::read_ptr(parent, off.dentry_d_inode).ok()?;
    Some((dentry, inode as u64))
}

/// Empties the cache slot of the directory the file is in, so that the next decision
/// about it misses.
#[inline(always)]
fn forget_directory(file: *const u8) {
    forget_file(file);
    if let Some((_, dir)) = dentry_and_directory(file) {
        dircache::forget(dir);
    }
}

/// Empties the file cache's slot of the file, so that the next decision about it finds
/// its name's result.
#[inline(always)]
fn forget_file(file: *const u8) {
    filecache::forget(&filecache::Key::of(&facts(file)));
}

/// Empties the name cache's slot of the file (its directory's slot stays), so that the
/// next decision about it scans its name from the directory's kept state.
#[inline(always)]
fn forget_name(file: *const u8) {
    forget_file(file);
    let Some((dentry, dir)) = dentry_and_directory(file) else {
        return;
    };
    let off = kread::offsets();
    let len: u32 = kread::read(dentry, off.dentry_d_name_len).unwrap_or(0);
    let src: u64 = kread::read(dentry, off.dentry_d_name_name).unwrap_or(0);
    let mut name = namecache::Name {
        words: [0; namecache::NAME_WORDS],
        len: 0,
        _pad: 0,
    };
    namecache::read(&mut name, len, src);
    namecache::forget(dir, &name);
}

/// What `file_open` reads of the file before resolving it.
#[inline(always)]
fn facts(file: *const u8) -> path::FileFacts {
    let off = kread::offsets();
    let f_mode: u32 = kread::field(file, off.file_f_mode).unwrap_or(0);
    let f_flags: u32 = kread::field(file, off.file_f_flags).unwrap_or(0);
    let mut facts = path::typed_file_facts(file, &off);
    // Kept, so that the reads are not optimised away.
    facts.flags = f_mode ^ f_flags;
    facts
}

/// The whole `file_open` body for an in-scope reader (the iterator runs in the reading
/// task: the benchmark binds the reader's cgroup to the policy).
#[inline(always)]
fn open(file: *const u8) {
    // Inlined: an outlined closure's frame would come on top of the iterator's, past the
    // 512 bytes of the deepest call chain.
    crate::scope::decide(
        0,
        #[inline(always)]
        |scope| crate::hooks::file::open::<false>(file, scope),
    );
}

macro_rules! bench {
    ($name:ident, |$file:ident| $body:expr) => {
        #[unsafe(no_mangle)]
        #[unsafe(link_section = "iter/task_file")]
        pub extern "C" fn $name(ctx: *mut c_void) -> i32 {
            let $file = file_of(ctx);
            if !$file.is_null() {
                $body;
            }
            0
        }
    };
}

bench!(bench_empty, |file| core::hint::black_box(file));

bench!(bench_facts, |file| core::hint::black_box(facts(file).flags));

bench!(bench_walk, |file| {
    let f = facts(file);
    // A number, not the typed pointer: the walk is a global function.
    let dentry = kread::untyped(f.dentry) as *const u8;
    core::hint::black_box(crate::work::with_claim(|mem| {
        mem.work()
            .map_or(0, |w| path::build_path(w, dentry).unwrap_or(0))
    }))
});

bench!(bench_scope, |file| core::hint::black_box(
    crate::scope::decide(0, |s| s.policy_id)
));

bench!(bench_resolve, |file| {
    let mut f = facts(file);
    core::hint::black_box(matches!(
        crate::work::with_claim(|mem| path::resolve_typed(mem, POLICY, &mut f)),
        path::Resolved::Matched(_)
    ))
});

bench!(bench_resolve_cold, |file| {
    forget_directory(file);
    let mut f = facts(file);
    core::hint::black_box(matches!(
        crate::work::with_claim(|mem| path::resolve_typed(mem, POLICY, &mut f)),
        path::Resolved::Matched(_)
    ))
});

bench!(bench_resolve_dir, |file| {
    forget_name(file);
    let mut f = facts(file);
    core::hint::black_box(matches!(
        crate::work::with_claim(|mem| path::resolve_typed(mem, POLICY, &mut f)),
        path::Resolved::Matched(_)
    ))
});

bench!(bench_resolve_name, |file| {
    forget_file(file);
    let mut f = facts(file);
    core::hint::black_box(matches!(
        crate::work::with_claim(|mem| path::resolve_typed(mem, POLICY, &mut f)),
        path::Resolved::Matched(_)
    ))
});

bench!(bench_forget_name, |file| forget_name(file));

bench!(bench_open, |file| open(file));

bench!(bench_open_dir, |file| {
    forget_name(file);
    open(file);
});

bench!(bench_open_cold, |file| {
    forget_directory(file);
    open(file);
});

/// `openat`'s number on x86-64, and where `struct pt_regs` keeps the number of the syscall
/// (`orig_ax`, the architecture's ABI): what `tp_btf/sys_exit` tells the syscall by.
const SYS_OPENAT: u64 = 257;
const PT_REGS_ORIG_AX: u32 = 120;
/// Descriptors below this are found (in `files_struct.fd_array`, the table a process starts
/// with: the harness's loops run in a process of few descriptors).
const FD_LIMIT: u32 = 16;

/// The file the current task's `openat` has just opened, at the syscall's exit, typed by the
/// verifier as an iterator's is (a member of `files_struct.fd_array`); NULL for any other
/// syscall, a failed one, or a descriptor past [`FD_LIMIT`].
#[inline(always)]
fn opened_file(ctx: *mut c_void) -> *const u8 {
    // SAFETY: `sys_exit`'s context is (struct pt_regs *regs, long ret).
    let (regs, ret) = unsafe { (*ctx.cast::<*const u8>(), *ctx.cast::<i64>().add(1)) };
    let nr: u64 = kread::field(regs, PT_REGS_ORIG_AX).unwrap_or(0);
    if nr != SYS_OPENAT || !(0..i64::from(FD_LIMIT)).contains(&ret) {
        return core::ptr::null();
    }
    let off = kread::offsets();
    if off.task_struct_files == 0 {
        return core::ptr::null();
    }
    // SAFETY: plain helper call; the task is the current one.
    let task = unsafe { aya_ebpf::helpers::bpf_get_current_task_btf() }
        .cast_const()
        .cast::<u8>();
    let files: *const u8 = kread::field(task, off.task_struct_files).unwrap_or(core::ptr::null());
    // Only while the table is the one a process starts with: once it grew, its array is
    // elsewhere and `fd_array` is stale.
    let fdt: *const u8 = kread::field(files, off.files_struct_fdt).unwrap_or(core::ptr::null());
    let array = kread::untyped(files) + u64::from(off.files_struct_fd_array);
    if kread::read::<u64>(fdt, off.fdtable_fd) != Ok(array) {
        return core::ptr::null();
    }
    let mut file = core::ptr::null();
    // One load at a constant offset per descriptor: the verifier types a member only at an
    // offset it knows.
    for fd in 0..FD_LIMIT {
        if ret == i64::from(fd) {
            file = kread::field(files, off.files_struct_fd_array + 8 * fd)
                .unwrap_or(core::ptr::null());
        }
    }
    file
}

/// A program on `tp_btf/sys_exit` that runs `$body` with the file an `openat` opened: the
/// decision in the very syscall it judges, its data as hot as the open left it (an
/// iterator visits them cold). Nothing calls `sys_exit` programs but syscalls.
macro_rules! at_exit {
    ($name:ident, |$file:ident| $body:expr) => {
        #[unsafe(no_mangle)]
        #[unsafe(link_section = "tp_btf/sys_exit")]
        pub extern "C" fn $name(ctx: *mut c_void) -> i32 {
            let $file = opened_file(ctx);
            if !$file.is_null() {
                $body;
            }
            0
        }
    };
}

at_exit!(bench_sys_empty, |file| core::hint::black_box(file));

at_exit!(bench_sys_scope, |file| core::hint::black_box(
    crate::scope::decide(0, |s| s.policy_id)
));

at_exit!(bench_sys_facts, |file| core::hint::black_box(
    crate::scope::decide(0, |_| facts(file).flags)
));

at_exit!(bench_sys_lookup, |file| core::hint::black_box(
    crate::scope::decide(0, |s| {
        let f = facts(file);
        filecache::lookup(s.policy_id, f.dentry, f.ino, f.dev)
    })
));

at_exit!(bench_sys_open, |file| open(file));

/// A BPF-LSM program on `$hook` that decides nothing: it passes an earlier program's
/// verdict on (as every program must: one that returned 0 would undo sandbox's denies if
/// it were ever loaded beside them) and allows the rest. The verdict's place is the hook's
/// arity, from sandbox's own program of the same name (`sandbox_common::programs`).
macro_rules! floor {
    ($name:ident, $hook:literal) => {
        #[aya_ebpf::macros::lsm(hook = $hook)]
        pub fn $name(ctx: aya_ebpf::programs::LsmContext) -> i32 {
            const PREV: usize = sandbox_common::programs::arity($hook);
            let prev: i32 = ctx.arg(PREV);
            if prev != 0 {
                return crate::hooks::honour(prev);
            }
            0
        }
    };
}

floor!(floor_file_open, "file_open");
floor!(floor_file_ioctl, "file_ioctl");
floor!(floor_socket_create, "socket_create");
floor!(floor_socket_connect, "socket_connect");
floor!(floor_bprm_check_security, "bprm_check_security");
floor!(floor_task_alloc, "task_alloc");
