//! The compiled matcher against globset, on generated patterns and paths; network entries
//! against their intended meaning.

use std::net::IpAddr;

use sandbox_common::{accept, net_action};

use super::matcher::{self as dfa, Attribution, Pattern, Shape};
use super::net;
use crate::policy::{Context, load_str};

/// Deterministic xorshift: the corpus is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const PATTERN_PARTS: &[&str] = &[
    "a", "b", "ab", ".env", "x.y", "*", "?", "**", "[ab]", "[!a]", "{a,b}", "*.y", "a*", ".env*",
    "{x.y,ab}", "[a-c]b",
];
const PATH_PARTS: &[&str] = &[
    "a",
    "b",
    "ab",
    ".env",
    ".env.local",
    "x.y",
    "c",
    "ba",
    "abb",
    "cb",
    "y",
    "\u{e9}",
    "a b",
];

fn gen_pattern(r: &mut Rng) -> String {
    let n = 1 + r.below(4);
    let mut s = String::new();
    for i in 0..n {
        let part = r.pick(PATTERN_PARTS);
        // `**` only as a whole component, as globset requires.
        if part == "**" && i > 0 && s.ends_with("**") {
            continue;
        }
        s.push('/');
        s.push_str(part);
    }
    s
}

fn gen_path(r: &mut Rng) -> Vec<u8> {
    let n = 1 + r.below(5);
    let mut s = Vec::new();
    for _ in 0..n {
        s.push(b'/');
        if r.below(25) == 0 {
            s.extend_from_slice(&[0xff, b'a']); // not UTF-8
        } else {
            s.extend_from_slice(r.pick(PATH_PARTS).as_bytes());
        }
    }
    s
}

/// globset's answer for a pattern (and, for a literal, its subtree).
struct Reference(Vec<globset::GlobMatcher>);

impl Reference {
    fn new(glob: &str, literal: bool) -> Self {
        let mut v = vec![dfa::glob(glob).unwrap().compile_matcher()];
        if literal {
            v.push(
                dfa::glob(&format!("{}/**", glob.trim_end_matches('/')))
                    .unwrap()
                    .compile_matcher(),
            );
        }
        Self(v)
    }
    fn matches(&self, path: &[u8]) -> bool {
        let p = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path),
        );
        self.0.iter().any(|m| m.is_match(p))
    }
}

const SEED: u64 = 0x1234_5678_9abc_def0;

fn is_literal(g: &str) -> bool {
    !g.contains(['*', '?', '[', '{', '\\'])
}

/// One pattern at a time: the matcher's answer equals globset's on every generated path.
#[test]
fn matcher_agrees_with_globset_per_pattern() {
    let mut r = Rng(0x5eed_1234_abcd_0001);
    let mut checked = 0;
    for _ in 0..400 {
        let glob = gen_pattern(&mut r);
        if dfa::glob(&glob).is_err() {
            continue;
        }
        let literal = is_literal(&glob);
        let m = dfa::build(
            &[Pattern {
                glob: glob.clone(),
                shape: Shape::of(literal),
                slot: accept::FILE_DENY,
            }],
            SEED,
        )
        .unwrap();
        let reference = Reference::new(&glob, literal);
        for _ in 0..60 {
            let path = gen_path(&mut r);
            let want = reference.matches(&path);
            let got = dfa::has(m.match_path(&path), accept::FILE_DENY);
            assert_eq!(
                got,
                want,
                "glob {glob} path {}",
                String::from_utf8_lossy(&path)
            );
            checked += 1;
        }
    }
    assert!(checked > 15_000, "corpus too small: {checked}");
}

/// Many patterns of several kinds in one matcher: for every kind, the mask says whether any
/// rule of that kind matches, and attribution names the first one.
#[test]
fn combined_matcher_per_kind_and_attribution() {
    let mut r = Rng(0x0dd_c0ffee);
    for round in 0..40 {
        let mut pats: Vec<(Pattern, usize)> = Vec::new();
        while pats.len() < 14 {
            let glob = gen_pattern(&mut r);
            if dfa::glob(&glob).is_ok() {
                let slot = [accept::FILE_DENY, accept::FILE_WRITE, accept::EXEC_DENY]
                    [(r.below(3)) as usize];
                let literal = is_literal(&glob);
                let id = pats.len();
                pats.push((
                    Pattern {
                        glob,
                        shape: Shape::of(literal),
                        slot,
                    },
                    id,
                ));
            }
        }
        let plain: Vec<Pattern> = pats.iter().map(|(p, _)| p.clone()).collect();
        let m = dfa::build(&plain, SEED).unwrap();
        let attr = Attribution::new(pats.clone());
        let refs: Vec<Reference> = plain
            .iter()
            .map(|p| Reference::new(&p.glob, p.shape == Shape::Literal))
            .collect();
        for _ in 0..300 {
            let path = gen_path(&mut r);
            let mask = m.match_path(&path);
            for slot in [accept::FILE_DENY, accept::FILE_WRITE, accept::EXEC_DENY] {
                let first = pats
                    .iter()
                    .zip(&refs)
                    .filter(|((p, _), rf)| p.slot == slot && rf.matches(&path))
                    .map(|((_, id), _)| *id)
                    .min();
                assert_eq!(
                    dfa::has(mask, slot),
                    first.is_some(),
                    "round {round} slot {slot} path {}: {plain:#?}",
                    String::from_utf8_lossy(&path)
                );
                assert_eq!(
                    attr.first(slot, &path),
                    first,
                    "round {round} slot {slot} path {}",
                    String::from_utf8_lossy(&path)
                );
            }
        }
    }
}

