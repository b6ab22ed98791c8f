//! Policy validation, data-driven: one `check(yaml, expected)` per case.

use std::collections::HashMap;

use super::*;

fn ctx() -> Context {
    let mut env = HashMap::new();
    env.insert("PROJECT".to_owned(), "/srv/proj".to_owned());
    env.insert("EMPTY".to_owned(), String::new());
    Context {
        home: "/home/u".into(),
        cwd: "/work/ws".into(),
        env,
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    }
}

/// `Ok(glob of files.deny[0])` or the error text.
fn check(yaml: &str, expected: Result<&str, &str>) {
    let got = load_str(yaml, "p.yaml", &ctx());
    match (got, expected) {
        (Ok(p), Ok(want)) => assert_eq!(
            p.files.deny.first().map(|r| r.glob.as_str()),
            Some(want),
            "{yaml}"
        ),
        (Err(e), Err(want)) => {
            let text = e.to_string();
            assert!(
                text.contains(want),
                "{yaml}\nexpected error containing: {want}\ngot: {text}"
            );
        }
        (Ok(p), Err(want)) => panic!("{yaml}\nexpected error '{want}', got {p:#?}"),
        (Err(e), Ok(want)) => panic!("{yaml}\nexpected {want}, got error {e}"),
    }
}

#[test]
fn expansion_and_normalisation() {
    check("files: {deny: ['~/.ssh']}", Ok("/home/u/.ssh"));
    check(
        "files: {deny: ['$PROJECT/secrets']}",
        Ok("/srv/proj/secrets"),
    );
    check("files: {deny: ['${PROJECT}/a/../b']}", Ok("/srv/proj/b"));
    check(
        "files: {deny: ['${NOPE:-~/.cache}/x']}",
        Ok("/home/u/.cache/x"),
    );
    check("files: {deny: ['${EMPTY:-/fallback}']}", Ok("/fallback"));
    check("files: {deny: ['.env']}", Ok("/work/ws/.env"));
    check(
        "files: {workspace: /data, deny: ['**/.env*']}",
        Ok("/data/**/.env*"),
    );
    check("files: {deny: ['//etc/./shadow/']}", Ok("/etc/shadow"));
    check(
        "files: {deny: ['/data/*/secrets/**']}",
        Ok("/data/*/secrets/**"),
    );
}

#[test]
fn syntax_and_type_errors_have_positions() {
    check(
        "files:\n  dney: [/etc]\n",
        Err("p.yaml:2:3: files: unknown field `dney`"),
    );
    check("files:\n  dney: [/etc]\n", Err("did you mean `deny`?"));
    check("netwrok: {}\n", Err("p.yaml:1:1: unknown field `netwrok`"));
    check("netwrok: {}\n", Err("did you mean `network`?"));
    check(
        "files:\n  deny: /etc\n",
        Err("p.yaml:2:9: files.deny: invalid type: string \"/etc\", expected a sequence"),
    );
    check(
        "files:\n  deny: []\n  deny: []\n",
        Err("p.yaml:2:3: files: duplicate field `deny`"),
    );
    check(
        "mode: sometimes\n",
        Err("p.yaml:1:7: mode: unknown variant `sometimes`"),
    );
    check(
        "files: [\n",
        Err("p.yaml:1:8: files: invalid type: sequence, expected a mapping of file rules"),
    );
    check("files: {deny: [/a\n", Err("p.yaml:2:1: "));
}

#[test]
fn boundary_rules_are_checked() {
    check(
        "network: {sockets: [unix, inet, vsok]}",
        Err("p.yaml:1:10: network.sockets[2]: 'vsok': not a socket family; known: unix, inet"),
    );
    check(
        "network: {listen: ['127.0.0.1/8']}",
        Err("p.yaml:1:10: network.listen[0]: '127.0.0.1/8': "),
    );
    check(
        "network: {unix: ['@agent[', 'run/x.sock']}",
        Err("p.yaml:1:10: network.unix[0]: '@agent[': "),
    );
    let p = load_str(
        "network: {unix: ['@agent-*', /run/a.sock]}",
        "p.yaml",
        &ctx(),
    )
    .unwrap();
    let globs: Vec<&str> = p.network.unix.iter().map(|r| r.glob.as_str()).collect();
    assert_eq!(globs, ["@agent-*", "/run/a.sock"]);
    // Defaults: unix, inet, inet6, netlink; listen on loopback only.
    assert_eq!(
        p.network.sock_families,
        (1 << 1) | (1 << 2) | (1 << 10) | (1 << 16)
    );
    assert_eq!(p.network.listen.len(), 2);
}

