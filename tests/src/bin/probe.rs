//! `sandbox-probe`: performs real operations and reports the kernel's answer, one line each:
//! `PROBE <op> <args> -> OK|<ERRNO>`. Several operations run in one process when separated
//! by `::`, so one `sandbox run` can check many things.
//!
//!   open PATH [r|w|rw|creat]     open(2), then close
//!   connect ADDR PORT            TCP connect (IPv4 or IPv6), 1 s timeout
//!   udp ADDR PORT                unconnected UDP sendto
//!   ping ADDR PORT               an echo request by sendto on a ping socket, OK on the reply;
//!                                ping-connect ADDR PORT: connect, then send
//!   raw-send ADDR PORT           an echo request by sendto on a raw ICMP socket; raw-udp
//!                                ADDR: a raw UDP socket; raw-hdrincl[-solraw] ADDR: a raw
//!                                socket told to take its IP header from the sender
//!   srh-send ADDR PORT SEG       UDP sendto from a socket with a segment routing header
//!   exec PATH [ARGS...]          fork + execve; reports the execve errno or the exit status
//!   cgroup-child NAME            create a child of this process's cgroup and move into it
//!   symlink TARGET LINK          create a symlink
//!   mkdir|rmdir|unlink PATH      make or remove a name
//!   rename FROM TO, link FROM TO rename, hard link
//!   sleep MS
//!   unix-connect|unix-send PATH|@NAME   stream connect / datagram send to a unix socket
//!   unix-self PATH|@NAME         serve a stream unix socket and connect to it (one process)
//!   ptrace|mem|environ|getfd|kill|setnice PID [ARG]   reach another process
//!   vm-read PID ADDR             `process_vm_readv` of one byte (hex ADDR)
//!   tiocsti PATH                 TIOCSTI into the terminal PATH
//!   tiocsti-own                  TIOCSTI into a new pty of our own (as its session leader)
//!   socket FAMILY TYPE PROTO     socket(2) with numeric arguments
//!   listen ADDR PORT             TCP bind + listen; udp-bind ADDR PORT: UDP bind
//!   udp-unspec ADDR PORT           UDP sendto an IPv4 address labelled `AF_UNSPEC`
//!   clone-into-cgroup DIR        clone3 with `CLONE_INTO_CGROUP` into the cgroup DIR
//!   umount PATH                  umount(2)
//!   finit-module PATH            `finit_module` of the file PATH
//!   ioperm                       ioperm(0x80, 1, 1): port I/O (a lockdown check)
//!   sigio-parent                 make the parent the owner of a socket's `SIGIO`, then
//!                                trigger it (the default action of `SIGIO` ends a process)
//!   prlimit PID                  lower the soft `RLIMIT_CORE` of PID to 0 (`prlimit`)
//!   fork-n N                     N children at once (OK, or the first fork's errno)
//!   alloc MB                     map MB MiB of anonymous memory and touch every page
//!   spin MS                      keep a CPU busy until the process has used MS ms of CPU time
//!   write-direct PATH MB [CHUNK] write MB MiB (`256K`: KiB) to PATH past the page cache
//!                                (`O_DIRECT`), CHUNK bytes a write (64K), then say how
//!                                long it took on stdout (`io: ... in N ms`)
//!   read-direct PATH             read PATH past the page cache, and say how long it took
//!   write-sync PATH MB           write MB MiB to PATH through the page cache, then fsync,
//!                                and say how long it took
//!   sched-fifo                   real-time scheduling (`SCHED_FIFO`, priority 1; the soft
//!                                `RLIMIT_RTPRIO` raised to the hard one first), then back
//!   sched-show                   this process's policy, nice and I/O class (`OTHER 0 2`)
//!   userns-unshare, userns-clone a user namespace by `unshare` (in a child) or `clone`
//!   open-ppid REL MODE           open /proc/PARENT/REL (like open)
//!   race-open DENIED ALLOWED N [T]  T threads (2) pinned to CPU 0, opening DENIED and ALLOWED
//!                                N times each: how often each got the other's answer
//!   whoami                       uids, gids, `no_new_privs`, capability sets
//!   open-n PATH N                open PATH for reading N times, count the outcomes
//!   raw-socket                   open an ICMP raw socket (`CAP_NET_RAW`)
//!   fd-read N, fd-write N        read or write a byte of descriptor N (one held at start)
//!   key-add DESC                 `add_key` of a "user" key DESC to the user keyring
//!   key-read DESC                find the "user" key DESC in the user keyring and read it
//!   key-session                  join a new session keyring and add a key to it
//!   key-listed DESC              whether /proc/keys lists a key described DESC
//!   watch PATH                   an inotify watch on PATH (every event)
//!   setresuid R E S              set this process's real, effective and saved uids
//!   setfsuid U                   set this process's filesystem uid (OK when it took)
//!   shm-make KEY, shm-read KEY, shm-rm KEY   a System V shared memory segment (numeric KEY):
//!                                make it holding "the secret", read it back, remove it
//!   mq-make NAME, mq-take NAME   a POSIX message queue: make it holding "the secret";
//!                                take the message (`mq_open`)
//!   mq-take-path PATH            take a message from the queue file PATH, opened by path
//!   qemu-exit N                  leave the VM with status N (isa-debug-exit)
//!   (no arguments)               exit 0: copies of this binary serve as exec targets
#![expect(
    clippy::cast_possible_truncation,
    clippy::cast_ptr_alignment,
    reason = "raw system calls: syscall(2) returns a long that holds an int, sockaddr fields \
              and lengths are the kernel's narrower types, and the kernel aligns io_uring's \
              ring offsets"
)]

use std::ffi::CString;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::ffi::OsStrExt;

fn errno_name(e: i32) -> String {
    let n = match e {
        0 => "OK",
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOENT => "ENOENT",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        libc::EINVAL => "EINVAL",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::ELOOP => "ELOOP",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::EEXIST => "EEXIST",
        libc::ENOEXEC => "ENOEXEC",
        libc::EXDEV => "EXDEV",
        libc::EFAULT => "EFAULT",
        libc::ESRCH => "ESRCH",
        libc::ENXIO => "ENXIO",
        libc::EIO => "EIO",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::ENOTTY => "ENOTTY",
        libc::EBADF => "EBADF",
        libc::ENOSYS => "ENOSYS",
        libc::EAGAIN => "EAGAIN",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => return format!("E{e}"),
    };
    n.to_owned()
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn cstr(s: &str) -> CString {
    CString::new(s.as_bytes()).expect("no NUL in argument")
}

fn op_open(path: &str, mode: &str) -> String {
    let flags = match mode {
        "w" => libc::O_WRONLY,
        "rw" => libc::O_RDWR,
        "creat" => libc::O_WRONLY | libc::O_CREAT,
        // Read-only, yet it truncates (the kernel wants write permission for it; the open
        // hook sees a read).
        "rtrunc" => libc::O_RDONLY | libc::O_TRUNC,
        _ => libc::O_RDONLY,
    };
    let p = cstr(path);
    // SAFETY: plain syscalls on a valid C string.
    let fd = unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC, 0o644) };
    if fd < 0 {
        return errno_name(last_errno());
    }
    // SAFETY: fd was just opened.
    unsafe { libc::close(fd) };
    "OK".into()
}

/// Leaves an orphan behind: a detached grandchild that writes `<result>.started`, waits
/// `delay_ms`, opens `path` for reading and writes the outcome to `result`.
fn op_orphan_open(path: &str, delay_ms: &str, result: &str) -> String {
    let delay = std::time::Duration::from_millis(delay_ms.parse().unwrap_or(0));
    // SAFETY: fork; the child only runs plain Rust and syscalls, then _exit.
    unsafe {
        match libc::fork() {
            -1 => errno_name(last_errno()),
            0 => {
                libc::setsid();
                let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                libc::dup2(null, 1);
                libc::dup2(null, 2);
                let _ = std::fs::write(format!("{result}.started"), b"");
                std::thread::sleep(delay);
                // Written whole, then renamed into place: a reader waiting for the file
                // never sees it empty (a 7.3 run once did).
                let tmp = format!("{result}.tmp");
                let _ = std::fs::write(&tmp, op_open(path, "r"));
                let _ = std::fs::rename(&tmp, result);
                libc::_exit(0)
            }
            _ => "OK".into(),
        }
    }
}