#[test]
fn literal_covers_subtree_glob_does_not() {
    let m = dfa::build(
        &[
            Pattern {
                glob: "/home/u/.ssh".into(),
                shape: Shape::Literal,
                slot: accept::FILE_DENY,
            },
            Pattern {
                glob: "/**/.env".into(),
                shape: Shape::Glob,
                slot: accept::FILE_DENY,
            },
            Pattern {
                glob: "/data/*/secrets/**".into(),
                shape: Shape::Glob,
                slot: accept::FILE_READ_ONLY,
            },
        ],
        SEED,
    )
    .unwrap();
    let deny = |p: &str| dfa::has(m.match_path(p.as_bytes()), accept::FILE_DENY);
    let ro = |p: &str| dfa::has(m.match_path(p.as_bytes()), accept::FILE_READ_ONLY);
    assert!(deny("/home/u/.ssh"));
    assert!(deny("/home/u/.ssh/id_rsa"));
    assert!(!deny("/home/u/.sshx"));
    assert!(deny("/srv/app/.env"));
    // A virtualenv directory named .env: the glob names files called .env, not their contents.
    assert!(!deny("/srv/app/.env/bin/python"));
    assert!(ro("/data/x/secrets/a"));
    assert!(ro("/data/x/secrets/a/b/c"));
    assert!(!ro("/data/x/secrets"), "`/**` means strictly below");
    assert!(!ro("/data/x/y/secrets/a"));
}

/// A name (the directories above a protected path) matches itself only, through the hash
/// set: not what lies below it, and attribution agrees.
#[test]
fn a_name_matches_itself_not_below() {
    let pats = vec![
        (
            Pattern {
                glob: "/home/u".into(),
                shape: Shape::Name,
                slot: accept::ANCESTOR,
            },
            0,
        ),
        (
            Pattern {
                glob: "/home/u/x".into(),
                shape: Shape::Name,
                slot: accept::ANCESTOR,
            },
            1,
        ),
        (
            Pattern {
                glob: "/home".into(),
                shape: Shape::Literal,
                slot: accept::FILE_READ_ONLY,
            },
            2,
        ),
    ];
    let plain: Vec<Pattern> = pats.iter().map(|(p, _)| p.clone()).collect();
    let m = dfa::build(&plain, SEED).unwrap();
    assert_eq!(m.anchored.states(), 1, "names stay out of the DFA");
    let attr = Attribution::new(pats);
    let anc = |p: &str| dfa::has(m.match_path(p.as_bytes()), accept::ANCESTOR);
    assert!(anc("/home/u"));
    assert!(anc("/home/u/x"));
    assert!(!anc("/home/u/y"));
    assert!(!anc("/home/u/x/z"));
    assert!(!anc("/home"));
    assert_eq!(attr.first(accept::ANCESTOR, b"/home/u/x"), Some(1));
    assert_eq!(attr.first(accept::ANCESTOR, b"/home/u/y"), None);
    // The same hash carries a literal's kinds for below and a name's for itself.
    assert!(dfa::has(
        m.match_path(b"/home/u/x/z"),
        accept::FILE_READ_ONLY
    ));
    assert!(dfa::is_plain(r"/a/b\*c"));
    assert!(!dfa::is_plain("/a/*"));
    assert!(!dfa::is_plain("/a/{b,c}"));
}

/// Feeding a mount prefix first (what the loader stores per superblock) then the path inside
/// the superblock gives the same result as feeding the full path, including "below" matches
/// that complete inside the prefix.
#[test]
fn superblock_prefix_state_composes() {
    let m = dfa::build(
        &[
            Pattern {
                glob: "/mnt/data/**/*.key".into(),
                shape: Shape::Glob,
                slot: accept::FILE_DENY,
            },
            Pattern {
                glob: "/mnt".into(),
                shape: Shape::Literal,
                slot: accept::FILE_READ_ONLY,
            },
            Pattern {
                glob: "/mnt/data/*/x/**".into(),
                shape: Shape::Glob,
                slot: accept::EXEC_DENY,
            },
        ],
        SEED,
    )
    .unwrap();
    for (prefix, rest) in [
        ("/mnt/data", "/x/y.key"),
        ("/mnt/data/q", "/x/z"),
        ("", "/mnt/data/q/x/z"),
    ] {
        let s = m.feed(m.start(), prefix.as_bytes());
        let whole = format!("{prefix}{rest}");
        assert_eq!(
            m.finish(m.feed(s, rest.as_bytes())),
            m.match_path(whole.as_bytes()),
            "{whole}"
        );
    }
    let mask = m.match_path(b"/mnt/data/q/x/z");
    assert!(dfa::has(mask, accept::FILE_READ_ONLY) && dfa::has(mask, accept::EXEC_DENY));
}

