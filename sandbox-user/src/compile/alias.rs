//! Rules through mounts that show a file system's files at another path than the programs
//! name them by (`host::mounts::Alias`): `/data` mounted, and `/data/home` bind-mounted on
//! `/home`; an OSTree host's `/` and `/var`, subdirectories of the mounted `/sysroot`. The
//! programs name a file by its superblock's placement (`/data/home/u/.ssh/id_rsa`), so a rule
//! written for the path the user sees (`~/.ssh`: `/home/u/.ssh`) is compiled a second time
//! for the placed path, for every way its leading components can match the mount point.
//! Both names are the same files: protective rules and grants alike.

use std::collections::BTreeSet;

use crate::host::mounts::Alias;
use crate::policy::expand::{escape_glob, unescape};

/// `glob` (absolute, canonical, as compiled) rewritten for the files below
/// `alias.mount_point` as the programs name them (below `alias.placed`): one glob per
/// position the pattern can be at once its components have matched the mount point's.
/// `literal`: the pattern names a path and everything below it (`matcher::Shape::Literal`),
/// so a mount point below it is covered whole. Rewrites the original covers anyway (a
/// leading `**` that takes in the whole mount point) are left out.
pub fn through(glob: &str, literal: bool, alias: &Alias) -> Vec<String> {
    let comps = split(glob);
    let n = comps.len();
    let star = |j: usize| j < n && comps[j] == "**";
    // Positions reached, with whether the pattern starts with `**` and only its leading
    // `**`s have been used so far (then the original covers the rewrite).
    let closure = |set: BTreeSet<(usize, bool)>| {
        let mut out = set.clone();
        let mut todo: Vec<(usize, bool)> = set.into_iter().collect();
        while let Some((j, lead)) = todo.pop() {
            if star(j) && out.insert((j + 1, lead)) {
                todo.push((j + 1, lead));
            }
        }
        out
    };
    let mut at = closure(BTreeSet::from([(0, star(0))]));
    for m in alias.mount_point.split('/').filter(|c| !c.is_empty()) {
        let mut next = BTreeSet::new();
        for &(j, lead) in &at {
            if j == n {
                if literal {
                    next.insert((n, false));
                }
            } else if star(j) {
                next.insert((j, lead && (0..j).all(star)));
            } else if component_matches(comps[j], m) {
                next.insert((j + 1, false));
            }
        }
        at = closure(next);
        if at.is_empty() {
            return Vec::new();
        }
    }
    let base = escape_glob(&alias.placed);
    let mut out: Vec<String> = Vec::new();
    for (j, lead) in at {
        // Only leading `**`s used: `/**/rest` already matches `placed/.../rest`.
        if lead {
            continue;
        }
        let g = join(&base, &comps[j..]);
        if g != glob && !out.contains(&g) {
            out.push(g);
        }
    }
    out
}

/// Every rewrite of `glob` through each of `aliases`, but for an alias whose mount point
/// holds a deeper one that the pattern's literal head is below (OSTree's `/var` below its
/// `/`): those paths are the deeper mount's files, not the outer one's.
pub fn through_all(glob: &str, literal: bool, aliases: &[Alias]) -> Vec<String> {
    let head: Vec<String> = split(glob).iter().map_while(|c| unescape(c)).collect();
    let head_below = |mount_point: &str| {
        let m: Vec<&str> = mount_point.split('/').filter(|c| !c.is_empty()).collect();
        head.len() >= m.len() && head.iter().zip(&m).all(|(h, m)| h == m)
    };
    if aliases.is_empty() {
        return Vec::new();
    }
    // Alternatives with slashes (`/{home/a,home/b}/.ssh`, a root command's rule for every
    // home) cross mount points one by one: each is rewritten on its own.
    if glob.contains('{') {
        let alts = super::matcher::expand_braces(glob, BRACE_LIMIT)
            .filter(|alts| alts.len() > 1 || alts.first().is_some_and(|a| a != glob));
        if let Some(alts) = alts {
            let mut out: Vec<String> = Vec::new();
            for alt in alts {
                for g in through_all(&alt, literal, aliases) {
                    if !out.contains(&g) {
                        out.push(g);
                    }
                }
            }
            return out;
        }
    }
    let mut out: Vec<String> = Vec::new();
    for a in aliases {
        let deeper = |b: &&Alias| {
            b.mount_point != a.mount_point
                && head_below(&b.mount_point)
                && (a.mount_point == "/"
                    || b.mount_point
                        .strip_prefix(a.mount_point.as_str())
                        .is_some_and(|r| r.starts_with('/')))
        };
        if aliases.iter().any(|b| deeper(&b)) {
            continue;
        }
        for g in through(glob, literal, a) {
            if !out.contains(&g) {
                out.push(g);
            }
        }
    }
    out
}

/// The alternatives a glob's braces are expanded into, at most, to be rewritten one by one
/// (a root command's rules name every home: a few hundred).
const BRACE_LIMIT: usize = 1024;

