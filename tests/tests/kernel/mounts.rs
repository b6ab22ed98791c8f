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
        rec("/file/path", path_str(&d, "mnt/secret")).has("/unmapped/rule", "files.deny[0]")
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
    r.check_records(&[rec("/unmapped/reason", "unplaced_mount").some()]);
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
    r.check_records(&[
        rec("/unmapped/reason", "path_unresolved").has("/unmapped/file/disconnected", true)
    ]);
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
    r.check_records(&[rec("/file/path", key.as_str()).has("/unmapped/rule", "files.deny[0]")]);
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
    r.check_records(&[
        rec("/unmapped/reason", "path_unresolved").has("/unmapped/file/outside_mounts", true)
    ]);
}

/// A file system whose root is mounted (`data`) with a subdirectory bind-mounted elsewhere
/// (`home`: a data disk's `/data/home` on `/home`, an `OSTree` host's `/var`): the programs
/// name its files by the root's place (`data/home/u/...`). Rules written for the place the
/// user sees (`home/u/...`) hold there, a glob's (no identity) and a file made after the
/// load too, and so do grants. The agent user; every route shown working outside first.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn rules_hold_through_a_mount_of_a_subdirectory() {
    let d = workdir_as(User::Agent, "alias_mount");
    let (data, home) = (d.join("data"), d.join("home"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let fs = Tmpfs::mount(&data);
    write(&data.join("home/u/.aws/credentials"), "k");
    std::fs::create_dir_all(data.join("home/u/.ssh")).unwrap();
    std::fs::create_dir_all(data.join("home/u/proj")).unwrap();
    User::Agent.own(&data);
    let bind = Bind::mount(&data.join("home"), &home);
    let h = |p: &str| path_str(&home, p);
    for (op, path) in [
        ("r", h("u/.aws/credentials")),
        ("creat", h("u/.ssh/new")),
        ("creat", h("u/proj/out")),
    ] {
        assert_eq!(
            probe_outside_as(User::Agent, &["open", &path, op]),
            "OK",
            "outside: {path}"
        );
    }
    for p in ["u/.ssh/new", "u/proj/out"] {
        std::fs::remove_file(home.join(p)).unwrap();
    }
    // The workspace elsewhere: the grant alone lets `proj` be written.
    std::fs::create_dir_all(d.join("ws")).unwrap();
    let policy = format!(
        "files:\n  workspace: {1}/ws\n  deny: [{0}/u/.ssh, \"{0}/*/.aws/**\"]\n  write: [{0}/u/proj]\n",
        home.display(),
        d.display()
    );
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[
            ("open home/u/.aws/credentials r", EACCES),
            ("open home/u/.ssh/new creat", EACCES),
            ("open home/u/proj/out creat", OK),
            ("open home/u/notes creat", EACCES),
        ],
    );
    r.check_records(&[
        rec("/file/path", path_str(&data, "home/u/.aws/credentials"))
            .has("/unmapped/rule", "files.deny[1]"),
        rec("/file/path", path_str(&data, "home/u/.ssh/new"))
            .has("/unmapped/rule", "files.deny[0]"),
    ]);
    drop(bind);
    drop(fs);
}

/// Unmounts the mount points it holds when the test ends, panic or not.
struct Unmount(Vec<String>);

impl Drop for Unmount {
    fn drop(&mut self) {
        for m in &self.0 {
            let _ = std::process::Command::new("umount").arg(m).status();
        }
    }
}

