//! Sample records of every class and hook, validated against the OCSF 1.8.0 dictionary
//! vendored in `sandbox-user/ocsf/1.8.0` (the schema is generated from the dictionary here,
//! as the OCSF server does): every attribute must exist in its class or object, with its
//! dictionary type; enum values must be defined and their captions match; required
//! attributes and `at_least_one`/`just_one` constraints hold; profile attributes appear only
//! with their profile in `metadata.profiles`; `class_uid`, `category_uid` and `type_uid`
//! agree. `unmapped` is free-form by definition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sandbox_common::{EventHeader, decision, hook, reason};
use serde_json::{Map, Value};

use super::decode::Event;
use super::name::Formatter;
use super::record::{OCSF_VERSION, Record};

/// One attribute as a class or object defines it.
#[derive(Debug, Clone, Default)]
struct Attr {
    requirement: String,
    /// The class's or object's own enum, else the dictionary's.
    enumeration: Option<Map<String, Value>>,
    /// Set when the attribute comes only from a profile.
    profile: Option<String>,
}

type Attrs = BTreeMap<String, Attr>;

struct Schema {
    root: PathBuf,
    dictionary: Map<String, Value>,
    types: Map<String, Value>,
}

fn load(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: copy it from the OCSF schema (tag v{OCSF_VERSION}) into sandbox-user/ocsf/",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap()
}

impl Schema {
    fn open() -> Self {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("ocsf/{OCSF_VERSION}"));
        let dict = load(&root.join("dictionary.json"));
        Self {
            dictionary: dict["attributes"].as_object().unwrap().clone(),
            types: dict["types"]["attributes"].as_object().unwrap().clone(),
            root,
        }
    }

    /// The attributes a definition file declares, its `$include`s first (profiles tagged).
    fn declared(&self, def: &Value, profile: Option<&str>, out: &mut Attrs) {
        let Some(attrs) = def["attributes"].as_object() else {
            return;
        };
        if let Some(incs) = attrs.get("$include") {
            let incs: Vec<&str> = match incs {
                Value::String(s) => vec![s.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            for inc in incs {
                let d = load(&self.root.join(inc));
                let p = (d["meta"] == "profile").then(|| d["name"].as_str().unwrap().to_owned());
                self.declared(&d, p.as_deref().or(profile), out);
            }
        }
        for (name, a) in attrs {
            if name == "$include" {
                continue;
            }
            let e = out.entry(name.clone()).or_default();
            if let Some(r) = a["requirement"].as_str() {
                e.requirement = r.to_owned();
            }
            if let Some(en) = a["enum"].as_object() {
                e.enumeration = Some(en.clone());
            }
            // Declared directly: no longer tied to a profile.
            e.profile = profile.map(str::to_owned);
        }
    }

    fn event(&self, name: &str) -> (Value, Attrs) {
        let path = self.find_event(name);
        let def = load(&path);
        let mut attrs = match def["extends"].as_str() {
            Some(parent) => self.event(parent).1,
            None => Attrs::new(),
        };
        self.declared(&def, None, &mut attrs);
        (def, attrs)
    }

    fn find_event(&self, name: &str) -> PathBuf {
        for dir in ["events", "events/system", "events/network"] {
            for f in std::fs::read_dir(self.root.join(dir)).unwrap().flatten() {
                if f.path().extension().is_some_and(|x| x == "json")
                    && load(&f.path())["name"] == name
                {
                    return f.path();
                }
            }
        }
        panic!("event class {name} is not vendored in sandbox-user/ocsf/")
    }

    fn object(&self, name: &str) -> (Value, Attrs) {
        let def = load(&self.root.join(format!("objects/{name}.json")));
        let mut attrs = match def["extends"].as_str() {
            Some(parent) => self.object(parent).1,
            None => Attrs::new(),
        };
        self.declared(&def, None, &mut attrs);
        (def, attrs)
    }

    /// The category and uid of a class, walking up its parents for the category.
    fn class_ids(&self, def: &Value) -> (u64, u64) {
        let cats = load(&self.root.join("categories.json"));
        let mut d = def.clone();
        loop {
            if let Some(cat) = d["category"].as_str() {
                let cat_uid = cats["attributes"][cat]["uid"].as_u64().unwrap_or(0);
                let uid = def["uid"].as_u64().unwrap_or(0);
                return (cat_uid, if uid == 0 { 0 } else { cat_uid * 1000 + uid });
            }
            let parent = d["extends"].as_str().expect("a class without a category");
            d = load(&self.find_event(parent));
        }
    }

    /// The base type of a dictionary type (`port_t` -> `integer_t`).
    fn base_type(&self, t: &str) -> String {
        match self.types.get(t).and_then(|d| d["type"].as_str()) {
            Some(b) if b != t => self.base_type(b),
            _ => t.to_owned(),
        }
    }
}

struct Check<'a> {
    schema: &'a Schema,
    profiles: Vec<String>,
    errors: Vec<String>,
}

