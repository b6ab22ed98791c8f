//! Path pattern expansion: `~`, `$VAR`, `${VAR}`, `${VAR:-default}`, relative patterns
//! (relative to the workspace), lexical normalisation, and canonicalisation of the literal
//! prefix (so `~/.ssh` still matches when the home directory is reached through a symlink:
//! the kernel only ever sees canonical paths).

use std::path::{Component, Path, PathBuf};

use super::Context;

const GLOB_CHARS: &[char] = &['*', '?', '[', ']', '{', '}', '\\'];

/// Expands variables and `~`, and makes the pattern absolute against `base`.
pub fn expand(s: &str, ctx: &Context, base: &Path) -> Result<String, String> {
    let s = expand_vars(s, ctx)?;
    let s = expand_tilde(&s, ctx);
    if s.starts_with('/') {
        Ok(s)
    } else {
        Ok(format!("{}/{}", base.display(), s))
    }
}

fn expand_tilde(s: &str, ctx: &Context) -> String {
    if s == "~" {
        ctx.home.display().to_string()
    } else if let Some(rest) = s.strip_prefix("~/") {
        format!("{}/{rest}", ctx.home.display())
    } else {
        s.to_owned()
    }
}

fn expand_vars(s: &str, ctx: &Context) -> Result<String, String> {
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
                (Some(v), _) => out.push_str(v),
                (None, Some(d)) => out.push_str(&expand_tilde(d, ctx)),
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
            out.push_str(v);
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

/// Resolves symlinks in the literal (glob-free) leading components of a normalised absolute
/// pattern. Returns the glob and, when the whole pattern is literal, the canonical path.
pub fn canonicalize_pattern(s: &str) -> (String, Option<PathBuf>) {
    let comps: Vec<&str> = s.split('/').filter(|c| !c.is_empty()).collect();
    let literal_len = comps.iter().take_while(|c| !c.contains(GLOB_CHARS)).count();
    let literal: PathBuf = std::iter::once("/")
        .chain(comps[..literal_len].iter().copied())
        .collect();
    let canonical = canonicalize_existing_prefix(&literal);
    let mut glob = escape_glob(&canonical.display().to_string());
    for c in &comps[literal_len..] {
        if !glob.ends_with('/') {
            glob.push('/');
        }
        glob.push_str(c);
    }
    let whole_literal = literal_len == comps.len();
    (glob, whole_literal.then_some(canonical))
}

/// Canonicalises the longest existing prefix of `p` and appends the rest unchanged.
fn canonicalize_existing_prefix(p: &Path) -> PathBuf {
    let comps: Vec<Component<'_>> = p.components().collect();
    for n in (1..=comps.len()).rev() {
        let head: PathBuf = comps[..n].iter().collect();
        if let Ok(c) = std::fs::canonicalize(&head) {
            let mut out = c;
            for rest in &comps[n..] {
                out.push(rest);
            }
            return out;
        }
    }
    p.to_path_buf()
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
