//! Policy pipeline, last stage: load the embedded BPF object with this kernel's offsets and
//! maps sized for the compiled policy, fill the maps, attach the programs, bind cgroups.
//!
//! Order matters: maps are complete before a cgroup is bound, and nothing is bound before
//! the programs are attached, so a bound cgroup never sees half a policy.

use std::collections::{BTreeMap, HashMap as StdHashMap};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use aya::maps::{MapData, RingBuf};
use aya::programs::Lsm;
use aya::programs::links::FdLink;
use aya::{Btf, Ebpf, EbpfLoader};
use sandbox_common::programs::MoveProgram;
use sandbox_common::{
    ByteClasses, DfaAccept, InodeKey, KernelOffsets, LISTEN_ID_BASE, LiteralKey, OFFSETS_GLOBAL,
    SbKey, SbRootKey, ScanStart, ScopeCtl,
};

use crate::compile::CompiledPolicy;
use crate::host::cgroup::Cgroup;
use crate::host::mounts::{self, Superblock};
use crate::kernel::bulk::index;
use crate::kernel::maps::{self, Maps};

pub use sandbox_common::programs::{PROGRAMS, Program};

/// The programs to attach on a kernel whose hooks have `arity(hook)` parameters: one per
/// hook, or an error naming a hook no program fits.
pub fn fitting(arity: impl Fn(&str) -> Result<usize, String>) -> Result<Vec<Program>, LoadError> {
    let mut out: Vec<Program> = Vec::new();
    let mut hooks: Vec<&str> = Vec::new();
    for p in PROGRAMS {
        if !hooks.contains(&p.hook) {
            hooks.push(p.hook);
        }
    }
    for hook in hooks {
        let forms: Vec<&Program> = PROGRAMS.iter().filter(|p| p.hook == hook).collect();
        let got = match arity(hook) {
            Ok(n) => n,
            Err(_) if forms.iter().all(|p| p.optional) => continue,
            Err(e) => return Err(LoadError::Btf(e)),
        };
        let Some(p) = forms.iter().find(|p| p.arity == got) else {
            let want: Vec<String> = forms.iter().map(|p| p.arity.to_string()).collect();
            return Err(LoadError::Btf(format!(
                "the kernel's LSM hook {hook} takes {got} arguments; this build of sandbox \
                 has programs for {}: it does not support this kernel yet",
                want.join(" or ")
            )));
        };
        out.push(**p);
    }
    Ok(out)
}

/// What the loader needs to know about the running kernel.
#[derive(Debug)]
pub struct KernelFit {
    pub offsets: KernelOffsets,
    /// The programs that fit its hooks.
    pub programs: Vec<Program>,
    /// The attach points of the programs that fit, as aya's loads look them up
    /// ([`attach_points`]).
    pub btf: Btf,
    /// The BTF id of the attach point of `programs::PROBE` (`bpf_lsm_<hook>`), when the
    /// kernel has it.
    pub probe_attach: Option<u32>,
}

/// Addresses `allow_hosts` names may resolve to at once, per address family.
pub const MAX_HOST_ADDRESSES: usize = 1024;

/// Addresses this host may gain while sandbox runs (each denied by an entry of its own).
pub const MAX_GAINED_ADDRESSES: usize = 256;

/// Files protected by identity at most (a larger subtree is still protected by path).
const MAX_IDENTITY_FILES: usize = 65_536;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read kernel BTF: {0}")]
    Btf(String),
    #[error("the kernel refused to load the BPF programs: {0}")]
    Load(String),
    #[error("the kernel refused to load or attach the BPF-LSM program `{hook}`: {detail}")]
    Attach { hook: String, detail: String },
    #[error("map {map}: {detail}")]
    Map { map: &'static str, detail: String },
}

/// The loaded programs and their maps, with one policy (id 0) applied.
pub struct Enforcer {
    ebpf: Ebpf,
    /// The programs' diagnostics, when on (`diag::kernel_log_on`).
    kernel_log: Option<aya_log::EbpfLogger<crate::diag::KernelLog>>,
    pub policy_id: u32,
    /// What `SCOPE` holds.
    scope: ScopeCtl,
    /// Links pinned in bpffs (see `pins`): they stay attached if sandbox dies.
    pinned: Vec<aya::programs::links::PinnedLink>,
    /// The cgroup programs' links when there is no pin directory (dropped: detached).
    cgroup_links: Vec<aya::programs::links::FdLink>,
    pin_dir: Option<std::path::PathBuf>,
    /// After [`Enforcer::release_later`], what lets the child holding the links go; it is
    /// dropped after `ebpf` (fields drop in order), whose links the child holds too.
    holder: Option<std::os::fd::OwnedFd>,
    /// The directory cache's control value as last written (`generation` 0: off).
    dir_cache: sandbox_common::DirCacheCtl,
    /// A file of each namespace in `NAMESPACES`, by inode number: held so that none dies
    /// while its number is allowed (the kernel gives a dead namespace's number to the next
    /// one made, anyone's).
    namespaces: StdHashMap<u32, std::fs::File>,
}

/// Files protected by identity: every existing file named by a literal deny, `read_only` or
/// `exec.deny` rule (and, for directories, every file below them), by device and inode.
#[derive(Debug, Default, Clone)]
pub struct Identities {
    /// `INODE_RULES` entries: kind mask per file.
    pub entries: Vec<(InodeKey, u32)>,
    /// (dev, ino) -> (kind, rule id), to name the rule in audit records.
    pub rules: StdHashMap<(u32, u64), Vec<(usize, u16)>>,
}

impl Identities {
    pub fn rule(&self, dev: u32, ino: u64, slot: usize) -> Option<u16> {
        self.rules
            .get(&(dev, ino))?
            .iter()
            .find(|(s, _)| *s == slot)
            .map(|(_, r)| *r)
    }
}

