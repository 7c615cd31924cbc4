//! Attacks on `stripeguard send` / `recv` (FORMAT.md §5) reproduced end to end with the binary:
//! an unprivileged user racing a root receiver with symlink swaps (S1), a man in the middle of a
//! sealed TCP session (S5), the order of the receiver's durability calls read from a syscall
//! trace (B11), and SIGKILL at random points of a transfer. Every wait is bounded: a hang is a
//! failure (children are killed), never a stuck test run.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;

use common::err_of;
use common::xfer::{frame, free_port, have, is_root, scratch, sg_bin};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A run of a child in its own process group, with its output.
struct Ran {
    /// None: still running at the deadline, so the whole group was killed.
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    secs: f64,
}

impl Ran {
    fn timed_out(&self) -> bool {
        self.code.is_none() && self.signal.is_none()
    }
    fn json(&self) -> serde_json::Value {
        serde_json::from_str(self.stdout.lines().last().unwrap_or("{}")).unwrap_or_default()
    }
}

/// Start `cmd` in a process group of its own (so that it and everything it starts, such as the
/// receiver under `--rsh`, can be killed at once), its output read by threads.
struct Spawned {
    child: Child,
    out: std::thread::JoinHandle<String>,
    err: std::thread::JoinHandle<String>,
    t0: Instant,
}

fn spawn(cmd: &mut Command) -> Spawned {
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut o = child.stdout.take().unwrap();
    let mut e = child.stderr.take().unwrap();
    Spawned {
        child,
        out: std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = o.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        }),
        err: std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = e.read_to_end(&mut s);
            String::from_utf8_lossy(&s).into_owned()
        }),
        t0: Instant::now(),
    }
}

/// A child's pid as rustix's.
fn pid_of(pid: u32) -> rustix::process::Pid {
    rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).expect("a child's pid is not 0")
}

fn kill_group(pgid: u32) {
    let _ = rustix::process::kill_process_group(pid_of(pgid), rustix::process::Signal::KILL);
}

/// Wait until no process of the group is left (bounded).
fn group_gone(pgid: u32, secs: u64) -> bool {
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        if rustix::process::test_kill_process_group(pid_of(pgid)).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

impl Spawned {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait at most `secs`; past that the whole group is killed. The group is killed in any
    /// case at the end, so nothing it started outlives the run.
    fn finish(mut self, secs: f64) -> Ran {
        let until = self.t0 + Duration::from_secs_f64(secs);
        let mut status = None;
        while Instant::now() < until {
            if let Some(s) = self.child.try_wait().unwrap() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let elapsed = self.t0.elapsed().as_secs_f64();
        let pgid = self.child.id();
        kill_group(pgid);
        if status.is_none() {
            let _ = self.child.wait();
        }
        group_gone(pgid, 10);
        Ran {
            code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            stdout: self.out.join().unwrap_or_default(),
            stderr: self.err.join().unwrap_or_default(),
            secs: elapsed,
        }
    }
}

fn run_bounded(cmd: &mut Command, secs: f64) -> Ran {
    spawn(cmd).finish(secs)
}

fn send_cmd(src: &Path, rsh: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(sg_bin());
    c.arg("send")
        .arg(src)
        .args(["--json", "--rsh", rsh])
        .args(extra);
    c
}

/// Every regular file under `root` (relative path → bytes), leaving out the receiver's
/// private directory at the top.
fn files_under(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if dir == root && e.file_name() == ".stripeguard-partial" {
                continue;
            }
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() {
                walk(root, &p, out);
            } else if m.is_file() {
                if let Ok(b) = std::fs::read(&p) {
                    out.insert(p.strip_prefix(root).unwrap().to_path_buf(), b);
                }
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// A small deterministic generator (the seed is printed, so a run can be repeated).
struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next() >> 24) as u8).collect()
    }
}