#[test]
fn default_policy_matcher_is_small() {
    let ctx = Context {
        home: "/home/u".into(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    let p = load_str(crate::policy::DEFAULT_POLICY, "default", &ctx).unwrap();
    let c = super::compile(&p, SEED).unwrap();
    // About 710: the never-writable list (git config and hooks at any depth, `**/.git/**/x`)
    // is most of it. The bound catches blowups (thousands of states), not this growth; the
    // cost per open does not depend on it.
    let states = c.matcher.anchored.states() + c.matcher.floating.states();
    assert!(states < 900, "{states} states");
    assert_eq!(
        c.rule_for(accept::FILE_DENY, b"/home/u/.ssh/id_ed25519")
            .unwrap()
            .source,
        "~/.ssh"
    );
    assert!(dfa::has(c.match_path(b"/usr/bin/sudo"), accept::EXEC_DENY));
    assert_eq!(
        c.rule_for(accept::EXEC_DENY, b"/usr/bin/sudo")
            .unwrap()
            .source,
        "sudo"
    );
    assert!(!dfa::has(
        c.match_path(b"/usr/bin/sudoedit"),
        accept::EXEC_DENY
    ));
}

fn net_policy(yaml: &str) -> super::CompiledPolicy {
    let ctx = Context {
        home: "/home/u".into(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    super::compile(&load_str(yaml, "p.yaml", &ctx).unwrap(), SEED).unwrap()
}

fn decide(c: &super::CompiledPolicy, addr: &str, port: u16) -> Option<u8> {
    net::lookup(&c.net.v4, &c.net.v6, addr.parse::<IpAddr>().unwrap(), port).map(|(a, _)| a)
}

#[test]
fn network_longest_prefix_with_inherited_port_rules() {
    let c = net_policy(
        "network:\n  allow: ['10.1.2.3:443']\n  deny: ['0.0.0.0/0:25', '[2001:db8::/32]:22']\n",
    );
    assert_eq!(decide(&c, "10.1.2.3", 443), Some(net_action::ALLOW));
    assert_eq!(
        decide(&c, "10.1.2.3", 22),
        Some(net_action::DENY),
        "falls through to 10/8"
    );
    assert_eq!(decide(&c, "10.9.9.9", 443), Some(net_action::DENY));
    assert_eq!(decide(&c, "93.184.216.34", 25), Some(net_action::DENY));
    assert_eq!(decide(&c, "93.184.216.34", 443), None);
    assert_eq!(
        decide(&c, "::ffff:10.1.2.3", 443),
        Some(net_action::ALLOW),
        "mapped IPv4 uses the IPv4 rules"
    );
    assert_eq!(decide(&c, "64:ff9b::a9fe:a9fe", 80), Some(net_action::DENY));
    assert_eq!(decide(&c, "2001:db8::1", 22), Some(net_action::DENY));
    assert_eq!(decide(&c, "2001:db8::1", 443), None);
    assert_eq!(decide(&c, "fe80::1", 443), Some(net_action::DENY));
    // IPv4-compatible, a site's own NAT64, site-local; not the rest of 64:ff9b::/16.
    for a in ["::a00:1", "::8.8.8.8", "64:ff9b:1::808:808", "fec0::1"] {
        assert_eq!(decide(&c, a, 443), Some(net_action::DENY), "{a}");
    }
    assert_eq!(decide(&c, "64:ff9b:2::1", 443), None);
}

/// The unspecified address goes to loopback: a deny of loopback covers it, an allow of
/// loopback's port does not open what its own prefix denies.
#[test]
fn the_unspecified_address_is_judged_as_loopback_too() {
    let allowed = |c: &super::CompiledPolicy, a: &str, port| {
        crate::explain::connect(c, a.parse().unwrap(), port).allowed
    };
    let c = net_policy(
        "network:\n  block_private: false\n  deny: ['127.0.0.0/8:8080', '[::1]:8080']\n",
    );
    for a in ["0.0.0.0", "::", "::ffff:0.0.0.0", "127.0.0.1", "::1"] {
        assert!(!allowed(&c, a, 8080), "{a}:8080");
        assert!(allowed(&c, a, 80), "{a}:80");
    }
    assert!(
        allowed(&c, "0.0.0.1", 8080),
        "only the unspecified address is this host"
    );
    let c = net_policy("network:\n  allow: ['127.0.0.1:8080']\n");
    assert!(allowed(&c, "127.0.0.1", 8080));
    assert!(!allowed(&c, "0.0.0.0", 8080), "0.0.0.0/8 stays private");
    // `::` from a socket bound to an IPv4-mapped address goes to 127.0.0.1.
    let c = net_policy("network:\n  block_private: false\n  deny: ['127.0.0.1:5432']\n");
    assert!(!allowed(&c, "::", 5432));
    assert!(allowed(&c, "::1", 5432));
}

#[test]
fn network_block_private_off() {
    let c = net_policy("network:\n  block_private: false\n");
    assert!(c.net.v4.is_empty() && c.net.v6.is_empty());
    assert_eq!(decide(&c, "169.254.169.254", 80), None);
}

#[test]
fn compile_is_deterministic() {
    let yaml = "files:\n  deny: ['/a/**/*.key', '/etc/shadow']\n  write: ['/tmp']\nexec:\n  deny: [sudo]\nnetwork:\n  allow: ['10.0.0.1:80']\n";
    let a = net_policy(yaml);
    let b = net_policy(yaml);
    assert_eq!(a.matcher, b.matcher);
    assert_eq!(a.net.v4, b.net.v4);
    assert_eq!(a.rules, b.rules);
}

#[test]
fn ancestors_of_protected_paths() {
    let a = |g: &str, lit: bool| dfa::protected_ancestors(g, lit);
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
    // A literal names itself: its parents are the ancestors.
    assert_eq!(a("/home/u/.ssh", true), (s(&["/home", "/home/u"]), s(&[])));
    // `X/**` does not name X: X is one too.
    assert_eq!(
        a("/home/u/.ssh/**", false),
        (s(&["/home", "/home/u", "/home/u/.ssh"]), s(&[]))
    );
    // Wildcard components are ancestors as patterns; `**` makes an area.
    assert_eq!(
        a("/srv/*/p/**/secrets/*.key", false),
        (
            s(&["/srv", "/srv/*", "/srv/*/p", "/srv/*/p/**/secrets"]),
            s(&["/srv/*/p"])
        )
    );
    // Nothing above a leading `**`: every directory leads there, and moves keep the tail.
    assert_eq!(a("/**/*.pem", false), (s(&[]), s(&[])));
    assert_eq!(a("/**/.ssh/**", false), (s(&["/**/.ssh"]), s(&[])));
    // Braces are expanded first: each alternative has its own ancestors.
    assert_eq!(
        a("/a/{b/c,d}/e", false),
        (s(&["/a", "/a/b", "/a/b/c", "/a/d"]), s(&[]))
    );
    assert_eq!(
        a("/h/{.ssh/id_rsa,.aws}", false),
        (s(&["/h", "/h/.ssh"]), s(&[]))
    );
}

#[test]
fn compiled_policy_marks_ancestors_and_areas() {
    let ctx = Context {
        home: "/home/u".into(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    let p = load_str(
        "files:\n  deny:\n    - /home/u/.ssh/**\n    - /home/u/proj/**/secret.json\n",
        "t.yaml",
        &ctx,
    )
    .unwrap();
    let c = super::compile(&p, SEED).unwrap();
    let has = |path: &str, slot: usize| dfa::has(c.match_path(path.as_bytes()), slot);
    for anc in ["/home", "/home/u", "/home/u/.ssh", "/home/u/proj"] {
        assert!(has(anc, accept::ANCESTOR), "{anc} is an ancestor");
    }
    for not in [
        "/home/u/.ssh/id_rsa",
        "/home/u/docs",
        "/tmp",
        "/home/u/proj/src",
    ] {
        assert!(!has(not, accept::ANCESTOR), "{not} is not an ancestor");
    }
    assert!(has("/home/u/.ssh", accept::HOLDS_DENIED));
    assert!(has("/home/u/proj/src", accept::CONTAINED));
    assert!(has("/home/u/proj/a/b", accept::CONTAINED));
    assert!(!has("/home/u/proj", accept::CONTAINED));
    assert!(!has("/home/u/other", accept::CONTAINED));
    // The records name the rule behind the ancestor.
    let r = c.rule_for(accept::ANCESTOR, b"/home/u/.ssh").unwrap();
    assert_eq!(r.source, "/home/u/.ssh/**");
    let r = c.rule_for(accept::CONTAINED, b"/home/u/proj/x").unwrap();
    assert_eq!(r.source, "/home/u/proj/**/secret.json");
}

/// Below an area a read-only rule names by a pattern (`**/.git` of `**/.git/**/config`)
/// nothing may be moved in (`accept::SPAN`): a directory there could hold a `config` of the
/// command's. Not the area's name itself (an ancestor), not below a plain area (the
/// workspace), not for deny rules (a denied file the command brought is its own).
#[test]
fn read_only_spans_named_by_a_pattern_are_marked() {
    let c = net_policy(
        "files:\n  read_only: ['/w/**/.git/**/config', '/w/m/**/Makefile']\n  deny: ['/w/**/.d/**/k']\n",
    );
    let has = |path: &str| dfa::has(c.match_path(path.as_bytes()), accept::SPAN);
    for span in [
        "/w/.git/modules",
        "/w/.git/modules/lib",
        "/w/a/b/.git/worktrees/x",
    ] {
        assert!(has(span), "{span} is in a span");
    }
    for not in ["/w/.git", "/w/a/.git", "/w/a", "/w/m/x", "/w/.d/x", "/tmp"] {
        assert!(!has(not), "{not} is not in a span");
    }
    let r = c.rule_for(accept::SPAN, b"/w/.git/modules").unwrap();
    assert_eq!(
        (r.field.as_str(), r.source.as_str()),
        ("files.read_only[0]", "/w/**/.git/**/config")
    );
}

/// A literal grant's name is marked (`accept::GRANT_NAME`): no symlink may stand there,
/// which the next run's grant would follow. Exactly the name: not what is below it, not a
/// glob grant's names.
#[test]
fn literal_grants_mark_their_names() {
    let c = net_policy("files:\n  write: [/home/u/.gemini, '/home/u/.claude.json*']\n");
    let has = |path: &str| dfa::has(c.match_path(path.as_bytes()), accept::GRANT_NAME);
    assert!(has("/home/u/.gemini"));
    assert!(has("/work"), "the workspace is a literal grant too");
    for not in [
        "/home/u/.gemini/x",
        "/home/u",
        "/home/u/.claude.json",
        "/tmp",
    ] {
        assert!(!has(not), "{not}");
    }
    let r = c.rule_for(accept::GRANT_NAME, b"/home/u/.gemini").unwrap();
    assert_eq!(
        (r.field.as_str(), r.source.as_str()),
        ("files.write[0]", "/home/u/.gemini")
    );
}

#[test]
fn protective_rules_through_symlinks_cover_the_link_too() {
    // ~/.bashrc -> dotfiles/bashrc: unlinking the link and creating a file in its place
    // must stay as denied as writing the target. Grants are not widened to the link.
    let d = std::env::temp_dir().join(format!("sandbox-written-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("dotfiles/config")).unwrap();
    std::fs::write(d.join("dotfiles/bashrc"), "").unwrap();
    std::os::unix::fs::symlink("dotfiles/bashrc", d.join(".bashrc")).unwrap();
    std::os::unix::fs::symlink("dotfiles/config", d.join(".config")).unwrap();
    let ctx = home_ctx(&d);
    let yaml = "files:\n  read_only: [~/.bashrc, ~/.config/git/**]\n  write: [~/.config/app]\n";
    let c = super::compile(&load_str(yaml, "t.yaml", &ctx).unwrap(), SEED).unwrap();
    let has = |path: std::path::PathBuf, slot: usize| {
        dfa::has(c.match_path(path.as_os_str().as_encoded_bytes()), slot)
    };
    for p in [
        "dotfiles/bashrc",
        ".bashrc",
        "dotfiles/config/git/config",
        ".config/git/config",
    ] {
        assert!(has(d.join(p), accept::FILE_READ_ONLY), "{p} is read-only");
    }
    assert!(has(d.join("dotfiles/config/app"), accept::FILE_WRITE));
    assert!(!has(d.join(".config/app"), accept::FILE_WRITE));
    // Records name the rule for the link's path too.
    let r = c.rule_for(
        accept::FILE_READ_ONLY,
        d.join(".bashrc").as_os_str().as_encoded_bytes(),
    );
    assert_eq!(r.unwrap().source, "~/.bashrc");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_grant_a_symlink_widens_to_the_home_directory_is_refused() {
    // `ln -s ~ ~/.claude`, made by an earlier command: `files.write: [~/.claude]` would
    // grant the whole home directory.
    let d = std::env::temp_dir().join(format!("sandbox-widen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("real")).unwrap();
    std::os::unix::fs::symlink(&d, d.join(".claude")).unwrap();
    std::os::unix::fs::symlink("real", d.join(".cache")).unwrap();
    let ctx = home_ctx(&d);
    let err = load_str("files:\n  write: [~/.claude]\n", "t.yaml", &ctx)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("files.write[0]") && err.contains("whole home"),
        "{err}"
    );
    // A link to a directory inside the home directory is fine.
    load_str("files:\n  write: [~/.cache]\n", "t.yaml", &ctx).unwrap();
    let _ = std::fs::remove_dir_all(&d);
}

/// A context whose home is `home` (the workspace elsewhere, so it grants nothing there).
fn home_ctx(home: &std::path::Path) -> Context {
    Context {
        home: home.to_path_buf(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    }
}

fn allow(port: u16, rule: u16) -> sandbox_common::PortRule {
    sandbox_common::PortRule {
        port_lo: port,
        port_hi: port,
        rule,
        action: net_action::ALLOW,
        _pad: 0,
    }
}

/// The kernel's choice in one entry: the first port rule that covers `port`.
fn first_rule(e: &sandbox_common::NetRules, port: u16) -> Option<(u8, u16)> {
    e.rules[..e.count as usize]
        .iter()
        .find(|r| r.port_lo <= port && port <= r.port_hi)
        .map(|r| (r.action, r.rule))
}

#[test]
fn allow_hosts_entries_put_every_allow_in_front_of_the_policy_rules() {
    let c = net_policy("network:\n  block_private: false\n  allow: ['0.0.0.0/0:25']\n");
    let none = std::collections::BTreeSet::new();
    let addr: IpAddr = "93.184.216.34".parse().unwrap();
    let e = net::host_entry(&c.net, addr, &[allow(443, 1), allow(80, 2)], &none).unwrap();
    let rules = &e.rules[..e.count as usize];
    // Both allows, the later one first, then the policy's own port-25 allow (inherited).
    assert_eq!(rules.len(), 3, "{rules:?}");
    assert_eq!((rules[0].port_lo, rules[0].rule), (80, 2));
    assert_eq!((rules[1].port_lo, rules[1].rule), (443, 1));
    assert_eq!((rules[2].port_lo, rules[2].action), (25, net_action::ALLOW));
    // A name never opens a private address, and no allow means no entry.
    let private: IpAddr = "169.254.169.254".parse().unwrap();
    assert!(net::host_entry(&c.net, private, &[allow(80, 1)], &none).is_none());
    assert!(net::host_entry(&c.net, addr, &[], &none).is_none());
}

/// An explicit `network.deny` that covers a resolved address stays in front of the
/// name's allow (on the ports it names); the policy's explicit allows keep their place.
#[test]
fn allow_hosts_entries_never_override_an_explicit_deny() {
    let c = net_policy(
        "network:\n  deny: ['93.184.216.0/24:22', '5.6.0.0/16', '0.0.0.0/0:25']\n  \
         allow: ['93.184.216.34:8080', '5.6.7.8:993']\n  allow_hosts: [a.test]\n",
    );
    let none = std::collections::BTreeSet::new();
    let host = c.net.hosts[0].1;
    let any = sandbox_common::PortRule {
        port_lo: 0,
        port_hi: u16::MAX,
        ..allow(0, host)
    };
    let a: IpAddr = "93.184.216.34".parse().unwrap();
    let e = net::host_entry(&c.net, a, &[any], &none).unwrap();
    let deny = |i: usize| Some((net_action::DENY, c.net.deny_rules.start + i as u16));
    assert_eq!(first_rule(&e, 22), deny(0), "the /24's port-22 deny wins");
    assert_eq!(
        first_rule(&e, 25),
        deny(2),
        "and the port-25 deny of every address"
    );
    assert_eq!(first_rule(&e, 443), Some((net_action::ALLOW, host)));
    assert_eq!(first_rule(&e, 8080).map(|r| r.0), Some(net_action::ALLOW));
    // A range denied on every port stays denied, except where the policy itself allows.
    let b: IpAddr = "5.6.7.8".parse().unwrap();
    let e = net::host_entry(&c.net, b, &[any], &none).unwrap();
    assert_eq!(first_rule(&e, 443), deny(1));
    assert_eq!(first_rule(&e, 993).map(|r| r.0), Some(net_action::ALLOW));
    // Elsewhere the name opens what the default would refuse.
    let e = net::host_entry(&c.net, "8.8.8.8".parse().unwrap(), &[any], &none).unwrap();
    assert_eq!(first_rule(&e, 443), Some((net_action::ALLOW, host)));
    assert_eq!(first_rule(&e, 25), deny(2));
}

/// A name never allows an address of this host: one it had at compile time (also as
/// IPv4-mapped IPv6) or one it gained since. When such an address leaves the names, what
/// the policy says for it comes back: the gained address's deny, the compiled entry.
#[test]
fn allow_hosts_entries_never_open_this_host() {
    let ctx = Context {
        home: "/home/u".into(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: vec![
            "93.184.216.50/32".parse().unwrap(),
            "2001:db8:feed::50/128".parse().unwrap(),
        ],
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    let yaml = "network:\n  allow_hosts: [a.test]\n";
    let c = super::compile(&load_str(yaml, "p.yaml", &ctx).unwrap(), SEED).unwrap();
    let allows = [allow(443, c.net.hosts[0].1)];
    let gained: IpAddr = "93.184.216.60".parse().unwrap();
    let own = net::HostNets::from([gained.into()]);
    let none = std::collections::BTreeSet::new();
    for a in [
        "93.184.216.50",
        "::ffff:93.184.216.50",
        "2001:db8:feed::50",
        "93.184.216.60",
    ] {
        let addr: IpAddr = a.parse().unwrap();
        assert_eq!(
            net::host_refusal(&c.net, addr, &own),
            Some("an address of this host"),
            "{a}"
        );
        assert!(
            net::host_entry(&c.net, addr, &allows, &own).is_none(),
            "{a}"
        );
    }
    // Before it was gained, .60 was an ordinary public address.
    assert!(net::host_entry(&c.net, gained, &allows, &none).is_some());
    assert_eq!(
        net::host_refusal(&c.net, "10.0.0.1".parse().unwrap(), &own),
        Some("a private address")
    );
    // What comes back when the name no longer has the address: the deny of a gained
    // address (not a bare removal), the compiled entry of a startup one, or nothing.
    let back = net::base_entry(&c.net, gained, &own).expect("the gained address's deny");
    assert_eq!(
        first_rule(&back, 443),
        Some((net_action::DENY, c.net.host_rule.unwrap()))
    );
    let startup: IpAddr = "93.184.216.50".parse().unwrap();
    let back = net::base_entry(&c.net, startup, &own).expect("the compiled /32");
    assert_eq!(first_rule(&back, 443).map(|r| r.0), Some(net_action::DENY));
    assert!(net::base_entry(&c.net, gained, &none).is_none());
    assert!(net::base_entry(&c.net, "8.8.8.8".parse().unwrap(), &own).is_none());
}

/// This host's private addresses are denied one by one: an allow of the LAN they are in
/// does not reach the host's own services through them (a rule naming the address does);
/// loopback stays the loopback prefix's, which a policy may open. Azure's WireServer is
/// in the private set.
#[test]
fn host_private_addresses_are_denied_by_themselves() {
    let ctx = Context {
        home: "/home/u".into(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: vec![
            "10.0.0.5/32".parse().unwrap(),
            "127.0.0.0/8".parse().unwrap(),
        ],
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    let compile =
        |yaml: &str| super::compile(&load_str(yaml, "p.yaml", &ctx).unwrap(), SEED).unwrap();
    let c = compile("network:\n  allow: [10.0.0.0/8, '127.0.0.0/8:8080']\n");
    assert_eq!(decide(&c, "10.0.0.6", 22), Some(net_action::ALLOW));
    assert_eq!(decide(&c, "10.0.0.5", 22), Some(net_action::DENY));
    assert_eq!(decide(&c, "127.0.0.1", 8080), Some(net_action::ALLOW));
    assert_eq!(decide(&c, "168.63.129.16", 80), Some(net_action::DENY));
    let c = compile("network:\n  allow: [10.0.0.0/8, 10.0.0.5/32]\n");
    assert_eq!(decide(&c, "10.0.0.5", 22), Some(net_action::ALLOW));
}

/// What this host gains after compilation may be a prefix (an address given with one on
/// `lo`, a `local` route): its entry denies all of it, and an entry of the policy inside it
/// is written again so that the ports its own rules leave fall to that deny; a name's
/// address inside it is refused, and when it leaves a name nothing of its own comes back
/// (the prefix's entry decides). A prefix local at compile time is denied as a whole.
#[test]
fn local_prefixes_of_this_host_are_denied_whole() {
    let ctx = |host: &str| Context {
        home: "/home/u".into(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: vec![host.parse().unwrap(), "127.0.0.0/8".parse().unwrap()],
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    let yaml = "network:\n  allow: ['93.184.217.9:443']\n  allow_hosts: [a.test]\n";
    let compile =
        |host: &str| super::compile(&load_str(yaml, "p.yaml", &ctx(host)).unwrap(), SEED).unwrap();
    let c = compile("93.184.216.50/32");
    let prefix: ipnet::IpNet = "93.184.217.0/24".parse().unwrap();
    let all = net::HostNets::from([prefix]);
    let mut written = net::gained_entries(&c.net, &all, &[prefix]);
    written.sort_by_key(|e| e.1);
    let host = c.net.host_rule.unwrap();
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(written[0].0, "93.184.217.0".parse::<IpAddr>().unwrap());
    assert_eq!(written[0].1, 24);
    assert_eq!(
        first_rule(&written[0].2, 80),
        Some((net_action::DENY, host))
    );
    assert_eq!(written[1].1, 32);
    assert_eq!(
        first_rule(&written[1].2, 443).map(|r| r.0),
        Some(net_action::ALLOW)
    );
    assert_eq!(
        first_rule(&written[1].2, 80),
        Some((net_action::DENY, host))
    );
    // Known at compile time, already gained, or loopback's: nothing to write.
    assert!(net::gained_entries(&c.net, &all, &["93.184.216.50/32".parse().unwrap()]).is_empty());
    assert!(net::gained_entries(&c.net, &all, &["127.0.0.0/8".parse().unwrap()]).is_empty());
    let inside: IpAddr = "93.184.217.77".parse().unwrap();
    let allows = [allow(443, c.net.hosts[0].1)];
    assert_eq!(
        net::host_refusal(&c.net, inside, &all),
        Some("an address of this host")
    );
    assert!(net::host_entry(&c.net, inside, &allows, &all).is_none());
    assert!(net::base_entry(&c.net, inside, &all).is_none());
    // The policy's own /32 in it comes back with the deny.
    let back = net::base_entry(&c.net, "93.184.217.9".parse().unwrap(), &all).unwrap();
    assert_eq!(first_rule(&back, 80), Some((net_action::DENY, host)));
    // A rule naming the gained prefix itself opens it (as for one local at compile time).
    let named = "network:\n  allow: ['93.184.217.0/24:8080']\n";
    let c2 = super::compile(
        &load_str(named, "p.yaml", &ctx("93.184.216.50/32")).unwrap(),
        SEED,
    )
    .unwrap();
    let w = net::gained_entries(&c2.net, &all, &[prefix]);
    assert_eq!(
        first_rule(&w[0].2, 8080).map(|r| r.0),
        Some(net_action::ALLOW)
    );
    assert_eq!(first_rule(&w[0].2, 80).map(|r| r.0), Some(net_action::DENY));
    // An entry inside that the deny would overflow is written as the deny alone, and so
    // it comes back after a name leaves it.
    let full: Vec<String> = (1..=12).map(|p| format!("'93.184.217.9:{p}'")).collect();
    let full = format!("network:\n  allow: [{}]\n", full.join(", "));
    let c3 = super::compile(
        &load_str(&full, "p.yaml", &ctx("93.184.216.50/32")).unwrap(),
        SEED,
    )
    .unwrap();
    let w = net::gained_entries(&c3.net, &all, &[prefix]);
    let inner = w.iter().find(|e| e.1 == 32).expect("the /32 again");
    assert_eq!(inner.2.count, 1);
    assert_eq!(
        first_rule(&inner.2, 1),
        Some((net_action::DENY, c3.net.host_rule.unwrap()))
    );
    let back = net::base_entry(&c3.net, "93.184.217.9".parse().unwrap(), &all).unwrap();
    assert_eq!(back.count, 1);
    // Local when the policy was compiled: the whole prefix is denied, by a rule naming it.
    let c = compile("93.184.217.0/24");
    assert_eq!(decide(&c, "93.184.217.200", 22), Some(net_action::DENY));
    assert_eq!(decide(&c, "93.184.217.9", 443), Some(net_action::ALLOW));
    assert_eq!(decide(&c, "93.184.218.1", 22), None);
    let (_, rule) =
        net::lookup(&c.net.v4, &c.net.v6, "93.184.217.200".parse().unwrap(), 22).unwrap();
    assert_eq!(
        c.rules[usize::from(rule)].source,
        "93.184.217.0/24 (local to this host)"
    );
}

/// A home on a data disk whose root is mounted too (`/data`, and `/data/home` on
/// `/home`): the programs name its files by `/data/home/...`. The built-in policy's rules
/// hold there, grants (the workspace) too; and only there.
#[test]
fn rules_hold_where_a_mount_of_a_subdirectory_places_its_files() {
    let ctx = Context {
        home: "/home/u".into(),
        cwd: "/home/u/proj".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: vec![crate::host::mounts::Alias {
            mount_point: "/home".into(),
            placed: "/data/home".into(),
        }],
    };
    let p = load_str(crate::policy::DEFAULT_POLICY, "default", &ctx).unwrap();
    let c = super::compile(&p, SEED).unwrap();
    for path in ["/home/u/.ssh/id_rsa", "/data/home/u/.ssh/id_rsa"] {
        assert_eq!(
            c.rule_for(accept::FILE_DENY, path.as_bytes())
                .map(|r| r.source.as_str()),
            Some("~/.ssh"),
            "{path}"
        );
    }
    for path in ["/home/u/proj/src/main.rs", "/data/home/u/proj/src/main.rs"] {
        assert!(
            dfa::has(c.match_path(path.as_bytes()), accept::FILE_WRITE),
            "the workspace at {path}"
        );
    }
    assert!(dfa::has(
        c.match_path(b"/data/home/u/.bashrc"),
        accept::FILE_READ_ONLY
    ));
    // Not the rest of the disk, nor another home.
    assert!(!dfa::has(
        c.match_path(b"/data/u/.ssh/id_rsa"),
        accept::FILE_DENY
    ));
    assert!(!dfa::has(
        c.match_path(b"/data/home/v/x"),
        accept::FILE_WRITE
    ));
}

/// An OSTree host: `/` and `/var` are subdirectories of the mounted `/sysroot`. The
/// built-in policy compiled through both stays within the programs' tables.
#[test]
fn the_built_in_policy_compiles_through_an_ostree_root() {
    let deploy = "/sysroot/ostree/deploy/fedora/deploy/0123abcd.0";
    let ctx = Context {
        home: "/var/home/u".into(),
        cwd: "/var/home/u/proj".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: vec![
            crate::host::mounts::Alias {
                mount_point: "/".into(),
                placed: deploy.into(),
            },
            crate::host::mounts::Alias {
                mount_point: "/var".into(),
                placed: "/sysroot/ostree/deploy/fedora/var".into(),
            },
        ],
    };
    let p = load_str(crate::policy::DEFAULT_POLICY, "default", &ctx).unwrap();
    let c = super::compile(&p, SEED).unwrap();
    let states = c.matcher.anchored.states() + c.matcher.floating.states();
    assert!(states < 2000, "{states} states");
    for path in [
        "/var/home/u/.ssh/id_rsa".to_owned(),
        "/sysroot/ostree/deploy/fedora/var/home/u/.ssh/id_rsa".to_owned(),
        format!("{deploy}/etc/shadow"),
    ] {
        assert!(
            dfa::has(c.match_path(path.as_bytes()), accept::FILE_DENY),
            "{path}"
        );
    }
}

/// A root command's rules for the other users' homes (one glob naming them all) hold
/// through a mount of their parent.
#[test]
fn other_homes_hold_through_a_mount_of_a_subdirectory() {
    let ctx = Context {
        home: "/root".into(),
        cwd: "/root/proj".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: vec!["/home/a".into(), "/home/b".into()],
        mount_aliases: vec![crate::host::mounts::Alias {
            mount_point: "/home".into(),
            placed: "/data/home".into(),
        }],
    };
    let p = load_str(crate::policy::DEFAULT_POLICY, "default", &ctx).unwrap();
    let c = super::compile(&p, SEED).unwrap();
    for path in [
        "/home/a/.ssh/id_rsa",
        "/data/home/a/.ssh/id_rsa",
        "/data/home/b/.aws/credentials",
    ] {
        assert!(
            dfa::has(c.match_path(path.as_bytes()), accept::FILE_DENY),
            "{path}"
        );
    }
}
