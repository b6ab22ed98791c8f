//! What the programs' directory cache (`sandbox-ebpf/src/dircache.rs`) needs from the
//! host: the address of the kernel's `rename_lock`, whose sequence count tells the
//! programs that no dentry moved since a directory's state was kept.
//!
//! Without it the cache stays off and every path is walked and scanned whole: slower,
//! never less strict. It is off on kernels other than x86-64 too (the programs' lock-free
//! read of a slot relies on x86-64 keeping loads in order), and when `SANDBOX_DIR_CACHE=0`
//! (to measure what it saves). The whole of `/proc/kallsyms` is read (on a thread beside
//! the load): a second `rename_lock` would make the address doubtful, and the cache stays
//! off.

use std::io::BufRead;

/// The address of `rename_lock` from `/proc/kallsyms` (needs `CONFIG_KALLSYMS_ALL`, which
/// lists data symbols, and addresses readable by root: `kernel.kptr_restrict` below 2).
pub fn rename_lock() -> Result<u64, String> {
    if !kernel_is_x86_64() {
        return Err("the kernel is not x86-64".into());
    }
    if std::env::var_os("SANDBOX_DIR_CACHE").is_some_and(|v| v == "0") {
        return Err("SANDBOX_DIR_CACHE=0".into());
    }
    let f = std::fs::File::open("/proc/kallsyms").map_err(|e| format!("/proc/kallsyms: {e}"))?;
    let mut found: Vec<u64> = Vec::new();
    let mut line = String::new();
    let mut r = std::io::BufReader::with_capacity(1 << 16, f);
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return Err(format!("/proc/kallsyms: {e}")),
        }
        if let Some(addr) = symbol(&line, "rename_lock") {
            found.push(addr);
        }
    }
    match found[..] {
        [] => Err("rename_lock is not in /proc/kallsyms (CONFIG_KALLSYMS_ALL)".into()),
        [0] => Err("/proc/kallsyms hides addresses (kernel.kptr_restrict)".into()),
        [addr] => Ok(addr),
        _ => Err("more than one rename_lock in /proc/kallsyms".into()),
    }
}

/// The running kernel's architecture (the binary's may differ, under emulation).
fn kernel_is_x86_64() -> bool {
    // SAFETY: `uname` fills the zeroed struct it is given.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::uname(&raw mut u) } != 0 {
        return false;
    }
    // SAFETY: the kernel NUL-terminates `machine`.
    let m = unsafe { std::ffi::CStr::from_ptr(u.machine.as_ptr()) };
    m.to_bytes() == b"x86_64"
}

/// The address of data symbol `name` on a `/proc/kallsyms` line
/// (`ffffffff82a05040 D rename_lock`), if the line is that symbol's (not a module's).
fn symbol(line: &str, name: &str) -> Option<u64> {
    let mut f = line.split_ascii_whitespace();
    let addr = f.next()?;
    let kind = f.next()?;
    let sym = f.next()?;
    if sym != name || f.next().is_some() || !matches!(kind, "D" | "d" | "B" | "b") {
        return None;
    }
    u64::from_str_radix(addr, 16).ok()
}

/// Says, under `SANDBOX_DEBUG`, why the cache is off.
pub fn off(why: &str) {
    if std::env::var_os("SANDBOX_DEBUG").is_some() {
        eprintln!("sandbox: debug: directory cache off: {why}");
    }
}

/// Says, under `SANDBOX_DEBUG`, that the cache is on.
pub fn on() {
    if std::env::var_os("SANDBOX_DEBUG").is_some() {
        eprintln!("sandbox: debug: directory cache on");
    }
}

#[cfg(test)]
mod tests {
    use super::symbol;

    #[test]
    fn kallsyms_lines() {
        assert_eq!(
            symbol("ffffffff82a05040 D rename_lock\n", "rename_lock"),
            Some(0xffff_ffff_82a0_5040)
        );
        assert_eq!(
            symbol("0000000000000000 D rename_lock\n", "rename_lock"),
            Some(0)
        );
        // A function of that name, or a module's symbol, is not the lock.
        assert_eq!(
            symbol("ffffffff81000000 T rename_lock\n", "rename_lock"),
            None
        );
        assert_eq!(
            symbol("ffffffffc0000000 d rename_lock\t[ext4]\n", "rename_lock"),
            None
        );
        assert_eq!(
            symbol("ffffffff82a05040 D rename_locks\n", "rename_lock"),
            None
        );
    }
}