fn seed() -> u64 {
    std::env::var("SG_ATTACK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        })
}

// ---------------------------------------------------------------------------------------------
// S1: the symlink-swap race
// ---------------------------------------------------------------------------------------------

/// The racer, run as uid 65534: in a tight loop it exchanges `DIR/t/sub` (the receiver's
/// directory) with a symlink `DIR/t/lnk -> OUTSIDE_DIR` (renameat2 RENAME_EXCHANGE, syscall 316
/// on x86_64), and, inside `sub` when it can write there, `sub/f0` with a symlink to the outside
/// file. When the receiver replaced a swapped-in symlink with a fresh directory, the real one
/// left at `lnk` is moved aside so that a symlink is always ready.
const RACER: &str = r#"
import ctypes, os, stat, sys, time
libc = ctypes.CDLL(None, use_errno=True)
SYS_renameat2, RENAME_EXCHANGE = 316, 2
t, dtarget, ftarget, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
end = time.monotonic() + secs
tfd = os.open(t, os.O_RDONLY | os.O_DIRECTORY)
def xchg(dfd, a, b):
    return libc.syscall(SYS_renameat2, dfd, a, dfd, b, RENAME_EXCHANGE) == 0
def kind(dfd, name):
    try:
        m = os.lstat(name, dir_fd=dfd).st_mode
    except OSError:
        return None
    return 'l' if stat.S_ISLNK(m) else ('d' if stat.S_ISDIR(m) else 'f')
swaps = fswaps = tries = junk = 0
i = 0
while True:
    i += 1
    if (i & 63) == 0 and time.monotonic() > end:
        break
    ks, kl = kind(tfd, "sub"), kind(tfd, "lnk")
    try:
        if kl is None:
            os.symlink(dtarget, "lnk", dir_fd=tfd)
        elif kl == 'd' and ks == 'd':
            junk += 1
            os.rename("lnk", "junk.%d" % junk, src_dir_fd=tfd, dst_dir_fd=tfd)
            os.symlink(dtarget, "lnk", dir_fd=tfd)
        elif kl == 'l' and ks == 'l':
            os.unlink("lnk", dir_fd=tfd)
            continue
    except OSError:
        pass
    tries += 1
    if xchg(tfd, b"sub", b"lnk"):
        swaps += 1
    if (i & 7) == 0:
        try:
            sfd = os.open("sub", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=tfd)
        except OSError:
            continue
        try:
            kf, kk = kind(sfd, "f0"), kind(sfd, "lnkf")
            try:
                if kk is None:
                    os.symlink(ftarget, "lnkf", dir_fd=sfd)
                elif kk == 'f' and kf == 'f':
                    os.unlink("lnkf", dir_fd=sfd)
                    os.symlink(ftarget, "lnkf", dir_fd=sfd)
            except OSError:
                pass
            if xchg(sfd, b"f0", b"lnkf"):
                fswaps += 1
        finally:
            os.close(sfd)
print("swaps=%d fswaps=%d tries=%d moved_aside=%d" % (swaps, fswaps, tries, junk), flush=True)
"#;

/// What the outside victims look like: (path, mode, owner, bytes) of each, and the listing of
/// the outside directory tree.
fn outside_state(out: &Path) -> Vec<String> {
    let mut v = Vec::new();
    fn walk(p: &Path, v: &mut Vec<String>) {
        let m = std::fs::symlink_metadata(p).unwrap();
        let extra = if m.is_file() {
            format!("{:?}", String::from_utf8_lossy(&std::fs::read(p).unwrap()))
        } else {
            String::new()
        };
        v.push(format!(
            "{} mode {:o} uid {} gid {} {}",
            p.display(),
            m.mode() & 0o7777,
            m.uid(),
            m.gid(),
            extra
        ));
        if m.is_dir() {
            let mut names: Vec<_> = std::fs::read_dir(p)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .collect();
            names.sort();
            for n in names {
                walk(&n, v);
            }
        }
    }
    walk(out, &mut v);
    v
}

/// S1, the symlink-swap race: a root receiver (`recv --stdio` under `send --rsh`, run again and
/// again) receives `t/sub/f0..f7` (mode 0777) into DIR, where `DIR/t` is mode 0777 from a first
/// run, while an unprivileged racer (uid 65534) exchanges `DIR/t/sub` with a symlink to a
/// root-only directory outside DIR, and `DIR/t/sub/f0` with a symlink to a root-owned 0600 file
/// outside DIR, in a tight loop. A receiver that followed a swapped symlink even once would
/// chmod the outside file or directory to 0777, or rename a received file over it or into it.
/// The outside files must keep mode, owner and bytes, nothing may appear outside, every
/// receive lands inside DIR or fails cleanly, and a run after the race lands everything.
#[test]
fn s1_a_root_receiver_never_follows_a_symlink_swapped_in_by_another_user() {
    if !is_root() {
        eprintln!("skipped: S1 needs root (a root receiver raced by uid 65534)");
        return;
    }
    if !have("setpriv") || !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: S1 needs setpriv and /usr/bin/python3");
        return;
    }
    if std::env::consts::ARCH != "x86_64" {
        eprintln!("skipped: the racer calls renameat2 by its x86_64 number (316)");
        return;
    }
    let d = scratch();
    chmod(d.path(), 0o755);
    // The sender's tree: t/sub/f0..f7, everything mode 0777.
    let src = d.path().join("src");
    let sub = src.join("t/sub");
    std::fs::create_dir_all(&sub).unwrap();
    let write_src = |round: usize| {
        for i in 0..8 {
            let f = sub.join(format!("f{i}"));
            let body = format!("round {round} file {i} from the sender\n").repeat(1 + i * 40);
            std::fs::write(&f, body).unwrap();
            chmod(&f, 0o777);
        }
    };
    write_src(0);
    chmod(&sub, 0o777);
    chmod(&src.join("t"), 0o777);
    // The victims outside DIR: a root-owned 0600 file, and a root-only directory holding one
    // with the name of a received file.
    let out = d.path().join("outside");
    std::fs::create_dir_all(out.join("vdir")).unwrap();
    chmod(&out, 0o755);
    chmod(&out.join("vdir"), 0o700);
    std::fs::write(out.join("victim"), b"root's secret, mode 0600\n").unwrap();
    chmod(&out.join("victim"), 0o600);
    std::fs::write(out.join("vdir/f0"), b"another secret in a 0700 directory\n").unwrap();
    chmod(&out.join("vdir/f0"), 0o600);
    let before = outside_state(&out);
    let dir = d.path().join("dir");
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), dir.display());
    // The first run makes DIR/t (0777, as the sender's) and DIR/t/sub.
    let first = run_bounded(&mut send_cmd(&src.join("t"), &rsh, &[]), 60.0);
    assert_eq!(first.code, Some(0), "first run: {}", first.stderr);
    assert_eq!(
        std::fs::metadata(dir.join("t")).unwrap().mode() & 0o7777,
        0o777,
        "DIR/t takes the sender's mode"
    );
    let script = d.path().join("racer.py");
    std::fs::write(&script, RACER).unwrap();
    chmod(&script, 0o644);
    let race_secs = 22.0;
    let racer = spawn(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
            ])
            .arg(&script)
            .arg(dir.join("t"))
            .arg(out.join("vdir"))
            .arg(out.join("victim"))
            .arg(race_secs.to_string()),
    );
    let t0 = Instant::now();
    let mut runs = 0usize;
    let mut codes: BTreeMap<String, usize> = BTreeMap::new();
    let mut landed = 0u64;
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut problems = Vec::new();
    while t0.elapsed().as_secs_f64() < race_secs - 0.5 {
        runs += 1;
        write_src(runs);
        let r = run_bounded(&mut send_cmd(&src.join("t"), &rsh, &[]), 30.0);
        let key = match (r.code, r.signal) {
            (Some(c), _) => format!("exit {c}"),
            (None, Some(s)) => format!("signal {s}"),
            _ => "hung (killed)".into(),
        };
        *codes.entry(key).or_default() += 1;
        if r.stderr.contains("panicked") || !matches!(r.code, Some(0 | 1 | 5)) {
            problems.push(format!(
                "run {runs}: {:?} {:?}: {}",
                r.code, r.signal, r.stderr
            ));
        }
        let j = r.json();
        landed += j["files"].as_u64().unwrap_or(0);
        for f in j["failed"].as_array().into_iter().flatten() {
            let s = f.as_str().unwrap_or_default();
            let why = s.split(": ").skip(1).collect::<Vec<_>>().join(": ");
            let why: String = why
                .replace(&dir.display().to_string(), "DIR")
                .chars()
                .take(90)
                .collect();
            *reasons.entry(why).or_default() += 1;
        }
        if outside_state(&out) != before {
            problems.push(format!(
                "run {runs}: the outside changed:\n{}\nwas\n{}",
                outside_state(&out).join("\n"),
                before.join("\n")
            ));
            break;
        }
    }
    let rr = racer.finish(race_secs + 20.0);
    eprintln!(
        "S1: {runs} receive runs in {:.1} s ({codes:?}), {landed} files landed; racer (uid 65534): {} {}",
        t0.elapsed().as_secs_f64(),
        rr.stdout.trim(),
        rr.stderr.trim()
    );
    for (why, n) in &reasons {
        eprintln!("S1:   {n} x failed entry: {why}");
    }
    let swaps: u64 = rr
        .stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("swaps="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        swaps > 1000,
        "the racer made {swaps} swaps: the race was not real ({} / {})",
        rr.stdout,
        rr.stderr
    );
    assert!(runs >= 10, "only {runs} receive runs during the race");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let after = outside_state(&out);
    assert_eq!(after, before, "the files outside DIR changed");
    let victim = std::fs::metadata(out.join("victim")).unwrap();
    assert_eq!((victim.mode() & 0o7777, victim.uid()), (0o600, 0));
    // After the race, a run lands everything under the right names.
    let fin = run_bounded(&mut send_cmd(&src.join("t"), &rsh, &[]), 60.0);
    assert_eq!(fin.code, Some(0), "the run after the race: {}", fin.stderr);
    for i in 0..8 {
        let name = format!("t/sub/f{i}");
        assert_eq!(
            std::fs::read(dir.join(&name)).unwrap(),
            std::fs::read(src.join(&name)).unwrap(),
            "{name}"
        );
        let m = std::fs::symlink_metadata(dir.join(&name)).unwrap();
        assert!(m.is_file() && m.mode() & 0o7777 == 0o777, "{name}: {m:?}");
    }
    assert_eq!(outside_state(&out), before);
}