/// One `io_uring` operation, submitted and reaped with raw system calls: `openat` of a path
/// for reading, or `connect` to an address. The kernel runs it for this task (or an
/// io-wq worker of this process), so the LSM hooks must decide as for the system call.
fn op_uring(op: &str, a1: &str, a2: &str) -> String {
    const IORING_OP_CONNECT: u8 = 16;
    const IORING_OP_OPENAT: u8 = 18;
    const IORING_OFF_SQ_RING: i64 = 0;
    const IORING_OFF_CQ_RING: i64 = 0x0800_0000;
    const IORING_OFF_SQES: i64 = 0x1000_0000;
    // struct io_uring_params: 10 u32, then io_sqring_offsets and io_cqring_offsets (10 u32
    // each, the last two forming a u64).
    let mut p = [0u32; 30];
    let path = cstr(a1);
    let mut sock = -1;
    let mut sa = None;
    if op == "uring-connect" {
        let (Ok(addr), Ok(port)) = (a1.parse::<IpAddr>(), a2.parse::<u16>()) else {
            return "BADARGS".into();
        };
        let (ss, len, fam) = sockaddr(addr, port);
        // SAFETY: plain syscall.
        sock = unsafe { libc::socket(fam, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        sa = Some((ss, len));
    }
    // SAFETY: the io_uring ABI, used as documented: the rings are mapped with the sizes
    // and offsets the kernel returned; indices are masked with the ring masks.
    unsafe {
        let fd = libc::syscall(libc::SYS_io_uring_setup, 4u32, p.as_mut_ptr()) as i32;
        if fd < 0 {
            return format!("SETUP-{}", errno_name(last_errno()));
        }
        let (sq_entries, cq_entries) = (p[0] as usize, p[1] as usize);
        let (sq_off, cq_off) = (&p[10..20], &p[20..30]);
        let map = |len: usize, off: i64| {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                off,
            )
            .cast::<u8>()
        };
        let sq = map(sq_off[6] as usize + sq_entries * 4, IORING_OFF_SQ_RING);
        let cq = map(cq_off[5] as usize + cq_entries * 16, IORING_OFF_CQ_RING);
        let sqes = map(sq_entries * 64, IORING_OFF_SQES);
        let sqe = std::slice::from_raw_parts_mut(sqes, 64);
        sqe.fill(0);
        if let Some((ss, len)) = &sa {
            sqe[0] = IORING_OP_CONNECT;
            sqe[4..8].copy_from_slice(&sock.to_ne_bytes());
            sqe[8..16].copy_from_slice(&u64::from(*len).to_ne_bytes());
            sqe[16..24].copy_from_slice(&(std::ptr::from_ref(ss) as u64).to_ne_bytes());
        } else {
            sqe[0] = IORING_OP_OPENAT;
            sqe[4..8].copy_from_slice(&libc::AT_FDCWD.to_ne_bytes());
            sqe[16..24].copy_from_slice(&(path.as_ptr() as u64).to_ne_bytes());
            sqe[28..32].copy_from_slice(&(libc::O_RDONLY | libc::O_CLOEXEC).to_ne_bytes());
        }
        let at = |base: *mut u8, off: u32| base.add(off as usize).cast::<u32>();
        let tail = at(sq, sq_off[1]);
        let mask = *at(sq, sq_off[2]);
        let t = tail.read_volatile();
        at(sq, sq_off[6]).add((t & mask) as usize).write_volatile(0);
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        tail.write_volatile(t + 1);
        let n = libc::syscall(
            libc::SYS_io_uring_enter,
            fd,
            1u32,
            1u32,
            1u32,
            0usize,
            0usize,
        );
        if n < 0 {
            return format!("ENTER-{}", errno_name(last_errno()));
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        let head = at(cq, cq_off[0]).read_volatile();
        let cmask = *at(cq, cq_off[2]);
        let cqe = cq.add(cq_off[5] as usize + (head & cmask) as usize * 16);
        let res = cqe.add(8).cast::<i32>().read_volatile();
        libc::close(fd);
        if sock >= 0 {
            libc::close(sock);
        }
        if res < 0 {
            errno_name(-res)
        } else {
            if sa.is_none() {
                libc::close(res);
            }
            "OK".into()
        }
    }
}

/// Other ways to reach a file than open(2) on its name.
#[expect(
    clippy::too_many_lines,
    reason = "one arm per alias, each the whole of one operation"
)]
fn op_open_alias(op: &str, a1: &str, a2: &str, a3: &str) -> String {
    let res = |r: i32| -> String {
        if r < 0 {
            errno_name(last_errno())
        } else {
            // SAFETY: r is a descriptor we own.
            unsafe { libc::close(r) };
            "OK".into()
        }
    };
    // SAFETY: plain syscalls on NUL-terminated paths and locals that outlive them.
    unsafe {
        match op {
            // A path given as hex bytes: newlines and non-UTF-8 names.
            "open-hex" => {
                let bytes: Vec<u8> = (0..a1.len() / 2)
                    .filter_map(|i| u8::from_str_radix(&a1[2 * i..2 * i + 2], 16).ok())
                    .collect();
                let p = CString::new(bytes).expect("no NUL");
                res(libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC))
            }
            "openat2" => {
                // struct open_how { flags, mode, resolve }
                let how = [(libc::O_RDONLY | libc::O_CLOEXEC) as u64, 0, 0];
                let p = cstr(a1);
                res(libc::syscall(
                    libc::SYS_openat2,
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    how.as_ptr(),
                    24usize,
                ) as i32)
            }
            "by-handle" => {
                // struct file_handle { handle_bytes, handle_type, f_handle[128] }
                let mut h = [0u32; 2 + 32];
                h[0] = 128;
                let mut mount_id = 0;
                let p = cstr(a1);
                if libc::syscall(
                    libc::SYS_name_to_handle_at,
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    h.as_mut_ptr(),
                    &raw mut mount_id,
                    0,
                ) != 0
                {
                    return format!("HANDLE-{}", errno_name(last_errno()));
                }
                let dir = libc::open(c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                let fd = libc::syscall(
                    libc::SYS_open_by_handle_at,
                    dir,
                    h.as_mut_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                ) as i32;
                libc::close(dir);
                res(fd)
            }
            // A handle for a1 saved in the file a2 (hex), to be opened later, after the
            // dentry cache has dropped a1's dentries (`handle-open`).
            "handle-save" => {
                let mut h = [0u32; 2 + 32];
                h[0] = 128;
                let mut mount_id = 0;
                let p = cstr(a1);
                if libc::syscall(
                    libc::SYS_name_to_handle_at,
                    libc::AT_FDCWD,
                    p.as_ptr(),
                    h.as_mut_ptr(),
                    &raw mut mount_id,
                    0,
                ) != 0
                {
                    return format!("HANDLE-{}", errno_name(last_errno()));
                }
                let words: Vec<String> = h.iter().map(|w| format!("{w:08x}")).collect();
                match std::fs::write(a2, words.join(" ")) {
                    Ok(()) => "OK".into(),
                    Err(e) => format!("SAVE-{e}"),
                }
            }
            // Opens the handle saved in a1 on the file system mounted at a2 (`handle-path`:
            // and answers with the path the kernel gives the open file).
            "handle-open" | "handle-path" => {
                let Ok(text) = std::fs::read_to_string(a1) else {
                    return "NO-HANDLE".into();
                };
                let mut h: Vec<u32> = text
                    .split_whitespace()
                    .filter_map(|w| u32::from_str_radix(w, 16).ok())
                    .collect();
                let m = cstr(a2);
                let dir = libc::open(m.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                let fd = libc::syscall(
                    libc::SYS_open_by_handle_at,
                    dir,
                    h.as_mut_ptr(),
                    libc::O_RDONLY | libc::O_CLOEXEC,
                ) as i32;
                libc::close(dir);
                if op == "handle-path" && fd >= 0 {
                    let link = std::fs::read_link(format!("/proc/self/fd/{fd}"));
                    libc::close(fd);
                    return format!(
                        "PATH={}",
                        link.map_or_else(|e| e.to_string(), |p| p.display().to_string())
                    );
                }
                res(fd)
            }
            // chroot into a1 (in a child) and open a2 inside it.
            "chroot-open" => {
                let (dir, p) = (cstr(a1), cstr(a2));
                let mut fds = [0i32; 2];
                libc::pipe(fds.as_mut_ptr());
                let pid = libc::fork();
                if pid == 0 {
                    let e = if libc::chroot(dir.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                        -last_errno()
                    } else {
                        let fd = libc::open(p.as_ptr(), libc::O_RDONLY);
                        if fd < 0 { last_errno() } else { 0 }
                    };
                    libc::write(fds[1], (&raw const e).cast(), 4);
                    libc::_exit(0);
                }
                let mut e = 0i32;
                libc::read(fds[0], (&raw mut e).cast(), 4);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
                if e < 0 {
                    format!("CHROOT-{}", errno_name(-e))
                } else {
                    errno_name(e)
                }
            }
            // A chain of `a1` directories named `a2`-long 'd's, made and entered relative to
            // each other (no PATH_MAX limit on the way), then file `a3` created at the
            // bottom.
            "deep-open" => {
                let depth: usize = a1.parse().unwrap_or(1);
                let name = cstr(&"d".repeat(a2.parse().unwrap_or(1)));
                let mut dir = libc::open(c".".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                for _ in 0..depth {
                    if libc::mkdirat(dir, name.as_ptr(), 0o755) != 0 && last_errno() != libc::EEXIST
                    {
                        return format!("MKDIR-{}", errno_name(last_errno()));
                    }
                    let next = libc::openat(dir, name.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                    libc::close(dir);
                    if next < 0 {
                        return format!("CHDIR-{}", errno_name(last_errno()));
                    }
                    dir = next;
                }
                let file = cstr(a3);
                let f = libc::openat(
                    dir,
                    file.as_ptr(),
                    libc::O_RDONLY | libc::O_CREAT | libc::O_CLOEXEC,
                    0o644,
                );
                libc::close(dir);
                res(f)
            }
            _ => "BADOP".into(),
        }
    }
}

fn sockaddr(addr: IpAddr, port: u16) -> (libc::sockaddr_storage, libc::socklen_t, i32) {
    // SAFETY: zeroed sockaddr_storage is valid; the casts write the matching struct.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match SocketAddr::new(addr, port) {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as u16,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            unsafe { std::ptr::write((&raw mut ss).cast(), sin) };
            (ss, size_of::<libc::sockaddr_in>() as u32, libc::AF_INET)
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as u16,
                sin6_port: port.to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: 0,
            };
            unsafe { std::ptr::write((&raw mut ss).cast(), sin6) };
            (ss, size_of::<libc::sockaddr_in6>() as u32, libc::AF_INET6)
        }
    }
}

/// `connect`: a TCP connect to `addr`. `connect-mapped`: from an IPv6 socket first bound to
/// `::ffff:0.0.0.0` (an IPv4-mapped address).
fn op_connect(how: &str, addr: &str, port: &str) -> String {
    let (Ok(addr), Ok(port)) = (addr.parse::<IpAddr>(), port.parse::<u16>()) else {
        return "BADARGS".into();
    };
    let (ss, len, fam) = sockaddr(addr, port);
    // SAFETY: plain socket syscalls on locals.
    unsafe {
        let s = libc::socket(
            fam,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if s < 0 {
            return errno_name(last_errno());
        }
        if how == "connect-mapped" {
            let (local, local_len, _) = sockaddr("::ffff:0.0.0.0".parse().unwrap(), 0);
            if libc::bind(s, (&raw const local).cast(), local_len) != 0 {
                let e = last_errno();
                libc::close(s);
                return format!("BIND-{}", errno_name(e));
            }
        }
        let r = libc::connect(s, (&raw const ss).cast(), len);
        let mut e = if r == 0 { 0 } else { last_errno() };
        if e == libc::EINPROGRESS {
            let mut pfd = libc::pollfd {
                fd: s,
                events: libc::POLLOUT,
                revents: 0,
            };
            if libc::poll(&raw mut pfd, 1, 1000) <= 0 {
                e = libc::ETIMEDOUT;
            } else {
                let mut l = size_of::<i32>() as u32;
                libc::getsockopt(
                    s,
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    (&raw mut e).cast(),
                    &raw mut l,
                );
            }
        }
        libc::close(s);
        errno_name(e)
    }
}

fn op_udp(addr: &str, port: &str) -> String {
    let (Ok(addr), Ok(port)) = (addr.parse::<IpAddr>(), port.parse::<u16>()) else {
        return "BADARGS".into();
    };
    let (ss, len, fam) = sockaddr(addr, port);
    // SAFETY: plain socket syscalls on locals.
    unsafe {
        let s = libc::socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return errno_name(last_errno());
        }
        let r = libc::sendto(s, b"x".as_ptr().cast(), 1, 0, (&raw const ss).cast(), len);
        let e = if r < 0 { last_errno() } else { 0 };
        libc::close(s);
        errno_name(e)
    }
}

/// `ping ADDR PORT` (an echo request sent with `sendto`) and `ping-connect ADDR PORT`
/// (`connect`, then `send`) on a ping socket (`SOCK_DGRAM`, `IPPROTO_ICMP`/`ICMPV6`, open
/// to the groups of `net.ipv4.ping_group_range`): the kernel ignores the port. `OK` once
/// the echo reply came back (within 2 s), else the errno of the first call that failed.
fn op_ping(how: &str, addr: &str, port: &str) -> String {
    let (Ok(addr), Ok(port)) = (addr.parse::<IpAddr>(), port.parse::<u16>()) else {
        return "BADARGS".into();
    };
    let (ss, len, fam) = sockaddr(addr, port);
    let (proto, echo) = if fam == libc::AF_INET {
        (libc::IPPROTO_ICMP, 8u8)
    } else {
        (libc::IPPROTO_ICMPV6, 128u8)
    };
    // Type, code, checksum (the kernel's), identifier (the kernel's), sequence 1, data.
    let request = [echo, 0, 0, 0, 0, 0, 0, 1, b'p', b'i', b'n', b'g'];
    // SAFETY: plain socket syscalls on locals that outlive the calls.
    unsafe {
        let s = libc::socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, proto);
        if s < 0 {
            return errno_name(last_errno());
        }
        let timeout = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        libc::setsockopt(
            s,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const timeout).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        );
        let sent = if how == "ping-connect" {
            if libc::connect(s, (&raw const ss).cast(), len) < 0 {
                -1
            } else {
                libc::send(s, request.as_ptr().cast(), request.len(), 0)
            }
        } else {
            let to = (&raw const ss).cast();
            libc::sendto(s, request.as_ptr().cast(), request.len(), 0, to, len)
        };
        let e = if sent < 0 {
            last_errno()
        } else {
            let mut reply = [0u8; 64];
            let n = libc::recv(s, reply.as_mut_ptr().cast(), reply.len(), 0);
            if n < 0 {
                last_errno()
            } else if n < 8 || reply[0] != if echo == 8 { 0 } else { 129 } {
                libc::EPROTO
            } else {
                0
            }
        };
        libc::close(s);
        errno_name(e)
    }
}

/// Raw sockets (`CAP_NET_RAW`): `raw-send ADDR PORT` sends an echo request by `sendto` on
/// an ICMP one (the port is ignored by the kernel); `raw-udp ADDR` makes a UDP one (which
/// would write its own port); `raw-hdrincl ADDR` sets `IP_HDRINCL`/`IPV6_HDRINCL` on an
/// ICMP one, and `raw-hdrincl-solraw ADDR` sets `IPV6_HDRINCL` at level `SOL_RAW` (both
/// make the socket write its own IP header).
fn op_raw(how: &str, addr: &str, port: &str) -> String {
    let Ok(addr) = addr.parse::<IpAddr>() else {
        return "BADARGS".into();
    };
    let port = port.parse::<u16>().unwrap_or(0);
    let (ss, len, fam) = sockaddr(addr, port);
    let v4 = fam == libc::AF_INET;
    let protocol = match (how, v4) {
        ("raw-udp", _) => libc::IPPROTO_UDP,
        (_, true) => libc::IPPROTO_ICMP,
        (_, false) => libc::IPPROTO_ICMPV6,
    };
    // An echo request: type, code, checksum (IPv4's is ours to give: 0xf7fe for this
    // header; IPv6's the kernel's), identifier, sequence.
    let request: [u8; 8] = if v4 {
        [8, 0, 0xf7, 0xfe, 0, 0, 0, 1]
    } else {
        [128, 0, 0, 0, 0, 0, 0, 1]
    };
    // SAFETY: plain socket syscalls on locals that outlive the calls.
    unsafe {
        let s = libc::socket(fam, libc::SOCK_RAW | libc::SOCK_CLOEXEC, protocol);
        if s < 0 {
            return errno_name(last_errno());
        }
        let one: i32 = 1;
        let option = |level, option| {
            i64::from(libc::setsockopt(
                s,
                level,
                option,
                (&raw const one).cast(),
                4,
            ))
        };
        let r = match how {
            "raw-udp" => 0,
            "raw-hdrincl" if v4 => option(libc::IPPROTO_IP, libc::IP_HDRINCL),
            "raw-hdrincl" => option(libc::IPPROTO_IPV6, 36),
            "raw-hdrincl-solraw" => option(255, 36),
            _ => {
                let to = (&raw const ss).cast();
                libc::sendto(s, request.as_ptr().cast(), request.len(), 0, to, len) as i64
            }
        };
        let e = if r < 0 { last_errno() } else { 0 };
        libc::close(s);
        errno_name(e)
    }
}

