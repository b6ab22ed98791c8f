//! File and exec patterns -> the form the kernel matches canonical paths with.
//!
//! Three parts, so that cost per path does not grow with the number of rules and compile
//! time stays near-linear:
//! - literal paths (no glob characters) go into a hash set: the kernel hashes the path as it
//!   walks it and looks the hash of the prefix up at every `/` (the path is below a literal
//!   rule) and of the whole path at the end (the path is the rule's path);
//! - anchored globs (no `**` before the last component) are one DFA;
//! - floating globs (`**` before the last component) are a second DFA. Kept apart, the two
//!   kinds do not multiply each other's states.
//!
//! In each DFA every rule kind (deny, read_only, ...) is one alternation, and a state's
//! accept value is a bitmask of kinds, not rule ids: states differ only by what can still
//! match. A glob ending in `/**` is compiled without it and checked at `/` boundaries
//! ("strictly below"), so it is not "sticky" in the automaton. The exact rule behind a
//! decision is named in userspace (`Attribution`), with globset, from the path.
//!
//! A hash collision can only make a path match a literal rule it does not name (a false
//! deny), never let a named path through; the seed is random per load.

use std::collections::{BTreeMap, HashMap};

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::util::primitives::StateID;
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind};
use sandbox_common::{
    DfaAccept, LITERAL_EXACT_SHIFT, LITERAL_FNV_PRIME, accept, literal_below, literal_kinds,
};

/// One pattern: glob (absolute, expanded), kind of rule (`accept` slot), and its shape.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub glob: String,
    pub shape: Shape,
    pub slot: usize,
}

/// How a pattern matches, and so where it goes: literal paths into the hash set, globs into
/// a DFA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A glob (in an anchored or the floating DFA).
    Glob,
    /// A literal path (no glob characters): matches itself and everything below it.
    Literal,
    /// A literal path that matches itself only (the names above protected paths). In the
    /// hash set with its kinds in the upper half of the value ([`LITERAL_EXACT_SHIFT`]):
    /// thousands of these in a DFA made it a trie whose determinisation cost grew far faster
    /// than the number of rules.
    Name,
}