// ---------------------------------------------------------------------------------------------
// S5: a man in the middle of a sealed session
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Tamper {
    /// Forward every byte as it is (the control).
    Faithful,
    /// Flip one bit in a sealed record from the sender, past its first 100 bytes.
    FlipToReceiver,
    /// Flip one bit in the receiver's first sealed record.
    FlipToSender,
    /// Put a whole plaintext FILE frame (and a BLOCK frame) between two records.
    InjectPlainFrames,
    /// Put a made-up record (a length and random bytes) between two records.
    InjectRecord,
    /// Send the previous record again (a replay).
    ReplayRecord,
    /// Leave one record out.
    DropRecord,
}

/// A FILE frame for `path` (4 bytes) and its BLOCK frame, as an injecting relay would write.
fn injected_frames(path: &str) -> Vec<u8> {
    let h = stripeguard_xfer::proto::FileHeader {
        id: 77,
        path: path.into(),
        kind: 0,
        size: 4,
        mode: 0o4777,
        mtime_s: 0,
        mtime_ns: 0,
        target: Vec::new(),
        block_size: 4096,
        hash: [0; 32],
        attrs: Default::default(),
    };
    let mut block = 77u32.to_le_bytes().to_vec();
    block.extend_from_slice(&0u64.to_le_bytes());
    block.extend_from_slice(&[0; 32]);
    block.extend_from_slice(b"evil");
    [frame(1, &h.encode()), frame(3, &block)].concat()
}

/// Copy one direction of the relay, parsing it as hello, handshake message, records, and
/// tampering once as asked. Returns what it did.
fn pump(mut from: TcpStream, mut to: TcpStream, tamper: Tamper, to_receiver: bool) -> String {
    let mut log = String::new();
    let mut off = 0usize;
    let mut records = 0usize;
    let r = (|| -> std::io::Result<()> {
        let mut hello = [0u8; 10];
        from.read_exact(&mut hello)?;
        to.write_all(&hello)?;
        off += 10;
        let mut handshake_done = false;
        let mut prev: Vec<u8> = Vec::new();
        let mut tampered = false;
        let mut rng = XorShift(0x9e3779b97f4a7c15);
        loop {
            let mut l = [0u8; 2];
            from.read_exact(&mut l)?;
            let mut rec = l.to_vec();
            rec.resize(2 + usize::from(u16::from_le_bytes(l)), 0);
            from.read_exact(&mut rec[2..])?;
            if !handshake_done {
                // The Noise handshake message (`-> psk, e` or `<- e, ee`).
                handshake_done = true;
                to.write_all(&rec)?;
                off += rec.len();
                continue;
            }
            let mine = match tamper {
                Tamper::Faithful => false,
                Tamper::FlipToSender => !to_receiver,
                _ => to_receiver && off >= 100,
            };
            if mine && !tampered && rec.len() > 2 {
                tampered = true;
                let what = match tamper {
                    Tamper::FlipToReceiver | Tamper::FlipToSender => {
                        let at = 2 + (rec.len() - 2) / 2;
                        rec[at] ^= 0x10;
                        to.write_all(&rec)?;
                        format!("flipped bit 4 of byte {} of the record", at - 2)
                    }
                    Tamper::InjectPlainFrames => {
                        let inj = injected_frames("src/injected");
                        to.write_all(&inj)?;
                        to.write_all(&rec)?;
                        format!(
                            "injected {} bytes of plaintext FILE + BLOCK frames before it",
                            inj.len()
                        )
                    }
                    Tamper::InjectRecord => {
                        let mut forged = 64u16.to_le_bytes().to_vec();
                        forged.extend(rng.bytes(64));
                        to.write_all(&forged)?;
                        to.write_all(&rec)?;
                        "injected a made-up 64-byte record before it".into()
                    }
                    Tamper::ReplayRecord => {
                        to.write_all(&prev)?;
                        to.write_all(&rec)?;
                        format!(
                            "replayed the previous record ({} bytes) before it",
                            prev.len()
                        )
                    }
                    Tamper::DropRecord => "dropped it".into(),
                    Tamper::Faithful => unreachable!(),
                };
                log = format!(
                    "tampered at stream offset {off}, record #{records} ({} bytes): {what}",
                    rec.len()
                );
            } else {
                to.write_all(&rec)?;
            }
            off += rec.len();
            records += 1;
            prev = rec;
        }
    })();
    let _ = to.shutdown(Shutdown::Write);
    format!(
        "{} bytes, {records} records, ended by {:?}; {}",
        off,
        r.err().map(|e| e.kind()),
        if log.is_empty() { "not tampered" } else { &log }
    )
}

/// A relay on 127.0.0.1: takes one connection, connects to `upstream`, copies both ways.
fn start_relay(upstream: String, tamper: Tamper) -> (String, std::thread::JoinHandle<String>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let h = std::thread::spawn(move || {
        l.set_nonblocking(true).unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        let down = loop {
            match l.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < until => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => return format!("no sender came: {e}"),
            }
        };
        down.set_nonblocking(false).unwrap();
        let until = Instant::now() + Duration::from_secs(20);
        let up = loop {
            match TcpStream::connect(&upstream) {
                Ok(s) => break s,
                Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return format!("the receiver never listened: {e}"),
            }
        };
        for s in [&down, &up] {
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let _ = s.set_nodelay(true);
        }
        let (d1, u1) = (down.try_clone().unwrap(), up.try_clone().unwrap());
        let a = std::thread::spawn(move || pump(d1, u1, tamper, true));
        let b = pump(up, down, tamper, false);
        let a = a.join().unwrap_or_else(|_| "panicked".into());
        format!("sender->receiver: {a}\n  receiver->sender: {b}")
    });
    (addr, h)
}

