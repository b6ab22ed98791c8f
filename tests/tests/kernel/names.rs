//! Changes of names and attributes judged as writes: create, mkdir, symlink, unlink, rmdir,
//! link, rename, truncate, chmod, chown, times, extended attributes, ACLs, file attributes.

use sandbox_tests::*;

/// Writes are more than opens for writing: creating and removing names in a read-only area
/// are denied too, and a denied `creat` leaves no empty file behind.
/// A protected file cannot be given another name (link), moved out from under its rule
/// (rename) or changed through its attributes (truncate, also by a read-only open with
/// `O_TRUNC`, chmod, chown); nothing can be
/// linked or renamed into a read-only area. The same operations work where writes are
/// allowed.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn links_renames_and_attributes_are_writes() {
    let d = workdir("links_renames");
    write(&d.join("secret/key"), "k");
    write(&d.join("ro/existing"), "x");
    write(&d.join("ro/other"), "x");
    write(&d.join("free/f"), "x");
    write(&d.join("free/x"), "x");
    let policy = format!(
        "files:\n  read_only: [{0}/ro]\n  deny: [{0}/secret]\n",
        d.display()
    );
    let r = check(
        &d,
        Some(&policy),
        &[
            ("link secret/key free/k1", EACCES),
            ("link ro/existing free/r1", EACCES),
            ("link free/f ro/l1", EACCES),
            ("rename secret/key free/k2", EACCES),
            ("rename ro/existing free/r2", EACCES),
            ("rename free/x ro/x", EACCES),
            ("truncate ro/existing", EACCES),
            ("open ro/other rtrunc", EACCES),
            ("chmod ro/existing", EACCES),
            ("chown ro/existing", EACCES),
            ("utimes ro/existing", EACCES),
            ("setxattr ro/existing", EACCES),
            ("setacl ro/existing", EACCES),
            ("truncate secret/key", EACCES),
            ("link free/f free/f2", OK),
            ("rename free/f2 free/f3", OK),
            ("truncate free/f3", OK),
            ("chmod free/f", OK),
            ("chown free/f", OK),
            ("utimes free/f", OK),
            ("setxattr free/f", OK),
            ("setacl free/f", OK),
            // The route the read-only truncating open takes, open where writes are allowed.
            ("open free/f rtrunc", OK),
        ],
    );
    assert_eq!(std::fs::read_to_string(d.join("ro/existing")).unwrap(), "x");
    assert_eq!(std::fs::read_to_string(d.join("ro/other")).unwrap(), "x");
    assert_eq!(std::fs::read_to_string(d.join("secret/key")).unwrap(), "k");
    assert!(!d.join("free/k1").exists() && !d.join("free/r2").exists());
    r.check_records(&[
        rec("/file/path", path_str(&d, "ro/x"))
            .has("/unmapped/activity", "rename")
            .has("/unmapped/rule", "files.read_only[0]"),
        rec("/unmapped/activity", "chmod"),
    ]);
    let recs = r.records("/file/path", &path_str(&d, "secret/key"));
    let activities: Vec<&str> = recs
        .iter()
        .filter_map(|r| r["unmapped"]["activity"].as_str())
        .collect();
    assert_eq!(activities, ["link", "rename", "truncate"], "{recs:#?}");
    // One program judges every attribute change (`inode_setattr`): one record each, named
    // by what changes. A read-only open that truncates is a write open, denied at the
    // open itself (FUSE and CIFS truncate in their own open, before any later hook).
    let activities_of = |name: &str| -> Vec<String> {
        r.records("/file/path", &path_str(&d, name))
            .iter()
            .filter_map(|r| r["unmapped"]["activity"].as_str())
            .filter(|a| !["link", "rename", "xattr"].contains(a))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        activities_of("ro/existing"),
        ["truncate", "chmod", "chown", "setattr"]
    );
    assert_eq!(activities_of("ro/other"), ["open"]);
    assert_eq!(
        r.one_record("/file/path", &path_str(&d, "ro/other"))["unmapped"]["access"],
        "read_write",
        "the truncating open is judged as a write"
    );
    assert!(
        recs.iter()
            .all(|r| r["unmapped"]["rule"] == "files.deny[0]")
    );
}

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn name_changes_are_writes() {
    let d = workdir("name_changes");
    write(&d.join("ro/existing"), "x");
    std::fs::create_dir_all(d.join("ro/subdir")).unwrap();
    write(&d.join("secret/key"), "k");
    write(&d.join("free/f"), "x");
    let policy = format!(
        "files:\n  read_only: [{0}/ro]\n  deny: [{0}/secret]\n",
        d.display()
    );
    let r = check(
        &d,
        Some(&policy),
        &[
            ("open ro/new creat", EACCES),
            ("mkdir ro/newdir", EACCES),
            ("symlink /etc/passwd ro/link", EACCES),
            ("unlink ro/existing", EACCES),
            ("rmdir ro/subdir", EACCES),
            ("link free/f free/f-link", OK),
            ("rename free/f-link free/g", OK),
            ("mkdir free/newdir", OK),
            ("unlink free/g", OK),
        ],
    );
    assert!(
        !d.join("ro/new").exists(),
        "a denied creat left a file behind"
    );
    assert!(d.join("ro/existing").exists());
    r.check_records(&[rec("/file/path", path_str(&d, "ro/newdir"))
        .has("/unmapped/activity", "mkdir")
        .has("/unmapped/rule", "files.read_only[0]")]);
}

