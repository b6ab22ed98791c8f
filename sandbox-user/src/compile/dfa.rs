//! All file and exec patterns of a policy as one DFA over canonical path bytes.
//!
//! Each pattern is a globset glob (with `literal_separator`: `*` stays within a component);
//! a literal path (no glob characters) also matches everything below it (`P` and `P/**`).
//! Globs are not extended that way: every `/**/X/**` would be "sticky" anywhere in a path,
//! and N of them multiply the DFA's states by up to 2^N. The patterns are turned into
//! regexes by globset, determinised together by regex-automata with `MatchKind::All`, and
//! exported into the flat form the kernel walks: a byte -> class map, a `states x classes`
//! transition table, and for each state the first rule of each kind that matches a path
//! ending there (the end-of-input transition is folded into that table, so the kernel never
//! deals with regex-automata's delayed matches).

use std::collections::HashMap;

use regex_automata::dfa::{Automaton, StartKind, dense};
use regex_automata::util::primitives::StateID;
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind};
use sandbox_common::{Accept, NO_RULE};

/// One pattern: glob, kind of rule (`accept` slot) and rule id.
#[derive(Debug, Clone)]
pub struct Pattern {
    pub glob: String,
    /// A literal path (no glob characters) also matches everything below it.
    pub literal: bool,
    pub slot: usize,
    pub rule: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dfa {
    pub classes: [u8; 256],
    /// Number of byte classes (row width).
    pub stride: u32,
    pub trans: Vec<u32>,
    pub accept: Vec<Accept>,
    pub start: u32,
    /// The dead state, or `u32::MAX` when there is none.
    pub dead: u32,
}

/// Upper bound on the DFA's memory while building (the policy is rejected past it).
/// Known limit: policies of many hundreds of globs determinise slowly (see BENCHMARKS.md).
const SIZE_LIMIT: usize = 64 << 20;

/// The glob builder every pattern goes through (also used by validation and tests).
pub fn glob(g: &str) -> Result<globset::Glob, globset::Error> {
    globset::GlobBuilder::new(g)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
}

/// `P` matches the path itself; this is the pattern for everything below it.
pub fn subtree(g: &str) -> Option<String> {
    if g.ends_with("/**") {
        None
    } else if g.ends_with('/') {
        Some(format!("{g}**"))
    } else {
        Some(format!("{g}/**"))
    }
}

pub fn build(patterns: &[Pattern]) -> Result<Dfa, String> {
    let mut regexes = Vec::new();
    let mut owner = Vec::new();
    for (i, p) in patterns.iter().enumerate() {
        let below = if p.literal { subtree(&p.glob) } else { None };
        for g in std::iter::once(p.glob.clone()).chain(below) {
            let re = glob(&g)
                .map_err(|e| format!("'{}': {e}", p.glob))?
                .regex()
                .to_owned();
            regexes.push(re);
            owner.push(i);
        }
    }
    if regexes.is_empty() {
        // A DFA that never matches: one dead state.
        return Ok(Dfa {
            classes: [0; 256],
            stride: 1,
            trans: vec![0],
            accept: vec![Accept::NONE],
            start: 0,
            dead: 0,
        });
    }
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
    let mut accept: Vec<Accept> = Vec::new();
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
        let mut acc = Accept::NONE;
        let eoi = dfa.next_eoi_state(sid);
        if dfa.is_match_state(eoi) {
            for k in 0..dfa.match_len(eoi) {
                let p = &patterns[owner[dfa.match_pattern(eoi, k).as_usize()]];
                let slot = &mut acc.rules[p.slot];
                *slot = (*slot).min(p.rule as u16);
            }
        }
        accept.push(acc);
        i += 1;
    }
    Ok(Dfa {
        classes,
        stride: stride as u32,
        trans,
        accept,
        start: 0,
        dead,
    })
}

impl Dfa {
    pub fn states(&self) -> u32 {
        self.accept.len() as u32
    }

    /// Runs `bytes` from `state`, exactly as the kernel does (stopping in the dead state).
    pub fn feed(&self, mut state: u32, bytes: &[u8]) -> u32 {
        for &b in bytes {
            if state == self.dead {
                break;
            }
            let class = u32::from(self.classes[usize::from(b)]);
            state = self.trans[(state * self.stride + class) as usize];
        }
        state
    }

    pub fn accept_of(&self, state: u32) -> Accept {
        if state == self.dead {
            Accept::NONE
        } else {
            self.accept[state as usize]
        }
    }
}

/// True when `rules` has a rule of kind `slot`.
pub fn has(acc: &Accept, slot: usize) -> bool {
    acc.rules[slot] != NO_RULE
}
