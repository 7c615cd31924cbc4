//! `send`/`recv` correct on every file (issue "send/recv safe to run as root", B items): long
//! and non-UTF-8 names, special files reported, one bad file failing alone, type changes between
//! runs, partial-like names in the source, manifests with any name, `--ssh host:~/x`, no test
//! hook in a release binary, errors that name their path, hostile frames bounded before
//! allocation, and both ends counting the same.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;

use common::xfer::{frame, have, is_root, mount, same_tree, scratch, sg_bin, Mounted};
use common::{err_of, ok};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn rsh(dst: &Path) -> String {
    format!("{} recv --stdio --json --dir {}", sg_bin(), dst.display())
}

fn send_paths(paths: &[PathBuf], rsh: &str, extra: &[&str]) -> std::process::Output {
    Command::new(sg_bin())
        .arg("send")
        .args(paths)
        .args(["--json", "--rsh", rsh])
        .args(extra)
        .output()
        .unwrap()
}

fn last_json(text: &str) -> serde_json::Value {
    text.lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn sent(out: &std::process::Output) -> serde_json::Value {
    last_json(&String::from_utf8_lossy(&out.stdout))
}

fn received(out: &std::process::Output) -> serde_json::Value {
    last_json(&err_of(out))
}

fn name(b: &[u8]) -> &OsStr {
    OsStr::from_bytes(b)
}

/// B1, B2: names of 239–255 bytes and names that are not UTF-8 (inside a directory and as
/// arguments) all land, each as itself. Before: long names aborted the transfer; `a\xff` and
/// `a\xfe` both landed as `a\u{FFFD}` (one file lost), and inside a directory they were
/// dropped silently.
#[test]
fn long_and_non_utf8_names_land_each_as_itself() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    for n in [239usize, 250, 255] {
        std::fs::write(src.join("x".repeat(n)), format!("{n}")).unwrap();
    }
    std::fs::write(src.join(name(b"a\xff")), b"ff").unwrap();
    std::fs::write(src.join(name(b"a\xfe")), b"fe").unwrap();
    std::fs::write(src.join(name(b"new\nline")), b"nl").unwrap();
    let dst = d.path().join("dst");
    let out = send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]);
    ok(&out);
    assert_eq!(sent(&out)["files"], 6, "{}", err_of(&out));
    same_tree(&src, &dst.join("src"));
    // As arguments (`send c/*`): two files, two names.
    let dst2 = d.path().join("dst2");
    let out = send_paths(
        &[src.join(name(b"a\xff")), src.join(name(b"a\xfe"))],
        &rsh(&dst2),
        &[],
    );
    ok(&out);
    assert_eq!(sent(&out)["files"], 2);
    assert_eq!(std::fs::read(dst2.join(name(b"a\xff"))).unwrap(), b"ff");
    assert_eq!(std::fs::read(dst2.join(name(b"a\xfe"))).unwrap(), b"fe");
}

/// B3: fifos, sockets and device nodes are not sent, and the sender says so with each path
/// (before: skipped silently with exit 0 and `"skipped":0`).
#[test]
fn special_files_are_reported_not_dropped_silently() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("plain"), b"p").unwrap();
    ok(&Command::new("mkfifo")
        .arg(src.join("fifo"))
        .output()
        .unwrap());
    let _sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    let mut specials = 2;
    if is_root()
        && Command::new("mknod")
            .arg(src.join("null"))
            .args(["c", "1", "3"])
            .status()
            .is_ok_and(|s| s.success())
    {
        specials += 1;
    }
    let dst = d.path().join("dst");
    let out = send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]);
    ok(&out);
    let s = sent(&out);
    let listed = s["not_sent"].as_array().unwrap();
    assert_eq!(listed.len(), specials, "{s}");
    for (n, what) in [("fifo", "a fifo"), ("sock", "a socket")] {
        assert!(
            listed
                .iter()
                .any(|l| l.as_str().unwrap().contains(&format!("/{n}: {what}"))),
            "{s}"
        );
    }
    assert!(err_of(&out).contains("not sent:"), "{}", err_of(&out));
    assert_eq!(s["files"], 1);
}