impl Check<'_> {
    fn fail(&mut self, at: &str, what: impl std::fmt::Display) {
        self.errors.push(format!("{at}: {what}"));
    }

    fn object(&mut self, at: &str, v: &Value, def: &Value, attrs: &Attrs) {
        let Some(obj) = v.as_object() else {
            return self.fail(at, format!("expected an object, found {v}"));
        };
        for (k, val) in obj {
            let here = format!("{at}/{k}");
            if let Some(base) = k.strip_suffix("_dt")
                && self.profiles.iter().any(|p| p == "datetime")
                && attrs.contains_key(base)
                && self
                    .schema
                    .dictionary
                    .get(base)
                    .is_some_and(|d| d["type"] == "timestamp_t")
            {
                if !val.is_string() {
                    self.fail(&here, "a datetime must be a string");
                }
                continue;
            }
            let Some(a) = attrs.get(k) else {
                self.fail(&here, "not an attribute of this class or object");
                continue;
            };
            if let Some(p) = &a.profile
                && !self.profiles.contains(p)
            {
                self.fail(
                    &here,
                    format!("belongs to profile {p}, not in metadata.profiles"),
                );
            }
            self.value(&here, k, val, a, obj);
        }
        for (k, a) in attrs {
            let applies = a.profile.as_ref().is_none_or(|p| self.profiles.contains(p));
            if a.requirement == "required" && applies && !obj.contains_key(k) {
                self.fail(at, format!("required attribute {k} missing"));
            }
        }
        for (kind, list) in def["constraints"].as_object().into_iter().flatten() {
            let names: Vec<&str> = list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let present = names.iter().filter(|n| obj.contains_key(**n)).count();
            let ok = match kind.as_str() {
                "at_least_one" => present >= 1,
                "just_one" => present == 1,
                _ => true,
            };
            if !ok {
                self.fail(at, format!("constraint {kind} of {names:?} not met"));
            }
        }
    }

    fn value(&mut self, at: &str, name: &str, v: &Value, a: &Attr, parent: &Map<String, Value>) {
        let Some(d) = self.schema.dictionary.get(name).cloned() else {
            return self.fail(at, "not in the dictionary");
        };
        if d["is_array"] == true {
            let Some(items) = v.as_array() else {
                return self.fail(at, "expected an array");
            };
            for (i, item) in items.iter().enumerate() {
                self.scalar_or_object(&format!("{at}/{i}"), name, item, &d);
            }
        } else {
            self.scalar_or_object(at, name, v, &d);
        }
        // The dictionary's values, then the class's or object's (as the OCSF server merges
        // them), with the convention that every enum has 0 "Unknown" and 99 "Other". The
        // class and category ids are checked against the class itself (`validate`).
        let en = match (d["enum"].as_object(), &a.enumeration) {
            (None, None) => None,
            _ if matches!(name, "class_uid" | "category_uid") => None,
            (base, own) => {
                let mut en = base.cloned().unwrap_or_default();
                en.extend(own.clone().unwrap_or_default());
                en.entry("0")
                    .or_insert_with(|| serde_json::json!({ "caption": "Unknown" }));
                en.entry("99")
                    .or_insert_with(|| serde_json::json!({ "caption": "Other" }));
                Some(en)
            }
        };
        if let Some(en) = en {
            let key = v.as_u64().map(|n| n.to_string()).unwrap_or_default();
            match en.get(&key) {
                None => self.fail(at, format!("{v} is not a value of this enum")),
                Some(entry) if key != "99" => {
                    if let Some(sib) = d["sibling"].as_str()
                        && let Some(s) = parent.get(sib)
                        && *s != entry["caption"]
                    {
                        self.fail(
                            at,
                            format!("{sib} is {s}, the caption is {}", entry["caption"]),
                        );
                    }
                }
                Some(_) => {}
            }
        }
    }

    fn scalar_or_object(&mut self, at: &str, name: &str, v: &Value, d: &Value) {
        let t = d["type"].as_str().unwrap_or_default();
        let ok = match self.schema.base_type(t).as_str() {
            "string_t" => v.is_string(),
            "integer_t" | "long_t" | "timestamp_t" => v.is_i64() || v.is_u64(),
            "float_t" => v.is_number(),
            "boolean_t" => v.is_boolean(),
            "json_t" => true,
            "object" => v.is_object(),
            _ if name == "unmapped" => true,
            object => {
                let (def, attrs) = self.schema.object(object);
                self.object(at, v, &def, &attrs);
                true
            }
        };
        if !ok {
            self.fail(at, format!("{v} is not a {t}"));
        }
    }
}

