//! Exec rules: the deny list and the allowlist, decided on the binary's canonical path and
//! identity (symlinks, hard links, execveat, /proc/self/fd, memfd), and setuid binaries.

use sandbox_tests::*;

/// The command itself denied: exit status 126 (as `env` gives for a command that cannot
/// run), and the denial of its own exec is in the audit log; 127 when it does not exist.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_denied_command_exits_126_with_its_record() {
    let d = workdir("exec_self");
    let b = bins();
    copy_exec(&b.probe, &d.join("denied-tool"));
    let tool = path_str(&d, "denied-tool");
    // The route: without the policy, the same command runs.
    let r = run_as(User::Agent, &d, Some("version: 1\n"), &[&tool, "whoami"]);
    assert!(
        r.stdout.contains("PROBE whoami -> UID="),
        "{}\n{}",
        r.stdout,
        r.stderr
    );
    let policy = format!("exec:\n  deny: [{tool}]\n");
    let r = run_as(User::Agent, &d, Some(&policy), &[&tool, "whoami"]);
    assert_eq!(r.status, 126, "{}", r.stderr);
    assert!(
        r.stderr.contains("exec was denied by the policy"),
        "{}",
        r.stderr
    );
    r.check_records(&[rec("/process/file/path", tool.as_str())
        .has("/class_uid", 1007)
        .has("/action", "Denied")
        .has("/unmapped/rule", "exec.deny[0]")]);
    let missing = path_str(&d, "no-such-tool");
    let r = run_as(User::Agent, &d, Some(&policy), &[&missing]);
    assert_eq!(r.status, 127, "{}", r.stderr);
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn exec_denied_by_path_symlink_and_hardlink() {
    let d = workdir("exec_deny");
    let b = bins();
    copy_exec(&b.probe, &d.join("denied-tool"));
    copy_exec(&b.probe, &d.join("allowed-tool"));
    std::os::unix::fs::symlink(d.join("denied-tool"), d.join("innocent")).unwrap();
    std::fs::hard_link(d.join("denied-tool"), d.join("hardlinked")).unwrap();
    let policy = format!("exec:\n  deny: [{}/denied-tool]\n", d.display());
    let r = check(
        &d,
        Some(&policy),
        &[
            ("exec ./denied-tool", EACCES),
            ("exec ./innocent", EACCES),
            ("exec ./hardlinked", EACCES),
            ("exec ./allowed-tool", OK),
            // No copying a denied binary (or `ld.so denied-tool`): it cannot be read either.
            ("open denied-tool r", EACCES),
            // execveat on an O_PATH descriptor is judged on the file; /proc/self/fd/N and a
            // memfd copy both need the file opened for reading first, which is refused.
            ("exec-fd ./denied-tool", EACCES),
            ("exec-fd ./allowed-tool", OK),
            ("exec-procfd ./denied-tool", "OPEN-EACCES"),
            ("exec-memfd ./denied-tool", "READ-EACCES"),
        ],
    );
    r.check_records(&[rec("/class_uid", "1007")
        .count(4)
        .has("/activity_id", 1)
        .has("/process/file/path", path_str(&d, "denied-tool"))
        .has("/unmapped/rule", "exec.deny[0]")]);
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn exec_allowlist_and_setuid_denial() {
    let d = workdir("exec_allow");
    let b = bins();
    copy_exec(&b.probe, &d.join("ok-tool"));
    copy_exec(&b.probe, &d.join("other-tool"));
    copy_exec(&b.probe, &d.join("suid-tool"));
    std::fs::set_permissions(d.join("suid-tool"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let policy = format!(
        "exec:\n  allow: [{}, {}/ok-tool]\n",
        b.probe.display(),
        d.display()
    );
    let r = check(
        &d,
        Some(&policy),
        &[
            ("exec ./ok-tool", OK),
            ("exec ./other-tool", EACCES),
            // A memfd has no path on any mounted file system: never in an allowlist, so an
            // allowed binary's bytes (or a downloaded one) cannot be run from memory.
            ("exec-memfd ./ok-tool", EACCES),
            ("exec-fd ./ok-tool", OK),
        ],
    );
    r.check_records(&[rec("/class_uid", "1007")
        .some()
        .has("/unmapped/reason", "not_in_exec_allowlist")]);
    let r = check(
        &d,
        Some("exec:\n  allow_privileged: false\n"),
        &[("exec ./suid-tool", EACCES), ("exec ./ok-tool", OK)],
    );
    r.check_records(&[rec("/class_uid", "1007")
        .some()
        .has("/unmapped/reason", "privileged_binary")]);
}

/// A denied binary named as another program's ELF interpreter (`PT_INTERP`): the kernel
/// opens it to run it without a `bprm_check` of its own, so the open itself is judged. A
/// read of it is refused by the exec rule even where file rules are only audited.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_denied_binary_does_not_run_as_an_elf_interpreter() {
    let d = workdir_as(User::Agent, "exec_interp");
    let denied = d.join("denied-tool");
    let stub = d.join("stub");
    write_elf(&denied, &tiny_program(42), None);
    write_elf(&stub, &[], Some(&denied.display().to_string()));
    let (denied, stub) = (denied.display().to_string(), stub.display().to_string());
    // The route: the stub runs the interpreter it names, which exits 42.
    let ran = format!("STATUS{}", 42 << 8);
    assert_eq!(probe_outside_as(User::Agent, &["exec", &denied]), ran);
    assert_eq!(probe_outside_as(User::Agent, &["exec", &stub]), ran);
    assert_eq!(probe_outside_as(User::Agent, &["open", &denied, "r"]), "OK");
    // Files only audited: the exec section's rule still keeps the binary from being read
    // (a copy would run under another name).
    let policy = format!("files:\n  mode: audit\nexec:\n  deny: [{denied}]\n");
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[
            (format!("exec {denied}").as_str(), EACCES),
            (format!("exec {stub}").as_str(), EACCES),
            (format!("open {denied} r").as_str(), EACCES),
        ],
    );
    r.check_records(&[rec("/class_uid", "1007")
        .count(2)
        .has("/activity_id", 1)
        .has("/process/file/path", denied.as_str())
        .has("/unmapped/rule", "exec.deny[0]")]);
    // The read: a file record naming the exec section's rule, in that section's mode.
    r.check_records(&[rec("/unmapped/access", "read")
        .has("/class_uid", 1001)
        .has("/action", "Denied")
        .has("/file/path", denied.as_str())
        .has("/unmapped/rule", "exec.deny[0]")]);
}

/// x86-64 code that exits with `status`.
fn tiny_program(status: u8) -> Vec<u8> {
    // mov eax, 60 (exit); mov edi, status; syscall
    vec![0xb8, 60, 0, 0, 0, 0xbf, status, 0, 0, 0, 0x0f, 0x05]
}

/// Writes a static x86-64 ELF executable of one page to `path` (mode 0755): `code` loaded
/// at 0x400000 + its offset and run from its first byte, or, with `interp`, a program of
/// no code of its own that names `interp` as its ELF interpreter (loaded elsewhere).
fn write_elf(path: &std::path::Path, code: &[u8], interp: Option<&str>) {
    const EHDR: u16 = 64;
    const PHDR: u16 = 56;
    let phnum: u16 = if interp.is_some() { 2 } else { 1 };
    let body_off = u64::from(EHDR + PHDR * phnum);
    let mut body = code.to_vec();
    if let Some(i) = interp {
        body = i.as_bytes().to_vec();
        body.push(0);
    }
    let len = u64::try_from(body.len()).unwrap();
    // The file fills its page: before 6.2 the kernel zeroes the rest of an interpreter's
    // last page (`padzero`), which a read-only mapping refuses (the exec then dies).
    let page = 0x1000;
    let base: u64 = if interp.is_some() {
        0x1000_0000
    } else {
        0x40_0000
    };
    let mut f = Vec::new();
    let u16_ = |f: &mut Vec<u8>, v: u16| f.extend_from_slice(&v.to_le_bytes());
    let u32_ = |f: &mut Vec<u8>, v: u32| f.extend_from_slice(&v.to_le_bytes());
    let u64_ = |f: &mut Vec<u8>, v: u64| f.extend_from_slice(&v.to_le_bytes());
    f.extend_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    u16_(&mut f, 2); // ET_EXEC
    u16_(&mut f, 62); // EM_X86_64
    u32_(&mut f, 1);
    u64_(&mut f, base + body_off); // entry
    u64_(&mut f, u64::from(EHDR)); // phoff
    u64_(&mut f, 0); // shoff
    u32_(&mut f, 0);
    for v in [EHDR, PHDR, phnum, 0, 0, 0] {
        u16_(&mut f, v);
    }
    if interp.is_some() {
        u32_(&mut f, 3); // PT_INTERP
        u32_(&mut f, 4); // PF_R
        for v in [body_off, base + body_off, base + body_off, len, len, 1] {
            u64_(&mut f, v);
        }
    }
    u32_(&mut f, 1); // PT_LOAD of the whole file
    u32_(&mut f, 5); // PF_R | PF_X
    for v in [0, base, base, page, page, page] {
        u64_(&mut f, v);
    }
    f.extend_from_slice(&body);
    f.resize(usize::try_from(page).unwrap(), 0);
    std::fs::write(path, &f).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