/// B5, B13: one bad file fails alone with its path; the rest lands and the exit status says
/// "some files failed" (1), not "the transfer failed" (5). Before: a missing argument, an
/// unreadable file or ENOSPC aborted everything with exit 2 and no path.
#[test]
fn one_bad_file_fails_alone_and_names_its_path() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("good"), b"good").unwrap();
    let dst = d.path().join("dst");
    let missing = d.path().join("no-such-file");
    let out = send_paths(&[src.clone(), missing.clone()], &rsh(&dst), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", err_of(&out));
    let s = sent(&out);
    assert!(
        s["failed"][0].as_str().unwrap().contains("no-such-file"),
        "{s}"
    );
    assert_eq!(std::fs::read(dst.join("src/good")).unwrap(), b"good");

    // A file this user cannot read (run the sender as nobody).
    if is_root() && have("setpriv") {
        let pub_src = d.path().join("pub");
        std::fs::create_dir_all(&pub_src).unwrap();
        std::fs::write(pub_src.join("secret"), b"s").unwrap();
        std::fs::write(pub_src.join("open"), b"o").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            pub_src.join("secret"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::fs::set_permissions(pub_src.join("open"), std::fs::Permissions::from_mode(0o644))
            .unwrap();
        for p in [d.path(), pub_src.as_path()] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let dst = d.path().join("dst-nobody");
        std::fs::create_dir_all(&dst).unwrap();
        std::os::unix::fs::chown(&dst, Some(65534), Some(65534)).unwrap();
        let out = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                sg_bin(),
                "send",
                "--json",
                "--rsh",
            ])
            .arg(rsh(&dst))
            .arg(&pub_src)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", err_of(&out));
        let s = sent(&out);
        assert!(
            s["failed"][0].as_str().unwrap().contains("pub/secret"),
            "{s}"
        );
        assert_eq!(std::fs::read(dst.join("pub/open")).unwrap(), b"o");
    }

    // ENOSPC on the receiver: the big file fails alone, naming its path; no partial is left.
    if !is_root() || !have("mkfs.ext4") || !have("losetup") {
        eprintln!("skipping the ENOSPC part: it needs root, losetup and mkfs.ext4");
        return;
    }
    let img = d.path().join("small.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(24 << 20)
        .unwrap();
    ok(&Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .output()
        .unwrap());
    let mnt = d.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let Some(_u) = mount(&["-o".as_ref(), "loop".as_ref(), img.as_os_str()], &mnt) else {
        eprintln!("skipping the ENOSPC part: cannot mount a loop device here");
        return;
    };
    let big_src = d.path().join("bigsrc");
    std::fs::create_dir_all(&big_src).unwrap();
    std::fs::write(big_src.join("big"), vec![7u8; 40 << 20]).unwrap();
    std::fs::write(big_src.join("small"), b"small").unwrap();
    let out = send_paths(std::slice::from_ref(&big_src), &rsh(&mnt.join("d")), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", err_of(&out));
    let s = sent(&out);
    let f = s["failed"][0].as_str().unwrap();
    assert!(f.contains("bigsrc/big") && f.contains("free"), "{s}");
    assert_eq!(std::fs::read(mnt.join("d/bigsrc/small")).unwrap(), b"small");
    assert!(
        !mnt.join("d/.stripeguard-partial").exists(),
        "the failed file's partial is removed"
    );

    // EROFS: a read-only directory inside DIR fails the files that go into it, alone.
    let ro = mnt.join("d/bigsrc/ro");
    std::fs::create_dir_all(&ro).unwrap();
    ok(&Command::new("mount")
        .args(["--bind"])
        .arg(&ro)
        .arg(&ro)
        .output()
        .unwrap());
    let _u2 = Mounted(ro.clone());
    ok(&Command::new("mount")
        .args(["-o", "remount,ro,bind"])
        .arg(&ro)
        .arg(&ro)
        .output()
        .unwrap());
    std::fs::remove_file(big_src.join("big")).unwrap();
    std::fs::create_dir_all(big_src.join("ro")).unwrap();
    std::fs::write(big_src.join("ro/inside"), b"i").unwrap();
    std::fs::write(big_src.join("other"), b"o").unwrap();
    let out = send_paths(std::slice::from_ref(&big_src), &rsh(&mnt.join("d")), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", err_of(&out));
    let s = sent(&out);
    assert!(
        s["failed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().contains("bigsrc/ro/inside")),
        "{s}"
    );
    assert_eq!(std::fs::read(mnt.join("d/bigsrc/other")).unwrap(), b"o");
}

/// B6: an entry whose type changed between runs (dir → file, file → dir, symlink → dir)
/// lands; a directory that still holds entries is not replaced and fails alone. Before: every
/// later run was blocked.
#[test]
fn an_entry_whose_type_changed_between_runs_lands() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("a")).unwrap();
    std::fs::write(src.join("b"), b"b").unwrap();
    std::os::unix::fs::symlink("b", src.join("c")).unwrap();
    let dst = d.path().join("dst");
    ok(&send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]));
    std::fs::remove_dir(src.join("a")).unwrap();
    std::fs::write(src.join("a"), b"now a file").unwrap();
    std::fs::remove_file(src.join("b")).unwrap();
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("b/inner"), b"in").unwrap();
    std::fs::remove_file(src.join("c")).unwrap();
    std::fs::create_dir_all(src.join("c")).unwrap();
    let out = send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]);
    ok(&out);
    same_tree(&src, &dst.join("src"));
    // A directory with entries in the way of a file: that file fails alone.
    std::fs::create_dir_all(dst.join("src/z")).unwrap();
    std::fs::write(dst.join("src/z/keep"), b"k").unwrap();
    std::fs::write(src.join("z"), b"file").unwrap();
    let out = send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", err_of(&out));
    assert!(sent(&out)["failed"][0]
        .as_str()
        .unwrap()
        .contains("holds entries"));
    // Finding 10: the file that could not land leaves no partial behind.
    assert!(!dst.join(".stripeguard-partial").exists());
    assert_eq!(std::fs::read(dst.join("src/z/keep")).unwrap(), b"k");
}