pub fn identities(policy: &CompiledPolicy, policy_id: u32) -> Identities {
    let mut masks: StdHashMap<InodeKey, u32> = StdHashMap::new();
    let mut out = Identities::default();
    for r in &policy.identity {
        let mut stack = vec![r.path.clone()];
        while let Some(p) = stack.pop() {
            if masks.len() >= MAX_IDENTITY_FILES {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            let dev = mounts::kernel_dev_of(meta.dev());
            let key = InodeKey {
                ino: meta.ino(),
                dev,
                policy_id,
            };
            *masks.entry(key).or_default() |= 1 << r.slot;
            let rules = out.rules.entry((dev, meta.ino())).or_default();
            if !rules.iter().any(|(s, _)| *s == r.slot) {
                rules.push((r.slot, r.rule));
            }
            if meta.is_dir()
                && let Ok(rd) = std::fs::read_dir(&p)
            {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        }
    }
    out.entries = masks.into_iter().collect();
    out.entries.sort_by_key(|(k, _)| (k.dev, k.ino));
    out
}

/// `LOOKUP_FILTER`'s words for these `LITERALS` and `INODE_RULES` entries: the bit of every
/// key set in the regions the programs check before looking it up (see
/// `sandbox_common::filter`). A key without its bit would never be looked up: every key of
/// both maps goes through here.
pub fn lookup_filter(literals: &BTreeMap<u64, u32>, inodes: &[(InodeKey, u32)]) -> Vec<u64> {
    use sandbox_common::filter;
    let mut words = vec![0u64; (filter::REGIONS * filter::WORDS) as usize];
    let mut set = |region: u32, key: u64| {
        let (word, bit) = filter::slot(region, key);
        words[word as usize] |= 1 << bit;
    };
    for (hash, mask) in literals {
        set(filter::EXACT, *hash);
        if sandbox_common::literal_below(*mask) != 0 {
            set(filter::BELOW, *hash);
        }
    }
    for (k, _) in inodes {
        set(filter::INODE, filter::inode_key(k.ino, k.dev));
    }
    words
}

impl Drop for Enforcer {
    fn drop(&mut self) {
        // Before the fields go (the links with `ebpf`, in no particular order).
        self.dir_cache_off();
    }
}

impl Enforcer {
    /// Loads the programs with maps sized for `policy` and attaches them. Nothing is
    /// enforced until [`Enforcer::bind`].
    /// With `pin_dir`, every link is pinned there, so enforcement outlives this process
    /// until [`Enforcer::release`].
    pub fn load(
        policy: &CompiledPolicy,
        kernel: &KernelFit,
        identity_count: usize,
        pin_dir: Option<&Path>,
    ) -> Result<Self, LoadError> {
        let btf = &kernel.btf;
        // Read beside the load: /proc/kallsyms is long, and slow to read under emulation.
        let rename_lock = std::thread::spawn(super::dircache::rename_lock);
        // The tick rate is measured across the load (`dircache::max_age`).
        let ticks = super::dircache::Ticks::now(true);
        let mut t = crate::runtime::arm::Timer::new();
        let mut e = Self::create_maps(policy, &kernel.offsets, identity_count)?;
        t.lap("maps made");
        e.pin_dir = pin_dir.map(Path::to_path_buf);
        if crate::diag::kernel_log_on() {
            e.kernel_log =
                aya_log::EbpfLogger::init_with_logger(&mut e.ebpf, crate::diag::KernelLog)
                    .inspect_err(|err| {
                        tracing::warn!("the programs' diagnostics cannot be read: {err}")
                    })
                    .ok();
        }
        if let Some(old) = super::dircache::lsm_skipping_kernel() {
            tracing::warn!(
                "kernel {old} may skip a BPF-LSM program on a CPU where another task was preempted inside the same program (fixed in 6.1.54 and 6.2): a process that wins that race gets past one check; upgrade the kernel"
            );
        }
        let movers = match e.attach(&kernel.programs, btf) {
            Ok(movers) => movers,
            Err(err) => {
                e.release();
                return Err(err);
            }
        };
        t.lap("programs loaded and attached");
        let movers = movers.and_then(|links| e.keep_movers(links));
        e.protect(std::process::id())?;
        e.allow_namespaces_in(Path::new("/proc/self"))?;
        // Only now: the program that clears a freed directory's state is attached.
        let checked = rename_lock
            .join()
            .unwrap_or(Err("the lookup failed".into()))
            .and_then(|addr| e.check_rename_count(addr).map(|()| addr));
        t.lap("rename count found");
        match checked {
            Ok(addr) => {
                let max_age = super::dircache::max_age(ticks, super::dircache::Ticks::now(false));
                let own_moves = super::dircache::lsm_never_skipped()
                    .and(movers)
                    .and_then(|()| e.check_move_count());
                match &own_moves {
                    Ok(()) => tracing::debug!(
                        "directory moves counted: kept states outlive renames of files"
                    ),
                    Err(why) => super::dircache::renames_void(why),
                }
                let mut ctl = sandbox_common::DirCacheCtl {
                    generation: 0,
                    rename_lock: addr,
                    max_age,
                    own_moves: u64::from(own_moves.is_ok()),
                };
                // The kind of stamp first, the cache on after: a program never reads the
                // new generation with the old kind (a value is written as a plain copy).
                e.set_dir_cache(ctl)?;
                ctl.generation = 1;
                e.set_dir_cache(ctl)?;
                super::dircache::on(max_age);
            }
            Err(why) => super::dircache::off(&why),
        }
        Ok(e)
    }

    /// Creates the maps, sized for `policy`, without loading any program (the compile
    /// benchmark measures `apply` with this on hosts that cannot load BPF-LSM programs).
    pub fn create_maps(
        policy: &CompiledPolicy,
        offsets: &KernelOffsets,
        identity_count: usize,
    ) -> Result<Self, LoadError> {
        Self::create(Some((policy, identity_count)), offsets)
    }

    /// The object with every map at its smallest, for [`probe_cgroup`], which loads the
    /// fallback's cgroup programs and drops them (the real load makes its own maps).
    fn create_for_probe(offsets: &KernelOffsets) -> Result<Self, LoadError> {
        Self::create(None, offsets)
    }

    fn create(
        sized_for: Option<(&CompiledPolicy, usize)>,
        offsets: &KernelOffsets,
    ) -> Result<Self, LoadError> {
        let sizes: Vec<(&str, u32)> = match sized_for {
            Some((policy, identity_count)) => Self::sizes(policy, identity_count).to_vec(),
            None => PROBE_SIZES.to_vec(),
        };
        // The programs' own diagnostics (aya-log, fail-closed branches only): off unless
        // asked for, fixed in read-only data so that off costs nothing.
        let log_level: u8 = if crate::diag::kernel_log_on() {
            aya_log::Level::Warn as u8
        } else {
            0
        };
        let mut loader = loader_without_kernel_btf();
        if std::env::var_os("SANDBOX_VLOG").is_some() {
            loader
                .verifier_log_level(aya::VerifierLogLevel::VERBOSE | aya::VerifierLogLevel::STATS);
        }
        // No kernel BTF for the object: it has no CO-RE relocations (struct offsets are
        // read from BTF by `kernel::btf` and given as `OFFSETS_GLOBAL`), and the
        // programs' attach points are looked up in `KernelFit::btf` at their loads.
        loader
            .btf(None)
            .override_global(OFFSETS_GLOBAL, offsets, true)
            .override_global(aya_log::LEVEL, &log_level, true);
        for (name, entries) in sizes {
            loader.map_max_entries(name, entries);
        }
        let ebpf = loader
            .load(crate::BPF_OBJECT)
            .map_err(|e| LoadError::Load(error_chain(&e)))?;
        Ok(Self {
            ebpf,
            kernel_log: None,
            policy_id: 0,
            scope: ScopeCtl::default(),
            pinned: Vec::new(),
            cgroup_links: Vec::new(),
            pin_dir: None,
            holder: None,
            dir_cache: sandbox_common::DirCacheCtl::default(),
            namespaces: StdHashMap::new(),
        })
    }

    /// The sizes of the maps the compiled policy sizes.
    fn sizes(policy: &CompiledPolicy, identity_count: usize) -> [(&'static str, u32); 6] {
        let mt = &policy.matcher;
        let host_room = if policy.net.hosts.is_empty() {
            0
        } else {
            MAX_HOST_ADDRESSES
        } + if policy.net.host_rule.is_some() {
            MAX_GAINED_ADDRESSES
        } else {
            0
        };
        maps::sizes(
            mt.anchored.trans.len() + mt.floating.trans.len(),
            mt.anchored.accept.len() + mt.floating.accept.len(),
            mt.literals.len(),
            identity_count,
            (
                policy.net.v4.len() + policy.net.listen_v4.len() + host_room,
                policy.net.v6.len() + policy.net.listen_v6.len() + host_room,
            ),
        )
    }

    /// Loads and attaches `programs`: loaded side by side ([`load_all`]), attached in
    /// table order. Beside their verification, the move programs are loaded and attached
    /// ([`attach_movers`]); their links, or why they cannot be used, are returned.
    fn attach(&mut self, programs: &[Program], btf: &Btf) -> Result<Movers, LoadError> {
        let attach_err = |p: &Program, detail: String| LoadError::Attach {
            hook: p.hook.into(),
            detail,
        };
        let mut by_name: StdHashMap<&str, &mut aya::programs::Program> =
            self.ebpf.programs_mut().collect();
        let mut lsms: Vec<(&Program, &mut Lsm)> = Vec::with_capacity(programs.len());
        for p in programs {
            let prog = by_name
                .remove(p.name)
                .ok_or_else(|| attach_err(p, "missing from the object".into()))?;
            let lsm: &mut Lsm = prog
                .try_into()
                .map_err(|e: aya::programs::ProgramError| attach_err(p, e.to_string()))?;
            lsms.push((p, lsm));
        }
        let movers: Vec<_> = sandbox_common::programs::MOVE_PROGRAMS
            .iter()
            .map(|m| (m, by_name.remove(m.name)))
            .collect();
        let t = std::time::Instant::now();
        let (loaded, movers) = std::thread::scope(|s| {
            let movers = s.spawn(|| attach_movers(movers, btf));
            let loaded = load_all(&mut lsms, btf);
            let movers = movers
                .join()
                .unwrap_or_else(|_| Err("the move programs' thread panicked".into()));
            (loaded, movers)
        });
        loaded?;
        tracing::debug!("programs loaded: {} ms", t.elapsed().as_millis());
        let _turn = super::pins::attach_turn();
        for (p, prog) in lsms {
            let link = prog.attach().map_err(|e| attach_err(p, error_chain(&e)))?;
            if let Some(dir) = &self.pin_dir {
                let pin_err = |detail: String| {
                    attach_err(
                        p,
                        format!("pinning the link in {}: {detail}", dir.display()),
                    )
                };
                let link = prog.take_link(link).map_err(|e| pin_err(e.to_string()))?;
                let pinned = aya::programs::links::FdLink::from(link)
                    .pin(dir.join(p.name))
                    .map_err(|e| pin_err(e.to_string()))?;
                self.pinned.push(pinned);
            }
        }
        Ok(movers)
    }

    /// The fallback backend (no BPF-LSM): the maps as [`Enforcer::load`] makes them, and no
    /// program yet. The cgroup programs are attached to the run's cgroup by
    /// [`Enforcer::attach_cgroup`] once it exists (after `apply` and `bind`).
    pub fn load_fallback(
        policy: &CompiledPolicy,
        kernel: &KernelFit,
        identity_count: usize,
        pin_dir: Option<&Path>,
    ) -> Result<Self, LoadError> {
        let mut e = Self::create_maps(policy, &kernel.offsets, identity_count)?;
        e.pin_dir = pin_dir.map(Path::to_path_buf);
        Ok(e)
    }

    /// Loads the cgroup programs and attaches them to `cgroup`, where they run for every
    /// task in it and below: with either backend `programs::EGRESS` (packets routed past the
    /// address judged), and in the fallback (`fallback`) `programs::CGROUP_PROGRAMS` (the
    /// network rules by destination). Call after `apply` and `bind` and before anything
    /// joins the cgroup.
    pub fn attach_cgroup(&mut self, cgroup: &Cgroup, fallback: bool) -> Result<(), LoadError> {
        use aya::programs::{CgroupAttachMode, CgroupSkb, CgroupSkbAttachType, CgroupSockAddr};
        use sandbox_common::programs::{CGROUP_PROGRAMS, EGRESS};
        let dir = std::fs::File::open(&cgroup.path).map_err(|e| LoadError::Attach {
            hook: format!("cgroup/{}", EGRESS.name),
            detail: format!("{}: {e}", cgroup.path.display()),
        })?;
        let err = |name: &str, detail: String| LoadError::Attach {
            hook: format!("cgroup/{name}"),
            detail,
        };
        let sock_addr = if fallback { CGROUP_PROGRAMS } else { &[] };
        for p in sock_addr {
            let prog: &mut CgroupSockAddr = self
                .ebpf
                .program_mut(p.name)
                .ok_or_else(|| err(p.name, "missing from the object".into()))?
                .try_into()
                .map_err(|e: aya::programs::ProgramError| err(p.name, e.to_string()))?;
            let t = std::time::Instant::now();
            prog.load().map_err(|e| err(p.name, error_chain(&e)))?;
            if crate::diag::debug_on() {
                debug_line(p.name, prog.info(), t.elapsed());
            }
            // A BPF link (5.7+) coexists with other programs on the cgroup whatever the
            // mode, and the kernel wants no flags for it: `Single` is that.
            let link = prog
                .attach(&dir, CgroupAttachMode::Single)
                .map_err(|e| err(p.name, error_chain(&e)))?;
            let link = prog
                .take_link(link)
                .map_err(|e| err(p.name, e.to_string()))?;
            let link = aya::programs::links::FdLink::try_from(link)
                .map_err(|e| err(p.name, e.to_string()))?;
            self.keep_cgroup_link(p.name, link)?;
        }
        let prog: &mut CgroupSkb = self
            .ebpf
            .program_mut(EGRESS.name)
            .ok_or_else(|| err(EGRESS.name, "missing from the object".into()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| err(EGRESS.name, e.to_string()))?;
        let t = std::time::Instant::now();
        prog.load().map_err(|e| err(EGRESS.name, error_chain(&e)))?;
        if crate::diag::debug_on() {
            debug_line(EGRESS.name, prog.info(), t.elapsed());
        }
        let link = prog
            .attach(&dir, CgroupSkbAttachType::Egress, CgroupAttachMode::Single)
            .map_err(|e| err(EGRESS.name, error_chain(&e)))?;
        let link = prog
            .take_link(link)
            .map_err(|e| err(EGRESS.name, e.to_string()))?;
        let link = aya::programs::links::FdLink::try_from(link)
            .map_err(|e| err(EGRESS.name, e.to_string()))?;
        self.keep_cgroup_link(EGRESS.name, link)
    }

    /// Keeps a cgroup program's link: pinned in the pin directory when there is one (it
    /// outlives sandbox then), else held until this object is dropped.
    fn keep_cgroup_link(
        &mut self,
        name: &str,
        link: aya::programs::links::FdLink,
    ) -> Result<(), LoadError> {
        self.keep_link(name, link).map_err(|e| match e {
            LoadError::Attach { detail, .. } => LoadError::Attach {
                hook: format!("cgroup/{name}"),
                detail,
            },
            e => e,
        })
    }

    /// Keeps a link: pinned in the pin directory as `name` when there is one (it outlives
    /// sandbox then), else held until this object is dropped.
    fn keep_link(
        &mut self,
        name: &str,
        link: aya::programs::links::FdLink,
    ) -> Result<(), LoadError> {
        let Some(pin) = &self.pin_dir else {
            self.cgroup_links.push(link);
            return Ok(());
        };
        let pinned = link.pin(pin.join(name)).map_err(|e| LoadError::Attach {
            hook: name.to_owned(),
            detail: format!("pinning the link in {}: {e}", pin.display()),
        })?;
        self.pinned.push(pinned);
        Ok(())
    }

    /// Unpins the links (they detach with this object) and removes the pin directory. Call
    /// once the run's cgroup is gone, never before: until then the pins keep it confined.
    pub fn release(&mut self) {
        drop(self.unpin_all());
    }

    /// The links, unpinned (they detach when the last copy is closed), and the pin
    /// directory removed.
    fn unpin_all(&mut self) -> Vec<aya::programs::links::FdLink> {
        // The links detach one by one, the free hook's among them: no program may use a
        // kept directory state once freed directories can go unnoticed.
        self.dir_cache_off();
        let links = self
            .pinned
            .drain(..)
            .filter_map(|p| p.unpin().ok())
            .collect();
        if let Some(dir) = self.pin_dir.take() {
            drop(crate::kernel::pins::remove_dir(&dir));
        }
        links
    }

    /// [`Enforcer::release`] for a set another one has replaced (`attach`'s reload), without
    /// waiting for the detach: nothing is in this set's scope any more (its `SCOPE`
    /// is cleared), every program that was still deciding has finished (an RCU grace
    /// period: BPF-LSM programs run under `rcu_read_lock`), so its ring holds all it will
    /// ever write and can be drained at once; the links detach on a thread of their own
    /// (seconds on 6.1 and 6.12, one RCU-tasks wait per link).
    pub fn release_in_background(&mut self) -> Result<(), LoadError> {
        let mut maps = self.maps();
        let mut a = maps.scope()?;
        a.set(0, ScopeCtl::default(), 0).map_err(a.err())?;
        self.scope = ScopeCtl::default();
        crate::kernel::pins::wait_for_running_programs();
        let links = self.unpin_all();
        std::thread::spawn(move || super::pins::detach_in_turns(links));
        Ok(())
    }

    /// [`Enforcer::release`] for a process about to exit: the pins go now, the links'
    /// detach is left to a child process ([`pins::hand_links_to_a_child`]), so sandbox
    /// exits without waiting for it. Call once the run's cgroup is gone.
    ///
    /// The set is unbound first (`SCOPE` cleared): until its last link is closed (seconds
    /// on 6.1 and 6.12), each of its programs then returns after one array read, without
    /// looking up the task's cgroup.
    pub fn release_later(&mut self) {
        let unbound = self.maps().scope().and_then(|mut a| {
            let err = a.err();
            a.set(0, ScopeCtl::default(), 0).map_err(err)
        });
        if let Err(e) = unbound {
            tracing::debug!("unbinding the finished run's programs: {e}");
        }
        self.scope = ScopeCtl::default();
        let links = self.unpin_all();
        self.holder = crate::kernel::pins::hand_links_to_a_child().ok();
        // Our copies go first: the child's are then the last, and the detach is its own.
        drop(links);
    }

    /// Writes every map of `policy` as policy `self.policy_id`. Call before `bind`, once
    /// per loaded object: `LOOKUP_FILTER` is written whole (it holds no policy id), so a
    /// second policy in the same object would lose the first one's bits.
    pub fn apply(
        &mut self,
        policy: &CompiledPolicy,
        sbs: &[Superblock],
        ids: &Identities,
    ) -> Result<(), LoadError> {
        let pid = self.policy_id;
        let mt = &policy.matcher;
        let dfas = [&mt.anchored, &mt.floating];
        let mut bases = [(0u32, 0u32); 2];
        // Both DFAs back to back in each array; a few hundred thousand transitions for
        // 10,000 rules, copied through a memory mapping rather than one system call each.
        let mut trans: Vec<u32> = Vec::new();
        let mut accepts: Vec<DfaAccept> = Vec::new();
        for (k, d) in dfas.iter().enumerate() {
            bases[k] = (index(trans.len()), index(accepts.len()));
            trans.extend_from_slice(&d.trans);
            accepts.extend_from_slice(&d.accept);
        }
        let mut maps = self.maps();
        maps.dfa_trans()?.write_all(&trans)?;
        maps.dfa_accept()?.write_all(&accepts)?;
        {
            let mut c = maps.dfa_classes()?;
            for (k, d) in dfas.iter().enumerate() {
                c.set(2 * pid + k as u32, ByteClasses { classes: d.classes }, 0)
                    .map_err(c.err())?;
            }
        }
        let (keys, masks): (Vec<LiteralKey>, Vec<u32>) = mt
            .literals
            .iter()
            .map(|(hash, mask)| {
                let key = LiteralKey {
                    hash: *hash,
                    policy_id: pid,
                    _pad: 0,
                };
                (key, *mask)
            })
            .unzip();
        maps.literals()?.update(&keys, &masks)?;
        maps.lookup_filter()?
            .write_all(&lookup_filter(&mt.literals, &ids.entries))?;
        self.update_mounts(policy, sbs)?;
        let (keys, masks): (Vec<InodeKey>, Vec<u32>) = ids.entries.iter().copied().unzip();
        self.maps().inode_rules()?.update(&keys, &masks)?;
        self.put_tables(pid, &policy.net.v4, &policy.net.v6)?;
        self.put_tables(
            pid + LISTEN_ID_BASE,
            &policy.net.listen_v4,
            &policy.net.listen_v6,
        )?;
        // The header last: until `live` is set the hooks treat the policy as absent.
        let mut info = policy.info(bases);
        info.shm_dev = crate::host::mounts::shm_dev();
        let mut maps = self.maps();
        let mut p = maps.policies()?;
        p.set(pid, info, 0).map_err(p.err())?;
        Ok(())
    }

    /// (Re)writes the superblock start states from the mount table. Directory states kept
    /// with the old placement are stale afterwards, whether the writes all succeeded or not.
    pub fn update_mounts(
        &mut self,
        policy: &CompiledPolicy,
        sbs: &[Superblock],
    ) -> Result<(), LoadError> {
        let written = self.write_placement(policy, sbs);
        if self.dir_cache.generation != 0 {
            let next = sandbox_common::DirCacheCtl {
                generation: self.dir_cache.generation + 1,
                ..self.dir_cache
            };
            if let Err(e) = self.set_dir_cache(next) {
                // The programs must not go on with states from before: cache off.
                let off = sandbox_common::DirCacheCtl {
                    generation: 0,
                    ..self.dir_cache
                };
                if self.set_dir_cache(off).is_err() {
                    return Err(e);
                }
            }
        }
        written
    }

    fn write_placement(
        &mut self,
        policy: &CompiledPolicy,
        sbs: &[Superblock],
    ) -> Result<(), LoadError> {
        use std::collections::HashSet;
        let pid = self.policy_id;
        let mt = &policy.matcher;
        let start = |place: &str, flags: u32| {
            let s = mt.feed(mt.start(), mounts::prefix(place).as_bytes());
            ScanStart {
                anchored: s.anchored,
                floating: s.floating,
                hash: s.hash,
                mask: s.mask,
                flags,
            }
        };
        // Mounted directories first: a superblock flagged as placed by them must find them.
        let mut dirs: HashSet<SbRootKey> = HashSet::new();
        let mut maps = self.maps();
        {
            let mut r = maps.sb_roots()?;
            for sb in sbs {
                for d in &sb.dirs {
                    let key = SbRootKey {
                        hash: crate::compile::matcher::fnv(mt.seed, d.root.as_bytes()),
                        policy_id: pid,
                        dev: sb.dev,
                    };
                    let flags = if d.subvol {
                        sandbox_common::SB_F_SUBVOLS
                    } else {
                        0
                    };
                    r.insert(key, start(&d.mount_point, flags), 0)
                        .map_err(r.err())?;
                    dirs.insert(key);
                }
            }
        }
        {
            let mut h = maps.sb_start()?;
            // Superblocks gone from the mount table: their device numbers are reused by the
            // next file system mounted, which must not inherit their place.
            let live: HashSet<u32> = sbs.iter().map(|sb| sb.dev).collect();
            let stale: Vec<SbKey> = h
                .keys()
                .filter_map(Result::ok)
                .filter(|k| k.policy_id == pid && !live.contains(&k.dev))
                .collect();
            for k in &stale {
                let _ = h.remove(k);
            }
            for sb in sbs {
                h.insert(
                    SbKey {
                        policy_id: pid,
                        dev: sb.dev,
                    },
                    start(&sb.mount_point, sb.flags()),
                    0,
                )
                .map_err(h.err())?;
            }
        }
        // Mounted directories no longer mounted (after their superblocks stopped using them).
        let mut r = maps.sb_roots()?;
        let stale: Vec<SbRootKey> = r
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k.policy_id == pid && !dirs.contains(k))
            .collect();
        for k in &stale {
            let _ = r.remove(k);
        }
        Ok(())
    }

    /// Checks that `addr` is a count renames move, as the programs read it: the cache
    /// stays off (the control value has generation 0) while this process renames a file
    /// of its own twice and `inode_rename` records what it reads for this process's
    /// renames only; the second must see the first's move (the count up by 2 or more,
    /// even). A wrong address would make every move go unnoticed.
    fn check_rename_count(&mut self, addr: u64) -> Result<(), String> {
        let off = sandbox_common::DirCacheCtl {
            generation: 0,
            rename_lock: addr,
            max_age: 0,
            own_moves: 0,
        };
        self.set_dir_cache(off).map_err(|e| e.to_string())?;
        let mut maps = self.maps();
        let probe = std::cell::RefCell::new(maps.dir_cache_probe().map_err(|e| e.to_string())?);
        let seen = super::dircache::renames_seen(
            || probe.borrow().get(&1, 0).map_err(|e| e.to_string()),
            |watch| {
                let tgid = if watch {
                    u64::from(std::process::id())
                } else {
                    0
                };
                let mut p = probe.borrow_mut();
                p.set(1, 0, 0)
                    .and_then(|()| p.set(0, tgid, 0))
                    .map_err(|e| e.to_string())
            },
        )?;
        super::dircache::moved_by_one_rename(seen)
    }

    /// Keeps the move programs' links (pinned with the others when there is a pin
    /// directory).
    fn keep_movers(&mut self, links: Vec<(&'static str, FdLink)>) -> Result<(), String> {
        for (name, link) in links {
            self.keep_link(name, link).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Checks that the move programs count a directory's rename: this process renames a
    /// directory of its own, and the count (`DIR_MOVES`) must have gone up by the
    /// rename's beginning and end; then that no move is left in progress (one that began
    /// while the programs were being attached may never be seen to end: the count is not
    /// used then).
    fn check_move_count(&mut self) -> Result<(), String> {
        let mut maps = self.maps();
        let moves = maps.dir_moves().map_err(|e| e.to_string())?;
        let word = || moves.get(&0, 0).map_err(|e| e.to_string());
        super::dircache::dir_rename_counted(|| {
            word().map(|w| w >> sandbox_common::MOVES_IN_FLIGHT_BITS)
        })?;
        super::dircache::none_in_progress(|| {
            word().map(|w| w & ((1 << sandbox_common::MOVES_IN_FLIGHT_BITS) - 1))
        })
    }

    /// Turns the directory cache off (before any program detaches).
    fn dir_cache_off(&mut self) {
        if self.dir_cache.own_moves != 0 {
            // A move left in progress for good (a frame never closed) costs the kept
            // states their use across renames of files: said, for the tests.
            let mut maps = self.maps();
            let word = maps.dir_moves().ok().and_then(|m| m.get(&0, 0).ok());
            if let Some(w) = word {
                tracing::debug!(
                    "directory moves: {} counted, {} in progress",
                    w >> sandbox_common::MOVES_IN_FLIGHT_BITS,
                    w & ((1 << sandbox_common::MOVES_IN_FLIGHT_BITS) - 1)
                );
            }
        }
        if self.dir_cache.generation != 0 {
            let off = sandbox_common::DirCacheCtl::default();
            // On failure it stays marked on, and `Drop` tries again.
            let _ = self.set_dir_cache(off);
        }
    }

    fn set_dir_cache(&mut self, v: sandbox_common::DirCacheCtl) -> Result<(), LoadError> {
        let mut maps = self.maps();
        let mut a = maps.dir_cache_ctl()?;
        a.set(0, v, 0).map_err(a.err())?;
        self.dir_cache = v;
        Ok(())
    }

    /// Makes the LPM entries for resolved `allow_hosts` addresses match `want` (address ->
    /// allow rules). `have` is what was installed before; it is updated to what is in the
    /// kernel. `own`: the addresses and local prefixes this host has had while sandbox ran,
    /// never allowed by a name. An address that goes away (or became this host's) gets back
    /// what the policy says for that exact prefix ([`crate::compile::net::base_entry`]: the
    /// policy's own entry with the denies of what the host gained, or none). Addresses leave first, so expiry
    /// never waits on a write that fails; a failed write leaves that address as it was and
    /// the rest is still written; the first error is returned.
    pub fn set_hosts(
        &mut self,
        policy: &CompiledPolicy,
        want: &std::collections::BTreeMap<std::net::IpAddr, Vec<sandbox_common::PortRule>>,
        have: &mut std::collections::BTreeMap<std::net::IpAddr, Vec<sandbox_common::PortRule>>,
        own: &crate::compile::net::HostNets,
    ) -> Result<(), LoadError> {
        use crate::compile::net::{base_entry, host_entry};
        let pid = self.policy_id;
        let entries: Vec<_> = want
            .iter()
            .filter_map(|(addr, rules)| {
                host_entry(&policy.net, *addr, rules, own).map(|e| (*addr, rules, e))
            })
            .collect();
        let gone: Vec<std::net::IpAddr> = have
            .keys()
            .filter(|a| !entries.iter().any(|(w, _, _)| w == *a))
            .copied()
            .collect();
        let mut first = None;
        for addr in gone {
            let restored = match base_entry(&policy.net, addr, own) {
                Some(r) => self.put_net(pid, addr, r),
                None => self.remove_net(pid, addr),
            };
            match restored {
                Ok(()) => drop(have.remove(&addr)),
                Err(e) => drop(first.get_or_insert(e)),
            }
        }
        for (addr, rules, entry) in entries {
            if have.get(&addr) == Some(rules) {
                continue;
            }
            match self.put_net(pid, addr, entry) {
                Ok(()) => drop(have.insert(addr, rules.clone())),
                Err(e) => drop(first.get_or_insert(e)),
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Denies what in `now` (addresses and local prefixes, `netif::local`) this host gained
    /// after the policy was compiled (with `block_private`): each gets its own entry with
    /// that deny, and the policy's entries inside it are written again with it
    /// (`compile::net::gained_entries`). `added` holds what was added before; it is updated
    /// once every entry is written. Returns what was added this time. What goes away keeps
    /// its entry: a stale deny fails closed.
    pub fn deny_host_addrs(
        &mut self,
        policy: &CompiledPolicy,
        now: &[ipnet::IpNet],
        added: &mut crate::compile::net::HostNets,
    ) -> Result<Vec<ipnet::IpNet>, LoadError> {
        let new: Vec<ipnet::IpNet> = now
            .iter()
            .filter(|n| !added.contains(n) && crate::compile::net::gained(&policy.net, n))
            .copied()
            .collect();
        let mut all = added.clone();
        all.extend(new.iter().copied());
        let pid = self.policy_id;
        for (addr, len, rules) in crate::compile::net::gained_entries(&policy.net, &all, &new) {
            self.maps().net_insert(pid, addr, len, rules)?;
        }
        *added = all;
        Ok(new)
    }

    /// Writes compiled LPM entries under policy id `pid`.
    fn put_tables(
        &mut self,
        pid: u32,
        v4: &[crate::compile::net::Entry<4>],
        v6: &[crate::compile::net::Entry<16>],
    ) -> Result<(), LoadError> {
        let mut maps = self.maps();
        for e in v4 {
            maps.net_insert(pid, e.addr.into(), e.prefix_len, e.rules)?;
        }
        for e in v6 {
            maps.net_insert(pid, e.addr.into(), e.prefix_len, e.rules)?;
        }
        Ok(())
    }

    /// One address's own entry (a /32 or /128) under policy id `pid`.
    fn put_net(
        &mut self,
        pid: u32,
        addr: std::net::IpAddr,
        rules: sandbox_common::NetRules,
    ) -> Result<(), LoadError> {
        self.maps().net_insert(pid, addr, full_prefix(addr), rules)
    }

    fn remove_net(&mut self, pid: u32, addr: std::net::IpAddr) -> Result<(), LoadError> {
        self.maps().net_remove(pid, addr, full_prefix(addr))
    }

    /// Puts `cgroup` (and everything below it) under the policy. A set binds one cgroup.
    pub fn bind(&mut self, cgroup: &Cgroup) -> Result<(), LoadError> {
        if self.scope.id != 0 && self.scope.id != cgroup.id {
            return Err(LoadError::Load(format!(
                "this set of programs confines cgroup {} already: it cannot confine {} too",
                self.scope.id, cgroup.id
            )));
        }
        let scope = ScopeCtl {
            id: cgroup.id,
            level: cgroup.level,
            policy_id: self.policy_id,
        };
        let mut maps = self.maps();
        let mut a = maps.scope()?;
        a.set(0, scope, 0).map_err(a.err())?;
        self.scope = scope;
        Ok(())
    }

    /// The event ring buffer (can be taken once).
    pub fn take_events(&mut self) -> Result<RingBuf<MapData>, LoadError> {
        self.maps().take_events()
    }

    /// (program, runs, total time in them) of every program that ran, when the kernel
    /// keeps statistics (`kernel.bpf_stats_enabled = 1`).
    pub fn program_stats(&self) -> Vec<(String, u64, std::time::Duration)> {
        self.ebpf
            .programs()
            .filter_map(|(name, p)| {
                let i = p.info().ok()?;
                (i.run_count() > 0).then(|| (name.to_owned(), i.run_count(), i.run_time()))
            })
            .collect()
    }

    /// Writes the programs' diagnostics received so far (when on).
    pub fn flush_kernel_log(&mut self) {
        if let Some(l) = &mut self.kernel_log {
            l.flush();
        }
    }

    /// The loaded object, for the native benchmark (`benches/native.rs`): it loads its own
    /// programs (iterators, never attached by sandbox) beside the maps this made.
    pub fn ebpf_mut(&mut self) -> &mut Ebpf {
        &mut self.ebpf
    }

    /// Makes process `tgid` untouchable for in-scope tasks (signals, ptrace).
    pub fn protect(&mut self, tgid: u32) -> Result<(), LoadError> {
        let mut maps = self.maps();
        let mut h = maps.protected()?;
        h.insert(tgid, 1, 0).map_err(h.err())
    }

    /// Lets in-scope tasks open the files of the namespaces of the process whose `/proc`
    /// directory is `proc_dir` (`ns/*`: the namespaces the command starts in); the others'
    /// stay closed (`nsfs.rs` in the programs). Each is held open while the set lives, so
    /// that its number names it only. The number of namespaces added (0: none new, or the
    /// process is gone).
    pub fn allow_namespaces_in(&mut self, proc_dir: &Path) -> Result<usize, LoadError> {
        let mut files = Vec::new();
        if let Ok(rd) = std::fs::read_dir(proc_dir.join("ns")) {
            for e in rd.flatten() {
                if let Ok(f) = std::fs::File::open(e.path()) {
                    files.push(f);
                }
            }
        }
        self.allow_namespaces(files)
    }

    /// Allows what `other` allows (a reload: the namespaces the command started in, not
    /// those its processes are in now).
    pub fn allow_namespaces_like(&mut self, other: &Enforcer) -> Result<usize, LoadError> {
        let files = other
            .namespaces
            .values()
            .filter_map(|f| f.try_clone().ok())
            .collect();
        self.allow_namespaces(files)
    }

    fn allow_namespaces(&mut self, files: Vec<std::fs::File>) -> Result<usize, LoadError> {
        use std::os::unix::fs::MetadataExt;
        let mut added = 0;
        for f in files {
            let Some(inum) = f.metadata().ok().and_then(|m| u32::try_from(m.ino()).ok()) else {
                continue;
            };
            if self.namespaces.contains_key(&inum) {
                continue;
            }
            let mut maps = self.maps();
            let mut h = maps.namespaces()?;
            h.insert(inum, 1, 0).map_err(h.err())?;
            self.namespaces.insert(inum, f);
            added += 1;
        }
        Ok(added)
    }

    /// Records dropped because the ring buffer was full, summed over CPUs.
    pub fn drops(&mut self) -> Result<u64, LoadError> {
        let mut maps = self.maps();
        let a = maps.drops()?;
        Ok(a.get(&0, 0).map_err(a.err())?.iter().sum())
    }

    /// Every CPU's aggregation slot (index: the CPU).
    pub fn agg_slots(&mut self) -> Result<Vec<sandbox_common::AggSlot>, LoadError> {
        let mut maps = self.maps();
        let a = maps.agg()?;
        Ok(a.get(&0, 0).map_err(a.err())?.iter().copied().collect())
    }

    /// The typed map handles of the loaded object.
    pub fn maps(&mut self) -> Maps<'_> {
        Maps(&mut self.ebpf)
    }
}

/// The prefix length of one whole address.
fn full_prefix(addr: std::net::IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// An error and its sources on one line (aya puts the verifier log in a source).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// For the fallback backend: the running kernel's offsets and BTF, without the LSM hook
/// forms (a kernel without `CONFIG_BPF_LSM` has none).
pub fn kernel_fit_without_lsm() -> Result<KernelFit, LoadError> {
    let btf = crate::kernel::btf::load(Path::new("/sys/kernel/btf/vmlinux"))
        .map_err(|e| LoadError::Btf(e.to_string()))?;
    let offsets = crate::kernel::btf::offsets(&btf).map_err(|e| LoadError::Btf(e.to_string()))?;
    Ok(KernelFit {
        offsets,
        programs: Vec::new(),
        // Nothing here attaches by BTF (the cgroup programs attach to the cgroup).
        btf: Btf::new(),
        probe_attach: None,
    })
}

/// `union bpf_attr` as `BPF_PROG_LOAD` reads it, up to `attach_btf_obj_fd`.
#[repr(C)]
#[derive(Default)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
    prog_btf_fd: u32,
    func_info_rec_size: u32,
    func_info: u64,
    func_info_cnt: u32,
    line_info_rec_size: u32,
    line_info: u64,
    line_info_cnt: u32,
    attach_btf_id: u32,
    attach_btf_obj_fd: u32,
    pad: u32,
}
const _: () = assert!(std::mem::offset_of!(ProgLoad, attach_btf_id) == 108);
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_LSM: u32 = 29;
const BPF_LSM_MAC: u32 = 27;

/// Whether BPF-LSM programs load here: the smallest program there is (`r0 = 0; exit`) for
/// the attach point of `programs::PROBE`, loaded with `BPF_PROG_LOAD` and closed, never
/// attached. Loading it from the object took 0.7 s of every start under emulation (aya
/// parses, loads and relocates the whole object for one program, and the real load does
/// it all again).
pub fn probe_lsm(kernel: &KernelFit) -> Result<(), LoadError> {
    let hook = sandbox_common::programs::find(sandbox_common::programs::PROBE).hook;
    let refused = |detail: String| LoadError::Attach {
        hook: hook.into(),
        detail,
    };
    let Some(attach_btf_id) = kernel.probe_attach else {
        return Err(LoadError::Btf(format!(
            "the kernel's BTF has no BPF-LSM attach point bpf_lsm_{hook}"
        )));
    };
    // mov64 r0, 0; exit
    let insns: [u64; 2] = [0xb7, 0x95];
    let license = c"GPL";
    let mut log = vec![0u8; 4096];
    let mut name = [0u8; 16];
    name[..13].copy_from_slice(b"sandbox_probe");
    let mut attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_LSM,
        insn_cnt: 2,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        prog_name: name,
        expected_attach_type: BPF_LSM_MAC,
        attach_btf_id,
        ..ProgLoad::default()
    };
    // SAFETY: `attr` is a valid `bpf_attr` prefix; the pointers in it (instructions,
    // license, log) outlive the call. The descriptor is closed when dropped.
    let loaded = unsafe { crate::sys::bpf_fd("bpf(BPF_PROG_LOAD)", BPF_PROG_LOAD, &mut attr) };
    if let Err(e) = loaded {
        let verifier =
            String::from_utf8_lossy(&log[..log.iter().position(|b| *b == 0).unwrap_or(log.len())])
                .trim()
                .to_owned();
        return Err(refused(format!(
            "the BPF_PROG_LOAD syscall returned {}{}",
            e.source,
            if verifier.is_empty() {
                String::new()
            } else {
                format!(". Verifier output: {verifier}")
            }
        )));
    }
    Ok(())
}

/// Every map of the object at its smallest, for [`probe_cgroup`]
/// (arrays and hash maps of one entry, the ring of one page).
const PROBE_SIZES: [(&str, u32); 23] = {
    use sandbox_common::map_names as m;
    [
        (m::SCOPE, 1),
        (m::POLICIES, 1),
        (m::DFA_CLASSES, 1),
        (m::DFA_TRANS, 1),
        (m::DFA_ACCEPT, 1),
        (m::SB_START, 1),
        (m::SB_ROOTS, 1),
        (m::LITERALS, 1),
        (m::INODE_RULES, 1),
        (m::LOOKUP_FILTER, 1),
        (m::NET_V4, 1),
        (m::NET_V6, 1),
        (m::PROTECTED, 1),
        ("RENAME_DEST", 64),
        (m::EVENTS, 4096),
        (m::DROPS, 1),
        (m::AGG, 1),
        ("DIR_CACHE", 1),
        ("NAME_CACHE", 1),
        ("FILE_CACHE", 1),
        (m::DIR_CACHE_CTL, 1),
        (m::DIR_CACHE_PROBE, 1),
        ("SCRATCH", 1),
    ]
};

/// Loads (verifies) `progs` on every CPU at once. Verification is most of sandbox's start-up
/// (the path hooks inline the walk and the scan: seconds under emulation), and the kernel
/// verifies a process's programs side by side. The table puts the costliest program
/// first, so the longest job starts first. Errors are reported in table order.
fn load_all(progs: &mut [(&Program, &mut Lsm)], btf: &Btf) -> Result<(), LoadError> {
    let workers = std::thread::available_parallelism()
        .map_or(1, std::num::NonZero::get)
        .min(progs.len());
    let queue = std::sync::Mutex::new(progs.iter_mut().enumerate());
    let debug = crate::diag::debug_on();
    let mut failed: Vec<(usize, LoadError)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut failed = Vec::new();
                    loop {
                        let next = queue.lock().map(|mut q| q.next());
                        let Ok(Some((i, (p, prog)))) = next else {
                            break failed;
                        };
                        let t = std::time::Instant::now();
                        if let Err(e) = prog.load(p.hook, btf) {
                            failed.push((
                                i,
                                LoadError::Attach {
                                    hook: p.hook.into(),
                                    detail: error_chain(&e),
                                },
                            ));
                        } else if debug {
                            debug_line(p.name, prog.info(), t.elapsed());
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![(0, LoadError::Load("a loading thread panicked".into()))]
                })
            })
            .collect()
    });
    failed.sort_by_key(|(i, _)| *i);
    failed.into_iter().next().map_or(Ok(()), |(_, e)| Err(e))
}

/// The move programs' links by name, or why they cannot be used.
type Movers = Result<Vec<(&'static str, FdLink)>, String>;

/// Loads and attaches the programs that count directory moves (`movers`, from
/// `sandbox_common::programs::MOVE_PROGRAMS`, in table order: every `fexit` first), so that
/// kept directory states outlive the host's renames of files. An error says why they
/// cannot be used (the cache then goes by every rename, as without them).
fn attach_movers(
    movers: Vec<(&'static MoveProgram, Option<&mut aya::programs::Program>)>,
    btf: &Btf,
) -> Movers {
    use aya::programs::{FEntry, FExit, ProgramError};
    let t = std::time::Instant::now();
    let _turn = super::pins::attach_turn();
    let mut links = Vec::with_capacity(movers.len());
    for (m, prog) in movers {
        let err =
            |e: &dyn std::error::Error| format!("{} of {}: {}", m.name, m.function, error_chain(e));
        let prog = prog.ok_or_else(|| format!("{} is missing from the object", m.name))?;
        // A function this kernel does not have (`m.optional` only): nothing to attach.
        let absent = |e: &ProgramError| {
            m.optional
                && matches!(
                    e,
                    ProgramError::Btf(aya::BtfError::UnknownBtfTypeName { .. })
                )
        };
        let link: FdLink = if m.exit {
            let p: &mut FExit = prog.try_into().map_err(|e| err(&e))?;
            match p.load(m.function, btf) {
                Err(e) if absent(&e) => continue,
                r => r.map_err(|e| err(&e))?,
            }
            let id = p.attach().map_err(|e| err(&e))?;
            p.take_link(id).map_err(|e| err(&e))?.into()
        } else {
            let p: &mut FEntry = prog.try_into().map_err(|e| err(&e))?;
            match p.load(m.function, btf) {
                Err(e) if absent(&e) => continue,
                r => r.map_err(|e| err(&e))?,
            }
            let id = p.attach().map_err(|e| err(&e))?;
            p.take_link(id).map_err(|e| err(&e))?.into()
        };
        links.push((m.name, link));
    }
    tracing::debug!("move programs attached: {} ms", t.elapsed().as_millis());
    Ok(links)
}

/// An `EbpfLoader` made without reading the kernel's BTF. aya's `EbpfLoader::new()` parses
/// all of `/sys/kernel/btf/vmlinux` for CO-RE, which this object does not use (`create`
/// replaces it with none at once): 14 ms of every start natively, 0.2-0.6 s under
/// emulation. No constructor of aya's skips it, so it runs in a thread whose root (its own:
/// `CLONE_FS` unshared) is `/sys/kernel/btf`, where that absolute path names nothing. The
/// thread reads nothing else and ends with the call; where either step fails, the loader is
/// made as usual (the same loader, only slower).
fn loader_without_kernel_btf<'a>() -> EbpfLoader<'a> {
    std::thread::scope(|s| {
        std::thread::Builder::new()
            .spawn_scoped(s, || {
                let rooted = nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)
                    .and_then(|()| nix::unistd::chroot(KERNEL_BTF_DIR));
                if let Err(e) = rooted {
                    tracing::debug!("the loader reads the kernel's BTF ({KERNEL_BTF_DIR}: {e})");
                }
                EbpfLoader::new()
            })
            .ok()
            .and_then(|t| t.join().ok())
            // No thread: here, as aya makes it (`Default` is `EbpfLoader::new()`).
            .unwrap_or_default()
    })
}

/// Where the kernel's BTF is (`vmlinux`, and one file per module that has its own).
const KERNEL_BTF_DIR: &str = "/sys/kernel/btf";

/// `SANDBOX_LOG=debug`: what verifying one program cost (instructions the verifier processed,
/// the kernel's `verified_insns`, and the time to load it).
fn debug_line(
    name: &str,
    info: Result<aya::programs::ProgramInfo, aya::programs::ProgramError>,
    took: std::time::Duration,
) {
    let info = info.ok();
    let insns = info
        .as_ref()
        .and_then(aya::programs::ProgramInfo::verified_instruction_count)
        .map_or_else(|| "?".to_owned(), |n| n.to_string());
    let size = info
        .as_ref()
        .and_then(aya::programs::ProgramInfo::size_translated)
        .map_or_else(|| "?".to_owned(), |n| (n / 8).to_string());
    tracing::debug!("verified {name}: {insns} instructions in {took:.0?} ({size} long)");
}

/// Whether the fallback backend's cgroup programs load here (loaded, not attached).
pub fn probe_cgroup(kernel: &KernelFit) -> Result<(), LoadError> {
    let mut e = Enforcer::create_for_probe(&kernel.offsets)?;
    for p in sandbox_common::programs::CGROUP_PROGRAMS {
        let err = |detail: String| LoadError::Attach {
            hook: format!("cgroup/{}", p.name),
            detail,
        };
        let prog: &mut aya::programs::CgroupSockAddr = e
            .ebpf
            .program_mut(p.name)
            .ok_or_else(|| err("missing from the object".into()))?
            .try_into()
            .map_err(|e: aya::programs::ProgramError| err(e.to_string()))?;
        prog.load().map_err(|e| err(error_chain(&e)))?;
    }
    Ok(())
}

/// Reads the running kernel's BTF: struct offsets, the programs whose hook forms fit, and
/// their attach points.
pub fn kernel_fit() -> Result<KernelFit, LoadError> {
    let btf = crate::kernel::btf::load(Path::new("/sys/kernel/btf/vmlinux"))
        .map_err(|e| LoadError::Btf(e.to_string()))?;
    let programs =
        fitting(|hook| crate::kernel::btf::lsm_hook_arity(&btf, hook).map_err(|e| e.to_string()))?;
    let offsets = crate::kernel::btf::offsets(&btf).map_err(|e| LoadError::Btf(e.to_string()))?;
    let probe = sandbox_common::programs::find(sandbox_common::programs::PROBE);
    let probe_attach = crate::kernel::btf::lsm_hook_id(&btf, probe.hook).ok();
    let points = attach_points(&btf, &programs)?;
    Ok(KernelFit {
        offsets,
        programs,
        btf: points,
        probe_attach,
    })
}

/// The attach points of `programs` and of the move programs (those this kernel has), as
/// aya's `Lsm::load` and `FEntry`/`FExit::load` look them up: a BTF of aya's in which each
/// attach point's function has the id it has in the kernel's BTF, the ids between taken
/// by placeholders of another kind. Those loads find the id by name, comparing the name of
/// every function of the BTF they are given before it: over the kernel's own BTF 0.6-4.7
/// ms a program natively (36-47 ms for a start's 60, one CPU), and the kernel's BTF parsed
/// by aya once more; here a scan of placeholders' kinds. The ids are ours
/// (`kernel::btf::func_id`, the first function of the name, as aya takes it). A wrong id
/// could name another BPF-LSM hook, which the kernel would accept: the unit tests hold
/// the ids to aya's (the host's kernel, and a BTF with a name given twice).
pub fn attach_points(
    btf: &crate::kernel::btf::Btf,
    programs: &[Program],
) -> Result<Btf, LoadError> {
    use aya_obj::btf::{BtfType, Float, Func, FuncLinkage};
    let mut points: Vec<(u32, String)> = Vec::new();
    for p in programs {
        let name = format!("bpf_lsm_{}", p.hook);
        let id =
            crate::kernel::btf::func_id(btf, &name).map_err(|e| LoadError::Btf(e.to_string()))?;
        points.push((id, name));
    }
    for m in sandbox_common::programs::MOVE_PROGRAMS {
        // Absent (`optional` ones on older kernels): its load says so, as aya's would.
        if let Ok(id) = crate::kernel::btf::func_id(btf, m.function) {
            points.push((id, m.function.to_owned()));
        }
    }
    points.sort_unstable();
    points.dedup();
    let mut out = Btf::new();
    let placeholder = out.add_string("");
    let mut next = 1u32;
    for (id, name) in points {
        if id < next {
            return Err(LoadError::Btf(format!("two attach points at BTF id {id}")));
        }
        while next < id {
            next = out.add_type(BtfType::Float(Float::new(placeholder, 8))) + 1;
        }
        let name_at = out.add_string(&name);
        let got = out.add_type(BtfType::Func(Func::new(name_at, 0, FuncLinkage::Global)));
        if got != id {
            return Err(LoadError::Btf(format!("{name}: BTF id {got}, not {id}")));
        }
        next = id + 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use sandbox_common::{InodeKey, LITERAL_EXACT_SHIFT, filter};

    use super::*;

    /// Every attach point is found at the id aya finds over the kernel's whole BTF, on
    /// this machine's kernel; a function it lacks is absent from both.
    #[test]
    fn attach_points_have_the_kernels_ids() {
        use aya_obj::btf::BtfKind;
        let fit = kernel_fit().unwrap();
        let whole = Btf::from_sys_fs().unwrap();
        let mut names: Vec<String> = fit
            .programs
            .iter()
            .map(|p| format!("bpf_lsm_{}", p.hook))
            .collect();
        names.extend(
            sandbox_common::programs::MOVE_PROGRAMS
                .iter()
                .map(|m| m.function.to_owned()),
        );
        names.push("bpf_lsm_no_such_hook".into());
        assert!(names.len() > 40, "{names:?}");
        for n in &names {
            let want = whole.id_by_type_name_kind(n, BtfKind::Func).ok();
            let got = fit.btf.id_by_type_name_kind(n, BtfKind::Func).ok();
            assert_eq!(got, want, "{n}");
        }
        assert!(
            fit.btf
                .id_by_type_name_kind("bpf_lsm_file_open", BtfKind::Func)
                .is_ok()
        );
    }

    /// The loader is made without the kernel's BTF, and the thread's root stays its own.
    /// (aya's `Debug` shows the field; with `EbpfLoader::new()` it is `Some`.)
    #[test]
    fn the_loader_reads_no_kernel_btf() {
        let btf_of = |l: &EbpfLoader<'_>| format!("{l:?}").chars().take(30).collect::<String>();
        assert!(Path::new(KERNEL_BTF_DIR).join("vmlinux").exists());
        // Whether a thread here may have a root of its own (a chroot to where it is).
        let chrooted = std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_FS)
                .and_then(|()| nix::unistd::chroot("/"))
                .is_ok()
        })
        .join()
        .unwrap();
        let got = btf_of(&loader_without_kernel_btf());
        if chrooted {
            assert!(got.starts_with("EbpfLoader { btf: None,"), "{got}");
        } else {
            // Without the right to change its root, the thread reads it as aya does.
            assert!(got.starts_with("EbpfLoader { btf: Some("), "{got}");
        }
        assert!(btf_of(&EbpfLoader::new()).starts_with("EbpfLoader { btf: Some("));
        // This thread's root is the host's.
        assert!(Path::new(KERNEL_BTF_DIR).join("vmlinux").exists());
    }

    fn has(words: &[u64], region: u32, key: u64) -> bool {
        let (w, b) = filter::slot(region, key);
        words[w as usize] >> b & 1 != 0
    }

    #[test]
    fn the_lookup_filter_holds_every_key_and_little_else() {
        // 10,000 literals, every other one covering what lies below it.
        let literals: BTreeMap<u64, u32> = (0..10_000u64)
            .map(|i| {
                let hash = crate::compile::matcher::fnv(7, format!("/data/p{i}").as_bytes());
                let mask = if i % 2 == 0 {
                    1
                } else {
                    1 << LITERAL_EXACT_SHIFT
                };
                (hash, mask)
            })
            .collect();
        let inodes: Vec<(InodeKey, u32)> = (0..5_000u64)
            .map(|i| {
                let key = InodeKey {
                    ino: 1_000 + i,
                    dev: 0x0800_0001,
                    policy_id: 0,
                };
                (key, 1)
            })
            .collect();
        let words = lookup_filter(&literals, &inodes);
        assert_eq!(words.len(), (filter::REGIONS * filter::WORDS) as usize);
        for (hash, mask) in &literals {
            assert!(has(&words, filter::EXACT, *hash));
            if sandbox_common::literal_below(*mask) != 0 {
                assert!(has(&words, filter::BELOW, *hash));
            }
        }
        for (k, _) in &inodes {
            assert!(has(&words, filter::INODE, filter::inode_key(k.ino, k.dev)));
        }
        // Paths and inodes that are not keys: most of their lookups are spared.
        let spared = |region: u32, keys: &mut dyn Iterator<Item = u64>| {
            let (mut n, mut clear) = (0, 0);
            for k in keys {
                n += 1;
                clear += u32::from(!has(&words, region, k));
            }
            f64::from(clear) / f64::from(n)
        };
        let others = || {
            (0..10_000u64)
                .map(|i| crate::compile::matcher::fnv(7, format!("/home/u/f{i}").as_bytes()))
        };
        assert!(spared(filter::BELOW, &mut others()) > 0.9);
        assert!(spared(filter::EXACT, &mut others()) > 0.8);
        let mut inos = (0..10_000u64).map(|i| filter::inode_key(100_000 + i, 0x0800_0001));
        assert!(spared(filter::INODE, &mut inos) > 0.85);
        // Consecutive inode numbers of one device spread over the words.
        let used = words[(filter::INODE * filter::WORDS) as usize..]
            .iter()
            .filter(|w| **w != 0)
            .count();
        assert!(used > 900, "{used} words of 1,024");
    }
}
