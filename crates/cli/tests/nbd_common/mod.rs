//! What the tests of both NBD front ends share (`stripeguard serve` in nbd_clients.rs, the nbdkit
//! plugin in nbdkit_plugin.rs): finding the clients, making an array, a running server and how
//! to stop it, fio's verify jobs, and damaging members by hand at FORMAT.md's offsets.
#![allow(dead_code)] // each test file uses its own subset

use crate::common::{ok, sg};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Print why a test does not run, and return from it.
macro_rules! need {
    ($($tool:expr),+) => {
        for t in [$($tool),+] {
            if !$crate::nbd_common::have(t) {
                eprintln!("skipping: {t} is not installed (scripts/install-deps installs it)");
                return;
            }
        }
    };
}

pub const MEMBERS: [&str; 8] = ["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"];

pub fn create(dir: &Path, scheme: &str, size: &str) {
    let mut args = vec!["create"];
    args.extend(MEMBERS);
    args.extend(["--size", size, "--scheme", scheme, "--chunk", "64K"]);
    ok(&sg(&args, dir));
}

pub struct Served {
    pub child: Child,
    pub uri: String,
    pub stderr: PathBuf,
}

impl Served {
    /// SIGTERM, and the server's exit status and stderr.
    pub fn stop(mut self) -> (std::process::ExitStatus, String, String) {
        let pid = i32::try_from(self.child.id()).unwrap();
        let pid = rustix::process::Pid::from_raw(pid).expect("a child's pid is not 0");
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        let out = wait_timeout(&mut self.child, Duration::from_secs(60));
        let mut stdout = String::new();
        if let Some(mut o) = self.child.stdout.take() {
            use std::io::Read;
            let _ = o.read_to_string(&mut stdout);
        }
        (
            out,
            stdout,
            std::fs::read_to_string(&self.stderr).unwrap_or_default(),
        )
    }

    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `stripeguard serve ARGS... --socket DIR/sg.sock` in `dir`, its stderr in DIR/serve.err,
/// returned once it listens.
pub fn serve_with(dir: &Path, args: &[&str]) -> Served {
    let sock = dir.join("sg.sock");
    let stderr = dir.join("serve.err");
    let child = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .arg("serve")
        .args(args)
        .arg("--socket")
        .arg(&sock)
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("start the server");
    let t = Instant::now();
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the server did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Served {
        child,
        uri: format!("nbd+unix:///stripeguard?socket={}", sock.display()),
        stderr,
    }
}

pub fn wait_timeout(c: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = c.try_wait().expect("wait") {
            return s;
        }
        assert!(
            t.elapsed() < limit,
            "the server did not stop within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("run a client");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// fio's write-and-verify job, and its verify-only twin.
pub fn fio_job(uri: &str, verify_only: bool) -> Command {
    let mut c = Command::new("fio");
    c.args([
        "--name=sg",
        "--ioengine=nbd",
        &format!("--uri={uri}"),
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=32",
        "--numjobs=3",
        "--size=8m",
        "--offset_increment=8m",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--randseed=42",
        "--group_reporting",
    ]);
    if verify_only {
        c.arg("--verify_only=1");
    }
    c
}

/// Damage a stopped array by hand, at the offsets FORMAT.md gives: flip a byte inside data
/// chunks of several stripes of member 1 and member 4 (different stripes, so each stripe has
/// one wrong unit), and bit-rot a unit of member 6 with the injector.
pub fn damage(dir: &Path) {
    use std::os::unix::fs::FileExt;
    // FORMAT.md §2: members under 256 MiB have their data area at 128 KiB; a unit is a 64 KiB
    // chunk and its 512-byte appendix sector.
    let data_at = 128 * 1024u64;
    let unit = 64 * 1024 + 512u64;
    for (member, units) in [("m1", [0u64, 7, 20]), ("m4", [3, 11, 30])] {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.join(member))
            .unwrap();
        for u in units {
            let at = data_at + u * unit + 1000;
            let mut b = [0u8; 1];
            f.read_at(&mut b, at).unwrap();
            b[0] ^= 0x10;
            f.write_at(&b, at).unwrap();
        }
    }
    ok(&sg(
        &[
            "inject", "m6", "--fault", "bit-rot", "--chunk", "5", "--seed", "1",
        ],
        dir,
    ));
}

/// Debian's interpreter, which python3-libnbd installs into (a pyenv or venv python first on
/// PATH would not see it).
pub fn python() -> &'static str {
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// Whether Debian's python has the libnbd bindings (`python3-libnbd`); says why not when not
/// (the test then skips).
pub fn have_libnbd() -> bool {
    let ok = Command::new(python())
        .args(["-c", "import nbd"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipping: python3-libnbd is not installed (scripts/install-deps installs it)");
    }
    ok
}