/// Runs a command that sets up a test (outside the sandbox), which must succeed.
fn sh(cmd: &str, args: &[&str]) {
    let out = std::process::Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (is btrfs-progs in the guest?)"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// btrfs as Ubuntu, Fedora and openSUSE install it: the top level is not mounted, the
/// subvolumes are (`@home` at `home`). A file's path within the file system is
/// `/@home/u/.ssh/key`; rules are written for `home/u/.ssh`, and hold. Then a snapshot
/// tool mounts the top level too (`top`, as timeshift does): the same files reached
/// through `top/@home/...` are still matched as `home/...`, and the record says so. The
/// agent user; the routes shown working outside first.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn btrfs_subvolumes_place_their_files() {
    let d = workdir("btrfs");
    let (top, home) = (d.join("top"), d.join("home"));
    std::fs::create_dir_all(&top).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let img = d.join("btrfs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(128 << 20)
        .unwrap();
    sh("mkfs.btrfs", &["-q", "-f", &img.display().to_string()]);
    let (img_s, top_s, home_s) = (
        img.display().to_string(),
        top.display().to_string(),
        home.display().to_string(),
    );
    sh("mount", &["-t", "btrfs", "-o", "loop", &img_s, &top_s]);
    sh("btrfs", &["subvolume", "create", &path_str(&top, "@home")]);
    write(&top.join("@home/u/.ssh/key"), "k");
    write(&top.join("@home/u/notes"), "n");
    User::Agent.own(&top.join("@home/u"));
    // The loop device of the first mount, for the subvolume mount.
    let dev = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(top_s.as_str()))
        .and_then(|l| l.split(" - ").nth(1))
        .and_then(|r| r.split(' ').nth(1))
        .map(str::to_owned)
        .expect("the btrfs mount in mountinfo");
    sh(
        "mount",
        &["-t", "btrfs", "-o", "subvol=@home", &dev, &home_s],
    );
    sh("umount", &[&top_s]);
    let _guard = Unmount(vec![top_s.clone(), home_s.clone()]);

    let key = path_str(&home, "u/.ssh/key");
    assert_eq!(probe_outside_as(User::Agent, &["open", &key, "r"]), "OK");
    let policy = format!("files:\n  deny: [\"{}/u/.ssh/**\"]\n", home.display());
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[
            ("open home/u/.ssh/key r", EACCES),
            ("open home/u/notes r", OK),
        ],
    );
    r.check_records(&[rec("/file/path", key.as_str()).has("/unmapped/rule", "files.deny[0]")]);

    // Subvolumes and snapshots made by ioctl pass no name hook (and a snapshot copies
    // protected files to a new path): refused inside, as the agent can outside.
    let u = path_str(&home, "u");
    assert_eq!(
        probe_outside_as(User::Agent, &["btrfs-subvol", &u, "sv-outside"]),
        "OK"
    );
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[(&format!("btrfs-subvol {u} sv-inside"), EPERM)],
    );
    r.check_records(&[rec("/unmapped/reason", "btrfs_subvolume")]);
    assert!(!home.join("u/sv-inside").exists());

    // The snapshot tool's view: the top level mounted as well.
    sh("mount", &["-t", "btrfs", "-o", "subvolid=5", &dev, &top_s]);
    let via_top = path_str(&top, "@home/u/.ssh/key");
    assert_eq!(
        probe_outside_as(User::Agent, &["open", &via_top, "r"]),
        "OK"
    );
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[
            ("open top/@home/u/.ssh/key r", EACCES),
            ("open top/@home/u/notes r", OK),
        ],
    );
    r.check_records(&[rec("/file/path", key.as_str()).has("/unmapped/rule", "files.deny[0]")]);
}

/// A file system moved (outside the sandbox) to a denied place while the command works in
/// it: once sandbox has placed it again, its files are matched at the new place, also in
/// directories whose scan state the programs kept from before the move.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn a_moved_mount_is_matched_at_its_new_place() {
    let d = workdir("moved_mount");
    let (from, to) = (d.join("mnt/a"), d.join("mnt/secret"));
    std::fs::create_dir_all(&from).unwrap();
    std::fs::create_dir_all(&to).unwrap();
    let tmpfs = Tmpfs::mount(&from);
    write(&from.join("dir/f"), "x");
    let policy = d.join("policy.yaml");
    write(
        &policy,
        &format!("files:\n  deny: [{}/mnt/secret]\n", d.display()),
    );
    let child = start_probe(
        &d,
        Some(&policy),
        &[
            "open",
            "mnt/a/dir/f",
            "r",
            "::",
            "open",
            "mnt/a/dir/f",
            "r",
            "::",
            "sleep",
            "5000",
            "::",
            "open",
            "mnt/secret/dir/f",
            "r",
        ],
    );
    std::thread::sleep(std::time::Duration::from_secs(2));
    let c = |p: &std::path::Path| std::ffi::CString::new(p.display().to_string()).unwrap();
    let (src, dst) = (c(&from), c(&to));
    // SAFETY: plain mount(2) with NUL-terminated strings that outlive the call.
    let moved = unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            std::ptr::null(),
            libc::MS_MOVE,
            std::ptr::null(),
        )
    };
    assert_eq!(
        moved,
        0,
        "mount --move: {}",
        std::io::Error::last_os_error()
    );
    std::mem::forget(tmpfs);
    let r = wait_probe(child, &d);
    // Outside the sandbox the file at its new place is readable.
    let outside = probe_outside(&["open", &path_str(&d, "mnt/secret/dir/f"), "r"]);
    // SAFETY: plain umount(2) of the path the file system was moved to.
    unsafe { libc::umount(dst.as_ptr()) };
    assert_eq!(outside, OK);
    r.expect_all(&[
        ("open mnt/a/dir/f r", OK),
        ("open mnt/a/dir/f r", OK),
        ("open mnt/secret/dir/f r", EACCES),
    ]);
    r.check_records(&[
        rec("/file/path", path_str(&d, "mnt/secret/dir/f")).has("/unmapped/rule", "files.deny[0]")
    ]);
}