/// A run killed after landing a file and before removing its progress left a `.progress` in
/// the partial directory; a later run that finds the file already here (and skips it) removes
/// it, so a complete run leaves no partial directory. Before: the progress stayed for good
/// (the kill -9 attack test saw "DIR/.stripeguard-partial is left after a complete run").
#[test]
fn a_progress_left_beside_a_landed_file_goes_when_the_file_is_skipped() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), vec![7u8; 300_000]).unwrap();
    let dst = d.path().join("dst");
    ok(&send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]));
    let partial = dst.join(".stripeguard-partial");
    std::fs::create_dir_all(&partial).unwrap();
    let stale = partial.join(format!(
        "{}.progress",
        stripeguard_xfer::beneath::partial_key(b"src/a")
    ));
    std::fs::write(&stale, b"left by a killed run").unwrap();
    let out = send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]);
    ok(&out);
    assert_eq!(received(&out)["skipped"], 1, "{}", err_of(&out));
    assert!(!stale.exists(), "the stale progress is still there");
    assert!(
        !partial.exists(),
        "the partial directory is left after a complete run"
    );
    same_tree(&src, &dst.join("src"));
}

/// B7: a source tree that holds other partials (`.x.sgpart`, `.x.sgpart.progress`, as left by
/// an interrupted receive of an earlier version) is sent like any other. Before: refused.
#[test]
fn a_source_with_partial_names_is_sent() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join(".d.sgpart")).unwrap();
    std::fs::write(src.join(".x.sgpart"), b"x").unwrap();
    std::fs::write(src.join(".x.sgpart.progress"), b"p").unwrap();
    let dst = d.path().join("dst");
    ok(&send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]));
    same_tree(&src, &dst.join("src"));
}