/// Validates one record; every problem, one per line.
fn validate(schema: &Schema, record: &Value) -> Result<(), String> {
    let class_uid = record["class_uid"].as_u64().unwrap_or(u64::MAX);
    let classes = [
        "base_event",
        "file_activity",
        "process_activity",
        "network_activity",
    ];
    let (def, attrs) = classes
        .iter()
        .map(|c| schema.event(c))
        .find(|(def, _)| schema.class_ids(def).1 == class_uid)
        .ok_or_else(|| format!("class_uid {class_uid} is not a vendored class"))?;
    let (cat, uid) = schema.class_ids(&def);
    let mut c = Check {
        schema,
        profiles: record["metadata"]["profiles"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_str().map(str::to_owned))
            .collect(),
        errors: Vec::new(),
    };
    for p in c.profiles.clone() {
        if !schema.root.join(format!("profiles/{p}.json")).exists() {
            c.fail("/metadata/profiles", format!("no profile {p}"));
        }
    }
    c.object("", record, &def, &attrs);
    if record["category_uid"].as_u64() != Some(cat) {
        c.fail("/category_uid", format!("the class's category is {cat}"));
    }
    if record["class_name"] != def["caption"] {
        c.fail(
            "/class_name",
            format!("the class's caption is {}", def["caption"]),
        );
    }
    let cats = load(&schema.root.join("categories.json"));
    let cat_caption = cats["attributes"]
        .as_object()
        .into_iter()
        .flatten()
        .find(|(_, v)| v["uid"].as_u64() == Some(cat))
        .map_or(Value::from("Uncategorized"), |(_, v)| v["caption"].clone());
    if record["category_name"] != cat_caption {
        c.fail(
            "/category_name",
            format!("the category's caption is {cat_caption}"),
        );
    }
    let activity = record["activity_id"].as_u64().unwrap_or(0);
    if record["type_uid"].as_u64() != Some(uid * 100 + activity) {
        c.fail("/type_uid", "not class_uid * 100 + activity_id");
    }
    if record["metadata"]["version"] != OCSF_VERSION {
        c.fail("/metadata/version", format!("not {OCSF_VERSION}"));
    }
    if c.errors.is_empty() {
        Ok(())
    } else {
        Err(c.errors.join("\n"))
    }
}

fn event(hook: u32, f: impl FnOnce(&mut EventHeader), path: &[u8]) -> Event {
    let mut h = EventHeader {
        hook,
        decision: decision::DENY,
        reason: reason::RULE,
        pid: 41,
        tgid: 40,
        ppid: 1,
        uid: 1000,
        gid: 1000,
        rule: u32::from(sandbox_common::NO_RULE),
        path_len: u32::try_from(path.len()).unwrap(),
        time_ns: 1,
        dev: 0x80_0001,
        exe_dev: 0x80_0001,
        exe_len: 12,
        ..EventHeader::default()
    };
    h.comm[..4].copy_from_slice(b"cat\0");
    f(&mut h);
    Event {
        hook: super::Hook::try_from(h.hook).unwrap(),
        header: h,
        sb_path: path.to_vec(),
        exe_path: b"/usr/bin/cat".to_vec(),
    }
}

