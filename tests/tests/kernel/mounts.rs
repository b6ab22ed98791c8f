//! File systems mounted while a policy is in force: matched at their real place once
//! sandbox has placed them, denied (fail closed) until then. File systems whose root is not
//! mounted: matched at the place their mounted directories are.

use sandbox_tests::*;

/// A file system mounted (outside the sandbox) after the policy loaded: its files are
/// matched at their real place, not relative to the new file system's root.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn file_system_mounted_after_load() {
    let d = workdir("late_mount");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let policy = d.join("policy.yaml");
    write(
        &policy,
        &format!("files:\n  deny: [{}/mnt/secret]\n", d.display()),
    );
    let child = start_probe(
        &d,
        Some(&policy),
        &[
            "sleep",
            "4000",
            "::",
            "open",
            "mnt/secret",
            "r",
            "::",
            "open",
            "mnt/other",
            "r",
        ],
    );
    let tmpfs = Tmpfs::mount(&mnt);
    write(&mnt.join("secret"), "s");
    write(&mnt.join("other"), "o");
    let r = wait_probe(child, &d);
    drop(tmpfs);
    r.expect_all(&[("open mnt/secret r", EACCES), ("open mnt/other r", OK)]);
    // The record names the file at its real place, and the rule.
    assert_eq!(r.audit.len(), 1, "{:#?}\n{}", r.audit, r.stderr);
    r.check_records(&[
        rec("/file/path", path_str(&d, "mnt/secret")).has("/policy/rule", "files.deny[0]")
    ]);
}

/// Until sandbox has placed a new mount, its files are denied (fail closed): here sandbox
/// is stopped (SIGSTOP) while the mount appears and the command opens a file on it.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_mount_not_yet_placed_is_denied() {
    let d = workdir("unplaced_mount");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let child = start_probe(&d, None, &["sleep", "3000", "::", "open", "mnt/file", "r"]);
    let pid = child.id();
    // Stop sandbox before the mount appears.
    signal(pid, libc::SIGSTOP);
    let tmpfs = Tmpfs::mount(&mnt);
    write(&mnt.join("file"), "f");
    // The command opens the file at about 3 s, while sandbox is still stopped.
    std::thread::sleep(Duration::from_secs(6));
    signal(pid, libc::SIGCONT);
    let r = wait_probe(child, &d);
    drop(tmpfs);
    r.expect_all(&[("open mnt/file r", EACCES)]);
    r.check_records(&[rec("/policy/reason", "unplaced_mount").some()]);
}

/// A file opened by handle with no dentry of its file system cached gets a disconnected
/// dentry: a walk up from it ends at the file itself, so its path would read as the root
/// of its file system and escape every rule below it. Such walks fail closed. Shown
/// working outside first, on a disk file system mounted afresh; the root command keeps
/// `CAP_DAC_READ_SEARCH`, which `open_by_handle_at` needs.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn disconnected_dentries_fail_closed() {
    let d = workdir("disconnected");
    let mnt = d.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let fs = DiskFs::mount(&d.join("disk.img"), &mnt, 8);
    write(&mnt.join("secret/key"), "k");
    let handle = path_str(&d, "handle");
    let (key, mnt_s) = (path_str(&mnt, "secret/key"), mnt.display().to_string());
    assert_eq!(probe_outside(&["handle-save", &key, &handle]), "OK");
    fs.remount();
    assert_eq!(probe_outside(&["handle-open", &handle, &mnt_s]), "OK");
    // A glob: a literal rule would make sandbox look the files up by name (to protect
    // them by identity too), which gives them connected dentries again.
    let policy = format!("files:\n  deny: [{}/secret/**]\n", mnt.display());
    let r = check(
        &d,
        Some(&policy),
        &[
            (&format!("handle-open {handle} {mnt_s}"), EACCES),
            ("open mnt/secret/key r", EACCES),
        ],
    );
    drop(fs);
    r.check_records(&[rec("/policy/reason", "path_unresolved").has("/file/disconnected", true)]);
}

/// Only a directory of a file system is mounted (its parent mount went away, as with a
/// btrfs subvolume, a container volume or a bind mount of a subdirectory): its files are
/// matched where that directory is mounted, not by their path within the file system
/// (which would be `/vol/secret/key` here and miss every rule). A file of that file system
/// below no mounted directory (reached by handle) is denied. The agent user for the rules,
/// root (`CAP_DAC_READ_SEARCH`) for the handle; every route shown working outside first.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn subdirectory_mounts_place_their_files() {
    let d = workdir("subdir_mount");
    let (mnt, srv) = (d.join("mnt"), d.join("srv"));
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::create_dir_all(&srv).unwrap();
    let fs = DiskFs::mount(&d.join("disk.img"), &mnt, 8);
    write(&mnt.join("vol/secret/key"), "k");
    write(&mnt.join("vol/other"), "o");
    write(&mnt.join("hidden/x"), "h");
    let handle = path_str(&d, "handle");
    assert_eq!(
        probe_outside(&["handle-save", &path_str(&mnt, "hidden/x"), &handle]),
        "OK"
    );
    let inside = path_str(&d, "inside");
    assert_eq!(
        probe_outside(&["handle-save", &path_str(&mnt, "vol/other"), &inside]),
        "OK"
    );
    let bind = Bind::mount(&mnt.join("vol"), &srv);
    fs.unmount_root();
    let srv_s = srv.display().to_string();
    let key = path_str(&srv, "secret/key");
    assert_eq!(probe_outside_as(User::Agent, &["open", &key, "r"]), "OK");
    assert_eq!(probe_outside(&["handle-open", &handle, &srv_s]), "OK");
    assert_eq!(probe_outside(&["handle-open", &inside, &srv_s]), "OK");

    // A glob: a literal rule would also protect the file by identity, whatever its path.
    let policy = format!("files:\n  deny: [{}/secret/**]\n", srv.display());
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[("open srv/secret/key r", EACCES), ("open srv/other r", OK)],
    );
    r.check_records(&[rec("/file/path", key.as_str()).has("/policy/rule", "files.deny[0]")]);
    let r = check(
        &d,
        Some(&policy),
        &[
            (&format!("handle-open {handle} {srv_s}"), EACCES),
            (&format!("handle-open {inside} {srv_s}"), OK),
        ],
    );
    drop(bind);
    drop(fs);
    r.check_records(&[rec("/policy/reason", "path_unresolved").has("/file/outside_mounts", true)]);
}