/// B8: a manifest holds any name (a newline, bytes that are not UTF-8, spaces) and
/// `verify-manifest` checks it; a symlinked directory inside DIR is not followed out of it.
#[test]
fn manifests_hold_any_name_and_never_follow_a_symlink() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join(name(b"new\nline")), b"nl").unwrap();
    std::fs::write(src.join(name(b"sp ace\xff")), b"sp").unwrap();
    let dst = d.path().join("dst");
    let manifest = d.path().join("manifest");
    ok(&send_paths(
        std::slice::from_ref(&src),
        &rsh(&dst),
        &["--manifest", manifest.to_str().unwrap()],
    ));
    let vm = |dir: &Path, m: &Path| {
        Command::new(sg_bin())
            .arg("verify-manifest")
            .arg(dir)
            .arg(m)
            .output()
            .unwrap()
    };
    let out = vm(&dst, &manifest);
    ok(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("2 file(s) checked"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // DIR/t -> outside: a manifest naming t/f must not be checked through the link (before,
    // verify-manifest followed it and called the outside file intact).
    let outside = d.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("f"), b"outside").unwrap();
    let m2 = d.path().join("m2");
    let scratch_dst = d.path().join("scratch-dst");
    ok(&send_paths(
        &[outside.join("f")],
        &rsh(&scratch_dst),
        &["--manifest", m2.to_str().unwrap()],
    ));
    let text = std::fs::read_to_string(&m2)
        .unwrap()
        .replace(" f\n", " t/f\n");
    std::fs::write(&m2, text).unwrap();
    std::os::unix::fs::symlink(&outside, dst.join("t")).unwrap();
    let out = vm(&dst, &m2);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("symlink"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// B9: `--ssh host:~/x` lands in the remote home's x, as with scp and rsync (before: a
/// directory literally named `~`).
#[test]
fn ssh_tilde_means_the_remote_home() {
    let d = scratch();
    let home = d.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let fake = d.path().join("fake-ssh");
    // A stand-in for ssh: drops the host and runs the command in a shell with HOME set, from a
    // directory of its own (where an unexpanded `~` would appear).
    let cwd = d.path().join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nshift\ncd {}\nHOME={} exec sh -c \"$*\"\n",
            cwd.display(),
            home.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"f").unwrap();
    let out = Command::new(sg_bin())
        .arg("send")
        .arg(&src)
        .args([
            "--ssh",
            "somehost:~/x y",
            "--remote-stripeguard",
            sg_bin(),
            "--rsh",
        ])
        .arg(&fake)
        .output()
        .unwrap();
    ok(&out);
    assert_eq!(std::fs::read(home.join("x y/src/f")).unwrap(), b"f");
    assert!(!cwd.join("~").exists());
}

/// B12: no build reads a test hook from its environment (before: `STRIPEGUARD_XFER_TEST_HOOK`
/// ran a command per block in the release binary).
#[test]
fn the_environment_cannot_make_the_receiver_run_a_command() {
    let d = scratch();
    let marker = d.path().join("marker");
    let hook = d.path().join("hook");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), vec![3u8; 100_000]).unwrap();
    let r = format!(
        "STRIPEGUARD_XFER_TEST_HOOK={} {}",
        hook.display(),
        rsh(&d.path().join("dst"))
    );
    ok(&send_paths(&[src], &r, &[]));
    assert!(
        !marker.exists(),
        "the receiver ran a command named by its environment"
    );
}