/// One kernel event of every hook the programs report, denied and audited.
fn samples() -> Vec<Event> {
    let mut out = Vec::new();
    let file = |hk| event(hk, |h| h.access = 1, b"/home/u/.ssh/id_rsa");
    for hk in [
        hook::FILE_OPEN,
        hook::CREATE,
        hook::MKDIR,
        hook::SYMLINK,
        hook::UNLINK,
        hook::RMDIR,
        hook::LINK,
        hook::RENAME,
        hook::TRUNCATE,
        hook::CHMOD,
        hook::CHOWN,
        hook::SETATTR,
        hook::XATTR,
        hook::NOTIFY,
        hook::BPRM_CHECK,
        hook::UNIX_CONNECT,
        hook::UNIX_SEND,
    ] {
        out.push(file(hk));
    }
    out.push(event(hook::FILE_OPEN, |h| h.access = 2, b"/home/u/\xffodd"));
    let net4 = |hk| {
        event(
            hk,
            |h| {
                h.family = 2;
                h.port = 80;
                h.addr[..4].copy_from_slice(&[169, 254, 169, 254]);
            },
            b"",
        )
    };
    for hk in [hook::SOCKET_CONNECT, hook::SOCKET_SENDMSG, hook::LISTEN] {
        out.push(net4(hk));
    }
    out.push(event(
        hook::SOCKET_CONNECT,
        |h| {
            h.family = 10;
            h.port = 443;
            h.addr = "2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets();
        },
        b"",
    ));
    for (hk, access, target) in [
        (hook::BPF, 0, 5),
        (hook::SIGNAL, 9, 1),
        (hook::PTRACE, 16, 1),
        (hook::MOUNT, 0, 0),
        (hook::UMOUNT, 0, 0),
        (hook::PIVOT_ROOT, 0, 0),
        (hook::TASK, 0, 7),
        (hook::IOCTL, 0x5412, 0),
        (hook::KERNEL, 1, 2),
        (hook::KERNEL, 3, 9),
        (hook::CLONE_INTO_CGROUP, 0, 0),
        (hook::KEY, 2, 0),
        (hook::USER_NAMESPACE, 0, 0),
        (hook::SOCKET_CREATE, 3, 255),
        (hook::SOCKET_OPTION, 6, 31),
    ] {
        out.push(event(
            hk,
            |h| {
                h.access = access;
                h.target = target;
                h.reason = reason::SELF_PROTECTION;
            },
            b"",
        ));
    }
    let audited: Vec<Event> = out
        .iter()
        .map(|e| {
            let mut e = e.clone();
            e.header.decision = decision::AUDIT;
            e
        })
        .collect();
    out.extend(audited);
    out
}

fn formatter(policy: &crate::compile::CompiledPolicy) -> Formatter<'_> {
    static IDS: std::sync::LazyLock<crate::kernel::loader::Identities> =
        std::sync::LazyLock::new(Default::default);
    let root = crate::host::mounts::Superblock {
        dev: 0x80_0001,
        mount_point: "/".into(),
        fstype: "ext4".into(),
        dirs: Vec::new(),
    };
    Formatter::new(policy, vec![root], &IDS).unwrap()
}

fn policy() -> crate::compile::CompiledPolicy {
    crate::audit::built_in_policy()
}