/// S5, a man in the middle: `recv --listen 127.0.0.1:P --key-file K` and a sender with the same
/// key that connects through a relay. A relay that flips one bit after the handshake (either
/// way), injects plaintext FILE/BLOCK frames or a made-up record, replays or drops a record,
/// makes the transfer fail (exit 5 on at least one side, no panic) and nothing it injected
/// lands; a faithful relay lets the transfer succeed (the control). A fake receiver without the
/// key that answers the hello with feature flags 0 is refused by a sender holding a key.
#[test]
fn s5_a_man_in_the_middle_can_neither_alter_nor_inject() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data = XorShift(12345).bytes(300_000);
    std::fs::write(src.join("x"), &data).unwrap();
    std::fs::write(src.join("y"), b"a small second file\n").unwrap();
    let key = d.path().join("key");
    common::xfer::keygen(&key);
    let mut failures = Vec::new();
    for tamper in [
        Tamper::Faithful,
        Tamper::FlipToReceiver,
        Tamper::FlipToSender,
        Tamper::InjectPlainFrames,
        Tamper::InjectRecord,
        Tamper::ReplayRecord,
        Tamper::DropRecord,
    ] {
        let dir = d.path().join(format!("dst-{tamper:?}"));
        let addr = format!("127.0.0.1:{}", free_port());
        let recv = spawn(
            Command::new(sg_bin())
                .args([
                    "recv",
                    "--json",
                    "--idle-timeout",
                    "20",
                    "--listen",
                    &addr,
                    "--key-file",
                ])
                .arg(&key)
                .arg("--dir")
                .arg(&dir),
        );
        let (relay, log) = start_relay(addr.clone(), tamper);
        let sent = run_bounded(
            Command::new(sg_bin())
                .arg("send")
                .arg(&src)
                .args([
                    "--json",
                    "--block-size",
                    "64K",
                    "--to",
                    &relay,
                    "--key-file",
                ])
                .arg(&key),
            60.0,
        );
        let got = recv.finish(30.0);
        let log = log.join().unwrap_or_else(|_| "relay panicked".into());
        eprintln!(
            "S5 {tamper:?}: sender {:?} in {:.2} s, receiver {:?}{}\n  {log}\n  sender: {}\n  receiver: {}",
            sent.code,
            sent.secs,
            got.code,
            if got.timed_out() { " (killed: still running)" } else { "" },
            sent.stderr.trim(),
            got.stderr.trim()
        );
        for (who, r) in [("sender", &sent), ("receiver", &got)] {
            if r.stderr.contains("panicked") || r.signal.is_some() {
                failures.push(format!("{tamper:?}: the {who} crashed: {}", r.stderr));
            }
        }
        assert!(!sent.timed_out(), "{tamper:?}: the sender hung");
        let x = std::fs::read(dir.join("src/x")).ok();
        if tamper == Tamper::Faithful {
            if sent.code != Some(0) || got.code != Some(0) {
                failures.push(format!(
                    "the faithful relay: sender {:?} receiver {:?}: {} / {}",
                    sent.code, got.code, sent.stderr, got.stderr
                ));
            }
            if x.as_deref() != Some(&data[..]) {
                failures.push("the faithful relay: src/x did not land intact".into());
            }
            continue;
        }
        if !log.contains("tampered") {
            failures.push(format!(
                "{tamper:?}: the relay found nothing to tamper with: {log}"
            ));
        }
        if sent.code == Some(0) {
            failures.push(format!(
                "{tamper:?}: the sender reported success: {}",
                sent.stdout
            ));
        }
        if sent.code != Some(5) && got.code != Some(5) {
            failures.push(format!(
                "{tamper:?}: neither side exited 5 (sender {:?}, receiver {:?})",
                sent.code, got.code
            ));
        }
        if dir.join("src/injected").exists()
            || std::fs::symlink_metadata(dir.join("src/injected")).is_ok()
        {
            failures.push(format!("{tamper:?}: the injected file landed"));
        }
        if x.as_ref().is_some_and(|x| x != &data) {
            failures.push(format!("{tamper:?}: src/x landed with other bytes"));
        }
        for (p, b) in files_under(&dir) {
            let want = std::fs::read(src.parent().unwrap().join(&p)).ok();
            if want.as_ref() != Some(&b) {
                failures.push(format!(
                    "{tamper:?}: {} landed and is not the sender's",
                    p.display()
                ));
            }
        }
    }
    // (d) A fake receiver without the key answers the hello with feature flags 0 and then
    // DONE ("nothing to send"); a second one claims to turn the sender away (bit 31, REFUSED)
    // with an ERROR frame. Neither may pass for a receiver that proved the key.
    for (flags, then, want) in [
        (0u32, frame(7, &[]), "unauthenticated receiver"),
        (1u32 << 31, frame(8, b"busy"), ""),
    ] {
        let fake = TcpListener::bind("127.0.0.1:0").unwrap();
        let fake_addr = fake.local_addr().unwrap().to_string();
        let fake_thread = std::thread::spawn(move || {
            fake.set_nonblocking(true).unwrap();
            let until = Instant::now() + Duration::from_secs(30);
            let mut s = loop {
                match fake.accept() {
                    Ok((s, _)) => break s,
                    Err(_) if Instant::now() < until => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    Err(e) => return format!("no sender: {e}"),
                }
            };
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            let mut hello = [0u8; 10];
            if s.read_exact(&mut hello).is_err() {
                return "no hello".into();
            }
            let mut answer = b"SGXF".to_vec();
            answer.extend_from_slice(&stripeguard_xfer::proto::VERSION.to_le_bytes());
            answer.extend_from_slice(&flags.to_le_bytes());
            answer.extend(then);
            let _ = s.write_all(&answer);
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            format!(
                "the sender's hello {hello:02x?}, then {} more bytes",
                rest.len()
            )
        });
        let fk = run_bounded(
            Command::new(sg_bin())
                .arg("send")
                .arg(&src)
                .args(["--json", "--to", &fake_addr, "--key-file"])
                .arg(&key),
            30.0,
        );
        let flog = fake_thread.join().unwrap_or_default();
        eprintln!(
            "S5 fake receiver (flags {flags:#x}): sender {:?}: {}\n  {flog}",
            fk.code,
            fk.stderr.trim()
        );
        if fk.code != Some(5) || !fk.stderr.contains(want) {
            failures.push(format!(
                "the fake receiver (flags {flags:#x}): sender exit {:?}, {}",
                fk.code, fk.stderr
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// B11: durability order from a syscall trace
// ---------------------------------------------------------------------------------------------

/// One system call of the trace: where it entered and returned (line numbers), its text.
#[derive(Debug, Default, Clone)]
struct Call {
    name: String,
    text: String,
    entry: usize,
    exit: usize,
    ok: bool,
    /// The bytes dumped for a write to fd 1 (`-e write=1`).
    dump: Vec<u8>,
    line: String,
}

impl Call {
    /// The paths strace printed for descriptor arguments (`-y`: `7</path>`), in order.
    fn fd_paths(&self) -> Vec<String> {
        let b = self.text.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            let start_ok = i == 0 || matches!(b[i - 1], b'(' | b' ');
            if start_ok && b[i].is_ascii_digit() {
                let mut j = i;
                while j < b.len() && b[j].is_ascii_digit() {
                    j += 1;
                }
                if j < b.len() && b[j] == b'<' {
                    if let Some(k) = self.text[j + 1..].find('>') {
                        out.push(self.text[j + 1..j + 1 + k].to_string());
                        i = j + 1 + k;
                        continue;
                    }
                }
                i = j;
            }
            i += 1;
        }
        out
    }
    /// The quoted strings among its arguments.
    fn strings(&self) -> Vec<String> {
        self.text
            .split('"')
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, s)| s.to_string())
            .collect()
    }
    fn fd0(&self) -> String {
        self.fd_paths().into_iter().next().unwrap_or_default()
    }
}

/// Parse `strace -f -y -tt -e write=1 -o FILE` output into calls (unfinished/resumed pairs
/// joined), each with its entry and exit line.
fn parse_trace(text: &str) -> Vec<Call> {
    let mut calls: Vec<Call> = Vec::new();
    let mut pending: HashMap<String, usize> = HashMap::new();
    let mut last_done: Option<usize> = None;
    for (n, line) in text.lines().enumerate() {
        if line.starts_with(" | ") {
            // ` | 00000  02 05 00 ...  ascii |`: the bytes are in columns 10..59 of the line.
            let cols = &line[10.min(line.len())..59.min(line.len())];
            if let Some(c) = last_done {
                for t in cols.split_whitespace() {
                    if let Ok(b) = u8::from_str_radix(t, 16) {
                        calls[c].dump.push(b);
                    }
                }
            }
            continue;
        }
        // "PID  HH:MM:SS.ffffff REST": the pid, then the time.
        let pid = line.split(' ').next().unwrap_or("").to_string();
        let after_pid = line[pid.len()..].trim_start();
        let Some(sp) = after_pid.find(' ') else {
            continue;
        };
        let rest = &after_pid[sp + 1..];
        if rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        if let Some(r) = rest.strip_prefix("<... ") {
            let Some(k) = pending.remove(&pid) else {
                continue;
            };
            let tail = r.split_once("resumed>").map(|x| x.1).unwrap_or("");
            let c = &mut calls[k];
            c.text.push_str(tail);
            c.exit = n;
            c.ok = !c.text.rsplit(" = ").next().unwrap_or("").starts_with("-1");
            c.line.push_str(" ... ");
            c.line.push_str(line);
            last_done = Some(k);
            continue;
        }
        let Some(paren) = rest.find('(') else {
            continue;
        };
        let name = rest[..paren].to_string();
        let mut c = Call {
            name,
            text: rest[paren..].to_string(),
            entry: n,
            exit: n,
            line: line.to_string(),
            ..Default::default()
        };
        if let Some(t) = c.text.strip_suffix(" <unfinished ...>") {
            c.text = t.to_string();
            pending.insert(pid, calls.len());
            calls.push(c);
        } else {
            c.ok = !c.text.rsplit(" = ").next().unwrap_or("").starts_with("-1");
            calls.push(c);
            last_done = Some(calls.len() - 1);
        }
    }
    calls
}

/// What the trace says of the receiver's durability order.
struct Order {
    calls: usize,
    /// Renames of partials to final names.
    checked: usize,
    /// FILE_DONE 0 frames decoded from fd 1.
    dones: usize,
    /// Broken rules, each with its trace lines.
    problems: Vec<String>,
    /// Observations that are no rule of FORMAT.md.
    notes: Vec<String>,
}

/// Check the durability order of every file renamed from its partial in a receiver's
/// `strace -f -y -e write=1` trace (see the B11 test).
fn durability_order(text: &str) -> Order {
    let calls = parse_trace(text);
    let ok_calls: Vec<&Call> = calls.iter().filter(|c| c.ok).collect();
    // The receiver's output stream (fd 1), each byte with the call that wrote it.
    let mut stream: Vec<(u8, usize)> = Vec::new();
    for (i, c) in ok_calls.iter().enumerate() {
        if c.name == "write" && c.text.starts_with("(1<") {
            stream.extend(c.dump.iter().map(|&b| (b, i)));
        }
    }
    let mut problems: Vec<String> = Vec::new();
    if !(stream.len() > 10 && stream[..4].iter().map(|x| x.0).eq(b"SGXF".iter().copied())) {
        problems.push("no hello in the trace's dump of fd 1".into());
    }
    // The partials in the order the main thread created them; FILE_REPLY 0 comes in that order.
    let partials: Vec<String> = ok_calls
        .iter()
        .filter(|c| {
            c.name == "openat"
                && c.text.contains("O_CREAT")
                && c.strings().first().is_some_and(|s| s.ends_with(".part"))
        })
        .map(|c| format!("{}/{}", c.fd0(), c.strings()[0]))
        .collect();
    let mut next_partial = 0;
    let mut by_id: HashMap<u32, String> = HashMap::new();
    // partial path → the index (in ok_calls) of the write carrying the first byte of its
    // FILE_DONE 0.
    let mut done_at: HashMap<String, usize> = HashMap::new();
    let mut p = 10;
    while p + 5 <= stream.len() {
        let kind = stream[p].0;
        let len = u32::from_le_bytes([
            stream[p + 1].0,
            stream[p + 2].0,
            stream[p + 3].0,
            stream[p + 4].0,
        ]) as usize;
        if p + 5 + len > stream.len() {
            break;
        }
        let pl: Vec<u8> = stream[p + 5..p + 5 + len].iter().map(|x| x.0).collect();
        let at = stream[p].1;
        if (kind == 2 || kind == 6) && pl.len() >= 5 {
            let id = u32::from_le_bytes([pl[0], pl[1], pl[2], pl[3]]);
            if kind == 2 && pl[4] == 0 {
                match partials.get(next_partial) {
                    Some(part) => {
                        by_id.insert(id, part.clone());
                    }
                    None => problems.push(format!(
                        "FILE_REPLY for id {id} with no partial created for it"
                    )),
                }
                next_partial += 1;
            }
            if kind == 6 && pl[4] == 0 {
                match by_id.get(&id) {
                    Some(part) => {
                        done_at.insert(part.clone(), at);
                    }
                    None => {
                        problems.push(format!("FILE_DONE 0 for id {id}, never answered 'send'"))
                    }
                }
            }
        }
        p += 5 + len;
    }
    if next_partial != partials.len() {
        problems.push(format!(
            "{next_partial} FILE_REPLY 0 frames but {} partials created: {partials:?}",
            partials.len()
        ));
    }
    let is_sync_of =
        |c: &Call, path: &str| (c.name == "fsync" && c.fd0() == path) || c.name == "syncfs";
    let mut checked = 0;
    let mut notes = Vec::new();
    for (ri, r) in ok_calls.iter().enumerate() {
        if !(r.name == "renameat" || r.name == "renameat2") {
            continue;
        }
        let (fds, names) = (r.fd_paths(), r.strings());
        if fds.len() < 2 || names.len() < 2 || !names[0].ends_with(".part") {
            continue;
        }
        let part = format!("{}/{}", fds[0], names[0]);
        let fin = format!("{}/{}", fds[1], names[1]);
        let fin_dir = fds[1].clone();
        checked += 1;
        let mut bad = |why: String, lines: &[&Call]| {
            let mut s = format!("{fin}: {why}");
            for c in lines {
                s.push_str("\n    ");
                s.push_str(&c.line);
            }
            problems.push(s);
        };
        let before: Vec<(usize, &&Call)> = ok_calls[..ri].iter().enumerate().collect();
        let last = |f: &dyn Fn(&Call) -> bool| {
            before
                .iter()
                .rev()
                .find(|(_, c)| f(c))
                .map(|(i, c)| (*i, **c))
        };
        let write = last(&|c| (c.name == "pwrite64" || c.name == "write") && c.fd0() == part);
        let fchmod = last(&|c| c.name == "fchmod" && c.fd0() == part);
        let utimes =
            last(&|c| c.name == "utimensat" && c.fd0() == part && c.text.contains(", NULL,"));
        let (Some((_, fchmod)), Some((_, utimes))) = (fchmod, utimes) else {
            bad(
                "renamed without fchmod and futimens on its partial".into(),
                &[r],
            );
            continue;
        };
        if let Some((_, w)) = write {
            if w.exit >= fchmod.entry {
                bad(
                    "a data write to the partial after its fchmod".into(),
                    &[w, fchmod],
                );
            }
        }
        if fchmod.exit >= utimes.entry {
            bad(
                "futimens before fchmod (FORMAT.md: futimens last)".into(),
                &[fchmod, utimes],
            );
        }
        let attrs_end = fchmod.exit.max(utimes.exit);
        let sync1 = ok_calls
            .iter()
            .find(|c| c.entry > attrs_end && c.exit < r.entry && is_sync_of(c, &part));
        if sync1.is_none() {
            let weak = ok_calls.iter().find(|c| {
                c.entry > attrs_end && c.exit < r.entry && c.name == "fdatasync" && c.fd0() == part
            });
            match weak {
                Some(w) => bad("only fdatasync between its attributes and its rename (FORMAT.md: fsync for a file whose attributes were just set)".into(), &[utimes, w, r]),
                None => bad("no fsync of it or syncfs between its attributes and its rename".into(), &[utimes, r]),
            }
        }
        let Some(&done) = done_at.get(&part) else {
            bad("renamed, but no FILE_DONE 0 was sent for it".into(), &[r]);
            continue;
        };
        let done_call = ok_calls[done];
        let sync2 = ok_calls
            .iter()
            .find(|c| c.entry > r.exit && c.exit < done_call.entry && is_sync_of(c, &fin_dir));
        if sync2.is_none() {
            bad(
                "FILE_DONE 0 written with no fsync of its directory or syncfs after its rename"
                    .into(),
                &[r, done_call],
            );
        }
        if done_call.entry < r.exit {
            bad(
                "FILE_DONE 0 written before its rename".into(),
                &[done_call, r],
            );
        }
        // Not a rule of FORMAT.md (directories are durable at DONE), only noted: a directory
        // on the file's path made in this session, with no sync of its parent since.
        for m in ok_calls.iter().filter(|c| c.name == "mkdirat") {
            let (Some(parent), Some(name)) = (
                m.fd_paths().into_iter().next(),
                m.strings().into_iter().next(),
            ) else {
                continue;
            };
            let made = format!("{parent}/{name}");
            if !fin.starts_with(&format!("{made}/")) {
                continue;
            }
            let synced = ok_calls
                .iter()
                .any(|c| c.entry > m.exit && c.exit < done_call.entry && is_sync_of(c, &parent));
            if !synced {
                notes.push(format!("{fin}: FILE_DONE 0 while {made}, made in this session, was not yet synced in {parent}"));
            }
        }
    }
    Order {
        calls: calls.len(),
        checked,
        dones: done_at.len(),
        problems,
        notes,
    }
}

/// B11, durability order: the receiver runs under `strace -f -y` while it receives ~20 small
/// files and one of 3 MiB (`--block-size 256K`). For every file that landed the trace must
/// show: its last data write to the partial < `fchmod` then `futimens` (utimensat on the fd)
/// on the partial < a sync covering it (`fsync` of that descriptor or a `syncfs`: FORMAT.md
/// says `fsync` for a file whose attributes were just set) < the `renameat` to its final name <
/// a sync covering the rename (`fsync` of the directory or a `syncfs`) < the write to stdout
/// that carries its FILE_DONE 0 (found by decoding the receiver's output stream).
#[test]
fn b11_a_file_is_announced_only_after_its_data_attributes_and_rename_are_durable() {
    if !have("strace") {
        eprintln!("skipped: B11 needs strace (apt-get install -y strace)");
        return;
    }
    // ptrace may be forbidden here (a container without CAP_SYS_PTRACE).
    let probe = Command::new("strace")
        .args(["-f", "-o", "/dev/null", "true"])
        .output()
        .unwrap();
    if !probe.status.success() {
        eprintln!("skipped: B11 needs strace to work here: {}", err_of(&probe));
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    let mut rng = XorShift(0xb11);
    for i in 0..20 {
        let sub = src.join(if i % 3 == 0 {
            "a"
        } else if i % 3 == 1 {
            "b/c"
        } else {
            ""
        });
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join(format!("small{i:02}")), rng.bytes(100 + i * 997)).unwrap();
    }
    std::fs::write(src.join("empty"), b"").unwrap();
    std::fs::write(src.join("big.bin"), rng.bytes((3 << 20) + 12345)).unwrap();
    let want_files = 22;
    let dir = d.path().join("dst");
    let trace = d.path().join("TRACE");
    let rsh = format!(
        "strace -f -y -tt -e trace=openat,pwrite64,write,fsync,fdatasync,syncfs,renameat,renameat2,mkdirat,fchmod,fchown,utimensat,fsetxattr,sendto,sendmsg -e write=1 -o {} {} recv --stdio --dir {}",
        trace.display(),
        sg_bin(),
        dir.display()
    );
    let r = run_bounded(&mut send_cmd(&src, &rsh, &["--block-size", "256K"]), 180.0);
    assert_eq!(r.code, Some(0), "the traced transfer: {}", r.stderr);
    assert_eq!(r.json()["files"], want_files, "{}", r.stdout);
    let text = std::fs::read_to_string(&trace).unwrap();
    let o = durability_order(&text);
    for n in o.notes.iter().take(5) {
        eprintln!("B11 note: {n}");
    }
    if o.notes.len() > 5 {
        eprintln!("B11 note: ... {} notes in all", o.notes.len());
    }
    eprintln!(
        "B11: {} trace lines, {} calls, {} renames checked, {} FILE_DONE 0 decoded, transfer {:.2} s",
        text.lines().count(),
        o.calls,
        o.checked,
        o.dones,
        r.secs
    );
    assert_eq!(o.checked, want_files, "renames of partials in the trace");
    assert_eq!(o.dones, want_files, "FILE_DONE 0 frames decoded from fd 1");
    assert!(
        o.problems.is_empty(),
        "{} violation(s) of FORMAT.md §5 Durability:\n{}",
        o.problems.len(),
        o.problems.join("\n")
    );
    assert_eq!(files_under(&dir.join("src")), files_under(&src));
}

/// A receiver's trace in the right order for one file (`d/a/f1`, id 1), in the format of
/// `strace -f -y -tt -e write=1` (with an unfinished/resumed pair across threads).
const GOOD_TRACE: &str = r#"100  08:00:00.000001 write(1<pipe:[1]>, "SGXF\2\0\0\0\0\0", 10) = 10
 | 00000  53 47 58 46 02 00 00 00  00 00                    SGXF......       |
100  08:00:00.000002 openat(4</d/.stripeguard-partial>, "k1.part", O_RDWR|O_CREAT|O_EXCL|O_CLOEXEC, 0600) = 6</d/.stripeguard-partial/k1.part>
100  08:00:00.000003 write(1<pipe:[1]>, "\2\5\0\0\0\1\0\0\0\0", 10) = 10
 | 00000  02 05 00 00 00 01 00 00  00 00                    ..........       |
100  08:00:00.000004 pwrite64(6</d/.stripeguard-partial/k1.part>, "file 1\n", 7, 0 <unfinished ...>
101  08:00:00.000005 openat(AT_FDCWD</d>, "/proc/self/fd/6", O_RDONLY) = 9</d/x>
100  08:00:00.000006 <... pwrite64 resumed>) = 7
101  08:00:00.000007 fchmod(6</d/.stripeguard-partial/k1.part>, 0644) = 0
101  08:00:00.000008 utimensat(6</d/.stripeguard-partial/k1.part>, NULL, [{tv_sec=1, tv_nsec=0}, {tv_sec=1, tv_nsec=0}], 0) = 0
101  08:00:00.000009 fsync(6</d/.stripeguard-partial/k1.part>) = 0
101  08:00:00.000010 renameat(4</d/.stripeguard-partial>, "k1.part", 7</d/a>, "f1") = 0
101  08:00:00.000011 fsync(7</d/a>) = 0
101  08:00:00.000012 write(1<pipe:[1]>, "\6\5\0\0\0\1\0\0\0\0", 10) = 10
 | 00000  06 05 00 00 00 01 00 00  00 00                    ..........       |
"#;

/// The B11 checker itself: it passes the right order and finds each broken one.
#[test]
fn b11_the_trace_checker_finds_each_broken_order() {
    let good = durability_order(GOOD_TRACE);
    assert_eq!((good.checked, good.dones), (1, 1));
    assert!(good.problems.is_empty(), "{:?}", good.problems);
    let lines: Vec<&str> = GOOD_TRACE.lines().collect();
    let edit = |f: &dyn Fn(&mut Vec<String>)| {
        let mut v: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
        f(&mut v);
        durability_order(&(v.join("\n") + "\n"))
    };
    let find = |v: &Vec<String>, pat: &str| v.iter().position(|l| l.contains(pat)).unwrap();
    for (what, want, o) in [
        (
            "FILE_DONE before the directory's fsync",
            "no fsync of its directory",
            edit(&|v| {
                let i = find(v, "fsync(7<");
                v.remove(i);
            }),
        ),
        (
            "the directory's fsync before the rename",
            "no fsync of its directory",
            edit(&|v| {
                let i = find(v, "fsync(7<");
                let l = v.remove(i);
                let r = find(v, "renameat(");
                v.insert(r, l);
            }),
        ),
        (
            "fdatasync after the attributes",
            "only fdatasync",
            edit(&|v| {
                let i = find(v, "fsync(6<");
                v[i] = v[i].replace("fsync(", "fdatasync(");
            }),
        ),
        (
            "the rename before the file's sync",
            "no fsync of it or syncfs",
            edit(&|v| {
                let i = find(v, "fsync(6<");
                let l = v.remove(i);
                let r = find(v, "fsync(7<");
                v.insert(r, l);
            }),
        ),
        (
            "a write after fchmod",
            "a data write to the partial after its fchmod",
            edit(&|v| {
                let i = find(v, "pwrite64 resumed");
                let l = v.remove(i);
                let r = find(v, "utimensat(");
                v.insert(r, l);
            }),
        ),
        (
            "futimens before fchmod",
            "futimens before fchmod",
            edit(&|v| {
                let (a, b) = (find(v, "fchmod("), find(v, "utimensat("));
                v.swap(a, b)
            }),
        ),
    ] {
        assert!(
            o.problems.iter().any(|p| p.contains(want)),
            "{what}: not found ({:?})",
            o.problems
        );
    }
}

// ---------------------------------------------------------------------------------------------
// kill -9 at every step
// ---------------------------------------------------------------------------------------------

/// The pids of `pid`'s descendants (from /proc).
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent: Vec<(u32, u32)> = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let Some(after) = stat.rfind(')') else {
            continue;
        };
        let ppid = stat[after + 1..]
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        parent.push((p, ppid));
    }
    let mut out = vec![];
    let mut todo = vec![pid];
    while let Some(x) = todo.pop() {
        for &(c, pp) in &parent {
            if pp == x {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

fn receiver_of(send_pid: u32) -> Option<u32> {
    descendants(send_pid).into_iter().find(|p| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .map(|c| {
                let args: Vec<&[u8]> = c.split(|&b| b == 0).collect();
                args.first().is_some_and(|a| a.ends_with(b"stripeguard"))
                    && args.iter().any(|a| *a == b"recv")
            })
            .unwrap_or(false)
    })
}

/// kill -9 at every step: a tree of 30 small files and two larger ones is sent 15 times, and
/// each time the receiver alone, or the sender and receiver together, is killed with SIGKILL
/// after a random delay spread over the length of a whole transfer (halfway, two files change
/// at the source). After each kill, every file under its final name in DIR holds exactly the
/// bytes of a version the source had (never torn, never a partial's content); a complete run
/// then lands everything and leaves no `.stripeguard-partial`.
#[test]
fn kill_9_at_random_points_never_leaves_a_torn_file_under_its_name() {
    let d = scratch();
    let src = d.path().join("src");
    let s = seed();
    let mut rng = XorShift(s);
    for i in 0..30 {
        let sub = src.join(format!("d{}", i % 4));
        std::fs::create_dir_all(&sub).unwrap();
        let n = (rng.next() % 40_000) as usize;
        std::fs::write(sub.join(format!("s{i:02}")), rng.bytes(n)).unwrap();
    }
    std::fs::write(src.join("big1"), rng.bytes(16 << 20)).unwrap();
    std::fs::write(src.join("d1/big2"), rng.bytes((6 << 20) + 4321)).unwrap();
    // Every version each path had at the source.
    let mut versions: HashMap<PathBuf, Vec<Vec<u8>>> = HashMap::new();
    let remember = |versions: &mut HashMap<PathBuf, Vec<Vec<u8>>>| {
        for (p, b) in files_under(&src) {
            let v = versions.entry(Path::new("src").join(p)).or_default();
            if !v.contains(&b) {
                v.push(b);
            }
        }
    };
    remember(&mut versions);
    let bs = ["--block-size", "256K"];
    // How long one whole transfer takes here, to spread the kills over it.
    let cal = d.path().join("calibrate");
    let crsh = format!("{} recv --stdio --dir {}", sg_bin(), cal.display());
    let c = run_bounded(&mut send_cmd(&src, &crsh, &bs), 120.0);
    assert_eq!(c.code, Some(0), "{}", c.stderr);
    let whole_ms = ((c.secs * 1000.0) as u64).max(100);
    let dir = d.path().join("dst");
    let rsh = format!("{} recv --stdio --dir {}", sg_bin(), dir.display());
    let mut problems = Vec::new();
    let mut log = Vec::new();
    let mut mid = 0;
    for run in 0..15 {
        if run > 0 {
            // Every run has something to send: about a third of the small files change each
            // time, big2 every third run (a partial of an older version is then discarded),
            // big1 once (otherwise it resumes from what earlier runs verified).
            for i in 0..30 {
                if rng.next().is_multiple_of(3) {
                    let n = (rng.next() % 40_000) as usize;
                    let f = src.join(format!("d{}/s{i:02}", i % 4));
                    std::fs::write(f, rng.bytes(n)).unwrap();
                }
            }
            if run % 3 == 0 {
                std::fs::write(src.join("d1/big2"), rng.bytes((6 << 20) + 4321)).unwrap();
            }
            if run == 7 {
                std::fs::write(src.join("big1"), rng.bytes(16 << 20)).unwrap();
            }
            remember(&mut versions);
        }
        // Spread over a whole transfer, more of them early (a run sends only what changed).
        let delay = (rng.next() % whole_ms) * (rng.next() % whole_ms) / whole_ms;
        let only_receiver = run % 2 == 1;
        let mut sp = spawn(&mut send_cmd(&src, &rsh, &bs));
        let pid = sp.pid();
        std::thread::sleep(Duration::from_millis(delay));
        let what = if sp.child.try_wait().unwrap().is_some() {
            "nothing (the transfer had ended)"
        } else if only_receiver {
            match receiver_of(pid) {
                Some(r) => {
                    let _ = rustix::process::kill_process(pid_of(r), rustix::process::Signal::KILL);
                    "the receiver"
                }
                None => {
                    kill_group(pid);
                    "both (no receiver yet)"
                }
            }
        } else {
            kill_group(pid);
            "both"
        };
        let r = sp.finish(30.0);
        if r.stderr.contains("panicked") {
            problems.push(format!("run {run}: a panic: {}", r.stderr));
        }
        let mut torn = 0;
        let have = files_under(&dir);
        for (p, b) in &have {
            match versions.get(p) {
                Some(v) if v.contains(b) => {}
                Some(_) => {
                    torn += 1;
                    problems.push(format!(
                        "run {run} (killed {what} after {delay} ms): {} holds {} bytes that are no version of the source",
                        p.display(),
                        b.len()
                    ));
                }
                None => {
                    torn += 1;
                    problems.push(format!(
                        "run {run}: {} is no file of the source",
                        p.display()
                    ));
                }
            }
        }
        let partials = std::fs::read_dir(dir.join(".stripeguard-partial"))
            .map(|r| r.count())
            .unwrap_or(0);
        mid += usize::from(!what.starts_with("nothing"));
        log.push(format!(
            "run {run}: killed {what} after {delay} ms (exit {:?}/{:?}): {} files under their names, {partials} in the partial directory{}",
            r.code,
            r.signal,
            have.len(),
            if torn > 0 { ", WRONG ONES" } else { "" }
        ));
    }
    eprintln!(
        "kill -9 (seed {s}, SG_ATTACK_SEED to repeat; a whole transfer {whole_ms} ms):\n  {}",
        log.join("\n  ")
    );
    let fin = run_bounded(&mut send_cmd(&src, &rsh, &bs), 120.0);
    eprintln!(
        "kill -9: the complete run: {:?} in {:.2} s: {}",
        fin.code,
        fin.secs,
        fin.stdout.trim()
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        mid >= 5,
        "only {mid} of 15 kills came before the transfer ended"
    );
    assert_eq!(fin.code, Some(0), "the complete run: {}", err_of_ran(&fin));
    assert!(
        fin.json()["failed"]
            .as_array()
            .is_some_and(|a| a.is_empty()),
        "{}",
        fin.stdout
    );
    assert_eq!(
        files_under(&dir.join("src")),
        files_under(&src),
        "the complete run did not land the source"
    );
    let left: Vec<_> = std::fs::read_dir(dir.join(".stripeguard-partial"))
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(
        !dir.join(".stripeguard-partial").exists(),
        "DIR/.stripeguard-partial is left after a complete run, holding {left:?}"
    );
}

fn err_of_ran(r: &Ran) -> String {
    format!("{}{}", r.stdout, r.stderr)
}

/// The flipper, run as uid 65534: exchanges each `DIR/fNN` with a symlink `DIR/.lNN` to the
/// secret (renameat2 RENAME_EXCHANGE) in a loop, so the sender's walk sees a file and its open
/// may meet the symlink; every 8th round it exchanges with a fifo `DIR/.qNN` instead.
const FLIPPER: &str = r#"
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
d, secret, n, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
for i in range(n):
    try: os.symlink(secret, f".l{i:02d}", dir_fd=fd)
    except FileExistsError: pass
    try: os.mkfifo(f".q{i:02d}", dir_fd=fd)
    except FileExistsError: pass
end = time.monotonic() + secs
swaps = r = 0
while time.monotonic() < end:
    r += 1
    other = ".q" if r % 8 == 0 else ".l"
    for i in range(n):
        if libc.syscall(316, fd, f"f{i:02d}".encode(), fd, f"{other}{i:02d}".encode(), 2) == 0:
            swaps += 1
print(swaps)
"#;

/// Outside attack, finding 2: a root sender of a tree another user can write never sends a
/// file that user swapped in after the walk — a symlink to a root-only file, or a fifo —
/// (before: the sender opened sources by path without `O_NOFOLLOW`, and a root-only secret
/// landed world-readable on the receiver).
#[test]
fn a_root_sender_never_reads_a_symlink_swapped_in_by_another_user() {
    if !is_root() || !have("setpriv") || !Path::new("/usr/bin/python3").exists() {
        eprintln!("skipped: needs root, setpriv and /usr/bin/python3");
        return;
    }
    if std::env::consts::ARCH != "x86_64" {
        eprintln!("skipped: the flipper calls renameat2 by its x86_64 number (316)");
        return;
    }
    let d = scratch();
    chmod(d.path(), 0o755);
    let secret = d.path().join("secret");
    std::fs::write(&secret, b"ROOT-ONLY SECRET\n").unwrap();
    chmod(&secret, 0o600);
    let usrc = d.path().join("usrc");
    std::fs::create_dir_all(&usrc).unwrap();
    for i in 0..20 {
        std::fs::write(usrc.join(format!("f{i:02}")), format!("public {i}\n")).unwrap();
        std::os::unix::fs::chown(usrc.join(format!("f{i:02}")), Some(65534), Some(65534)).unwrap();
    }
    std::os::unix::fs::chown(&usrc, Some(65534), Some(65534)).unwrap();
    chmod(&usrc, 0o755);
    let flipper = d.path().join("flipper.py");
    std::fs::write(&flipper, FLIPPER).unwrap();
    chmod(&flipper, 0o644);
    let secs = 10.0;
    let racer = spawn(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "/usr/bin/python3",
            ])
            .arg(&flipper)
            .arg(&usrc)
            .arg(&secret)
            .args(["20", &secs.to_string()]),
    );
    let dst = d.path().join("dst");
    let rsh = format!("{} recv --stdio --json --dir {}", sg_bin(), dst.display());
    let start = Instant::now();
    let mut runs = 0;
    let mut leaked = Vec::new();
    while start.elapsed() < Duration::from_secs_f64(secs - 1.0) {
        let r = run_bounded(&mut send_cmd(&usrc, &rsh, &[]), 20.0);
        assert!(
            r.code.is_some(),
            "the sender hung or was killed: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        runs += 1;
        for (p, bytes) in files_under(&dst) {
            if bytes.windows(6).any(|w| w == b"SECRET") {
                leaked.push(p);
            }
        }
    }
    let raced = racer.finish(secs + 10.0);
    eprintln!(
        "{runs} sends while the flipper made {} swaps",
        raced.stdout.trim()
    );
    assert!(runs >= 3, "too few sends to race");
    assert!(
        leaked.is_empty(),
        "the root-only secret was sent: {leaked:?}"
    );
}
