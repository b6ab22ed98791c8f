//! Every policy in examples/ validates, compiles, and decides what its comment says.

use std::path::{Path, PathBuf};

use sandbox_user::compile::compile;
use sandbox_user::explain::{self, Access};
use sandbox_user::policy::{Context, load_file};

fn load(name: &str) -> sandbox_user::compile::CompiledPolicy {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(name);
    let ctx = Context {
        home: "/home/agent".into(),
        cwd: "/work/proj".into(),
        env: Default::default(),
        resolvers: Vec::new(),
        host_addrs: Vec::new(),
        other_homes: Vec::new(),
        mount_aliases: Vec::new(),
    };
    let p = load_file(&path, &ctx).unwrap_or_else(|e| panic!("{name}: {e}"));
    compile(&p, sandbox_user::compile::FIXED_SEED).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn allowed(c: &sandbox_user::compile::CompiledPolicy, access: Access, path: &str) -> bool {
    explain::file(c, Path::new(path), access).unwrap().allowed
}

fn may_connect(c: &sandbox_user::compile::CompiledPolicy, addr: &str, port: u16) -> bool {
    explain::connect(c, addr.parse().unwrap(), port).allowed
}

#[test]
fn workspace_agent() {
    let c = load("workspace-agent.yaml");
    assert!(allowed(&c, Access::Read, "/work/proj/src/main.rs"));
    assert!(allowed(&c, Access::Write, "/work/proj/src/main.rs"));
    assert!(!allowed(&c, Access::Read, "/work/proj/.env"));
    assert!(!allowed(&c, Access::Read, "/work/proj/secrets/db.txt"));
    assert!(!allowed(&c, Access::Read, "/home/agent/.ssh/id_rsa"));
    assert!(
        !allowed(&c, Access::Read, "/home/agent/notes.txt"),
        "outside the read list"
    );
    assert!(!allowed(&c, Access::Write, "/usr/lib/x.so"));
    assert!(allowed(&c, Access::Write, "/dev/null"));
    assert!(!may_connect(&c, "169.254.169.254", 80));
    assert!(may_connect(&c, "93.184.216.34", 443));
}

#[test]
fn rw_paths_agent() {
    let c = load("rw-paths-agent.yaml");
    assert!(allowed(&c, Access::Read, "/etc/hostname"));
    assert!(!allowed(&c, Access::Write, "/etc/hostname"));
    assert!(allowed(&c, Access::Write, "/work/proj/out.txt"));
    assert!(allowed(&c, Access::Write, "/home/agent/.cache/pip/x"));
}

#[test]
fn exec_deny_server() {
    let c = load("exec-deny-server.yaml");
    assert!(!allowed(&c, Access::Read, "/srv/app/secrets/token"));
    assert!(!allowed(&c, Access::Read, "/srv/app/config/tls/server.pem"));
    assert!(!allowed(&c, Access::Write, "/srv/app/releases/v1/app"));
    assert!(allowed(&c, Access::Read, "/srv/app/releases/v1/app"));
    assert!(!explain::exec(&c, Path::new("/usr/bin/nc")).unwrap().allowed);
    assert!(
        !explain::exec(&c, Path::new("/usr/local/bin/socat"))
            .unwrap()
            .allowed
    );
    assert!(
        explain::exec(&c, Path::new("/usr/bin/python3"))
            .unwrap()
            .allowed
    );
    assert!(may_connect(&c, "10.0.5.20", 5432));
    assert!(!may_connect(&c, "10.0.5.20", 22));
    assert!(!may_connect(&c, "10.0.5.21", 5432));
}

#[test]
fn audit_monitor() {
    let c = load("audit-monitor.yaml");
    let d = explain::file(&c, Path::new("/home/agent/.ssh/id_rsa"), Access::Read).unwrap();
    assert!(d.allowed && d.audit_only, "{d}");
    let d = explain::connect(&c, "169.254.169.254".parse().unwrap(), 80);
    assert!(d.allowed && d.audit_only, "{d}");
}
