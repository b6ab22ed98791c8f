//! Booting a Debian kernel under QEMU with BPF LSM on, with an initramfs holding busybox,
//! the sandbox binaries and a payload, and reading the guest's verdict.
//!
//! The verdict counts only when both channels agree: the guest prints `VMTEST-RESULT: PASS`
//! on the serial console *and* exits through the `isa-debug-exit` device with status 0
//! (QEMU exits with `(status << 1) | 1`). A guest panic makes QEMU exit 0, a hang hits the
//! timeout, a missing verdict is a failure: none of them can pass.

use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};

use crate::cpio::Cpio;
use crate::kernel::Kernel;
use crate::{Artifacts, setup, target_dir};

/// PID 1 in the guest. `@PAYLOAD@` is replaced by the command to run.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/usr/bin:/bin:/sbin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm && mount -t devpts devpts /dev/pts 2>/dev/null
ln -sf /proc/self/fd /dev/fd; ln -sf /proc/self/fd/0 /dev/stdin; ln -sf /proc/self/fd/1 /dev/stdout; ln -sf /proc/self/fd/2 /dev/stderr
mount -t securityfs securityfs /sys/kernel/security
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup
mount -t tmpfs -o mode=1777 tmpfs /tmp
# POSIX shared memory on a tmpfs of its own, as on every distribution's host.
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm
for m in $(cat /lib/sandbox-modules/order 2>/dev/null); do
  insmod /lib/sandbox-modules/$m.ko || echo "VMTEST: insmod $m failed"
done
ip link set lo up 2>/dev/null
hostname sandbox-vm
# Demo secrets for `cargo xtask vm` (the tests make their own).
mkdir -p /root/.ssh /root/.aws && echo 'demo private key' > /root/.ssh/id_rsa && echo 'demo' > /root/.aws/credentials
chmod 700 /root/.ssh
# agent (uid 1000, see /etc/passwd) is the non-root user, who types `sudo sandbox run`.
mkdir -p /home/agent && chown 1000:1000 /home/agent && chmod 755 /home/agent
echo "VMTEST: kernel $(uname -r), lsm $(cat /sys/kernel/security/lsm), uptime $(cut -d' ' -f1 /proc/uptime)s, $(dmesg | grep -o 'Dynamic Preempt: [a-z]*' || echo 'preemption: built in')"
echo VMTEST-BEGIN
cd /root
/bin/busybox sh /watchdog @WATCHDOG@ &
echo $! > /run/watchdog.pid
@PAYLOAD@
@VERDICT@
poweroff -f
"#;

/// Run by `/init` beside the payload. When the kernel reports a hang (a task blocked for
/// minutes, an RCU grace period held up by a task that never switches) or past the job's
/// deadline (`$1` seconds, short of the host's timeout), it shows what every task is doing
/// (state, voluntary/involuntary switches, kernel stack), the kernel's log from the first
/// report on (at every level: `quiet` keeps the reports' stacks off the console), each
/// CPU's backtrace and the blocked tasks, and stops the test runners: a hang ends with the
/// evidence on the console, within minutes, instead of a silent kill from outside.
const WATCHDOG: &str = r#"left=$1
signs='blocked for more than|detected stalls|soft lockup|hard LOCKUP'
while [ "$left" -gt 0 ]; do
  sleep 5
  left=$((left - 5))
  if dmesg | grep -qE "$signs"; then
    sleep 20
    echo "VMTEST-HUNG: the kernel reports a hang; its log from the first report:"
    dmesg | awk "/$signs/ { on = 1 } on" | tail -n 400 | sed 's/^/VMTEST-KLOG /'
    break
  fi
