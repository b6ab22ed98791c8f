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
