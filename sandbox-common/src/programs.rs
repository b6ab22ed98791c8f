//! The one table of BPF-LSM programs: which program attaches to which hook, with how many
//! parameters, and whether the hook may be missing. Read by the BPF side (the earlier
//! program's verdict sits right after the hook's parameters: [`arity`] at compile time)
//! and by the loader (which form of a hook fits the running kernel's BTF). Also the table
//! of the fallback backend's cgroup programs ([`CGROUP_PROGRAMS`]).

/// One BPF-LSM program of the object. A hook whose parameters changed between kernels has
/// one program per form; the loader attaches the one that fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// The program's function name in the object.
    pub name: &'static str,
    /// The LSM hook (`bpf_lsm_<hook>` in the kernel's BTF).
    pub hook: &'static str,
    /// Parameters of the hook for this program; the earlier verdict is parameter `arity`.
    pub arity: usize,
    /// A hook older kernels lack (the operation goes through another hook there): skipped
    /// when the kernel has no such hook.
    pub optional: bool,
}

const fn prog(name: &'static str, hook: &'static str, arity: usize) -> Program {
    Program {
        name,
        hook,
        arity,
        optional: false,
    }
}

const fn newer(name: &'static str, hook: &'static str, arity: usize) -> Program {
    Program {
        name,
        hook,
        arity,
        optional: true,
    }
}

/// Every program, in attach order (the last attached runs first).
pub const PROGRAMS: &[Program] = &[
    // hooks/file.rs
    prog("file_open", "file_open", 1),
    prog("path_notify", "path_notify", 3),
    prog("inode_free_security", "inode_free_security", 1),
    prog("d_instantiate", "d_instantiate", 2),
    // hooks/exec.rs
    prog("bprm_check_security", "bprm_check_security", 1),
    // hooks/names.rs
    prog("inode_create", "inode_create", 3),
    prog("inode_mknod", "inode_mknod", 4),
    prog("inode_mkdir", "inode_mkdir", 3),
    prog("inode_symlink", "inode_symlink", 3),
    prog("inode_unlink", "inode_unlink", 2),
    prog("inode_rmdir", "inode_rmdir", 2),
    prog("inode_link", "inode_link", 3),
    prog("path_link", "path_link", 3),
    prog("inode_rename", "inode_rename", 4),
    prog("path_rename", "path_rename", 5),
    prog("inode_setattr_2", "inode_setattr", 2),
    prog("inode_setattr_3", "inode_setattr", 3),
    prog("inode_setxattr", "inode_setxattr", 6),
    prog("inode_removexattr", "inode_removexattr", 3),
    // POSIX ACLs have their own hooks since 6.2 (before, they were plain xattrs).
    newer("inode_set_acl", "inode_set_acl", 4),
    newer("inode_remove_acl", "inode_remove_acl", 3),
    // File attributes by name (`file_setattr(2)`) and by ioctl, from 6.17.
    newer("inode_file_setattr", "inode_file_setattr", 2),
    // hooks/net.rs
    prog("socket_create", "socket_create", 4),
    prog("socket_connect", "socket_connect", 3),
    prog("socket_sendmsg", "socket_sendmsg", 3),
    prog("socket_listen", "socket_listen", 2),
    prog("socket_bind", "socket_bind", 3),
    prog("socket_setsockopt", "socket_setsockopt", 3),
    prog("unix_stream_connect", "unix_stream_connect", 3),
    prog("unix_may_send", "unix_may_send", 2),
    // hooks/protect.rs
    prog("bpf_3", "bpf", 3),
    prog("bpf_4", "bpf", 4),
    prog("task_kill", "task_kill", 4),
    prog("ptrace_access_check", "ptrace_access_check", 2),
    prog("task_setnice", "task_setnice", 2),
    prog("task_setioprio", "task_setioprio", 2),
    prog("key_permission", "key_permission", 3),
    prog("key_alloc", "key_alloc", 3),
    prog("task_setscheduler", "task_setscheduler", 1),
    prog("task_movememory", "task_movememory", 1),
    prog("file_ioctl", "file_ioctl", 3),
    // The compat (32-bit) ioctl path has its own hook since 6.8 (backported to some
    // stable kernels); before, compat ioctls went through file_ioctl.
    newer("file_ioctl_compat", "file_ioctl_compat", 3),
    prog("sb_mount", "sb_mount", 5),
    prog("move_mount", "move_mount", 2),
    prog("sb_pivotroot", "sb_pivotroot", 2),
    prog("sb_umount", "sb_umount", 2),
    prog("task_alloc", "task_alloc", 2),
    prog("task_setrlimit", "task_setrlimit", 3),
    prog("kernel_read_file", "kernel_read_file", 3),
    prog("kernel_load_data", "kernel_load_data", 2),
    prog("locked_down", "locked_down", 1),
    prog("file_send_sigiotask", "file_send_sigiotask", 3),
    prog("file_fcntl", "file_fcntl", 3),
    // 6.1+: every kernel sandbox supports.
    prog("userns_create", "userns_create", 1),
];

