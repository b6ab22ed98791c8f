//! Any text must give a policy or a precise error, never a panic, and a policy that
//! validates must compile or fail with an error (and compile deterministically).
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_user::compile::compile;
use sandbox_user::policy::{Context, load_str};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let ctx = Context { home: "/home/u".into(), cwd: "/work".into(), env: [("V".to_owned(), "/v".to_owned())].into(), resolvers: Vec::new(), host_addrs: Vec::new(), other_homes: Vec::new() };
    match load_str(text, "fuzz.yaml", &ctx) {
        Ok(p) => {
            if p.rule_count() <= 64 {
                if let (Ok(a), Ok(b)) = (compile(&p, 7), compile(&p, 7)) {
                    assert_eq!(a.matcher, b.matcher);
                }
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.starts_with("fuzz.yaml"), "error does not name the file: {msg}");
        }
    }
});