/// Socket options that route past the address judged: `tcp-ulp NAME` (`TCP_ULP` on a TCP
/// socket: `smc` makes it an `AF_SMC` socket), `ip-options` (`IP_OPTIONS` on a UDP socket:
/// a loose source route through 127.0.0.1).
fn op_sockopt(how: &str, arg: &str) -> String {
    // SAFETY: plain socket syscalls on locals that outlive the calls.
    unsafe {
        let mut family = libc::AF_INET;
        let (kind, level, option, value): (i32, i32, i32, Vec<u8>) = if how == "tcp-ulp" {
            (
                libc::SOCK_STREAM,
                libc::IPPROTO_TCP,
                31,
                arg.as_bytes().to_vec(),
            )
        } else if how == "flowlabel" {
            // IPV6_FLOWLABEL_MGR: get label 0x12345 for ::1, made for this socket alone
            // (struct in6_flowlabel_req: destination, label, action GET, share EXCL,
            // flags CREATE, expiry, linger, padding).
            family = libc::AF_INET6;
            let mut req = vec![0u8; 32];
            req[15] = 1;
            req[16..20].copy_from_slice(&0x0001_2345u32.to_be_bytes());
            req[21] = 1;
            req[22..24].copy_from_slice(&1u16.to_ne_bytes());
            (libc::SOCK_DGRAM, libc::IPPROTO_IPV6, 32, req)
        } else {
            // LSRR (131), 7 bytes, pointer 4, one hop; a NOP pads it to 8.
            let lsrr = vec![131, 7, 4, 127, 0, 0, 1, 1];
            (libc::SOCK_DGRAM, libc::IPPROTO_IP, libc::IP_OPTIONS, lsrr)
        };
        let s = libc::socket(family, kind | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return format!("SOCKET-{}", errno_name(last_errno()));
        }
        #[expect(clippy::cast_possible_truncation, reason = "a few bytes")]
        let r = libc::setsockopt(s, level, option, value.as_ptr().cast(), value.len() as u32);
        let e = if r < 0 { last_errno() } else { 0 };
        libc::close(s);
        errno_name(e)
    }
}

/// `ip-retopts`: `sendmsg` on an unconnected UDP socket to `addr`:`port` (IPv4) with a
/// control message that routes it (`IP_RETOPTS`: a loose source route through 127.0.0.1,
/// where the packet goes first); its errno. `ip-retopts-sendmmsg`: a `sendmmsg` of two
/// messages to the address, the second with the route behind a NOP (the options' walk
/// steps over it); `ip-rr-sendmmsg`: the same with a record route (no route: the packet
/// goes to the address) in place of the source route; `SENT<n>`, the messages sent.
fn op_retopts(how: &str, addr: &str, port: &str) -> String {
    let (Ok(addr), Ok(port)) = (addr.parse::<IpAddr>(), port.parse::<u16>()) else {
        return "BADARGS".into();
    };
    let mmsg = how != "ip-retopts";
    // One cmsghdr (16 bytes) and the 8 bytes of options: LSRR through 127.0.0.1 (type,
    // length 7, pointer 4, the hop) and a NOP, the NOP first for `sendmmsg`; a record
    // route (type 7, length 7, pointer 4, one empty slot) behind a NOP.
    let options = match how {
        "ip-retopts-sendmmsg" => [1, 131, 7, 4, 127, 0, 0, 1],
        "ip-rr-sendmmsg" => [1, 7, 7, 4, 0, 0, 0, 0],
        _ => [131, 7, 4, 127, 0, 0, 1, 1],
    };
    let mut control = [0u8; 24];
    control[..8].copy_from_slice(&24u64.to_ne_bytes());
    control[8..12].copy_from_slice(&libc::IPPROTO_IP.to_ne_bytes());
    control[12..16].copy_from_slice(&libc::IP_RETOPTS.to_ne_bytes());
    control[16..24].copy_from_slice(&options);
    udp_send_with_control(addr, port, &mut control, mmsg)
}

/// A UDP send of one byte to `addr`:`port` carrying `control` (control messages):
/// `sendmsg`'s errno name; with `mmsg`, a `sendmmsg` of two messages to the address, the
/// first without control messages, and `SENT<n>`, the messages sent.
fn udp_send_with_control(addr: IpAddr, port: u16, control: &mut [u8], mmsg: bool) -> String {
    let (mut ss, len, fam) = sockaddr(addr, port);
    let mut data = *b"x";
    // SAFETY: plain socket syscalls on locals that outlive the calls.
    unsafe {
        let s = libc::socket(fam, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return errno_name(last_errno());
        }
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut m: libc::msghdr = std::mem::zeroed();
        m.msg_name = (&raw mut ss).cast();
        m.msg_namelen = len;
        m.msg_iov = &raw mut iov;
        m.msg_iovlen = 1;
        let plain = m;
        m.msg_control = control.as_mut_ptr().cast();
        m.msg_controllen = control.len();
        let out = if mmsg {
            let mut msgs = [
                libc::mmsghdr {
                    msg_hdr: plain,
                    msg_len: 0,
                },
                libc::mmsghdr {
                    msg_hdr: m,
                    msg_len: 0,
                },
            ];
            let r = libc::sendmmsg(s, msgs.as_mut_ptr(), 2, 0);
            if r < 0 {
                errno_name(last_errno())
            } else {
                format!("SENT{r}")
            }
        } else if libc::sendmsg(s, &raw const m, 0) < 0 {
            errno_name(last_errno())
        } else {
            "OK".into()
        };
        libc::close(s);
        out
    }
}

/// The kernel's process events (the proc connector: `NETLINK_CONNECTOR`, group
/// `CN_IDX_PROC`): subscribes, forks a child that exits, and waits up to 2 s for an event
/// other than the subscription's acknowledgement. `OK` when one came (every fork, exec
/// and exit of the host is then seen), `NOEVENT` when none did, else the errno of the
/// step that failed.
fn op_proc_events() -> String {
    const NETLINK_CONNECTOR: i32 = 11;
    const CN_IDX_PROC: u32 = 1;
    const PROC_CN_MCAST_LISTEN: u32 = 1;
    // SAFETY: plain socket syscalls on locals; the child only calls _exit.
    unsafe {
        let s = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_CONNECTOR,
        );
        if s < 0 {
            return errno_name(last_errno());
        }
        let fail = |what: &str| {
            let e = errno_name(last_errno());
            libc::close(s);
            format!("{what}-{e}")
        };
        let mut sa: libc::sockaddr_nl = std::mem::zeroed();
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = CN_IDX_PROC;
        if libc::bind(
            s,
            (&raw const sa).cast(),
            size_of::<libc::sockaddr_nl>() as u32,
        ) != 0
        {
            return fail("BIND");
        }
        // nlmsghdr (16), cn_msg (idx, val, seq, ack, len, flags: 20), the operation (4).
        let mut m = [0u8; 40];
        m[0..4].copy_from_slice(&40u32.to_ne_bytes());
        m[4..6].copy_from_slice(&(libc::NLMSG_DONE as u16).to_ne_bytes());
        m[12..16].copy_from_slice(&libc::getpid().cast_unsigned().to_ne_bytes());
        m[16..20].copy_from_slice(&CN_IDX_PROC.to_ne_bytes());
        m[20..24].copy_from_slice(&1u32.to_ne_bytes());
        m[32..34].copy_from_slice(&4u16.to_ne_bytes());
        m[36..40].copy_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        if libc::send(s, m.as_ptr().cast(), m.len(), 0) < 0 {
            return fail("SEND");
        }
        let tv = libc::timeval {
            tv_sec: 2,
            tv_usec: 0,
        };
        libc::setsockopt(
            s,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&raw const tv).cast(),
            size_of::<libc::timeval>() as u32,
        );
        let pid = libc::fork();
        if pid == 0 {
            libc::_exit(0);
        }
        libc::waitpid(pid, std::ptr::null_mut(), 0);
        let mut buf = [0u8; 256];
        for _ in 0..16 {
            let n = libc::recv(s, buf.as_mut_ptr().cast(), buf.len(), 0);
            if n < 0 {
                break;
            }
            // proc_event.what, past the nlmsghdr and cn_msg: 0 is the acknowledgement.
            if n >= 40 && u32::from_ne_bytes([buf[36], buf[37], buf[38], buf[39]]) != 0 {
                libc::close(s);
                return "OK".into();
            }
        }
        libc::close(s);
        "NOEVENT".into()
    }
}

/// A UDP send to `addr` (IPv6) carrying a type-2 routing header (`IPV6_RTHDR`) whose one
/// address is `hop`: the kernel routes the packet to `hop` (`fl6_update_dst`).
/// `rthdr-send`: one `sendmsg` (its errno). `rthdr-sendmmsg`: a `sendmmsg` of two messages
/// to `addr`, the first without control messages, the second with the header; `SENT<n>`,
/// the messages sent (the kernel judges only the first: the second has the same address).
fn op_rthdr_send(how: &str, addr: &str, port: &str, hop: &str) -> String {
    let (Ok(addr), Ok(port), Ok(std::net::IpAddr::V6(hop))) = (
        addr.parse::<IpAddr>(),
        port.parse::<u16>(),
        hop.parse::<IpAddr>(),
    ) else {
        return "BADARGS".into();
    };
    // One cmsghdr (16 bytes) and the 24 bytes of the header: next header, length 2 (in 8
    // bytes, past the first 8), type 2, one segment left, 4 reserved, the address.
    let mut control = [0u8; 40];
    control[..8].copy_from_slice(&40u64.to_ne_bytes());
    control[8..12].copy_from_slice(&libc::IPPROTO_IPV6.to_ne_bytes());
    control[12..16].copy_from_slice(&libc::IPV6_RTHDR.to_ne_bytes());
    control[16..20].copy_from_slice(&[0, 2, 2, 1]);
    control[24..40].copy_from_slice(&hop.octets());
    udp_send_with_control(addr, port, &mut control, how == "rthdr-sendmmsg")
}

/// A UDP send to `addr` (IPv6) from a socket given a segment routing header (type 4) by
/// `setsockopt(IPV6_RTHDR)`, which any user may set, whose one segment is `seg`: the kernel
/// sends the packet to `seg`, with `addr` in the header (`fl6_update_dst`,
/// `ipv6_push_rthdr4`). `SETSOCKOPT-<errno>` when the option is refused, else the send's.
fn op_srh_send(addr: &str, port: &str, seg: &str) -> String {
    let (Ok(IpAddr::V6(addr)), Ok(port), Ok(IpAddr::V6(seg))) = (
        addr.parse::<IpAddr>(),
        port.parse::<u16>(),
        seg.parse::<IpAddr>(),
    ) else {
        return "BADARGS".into();
    };
    // struct ipv6_sr_hdr: next header, length 2 (in 8 bytes, past the first 8), type 4, no
    // segment left, last entry 0, flags, tag; then the one segment.
    let mut srh = [0u8; 24];
    srh[..4].copy_from_slice(&[0, 2, 4, 0]);
    srh[8..].copy_from_slice(&seg.octets());
    let Ok(s) = std::net::UdpSocket::bind("[::]:0") else {
        return "SOCKET".into();
    };
    // SAFETY: a plain system call on our socket and buffer.
    let r = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::IPPROTO_IPV6,
            libc::IPV6_RTHDR,
            srh.as_ptr().cast(),
            srh.len() as u32,
        )
    };
    if r != 0 {
        return format!("SETSOCKOPT-{}", errno_name(last_errno()));
    }
    match s.send_to(b"x", (addr, port)) {
        Ok(_) => "OK".into(),
        Err(e) => errno_name(e.raw_os_error().unwrap_or(0)),
    }
}

/// `sendmsg` (one message) or `sendmmsg` (two) on an unconnected UDP socket, or
/// `sendto(MSG_FASTOPEN)` on a TCP socket (TCP Fast Open: data and connect in one call).
fn op_send(how: &str, addr: &str, port: &str) -> String {
    let (Ok(addr), Ok(port)) = (addr.parse::<IpAddr>(), port.parse::<u16>()) else {
        return "BADARGS".into();
    };
    let (mut ss, len, fam) = sockaddr(addr, port);
    let data = *b"x";
    // SAFETY: plain socket syscalls on locals that outlive the calls.
    unsafe {
        let kind = if how == "tfo" {
            libc::SOCK_STREAM
        } else {
            libc::SOCK_DGRAM
        };
        let s = libc::socket(fam, kind | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return errno_name(last_errno());
        }
        let mut iov = libc::iovec {
            iov_base: data.as_ptr().cast_mut().cast(),
            iov_len: 1,
        };
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_name = (&raw mut ss).cast();
        msg.msg_namelen = len;
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        let r = match how {
            "sendmsg" => libc::sendmsg(s, &raw const msg, 0) as i64,
            "sendmmsg" => {
                let mut msgs = [
                    libc::mmsghdr {
                        msg_hdr: msg,
                        msg_len: 0,
                    },
                    libc::mmsghdr {
                        msg_hdr: msg,
                        msg_len: 0,
                    },
                ];
                i64::from(libc::sendmmsg(s, msgs.as_mut_ptr(), 2, 0))
            }
            _ => libc::sendto(
                s,
                data.as_ptr().cast(),
                1,
                libc::MSG_FASTOPEN,
                (&raw const ss).cast(),
                len,
            ) as i64,
        };
        let e = if r < 0 { last_errno() } else { 0 };
        libc::close(s);
        errno_name(e)
    }
}

fn op_exec(args: &[String]) -> String {
    op_exec_via("exec", args)
}

