//! What a test sets up outside the sandbox and takes down when it ends, panic or not.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// Mounts a fresh tmpfs on `dir`; unmounted when the guard goes.
pub struct Tmpfs(std::ffi::CString);

impl Tmpfs {
    pub fn mount(dir: &Path) -> Self {
        let m = std::ffi::CString::new(dir.display().to_string()).unwrap();
        // SAFETY: plain mount(2) of a fresh tmpfs, with NUL-terminated strings that outlive
        // the call.
        let r = unsafe {
            libc::mount(
                c"late".as_ptr(),
                m.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "mount tmpfs on {}", dir.display());
        Self(m)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // SAFETY: plain umount(2) of the path we mounted.
        unsafe { libc::umount(self.0.as_ptr()) };
    }
}

/// Bind-mounts `src` on `dst`; unmounted when the guard goes.
pub struct Bind(std::ffi::CString);

impl Bind {
    pub fn mount(src: &Path, dst: &Path) -> Self {
        let s = std::ffi::CString::new(src.display().to_string()).unwrap();
        let d = std::ffi::CString::new(dst.display().to_string()).unwrap();
        // SAFETY: plain mount(2) with MS_BIND and NUL-terminated strings that outlive it.
        let r = unsafe {
            libc::mount(
                s.as_ptr(),
                d.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        assert_eq!(r, 0, "bind {} on {}", src.display(), dst.display());
        Self(d)
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        // SAFETY: plain umount(2) of the path we mounted.
        unsafe { libc::umount(self.0.as_ptr()) };
    }
}

/// /etc/hosts, /etc/nsswitch.conf (files only: libc asks no DNS server) and
/// /etc/resolv.conf for one test; the old files come back when it ends, panic or not.
pub struct Resolution(Vec<(&'static str, Option<String>)>);

impl Resolution {
    pub fn set(hosts: &str, nameserver: &str) -> Self {
        let files = ["/etc/hosts", "/etc/nsswitch.conf", "/etc/resolv.conf"];
        let saved = files
            .iter()
            .map(|f| (*f, std::fs::read_to_string(f).ok()))
            .collect();
        std::fs::write("/etc/hosts", hosts).unwrap();
        std::fs::write("/etc/nsswitch.conf", "hosts: files\n").unwrap();
        std::fs::write("/etc/resolv.conf", format!("nameserver {nameserver}\n")).unwrap();
        Self(saved)
    }
}

impl Drop for Resolution {
    fn drop(&mut self) {
        for (f, text) in &self.0 {
            match text {
                Some(t) => drop(std::fs::write(f, t)),
                None => drop(std::fs::remove_file(f)),
            }
        }
    }
}

/// A DNS server on 127.0.0.1:53 (outside the sandbox: the loader asks it) whose answer for
/// every A question is `answers[n]` for the n-th question (the last one from then on).
/// AAAA questions get an empty answer.
pub struct DnsServer {
    stop: Arc<AtomicBool>,
    /// A questions answered so far.
    pub questions: Arc<AtomicUsize>,
}

impl DnsServer {
    pub fn start(answers: Vec<([u8; 4], u32)>) -> Self {
        let sock = std::net::UdpSocket::bind("127.0.0.1:53").expect("bind 127.0.0.1:53");
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let questions = Arc::new(AtomicUsize::new(0));
        let (stopped, asked) = (stop.clone(), questions.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !stopped.load(Ordering::Relaxed) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                // Header, then the question: labels, type, class.
                let mut end = 12;
                while end < n && buf[end] != 0 {
                    end += 1 + usize::from(buf[end]);
                }
                let qtype = u16::from_be_bytes([buf[end + 1], buf[end + 2]]);
                let question = &buf[12..end + 5];
                let mut m = buf[..2].to_vec();
                m.extend_from_slice(&[0x81, 0x80, 0, 1, 0, 0, 0, 0, 0, 0]);
                m.extend_from_slice(question);
                if qtype == 1 {
                    let i = asked.fetch_add(1, Ordering::Relaxed).min(answers.len() - 1);
                    let (addr, ttl) = answers[i];
                    m[7] = 1;
                    m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
                    m.extend_from_slice(&ttl.to_be_bytes());
                    m.extend_from_slice(&[0, 4]);
                    m.extend_from_slice(&addr);
                }
                let _ = sock.send_to(&m, from);
            }
        });
        Self { stop, questions }
    }

    /// A questions answered so far.
    pub fn questions(&self) -> usize {
        self.questions.load(Ordering::Relaxed)
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// An address of this host: `ADDR/LEN` on `lo` (`ip addr add`); deleted when the guard
/// goes.
pub struct HostAddr(String);

impl HostAddr {
    pub fn add(addr: &str, len: u8) -> Self {
        let a = Self(format!("{addr}/{len}"));
        let ok = std::process::Command::new("ip")
            .args(["addr", "add", &a.0, "dev", "lo"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "ip addr add {} dev lo", a.0);
        a
    }
}

impl Drop for HostAddr {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["addr", "del", &self.0, "dev", "lo"])
            .status();
    }
}

/// Some `sandbox run` has its command in its cgroup.
pub fn sandbox_runs() -> bool {
    std::fs::read_dir("/sys/fs/cgroup/sandbox").is_ok_and(|dir| {
        dir.flatten().any(|e| {
            std::fs::read_to_string(e.path().join("cgroup.procs"))
                .is_ok_and(|s| !s.trim().is_empty())
        })
    })
}

/// Waits (up to 2 min) until some `sandbox run` has its command in its cgroup. The bound
/// is far above a start-up (mostly BPF verification), which took over 30 s under TCG on
/// 7.3 with two guests sharing a slow two-core host.
pub fn wait_for_sandbox_run() {
    let deadline = std::time::Instant::now() + Duration::from_mins(2);
    while !sandbox_runs() {
        assert!(
            std::time::Instant::now() < deadline,
            "the command never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `sandbox attach --cgroup CGROUP --policy POLICY --audit-log AUDIT`, its stderr read line
/// by line.
pub struct Attached {
    pub child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Attached {
    pub fn start(cgroup: &str, policy: &Path, audit: &Path) -> Self {
        Self::start_with(cgroup, policy, audit, &[], &[])
    }

    /// [`Attached::start`] with these environment variables set and more arguments.
    pub fn start_with(
        cgroup: &str,
        policy: &Path,
        audit: &Path,
        env: &[(&str, &Path)],
        args: &[&str],
    ) -> Self {
        use std::io::BufRead as _;
        let mut child = std::process::Command::new(crate::bins().sandbox)
            .arg("attach")
            .arg("--cgroup")
            .arg(cgroup)
            .arg("--policy")
            .arg(policy)
            .arg("--audit-log")
            .arg(audit)
            .args(args)
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                let _ = tx.send(line);
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line of stderr that contains `want` (waits up to two minutes).
    pub fn wait_line(&mut self, want: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_mins(2);
        while std::time::Instant::now() < deadline {
            if let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                self.seen.push(l.clone());
                if l.contains(want) {
                    return l;
                }
            }
        }
        panic!("no '{want}' from sandbox attach:\n{}", self.seen.join("\n"));
    }

    /// Sends `sig` to sandbox.
    pub fn signal(&self, sig: i32) {
        crate::signal(self.child.id(), sig);
    }
}

/// A disk file system on a loop device: an ext2-format image (busybox `mke2fs`) mounted
/// by the ext4 driver on `dir`; unmounted when the guard goes. Unlike tmpfs, its dentries
/// come and go: a fresh mount has none cached.
pub struct DiskFs {
    image: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl DiskFs {
    /// Makes a `mib` MiB image at `image` and mounts it on `dir`.
    pub fn mount(image: &Path, dir: &Path, mib: u64) -> Self {
        let f = std::fs::File::create(image).unwrap();
        f.set_len(mib << 20).unwrap();
        drop(f);
        // -F: busybox's mke2fs wants a block device unless forced.
        let st = std::process::Command::new("mke2fs")
            .args(["-q", "-F"])
            .arg(image)
            .status()
            .expect("mke2fs");
        assert!(st.success(), "mke2fs {}", image.display());
        let fs = Self {
            image: image.to_path_buf(),
            dir: dir.to_path_buf(),
        };
        fs.attach();
        fs
    }

    fn attach(&self) {
        let st = std::process::Command::new("mount")
            .args(["-t", "ext4", "-o", "loop"])
            .arg(&self.image)
            .arg(&self.dir)
            .status()
            .expect("mount");
        assert!(
            st.success(),
            "mount -o loop {} (are the loop and ext4 modules loaded?)",
            self.image.display()
        );
    }

    fn detach(&self) {
        let _ = std::process::Command::new("umount").arg(&self.dir).status();
    }

    /// Unmounts the file system's root (mounts of its directories elsewhere stay).
    pub fn unmount_root(&self) {
        let st = std::process::Command::new("umount")
            .arg(&self.dir)
            .status()
            .expect("umount");
        assert!(st.success(), "umount {}", self.dir.display());
    }

    /// Unmounts and mounts again: nothing of the file system is cached any more.
    pub fn remount(&self) {
        self.detach();
        self.attach();
    }
}

impl Drop for DiskFs {
    fn drop(&mut self) {
        self.detach();
    }
}