/// The layout of [`ancestors_of_protected_paths_stay_put`], owned by the agent user.
fn ancestor_layout(d: &std::path::Path) {
    write(&d.join("secrets/key"), "k");
    write(&d.join("docker/config.json"), "{}");
    write(&d.join("proj/a/secret.json"), "s");
    std::fs::create_dir_all(d.join("proj/b")).unwrap();
    std::fs::create_dir_all(d.join("empty")).unwrap();
    std::fs::create_dir_all(d.join("free/y")).unwrap();
    std::fs::create_dir_all(d.join("cfg/hooks")).unwrap();
    std::fs::create_dir_all(d.join("free/.vs")).unwrap();
    // A repository's directory below `.gt` (as `.git/modules/lib`), and one of the
    // command's holding a `config` of its own.
    write(&d.join("repo/.gt/modules/lib/config"), "[core]");
    write(&d.join("stage/config"), "[core] fsmonitor = evil");
    User::Agent.own(d);
}

/// A rule protects a path; renaming, removing or replacing a directory above it would
/// take the protection away (Landlock's REFER reasoning): `mv secrets s2` for
/// `secrets/**`, `mv docker d2; ln -s ... docker` for `docker/config.json`, a directory
/// moved out from under `proj/**/secret.json`, a directory swapped in at `.vs`
/// (`RENAME_EXCHANGE`) for `**/.vs/tasks.json`, a directory of the command's moved,
/// swapped or linked in below `.gt` for `**/.gt/**/config`. All of it works outside, as
/// the same non-root owner; inside it is denied, while renames that keep the protection
/// work.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn ancestors_of_protected_paths_stay_put() {
    std::fs::create_dir_all(User::Agent.home()).unwrap();
    let out = workdir_as(User::Agent, "ancestors_outside");
    ancestor_layout(&out);
    let o = |rel: &str| path_str(&out, rel);
    for op in [
        vec!["rename".to_owned(), o("secrets"), o("s2")],
        vec!["rename".to_owned(), o("docker"), o("d2")],
        vec!["symlink".to_owned(), o("d2"), o("docker")],
        vec!["rmdir".to_owned(), o("empty")],
        vec!["rename".to_owned(), o("proj/a"), o("free/a")],
        vec!["rename-exchange".to_owned(), o("free/.vs"), o("free/y")],
        vec![
            "rename".to_owned(),
            o("repo/.gt/modules/lib"),
            o("repo/.gt/modules/old"),
        ],
        vec!["rename".to_owned(), o("stage"), o("repo/.gt/modules/lib")],
    ] {
        let ops: Vec<&str> = op.iter().map(String::as_str).collect();
        assert_eq!(
            probe_outside_as(User::Agent, &ops),
            "OK",
            "outside: {ops:?}"
        );
    }

    let d = workdir_as(User::Agent, "ancestors");
    ancestor_layout(&d);
    let policy = format!(
        "files:\n  deny:\n    - {0}/secrets/**\n    - {0}/docker/config.json\n    - {0}/proj/**/secret.json\n    - {0}/empty/**\n    - {0}/ghost/token\n  read_only:\n    - {0}/cfg/hooks/**\n    - {0}/**/.vs/tasks.json\n    - {0}/**/.gt/**/config\n",
        d.display()
    );
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[
            ("rename secrets s2", EACCES),
            ("rename docker d2", EACCES),
            ("rmdir empty", EACCES),
            ("symlink /tmp ghost", EACCES),
            ("mkdir ghost", OK),
            ("rename free/y ghost", EACCES),
            ("rename proj/a proj/c", OK),
            ("rename proj/c free/c", EACCES),
            ("rename proj/b proj/c/b", OK),
            ("rename free/y free/z", OK),
            ("open proj/c/secret.json r", EACCES),
            // Above read-only paths only what is new counts: moving or removing the
            // directory takes its files away from where they would run, harmlessly.
            ("rename cfg cfg2", OK),
            ("symlink /tmp cfg", EACCES),
            // Swapped in: each name of an exchange is the other's new name.
            ("rename-exchange free/.vs free/z", EACCES),
            ("rename-exchange free/z free/.vs", EACCES),
            ("rmdir free/.vs", OK),
            ("rename free/z free/.vs", EACCES),
            // Below `.gt`: moving away or within its directory is harmless, arriving from
            // elsewhere is not (a directory or a symlink could bring a `config`); an
            // empty directory may be made.
            ("rename repo/.gt/modules/lib repo/.gt/modules/old", OK),
            ("rename stage repo/.gt/modules/lib", EACCES),
            ("rename-exchange repo/.gt/modules/old stage", EACCES),
            ("symlink stage repo/.gt/modules/lib", EACCES),
            ("mkdir repo/.gt/modules/lib", OK),
            ("rename stage/config repo/.gt/modules/lib/config", EACCES),
        ],
    );
    assert!(d.join("secrets/key").exists() && d.join("docker/config.json").exists());
    r.check_records(&[
        rec("/file/path", path_str(&d, "secrets"))
            .has("/unmapped/activity", "rename")
            .has("/unmapped/reason", "ancestor_of_protected_path")
            .has("/unmapped/rule", "files.deny[0]"),
        // The symlink at the ancestor's name, then the rename onto it.
        rec("/file/path", path_str(&d, "ghost"))
            .count(2)
            .has("/unmapped/activity", "symlink")
            .has("/unmapped/rule", "files.deny[4]"),
        rec("/file/path", path_str(&d, "proj/c"))
            .has("/unmapped/reason", "moves_protected_files")
            .has("/unmapped/rule", "files.deny[2]"),
        // Each exchange is refused at the name `.vs` gets a directory at (and the plain
        // rename onto it after).
        rec("/file/path", path_str(&d, "free/.vs"))
            .count(3)
            .has("/unmapped/activity", "rename")
            .has("/unmapped/reason", "ancestor_of_protected_path")
            .has("/unmapped/rule", "files.read_only[1]"),
        rec("/file/path", path_str(&d, "repo/.gt/modules/lib"))
            .count(2)
            .has("/unmapped/reason", "moves_into_protected_area")
            .has("/unmapped/rule", "files.read_only[2]"),
        rec("/file/path", path_str(&d, "repo/.gt/modules/old"))
            .has("/unmapped/activity", "rename")
            .has("/unmapped/reason", "moves_into_protected_area")
            .has("/unmapped/rule", "files.read_only[2]"),
    ]);
}