/// Executes `args[0]` by path (`exec`), by an `O_PATH` descriptor with `execveat`
/// (`exec-fd`), through `/proc/self/fd/N` (`exec-procfd`), or as a copy in a memfd with
/// `fexecve` (`exec-memfd`: the copy needs the file's content, so reading it is checked
/// first).
#[expect(
    clippy::similar_names,
    reason = "args and argv, as execve(2) names them"
)]
fn op_exec_via(how: &str, args: &[String]) -> String {
    let Some(path) = args.first() else {
        return "BADARGS".into();
    };
    // SAFETY: plain syscalls on locals, before the fork.
    let fd = unsafe {
        match how {
            "exec-fd" => libc::open(cstr(path).as_ptr(), libc::O_PATH),
            "exec-procfd" => libc::open(cstr(path).as_ptr(), libc::O_RDONLY),
            "exec-memfd" => {
                let bytes = match std::fs::read(path) {
                    Ok(b) => b,
                    Err(e) => return format!("READ-{}", errno_name(e.raw_os_error().unwrap_or(0))),
                };
                let m = libc::memfd_create(c"copy".as_ptr(), 0);
                if m >= 0 {
                    libc::write(m, bytes.as_ptr().cast(), bytes.len());
                }
                m
            }
            _ => -2,
        }
    };
    if fd == -1 {
        return format!("OPEN-{}", errno_name(last_errno()));
    }
    let path = if how == "exec-procfd" {
        format!("/proc/self/fd/{fd}")
    } else {
        path.clone()
    };
    let cargs: Vec<CString> = args.iter().map(|a| cstr(a)).collect();
    let mut argv: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let envp: [*const libc::c_char; 1] = [std::ptr::null()];
    let p = cstr(&path);
    // SAFETY: fork/execve with argv/envp prepared before the fork; the child only makes
    // async-signal-safe calls.
    unsafe {
        let mut fds = [0i32; 2];
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return errno_name(last_errno());
        }
        let pid = libc::fork();
        if pid == 0 {
            if fd >= 0 && how != "exec-procfd" {
                libc::syscall(
                    libc::SYS_execveat,
                    fd,
                    c"".as_ptr(),
                    argv.as_ptr(),
                    envp.as_ptr(),
                    libc::AT_EMPTY_PATH,
                );
            } else {
                libc::execve(p.as_ptr(), argv.as_ptr(), envp.as_ptr());
            }
            let e = last_errno();
            libc::write(fds[1], (&raw const e).cast(), 4);
            libc::_exit(127);
        }
        libc::close(fds[1]);
        let mut e = 0i32;
        let n = libc::read(fds[0], (&raw mut e).cast(), 4);
        libc::close(fds[0]);
        let mut st = 0;
        libc::waitpid(pid, &raw mut st, 0);
        if n == 4 {
            return errno_name(e);
        }
        if libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0 {
            "OK".into()
        } else {
            format!("STATUS{st}")
        }
    }
}

/// The probe's own cgroup directory (cgroup v2).
fn own_cgroup_dir() -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(format!("/sys/fs/cgroup{}", rel.trim_end_matches('/')))
}

/// Makes the cgroup `name` below the probe's own and moves the probe there by writing
/// its `cgroup.procs`.
fn op_cgroup_child(name: &str) -> String {
    let Some(own) = own_cgroup_dir() else {
        return "NOCGROUP".into();
    };
    let dir = format!("{own}/{name}");
    if let Err(e) = std::fs::create_dir(&dir) {
        return errno_name(e.raw_os_error().unwrap_or(0));
    }
    match std::fs::write(format!("{dir}/cgroup.procs"), b"0") {
        Ok(()) => "OK".into(),
        Err(e) => errno_name(e.raw_os_error().unwrap_or(0)),
    }
}

/// File modes: `create-mode PATH MODE` makes a file with the octal `MODE`, `chmod-mode PATH
/// MODE` sets it, `tmpfile-link DIR PATH MODE` makes an unnamed file in `DIR` with it
/// (`O_TMPFILE`, which passes no name hook) and links it at `PATH`.
/// Whether `/proc/keys` lists a key whose line contains `what`.
fn op_key_listed(what: &str) -> String {
    match std::fs::read_to_string("/proc/keys") {
        Ok(t) if t.lines().any(|l| l.contains(what)) => "OK".into(),
        Ok(_) => "NOT_LISTED".into(),
        Err(e) => errno_name(e.raw_os_error().unwrap_or(0)),
    }
}

/// Changes the first byte of a (non-empty) file through a shared writable mapping, as a
/// loader or a database would: no `write(2)`, so none of its side effects.
fn op_mmap_write(path: &str) -> String {
    let p = cstr(path);
    // SAFETY: plain syscalls; the mapping is one page of a file opened here, written only
    // at its first byte, and unmapped before the descriptor is closed.
    unsafe {
        let fd = libc::open(p.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            return errno_name(last_errno());
        }
        let m = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        let r = if m == libc::MAP_FAILED {
            format!("MMAP-{}", errno_name(last_errno()))
        } else {
            let b = m.cast::<u8>();
            *b = (*b).wrapping_add(1);
            let r = if libc::msync(m, 4096, libc::MS_SYNC) == 0 {
                "OK".to_owned()
            } else {
                format!("MSYNC-{}", errno_name(last_errno()))
            };
            libc::munmap(m, 4096);
            r
        };
        libc::close(fd);
        r
    }
}

fn op_mode(op: &str, args: &[&str]) -> String {
    let mode = |s: &str| u32::from_str_radix(s, 8).unwrap_or(0);
    let at = |a: &str| cstr(a);
    // SAFETY: plain syscalls on NUL-terminated paths; the descriptor is closed here.
    let r = unsafe {
        match op {
            "create-mode" => {
                let fd = libc::open(
                    at(args[0]).as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                    mode(args[1]),
                );
                if fd >= 0 {
                    libc::close(fd);
                }
                fd.min(0)
            }
            "chmod-mode" => libc::chmod(at(args[0]).as_ptr(), mode(args[1])),
            _ => {
                let fd = libc::open(
                    at(args[0]).as_ptr(),
                    libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
                    mode(args[2]),
                );
                if fd < 0 {
                    return format!("OPEN-{}", errno_name(last_errno()));
                }
                let proc = cstr(&format!("/proc/self/fd/{fd}"));
                let r = libc::linkat(
                    libc::AT_FDCWD,
                    proc.as_ptr(),
                    libc::AT_FDCWD,
                    at(args[1]).as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                );
                let e = last_errno();
                libc::close(fd);
                if r != 0 {
                    return errno_name(e);
                }
                0
            }
        }
    };
    if r == 0 {
        "OK".into()
    } else {
        errno_name(last_errno())
    }
}

/// Makes a whiteout (character device 0:0, which needs no capability) at `path`.
fn op_mknod_whiteout(path: &str) -> String {
    op_mknod("mknod-char", path, "0", "0")
}

/// Makes a character (`mknod-char`) or block (`mknod-blk`) device node `major`:`minor` at
/// `path` (`CAP_MKNOD` but for 0:0).
fn op_mknod(op: &str, path: &str, major: &str, minor: &str) -> String {
    let p = cstr(path);
    let dev = libc::makedev(major.parse().unwrap_or(0), minor.parse().unwrap_or(0));
    let kind = if op == "mknod-blk" {
        libc::S_IFBLK
    } else {
        libc::S_IFCHR
    };
    // SAFETY: plain syscall on a valid C string.
    if unsafe { libc::mknod(p.as_ptr(), kind | 0o600, dev) } == 0 {
        "OK".into()
    } else {
        errno_name(last_errno())
    }
}

/// Writes `pid` into the probe's own cgroup's `cgroup.procs`: moves that process in.
fn op_cgroup_pull(pid: &str) -> String {
    let Some(own) = own_cgroup_dir() else {
        return "NOCGROUP".into();
    };
    io(std::fs::write(
        format!("{own}/cgroup.procs"),
        pid.as_bytes(),
    ))
}

/// Self-protection probes: what an agent would try to undo its confinement.
fn op_protect(op: &str, arg: &str) -> String {
    // SAFETY: plain syscalls on locals.
    let r: i64 = unsafe {
        match op {
            // BPF_MAP_CREATE of a one-entry array: the simplest bpf() call there is.
            "bpf" => {
                let mut attr = [0u32; 16];
                attr[0] = 2; // BPF_MAP_TYPE_ARRAY
                attr[1] = 4; // key size
                attr[2] = 4; // value size
                attr[3] = 1; // max entries
                let fd = libc::syscall(libc::SYS_bpf, 0, attr.as_mut_ptr(), 64);
                if fd >= 0 {
                    libc::close(fd as i32);
                }
                fd
            }
            "kill-parent" => i64::from(libc::kill(libc::getppid(), arg.parse().unwrap_or(15))),
            "ptrace-parent" => {
                let pid = libc::getppid();
                let r = libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0);
                if r == 0 {
                    libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
                }
                r
            }
            "mount" => {
                let dir = cstr(arg);
                let r = libc::mount(
                    c"none".as_ptr(),
                    dir.as_ptr(),
                    c"tmpfs".as_ptr(),
                    0,
                    std::ptr::null(),
                );
                if r == 0 {
                    libc::umount(dir.as_ptr());
                }
                i64::from(r)
            }
            _ => return "BADOP".into(),
        }
    };
    if r < 0 {
        errno_name(last_errno())
    } else {
        "OK".into()
    }
}

/// Writes this process's pid into `cgroup.procs` of the cgroup at `path` (relative to the
/// cgroup2 root): leaving the sandbox's cgroup.
fn op_cgroup_move(path: &str) -> String {
    io(std::fs::write(
        format!("/sys/fs/cgroup/{}/cgroup.procs", path.trim_matches('/')),
        b"0",
    ))
}

/// Attribute changes by path: truncate to 0, chmod 0600, chown to the current owner, times
/// to now, an extended attribute.
fn op_attr(op: &str, path: &str) -> String {
    let p = cstr(path);
    // SAFETY: plain syscalls on a NUL-terminated path.
    let r = unsafe {
        match op {
            "truncate" => libc::truncate(p.as_ptr(), 0),
            "chmod" => libc::chmod(p.as_ptr(), 0o600),
            "utimes" => libc::utimensat(libc::AT_FDCWD, p.as_ptr(), std::ptr::null(), 0),
            "setacl" => {
                // A minimal POSIX ACL (version 2: user::rw-, group::r--, other::r--).
                let mut acl = 2u32.to_le_bytes().to_vec();
                for (tag, perm) in [(0x01u16, 6u16), (0x04, 4), (0x20, 4)] {
                    acl.extend_from_slice(&tag.to_le_bytes());
                    acl.extend_from_slice(&perm.to_le_bytes());
                    acl.extend_from_slice(&u32::MAX.to_le_bytes());
                }
                libc::setxattr(
                    p.as_ptr(),
                    c"system.posix_acl_access".as_ptr(),
                    acl.as_ptr().cast(),
                    acl.len(),
                    0,
                )
            }
            "setxattr" => libc::setxattr(
                p.as_ptr(),
                c"trusted.probe".as_ptr(),
                b"1".as_ptr().cast(),
                1,
                0,
            ),
            _ => libc::chown(p.as_ptr(), libc::getuid(), libc::getgid()),
        }
    };
    if r == 0 {
        "OK".into()
    } else {
        errno_name(last_errno())
    }
}

fn io(r: std::io::Result<()>) -> String {
    match r {
        Ok(()) => "OK".into(),
        Err(e) => errno_name(e.raw_os_error().unwrap_or(0)),
    }
}