#[test]
fn every_record_is_valid_ocsf() {
    let schema = Schema::open();
    let policy = policy();
    let fmt = formatter(&policy);
    let mut records: Vec<Record> = samples().iter().map(|e| fmt.record(e)).collect();
    records.push(fmt.orphan_record(&samples()[0], "run-1-2"));
    records.push(Record::loss(3, "ring buffer full", None));
    records.push(Record::loss(
        2,
        "ring buffer full after the run's sandbox died",
        Some("run-1-2"),
    ));
    records.push(Record::error(
        "undecodable kernel record: unknown hook 99".into(),
        None,
    ));
    records.push(Record::terminal_filtered(
        "an escape sequence that sets the clipboard (OSC 52)",
    ));
    records.push(Record::limit_reached(
        "limits.memory",
        "67108864".into(),
        "the kernel killed 1 of its processes".into(),
    ));
    let mut bad = Vec::new();
    for r in &records {
        let v = serde_json::to_value(r).unwrap();
        if let Err(e) = validate(&schema, &v) {
            bad.push(format!("{}:\n{e}\n{v:#}", r.type_name));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n\n"));
}

/// A change that makes a valid record invalid.
type Break = fn(&mut Value);

/// The validator itself rejects what OCSF rejects (a validator that passes everything would
/// make the test above worthless).
#[test]
fn the_validator_catches_mistakes() {
    let schema = Schema::open();
    let policy = policy();
    let fmt = formatter(&policy);
    let good = serde_json::to_value(fmt.record(&samples()[0])).unwrap();
    validate(&schema, &good).unwrap();
    let broken: [(&str, Break); 8] = [
        ("unknown attribute", |v| v["file"]["inode"] = 1.into()),
        ("wrong type", |v| v["actor"]["user"]["uid"] = 1000.into()),
        ("undefined enum value", |v| v["action_id"] = 7.into()),
        ("caption mismatch", |v| v["activity_name"] = "Read".into()),
        ("missing required", |v| {
            v["file"].as_object_mut().unwrap().remove("name");
        }),
        ("type_uid", |v| v["type_uid"] = 100_101.into()),
        ("profile not applied", |v| {
            v["metadata"]["profiles"] = serde_json::json!(["host", "datetime"]);
        }),
        ("constraint", |v| {
            let p = v["actor"]["process"].as_object_mut().unwrap();
            p.remove("pid");
        }),
    ];
    for (what, f) in broken {
        let mut v = good.clone();
        f(&mut v);
        assert!(validate(&schema, &v).is_err(), "{what} passed: {v:#}");
    }
}

#[test]
fn records_name_the_rule_and_keep_the_kernel_time() {
    let policy = policy();
    let fmt = formatter(&policy);
    let mut e = samples().remove(0);
    e.header.rule = u32::try_from(sandbox_common::accept::FILE_DENY).unwrap();
    let v = serde_json::to_value(fmt.record(&e)).unwrap();
    assert_eq!(v["unmapped"]["rule"], "files.deny[0]", "{v:#}");
    assert_eq!(v["unmapped"]["rule_source"], "~/.ssh", "{v:#}");
    assert_eq!(v["file"]["name"], "id_rsa");
    assert_eq!(v["actor"]["user"]["uid"], "1000");
    assert_eq!(v["status_id"], 2);
    // 1 ns after boot, as wall-clock time: the boot time, not the time of formatting.
    // (The two clocks are read at slightly different instants: a millisecond either way.)
    let boot_ms = super::record::wall_ms(1);
    assert!(v["time"].as_u64().unwrap().abs_diff(boot_ms) <= 1, "{v:#}");
    assert!(boot_ms < super::record::wall_ms(0));
}

#[test]
#[ignore = "prints sample records for the README"]
fn print_samples() {
    let policy = policy();
    let fmt = formatter(&policy);
    for e in samples() {
        println!("{}", serde_json::to_string(&fmt.record(&e)).unwrap());
    }
    println!(
        "{}",
        serde_json::to_string(&Record::loss(3, "ring buffer full", None)).unwrap()
    );
}

/// The audit log's encoder (`json`) writes every record as serde_json writes it.
#[test]
fn records_are_written_as_serde_json_writes_them() {
    let policy = policy();
    let fmt = formatter(&policy);
    let mut events = samples();
    // A rule named from the path; an abstract socket name; a path of an unknown file
    // system, not UTF-8; the same path with a control character in it.
    for (dev, path) in [
        (0u32, &b"@abstract"[..]),
        (77, &b"/x/\xfe"[..]),
        (0, &b"/home/u/.ssh/k"[..]),
        (0, &b"/home/u/a\nb\"c\\d\x1b"[..]),
    ] {
        let mut e = samples().remove(0);
        e.header.rule = u32::try_from(sandbox_common::accept::FILE_DENY).unwrap();
        e.header.dev = dev;
        e.sb_path = path.to_vec();
        events.push(e);
    }
    let mut records: Vec<Record> = Vec::new();
    for e in &events {
        records.push(fmt.record(e));
        records.push(fmt.orphan_record(e, "run-1-2"));
    }
    records.push(Record::loss(3, "ring buffer full", None));
    records.push(Record::error("undecodable \"x\"\n".into(), Some("run-1")));
    records.push(Record::terminal_filtered("a sequence (OSC 52)"));
    records.push(Record::limit_reached(
        "limits.pids",
        "48".into(),
        "3 forks failed".into(),
    ));
    for r in &records {
        let mut ours = Vec::new();
        crate::audit::json::fast(&mut ours, r).unwrap();
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(r).unwrap()
        );
    }
}

/// A process's part of its records is kept, but not across a change of the mount table:
/// its executable is placed with the table of the record's time.
#[test]
fn a_kept_actor_is_made_again_when_the_mounts_change() {
    let policy = policy();
    let mut fmt = formatter(&policy);
    let mut e = samples().remove(0);
    e.header.exe_dev = 0x80_0002;
    let exe = |fmt: &Formatter<'_>| {
        let v = serde_json::to_value(fmt.record(&e)).unwrap();
        v["actor"]["process"]["file"]["path"].clone()
    };
    assert_eq!(exe(&fmt), "dev8:2:/usr/bin/cat");
    assert_eq!(exe(&fmt), "dev8:2:/usr/bin/cat");
    let mut mounts = fmt.mounts.clone();
    mounts.push(crate::host::mounts::Superblock {
        dev: 0x80_0002,
        mount_point: "/opt".into(),
        fstype: "ext4".into(),
        dirs: Vec::new(),
    });
    fmt.set_mounts(&mounts);
    assert_eq!(exe(&fmt), "/opt/usr/bin/cat");
}
