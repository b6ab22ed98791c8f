//! BPF-LSM programs of `sandbox`. Thin hooks: all policy lives in maps that the loader fills;
//! these programs only find the policy of the current task's cgroup, resolve what is being
//! accessed (canonical path, address, binary), decide with `sandbox_common::decide` and
//! report denies. The programs are in `hooks/`, one file per concern.
#![no_std]
#![no_main]
// `asm!` for the atomic add and compare-exchange (`kread`): the BPF target has no atomic
// read-modify-write in `core`.
#![feature(asm_experimental_arch)]
// `#[inline(always)]` on a closure (the native benchmark's `file_open` body).
#![feature(stmt_expr_attributes)]

mod addr;
mod bench;
mod diag;
mod dircache;
mod event;
mod filecache;
mod hooks;
mod kread;
mod maps;
mod moves;
mod namecache;
mod nsfs;
mod own;
mod path;
mod procfs;
mod scope;
mod shm;
mod terminal;
mod work;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // SAFETY: the programs are written so that no panicking path is reachable (indexes are
    // masked); the verifier rejects any program that could reach this.
    unsafe { core::hint::unreachable_unchecked() }
}