/// `btrfs-subvol DIR NAME`: `BTRFS_IOC_SUBVOL_CREATE` of `DIR/NAME`.
fn op_btrfs_subvol(dir: &str, name: &str) -> String {
    // struct btrfs_ioctl_vol_args { __s64 fd; char name[4088]; }
    let mut args = vec![0u8; 4096];
    if name.len() >= 4088 {
        return "BADARGS".into();
    }
    args[8..8 + name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: plain syscalls; `args` outlives the ioctl and has the size it encodes.
    unsafe {
        let fd = libc::open(cstr(dir).as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
        if fd < 0 {
            return errno_name(*libc::__errno_location());
        }
        let r = libc::ioctl(fd, 0x5000_940e, args.as_mut_ptr());
        let e = *libc::__errno_location();
        libc::close(fd);
        if r == 0 { "OK".into() } else { errno_name(e) }
    }
}

/// A file's `nodump` attribute flipped: `setflags` through a descriptor opened for
/// reading (`FS_IOC_GETFLAGS`, `FS_IOC_SETFLAGS`: `chattr`), `file-setattr` by name
/// (`file_getattr(2)`, `file_setattr(2)`, 6.17+: ENOSYS before).
fn op_file_flags(how: &str, path: &str) -> String {
    const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
    const FS_IOC_SETFLAGS: libc::c_ulong = 0x4008_6602;
    const FS_NODUMP_FL: u32 = 0x40;
    const SYS_FILE_GETATTR: libc::c_long = 468;
    const SYS_FILE_SETATTR: libc::c_long = 469;
    const FS_XFLAG_NODUMP: u64 = 0x80;
    let p = cstr(path);
    // SAFETY: plain syscalls; the buffers outlive them and have the sizes the calls take.
    unsafe {
        if how == "file-setattr" {
            // struct file_attr { u64 fa_xflags; u32 extsize, nextents, projid, cowextsize; }
            let mut attr = [0u64; 3];
            let get = libc::syscall(
                SYS_FILE_GETATTR,
                libc::AT_FDCWD,
                p.as_ptr(),
                attr.as_mut_ptr(),
                24usize,
                0u32,
            );
            if get != 0 {
                return format!("GET-{}", errno_name(last_errno()));
            }
            attr[0] ^= FS_XFLAG_NODUMP;
            let set = libc::syscall(
                SYS_FILE_SETATTR,
                libc::AT_FDCWD,
                p.as_ptr(),
                attr.as_ptr(),
                24usize,
                0u32,
            );
            return if set == 0 {
                "OK".into()
            } else {
                errno_name(last_errno())
            };
        }
        let fd = libc::open(
            p.as_ptr(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return format!("OPEN-{}", errno_name(last_errno()));
        }
        // The kernel reads and writes an `int` at the argument.
        let mut flags = 0u32;
        let r = if libc::ioctl(fd, FS_IOC_GETFLAGS, &raw mut flags) != 0 {
            format!("GET-{}", errno_name(last_errno()))
        } else {
            let mut new = flags ^ FS_NODUMP_FL;
            if libc::ioctl(fd, FS_IOC_SETFLAGS, &raw mut new) == 0 {
                "OK".into()
            } else {
                errno_name(last_errno())
            }
        };
        libc::close(fd);
        r
    }
}

/// `rename`: `rename(2)`. `rename-exchange`: `renameat2(RENAME_EXCHANGE)`, the two names
/// swapped.
fn op_rename(how: &str, from: &str, to: &str) -> String {
    if how == "rename" {
        return io(std::fs::rename(from, to));
    }
    let (f, t) = (cstr(from), cstr(to));
    // SAFETY: plain syscall on valid C strings.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        "OK".into()
    } else {
        errno_name(last_errno())
    }
}

fn op_symlink(target: &str, link: &str) -> String {
    match std::os::unix::fs::symlink(target, link) {
        Ok(()) => "OK".into(),
        Err(e) => errno_name(e.raw_os_error().unwrap_or(0)),
    }
}

#[cfg(target_arch = "x86_64")]
fn qemu_exit(code: u32) -> ! {
    // SAFETY: ioperm grants port access to 0xf4 (root in the guest); the out instruction
    // hits QEMU's isa-debug-exit device, which ends the VM with status (code << 1) | 1.
    unsafe {
        if libc::ioperm(0xf4, 4, 1) == 0 {
            std::arch::asm!("out dx, eax", in("dx") 0xf4u16, in("eax") code);
        }
    }
    eprintln!("sandbox-probe: no isa-debug-exit device");
    std::process::exit(2)
}

/// `whoami`: who this process is and what it may do: real and effective uid/gid, the
/// `no_new_privs` flag and the capability sets from /proc/self/status (hex, as there).
fn op_whoami() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .map_or_else(|| "?".to_owned(), |v| v.trim().to_owned())
    };
    let first = |v: String| v.split_whitespace().next().unwrap_or("?").to_owned();
    let second = |v: String| v.split_whitespace().nth(1).unwrap_or("?").to_owned();
    format!(
        "UID={} EUID={} GID={} EGID={} NNP={} CAPINH={} CAPPRM={} CAPEFF={} CAPBND={} CAPAMB={}",
        first(field("Uid:")),
        second(field("Uid:")),
        first(field("Gid:")),
        second(field("Gid:")),
        field("NoNewPrivs:"),
        field("CapInh:"),
        field("CapPrm:"),
        field("CapEff:"),
        field("CapBnd:"),
        field("CapAmb:"),
    )
}

/// `open-n PATH N [K]`: opens PATH for reading N times (with K: `PATH.0` .. `PATH.K-1`
/// in turn); counts the outcomes.
fn op_open_n(path: &str, n: &str, k: &str) -> String {
    let (mut ok, mut denied) = (0u64, 0u64);
    let k: u64 = k.parse().unwrap_or(0);
    for i in 0..n.parse::<u64>().unwrap_or(0) {
        let p = if k > 0 {
            format!("{path}.{}", i % k)
        } else {
            path.to_owned()
        };
        if op_open(&p, "r") == "OK" {
            ok += 1;
        } else {
            denied += 1;
        }
    }
    format!("ALLOWED={ok} DENIED={denied}")
}

/// Pins the calling thread to CPU 0.
fn pin_to_cpu0() {
    // SAFETY: a zeroed cpu_set_t with one bit set, passed by reference.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &raw const set);
    }
}

/// `race-open`: `threads` threads (2 if not given) on one CPU, every other one opening a
/// denied file and the rest an allowed file, `n` times each, so that on a preemptible
/// kernel their decisions interrupt each other's.
fn op_race_open(denied: &str, allowed: &str, n: &str, threads: &str) -> String {
    let n: u64 = n.parse().unwrap_or(0);
    let threads: usize = threads.parse().unwrap_or(2).max(2);
    let workers: Vec<_> = (0..threads)
        .map(|i| {
            let (file, deny) = if i % 2 == 0 {
                (denied.to_owned(), true)
            } else {
                (allowed.to_owned(), false)
            };
            std::thread::spawn(move || {
                pin_to_cpu0();
                let wrong = (0..n)
                    .filter(|_| (op_open(&file, "r") == "OK") == deny)
                    .count();
                (deny, wrong)
            })
        })
        .collect();
    let (mut denied_allowed, mut allowed_denied) = (0, 0);
    for w in workers {
        match w.join() {
            Ok((true, wrong)) => denied_allowed += wrong,
            Ok((false, wrong)) => allowed_denied += wrong,
            Err(_) => return "THREAD_PANICKED".into(),
        }
    }
    format!("DENIED_GOT_OK={denied_allowed} ALLOWED_GOT_DENIED={allowed_denied}")
}

/// `raw-socket`: an ICMP raw socket (needs `CAP_NET_RAW`).
fn op_raw_socket() -> String {
    // SAFETY: plain syscalls.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_ICMP) };
    if fd < 0 {
        return errno_name(last_errno());
    }
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    "OK".into()
}

/// `fd-read N` reads a byte from descriptor N, `fd-write N` writes one (a descriptor the
/// probe was started holding).
fn op_fd(op: &str, fd: &str) -> String {
    let Ok(fd) = fd.parse::<i32>() else {
        return "BADARGS".into();
    };
    let mut b = [b'x'];
    // SAFETY: plain syscalls on a one-byte buffer.
    let r = unsafe {
        if op == "fd-read" {
            libc::read(fd, b.as_mut_ptr().cast(), 1)
        } else {
            libc::write(fd, b.as_ptr().cast(), 1)
        }
    };
    if r == 1 {
        "OK".into()
    } else {
        errno_name(last_errno())
    }
}

/// The kernel's keys (`keyctl`, `add_key`): see the usage at the top.
fn op_key(op: &str, desc: &str) -> String {
    const KEY_SPEC_SESSION_KEYRING: i64 = -3;
    const KEY_SPEC_USER_KEYRING: i64 = -4;
    const KEYCTL_JOIN_SESSION_KEYRING: i64 = 1;
    const KEYCTL_SEARCH: i64 = 10;
    const KEYCTL_READ: i64 = 11;
    let desc = if desc.is_empty() { "kt-session" } else { desc };
    let (ty, d, payload) = (cstr("user"), cstr(desc), b"the secret");
    let add = |ring: i64| {
        // SAFETY: add_key with valid C strings and a payload of its stated length.
        unsafe {
            libc::syscall(
                libc::SYS_add_key,
                ty.as_ptr(),
                d.as_ptr(),
                payload.as_ptr(),
                payload.len(),
                ring,
            )
        }
    };
    let r = match op {
        "key-add" => add(KEY_SPEC_USER_KEYRING),
        "key-session" => {
            // SAFETY: keyctl with a NULL name: a new anonymous session keyring.
            let s = unsafe {
                libc::syscall(
                    libc::SYS_keyctl,
                    KEYCTL_JOIN_SESSION_KEYRING,
                    std::ptr::null::<libc::c_char>(),
                )
            };
            if s < 0 {
                s
            } else {
                add(KEY_SPEC_SESSION_KEYRING)
            }
        }
        _ => {
            // SAFETY: keyctl with valid C strings.
            let id = unsafe {
                libc::syscall(
                    libc::SYS_keyctl,
                    KEYCTL_SEARCH,
                    KEY_SPEC_USER_KEYRING,
                    ty.as_ptr(),
                    d.as_ptr(),
                    0,
                )
            };
            if id < 0 {
                id
            } else {
                let mut buf = [0u8; 64];
                // SAFETY: keyctl writes at most `buf.len()` bytes into `buf`.
                let n = unsafe {
                    libc::syscall(
                        libc::SYS_keyctl,
                        KEYCTL_READ,
                        id,
                        buf.as_mut_ptr(),
                        buf.len(),
                    )
                };
                if n >= 0 && buf[..payload.len()] != payload[..] {
                    return "WRONG_PAYLOAD".into();
                }
                n
            }
        }
    };
    if r < 0 {
        errno_name(last_errno())
    } else {
        "OK".into()
    }
}

/// POSIX message queues: see the usage at the top.
fn op_mq(op: &str, name: &str) -> String {
    const SECRET: &[u8] = b"the secret";
    let n = cstr(name);
    // SAFETY: plain syscalls on valid C strings and buffers of the stated sizes.
    unsafe {
        let q = match op {
            "mq-make" => libc::mq_open(
                n.as_ptr(),
                libc::O_CREAT | libc::O_RDWR,
                0o600 as libc::mode_t,
                std::ptr::null_mut::<libc::mq_attr>(),
            ),
            "mq-take" => libc::mq_open(n.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK),
            _ => libc::open(n.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK),
        };
        if q < 0 {
            return errno_name(last_errno());
        }
        let r = if op == "mq-make" {
            libc::mq_send(q, SECRET.as_ptr().cast(), SECRET.len(), 0)
        } else {
            let mut buf = vec![0u8; 65536];
            let got = libc::mq_receive(q, buf.as_mut_ptr().cast(), buf.len(), std::ptr::null_mut());
            if got >= 0 && buf[..got.cast_unsigned()] != *SECRET {
                libc::close(q);
                return "WRONG_CONTENT".into();
            }
            i32::from(got < 0).wrapping_neg()
        };
        let e = last_errno();
        libc::close(q);
        if r == 0 { "OK".into() } else { errno_name(e) }
    }
}

/// System V shared memory: see the usage at the top.
fn op_shm(op: &str, key: &str) -> String {
    const SECRET: &[u8] = b"the secret";
    let Ok(key) = key.parse::<i32>() else {
        return "BADARGS".into();
    };
    let flags = if op == "shm-make" {
        libc::IPC_CREAT | 0o600
    } else {
        0
    };
    // SAFETY: plain syscalls; the segment is attached, used within its 4096 bytes, detached.
    unsafe {
        let id = libc::shmget(key, 4096, flags);
        if id < 0 {
            return errno_name(last_errno());
        }
        if op == "shm-rm" {
            return if libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) == 0 {
                "OK".into()
            } else {
                errno_name(last_errno())
            };
        }
        let p = libc::shmat(id, std::ptr::null(), 0);
        if p as isize == -1 {
            return errno_name(last_errno());
        }
        let mem = std::slice::from_raw_parts_mut(p.cast::<u8>(), SECRET.len());
        let same = if op == "shm-make" {
            mem.copy_from_slice(SECRET);
            true
        } else {
            mem == SECRET
        };
        libc::shmdt(p);
        if same {
            "OK".into()
        } else {
            "WRONG_CONTENT".into()
        }
    }
}

/// `open-loop PATH STOP PAUSE`: opens PATH for reading until the file STOP exists, pausing
/// PAUSE microseconds between opens; counts the outcomes.
fn op_open_loop(path: &str, stop: &str, pause: &str) -> String {
    let pause = std::time::Duration::from_micros(pause.parse().unwrap_or(0));
    let (mut ok, mut denied) = (0u64, 0u64);
    while !std::path::Path::new(stop).exists() {
        std::thread::sleep(pause);
        if op_open(path, "r") == "OK" {
            ok += 1;
        } else {
            denied += 1;
        }
    }
    format!("ALLOWED={ok} DENIED={denied}")
}

