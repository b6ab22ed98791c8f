//! Keeps the shared path functions global. bpf-linker gives every function that is not a
//! program static linkage, and the verifier checks a static function again at every call
//! site in every caller state; a global one once per program (see `path.rs`).

const GLOBAL_FUNCTIONS: &[&str] = &[
    "sandbox_resolve",
    "sandbox_whole_path",
    "sandbox_match_name",
    "sandbox_send",
    "sandbox_fail_closed",
    "sandbox_exe",
    "sandbox_aggregate",
    "sandbox_scan",
    "sandbox_build_path",
    "sandbox_claim",
    "sandbox_proc_outside",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for f in GLOBAL_FUNCTIONS {
        println!("cargo:rustc-link-arg-bins=--export={f}");
    }
}