impl Shape {
    /// `Literal` for a rule's literal path, `Glob` otherwise.
    pub fn of(literal: bool) -> Self {
        if literal { Self::Literal } else { Self::Glob }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dfa {
    pub classes: [u8; 256],
    /// Number of byte classes (row width).
    pub stride: u32,
    pub trans: Vec<u32>,
    pub accept: Vec<DfaAccept>,
    pub start: u32,
    /// The dead state, or `u32::MAX` when there is none.
    pub dead: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matcher {
    pub anchored: Dfa,
    pub floating: Dfa,
    pub seed: u64,
    /// Hash of a literal path -> kinds (bitmask) it carries.
    pub literals: BTreeMap<u64, u32>,
}

/// Where a scan stands: what the kernel keeps per byte, and what `SB_START` stores after a
/// mount point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanState {
    pub anchored: u32,
    pub floating: u32,
    pub hash: u64,
    pub mask: u32,
}

/// Upper bound on each DFA's memory while building (the policy is rejected past it).
const SIZE_LIMIT: usize = 128 << 20;

/// The glob builder every pattern goes through (validation and attribution use it too).
pub fn glob(g: &str) -> Result<globset::Glob, globset::Error> {
    globset::GlobBuilder::new(g)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// `X/**` -> `X`: the part checked at `/` boundaries. `None` for other globs.
fn strip_below(g: &str) -> Option<&str> {
    g.strip_suffix("/**")
        .filter(|x| !x.is_empty() && !x.ends_with("**"))
}

/// Splits a glob at the `/` that separate components (not inside `{}` or `[]`, not
/// escaped). An absolute glob starts with an empty component.
fn components(g: &str) -> Vec<&str> {
    let (mut out, mut start, mut depth, mut esc) = (Vec::new(), 0, 0i32, false);
    for (i, c) in g.char_indices() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            '/' if depth <= 0 => {
                out.push(&g[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&g[start..]);
    out
}

/// What renaming, removing or replacing names above a protected path would undo, for one
/// protective rule (deny, read-only, exec deny): `(ancestors, areas)`.
/// - `ancestors`: globs of the directories on the way to what the rule names, matched
///   exactly (`/home/u` and `/home/u/.ssh` for `/home/u/.ssh/**`; `/srv/*` for
///   `/srv/*/key`; nothing above a leading `**`, where any directory leads to it). The rule's
///   own path is not one: a change to it is judged by the rule itself, except for `X/**`,
///   which does not name `X`.
/// - `areas`: `L` of every `L/**/...` (`L` not the root): a directory strictly below `L`
///   carries protected files only while it stays below `L`.
pub fn protected_ancestors(glob: &str, literal: bool) -> (Vec<String>, Vec<String>) {
    // `{a/b,c}` names directories in its alternatives: each alternative on its own.
    let alts = if !literal && glob.contains('{') {
        expand_braces(glob, 256)
    } else {
        None
    };
    if let Some(alts) = alts.filter(|a| a.len() > 1) {
        let (mut ancestors, mut areas) = (Vec::new(), Vec::new());
        for a in alts {
            let (an, ar) = protected_ancestors(&a, false);
            for x in an {
                if !ancestors.contains(&x) {
                    ancestors.push(x);
                }
            }
            for x in ar {
                if !areas.contains(&x) {
                    areas.push(x);
                }
            }
        }
        return (ancestors, areas);
    }
    let (mut ancestors, mut areas) = (Vec::new(), Vec::new());
    let (body, below) = match strip_below(glob) {
        Some(x) if !literal => (x, true),
        _ => (glob, false),
    };
    let comps = components(body);
    if comps.first() != Some(&"") {
        return (ancestors, areas);
    }
    // Prefixes of 1..n components (n: the whole body, an ancestor only for `X/**`).
    let n = comps.len();
    for k in 1..=n {
        if k == n && !below {
            break;
        }
        let last = comps[k - 1];
        let prefix = comps[..k].join("/");
        if last == "**" {
            let l = comps[..k - 1].join("/");
            if !l.is_empty() && !l.ends_with("**") && !areas.contains(&l) {
                areas.push(l);
            }
            continue;
        }
        if prefix.is_empty() {
            continue;
        }
        ancestors.push(prefix);
    }
    (ancestors, areas)
}

/// The alternatives of the first outermost `{...}` of a glob, expanded recursively; `None`
/// past `limit` results or on unbalanced braces. Escapes and `[...]` are kept as written.
pub(crate) fn expand_braces(g: &str, limit: usize) -> Option<Vec<String>> {
    let b = g.as_bytes();
    let (mut i, mut esc, mut class) = (0, false, false);
    let mut open = None;
    while i < b.len() {
        match b[i] {
            _ if esc => esc = false,
            b'\\' => esc = true,
            b'[' if !class => class = true,
            b']' if class => class = false,
            b'{' if !class => {
                open = Some(i);
                break;
            }
            _ => {}
        }
        i += 1;
    }
    let Some(start) = open else {
        return Some(vec![g.to_owned()]);
    };
    // The matching `}` and the top-level commas inside.
    let (mut depth, mut commas, mut end) = (0i32, Vec::new(), None);
    let (mut esc, mut class) = (false, false);
    for (j, &c) in b.iter().enumerate().skip(start) {
        match c {
            _ if esc => esc = false,
            b'\\' => esc = true,
            b'[' if !class => class = true,
            b']' if class => class = false,
            b'{' if !class => depth += 1,
            b'}' if !class => {
                depth -= 1;
                if depth == 0 {
                    end = Some(j);
                    break;
                }
            }
            b',' if !class && depth == 1 => commas.push(j),
            _ => {}
        }
    }
    let end = end?;
    let (head, tail) = (&g[..start], &g[end + 1..]);
    let mut cuts = vec![start];
    cuts.extend(commas);
    cuts.push(end);
    let mut out = Vec::new();
    for w in cuts.windows(2) {
        let alt = format!("{head}{}{tail}", &g[w[0] + 1..w[1]]);
        out.extend(expand_braces(&alt, limit)?);
        if out.len() > limit {
            return None;
        }
    }
    Some(out)
}

fn is_floating(g: &str) -> bool {
    g.contains("**")
}

pub fn build<'a>(
    patterns: impl IntoIterator<Item = &'a Pattern>,
    seed: u64,
) -> Result<Matcher, String> {
    let mut literals: BTreeMap<u64, u32> = BTreeMap::new();
    // Per DFA, per (slot, below?) the regex bodies to alternate.
    let mut groups: [BTreeMap<(usize, bool), Vec<String>>; 2] = [BTreeMap::new(), BTreeMap::new()];
    for p in patterns {
        let bit = 1u32 << p.slot;
        match p.shape {
            Shape::Glob => {}
            Shape::Literal => {
                let path = if p.glob == "/" { "" } else { p.glob.as_str() };
                *literals
                    .entry(fnv(seed, unescape(path).as_bytes()))
                    .or_default() |= bit;
                if p.glob == "/" {
                    *literals.entry(fnv(seed, b"/")).or_default() |= bit;
                }
                continue;
            }
            Shape::Name => {
                *literals
                    .entry(fnv(seed, unescape(&p.glob).as_bytes()))
                    .or_default() |= bit << LITERAL_EXACT_SHIFT;
                continue;
            }
        }
        let (g, below) = match strip_below(&p.glob) {
            Some(x) => (x, true),
            None => (p.glob.as_str(), false),
        };
        let re = glob(g)
            .map_err(|e| format!("'{}': {e}", p.glob))?
            .regex()
            .to_owned();
        let body = re
            .trim_start_matches("(?-u)")
            .trim_start_matches('^')
            .trim_end_matches('$')
            .to_owned();
        groups[usize::from(is_floating(g))]
            .entry((p.slot, below))
            .or_default()
            .push(body);
    }
    let [a, f] = groups;
    Ok(Matcher {
        anchored: build_dfa(&a)?,
        floating: build_dfa(&f)?,
        seed,
        literals,
    })
}

/// True when `g` has no glob character outside a `\` escape: it names one path.
pub fn is_plain(g: &str) -> bool {
    let mut esc = false;
    for c in g.chars() {
        match c {
            _ if esc => esc = false,
            '\\' => esc = true,
            '*' | '?' | '[' | ']' | '{' | '}' => return false,
            _ => {}
        }
    }
    !esc
}

/// Globs are written with `\` escapes for literal glob characters; the kernel sees bytes.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            if let Some(n) = it.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// One DFA; pattern `i` is the alternation of group `i`.
fn build_dfa(groups: &BTreeMap<(usize, bool), Vec<String>>) -> Result<Dfa, String> {
    if groups.is_empty() {
        // Never matches: one dead state.
        return Ok(Dfa {
            classes: [0; 256],
            stride: 1,
            trans: vec![0],
            accept: vec![DfaAccept::default()],
            start: 0,
            dead: 0,
        });
    }
    let keys: Vec<(usize, bool)> = groups.keys().copied().collect();
    let regexes: Vec<String> = groups
        .values()
        .map(|b| format!("(?-u)^(?:{})$", b.join("|")))
        .collect();
    let dfa = dense::Builder::new()
        .configure(
            dense::Config::new()
                .match_kind(MatchKind::All)
                .start_kind(StartKind::Anchored)
                .dfa_size_limit(Some(SIZE_LIMIT))
                .determinize_size_limit(Some(SIZE_LIMIT)),
        )
        .syntax(syntax::Config::new().unicode(false).utf8(false))
        .thompson(regex_automata::nfa::thompson::Config::new().utf8(false))
        .build_many(&regexes)
        .map_err(|e| format!("cannot build the matcher: {e}"))?;
    let bc = dfa.byte_classes();
    let stride = bc.alphabet_len() - 1; // the last class is end-of-input
    let mut classes = [0u8; 256];
    let mut rep = vec![0u8; stride];
    for b in (0..=255u8).rev() {
        let c = bc.get(b);
        classes[usize::from(b)] = c;
        rep[usize::from(c)] = b;
    }
    let start = dfa
        .start_state_forward(&Input::new(b"").anchored(Anchored::Yes))
        .map_err(|e| format!("no start state: {e}"))?;
    let mut ids: HashMap<StateID, u32> = HashMap::new();
    let mut order: Vec<StateID> = vec![start];
    ids.insert(start, 0);
    let mut trans: Vec<u32> = Vec::new();
    let mut acc: Vec<DfaAccept> = Vec::new();
    let mut dead = u32::MAX;
    let mut i = 0;
    while i < order.len() {
        let sid = order[i];
        if dfa.is_dead_state(sid) {
            dead = i as u32;
        }
        for &b in &rep {
            let next = dfa.next_state(sid, b);
            let n = *ids.entry(next).or_insert_with(|| {
                order.push(next);
                (order.len() - 1) as u32
            });
            trans.push(n);
        }
        let mut a = DfaAccept::default();
        let eoi = dfa.next_eoi_state(sid);
        if dfa.is_match_state(eoi) {
            for k in 0..dfa.match_len(eoi) {
                let (slot, below) = keys[dfa.match_pattern(eoi, k).as_usize()];
                if below {
                    a.below |= 1 << slot;
                } else {
                    a.exact |= 1 << slot;
                }
            }
        }
        acc.push(a);
        i += 1;
    }
    Ok(Dfa {
        classes,
        stride: stride as u32,
        trans,
        accept: acc,
        start: 0,
        dead,
    })
}

/// FNV-1a, 64-bit, seeded: the same function as the kernel's.
pub fn fnv(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed;
    for &b in bytes {
        h = fnv_step(h, b);
    }
    h
}

#[inline]
fn fnv_step(h: u64, b: u8) -> u64 {
    (h ^ u64::from(b)).wrapping_mul(LITERAL_FNV_PRIME)
}

impl Dfa {
    pub fn states(&self) -> u32 {
        self.accept.len() as u32
    }

    fn step(&self, state: u32, b: u8) -> u32 {
        if state == self.dead {
            return state;
        }
        let class = u32::from(self.classes[usize::from(b)]);
        self.trans[(state * self.stride + class) as usize]
    }

    fn acc(&self, state: u32) -> DfaAccept {
        if state == self.dead {
            DfaAccept::default()
        } else {
            self.accept[state as usize]
        }
    }
}

impl Matcher {
    pub fn start(&self) -> ScanState {
        ScanState {
            anchored: self.anchored.start,
            floating: self.floating.start,
            hash: self.seed,
            mask: 0,
        }
    }

    /// Feeds bytes exactly as the kernel does: at each `/`, what lies before it is checked for
    /// "everything below" matches; then each DFA and the hash advance.
    pub fn feed(&self, mut s: ScanState, bytes: &[u8]) -> ScanState {
        for &b in bytes {
            if b == b'/' {
                s.mask |= u32::from(self.anchored.acc(s.anchored).below)
                    | u32::from(self.floating.acc(s.floating).below)
                    | literal_below(self.literal(s.hash));
            }
            s.anchored = self.anchored.step(s.anchored, b);
            s.floating = self.floating.step(s.floating, b);
            s.hash = fnv_step(s.hash, b);
        }
        s
    }

    /// The kinds matching a path that ends in `s` (what the kernel computes at the end).
    pub fn finish(&self, s: ScanState) -> u32 {
        s.mask
            | u32::from(self.anchored.acc(s.anchored).exact)
            | u32::from(self.floating.acc(s.floating).exact)
            | literal_kinds(self.literal(s.hash))
    }

    fn literal(&self, hash: u64) -> u32 {
        self.literals.get(&hash).copied().unwrap_or(0)
    }

    /// Kinds matching an absolute canonical path.
    pub fn match_path(&self, path: &[u8]) -> u32 {
        self.finish(self.feed(self.start(), path))
    }
}

/// Names the first rule of a kind that matches a path (for audit records and `explain`),
/// with the same semantics as the matcher: literals cover their subtree, globs are exact.
/// The glob matchers are built on first use: a policy that is never violated never pays
/// for them, and compile time stays with what the kernel needs.
#[derive(Debug, Clone)]
pub struct Attribution {
    /// (pattern, rule id) in rule-id order.
    rules: Vec<(Pattern, usize)>,
    by_slot: std::sync::OnceLock<Vec<Vec<(usize, Rule)>>>,
}

#[derive(Debug, Clone)]
enum Rule {
    Literal(Vec<u8>),
    Name(Vec<u8>),
    Glob(globset::GlobMatcher),
}

impl Attribution {
    /// `rules`: (pattern, rule id) in rule-id order.
    pub fn new(rules: Vec<(Pattern, usize)>) -> Self {
        Self {
            rules,
            by_slot: std::sync::OnceLock::new(),
        }
    }

    fn by_slot(&self) -> &[Vec<(usize, Rule)>] {
        self.by_slot.get_or_init(|| {
            let mut by_slot = vec![Vec::new(); accept::SLOTS];
            for (p, id) in &self.rules {
                let r = match p.shape {
                    Shape::Literal => Rule::Literal(unescape(&p.glob).into_bytes()),
                    Shape::Name => Rule::Name(unescape(&p.glob).into_bytes()),
                    Shape::Glob => match glob(&p.glob) {
                        Ok(g) => Rule::Glob(g.compile_matcher()),
                        Err(_) => continue,
                    },
                };
                by_slot[p.slot].push((*id, r));
            }
            by_slot
        })
    }

    pub fn first(&self, slot: usize, path: &[u8]) -> Option<usize> {
        let p = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(path),
        );
        self.by_slot().get(slot)?.iter().find_map(|(id, r)| {
            let hit = match r {
                Rule::Literal(l) => {
                    l.as_slice() == b"/"
                        || path == l.as_slice()
                        || (path.starts_with(l) && path.get(l.len()) == Some(&b'/'))
                }
                Rule::Name(n) => path == n.as_slice(),
                Rule::Glob(m) => m.is_match(p),
            };
            hit.then_some(*id)
        })
    }
}

/// True when the bitmask has kind `slot`.
pub fn has(mask: u32, slot: usize) -> bool {
    mask & (1 << slot) != 0
}