fn header(id: u32, path: &str, size: u64, block_size: u32) -> Vec<u8> {
    stripeguard_xfer::proto::FileHeader {
        id,
        kind: 0,
        path: path.into(),
        size,
        mode: 0o644,
        mtime_s: 0,
        mtime_ns: 0,
        target: Vec::new(),
        block_size,
        hash: [0; 32],
        attrs: Default::default(),
    }
    .encode()
}

/// A raw stream into `recv --stdio --json`.
fn raw_recv(dst: &Path, stream: &[u8]) -> std::process::Output {
    let mut c = Command::new(sg_bin())
        .args(["recv", "--stdio", "--json", "--dir"])
        .arg(dst)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    let _ = c.stdin.take().unwrap().write_all(stream);
    c.wait_with_output().unwrap()
}

fn hello() -> Vec<u8> {
    stripeguard_xfer::proto::hello_bytes(0).to_vec()
}

/// A sender's hello and its OPTIONS frame (asking nothing), as every session opens.
fn opening() -> Vec<u8> {
    let o = stripeguard_xfer::proto::Options::default().encode();
    [hello(), frame(stripeguard_xfer::proto::T_OPTIONS, &o)].concat()
}

/// S6, B15: a FILE frame claiming 2^40 bytes in 4 KiB blocks, or a block size of 1, is refused
/// (that entry alone) before anything is allocated or created; DONE with a file still open
/// counts it failed. Before: an 8 GiB allocation aborted the receiver (exit 134) and left a
/// 1 TiB sparse partial; a DONE mid-file reported "0 failed".
#[test]
fn hostile_sizes_are_refused_before_allocation_and_an_early_done_counts() {
    let d = scratch();
    let dst = d.path().join("dst");
    let stream = [
        opening(),
        frame(1, &header(1, "huge", 1 << 40, 4096)),
        frame(1, &header(2, "tiny-blocks", 100, 1)),
        frame(1, &header(3, "open", 8192, 4096)),
        frame(7, &[]),
    ]
    .concat();
    let out = raw_recv(&dst, &stream);
    let r = received(&out);
    assert_eq!(out.status.code(), Some(1), "{}", err_of(&out));
    let failed: Vec<String> = r["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert_eq!(failed.len(), 3, "{r}");
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("huge:") && f.contains("blocks")),
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("tiny-blocks:") && f.contains("block size 1")),
        "{failed:?}"
    );
    assert!(
        failed
            .iter()
            .any(|f| f.starts_with("open:") && f.contains("before it was complete")),
        "{failed:?}"
    );
    // Nothing large was created: the only partial is the open file's 8 KiB.
    let total: u64 = std::fs::read_dir(dst.join(".stripeguard-partial"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.metadata().unwrap().len())
                .sum()
        })
        .unwrap_or(0);
    assert!(total <= 8192, "{total} bytes of partials");
}

/// A receiver written in a few lines of Python: its hello, then (once the sender's OPTIONS
/// frame is in and its first FILE frame has begun) `frames`.
fn fake_receiver(d: &Path, frames: &[u8]) -> String {
    let blob = d.join("frames.bin");
    std::fs::write(&blob, [hello(), frames.to_vec()].concat()).unwrap();
    let py = d.join("fake.py");
    std::fs::write(
        &py,
        format!(
            "import sys,os,time\nsys.stdin.buffer.read(10)\nsys.stdout.buffer.write(open('{0}','rb').read(10))\nsys.stdout.flush()\nsys.stdin.buffer.read(19)\nsys.stdin.buffer.read(5)\nsys.stdout.buffer.write(open('{0}','rb').read()[10:])\nsys.stdout.flush()\ntime.sleep(2)\n",
            blob.display()
        ),
    )
    .unwrap();
    format!("python3 {}", py.display())
}