fn run_op(words: &[String]) -> String {
    let a = |i: usize| words.get(i).map_or("", String::as_str);
    match a(0) {
        "open" => op_open(a(1), a(2)),
        "open-ppid" => {
            // SAFETY: plain syscall.
            let ppid = unsafe { libc::getppid() };
            op_open(&format!("/proc/{ppid}/{}", a(1)), a(2))
        }
        "connect" | "connect-mapped" => op_connect(a(0), a(1), a(2)),
        "udp" => op_udp(a(1), a(2)),
        "ping" | "ping-connect" => op_ping(a(0), a(1), a(2)),
        "raw-send" | "raw-udp" | "raw-hdrincl" | "raw-hdrincl-solraw" => op_raw(a(0), a(1), a(2)),
        "tcp-ulp" | "ip-options" | "flowlabel" => op_sockopt(a(0), a(1)),
        "ip-retopts" | "ip-retopts-sendmmsg" | "ip-rr-sendmmsg" => op_retopts(a(0), a(1), a(2)),
        "rthdr-send" | "rthdr-sendmmsg" => op_rthdr_send(a(0), a(1), a(2), a(3)),
        "srh-send" => op_srh_send(a(1), a(2), a(3)),
        "proc-events" => op_proc_events(),
        "sendmsg" | "sendmmsg" | "tfo" => op_send(a(0), a(1), a(2)),
        "exec" => op_exec(&words[1..]),
        "exec-fd" | "exec-procfd" | "exec-memfd" => op_exec_via(a(0), &words[1..]),
        "cgroup-child" => op_cgroup_child(a(1)),
        "cgroup-pull" => op_cgroup_pull(a(1)),
        "mknod-whiteout" => op_mknod_whiteout(a(1)),
        "mknod-char" | "mknod-blk" => op_mknod(a(0), a(1), a(2), a(3)),
        "create-mode" | "chmod-mode" => op_mode(a(0), &[a(1), a(2)]),
        "tmpfile-link" => op_mode(a(0), &[a(1), a(2), a(3)]),
        "mmap-write" => op_mmap_write(a(1)),
        "cgroup-move" => op_cgroup_move(a(1)),
        "orphan-open" => op_orphan_open(a(1), a(2), a(3)),
        "open-loop" => op_open_loop(a(1), a(2), a(3)),
        "uring-open" | "uring-connect" => op_uring(a(0), a(1), a(2)),
        "open-hex" | "openat2" | "by-handle" | "handle-save" | "handle-open" | "handle-path"
        | "chroot-open" | "deep-open" => op_open_alias(a(0), a(1), a(2), a(3)),
        "bpf" | "kill-parent" | "ptrace-parent" | "mount" => op_protect(a(0), a(1)),
        "symlink" => op_symlink(a(1), a(2)),
        "btrfs-subvol" => op_btrfs_subvol(a(1), a(2)),
        "setflags" | "file-setattr" => op_file_flags(a(0), a(1)),
        "mkdir" => io(std::fs::create_dir(a(1))),
        "rmdir" => io(std::fs::remove_dir(a(1))),
        "unlink" => io(std::fs::remove_file(a(1))),
        "rename" | "rename-exchange" => op_rename(a(0), a(1), a(2)),
        "link" => io(std::fs::hard_link(a(1), a(2))),
        "truncate" | "chmod" | "chown" | "utimes" | "setxattr" | "setacl" => op_attr(a(0), a(1)),
        "sleep" => {
            std::thread::sleep(std::time::Duration::from_millis(a(1).parse().unwrap_or(0)));
            "OK".into()
        }
        #[cfg(target_arch = "x86_64")]
        "qemu-exit" => qemu_exit(a(1).parse().unwrap_or(1)),
        "unix-connect" | "unix-send" | "unix-self" => boundary::unix(a(0), a(1)),
        "unix-serve" => boundary::unix_serve(&words[1..]),
        "unix-ask" => boundary::unix_ask(a(1), a(2)),
        "sigio-to" | "sigio-ex" | "fiosetown" | "siocspgrp" => boundary::sigio(a(0), a(1), a(2)),
        "async-fd" | "fioasync-fd" | "async-path" | "async-newpty" => {
            boundary::async_io(a(0), a(1))
        }
        "ptrace" | "mem" | "environ" | "vm-read" | "getfd" | "kill" | "setnice" => {
            boundary::process(a(0), a(1), a(2))
        }
        "tiocsti" | "tiocsti-own" => boundary::tiocsti(a(0), a(1)),
        "pty-made" | "pty-peer" => boundary::pty_made(a(0)),
        "socket" => boundary::socket(a(1), a(2), a(3)),
        "ns-hold" | "ns-handle-of" | "ns-handle" | "ns-enter" => namespaces::op(a(0), a(1), a(2)),
        "listen" | "udp-bind" | "udp-unspec" => boundary::serve(a(0), a(1), a(2)),
        "clone-into-cgroup" | "umount" | "pivot-root" | "finit-module" | "ioperm" | "prlimit"
        | "sigio-parent" => kernel::op(a(0), a(1)),
        "fork-n" | "alloc" | "spin" | "userns-unshare" | "userns-clone" => {
            kernel::resources(a(0), a(1))
        }
        "write-direct" | "read-direct" | "write-sync" => kernel::direct_io(a(0), a(1), a(2), a(3)),
        "sched-fifo" => kernel::sched_fifo(),
        "sched-show" => kernel::sched_show(),
        "whoami" => op_whoami(),
        "open-n" => op_open_n(a(1), a(2), a(3)),
        "race-open" => op_race_open(a(1), a(2), a(3), a(4)),
        "raw-socket" => op_raw_socket(),
        "fd-read" | "fd-write" => op_fd(a(0), a(1)),
        "key-add" | "key-read" | "key-session" => op_key(a(0), a(1)),
        "watch" => {
            // SAFETY: plain syscalls on a valid C string; the descriptor is closed.
            unsafe {
                let fd = libc::inotify_init1(libc::IN_CLOEXEC);
                if fd < 0 {
                    return errno_name(last_errno());
                }
                let w = libc::inotify_add_watch(fd, cstr(a(1)).as_ptr(), libc::IN_ALL_EVENTS);
                let e = last_errno();
                libc::close(fd);
                if w < 0 { errno_name(e) } else { "OK".into() }
            }
        }
        "key-listed" => op_key_listed(a(1)),
        "setresuid" | "setfsuid" => {
            let id = |i: usize| a(i).parse::<libc::uid_t>().unwrap_or(0);
            op_set_uid(a(0), [id(1), id(2), id(3)])
        }
        "shm-make" | "shm-read" | "shm-rm" => op_shm(a(0), a(1)),
        "map-hold" => op_map_hold(a(1)),
        "mq-make" | "mq-take" | "mq-take-path" => op_mq(a(0), a(1)),
        _ => "BADOP".into(),
    }
}

/// `setresuid R E S`, or `setfsuid U` (`ids[0]`), checked by reading it back (it never
/// fails).
fn op_set_uid(op: &str, ids: [libc::uid_t; 3]) -> String {
    if op == "setfsuid" {
        // SAFETY: plain syscalls; `-1` only reads the filesystem uid back.
        let now = unsafe {
            libc::setfsuid(ids[0]);
            libc::setfsuid(libc::uid_t::MAX)
        };
        return if now.cast_unsigned() == ids[0] {
            "OK".into()
        } else {
            "EPERM".into()
        };
    }
    // SAFETY: plain syscall.
    if unsafe { libc::setresuid(ids[0], ids[1], ids[2]) } == 0 {
        "OK".into()
    } else {
        errno_name(last_errno())
    }
}

/// Maps `path` shared, closes its descriptor, says `mapped` and waits to be killed: a
/// process that holds a segment by its mapping only.
fn op_map_hold(path: &str) -> String {
    use std::io::Write as _;
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    else {
        return errno_name(last_errno());
    };
    // SAFETY: a fresh shared mapping of an open file; the descriptor is closed after.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return errno_name(last_errno());
    }
    drop(f);
    println!("mapped");
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(std::time::Duration::from_mins(1));
    }
}

fn main() {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| String::from_utf8_lossy(a.as_bytes()).into_owned())
        .collect();
    if args.is_empty() {
        return;
    }
    let mut all_ok = true;
    for words in args.split(|w| w == "::") {
        let res = run_op(words);
        println!("PROBE {} -> {res}", words.join(" "));
        all_ok &= res == "OK";
    }
    std::process::exit(i32::from(!all_ok));
}

/// Operations across the sandbox's boundary: unix sockets, other processes, the terminal,
/// socket kinds, serving.
mod boundary {
    use std::os::unix::net::{UnixDatagram, UnixListener, UnixStream};

    use super::{cstr, errno_name, io, last_errno};

    fn ret(r: i64) -> String {
        if r < 0 {
            errno_name(last_errno())
        } else {
            "OK".into()
        }
    }