done
[ "$left" -gt 0 ] || echo "VMTEST-HUNG: no verdict after $1 s"
echo "VMTEST-HUNG: the tasks (pid/tid comm state voluntary/involuntary switches, kernel stack):"
for t in /proc/[0-9]*/task/[0-9]*; do
  st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' $t/status 2>/dev/null)
  [ -n "$st" ] || continue
  # Kernel threads only when running or in uninterruptible sleep.
  if [ -z "$(tr -d '\0' < ${t%/task/*}/cmdline 2>/dev/null)" ] && [ "$st" != R ] && [ "$st" != D ]; then
    continue
  fi
  v=$(sed -n 's/^voluntary_ctxt_switches:[[:space:]]*//p' $t/status)
  n=$(sed -n 's/^nonvoluntary_ctxt_switches:[[:space:]]*//p' $t/status)
  id=${t#/proc/}
  echo "VMTEST-TASK ${id%%/*}/${t##*/} $(cat $t/comm) $st $v/$n $(tr '\0' ' ' < ${t%/task/*}/cmdline | cut -c1-160)"
  head -n 16 $t/stack 2>/dev/null | sed 's/^/VMTEST-TASK     /'
done
echo 7 > /proc/sys/kernel/printk
echo l > /proc/sysrq-trigger
echo w > /proc/sysrq-trigger
sleep 2
echo "VMTEST-HUNG: stopping the test runners"
killall -9 kernel-tests fallback-tests systemd-tests 2>/dev/null
"#;

/// The end of every guest's job: the verdict of the command before it, on the console and
/// through `isa-debug-exit`.
const VERDICT: &str = r#"rc=$?
kill $(cat /run/watchdog.pid 2>/dev/null) 2>/dev/null
echo VMTEST-END
echo "VMTEST-EXIT: $rc"
if [ $rc = 0 ]; then echo "VMTEST-RESULT: PASS"; else echo "VMTEST-RESULT: FAIL"; fi
sync
/usr/bin/sandbox-probe qemu-exit $rc"#;

/// The systemd guest's payload, run by `/init`: it writes the test job as a unit and
/// replaces the shell (PID 1) with systemd, which runs the unit; the unit's script ends the
/// guest with the verdict, as `/init` would. systemd mounts what it needs on top of what
/// `/init` mounted. Units log to the console (no journald in the guest).
const SYSTEMD_PAYLOAD: &str = r#"cat > /vmtest.sh <<'VMTEST_EOF'
#!/bin/sh
export PATH=/usr/bin:/bin:/sbin:/usr/sbin HOME=/root
cd /root
# The package's own postinst, as dpkg runs it (systemd learns about the unit).
for p in /var/lib/dpkg/info/*.postinst; do "$p" configure || echo "VMTEST: $p failed"; done
@PAYLOAD@
@VERDICT@
VMTEST_EOF
chmod 755 /vmtest.sh
cat > /etc/systemd/system/vmtest.service <<'VMTEST_EOF'
[Unit]
DefaultDependencies=no
[Service]
Type=oneshot
ExecStart=/vmtest.sh
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
TTYReset=no
TTYVHangup=no
VMTEST_EOF
printf '[Manager]
DefaultStandardOutput=tty
DefaultStandardError=tty
' > /etc/systemd/system.conf
echo 5d1b1c0f8e6a4b7c9d2e3f4a5b6c7d8e > /etc/machine-id
printf 'NAME=sandbox-vm
ID=debian
' > /etc/os-release
exec /lib/systemd/systemd --unit=vmtest.service --log-level=notice --log-target=console"#;

/// What the systemd guest has of the host's systemd (Debian's `systemd` package, which
/// `cargo xtask setup` installs), with the libraries `ldd` finds for them.
const SYSTEMD_BINARIES: &[(&str, &str)] = &[
    ("/lib/systemd/systemd", "/lib/systemd/systemd"),
    ("/usr/bin/systemctl", "/usr/bin/systemctl"),
    ("/usr/bin/systemd-run", "/usr/bin/systemd-run"),
    ("/usr/bin/systemd-escape", "/usr/bin/systemd-escape"),
];

/// What a VM run ended with.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub guest_rc: Option<i32>,
    pub verdict: Option<bool>,
    /// Whether the watch killed the guest, and why.
    pub killed: Option<Killed>,
    pub panicked: bool,
    /// The panic was an `int3` oops at a patched instruction: QEMU's multi-threaded TCG
    /// sometimes shows a vCPU the breakpoint of a kernel text patch (static keys, BPF
    /// trampolines) without the patching state that explains it. Not a test result.
    pub tcg_text_poke: bool,
    /// The watchdog caught a hang whose stuck task was in the `int3` handler: the same
    /// emulator fault (a CPU sent back to a breakpoint already replaced), not a test result.
    pub int3_stall: bool,
    pub seconds: f64,
}

/// Why the watch killed a guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Killed {
    /// Past the job's timeout.
    Timeout,
    /// It never reached its init within [`BOOT_DEADLINE`]: the emulator, not a test result.
    BootHung,
}

impl Outcome {
    /// A job that never got a verdict (qemu could not start, say): a failure.
    fn not_run() -> Self {
        Self {
            guest_rc: None,
            verdict: None,
            killed: None,
            panicked: false,
            tcg_text_poke: false,
            int3_stall: false,
            seconds: 0.0,
        }
    }

    pub fn passed(&self) -> bool {
        self.guest_rc == Some(0)
            && self.verdict == Some(true)
            && self.killed.is_none()
            && !self.panicked
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            write!(f, "PASS ({:.0} s)", self.seconds)
        } else if self.killed == Some(Killed::BootHung) {
            write!(f, "FAIL: no init after {:.0} s", self.seconds)
        } else if self.killed == Some(Killed::Timeout) {
            write!(f, "FAIL: timed out after {:.0} s", self.seconds)
        } else if self.panicked {
            write!(f, "FAIL: guest kernel panic")
        } else {
            write!(
                f,
                "FAIL: guest exit {:?}, verdict {:?}",
                self.guest_rc, self.verdict
            )
        }
    }
}

fn initramfs(
    arts: &Artifacts,
    modules: &Path,
    (payload, watchdog): (&str, Duration),
    out: &Path,
    deb: Option<&Path>,
) -> anyhow::Result<()> {
    let systemd = deb.is_some();
    let mut c = Cpio::new();
    for d in [
        "/proc",
        "/sys",
        "/dev",
        "/tmp",
        "/run",
        "/root",
        "/etc",
        "/usr/bin",
        "/sbin",
        "/usr/sbin",
    ] {
        c.dir(d);
    }
    c.copy(&setup::busybox(), "/bin/busybox")?;
    // Kernel modules the tests need (loop, ext4), loaded by /init in this order.
    if let Ok(order) = std::fs::read_to_string(modules.join("order")) {
        c.dir("/lib");
        c.dir("/lib/sandbox-modules");
        for m in order.split_whitespace() {
            c.copy(
                &modules.join(format!("{m}.ko")),
                &format!("/lib/sandbox-modules/{m}.ko"),
            )?;
        }
        c.file("/lib/sandbox-modules/order", 0o644, order.as_bytes());
    }
    c.file(
        "/init",
        0o755,
        INIT.replace("@PAYLOAD@", payload)
            .replace("@VERDICT@", VERDICT)
            .replace("@WATCHDOG@", &watchdog.as_secs().to_string())
            .as_bytes(),
    );
    c.file("/watchdog", 0o755, WATCHDOG.as_bytes());
    c.file(
        "/etc/passwd",
        0o644,
        b"root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n",
    );
    c.file("/etc/group", 0o644, b"root:x:0:\nagent:x:1000:\n");
    let btrfs_tools: Vec<(PathBuf, String)> = ["mkfs.btrfs", "btrfs"]
        .iter()
        .filter_map(|t| setup::system_tool(t).map(|p| (p, format!("/usr/sbin/{t}"))))
        .collect();
    let mut bins: Vec<(&Path, &str)> = vec![
        (&arts.sandbox, "/usr/bin/sandbox"),
        (&arts.probe, "/usr/bin/sandbox-probe"),
        (&arts.kernel_tests, "/kernel-tests"),
        (&arts.fallback_tests, "/fallback-tests"),
        (&arts.systemd_tests, "/systemd-tests"),
        (&arts.bench, "/usr/bin/sandbox-bench"),
        (&arts.floor, "/usr/bin/sandbox-floor"),
    ];
    bins.extend(btrfs_tools.iter().map(|(h, g)| (h.as_path(), g.as_str())));
    // `SANDBOX_VM_EXTRA=HOST:GUEST,...`: more binaries in the guest, e.g. another build of
    // sandbox beside this one, to compare the two in one boot (TCG's speed drifts between
    // boots more than between two runs of one).
    let extra: Vec<(PathBuf, String)> = std::env::var("SANDBOX_VM_EXTRA")
        .unwrap_or_default()
        .split(',')
        .filter_map(|pair| pair.split_once(':'))
        .map(|(h, g)| (PathBuf::from(h), g.to_owned()))
        .collect();
    bins.extend(extra.iter().map(|(h, g)| (h.as_path(), g.as_str())));
    if systemd {
        c.dir("/lib/systemd");
        c.dir("/etc/systemd");
        c.dir("/etc/systemd/system");
        for (host, guest) in SYSTEMD_BINARIES {
            bins.push((Path::new(host), guest));
        }
    }
    let mut libs = std::collections::BTreeSet::new();
    for (host, guest) in bins {
        if !host.exists() {
            anyhow::ensure!(
                !systemd,
                "{} is missing (cargo xtask setup installs it)",
                host.display()
            );
            continue;
        }
        c.copy(host, guest)
            .with_context(|| format!("adding {}", host.display()))?;
        libs.extend(shared_libraries(host)?);
    }
    for lib in libs {
        let real = std::fs::canonicalize(&lib)?;
        c.copy(&real, &lib.display().to_string())?;
    }
    if let Some(deb) = deb {
        install_package(&mut c, deb, &out.with_extension("deb.d"))?;
    }
    c.finish(out)?;
    Ok(())
}

/// Adds every file below `dir` to the initramfs at its path relative to `root`.
fn walk(c: &mut Cpio, root: &Path, dir: &Path) -> anyhow::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for e in entries {
        let path = e.path();
        let guest = format!("/{}", path.strip_prefix(root)?.display());
        if e.file_type()?.is_dir() {
            c.dir(&guest);
            walk(c, root, &path)?;
        } else {
            c.copy(&path, &guest)?;
        }
    }
    Ok(())
}

/// Puts the Debian package's files where `dpkg -i` puts them (its binary over the one
/// already there: the same file) and its postinst as `/var/lib/dpkg/info/PKG.postinst`,
/// which the systemd guest runs once systemd is up. (No dpkg database: nothing in the
/// guest asks dpkg.)
fn install_package(c: &mut Cpio, deb: &Path, scratch: &Path) -> anyhow::Result<()> {
    if scratch.exists() {
        std::fs::remove_dir_all(scratch)?;
    }
    std::fs::create_dir_all(scratch)?;
    let (data, control) = (scratch.join("data"), scratch.join("control"));
    for (flag, dir) in [("-x", &data), ("-e", &control)] {
        let st = Command::new("dpkg-deb")
            .arg(flag)
            .arg(deb)
            .arg(dir)
            .status()?;
        anyhow::ensure!(st.success(), "dpkg-deb {flag} {} failed", deb.display());
    }
    walk(c, &data, &data)?;
    c.copy(
        &control.join("postinst"),
        &format!("/var/lib/dpkg/info/{}.postinst", crate::deb::PACKAGE),
    )?;
    Ok(())
}

/// The shared libraries (and ELF interpreter) `ldd` lists for a binary.
fn shared_libraries(bin: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let out = Command::new("ldd").arg(bin).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .filter(|p| p.exists())
        .collect())
}

fn accel() -> Vec<String> {
    let want_kvm = std::env::var("SANDBOX_VM_ACCEL").map_or(true, |v| v != "tcg");
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let hw = cpu
        .lines()
        .any(|l| l.starts_with("flags") && (l.contains(" vmx") || l.contains(" svm")));
    if want_kvm && hw && Path::new("/dev/kvm").exists() {
        ["-accel", "kvm", "-cpu", "host"].map(String::from).to_vec()
    } else {
        // The paravirtual KVM of these machines cannot run a stock kernel: emulate. The
        // plain x86-64 model, not `max`: three `sandbox run --as-root -- true` in a row in
        // the 6.1 guest took 17.6 s with it against 20-22 s with `max` (AVX-512 state and
        // the features the guest then uses all cost emulation), and the 6.1 suite 0.82x.
        // `SANDBOX_VM_CPU` picks another.
        let model = std::env::var("SANDBOX_VM_CPU").unwrap_or_else(|_| "qemu64".to_owned());
        // One host thread for all of a guest's CPUs. With one thread per CPU (`multi`),
        // a CPU kept running the `int3` that another CPU's `text_poke` had already
        // replaced (attaching or detaching a BPF trampoline patches the hook's first
        // instruction): `kprobe_int3_handler` finds the instruction restored and sends
        // the CPU back to it, forever (caught by the watchdog in the 6.1 guest: two
        // loader threads verifying programs, spinning at `bpf_lsm_locked_down+0`, an
        // RCU Tasks grace period held up for minutes, every later detach waiting), or
        // the `int3` oopses. Guests run two at a time on this machine's two cores, so a
        // guest had no core per CPU anyway.
        vec![
            "-accel".into(),
            "tcg,thread=single".into(),
            "-cpu".into(),
            model,
        ]
    }
}

/// The guest's LSM list, with and without BPF LSM.
const LSM: &str = "lockdown,capability,landlock,yama,bpf";
const LSM_NO_BPF: &str = "lockdown,capability,landlock,yama";

/// Boots `kernel` with `payload` as the guest's job; streams the payload's output.
/// `bpf_lsm: false` boots without BPF LSM (a host where only the fallback can work).
pub fn boot(
    kernel: &Kernel,
    arts: &Artifacts,
    payload: &str,
    timeout: Duration,
    tag: &str,
    bpf_lsm: bool,
) -> anyhow::Result<Outcome> {
    boot_as(kernel, arts, payload, timeout, (tag, bpf_lsm, None), "")
}

/// [`boot`], with every console line shown prefixed by `prefix` (guests running side by
/// side); `deb`: a systemd guest with this package installed.
fn boot_as(
    kernel: &Kernel,
    arts: &Artifacts,
    payload: &str,
    timeout: Duration,
    (tag, bpf_lsm, deb): (&str, bool, Option<&Path>),
    prefix: &str,
) -> anyhow::Result<Outcome> {
    let lsm = if bpf_lsm { LSM } else { LSM_NO_BPF };
    let dir = target_dir()?.join("vmtest");
    std::fs::create_dir_all(&dir)?;
    let initrd = dir.join(format!("{tag}-{}.cpio", kernel.version));
    // The guest's own deadline comes first: what hangs shows itself before the kill.
    let watchdog = timeout
        .saturating_sub(WATCHDOG_MARGIN)
        .max(Duration::from_mins(1));
    initramfs(arts, &kernel.modules, (payload, watchdog), &initrd, deb)?;
    let log_path = dir.join(format!("{tag}-{}.log", kernel.version));
    let mut log = std::fs::File::create(&log_path)?;
    let start = Instant::now();
    let mut child = qemu(&kernel.vmlinuz, &initrd, lsm)
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let seen = watch(&mut child, &mut log, start, timeout, prefix)?;
    let status = child.wait()?;
    let _ = std::fs::remove_file(&initrd);
    // isa-debug-exit: qemu's status is (guest << 1) | 1.
    let guest_rc = status.code().filter(|c| c % 2 == 1).map(|c| c >> 1);
    Ok(Outcome {
        guest_rc,
        verdict: seen.verdict,
        killed: seen.killed,
        panicked: seen.panicked,
        tcg_text_poke: seen.tcg_text_poke,
        int3_stall: seen.int3_stall,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// How long before the host's timeout the guest's watchdog ([`WATCHDOG`]) shows its tasks
/// and stops the test runners.
const WATCHDOG_MARGIN: Duration = Duration::from_mins(3);

/// How long an RCU Tasks grace period (what detaching a trampoline's last program waits
/// for) may last before the guest's kernel names the tasks holding it up, with their
/// stacks: 2 minutes at Debian's `HZ=250` (the kernel's default is 10), so that the
/// watchdog sees it within a shard's time.
const RCU_TASK_STALL_JIFFIES: u32 = 250 * 120;

/// The qemu command line of one guest boot.
fn qemu(vmlinuz: &Path, initrd: &Path, lsm: &str) -> Command {
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-nodefaults", "-machine", "pc"])
        .args(accel())
        .arg("-smp")
        .arg(std::env::var("SANDBOX_VM_CPUS").unwrap_or_else(|_| "2".to_owned()))
        .args(["-m", "2G", "-kernel"])
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initrd)
        // preempt=full: Debian's 6.x kernels default to voluntary preemption; the tests
        // run where a BPF-LSM program can be preempted mid-decision (as on 7.x, always),
        // so decisions in flight on one CPU each hold working memory of their own.
        .arg("-append")
        .arg(format!(
            "console=ttyS0 lsm={lsm} preempt=full panic=-1 oops=panic quiet \
             rcupdate.rcu_task_stall_timeout={RCU_TASK_STALL_JIFFIES}"
        ))
        .args([
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "stdio",
            "-nic",
            "none",
            "-no-reboot",
        ])
        .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// What the guest's console said.
#[derive(Default)]
struct Seen {
    verdict: Option<bool>,
    panicked: bool,
    tcg_text_poke: bool,
    int3_stall: bool,
    killed: Option<Killed>,
}

/// How long a guest may take to reach its init's first line (`VMTEST: kernel ...`): a
/// boot takes 6-10 s of guest uptime, a minute on a host busy with other guests. Past
/// this, the emulator is stuck (seen once under TCG: 7.3 printed nothing for 15 minutes),
/// not the code under test.
const BOOT_DEADLINE: Duration = Duration::from_mins(3);

/// Streams the guest's console into `log` (and the payload's part to stdout) until qemu
/// exits or `timeout` passes (then kills it).
fn watch(
    child: &mut std::process::Child,
    log: &mut std::fs::File,
    start: Instant,
    timeout: Duration,
    prefix: &str,
) -> anyhow::Result<Seen> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow!("no qemu stdout"))?;
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).split(b'\n').map_while(Result::ok) {
            if tx
                .send(
                    String::from_utf8_lossy(&line)
                        .trim_end_matches('\r')
                        .to_owned(),
                )
                .is_err()
            {
                break;
            }
        }
    });
    let mut inside = false;
    let mut booted = false;
    let mut seen = Seen::default();
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                writeln!(log, "{:8.3} {line}", start.elapsed().as_secs_f64())?;
                if line.contains("Kernel panic") {
                    seen.panicked = true;
                }
                if line.contains("Oops: int3") {
                    seen.tcg_text_poke = true;
                }
                // The watchdog's copy of a hang report whose stuck task is in the `int3`
                // handler: the same emulator fault, caught as a hang instead of an oops.
                if line.starts_with("VMTEST-KLOG ")
                    && (line.contains("kprobe_int3_handler") || line.contains("exc_int3"))
                {
                    seen.int3_stall = true;
                }
                if line.starts_with("VMTEST-RESULT: ") {
                    seen.verdict = Some(line.ends_with("PASS"));
                }
                if line == "VMTEST-END" {
                    inside = false;
                }
                if line.starts_with("VMTEST: ") {
                    booted = true;
                }
                if inside || line.starts_with("VMTEST: ") || seen.panicked {
                    println!("{prefix}{line}");
                }
                if line == "VMTEST-BEGIN" {
                    inside = true;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if !booted && start.elapsed() > BOOT_DEADLINE {
                    seen.killed = Some(Killed::BootHung);
                    let _ = child.kill();
                    break;
                }
                if start.elapsed() > timeout {
                    seen.killed = Some(Killed::Timeout);
                    let _ = child.kill();
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = reader.join();
    Ok(seen)
}

/// One guest boot of `cargo xtask test`.
pub struct Job<'a> {
    pub kernel: &'a Kernel,
    /// What the summary calls it, e.g. `6.12.95+deb12-amd64 (1/2)`.
    pub name: String,
    pub what: What,
}

pub enum What {
    /// These kernel tests (exact names), with BPF LSM.
    Kernel { tests: Vec<String>, shard: usize },
    /// The fallback tests (`tests/tests/fallback.rs`) in a guest booted without BPF LSM:
    /// the per-ABI behaviour of an older Landlock (6.1: ABI 2).
    Fallback,
    /// The systemd tests (`tests/tests/systemd.rs`) in a guest whose PID 1 is systemd,
    /// with this Debian package installed.
    Systemd { deb: PathBuf },
}

/// The kernel tests' names (the host can list the guest's test binary), those containing
/// `filter` (or one of its `|`-separated parts) when one is given.
pub fn kernel_tests(arts: &Artifacts, filter: Option<&str>) -> anyhow::Result<Vec<String>> {
    let out = Command::new(&arts.kernel_tests)
        .args(["--list", "--include-ignored"])
        .output()
        .context("listing the kernel tests")?;
    anyhow::ensure!(out.status.success(), "listing the kernel tests failed");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_suffix(": test"))
        .filter(|n| filter.is_none_or(|f| f.split('|').any(|part| n.contains(part))))
        .map(str::to_owned)
        .collect())
}

/// Splits `tests` into `n` shards of about equal size, neighbours apart (tests of one
/// module tend to cost alike).
pub fn shards(tests: &[String], n: usize) -> Vec<Vec<String>> {
    let n = n.clamp(1, tests.len().max(1));
    let mut out = vec![Vec::new(); n];
    for (i, t) in tests.iter().enumerate() {
        out[i % n].push(t.clone());
    }
    out
}

/// The guest's test runner's options: one test at a time (each starts sandbox), every
/// test's time after its result (libtest's `--report-time`, unstable: `RUSTC_BOOTSTRAP`
/// lets the stable test binary take it), so the slow ones show in the CI log.
const RUNNER: &str = "SANDBOX_BIN=/usr/bin/sandbox SANDBOX_PROBE=/usr/bin/sandbox-probe \
                      RUSTC_BOOTSTRAP=1";
const RUNNER_ARGS: &str = "--include-ignored --test-threads=1 -Z unstable-options --report-time";

impl Job<'_> {
    /// The job's guest payload, timeout, log tag and whether it boots with BPF LSM.
    fn spec(&self) -> (String, Duration, String, bool) {
        match &self.what {
            What::Kernel { tests, shard } => (
                format!(
                    "{RUNNER} /kernel-tests {RUNNER_ARGS} --exact {}",
                    tests.join(" ")
                ),
                // A shard takes 5-9 minutes on session 37's machine and 12-17 on session
                // 38's (the same suite 1.5 times as slow), with a fault's retries (each its
                // own boot) more; a hang shows itself at the watchdog, 3 minutes before.
                Duration::from_mins(30),
                format!("tests{shard}"),
                true,
            ),
            What::Fallback => (
                format!("{RUNNER} /fallback-tests {RUNNER_ARGS}"),
                Duration::from_mins(10),
                "fallback".to_owned(),
                false,
            ),
            What::Systemd { .. } => (
                SYSTEMD_PAYLOAD.replace(
                    "@PAYLOAD@",
                    &format!("{RUNNER} /systemd-tests {RUNNER_ARGS}"),
                ),
                Duration::from_mins(8),
                "systemd".to_owned(),
                true,
            ),
        }
    }

    /// Boots the guest and runs the job; an `int3` oops under TCG (an emulator fault, see
    /// [`Outcome::tcg_text_poke`]), a hang whose stuck task is in the `int3` handler
    /// ([`Outcome::int3_stall`]; any other hang may be ours and is not run again) or a
    /// boot that never reached init
    /// ([`Killed::BootHung`]) gets another boot (at most four more), whose result counts;
    /// a kernel job's runs only the tests that had not passed.
    pub fn run(&self, arts: &Artifacts) -> anyhow::Result<Outcome> {
        let prefix = format!("[{}] ", self.name);
        let (payload, timeout, tag, bpf_lsm) = self.spec();
        let deb = match &self.what {
            What::Systemd { deb } => Some(deb.as_path()),
            _ => None,
        };
        let boot = |payload: &str| {
            boot_as(
                self.kernel,
                arts,
                payload,
                timeout,
                (&tag, bpf_lsm, deb),
                &prefix,
            )
        };
        // Up to four more boots: one CI run saw three such faults, two of them in one
        // shard (7.3, session 22). A kernel job's next boot runs only the tests that had
        // not passed yet (each test's `ok` is its own verdict); the others run whole again.
        // The last boot's result counts.
        let mut o = boot(&payload)?;
        let mut left: Vec<String> = match &self.what {
            What::Kernel { tests, .. } => tests.clone(),
            _ => Vec::new(),
        };
        let mut payload = payload;
        let log = target_dir()?
            .join("vmtest")
            .join(format!("{tag}-{}.log", self.kernel.version));
        for retry in 1..=4 {
            let fault = (o.panicked && o.tcg_text_poke)
                || o.int3_stall
                || o.killed == Some(Killed::BootHung);
            if fault {
                // The next boot writes the same log: the fault's is kept beside it (the
                // oops's test and instruction, for whoever looks into the emulator).
                let kept = log.with_extension(format!("fault{retry}.log"));
                if std::fs::copy(&log, &kept).is_ok() {
                    println!(
                        "==> {}: the fault's console log: {}",
                        self.name,
                        kept.display()
                    );
                }
            }
            if let What::Kernel { .. } = &self.what
                && fault
            {
                let passed = passed_tests(&log);
                left.retain(|t| !passed.contains(t));
                println!(
                    "==> {}: {} tests passed before the fault, {} to run",
                    self.name,
                    passed.len(),
                    left.len()
                );
                // None left (the fault came after the last test): a filter that matches
                // no test, so that the boot's verdict is its own.
                let names = if left.is_empty() {
                    "no-test-is-left".to_owned()
                } else {
                    left.join(" ")
                };
                payload = format!("{RUNNER} /kernel-tests {RUNNER_ARGS} --exact {names}");
            }
            if o.panicked && o.tcg_text_poke {
                println!(
                    "==> {}: {o} (int3 oops under TCG); running again",
                    self.name
                );
            } else if o.int3_stall {
                println!(
                    "==> {}: {o} (a CPU stuck at a replaced int3 under TCG); running again",
                    self.name
                );
            } else if o.killed == Some(Killed::BootHung) {
                println!(
                    "==> {}: no init after {} s (the emulator is stuck); booting again",
                    self.name,
                    BOOT_DEADLINE.as_secs()
                );
            } else {
                break;
            }
            o = boot(&payload)?;
        }
        if let What::Kernel { .. } = &self.what
            && !o.passed()
            && let Some(t) = running_test(&log)
        {
            println!("==> {}: the test running at the end: {t}", self.name);
        }
        Ok(o)
    }
}

/// The test a guest's console log shows started and not ended (libtest prints
/// `test NAME ... ` first and the verdict when the test ends, on the same line unless the
/// test wrote to the console meanwhile).
fn running_test(log: &Path) -> Option<String> {
    let mut running = None;
    for l in std::fs::read_to_string(log).unwrap_or_default().lines() {
        // `  12.345 LINE`: the host's time stamp first.
        let l = l.trim_start().split_once(' ').map_or("", |(_, l)| l);
        if let Some((name, rest)) = l.strip_prefix("test ").and_then(|r| r.split_once(" ... ")) {
            let ended = ["ok", "FAILED", "ignored"]
                .iter()
                .any(|v| rest.starts_with(v));
            running = (!ended).then(|| name.trim().to_owned());
        } else if l.starts_with("ok <")
            || l.starts_with("FAILED")
            || l.starts_with("ok") && l.len() == 2
        {
            running = None;
        }
    }
    running
}

/// The tests a guest's console log says passed (`test NAME ... ok`, libtest's lines).
fn passed_tests(log: &Path) -> std::collections::HashSet<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once("test ")?;
            let (name, verdict) = rest.split_once(" ... ")?;
            verdict.starts_with("ok").then(|| name.trim().to_owned())
        })
        .collect()
}

/// Runs `jobs` on `workers` guests at a time (each guest is mostly one busy vCPU: the
/// tests run one after another), longest first; results in the order given.
pub fn run_all(jobs: &[Job<'_>], arts: &Artifacts, workers: usize) -> Vec<(String, Outcome)> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results = std::sync::Mutex::new(vec![None; jobs.len()]);
    std::thread::scope(|s| {
        for _ in 0..workers.clamp(1, jobs.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    println!("==> {}: started", job.name);
                    let o = job.run(arts).unwrap_or_else(|e| {
                        println!("==> {}: could not run: {e:#}", job.name);
                        Outcome::not_run()
                    });
                    println!("==> {}: {o}", job.name);
                    results.lock().expect("results")[i] = Some(o);
                }
            });
        }
    });
    jobs.iter()
        .zip(results.into_inner().expect("results"))
        .map(|(j, o)| (j.name.clone(), o.unwrap_or_else(Outcome::not_run)))
        .collect()
}

/// Runs one command in the guest (words are quoted for the guest shell).
pub fn run_command(kernel: &Kernel, arts: &Artifacts, words: &[String]) -> anyhow::Result<i32> {
    let quoted: Vec<String> = words
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect();
    let o = boot(
        kernel,
        arts,
        &quoted.join(" "),
        Duration::from_mins(10),
        "vm",
        std::env::var("SANDBOX_VM_LSM").map_or(true, |v| v != "no-bpf"),
    )?;
    let logs = target_dir()?.join("vmtest");
    println!(
        "==> guest exit status: {}",
        o.guest_rc.map_or_else(
            || format!("none (see {})", logs.display()),
            |c| c.to_string()
        )
    );
    Ok(o.guest_rc.unwrap_or(1))
}

pub fn bench(kernel: &Kernel, arts: &Artifacts) -> anyhow::Result<bool> {
    let o = boot(
        kernel,
        arts,
        "/usr/bin/sandbox-bench",
        Duration::from_mins(30),
        "bench",
        true,
    )?;
    println!("==> bench: {o}");
    Ok(o.passed())
}

#[cfg(test)]
mod tests {
    /// A console log cut by an emulator fault: the tests before it passed, the one it hit
    /// did not (its line ends in the oops), a failed one did not.
    #[test]
    fn passed_tests_are_read_from_a_console_log() {
        let log = std::env::temp_dir().join(format!("xtask-console-{}.log", std::process::id()));
        std::fs::write(
            &log,
            "  13.648 test boundary::a ... ok <6.309s>\n\
             \x20 21.968 test exec::b ... FAILED <1.0s>\n\
             \x20 37.316 test files::c ... ok <15.329s>\n\
             test integrity::d ... [  129.084671] Oops: int3: 0000 [#1] PREEMPT SMP NOPTI\n\
             running 4 tests\n",
        )
        .unwrap();
        let passed = super::passed_tests(&log);
        std::fs::remove_file(&log).unwrap();
        let mut passed: Vec<_> = passed.into_iter().collect();
        passed.sort();
        assert_eq!(passed, ["boundary::a", "files::c"]);
    }
}
