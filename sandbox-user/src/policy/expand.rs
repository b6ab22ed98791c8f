//! Path pattern expansion: `~`, `$VAR`, `${VAR}`, `${VAR:-default}`, relative patterns
//! (relative to the workspace), lexical normalisation, and canonicalisation of the literal
//! prefix (so `~/.ssh` still matches when the home directory is reached through a symlink:
//! the kernel only ever sees canonical paths).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::Context;

const GLOB_CHARS: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

/// Expands variables and `~`, and makes the path absolute against `base`.
pub fn expand(s: &str, ctx: &Context, base: &Path) -> Result<String, String> {
    expand_as(s, ctx, base, &|v| v.to_owned())
}

/// [`expand`] for a glob: what the variables, `~` and `base` put in is escaped, so that a
/// home or workspace named `client[acme]` or `proj{old}` is matched as itself, not as a
/// class or alternatives that the real path does not match (every rule relative to the
/// workspace would then name another path).
pub fn expand_glob(s: &str, ctx: &Context, base: &Path) -> Result<String, String> {
    // A comma too: inside `{$A,$B}` one would split the alternatives.
    expand_as(s, ctx, base, &|v| escape_glob(v).replace(',', "\\,"))
}

fn expand_as(
    s: &str,
    ctx: &Context,
    base: &Path,
    quote: &dyn Fn(&str) -> String,
) -> Result<String, String> {
    let s = expand_vars(s, ctx, quote)?;
    let s = expand_tilde(&s, ctx, quote);
    if s.starts_with('/') {
        Ok(s)
    } else {
        Ok(format!("{}/{}", quote(&base.display().to_string()), s))
    }
}

fn expand_tilde(s: &str, ctx: &Context, quote: &dyn Fn(&str) -> String) -> String {
    let home = || quote(&ctx.home.display().to_string());
    if s == "~" {
        home()
    } else if let Some(rest) = s.strip_prefix("~/") {
        format!("{}/{rest}", home())
    } else {
        s.to_owned()
    }
}

fn expand_vars(s: &str, ctx: &Context, quote: &dyn Fn(&str) -> String) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or("unclosed '${'")?;
            let inner = &body[..end];
            let (name, default) = match inner.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (inner, None),
            };
            check_var_name(name)?;
            match (ctx.env.get(name).filter(|v| !v.is_empty()), default) {
                (Some(v), _) => out.push_str(&quote(v)),
                (None, Some(d)) => out.push_str(&expand_tilde(d, ctx, quote)),
                (None, None) => return Err(format!("environment variable {name} is not set")),
            }
            rest = &body[end + 1..];
        } else {
            let len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            let name = &after[..len];
            check_var_name(name)?;
            let v = ctx
                .env
                .get(name)
                .ok_or_else(|| format!("environment variable {name} is not set"))?;
            out.push_str(&quote(v));
            rest = &after[len..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn check_var_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!("invalid variable name '{name}'"))
    }
}

/// Lexical normalisation of an absolute pattern: `//` and `/./` collapse, `..` removes the
/// previous component, a trailing `/` goes.
pub fn normalize(s: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Resolves symlinks in the literal (glob-free) leading components of normalised absolute
/// patterns, remembering every directory it has resolved: a policy of thousands of rules
/// under a few roots costs one `lstat` per distinct directory, not a `realpath` per rule.
#[derive(Debug, Default)]
pub struct Canonicalizer {
    /// Literal prefix -> its canonical path, or `None` when it does not exist.
    known: HashMap<PathBuf, Option<PathBuf>>,
}

impl Canonicalizer {
    /// The glob with its literal head canonicalised and, when the whole pattern is literal,
    /// the canonical path; then the glob as written (head not canonicalised) when a symlink
    /// made them differ.
    pub fn pattern(&mut self, s: &str) -> (String, Option<PathBuf>, Option<String>) {
        let comps: Vec<&str> = s.split('/').filter(|c| !c.is_empty()).collect();
        // A component whose glob characters are all escaped names itself.
        let literal: Vec<String> = comps.iter().map_while(|c| unescape(c)).collect();
        let literal_len = literal.len();
        let literal: Vec<&str> = literal.iter().map(String::as_str).collect();
        let canonical = self.existing_prefix(&literal, 0);
        let mut glob = escape_glob(&canonical.display().to_string());
        for c in &comps[literal_len..] {
            if !glob.ends_with('/') {
                glob.push('/');
            }
            glob.push_str(c);
        }
        let whole_literal = literal_len == comps.len();
        let mut written = escape_glob(&format!("/{}", literal.join("/")));
        for c in &comps[literal_len..] {
            if !written.ends_with('/') {
                written.push('/');
            }
            written.push_str(c);
        }
        let written = (written != glob).then_some(written);
        (glob, whole_literal.then_some(canonical), written)
    }

    /// Canonicalises the longest existing prefix of `/comps...` and appends the rest unchanged.
    fn existing_prefix(&mut self, comps: &[&str], depth: u32) -> PathBuf {
        let mut head = PathBuf::from("/");
        let mut canonical = PathBuf::from("/");
        for (i, c) in comps.iter().enumerate() {
            head.push(c);
            let next = match self.known.get(&head) {
                Some(k) => k.clone(),
                None => {
                    let k = self.resolve_child(&canonical, c, depth);
                    self.known.insert(head.clone(), k.clone());
                    k
                }
            };
            match next {
                Some(n) => canonical = n,
                None => {
                    // Nothing below a missing directory exists either.
                    for rest in &comps[i..] {
                        canonical.push(rest);
                    }
                    return canonical;
                }
            }
        }
        canonical
    }

    /// `parent` is canonical: the canonical path of `parent/name`, `None` when it is missing.
    /// A dangling symlink resolves to where its target would be, so a rule written through
    /// it still names the file the kernel will see once the target is created.
    fn resolve_child(&mut self, parent: &Path, name: &str, depth: u32) -> Option<PathBuf> {
        let p = parent.join(name);
        let meta = std::fs::symlink_metadata(&p).ok()?;
        if !meta.file_type().is_symlink() {
            return Some(p);
        }
        if let Ok(c) = std::fs::canonicalize(&p) {
            return Some(c);
        }
        // Dangling (or a loop: given up after as many links as the kernel follows).
        if depth >= 40 {
            return None;
        }
        let target = parent.join(std::fs::read_link(&p).ok()?);
        let normal = normalize(&target.to_string_lossy());
        let comps: Vec<&str> = normal.split('/').filter(|c| !c.is_empty()).collect();
        Some(self.existing_prefix(&comps, depth + 1))
    }
}

/// The name a glob component matches when it has no glob character but escaped ones
/// (`client\[acme\]` -> `client[acme]`); `None` for a pattern.
pub(crate) fn unescape(c: &str) -> Option<String> {
    let mut out = String::with_capacity(c.len());
    let mut chars = c.chars();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' => out.push(chars.next()?),
            ch if GLOB_CHARS.contains(&ch) => return None,
            ch => out.push(ch),
        }
    }
    Some(out)
}

/// Escapes glob characters so that `s` matches itself literally.
pub fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if GLOB_CHARS.contains(&c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