/// A program that counts directory moves (`sandbox-ebpf/src/moves.rs`): `fentry` or
/// `fexit` of a kernel function that moves dentries (`__d_move`'s callers). Every path to
/// `__d_move` goes through one of these functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoveProgram {
    /// The program's function name in the object.
    pub name: &'static str,
    /// The kernel function it is attached to.
    pub function: &'static str,
    /// `fexit` (runs after the function returns); else `fentry`.
    pub exit: bool,
    /// Absent from some kernels (`d_splice_alias_ops`, 6.15+): skipped when the kernel's
    /// BTF has no such function.
    pub optional: bool,
}

const fn mover(
    name: &'static str,
    function: &'static str,
    exit: bool,
    optional: bool,
) -> MoveProgram {
    MoveProgram {
        name,
        function,
        exit,
        optional,
    }
}

/// The move programs, in attach order: every `fexit` before any `fentry`, so that no call
/// ends counted that did not begin counted (`moves.rs` matches them per task besides).
/// `vfs_rename` (a frame for the beginnings `inode_rename` counts), `d_move` and
/// `d_exchange` (renames, and file systems' own moves), `d_splice_alias` and
/// `d_splice_alias_ops` (6.15+: what it calls) end the moves `d_instantiate` began.
pub const MOVE_PROGRAMS: &[MoveProgram] = &[
    mover("move_exit_vfs_rename", "vfs_rename", true, false),
    mover("move_exit_d_move", "d_move", true, false),
    mover("move_exit_d_exchange", "d_exchange", true, false),
    mover("move_exit_d_splice_alias", "d_splice_alias", true, false),
    mover(
        "move_exit_d_splice_alias_ops",
        "d_splice_alias_ops",
        true,
        true,
    ),
    mover("move_enter_vfs_rename", "vfs_rename", false, false),
    mover("move_enter_d_move", "d_move", false, false),
    mover("move_enter_d_exchange", "d_exchange", false, false),
];

/// The program the backend probe loads to learn whether this kernel runs BPF-LSM programs:
/// the cheapest to verify (a few dozen instructions; `file_open` takes seconds under
/// emulation).
pub const PROBE: &str = "file_send_sigiotask";
const _: &Program = find(PROBE);

/// A program of the fallback backend (kernels that cannot run BPF-LSM programs): a
/// `cgroup_sock_addr` program attached to the run's cgroup rather than to an LSM hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupProgram {
    /// The program's function name in the object (its section is `cgroup/<name>`).
    pub name: &'static str,
    /// What it judges, for messages.
    pub what: &'static str,
}

/// The fallback backend's programs (hooks/sockaddr.rs): the network rules by destination.
/// `connect_unix`/`sendmsg_unix` (6.7+) are not among them: they see the peer's name but
/// not whether it is inside the sandbox, which `network.unix` needs.
pub const CGROUP_PROGRAMS: &[CgroupProgram] = &[
    CgroupProgram {
        name: "connect4",
        what: "IPv4 connect",
    },
    CgroupProgram {
        name: "connect6",
        what: "IPv6 connect",
    },
    CgroupProgram {
        name: "sendmsg4",
        what: "IPv4 UDP send with a destination",
    },
    CgroupProgram {
        name: "sendmsg6",
        what: "IPv6 UDP send with a destination",
    },
];

/// The `cgroup_skb/egress` program (hooks/egress.rs), attached to the run's cgroup with
/// either backend: it drops packets whose IP header routes them past the address judged
/// (a source route, a routing header), which `sendmmsg` can send past `socket_sendmsg`.
pub const EGRESS: CgroupProgram = CgroupProgram {
    name: "egress",
    what: "packets routed past the address judged",
};

/// The program named `name` (compile-time: an unknown name fails the build).
pub const fn find(name: &str) -> &'static Program {
    let mut i = 0;
    while i < PROGRAMS.len() {
        if str_eq(PROGRAMS[i].name, name) {
            return &PROGRAMS[i];
        }
        i += 1;
    }
    panic!("program missing from sandbox_common::programs::PROGRAMS");
}

/// Parameters of the hook of program `name`: the index of the earlier verdict.
pub const fn arity(name: &str) -> usize {
    find(name).arity
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