#[test]
fn semantic_errors_name_field_and_value() {
    // Block style: the item itself (line:column of its value).
    check(
        "files:\n  deny:\n    - /ok\n    - '/a/[b-'\n",
        Err("p.yaml:4:7: files.deny[1]: '/a/[b-': invalid glob"),
    );
    check(
        "files: {deny: ['/a/[b-']}",
        Err("p.yaml:1:8: files.deny[0]: '/a/[b-': invalid glob"),
    );
    check(
        "files: {deny: ['/ok', '$NOPE/x']}",
        Err("files.deny[1]: '$NOPE/x': environment variable NOPE is not set"),
    );
    check(
        "files: {deny: ['']}",
        Err("files.deny[0]: '': empty pattern"),
    );
    check(
        "network: {deny: ['10.0.0.0/33']}",
        Err("network.deny[0]: '10.0.0.0/33': invalid CIDR"),
    );
    check(
        "network: {deny: ['10.0.0.1/8']}",
        Err("has host bits set; did you mean '10.0.0.0/8'?"),
    );
    check(
        "network: {allow: ['1.2.3.4:99999']}",
        Err("network.allow[0]: '1.2.3.4:99999': invalid port"),
    );
    check(
        "network: {allow: ['1.2.3.4:90-80']}",
        Err("port range 90-80 is empty"),
    );
    check("version: 7\n", Err("version: unsupported version 7"));
    check(
        "limits:\n  pids: 64\n  memory: lots\n",
        Err(
            "p.yaml:3:11: limits.memory: 'lots': not an amount of memory (e.g. 4G, 512M, 80%, or max)",
        ),
    );
    check(
        "limits:\n  pids: 2\n",
        Err("p.yaml:2:9: limits.pids: 2 tasks are too few"),
    );
    check(
        "limits:\n  pids: [1]\n",
        Err("a number, or text such as 4G, 80% or max"),
    );
    check(
        "limits:\n  cpu: 0.001\n",
        Err("p.yaml:2:8: limits.cpu: 0.001 CPUs is less than the kernel gives"),
    );
    check(
        "limits:\n  cpu: 2 cores\n",
        Err("p.yaml:2:8: limits.cpu: '2 cores': not a number of CPUs"),
    );
    check(
        "limits:\n  io:\n    write: 1K\n",
        Err("p.yaml:3:12: limits.io.write: 1024 bytes a second is less than"),
    );
    check(
        "limits:\n  io: {reads: 1M}\n",
        Err("unknown field `reads`, expected one of `read`, `write`, `read_iops`, `write_iops`"),
    );
    check(
        "limits:\n  pids: 1.5\n",
        Err("p.yaml:2:9: limits.pids: 1.5: not a whole number of tasks"),
    );
}

#[test]
fn every_error_is_reported_at_once() {
    let e = load_str(
        "files: {deny: ['/[']}\nnetwork: {deny: [nope]}\n",
        "p.yaml",
        &ctx(),
    )
    .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("files.deny[0]") && text.contains("network.deny[0]"),
        "{text}"
    );
}

#[test]
fn network_rule_forms() {
    let p = |s: &str| parse_net(s).unwrap();
    assert_eq!(p("10.0.0.0/8").1, (0, 65535));
    assert_eq!(p("10.0.0.1:443").1, (443, 443));
    assert_eq!(p("10.0.0.0/8:8000-9000").1, (8000, 9000));
    assert_eq!(p("[::1]:22").0.to_string(), "::1/128");
    assert_eq!(p("[fd00::/8]:80").1, (80, 80));
    assert_eq!(p("fd00::/8").0.to_string(), "fd00::/8");
}

#[test]
fn defaults() {
    let p = load_str("", "p.yaml", &ctx()).unwrap();
    assert!(p.network.block_private);
    assert!(p.exec.allow_privileged);
    assert_eq!(p.files.mode, Mode::Enforce);
    assert_eq!(p.files.workspace, std::path::PathBuf::from("/work/ws"));
    assert_eq!(p.limits, limits::Limits::default());
    assert!(!p.limits.memory.written && !p.limits.pids.written);
    let p = load_str("limits: {memory: 2G}", "p.yaml", &ctx()).unwrap();
    assert_eq!(
        p.limits.memory,
        limits::Limit {
            amount: limits::Amount::Exact(2 << 30),
            written: true
        }
    );
    assert_eq!(p.limits.pids, limits::Limits::default().pids);
    assert_eq!(p.limits.cpu.amount, limits::Amount::Max);
    let p = load_str("limits: {cpu: 0.5}", "p.yaml", &ctx()).unwrap();
    assert_eq!(
        p.limits.cpu,
        limits::Limit {
            amount: limits::Amount::Exact(50_000),
            written: true
        }
    );
    let p = load_str("mode: audit\nnetwork: {mode: enforce}\n", "p.yaml", &ctx()).unwrap();
    assert_eq!(p.files.mode, Mode::Audit);
    assert_eq!(p.network.mode, Mode::Enforce);
}

#[test]
fn built_in_default_policy_is_valid() {
    let p = load_str(DEFAULT_POLICY, "default", &ctx()).unwrap();
    assert!(p.files.deny.iter().any(|r| r.glob == "/home/u/.ssh"));
    assert!(p.exec.deny.iter().any(|r| r.glob == "/**/sudo"));
    assert!(!p.exec.allow_privileged);
}

#[test]
fn errno_constants_match_libc() {
    assert_eq!(sandbox_common::errno::EPERM, libc::EPERM);
    assert_eq!(sandbox_common::errno::EACCES, libc::EACCES);
}