/// B16: the sender prints a peer's ERROR without its escape codes, and refuses a BLOCK_RESULT
/// for a block it never sent (before: block 10^12 counted as block 0's result).
#[test]
fn a_hostile_receiver_is_caught_and_its_text_is_made_harmless() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), vec![1u8; 10_000]).unwrap();
    let out = send_paths(
        &[src.join("f")],
        &fake_receiver(d.path(), &frame(8, b"bad \x1b[2J\x1b]0;owned\x07 news")),
        &[],
    );
    assert_eq!(out.status.code(), Some(5), "{}", err_of(&out));
    let err = err_of(&out);
    assert!(
        err.contains("bad") && !err.contains('\x1b') && !err.contains('\x07'),
        "{err:?}"
    );

    let mut reply = 0u32.to_le_bytes().to_vec();
    reply.push(0);
    reply.extend_from_slice(&0u32.to_le_bytes());
    let mut result = 0u32.to_le_bytes().to_vec();
    result.extend_from_slice(&1_000_000_000_000u64.to_le_bytes());
    result.push(1);
    let out = send_paths(
        &[src.join("f")],
        &fake_receiver(d.path(), &[frame(2, &reply), frame(4, &result)].concat()),
        &[],
    );
    assert_eq!(out.status.code(), Some(5), "{}", err_of(&out));
    assert!(err_of(&out).contains("not in flight"), "{}", err_of(&out));
}

/// B13, B14: `recv` checks DIR before it listens (before: it listened on a directory it could
/// not write until a sender came); a receiver that vanishes is reported as such (before:
/// "failed to fill whole buffer").
#[test]
fn a_bad_directory_is_found_at_start_and_a_vanished_peer_is_named() {
    let d = scratch();
    let file = d.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let sock = d.path().join("s.sock");
    let mut c = Command::new(sg_bin())
        .args(["recv", "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .arg("--dir")
        .arg(file.join("sub"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while c.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = c.kill();
            panic!("recv listened on a directory it cannot create");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = c.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", err_of(&out));
    assert!(err_of(&out).contains("a-file"), "{}", err_of(&out));
    assert!(!sock.exists());

    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"f").unwrap();
    let out = send_paths(&[src], "head -c 10 >/dev/null", &[]);
    assert_eq!(out.status.code(), Some(5), "{}", err_of(&out));
    let err = err_of(&out);
    assert!(
        err.contains("closed") && !err.contains("fill whole buffer"),
        "{err}"
    );
}

/// B16: sender and receiver count the same entries the same way in `--json`.
#[test]
fn both_ends_count_the_same() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    for i in 0..7 {
        std::fs::write(src.join(format!("sub/f{i}")), vec![i as u8; 1000 * i]).unwrap();
    }
    std::os::unix::fs::symlink("sub", src.join("link")).unwrap();
    let dst = d.path().join("dst");
    let out = send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]);
    ok(&out);
    let (s, r) = (sent(&out), received(&out));
    for k in ["files", "dirs", "symlinks", "skipped"] {
        assert_eq!(s[k], r[k], "{k}: sender {s} receiver {r}");
    }
    assert_eq!(
        (
            s["files"].as_u64(),
            s["dirs"].as_u64(),
            s["symlinks"].as_u64()
        ),
        (Some(7), Some(3), Some(1))
    );
}

/// Outside attack, finding 6: a file already under its name is skipped only if its owner and
/// mode are the ones the receiver would give it (before: a received file chmodded 0666, or
/// swapped for another user's copy held open, counted as "already there and verified").
#[test]
fn a_file_with_the_wrong_mode_is_not_skipped() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"content").unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    std::fs::set_permissions(src.join("f"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let dst = d.path().join("dst");
    ok(&send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]));
    std::fs::set_permissions(dst.join("src/f"), std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]);
    ok(&out);
    assert_eq!(sent(&out)["files"], 1, "sent again, not skipped");
    assert_eq!(
        std::fs::metadata(dst.join("src/f")).unwrap().mode() & 0o7777,
        0o640
    );
}