/// Dotfiles kept elsewhere: `.bashrc -> dotfiles/bashrc`, `.config -> dotfiles/config`.
fn symlinked_layout(d: &std::path::Path) {
    write(&d.join("dotfiles/bashrc"), "# rc");
    write(&d.join("dotfiles/config/git/config"), "[user]");
    std::fs::create_dir_all(d.join("free")).unwrap();
    std::os::unix::fs::symlink("dotfiles/bashrc", d.join(".bashrc")).unwrap();
    std::os::unix::fs::symlink("dotfiles/config", d.join(".config")).unwrap();
    User::Agent.own(d);
}

/// A protected name that is a symlink: the rule resolves to the target, and the link is
/// protected too. Otherwise `rm .bashrc; echo evil > .bashrc` (or a fresh `.config`
/// directory with a `git/config` of the agent's) would replace what the user's next shell
/// or `git` outside runs, while writing the target stays denied. Works outside as the same
/// non-root owner.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn protected_symlinks_cannot_be_replaced() {
    std::fs::create_dir_all(User::Agent.home()).unwrap();
    let out = workdir_as(User::Agent, "symlinked_outside");
    symlinked_layout(&out);
    let o = |rel: &str| path_str(&out, rel);
    for op in [
        vec!["unlink".to_owned(), o(".bashrc")],
        vec!["open".to_owned(), o(".bashrc"), "creat".to_owned()],
        vec!["unlink".to_owned(), o(".config")],
        vec!["mkdir".to_owned(), o(".config")],
        vec!["mkdir".to_owned(), o(".config/git")],
        vec![
            "open".to_owned(),
            o(".config/git/config"),
            "creat".to_owned(),
        ],
    ] {
        let ops: Vec<&str> = op.iter().map(String::as_str).collect();
        assert_eq!(
            probe_outside_as(User::Agent, &ops),
            "OK",
            "outside: {ops:?}"
        );
    }

    let d = workdir_as(User::Agent, "symlinked");
    symlinked_layout(&d);
    let policy = format!(
        "files:\n  read_only: [{0}/.bashrc, {0}/.config/git/**]\n",
        d.display()
    );
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[
            ("open .bashrc w", EACCES),
            ("unlink .bashrc", EACCES),
            ("rename .bashrc free/rc", EACCES),
            // Removing the directory link is allowed (it takes the files away from where
            // they are read); what is made at its name is judged by the rule as written.
            ("unlink .config", OK),
            ("mkdir .config", OK),
            ("mkdir .config/git", OK),
            ("open .config/git/config creat", EACCES),
            ("open free/x creat", OK),
        ],
    );
    assert!(d.join(".bashrc").is_symlink());
    r.check_records(&[
        rec("/unmapped/activity", "unlink")
            .has("/file/path", path_str(&d, ".bashrc"))
            .has("/unmapped/rule", "files.read_only[0]"),
        rec("/unmapped/activity", "rename")
            .has("/file/path", path_str(&d, ".bashrc"))
            .has("/unmapped/rule", "files.read_only[0]"),
        rec("/file/path", path_str(&d, ".config/git/config"))
            .has("/unmapped/rule", "files.read_only[1]"),
    ]);
}

