//! `sandbox explain` against the kernel: the same compiled policy, the same answers.

use sandbox_tests::*;

/// `sandbox explain` computes decisions from the same compiled form the kernel gets; on
/// generated paths, addresses and binaries the two must agree.
#[test]
#[ignore = "needs root and BPF LSM: run with `cargo xtask test`"]
fn explain_agrees_with_the_kernel() {
    let d = workdir("explain_agrees");
    let b = bins();
    let policy = format!(
        "files:\n  workspace: {0}/ws\n  deny: ['{0}/a/secret', '**/*.key', '{0}/b/*/private/**']\n  read_only: ['{0}/ro', '{0}/a/*.conf']\n  \
         write: ['{0}/a', '{0}/tmp*']\nexec:\n  deny: ['{0}/bin/bad*', 'evil']\nnetwork:\n  allow: ['10.9.0.0/16:443']\n  deny: ['8.8.0.0/16:53']\n",
        d.display()
    );
    write(&d.join("policy.yaml"), &policy);
    // Generated paths: every combination of a few components that exercise each rule.
    let dirs = [
        "a",
        "b/x",
        "b/x/private",
        "b/x/y/private",
        "ro",
        "ws",
        "tmp1",
        "c",
        "a/secret",
    ];
    let names = [
        "f", "x.key", "secrets", "app.conf", ".hidden", "a b", "k.keys",
    ];
    let mut paths = Vec::new();
    for dir in dirs {
        for name in names {
            let p = d.join(dir).join(name);
            write(&p, "x");
            paths.push(p);
        }
    }
    let explain = |args: &[&str]| -> bool {
        let out = Command::new(&b.sandbox)
            .arg("explain")
            .arg("--policy")
            .arg(d.join("policy.yaml"))
            .args(args)
            .output()
            .unwrap();
        match out.status.code() {
            Some(0) => true,
            Some(1) => false,
            other => panic!(
                "explain {args:?}: status {other:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    };
    let mut ops: Vec<Vec<String>> = Vec::new();
    let mut expected = Vec::new();
    for p in &paths {
        let ps = p.display().to_string();
        for (mode, verb) in [("r", "read"), ("w", "write")] {
            expected.push((format!("open {ps} {mode}"), explain(&[verb, &ps])));
            ops.push(vec!["open".into(), ps.clone(), mode.into()]);
        }
    }
    for name in ["bin/bad-tool", "bin/good-tool", "bin/evil", "evil-not"] {
        let p = d.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        copy_exec(&b.probe, &p);
        let ps = p.display().to_string();
        expected.push((format!("exec {ps}"), explain(&["exec", &ps])));
        ops.push(vec!["exec".into(), ps]);
    }
    for (addr, port) in [
        ("10.9.1.1", "443"),
        ("10.9.1.1", "80"),
        ("8.8.8.8", "53"),
        ("8.8.8.8", "443"),
        ("::ffff:10.9.0.1", "443"),
        ("fd00::1", "443"),
    ] {
        expected.push((
            format!("connect {addr} {port}"),
            explain(&["connect", addr, port]),
        ));
        ops.push(vec!["connect".into(), addr.into(), port.into()]);
    }
    let op_refs: Vec<Vec<&str>> = ops
        .iter()
        .map(|o| o.iter().map(String::as_str).collect())
        .collect();
    let op_slices: Vec<&[&str]> = op_refs.iter().map(Vec::as_slice).collect();
    let r = probe(&d, Some(&policy), &op_slices);
    let mut denied = 0;
    for (op, allow) in &expected {
        let got = r.result(op);
        let kernel_denied = got == "EACCES" || got == "EPERM";
        assert_eq!(
            !kernel_denied,
            *allow,
            "explain says {} but the kernel answered {got} for '{op}'",
            if *allow { "allow" } else { "deny" }
        );
        denied += usize::from(kernel_denied);
    }
    assert!(
        denied > 20 && denied < expected.len() - 20,
        "the corpus must exercise both outcomes ({denied} of {})",
        expected.len()
    );
}
