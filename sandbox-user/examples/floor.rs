//! `floor`: the hook-overhead benchmark's floor (`cargo xtask bench`, run in the guest as
//! `/usr/bin/sandbox-floor`). Attaches BPF-LSM programs that decide nothing
//! (`sandbox-ebpf/src/bench.rs`, `floor_*`: an earlier program's deny is passed on) to the hooks the benchmark's loops go through,
//! prints `attached`, and holds them until it is killed (the links close with it). What
//! any BPF-LSM program costs on those hooks, measured in the same run as sandbox's own.
//! Not a part of sandbox: nothing is confined by it.

use aya::programs::Lsm;
use aya::{Btf, EbpfLoader};

/// The programs and their hooks (`floor!` in `bench.rs`).
const FLOOR: [(&str, &str); 6] = [
    ("floor_file_open", "file_open"),
    ("floor_file_ioctl", "file_ioctl"),
    ("floor_socket_create", "socket_create"),
    ("floor_socket_connect", "socket_connect"),
    ("floor_bprm_check_security", "bprm_check_security"),
    ("floor_task_alloc", "task_alloc"),
];

fn main() -> anyhow::Result<()> {
    let btf = Btf::from_sys_fs()?;
    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .load(sandbox_user::BPF_OBJECT)?;
    let mut links = Vec::new();
    for (name, hook) in FLOOR {
        let prog: &mut Lsm = ebpf
            .program_mut(name)
            .ok_or_else(|| anyhow::anyhow!("{name} is not in the object"))?
            .try_into()?;
        prog.load(hook, &btf)?;
        links.push(prog.attach()?);
    }
    println!("attached {} programs", links.len());
    loop {
        std::thread::park();
    }
}