    /// A unix socket address: a path, or `@name` for an abstract name.
    fn addr(target: &str) -> std::io::Result<std::os::unix::net::SocketAddr> {
        use std::os::linux::net::SocketAddrExt;
        match target.strip_prefix('@') {
            Some(name) => std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()),
            None => std::os::unix::net::SocketAddr::from_pathname(target),
        }
    }

    pub fn unix(op: &str, target: &str) -> String {
        let a = match addr(target) {
            Ok(a) => a,
            Err(e) => return format!("BADADDR {e}"),
        };
        match op {
            "unix-connect" => io(UnixStream::connect_addr(&a).map(drop)),
            "unix-send" => {
                io(UnixDatagram::unbound().and_then(|s| s.send_to_addr(b"x", &a).map(drop)))
            }
            _ => {
                let l = match UnixListener::bind_addr(&a) {
                    Ok(l) => l,
                    Err(e) => return format!("BIND {}", errno_name(e.raw_os_error().unwrap_or(0))),
                };
                let r = io(UnixStream::connect_addr(&a).map(drop));
                drop(l);
                if !target.starts_with('@') {
                    let _ = std::fs::remove_file(target);
                }
                r
            }
        }
    }

    /// `unix-serve MS TARGET...`: serves a stream socket at each `TARGET` (a path or
    /// `@name`) and a datagram socket at `TARGET` + `.d` for `MS` milliseconds, taking
    /// what comes; `OK`, or `BIND errno`.
    pub fn unix_serve(args: &[String]) -> String {
        let Some((ms, targets)) = args.split_first() else {
            return "BADARGS".into();
        };
        let mut socks = Vec::new();
        for t in targets {
            let (Ok(a), Ok(ad)) = (addr(t), addr(&format!("{t}.d"))) else {
                return "BADADDR".into();
            };
            let bound = UnixListener::bind_addr(&a)
                .and_then(|l| UnixDatagram::bind_addr(&ad).map(|d| (l, d)))
                .and_then(|(l, d)| {
                    l.set_nonblocking(true)?;
                    d.set_nonblocking(true)?;
                    Ok((l, d))
                });
            match bound {
                Ok(x) => socks.push(x),
                Err(e) => return format!("BIND {}", errno_name(e.raw_os_error().unwrap_or(0))),
            }
        }
        let end =
            std::time::Instant::now() + std::time::Duration::from_millis(ms.parse().unwrap_or(0));
        let mut b = [0u8; 64];
        while std::time::Instant::now() < end {
            for (l, d) in &socks {
                while let Ok(c) = l.accept() {
                    drop(c);
                }
                while d.recv(&mut b).is_ok() {}
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        "OK".into()
    }

    /// Makes `pid` (`self`: this process) the owner of a socket's `SIGIO`, by `fcntl`
    /// (`sigio-to`: `F_SETOWN`, `sigio-ex`: `F_SETOWN_EX`) or ioctl (`fiosetown`,
    /// `siocspgrp`), with `sig` as its signal (`F_SETSIG`), then makes I/O happen on it;
    /// the errno of the step that failed, else `OK`.
    pub fn sigio(op: &str, pid: &str, sig: &str) -> String {
        const F_SETOWN_EX: i32 = 15;
        const F_SETSIG: i32 = 10;
        // SAFETY: plain syscalls on locals; both descriptors are closed.
        unsafe {
            let pid: libc::pid_t = if pid == "self" {
                libc::getpid()
            } else {
                pid.parse().unwrap_or(0)
            };
            let sig: i32 = sig.parse().unwrap_or(libc::SIGWINCH);
            let mut sv = [0i32; 2];
            if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) != 0 {
                return errno_name(last_errno());
            }
            // `struct f_owner_ex { int type; pid_t pid; }`, type F_OWNER_PID (1).
            let ex: [i32; 2] = [1, pid];
            let set = match op {
                "sigio-to" => libc::fcntl(sv[0], libc::F_SETOWN, pid),
                "sigio-ex" => libc::fcntl(sv[0], F_SETOWN_EX, ex.as_ptr()),
                "fiosetown" => libc::ioctl(sv[0], 0x8901, &raw const pid),
                _ => libc::ioctl(sv[0], 0x8902, &raw const pid),
            };
            let out = if set != 0
                || libc::fcntl(sv[0], F_SETSIG, sig) != 0
                || libc::fcntl(sv[0], libc::F_SETFL, libc::O_ASYNC) != 0
            {
                errno_name(last_errno())
            } else {
                let r = libc::write(sv[1], b"x".as_ptr().cast(), 1);
                // Let the signal land before the answer is printed.
                std::thread::sleep(std::time::Duration::from_millis(200));
                ret(r as i64)
            };
            libc::close(sv[0]);
            libc::close(sv[1]);
            out
        }
    }

    /// Turns asynchronous I/O on (then off again) for descriptor `arg` (`async-fd`: by
    /// `F_SETFL`, `fioasync-fd`: by `FIOASYNC`), for the terminal at path `arg`
    /// (`async-path`), or for the slave of a pty it makes (`async-newpty`); a terminal
    /// then sends its `SIGIO` to its foreground process group.
    pub fn async_io(op: &str, arg: &str) -> String {
        const FIOASYNC: libc::c_ulong = 0x5452;
        // SAFETY: plain syscalls on locals and descriptors this function opens (and
        // closes) or is given.
        unsafe {
            // The pty's master stays open while its slave is used (a slave whose master
            // is closed is hung up).
            let mut master = -1;
            let (fd, opened) = match op {
                "async-fd" | "fioasync-fd" => (arg.parse().unwrap_or(-1), false),
                "async-path" => (
                    libc::open(cstr(arg).as_ptr(), libc::O_RDWR | libc::O_NOCTTY),
                    true,
                ),
                _ => {
                    master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
                    if master < 0 || libc::grantpt(master) != 0 || libc::unlockpt(master) != 0 {
                        return errno_name(last_errno());
                    }
                    let name = libc::ptsname(master);
                    (libc::open(name, libc::O_RDWR | libc::O_NOCTTY), true)
                }
            };
            if fd < 0 {
                return errno_name(last_errno());
            }
            let out = if op == "fioasync-fd" {
                let (on, off) = (1i32, 0i32);
                let r = libc::ioctl(fd, FIOASYNC, &raw const on);
                let e = last_errno();
                libc::ioctl(fd, FIOASYNC, &raw const off);
                if r != 0 { errno_name(e) } else { "OK".into() }
            } else {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                let r = libc::fcntl(fd, libc::F_SETFL, fl | libc::O_ASYNC);
                let e = last_errno();
                libc::fcntl(fd, libc::F_SETFL, fl);
                if r != 0 { errno_name(e) } else { "OK".into() }
            };
            if opened {
                libc::close(fd);
            }
            if master >= 0 {
                libc::close(master);
            }
            out
        }
    }

    /// A datagram client: binds `own`, connects to the server at `server`, sends and
    /// waits two seconds for the reply; `OK` once it came.
    pub fn unix_ask(server: &str, own: &str) -> String {
        let _ = std::fs::remove_file(own);
        let s = match UnixDatagram::bind(own) {
            Ok(s) => s,
            Err(e) => return format!("BIND {}", errno_name(e.raw_os_error().unwrap_or(0))),
        };
        let mut b = [0u8; 16];
        let r = s
            .connect(server)
            .and_then(|()| s.set_read_timeout(Some(std::time::Duration::from_secs(2))))
            .and_then(|()| s.send(b"ask"))
            .and_then(|_| s.recv(&mut b));
        let _ = std::fs::remove_file(own);
        io(r.map(drop))
    }

    pub fn process(op: &str, pid: &str, arg: &str) -> String {
        let pid: i32 = pid.parse().unwrap_or(0);
        // SAFETY: plain syscalls on locals.
        unsafe {
            match op {
                "ptrace" => {
                    let r = libc::ptrace(libc::PTRACE_SEIZE, pid, 0, 0);
                    if r == 0 {
                        libc::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
                    }
                    ret(r)
                }
                "mem" => io(std::fs::File::open(format!("/proc/{pid}/mem")).map(drop)),
                "environ" => io(std::fs::read(format!("/proc/{pid}/environ")).map(drop)),
                "vm-read" => {
                    let addr = usize::from_str_radix(arg.trim_start_matches("0x"), 16).unwrap_or(0);
                    let mut b = [0u8; 1];
                    let local = libc::iovec {
                        iov_base: b.as_mut_ptr().cast(),
                        iov_len: 1,
                    };
                    let remote = libc::iovec {
                        iov_base: addr as *mut libc::c_void,
                        iov_len: 1,
                    };
                    ret(
                        libc::process_vm_readv(pid, &raw const local, 1, &raw const remote, 1, 0)
                            as i64,
                    )
                }
                "getfd" => {
                    let pidfd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
                    if pidfd < 0 {
                        return format!("PIDFD {}", errno_name(last_errno()));
                    }
                    let fd = libc::syscall(libc::SYS_pidfd_getfd, pidfd, 1, 0);
                    let r = ret(fd);
                    if fd >= 0 {
                        libc::close(fd as i32);
                    }
                    libc::close(pidfd as i32);
                    r
                }
                "kill" => ret(i64::from(libc::kill(pid, arg.parse().unwrap_or(15)))),
                "setnice" => ret(i64::from(libc::setpriority(
                    libc::PRIO_PROCESS,
                    pid.cast_unsigned(),
                    10,
                ))),
                _ => "BADOP".into(),
            }
        }
    }

    /// A pty made here (`/dev/ptmx`), its slave opened by path (`pty-made`) or from the
    /// master (`pty-peer`, `TIOCGPTPEER`), a byte written to the slave and read back from
    /// the master: what tmux or `script` does.
    pub fn pty_made(op: &str) -> String {
        // SAFETY: plain syscalls on descriptors opened here.
        unsafe {
            let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            if master < 0 || libc::grantpt(master) != 0 || libc::unlockpt(master) != 0 {
                return format!("PTMX {}", errno_name(last_errno()));
            }
            let slave = if op == "pty-peer" {
                libc::ioctl(master, libc::TIOCGPTPEER, libc::O_RDWR | libc::O_NOCTTY)
            } else {
                libc::open(libc::ptsname(master), libc::O_RDWR | libc::O_NOCTTY)
            };
            if slave < 0 {
                let e = last_errno();
                libc::close(master);
                return format!("OPEN {}", errno_name(e));
            }
            let mut mode: libc::termios = std::mem::zeroed();
            libc::tcgetattr(slave, &raw mut mode);
            libc::cfmakeraw(&raw mut mode);
            libc::tcsetattr(slave, libc::TCSANOW, &raw const mode);
            let wrote = libc::write(slave, b"x".as_ptr().cast(), 1);
            let mut byte = [0u8; 1];
            let read = libc::read(master, byte.as_mut_ptr().cast(), 1);
            libc::close(slave);
            libc::close(master);
            if wrote == 1 && read == 1 && byte[0] == b'x' {
                "OK".into()
            } else {
                "NOT_RELAYED".into()
            }
        }
    }

    pub fn tiocsti(op: &str, path: &str) -> String {
        // SAFETY: plain syscalls; the child only makes syscalls and exits.
        unsafe {
            if op == "tiocsti" {
                let fd = libc::open(cstr(path).as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
                if fd < 0 {
                    return format!("OPEN {}", errno_name(last_errno()));
                }
                let c = b'x';
                let r = libc::ioctl(fd, libc::TIOCSTI, &raw const c);
                let out = ret(i64::from(r));
                libc::close(fd);
                return out;
            }
            // A new session with a new pty as its controlling terminal, then TIOCSTI into it:
            // what an agent could do to any terminal that is its own.
            let pid = libc::fork();
            if pid == 0 {
                libc::setsid();
                let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
                if m < 0 || libc::grantpt(m) != 0 || libc::unlockpt(m) != 0 {
                    libc::_exit(200);
                }
                let name = libc::ptsname(m);
                let s = libc::open(name, libc::O_RDWR);
                if s < 0 {
                    libc::_exit(201);
                }
                let c = b'x';
                let r = libc::ioctl(s, libc::TIOCSTI, &raw const c);
                libc::_exit(if r == 0 { 0 } else { last_errno() });
            }
            let mut status = 0;
            libc::waitpid(pid, &raw mut status, 0);
            match libc::WEXITSTATUS(status) {
                0 => "OK".into(),
                200 | 201 => "SETUP".into(),
                e => errno_name(e),
            }
        }
    }

    pub fn socket(family: &str, ty: &str, proto: &str) -> String {
        let n = |s: &str| s.parse::<i32>().unwrap_or(-1);
        // SAFETY: plain syscalls.
        unsafe {
            let fd = libc::socket(n(family), n(ty), n(proto));
            if fd >= 0 {
                libc::close(fd);
            }
            ret(i64::from(fd))
        }
    }

    pub fn serve(op: &str, host: &str, port: &str) -> String {
        let ip: std::net::IpAddr = match host.parse() {
            Ok(a) => a,
            Err(_) => return "BADADDR".into(),
        };
        let port: u16 = port.parse().unwrap_or(0);
        match op {
            "listen" => io(std::net::TcpListener::bind((ip, port)).map(drop)),
            "udp-bind" => io(std::net::UdpSocket::bind((ip, port)).map(drop)),
            _ => {
                // An IPv4 UDP socket; the destination's family field says AF_UNSPEC, which
                // the kernel's IPv4 send path takes as AF_INET.
                let std::net::IpAddr::V4(v4) = ip else {
                    return "BADADDR".into();
                };
                // SAFETY: plain syscalls on a local sockaddr_in.
                unsafe {
                    let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
                    let mut sa: libc::sockaddr_in = std::mem::zeroed();
                    sa.sin_family = libc::AF_UNSPEC as u16;
                    sa.sin_port = port.to_be();
                    sa.sin_addr.s_addr = u32::from(v4).to_be();
                    let r = libc::sendto(
                        fd,
                        b"x".as_ptr().cast(),
                        1,
                        0,
                        (&raw const sa).cast(),
                        size_of::<libc::sockaddr_in>() as u32,
                    );
                    let out = ret(r as i64);
                    libc::close(fd);
                    out
                }
            }
        }
    }
}

/// Namespaces of other processes: held outside (`ns-hold`), reached by a file handle
/// (`ns-handle-of`, `ns-handle`, 6.18+) or a bind mount (`ns-enter`), then entered with
/// `setns`.
mod namespaces {
    use super::{cstr, errno_name, last_errno};

    const CLONE_NEWUSER: i32 = 0x1000_0000;
    const CLONE_NEWUTS: i32 = 0x0400_0000;
    const CLONE_NEWNS: i32 = 0x0002_0000;
    /// `FD_NSFS_ROOT` (include/uapi/linux/fcntl.h): the nsfs mount, for handles.
    const FD_NSFS_ROOT: i32 = -10003;

    fn fail(step: &str) -> String {
        format!("{step}-{}", errno_name(last_errno()))
    }

    pub fn op(op: &str, arg: &str, arg2: &str) -> String {
        match op {
            "ns-hold" => hold(),
            "ns-handle-of" => handle_of(arg),
            "ns-enter" => by_path(arg, arg2),
            _ => by_handle(arg),
        }
    }

    /// `ns-enter USER UTS`: opens the user namespace file USER and the UTS namespace file
    /// UTS (bind mounts of them, as `ip netns` makes), enters the user namespace (its
    /// owner's to enter; a UTS namespace wants `CAP_SYS_ADMIN` in the caller's own too),
    /// then the UTS namespace, and names it.
    fn by_path(user: &str, uts: &str) -> String {
        let open = |path: &str| {
            let p = cstr(path);
            // SAFETY: plain syscall on a valid C string.
            unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
        };
        let fd = open(user);
        if fd < 0 {
            return fail("OPEN");
        }
        // SAFETY: plain syscalls on a descriptor of this process.
        let r = unsafe {
            let r = libc::setns(fd, CLONE_NEWUSER);
            libc::close(fd);
            r
        };
        if r != 0 {
            return fail("SETNS-USER");
        }
        let fd = open(uts);
        if fd < 0 {
            return fail("OPEN-UTS");
        }
        enter_uts(fd)
    }

    /// Enters the UTS namespace of `fd` (closed) and names it: the route's effect.
    fn enter_uts(fd: i32) -> String {
        // SAFETY: plain syscalls on a descriptor of this process and a buffer of the
        // length given.
        unsafe {
            let r = libc::setns(fd, CLONE_NEWUTS);
            libc::close(fd);
            if r != 0 {
                return fail("SETNS");
            }
            let name = b"probe-entered";
            if libc::sethostname(name.as_ptr().cast(), name.len()) != 0 {
                return fail("SETHOSTNAME");
            }
        }
        "OK".into()
    }

    /// `ns-hold`: a user, UTS and mount namespace of this process's own, held until it is
    /// killed (says `READY` first).
    fn hold() -> String {
        use std::io::Write as _;
        // SAFETY: plain syscalls.
        unsafe {
            if libc::unshare(CLONE_NEWUSER | CLONE_NEWUTS | CLONE_NEWNS) != 0 {
                return fail("UNSHARE");
            }
            println!("PROBE ns-hold -> READY");
            let _ = std::io::stdout().flush();
            loop {
                libc::pause();
            }
        }
    }

    /// `ns-handle-of PATH`: the file handle of the namespace file PATH links to, in hex.
    fn handle_of(path: &str) -> String {
        let mut h = [0u32; 2 + 8];
        h[0] = 32;
        let mut mount_id = 0;
        let p = cstr(path);
        // SAFETY: plain syscall; `h` holds a handle of the size it says.
        let r = unsafe {
            libc::syscall(
                libc::SYS_name_to_handle_at,
                libc::AT_FDCWD,
                p.as_ptr(),
                h.as_mut_ptr(),
                &raw mut mount_id,
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r != 0 {
            return fail("HANDLE");
        }
        let words: Vec<String> = h.iter().map(|w| format!("{w:08x}")).collect();
        format!("HANDLE={}", words.join(","))
    }

    /// `ns-handle HEX`: opens the namespace of the handle (`ns-handle-of`) through the
    /// nsfs root, enters it and names it (the UTS namespace's host name).
    fn by_handle(hex: &str) -> String {
        let mut h: Vec<u32> = hex
            .split(',')
            .filter_map(|w| u32::from_str_radix(w, 16).ok())
            .collect();
        if h.len() < 2 {
            return "BADARGS".into();
        }
        // SAFETY: plain syscalls on a handle of the size it says and on the descriptor
        // the kernel returned.
        unsafe {
            let fd = libc::syscall(
                libc::SYS_open_by_handle_at,
                FD_NSFS_ROOT,
                h.as_mut_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            let Ok(fd) = i32::try_from(fd) else {
                return "OPEN-RANGE".into();
            };
            if fd < 0 {
                return fail("OPEN");
            }
            enter_uts(fd)
        }
    }
}

/// Operations that reach into the kernel or leave the sandbox's cgroup.
mod kernel {
    use super::{errno_name, last_errno};
    use std::ffi::CString;

    fn ret(r: i64) -> String {
        if r < 0 {
            errno_name(last_errno())
        } else {
            "OK".into()
        }
    }

    /// `pivot_root` in a child of a mount namespace of its own, whose root is `dir` (a mount
    /// point: the guests' own root, an initramfs, cannot be pivoted on 6.1 and 6.12,
    /// `EINVAL`): the new root is `dir/new`, a mount point holding `old`. No `mount(2)` on
    /// the way, so a refusal is `pivot_root`'s own.
    fn pivot_root(dir: &CString) -> String {
        // SAFETY: plain system calls on our own buffers; the child only calls async-signal
        // safe ones before `_exit`.
        unsafe {
            let pid = libc::fork();
            if pid == 0 {
                if libc::unshare(libc::CLONE_NEWNS) != 0
                    || libc::chroot(dir.as_ptr()) != 0
                    || libc::chdir(c"/".as_ptr()) != 0
                {
                    libc::_exit(255);
                }
                let (new, old) = (c"/new", c"/new/old");
                let r = libc::syscall(libc::SYS_pivot_root, new.as_ptr(), old.as_ptr());
                libc::_exit(if r == 0 { 0 } else { last_errno() & 0x7f });
            }
            if pid < 0 {
                return errno_name(last_errno());
            }
            let mut status = 0;
            if libc::waitpid(pid, &raw mut status, 0) != pid || !libc::WIFEXITED(status) {
                return "CHILD-LOST".into();
            }
            match libc::WEXITSTATUS(status) {
                255 => "SETUP-FAILED".into(),
                e => errno_name(e),
            }
        }
    }

    /// The errno a child (`pid`, or a failed fork's -1) exited with.
    fn child_errno(pid: i32) -> String {
        if pid < 0 {
            return errno_name(last_errno());
        }
        let mut status = 0;
        // SAFETY: plain syscall on our own child.
        if unsafe { libc::waitpid(pid, &raw mut status, 0) } != pid || !libc::WIFEXITED(status) {
            return "CHILD-LOST".into();
        }
        errno_name(libc::WEXITSTATUS(status))
    }

    /// `n` children at once, each waiting for a pipe to close: OK when every fork worked,
    /// else the first failure's errno (with how many were running then). All are ended
    /// and reaped before the answer.
    fn fork_n(n: usize) -> String {
        // SAFETY: plain system calls; a child only reads and exits.
        unsafe {
            let mut p = [0i32; 2];
            if libc::pipe(p.as_mut_ptr()) != 0 {
                return errno_name(last_errno());
            }
            let (mut kids, mut failed) = (0usize, 0i32);
            for _ in 0..n {
                let pid = libc::fork();
                if pid == 0 {
                    libc::close(p[1]);
                    let mut b = 0u8;
                    libc::read(p[0], (&raw mut b).cast(), 1);
                    libc::_exit(0);
                }
                if pid < 0 {
                    failed = last_errno();
                    break;
                }
                kids += 1;
            }
            libc::close(p[1]);
            libc::close(p[0]);
            for _ in 0..kids {
                libc::wait(std::ptr::null_mut());
            }
            if failed == 0 {
                "OK".into()
            } else {
                eprintln!("fork-n: {kids} running when a fork failed");
                errno_name(failed)
            }
        }
    }

    /// Busy until this process has used `ms` of CPU time (however long the wall clock).
    fn spin(ms: u64) -> String {
        let used = || {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: writes the timespec passed.
            unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &raw mut t) };
            u64::try_from(t.tv_sec).unwrap_or(0) * 1000
                + u64::try_from(t.tv_nsec).unwrap_or(0) / 1_000_000
        };
        let until = used() + ms;
        let mut n = 0u64;
        while used() < until {
            n = std::hint::black_box(n.wrapping_add(1));
        }
        "OK".into()
    }

    /// Reads or writes a file past the page cache, 64 KiB at a time, so each request goes to
    /// the disk as it is made (and is held there by a disk limit): `write-direct PATH MB`,
    /// `read-direct PATH`. Says how long it took on stdout.
    pub fn direct_io(op: &str, path: &str, mib: &str, chunk: &str) -> String {
        let size = |s: &str| match s.strip_suffix('K') {
            Some(k) => k.parse::<usize>().unwrap_or(0) << 10,
            None => s.parse::<usize>().unwrap_or(0) << 20,
        };
        let chunk = if chunk.is_empty() {
            64 << 10
        } else {
            size(chunk)
        };
        let c = CString::new(path).unwrap_or_default();
        let Ok(layout) = std::alloc::Layout::from_size_align(chunk.max(4096), 4096) else {
            return "EINVAL".into();
        };
        // SAFETY: a buffer of CHUNK bytes, aligned as O_DIRECT wants, freed below; plain
        // system calls on it and on our own descriptor.
        unsafe {
            let buf = std::alloc::alloc_zeroed(layout);
            let write = op != "read-direct";
            let flags = match op {
                "write-direct" => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_DIRECT,
                "write-sync" => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
                _ => libc::O_RDONLY | libc::O_DIRECT,
            };
            let fd = libc::open(c.as_ptr(), flags | libc::O_CLOEXEC, 0o600);
            if fd < 0 {
                std::alloc::dealloc(buf, layout);
                return errno_name(last_errno());
            }
            let start = std::time::Instant::now();
            let mut moved = 0usize;
            let mut failed = 0;
            let want = size(mib);
            loop {
                let n = if write {
                    if moved >= want {
                        break;
                    }
                    libc::write(fd, buf.cast(), chunk)
                } else {
                    libc::read(fd, buf.cast(), chunk)
                };
                if n < 0 {
                    failed = last_errno();
                    break;
                }
                if n == 0 {
                    break;
                }
                moved += n.cast_unsigned();
            }
            if failed == 0 && op == "write-sync" && libc::fsync(fd) != 0 {
                failed = last_errno();
            }
            libc::close(fd);
            std::alloc::dealloc(buf, layout);
            if failed != 0 {
                return errno_name(failed);
            }
            println!(
                "io: {} KiB in {} ms",
                moved >> 10,
                start.elapsed().as_millis()
            );
            "OK".into()
        }
    }

    /// Real-time scheduling for this process (`SCHED_FIFO` at priority 1), then back to
    /// normal: OK or why not.
    pub fn sched_fifo() -> String {
        let rt = libc::sched_param { sched_priority: 1 };
        let normal = libc::sched_param { sched_priority: 0 };
        // SAFETY: plain system calls on values on the stack.
        unsafe {
            let mut l = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::getrlimit(libc::RLIMIT_RTPRIO, &raw mut l);
            l.rlim_cur = l.rlim_max;
            libc::setrlimit(libc::RLIMIT_RTPRIO, &raw const l);
            if libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const rt) != 0 {
                return errno_name(last_errno());
            }
            libc::sched_setscheduler(0, libc::SCHED_OTHER, &raw const normal);
        }
        "OK".into()
    }

    /// This process's scheduling policy, nice and I/O priority class (0 none, 1 real-time,
    /// 2 best-effort, 3 idle).
    pub fn sched_show() -> String {
        // SAFETY: plain system calls reading this process's settings.
        unsafe {
            let policy = match libc::sched_getscheduler(0) & !libc::SCHED_RESET_ON_FORK {
                libc::SCHED_OTHER => "OTHER",
                libc::SCHED_FIFO => "FIFO",
                libc::SCHED_RR => "RR",
                libc::SCHED_BATCH => "BATCH",
                libc::SCHED_IDLE => "IDLE",
                _ => "?",
            };
            let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
            let io = libc::syscall(libc::SYS_ioprio_get, 1, 0) >> 13;
            format!("{policy} {nice} {io}")
        }
    }

    /// What the command may use and make: tasks, memory, CPU time, user namespaces.
    pub fn resources(op: &str, arg: &str) -> String {
        // SAFETY: plain system calls on our own buffers and children.
        unsafe {
            match op {
                "fork-n" => fork_n(arg.parse().unwrap_or(0)),
                "spin" => spin(arg.parse().unwrap_or(0)),
                // In a child, so this process keeps its namespaces.
                "userns-unshare" => {
                    let pid = libc::fork();
                    if pid == 0 {
                        let r = libc::unshare(libc::CLONE_NEWUSER);
                        libc::_exit(if r == 0 { 0 } else { last_errno() & 0x7f });
                    }
                    child_errno(pid)
                }
                "userns-clone" => {
                    let flags = libc::CLONE_NEWUSER | libc::SIGCHLD;
                    let pid = libc::syscall(libc::SYS_clone, i64::from(flags), 0, 0, 0, 0);
                    if pid == 0 {
                        libc::_exit(0);
                    }
                    if pid < 0 {
                        return errno_name(last_errno());
                    }
                    child_errno(pid as i32)
                }
                "alloc" => {
                    let len = arg.parse::<usize>().unwrap_or(0) << 20;
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    );
                    if p == libc::MAP_FAILED {
                        return errno_name(last_errno());
                    }
                    // Every page touched: memory the kernel must find.
                    for i in (0..len).step_by(4096) {
                        std::ptr::write_volatile(p.cast::<u8>().add(i), 1);
                    }
                    libc::munmap(p, len);
                    "OK".into()
                }
                _ => "BADOP".into(),
            }
        }
    }

    pub fn op(op: &str, arg: &str) -> String {
        let c = CString::new(arg).unwrap_or_default();
        // SAFETY: plain system calls on our own buffers.
        unsafe {
            match op {
                "clone-into-cgroup" => {
                    let dir = libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY);
                    if dir < 0 {
                        return errno_name(last_errno());
                    }
                    // struct clone_args (uapi/linux/sched.h): flags, pidfd, child_tid,
                    // parent_tid, exit_signal, stack, stack_size, tls, set_tid,
                    // set_tid_size, cgroup.
                    let mut args = [0u64; 11];
                    args[0] = 0x2_0000_0000; // CLONE_INTO_CGROUP
                    args[4] = u64::from(libc::SIGCHLD.cast_unsigned());
                    args[10] = u64::from(dir.cast_unsigned());
                    let pid = libc::syscall(libc::SYS_clone3, args.as_mut_ptr(), 88usize);
                    if pid == 0 {
                        libc::_exit(0);
                    }
                    let out = ret(pid);
                    if pid > 0 {
                        libc::waitpid(pid as i32, std::ptr::null_mut(), 0);
                    }
                    libc::close(dir);
                    out
                }
                "umount" => ret(i64::from(libc::umount2(c.as_ptr(), 0))),
                "pivot-root" => pivot_root(&c),
                "sigio-parent" => {
                    let mut sv = [0i32; 2];
                    if libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) != 0
                        || libc::fcntl(sv[0], libc::F_SETOWN, libc::getppid()) != 0
                        || libc::fcntl(sv[0], libc::F_SETFL, libc::O_ASYNC) != 0
                    {
                        return errno_name(last_errno());
                    }
                    let r = libc::write(sv[1], b"x".as_ptr().cast(), 1);
                    // Let the signal land before the answer is printed.
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    libc::close(sv[0]);
                    libc::close(sv[1]);
                    ret(r as i64)
                }
                "finit-module" => {
                    let fd = libc::open(c.as_ptr(), libc::O_RDONLY);
                    if fd < 0 {
                        return errno_name(last_errno());
                    }
                    let r = libc::syscall(libc::SYS_finit_module, fd, c"".as_ptr(), 0);
                    let out = ret(r);
                    libc::close(fd);
                    out
                }
                "ioperm" => {
                    let r = libc::ioperm(0x80, 1, 1);
                    if r == 0 {
                        libc::ioperm(0x80, 1, 0);
                    }
                    ret(i64::from(r))
                }
                "prlimit" => {
                    let pid: i32 = arg.parse().unwrap_or(0);
                    let mut old = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    if libc::prlimit(pid, libc::RLIMIT_CORE, std::ptr::null(), &raw mut old) != 0 {
                        return errno_name(last_errno());
                    }
                    let new = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: old.rlim_max,
                    };
                    ret(i64::from(libc::prlimit(
                        pid,
                        libc::RLIMIT_CORE,
                        &raw const new,
                        std::ptr::null_mut(),
                    )))
                }
                _ => "BADOP".into(),
            }
        }
    }
}