/// Outside attack, findings 7 and 8: a directory's `user.*` xattrs arrive (before: silently
/// dropped); a connection that cannot be made is "the transfer failed", exit 5 (before: 2).
#[test]
fn directory_xattrs_arrive_and_a_refused_connection_exits_5() {
    let d = scratch();
    let key = d.path().join("key");
    common::xfer::keygen(&key);
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let out = Command::new(sg_bin())
        .arg("send")
        .arg(&src)
        .args(["--to", "127.0.0.1:1", "--key-file"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", err_of(&out));
    if !have("setfattr")
        || !Command::new("setfattr")
            .args(["-n", "user.sg", "-v", "dir"])
            .arg(&src)
            .status()
            .is_ok_and(|s| s.success())
    {
        eprintln!("skipping the xattr part: setfattr or user xattrs are not available here");
        return;
    }
    let dst = d.path().join("dst");
    let r = format!("{} --xattrs", rsh(&dst));
    ok(&send_paths(std::slice::from_ref(&src), &r, &["--xattrs"]));
    let got = Command::new("getfattr")
        .args(["--only-values", "-n", "user.sg"])
        .arg(dst.join("src"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&got.stdout), "dir");
}

/// Outside attack, finding 5: blocks a hostile sender got verified in one session (under a
/// hash of its choosing) are read back from the device and checked against the file hash
/// when a later session resumes them (before: an honest second run reported the file
/// complete with the first sender's bytes in it).
#[test]
fn a_resumed_partial_cannot_be_poisoned_by_an_earlier_sender() {
    let d = scratch();
    let a = vec![b'A'; 4096];
    let b = vec![b'B'; 4096];
    let c = vec![b'C'; 4096];
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), [a.clone(), c].concat()).unwrap();
    let hashes = {
        let f = std::fs::File::open(src.join("f")).unwrap();
        stripeguard_xfer::send::block_hashes(&f, 8192, 4096).unwrap()
    };
    let hb = {
        std::fs::write(d.path().join("b"), &b).unwrap();
        let f = std::fs::File::open(d.path().join("b")).unwrap();
        stripeguard_xfer::send::block_hashes(&f, 4096, 4096).unwrap()[0]
    };
    let mtime = std::fs::metadata(src.join("f")).unwrap();
    use std::os::unix::fs::MetadataExt;
    let header = stripeguard_xfer::proto::FileHeader {
        id: 1,
        kind: 0,
        path: b"src/f".to_vec(),
        size: 8192,
        mode: mtime.mode(),
        mtime_s: mtime.mtime(),
        mtime_ns: mtime.mtime_nsec() as u32,
        target: Vec::new(),
        block_size: 4096,
        hash: stripeguard_xfer::send::hash_of_list(&hashes),
        attrs: Default::default(),
    }
    .encode();
    let block = |h: &[u8; 32], data: &[u8]| {
        let mut p = stripeguard_xfer::proto::encode_block_header(1, 0, h, data.len());
        p.extend_from_slice(data);
        frame(3, &p)
    };
    let mut dir_frame = stripeguard_xfer::proto::FileHeader {
        id: 2,
        kind: 1,
        path: b"src".to_vec(),
        size: 0,
        mode: 0o755,
        mtime_s: 0,
        mtime_ns: 0,
        target: Vec::new(),
        block_size: 4096,
        hash: [0; 32],
        attrs: Default::default(),
    };
    dir_frame.id = 2;
    let dst = d.path().join("dst");
    let stream = [
        opening(),
        frame(1, &dir_frame.encode()),
        frame(1, &header),
        block(&hashes[0], &a),
        block(&hb, &b),
        frame(7, &[]),
    ]
    .concat();
    let _ = raw_recv(&dst, &stream);
    let out = send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]);
    if out.status.success() {
        assert_eq!(
            std::fs::read(dst.join("src/f")).unwrap(),
            std::fs::read(src.join("f")).unwrap(),
            "a file reported landed holds other bytes"
        );
    } else {
        assert!(!dst.join("src/f").exists(), "{}", err_of(&out));
    }
    // A third run lands it whole.
    ok(&send_paths(std::slice::from_ref(&src), &rsh(&dst), &[]));
    assert_eq!(
        std::fs::read(dst.join("src/f")).unwrap(),
        std::fs::read(src.join("f")).unwrap()
    );
}