/// `base` (escaped) followed by `rest`'s components.
fn join(base: &str, rest: &[&str]) -> String {
    let mut g = if base == "/" {
        String::new()
    } else {
        base.trim_end_matches('/').to_owned()
    };
    for c in rest {
        g.push('/');
        g.push_str(c);
    }
    if g.is_empty() {
        g.push('/');
    }
    g
}

/// The components of an absolute glob, split at the slashes outside brackets and braces
/// (and not escaped).
fn split(glob: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut esc) = (0i32, 0usize, false);
    for (i, c) in glob.char_indices() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            '/' if depth <= 0 => {
                if i > start {
                    out.push(&glob[start..i]);
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if glob.len() > start {
        out.push(&glob[start..]);
    }
    out
}

/// The one-component glob `c` matches the name `name`.
fn component_matches(c: &str, name: &str) -> bool {
    match unescape(c) {
        Some(lit) => lit == name,
        None => super::matcher::glob(c).is_ok_and(|g| g.compile_matcher().is_match(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alias(mount_point: &str, placed: &str) -> Alias {
        Alias {
            mount_point: mount_point.into(),
            placed: placed.into(),
        }
    }

    #[test]
    fn rules_below_a_bind_mounted_subdirectory_are_compiled_for_its_placed_path() {
        let home = alias("/home", "/data/home");
        assert_eq!(
            through("/home/u/.ssh", true, &home),
            vec!["/data/home/u/.ssh"]
        );
        assert_eq!(
            through("/home/*/.aws/**", false, &home),
            vec!["/data/home/*/.aws/**"]
        );
        // Elsewhere: nothing.
        assert!(through("/etc/shadow", true, &home).is_empty());
        assert!(through("/homework/x", true, &home).is_empty());
        // A literal rule above the mount point covers it whole; a glob that ends there
        // names it alone; one that ends above it, nothing.
        let deep = alias("/home/u/.ssh/keys", "/vol/keys");
        assert_eq!(through("/home/u/.ssh", true, &deep), vec!["/vol/keys"]);
        assert_eq!(
            through("/home/u/.ssh/ke?s", false, &deep),
            vec!["/vol/keys"]
        );
        assert!(through("/home/u/.ss?", false, &deep).is_empty());
    }

    #[test]
    fn alternatives_across_the_mount_point_are_rewritten_each() {
        // A root command's rule for every other home (`policy::other_homes`).
        let home = alias("/home", "/data/home");
        let mut got = through_all("/{home/a,home/b}/.ssh{,/**}", false, &[home]);
        got.sort();
        assert_eq!(
            got,
            vec![
                "/data/home/a/.ssh",
                "/data/home/a/.ssh/**",
                "/data/home/b/.ssh",
                "/data/home/b/.ssh/**"
            ]
        );
        let b = alias("/srv", "/mnt/d");
        assert_eq!(
            through_all("/srv/{a,b}", false, &[b]),
            vec!["/mnt/d/a", "/mnt/d/b"]
        );
    }

    #[test]
    fn a_deeper_alias_takes_the_paths_below_it() {
        let aliases = [alias("/", "/sysroot/d"), alias("/var", "/sysroot/var")];
        assert_eq!(
            through_all("/var/home/u/.ssh", true, &aliases),
            vec!["/sysroot/var/home/u/.ssh"]
        );
        assert_eq!(
            through_all("/etc/shadow", true, &aliases),
            vec!["/sysroot/d/etc/shadow"]
        );
    }

    #[test]
    fn globs_over_the_mount_point_take_every_way_it_can_match() {
        let a = alias("/home/x", "/data/stuff");
        // `**` may stop at `x` (then `.env` directly below the mount) or go on.
        let mut got = through("/home/**/x/.env", false, &a);
        got.sort();
        assert_eq!(
            got,
            vec![
                "/data/stuff/**/x/.env",
                "/data/stuff/.env",
                "/data/stuff/x/.env"
            ]
        );
        // A leading `**` covers the rewrite already, except where it is used up.
        let mut got = through("/**/x/.env", false, &a);
        got.sort();
        assert_eq!(got, vec!["/data/stuff/.env"]);
        assert!(through("/**/.env", false, &a).is_empty());
        // The whole root is an alias (OSTree's `/`).
        let root = alias("/", "/sysroot/ostree/deploy/os/deploy/abc.0");
        assert_eq!(
            through("/etc/shadow", true, &root),
            vec!["/sysroot/ostree/deploy/os/deploy/abc.0/etc/shadow"]
        );
        // Glob characters of the placed path are escaped; braces keep their slashes.
        let b = alias("/srv", "/mnt/d[1]");
        assert_eq!(
            through("/srv/{a/b,c}", false, &b),
            vec!["/mnt/d\\[1\\]/{a/b,c}"]
        );
    }
}