/// A file's attributes (`chattr`'s flags: `nodump` here, which an owner may set) are part
/// of it: set through a descriptor opened for reading (`FS_IOC_SETFLAGS`, every kernel) or
/// by name (`file_setattr(2)`, 6.17+), they are a write to the name. The agent user owns
/// the files; each change works outside.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn file_attributes_are_writes() {
    let d = workdir_as(User::Agent, "file-attrs");
    for f in ["ro/f", "ro/g", "secret/f", "free/f"] {
        write(&d.join(f), "x");
    }
    User::Agent.own(&d);
    let p = |rel: &str| path_str(&d, rel);
    let by_name = kernel_version() >= (6, 17);
    let by_name_outside = if by_name { OK } else { "GET-ENOSYS" };
    for f in ["ro/f", "secret/f"] {
        assert_eq!(
            probe_outside_as(User::Agent, &["setflags", &p(f)]),
            OK,
            "outside: {f}"
        );
    }
    for f in ["ro/g", "secret/f"] {
        assert_eq!(
            probe_outside_as(User::Agent, &["file-setattr", &p(f)]),
            by_name_outside,
            "outside, by name: {f}"
        );
    }
    let policy = format!(
        "files:\n  read_only: [{0}/ro]\n  deny: [{0}/secret]\n",
        d.display()
    );
    let by_name_inside = if by_name { EACCES } else { "GET-ENOSYS" };
    let r = check_as(
        User::Agent,
        &d,
        Some(&policy),
        &[
            (format!("setflags {}", p("ro/f")).as_str(), EACCES),
            (
                format!("file-setattr {}", p("ro/g")).as_str(),
                by_name_inside,
            ),
            (
                format!("file-setattr {}", p("secret/f")).as_str(),
                by_name_inside,
            ),
            (format!("setflags {}", p("free/f")).as_str(), OK),
            (
                format!("file-setattr {}", p("free/f")).as_str(),
                by_name_outside,
            ),
        ],
    );
    let ro = |f: &str| {
        rec("/file/path", p(f))
            .has("/unmapped/activity", "setattr")
            .has("/unmapped/rule", "files.read_only[0]")
    };
    if by_name {
        r.check_records(&[
            ro("ro/f"),
            ro("ro/g"),
            rec("/file/path", p("secret/f")).has("/unmapped/rule", "files.deny[0]"),
        ]);
    } else {
        r.check_records(&[ro("ro/f")]);
    }
}