/// Outside attack, finding 11: `recv --listen unix:PATH` stopped by SIGTERM removes its socket
/// (before: the socket file stayed behind).
#[test]
fn a_listening_receiver_stopped_by_sigterm_removes_its_socket() {
    let d = scratch();
    let sock = d.path().join("r.sock");
    let mut c = Command::new(sg_bin())
        .args(["recv", "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .arg("--dir")
        .arg(d.path().join("dst"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(sock.exists(), "the receiver never listened");
    std::thread::sleep(std::time::Duration::from_millis(200));
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(c.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while c.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > until {
            let _ = c.kill();
            panic!("recv ignored SIGTERM");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = c.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(143), "{}", err_of(&out));
    assert!(!sock.exists(), "the socket stayed behind");
}

/// `send ... | true`: a closed standard output after the transfer ends the sender quietly (by
/// SIGPIPE, as it ends `cat`), never with a panic.
#[test]
fn a_closed_stdout_ends_the_sender_quietly() {
    let d = scratch();
    let src = d.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"f").unwrap();
    let cmd = format!(
        "{} send {} --json --rsh '{}' | true",
        sg_bin(),
        src.display(),
        rsh(&d.path().join("dst"))
    );
    let out = Command::new("bash")
        .args(["-c", &format!("{cmd}; exit ${{PIPESTATUS[0]}}")])
        .output()
        .unwrap();
    let err = err_of(&out);
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        matches!(out.status.code(), Some(0) | Some(141)),
        "{:?} {err}",
        out.status
    );
    assert_eq!(std::fs::read(d.path().join("dst/src/f")).unwrap(), b"f");
}

/// A file whose extended attributes exceed what a FILE frame carries (256 KiB, FORMAT.md §5)
/// fails alone with that reason; the session and the other files go on (before: the sender
/// sent the frame and the receiver ended the whole session as malformed). Needs an XFS loop
/// mount: ext4 keeps a file's xattrs within one block.
#[test]
fn a_file_with_more_xattrs_than_a_frame_carries_fails_alone() {
    if !is_root() || !have("mkfs.xfs") || !have("setfattr") {
        eprintln!("skipping: it needs root, mkfs.xfs and setfattr");
        return;
    }
    let d = scratch();
    let img = d.path().join("xfs.img");
    std::fs::File::create(&img)
        .unwrap()
        .set_len(320 << 20)
        .unwrap();
    ok(&Command::new("mkfs.xfs")
        .args(["-q", "-f"])
        .arg(&img)
        .output()
        .unwrap());
    let mnt = d.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let Some(_u) = mount(&["-o".as_ref(), "loop".as_ref(), img.as_os_str()], &mnt) else {
        eprintln!("skipping: cannot mount a loop device here");
        return;
    };
    let src = mnt.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("heavy"), b"h").unwrap();
    std::fs::write(src.join("light"), b"l").unwrap();
    let value = "x".repeat(60_000);
    for i in 0..5 {
        ok(&Command::new("setfattr")
            .args(["-n", &format!("user.big{i}"), "-v", &value])
            .arg(src.join("heavy"))
            .output()
            .unwrap());
    }
    let dst = d.path().join("dst");
    let r = format!("{} --xattrs", rsh(&dst));
    let out = send_paths(std::slice::from_ref(&src), &r, &["--xattrs"]);
    assert_eq!(out.status.code(), Some(1), "{}", err_of(&out));
    let s = sent(&out);
    let f = s["failed"][0].as_str().unwrap();
    assert!(
        f.contains("src/heavy") && f.contains("extended attributes"),
        "{s}"
    );
    assert_eq!(std::fs::read(dst.join("src/light")).unwrap(), b"l");
}
