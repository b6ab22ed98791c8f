//! Rules that can never take effect, or that contradict each other. Reported as warnings by
//! `sandbox check` and `sandbox run`; the policy is still valid.

use std::path::Path;

use super::{NetDefault, NetRule, PathRule, Policy};

/// A rule that will not do what it says, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

pub fn lint(p: &Policy) -> Vec<Warning> {
    let mut out = Vec::new();
    let f = &p.files;
    for list in [
        &f.deny,
        &f.read_only,
        &f.write,
        &f.read,
        &p.exec.deny,
        &p.exec.allow,
    ] {
        duplicates(list, &mut out);
    }
    // Anything under a literal deny is denied, whatever other rules say.
    for (name, list) in [
        ("files.read_only", &f.read_only),
        ("files.write", &f.write),
        ("files.read", &f.read),
        ("exec.allow", &p.exec.allow),
    ] {
        shadowed(
            list,
            &f.deny,
            &format!("denied by {{}}, so this {name} rule never applies"),
            &mut out,
        );
    }
    shadowed(
        &p.exec.allow,
        &p.exec.deny,
        "exec.deny {} wins over this allow rule",
        &mut out,
    );
    shadowed(
        &f.write,
        &f.read_only,
        "read_only {} wins: nothing here can be written",
        &mut out,
    );
    // An allow only matters where something denies.
    if p.network.default == NetDefault::Allow {
        for r in &p.network.allow {
            let covered = p.network.deny.iter().any(|d| overlaps(d, r))
                || (p.network.block_private && crate::compile::net::is_private(r.net.network()));
            if !covered {
                out.push(Warning {
                    field: r.field.clone(),
                    message: format!(
                        "'{}' has no effect: the default is allow and no deny rule covers it",
                        r.source
                    ),
                });
            }
        }
    }
    for (i, d) in p.network.deny.iter().enumerate() {
        for a in &p.network.deny[..i] {
            if a.net == d.net && a.ports == d.ports {
                out.push(Warning {
                    field: d.field.clone(),
                    message: format!("duplicate of {}", a.field),
                });
            }
        }
    }
    out
}

fn duplicates(list: &[PathRule], out: &mut Vec<Warning>) {
    for (i, r) in list.iter().enumerate() {
        // Equal only after expanding variables (`${TMPDIR:-/tmp}` next to `/tmp`) is the
        // usual way to say "this, wherever it is": not worth a warning.
        let written_twice =
            |o: &&PathRule| o.glob == r.glob && !o.source.contains('$') && !r.source.contains('$');
        if let Some(first) = list[..i].iter().find(written_twice) {
            out.push(Warning {
                field: r.field.clone(),
                message: format!("'{}' duplicates {}", r.source, first.field),
            });
        }
    }
}

/// Rules in `list` whose literal path lies under a literal rule of `over`.
fn shadowed(list: &[PathRule], over: &[PathRule], why: &str, out: &mut Vec<Warning>) {
    for r in list {
        let Some(path) = &r.literal else { continue };
        if let Some(o) = over
            .iter()
            .find(|o| o.literal.as_deref().is_some_and(|op| under(path, op)))
        {
            out.push(Warning {
                field: r.field.clone(),
                message: format!(
                    "'{}': {}",
                    r.source,
                    why.replace("{}", &format!("{} '{}'", o.field, o.source))
                ),
            });
        }
    }
}

fn under(p: &Path, dir: &Path) -> bool {
    p.starts_with(dir)
}

fn overlaps(a: &NetRule, b: &NetRule) -> bool {
    let nets = a.net.contains(&b.net.network()) || b.net.contains(&a.net.network());
    nets && a.ports.0 <= b.ports.1 && b.ports.0 <= a.ports.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Context, load_str};

    fn warnings(yaml: &str) -> Vec<String> {
        let ctx = Context {
            home: "/home/u".into(),
            cwd: "/w".into(),
            env: Default::default(),
            resolvers: Vec::new(),
            host_addrs: Vec::new(),
            other_homes: Vec::new(),
            mount_aliases: Vec::new(),
        };
        lint(&load_str(yaml, "p.yaml", &ctx).unwrap())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn reports_rules_that_never_apply() {
        let w = warnings(
            "files:\n  deny: [/srv/secrets, /srv/secrets]\n  write: [/srv/secrets/cache, /tmp]\n  read_only: [/tmp]\n",
        );
        assert!(
            w.contains(&"files.deny[1]: '/srv/secrets' duplicates files.deny[0]".to_owned()),
            "{w:#?}"
        );
        assert!(
            w.iter()
                .any(|s| s
                    .starts_with("files.write[0]: '/srv/secrets/cache': denied by files.deny[0]")),
            "{w:#?}"
        );
        assert!(
            w.iter().any(|s| s
                .starts_with("files.write[1]: '/tmp': read_only files.read_only[0] '/tmp' wins")),
            "{w:#?}"
        );
        let w = warnings(
            "exec:\n  deny: [/usr/bin/nc]\n  allow: [/usr/bin/nc]\nnetwork:\n  allow: ['93.184.216.34:443', '10.1.2.3:443']\n",
        );
        assert!(
            w.iter()
                .any(|s| s.starts_with("exec.allow[0]: '/usr/bin/nc': exec.deny exec.deny[0]")),
            "{w:#?}"
        );
        assert!(w.contains(&"network.allow[0]: '93.184.216.34:443' has no effect: the default is allow and no deny rule covers it".to_owned()), "{w:#?}");
        assert!(
            !w.iter().any(|s| s.starts_with("network.allow[1]")),
            "10.1.2.3 punches through block_private: {w:#?}"
        );
        assert!(warnings(crate::policy::DEFAULT_POLICY).is_empty());
    }
}