#[test]
fn workspace_is_normalised() {
    let p = load_str("files: {workspace: ./a/../b/.}", "p.yaml", &ctx()).unwrap();
    assert_eq!(p.files.workspace, std::path::PathBuf::from("/work/ws/b"));
}

/// A bare name in `exec.allow` would allow every file of that name (`/tmp/git` written by
/// the command): an error naming the field and the binary on `PATH`. In `exec.deny` it is
/// that name anywhere, as documented.
#[test]
fn exec_allow_wants_paths() {
    let mut c = ctx();
    c.env
        .insert("PATH".to_owned(), "relative:/bin:/usr/bin".to_owned());
    let e = load_str("exec:\n  allow: [/usr/bin/env, sh]\n", "p.yaml", &c)
        .unwrap_err()
        .to_string();
    assert!(e.contains("exec.allow[1]") && e.contains("'sh'"), "{e}");
    assert!(e.contains("name the binary by its path (/"), "{e}");
    assert!(e.contains("p.yaml:2:"), "points at the line: {e}");
    let p = load_str(
        "exec:\n  deny: [sh]\n  allow: ['/usr/bin/*']\n",
        "p.yaml",
        &c,
    )
    .unwrap();
    assert_eq!(p.exec.deny[0].glob, "/**/sh");
}

/// A workspace, home or variable whose path has glob characters (`client[acme]`,
/// `proj{old}`) is put into the rules escaped: the rules name that directory, not a class
/// or alternatives that the real path does not match. Its literal rules stay literal.
#[test]
fn glob_characters_of_the_workspace_and_home_are_matched_as_themselves() {
    let mut c = ctx();
    c.cwd = "/work/client[acme]".into();
    c.home = "/home/u{x}".into();
    c.env.insert("P".to_owned(), "/srv/a*b".to_owned());
    c.env.insert("Q".to_owned(), "x,y".to_owned());
    let yaml = "files:\n  deny: ['.git/**', '~/.ssh', '$P/k', 'd/*.key', '/o/{$Q,z}']\n";
    let p = load_str(yaml, "p.yaml", &c).unwrap();
    let globs: Vec<&str> = p.files.deny.iter().map(|r| r.glob.as_str()).collect();
    assert_eq!(
        globs,
        [
            "/work/client\\[acme\\]/.git/**",
            "/home/u\\{x\\}/.ssh",
            "/srv/a\\*b/k",
            "/work/client\\[acme\\]/d/*.key",
            "/o/{x\\,y,z}",
        ]
    );
    let q = crate::compile::matcher::glob(&p.files.deny[4].glob)
        .unwrap()
        .compile_matcher();
    assert!(q.is_match("/o/x,y") && q.is_match("/o/z") && !q.is_match("/o/x"));
    assert_eq!(
        p.files.deny[1].literal.as_deref(),
        Some(std::path::Path::new("/home/u{x}/.ssh"))
    );
    let m = crate::compile::matcher::glob(&p.files.deny[0].glob)
        .unwrap()
        .compile_matcher();
    assert!(m.is_match("/work/client[acme]/.git/config"));
    assert!(!m.is_match("/work/clienta/.git/config"));
}

/// A root command's protective `~` rules cover the other users' homes too (a second rule
/// of the same field); its grants stay in its own home.
#[test]
fn a_root_commands_tilde_protects_every_home() {
    let mut c = ctx();
    c.other_homes = vec!["/root".into(), "/home/b".into()];
    let yaml = "files:\n  deny: [~/.ssh, /etc/x]\n  read_only: ['~/.config/**']\n  write: [~/w]\nexec:\n  deny: [~/bin/t]\n";
    let p = load_str(yaml, "p.yaml", &c).unwrap();
    let globs = |rules: &[PathRule]| {
        rules
            .iter()
            .map(|r| (r.field.clone(), r.glob.clone()))
            .collect::<Vec<_>>()
    };
    let pair = |f: &str, g: &str| (f.to_owned(), g.to_owned());
    assert_eq!(
        globs(&p.files.deny),
        [
            pair("files.deny[0]", "/home/u/.ssh"),
            pair("files.deny[0]", "/{root,home/b}/.ssh{,/**}"),
            pair("files.deny[1]", "/etc/x"),
        ]
    );
    assert_eq!(
        globs(&p.files.read_only),
        [
            pair("files.read_only[0]", "/home/u/.config/**"),
            pair("files.read_only[0]", "/{root,home/b}/.config/**"),
        ]
    );
    assert_eq!(globs(&p.files.write), [pair("files.write[0]", "/home/u/w")]);
    assert_eq!(globs(&p.exec.deny).len(), 2);
    // One other home: a literal path (its identity is protected too).
    c.other_homes = vec!["/home/b".into()];
    let p = load_str("files:\n  deny: [~/.ssh]\n", "p.yaml", &c).unwrap();
    assert_eq!(p.files.deny[1].glob, "/home/b/.ssh");
    assert!(p.files.deny[1].literal.is_some());
}
