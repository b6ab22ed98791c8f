//! Scope and self-protection: a confined process stays confined in the cgroups it makes,
//! and cannot undo its confinement (`bpf()`, signals and ptrace to sandbox, mounts, moving
//! itself out of its cgroup).

use sandbox_tests::*;

#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn child_cgroup_stays_confined() {
    let d = workdir("child_cgroup");
    write(&d.join("secret.txt"), "s");
    let policy = format!("files:\n  deny: [{}/secret.txt]\n", d.display());
    let r = check(
        &d,
        Some(&policy),
        &[("cgroup-child escape", OK), ("open secret.txt r", EACCES)],
    );
    let rec = r.one_record("/file/path", &path_str(&d, "secret.txt"));
    let cg = rec["actor"]["process"]["cgroup"].as_str().unwrap();
    assert!(
        cg.starts_with("/sandbox/run-") && cg.ends_with("/escape"),
        "{cg}"
    );
}

/// An agent cannot undo its confinement: no `bpf()`, no signals or ptrace to sandbox, no
/// mounts, no moving itself out of its cgroup (its own sub-cgroups stay usable).
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn self_protection() {
    let d = workdir("self_protection");
    std::fs::create_dir_all(d.join("mnt")).unwrap();
    let r = check(
        &d,
        Some("name: guarded\n"),
        &[
            ("bpf", EPERM),
            ("kill-parent 9", EPERM),
            ("kill-parent 0", OK),
            ("ptrace-parent", EPERM),
            ("mount mnt", EPERM),
            ("cgroup-move /", EACCES),
            ("cgroup-child inner", OK),
        ],
    );
    // sandbox survived the SIGKILL attempt: it reported the probe's own exit status (1:
    // some operations failed) and wrote the records.
    assert_eq!(r.status, 1, "{}", r.stderr);
    r.check_records(&[
        rec("/activity", "bpf")
            .has("/policy/rule", "self_protection")
            .has("/bpf_cmd", 0),
        rec("/activity", "signal").has("/signal", 9),
        rec("/activity", "ptrace"),
        rec("/activity", "mount"),
        rec("/file/path", "/sys/fs/cgroup/cgroup.procs").has("/policy/rule", "self_protection"),
    ]);
    // The signal and the ptrace were aimed at sandbox, the probe's parent.
    for activity in ["signal", "ptrace"] {
        let r = r.one_record("/activity", activity);
        assert_eq!(r["target"]["pid"], r["actor"]["process"]["ppid"], "{r}");
    }
    // The same calls from outside the sandbox are not ours to refuse.
    assert_eq!(probe_outside(&["bpf"]), "OK");
}
