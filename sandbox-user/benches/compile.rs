//! Policy validate + compile + apply time for 10 to 10,000 rules (goal: 10,000 under 100 ms).
//! `cargo bench -p sandbox-user --bench compile`. Prints the median of several runs.
//!
//! `apply` writes the maps of a real BPF object (created, no program loaded), so it needs
//! root and `bpf()`; without them the column says why it is missing.

use std::time::{Duration, Instant};

use sandbox_user::compile::compile;
use sandbox_user::kernel::loader::{Enforcer, Identities};
use sandbox_user::policy::{Context, load_str};

/// A policy of `n` rules in the proportions real policies have: mostly literal paths, then
/// globs, exec rules and CIDRs.
fn policy(n: usize) -> String {
    let mut deny = Vec::new();
    let mut read_only = Vec::new();
    let mut exec = Vec::new();
    let mut net = Vec::new();
    for i in 0..n {
        match i % 10 {
            0..=3 => deny.push(format!("/srv/app{}/dir{i}/secret.key", i % 50)),
            4 => deny.push(format!("/data/*/project{i}/secrets/**")),
            5 => deny.push(format!("/**/*.ext{i}")),
            6 | 7 => read_only.push(format!("/opt/tool{i}")),
            8 => exec.push(format!("/usr/local/bin/tool{i}")),
            _ => net.push(format!(
                "'{}.{}.{}.0/24:{}'",
                11 + (i / 65536) % 200,
                (i / 256) % 256,
                i % 256,
                1 + i % 60000
            )),
        }
    }
    let list = |v: &[String]| v.iter().map(|s| format!("    - {s}\n")).collect::<String>();
    format!(
        "files:\n  deny:\n{}  read_only:\n{}exec:\n  deny:\n{}network:\n  deny:\n{}",
        list(&deny),
        list(&read_only),
        list(&exec),
        list(&net)
    )
}

fn main() {
    let ctx = Context {
        home: "/home/u".into(),
        cwd: "/work".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>10} {:>12} {:>10}",
        "rules", "validate", "compile", "apply", "states", "transitions", "literals"
    );
    let offsets = sandbox_common::KernelOffsets::ZERO;
    let btf = aya::Btf::from_sys_fs().ok();
    let mut apply_error = None;
    for n in [10, 100, 300, 1_000, 10_000] {
        let text = policy(n);
        let mut v = Vec::new();
        let mut c = Vec::new();
        let mut states = 0;
        let mut classes = 0;
        let mut trans = 0;
        let mut a = Vec::new();
        let runs = 5;
        let mut failed = None;
        for _ in 0..runs {
            let t = Instant::now();
            let p = load_str(&text, "bench.yaml", &ctx).expect("valid policy");
            v.push(t.elapsed());
            let t = Instant::now();
            let r = compile(&p, sandbox_user::compile::FIXED_SEED);
            c.push(t.elapsed());
            match r {
                Ok(compiled) => {
                    states =
                        compiled.matcher.anchored.states() + compiled.matcher.floating.states();
                    classes = compiled.matcher.literals.len() as u32;
                    trans = compiled.matcher.anchored.trans.len()
                        + compiled.matcher.floating.trans.len();
                    if btf.is_some() && apply_error.is_none() {
                        let ids = Identities::default();
                        let r = Enforcer::create_maps(&compiled, &offsets, 0).and_then(|mut e| {
                            let t = Instant::now();
                            e.apply(&compiled, &[], &ids).map(|()| t.elapsed())
                        });
                        match r {
                            Ok(d) => a.push(d),
                            Err(e) => apply_error = Some(e.to_string()),
                        }
                    }
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            println!("{n:>8} fails after {:.0} ms: {e}", c[0].as_secs_f64() * 1e3);
            continue;
        }
        v.sort();
        c.sort();
        a.sort();
        let ms = |d: Duration| format!("{:.1} ms", d.as_secs_f64() * 1e3);
        println!(
            "{n:>8} {:>10} {:>10} {:>10} {states:>10} {trans:>12} {classes:>10}",
            ms(v[v.len() / 2]),
            ms(c[c.len() / 2]),
            a.get(a.len() / 2).map_or_else(|| "-".into(), |d| ms(*d)),
        );
    }
    if let Some(e) = apply_error {
        println!("apply not measured: {e}");
    } else if btf.is_none() {
        println!("apply not measured: no kernel BTF");
    }
}
