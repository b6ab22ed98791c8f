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
    // One question per line of `sandbox explain -` (one policy compile for all of them).
    let mut questions: Vec<String> = Vec::new();
    let mut ops: Vec<Vec<String>> = Vec::new();
    let mut expected_ops = Vec::new();
    for p in &paths {
        let ps = p.display().to_string();
        for (mode, verb) in [("r", "read"), ("w", "write")] {
            questions.push(format!("{verb} {ps}"));
            expected_ops.push(format!("open {ps} {mode}"));
            ops.push(vec!["open".into(), ps.clone(), mode.into()]);
        }
    }
    for name in ["bin/bad-tool", "bin/good-tool", "bin/evil", "evil-not"] {
        let p = d.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        copy_exec(&b.probe, &p);
        let ps = p.display().to_string();
        questions.push(format!("exec {ps}"));
        expected_ops.push(format!("exec {ps}"));
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
        questions.push(format!("connect {addr} {port}"));
        expected_ops.push(format!("connect {addr} {port}"));
        ops.push(vec!["connect".into(), addr.into(), port.into()]);
    }
    let answers = explain_lines(&b.sandbox, &d.join("policy.yaml"), &questions);
    // The one-question form gives the same answers (its exit status).
    for i in [0, 1, questions.len() - 7, questions.len() - 1] {
        let words: Vec<&str> = questions[i].splitn(2, ' ').collect();
        let args: Vec<&str> = if words[0] == "connect" {
            questions[i].split(' ').collect()
        } else {
            words
        };
        let out = Command::new(&b.sandbox)
            .arg("explain")
            .arg("--policy")
            .arg(d.join("policy.yaml"))
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(i32::from(!answers[i])),
            "explain {args:?} alone disagrees with its answer in the batch"
        );
    }
    let expected: Vec<(String, bool)> = expected_ops.into_iter().zip(answers).collect();
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

/// `sandbox explain --policy POLICY -` on `questions`: whether each is allowed, in order.
fn explain_lines(
    sandbox: &std::path::Path,
    policy: &std::path::Path,
    questions: &[String],
) -> Vec<bool> {
    use std::io::Write;
    let mut child = Command::new(sandbox)
        .args(["explain", "--policy"])
        .arg(policy)
        .arg("-")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = questions.join("\n");
    input.push('\n');
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let answers: Vec<bool> = text
        .lines()
        .map(|l| match l.split(':').next() {
            Some("allow") => true,
            Some("deny") => false,
            _ => panic!("explain -: unexpected answer line {l:?}"),
        })
        .collect();
    assert_eq!(
        answers.len(),
        questions.len(),
        "explain -: one answer per question; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let any_denied = answers.iter().any(|a| !a);
    assert_eq!(
        out.status.code(),
        Some(i32::from(any_denied)),
        "explain -: exit status"
    );
    answers
}
