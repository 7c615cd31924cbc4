//! What an rsync user reaches for, each against rsync on the same tree (issue "`send`/`recv`
//! complete enough to replace rsync"): hard links (`-H`), `--delete` (only with
//! `recv --allow-delete`, after verification), include/exclude filters, `--dry-run`, fifos and
//! device nodes, `-z`, owners by name and `--numeric-ids`, the block-level delta (bytes sent,
//! measured), `--quick` re-runs, and a daemon with modules. Where rsync is missing the test
//! says so and checks against the expected tree alone.

#![allow(
    clippy::cast_possible_truncation,
    reason = "test values are small and known"
)]

mod common;

use common::xfer::{frame, have, is_root, scratch, sg_bin};
use common::{err_of, ok};
use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a tree holds, comparable across two copies: per relative path its kind, mode,
/// contents (hash), symlink target or device number, and for files with several links the
/// first path of its link group.
fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut groups: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    let mut all = Vec::new();
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(root.join(&rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let r = rel.join(&n);
            let m = std::fs::symlink_metadata(root.join(&r)).unwrap();
            if m.is_dir() {
                stack.push(r.clone());
            }
            all.push((r, m));
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    for (r, m) in all {
        let ft = m.file_type();
        let desc = if ft.is_dir() {
            format!("dir {:o}", m.mode() & 0o7777)
        } else if ft.is_symlink() {
            format!(
                "link -> {}",
                std::fs::read_link(root.join(&r)).unwrap().display()
            )
        } else if ft.is_file() {
            let data = std::fs::read(root.join(&r)).unwrap();
            let group = if m.nlink() > 1 {
                groups
                    .entry((m.dev(), m.ino()))
                    .or_insert_with(|| r.display().to_string())
                    .clone()
            } else {
                String::new()
            };
            format!(
                "file {:o} {} {} group[{group}]",
                m.mode() & 0o7777,
                data.len(),
                blake3::hash(&data).to_hex()
            )
        } else if ft.is_fifo() {
            format!("fifo {:o}", m.mode() & 0o7777)
        } else if ft.is_socket() {
            format!("socket {:o}", m.mode() & 0o7777)
        } else {
            format!(
                "{} {:o} rdev {}",
                if ft.is_char_device() { "char" } else { "block" },
                m.mode() & 0o7777,
                m.rdev()
            )
        };
        out.insert(r.display().to_string(), desc);
    }
    out
}

fn assert_same(a: &Path, b: &Path) {
    let (sa, sb) = (snapshot(a), snapshot(b));
    if sa != sb {
        let mut diff = String::new();
        for k in sa.keys().chain(sb.keys()) {
            if sa.get(k) != sb.get(k) {
                diff.push_str(&format!("  {k}: {:?} vs {:?}\n", sa.get(k), sb.get(k)));
            }
        }
        panic!("{} and {} differ:\n{diff}", a.display(), b.display());
    }
}

fn rsync(args: &[&str], from: &str, to: &Path) -> bool {
    if !have("rsync") {
        eprintln!("rsync is not installed (scripts/install-deps installs it): compared with the expected tree only");
        return false;
    }
    let out = Command::new("rsync")
        .args(args)
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "rsync: {}", err_of(&out));
    true
}

/// `stripeguard send ARGS FROM` into a `recv --stdio --dir TO RECV_ARGS`; its JSON summary.
fn send(args: &[&str], from: &str, to: &Path, recv_args: &str) -> serde_json::Value {
    let out = send_raw(args, from, to, recv_args);
    let text = ok(&out);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).unwrap()
}

fn send_raw(args: &[&str], from: &str, to: &Path, recv_args: &str) -> std::process::Output {
    let rsh = format!(
        "{} recv --stdio --dir {} {recv_args}",
        sg_bin(),
        to.display()
    );
    Command::new(sg_bin())
        .arg("send")
        .args(args)
        .arg(from)
        .args(["--json", "--rsh", &rsh])
        .output()
        .unwrap()
}

fn write(p: &Path, data: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

fn tree(src: &Path) {
    write(&src.join("a.txt"), b"a\n");
    write(&src.join("b.log"), b"b\n");
    write(&src.join("dir/c.txt"), b"c\n");
    write(&src.join("dir/d.log"), &vec![7u8; 300_000]);
    write(&src.join("dir/sub/e.tmp"), b"e\n");
    write(&src.join("dir/sub/f.txt"), b"f\n");
    write(&src.join("cache/big.bin"), &vec![1u8; 100_000]);
    write(&src.join("with space/g h.txt"), b"g\n");
    std::os::unix::fs::symlink("a.txt", src.join("link-to-a")).unwrap();
}

#[test]
fn hard_links_land_as_links_as_rsync_h_does() {
    let d = scratch();
    let src = d.path().join("src");
    tree(&src);
    std::fs::hard_link(src.join("a.txt"), src.join("dir/a-again")).unwrap();
    std::fs::hard_link(src.join("a.txt"), src.join("with space/a3")).unwrap();
    std::fs::hard_link(src.join("dir/d.log"), src.join("d-link")).unwrap();
    let from = format!("{}/", src.display());
    let (ours, theirs) = (d.path().join("ours"), d.path().join("rsync"));
    let s = send(&["-H"], &from, &ours, "");
    assert_eq!(s["hardlinks"], 3, "{s}");
    assert_eq!(s["failed"].as_array().unwrap().len(), 0, "{s}");
    assert_same(&src, &ours);
    if rsync(&["-aH"], &from, &theirs) {
        assert_same(&theirs, &ours);
    }
    // A re-run keeps the links (nothing sent again but what the links' count changes).
    let s = send(&["-H"], &from, &ours, "");
    assert_eq!(s["failed"].as_array().unwrap().len(), 0, "{s}");
    assert_same(&src, &ours);
    // Negative control: without -H the names land as separate files (as rsync -a does).
    let plain = d.path().join("plain");
    send(&[], &from, &plain, "");
    let m1 = std::fs::metadata(plain.join("a.txt")).unwrap();
    let m2 = std::fs::metadata(plain.join("dir/a-again")).unwrap();
    assert_ne!(
        m1.ino(),
        m2.ino(),
        "without -H the links are separate files"
    );
}

#[test]
fn delete_removes_what_the_source_lacks_only_with_the_receivers_consent() {
    let d = scratch();
    let src = d.path().join("src");
    tree(&src);
    let from = format!("{}/", src.display());
    let (ours, theirs) = (d.path().join("ours"), d.path().join("rsync"));
    for dst in [&ours, &theirs] {
        write(&dst.join("stale.txt"), b"old\n");
        write(&dst.join("dir/old/deep.txt"), b"old\n");
        write(&dst.join("dir/keep.log"), b"excluded: protected\n");
        write(&dst.join("gone-dir/x"), b"x\n");
    }
    // Without --allow-delete the receiver refuses the session before anything lands.
    let out = send_raw(&["--delete"], &from, &ours, "");
    assert!(!out.status.success());
    let text = format!("{}{}", err_of(&out), String::from_utf8_lossy(&out.stdout));
    assert!(text.contains("--allow-delete"), "{text}");
    assert!(!ours.join("a.txt").exists(), "nothing landed");
    assert!(ours.join("stale.txt").exists(), "nothing deleted");
    // A dry run lists what would go and changes nothing.
    let before = snapshot(&ours);
    let s = send(
        &["--delete", "--dry-run", "--exclude", "*.log"],
        &from,
        &ours,
        "--allow-delete",
    );
    assert_eq!(snapshot(&ours), before, "--dry-run changed nothing");
    let would: Vec<&str> = s["would_delete"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(would, ["dir/old", "gone-dir", "stale.txt"], "{s}");
    let s = send(
        &["--delete", "--exclude", "*.log"],
        &from,
        &ours,
        "--allow-delete",
    );
    assert_eq!(s["deleted"].as_array().unwrap().len(), 3, "{s}");
    assert!(
        ours.join("dir/keep.log").exists(),
        "an excluded name is protected"
    );
    assert!(!ours.join("stale.txt").exists());
    if rsync(&["-a", "--delete", "--exclude", "*.log"], &from, &theirs) {
        assert_same(&theirs, &ours);
    }
    // An extraneous directory that holds excluded names is kept with them (found by an
    // outside attack: it was deleted whole); the rest of it goes, as with rsync.
    for dst in [&ours, &theirs] {
        write(&dst.join("old2/keep.tmp"), b"k\n");
        write(&dst.join("old2/deeper/k2.tmp"), b"k2\n");
        write(&dst.join("old2/gone.txt"), b"g\n");
        write(&dst.join("old2/sub/all-gone.txt"), b"g\n");
    }
    let s = send(
        &["--delete", "--exclude", "*.log", "--exclude", "*.tmp"],
        &from,
        &ours,
        "--allow-delete",
    );
    assert!(ours.join("old2/deeper/k2.tmp").exists(), "{s}");
    assert!(!ours.join("old2/gone.txt").exists(), "{s}");
    assert!(!ours.join("old2/sub").exists(), "{s}");
    if rsync(
        &["-a", "--delete", "--exclude", "*.log", "--exclude", "*.tmp"],
        &from,
        &theirs,
    ) {
        assert_same(&theirs, &ours);
    }
    // Nothing is deleted when an entry failed (a directory this side could not read would
    // look empty).
    write(&ours.join("stale2.txt"), b"old\n");
    if is_root() {
        // A device node sent to a receiver without --devices fails alone.
        assert!(Command::new("mknod")
            .args([src.join("null").to_str().unwrap(), "c", "1", "3"])
            .status()
            .unwrap()
            .success());
        let out = send_raw(&["--delete", "-D"], &from, &ours, "--allow-delete");
        std::fs::remove_file(src.join("null")).unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("not deleting"));
        assert!(ours.join("stale2.txt").exists(), "deleted after a failure");
    } else {
        let locked = src.join("locked");
        std::fs::create_dir(&locked).unwrap();
        std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .unwrap();
        let out = send_raw(&["--delete"], &from, &ours, "--allow-delete");
        std::fs::set_permissions(&locked, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        assert!(!out.status.success());
        assert!(ours.join("stale2.txt").exists(), "deleted after a failure");
    }
}

#[test]
fn filters_select_the_same_files_as_rsync() {
    let d = scratch();
    let src = d.path().join("src");
    tree(&src);
    let cases: &[&[&str]] = &[
        &["--exclude", "*.log"],
        &["--exclude", "/src/cache/"],
        &["--exclude", "cache"],
        &["--include", "*/", "--include", "*.txt", "--exclude", "*"],
        &["--exclude", "dir/sub"],
        &[
            "--filter",
            "- *.tmp",
            "--filter",
            "+ dir/",
            "--exclude",
            "with space",
        ],
        &["--exclude", "**/e.*"],
        &[
            "--include",
            "dir/***",
            "--exclude",
            "*",
            "--include",
            "a.txt",
        ],
    ];
    for (i, f) in cases.iter().enumerate() {
        for from in [src.display().to_string(), format!("{}/", src.display())] {
            let ours = d.path().join(format!("ours{i}-{}", from.len()));
            let theirs = d.path().join(format!("rsync{i}-{}", from.len()));
            let mut args = vec!["-a"];
            args.extend_from_slice(f);
            send(f, &from, &ours, "");
            std::fs::create_dir_all(&ours).unwrap();
            if rsync(&args, &from, &theirs) {
                std::fs::create_dir_all(&theirs).unwrap();
                assert_same(&theirs, &ours);
            }
        }
    }
    // A bad rule is a usage error naming it.
    let out = send_raw(
        &["--filter", "x y"],
        &src.display().to_string(),
        &d.path().join("bad"),
        "",
    );
    assert!(!out.status.success());
    assert!(err_of(&out).contains("--filter"), "{}", err_of(&out));
}

#[test]
fn a_dry_run_changes_nothing_and_says_what_a_run_would_do() {
    let d = scratch();
    let src = d.path().join("src");
    tree(&src);
    let dst = d.path().join("dst");
    write(&dst.join("src/a.txt"), b"different\n");
    let before = snapshot(&dst);
    let times = |p: &Path| {
        let m = std::fs::metadata(p).unwrap();
        (m.modified().unwrap(), m.mtime_nsec())
    };
    let dir_before = times(&dst);
    let s = send(&["-n"], &src.display().to_string(), &dst, "");
    assert_eq!(snapshot(&dst), before, "a dry run changed the receiver");
    assert_eq!(times(&dst), dir_before, "a dry run changed DIR's times");
    assert!(!dst.join(".stripeguard-partial").exists());
    let would = s["would_send"].as_array().unwrap().len();
    assert!(would >= 10, "{s}");
    // rsync -n on the same tree lists the same entries.
    if have("rsync") {
        let out = Command::new("rsync")
            .args(["-a", "-n", "--out-format=%n"])
            .arg(&src)
            .arg(&dst)
            .output()
            .unwrap();
        let theirs: std::collections::BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim_end_matches('/').to_string())
            .filter(|l| !l.is_empty())
            .collect();
        let ours: std::collections::BTreeSet<String> = s["would_send"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        // rsync also lists directories that exist but whose times it would set ("src/").
        let extra: Vec<_> = ours.difference(&theirs).collect();
        assert!(extra.is_empty(), "we would send {extra:?}, rsync would not");
        let missing: Vec<_> = theirs
            .difference(&ours)
            .filter(|p| !src.parent().unwrap().join(p).is_dir())
            .collect();
        assert!(missing.is_empty(), "rsync would send {missing:?}");
    }
    // The real run does what the dry run said.
    let s = send(&[], &src.display().to_string(), &dst, "");
    assert_eq!(s["failed"].as_array().unwrap().len(), 0, "{s}");
    assert_same(&src, &dst.join("src"));
}

#[test]
fn specials_and_devices_land_as_rsync_d_makes_them() {
    if !have("mkfifo") {
        eprintln!("skipped: no mkfifo");
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    tree(&src);
    assert!(Command::new("mkfifo")
        .arg(src.join("pipe"))
        .status()
        .unwrap()
        .success());
    let _sock = std::os::unix::net::UnixListener::bind(src.join("sock")).unwrap();
    let root = is_root();
    if root {
        assert!(Command::new("mknod")
            .args([src.join("null").to_str().unwrap(), "c", "1", "3"])
            .status()
            .unwrap()
            .success());
    } else {
        eprintln!("not root: device nodes are not checked");
    }
    let from = format!("{}/", src.display());
    // Without --specials they are named and not sent.
    let plain = d.path().join("plain");
    let s = send(&[], &from, &plain, "");
    assert!(s["not_sent"].as_array().unwrap().len() >= 2, "{s}");
    assert!(!plain.join("pipe").exists());
    // A receiver without --devices refuses the device node (and only it).
    let nodev = d.path().join("nodev");
    let out = send_raw(&["-D"], &from, &nodev, "");
    assert!(nodev.join("pipe").exists());
    if root {
        assert!(!out.status.success());
        assert!(
            !nodev.join("null").exists(),
            "a device node made without --devices"
        );
    }
    let (ours, theirs) = (d.path().join("ours"), d.path().join("rsync"));
    let s = send(&["-D"], &from, &ours, "--devices");
    assert_eq!(s["specials"], if root { 3 } else { 2 }, "{s}");
    if rsync(&["-aD"], &from, &theirs) {
        assert_same(&theirs, &ours);
    }
    // A re-run keeps them.
    send(&["-D"], &from, &ours, "--devices");
    assert_same(&src, &ours);
}

#[test]
fn compression_sends_fewer_bytes_and_lands_the_same_tree() {
    let d = scratch();
    let src = d.path().join("src");
    tree(&src);
    let text: Vec<u8> = (0..2_000_000u32)
        .flat_map(|i| format!("line {} of a log\n", i % 977).into_bytes())
        .take(3 << 20)
        .collect();
    write(&src.join("log.txt"), &text);
    let from = format!("{}/", src.display());
    let (plain, packed) = (d.path().join("plain"), d.path().join("packed"));
    let a = send(&[], &from, &plain, "");
    let b = send(&["-z"], &from, &packed, "");
    assert_same(&src, &packed);
    let (wa, wb) = (
        a["wire_bytes"].as_u64().unwrap(),
        b["wire_bytes"].as_u64().unwrap(),
    );
    eprintln!("wire bytes: {wa} plain, {wb} with -z");
    assert!(wb * 4 < wa, "-z sent {wb} bytes, plain {wa}");
}

#[test]
fn owners_map_by_name_unless_numeric_ids() {
    if !is_root() {
        eprintln!("skipped: needs root (chown to other users)");
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    write(&src.join("f"), b"x\n");
    // uid 4242 has no name here; `nobody` (65534) has one on Debian.
    std::os::unix::fs::chown(src.join("f"), Some(65534), Some(65534)).unwrap();
    write(&src.join("g"), b"y\n");
    std::os::unix::fs::chown(src.join("g"), Some(4242), Some(4242)).unwrap();
    let from = format!("{}/", src.display());
    let (ours, numeric) = (d.path().join("ours"), d.path().join("numeric"));
    send(&["--owner"], &from, &ours, "--owner");
    send(&["--owner", "--numeric-ids"], &from, &numeric, "--owner");
    for dst in [&ours, &numeric] {
        let f = std::fs::metadata(dst.join("f")).unwrap();
        let g = std::fs::metadata(dst.join("g")).unwrap();
        assert_eq!(
            (f.uid(), g.uid(), g.gid()),
            (65534, 4242, 4242),
            "{}",
            dst.display()
        );
    }
    let theirs = d.path().join("rsync");
    if rsync(&["-a"], &from, &theirs) {
        let f = std::fs::metadata(theirs.join("g")).unwrap();
        assert_eq!(f.uid(), 4242, "rsync keeps an unnamed id as a number too");
    }
    // A receiver whose host names `nobody` 5555 (its own /etc/passwd, in a mount namespace of
    // its own) maps by name; with --numeric-ids it keeps 65534.
    if !have("unshare") {
        eprintln!("no unshare: the mapping to another host's ids is not checked");
        return;
    }
    write(
        &d.path().join("passwd"),
        b"root:x:0:0::/root:/bin/sh\nnobody:x:5555:5555::/:/bin/false\n",
    );
    write(&d.path().join("group"), b"root:x:0:\nnogroup:x:5555:\n");
    let other_host = |dst: &Path| {
        format!(
            "unshare -m sh -c 'mount --bind {p} /etc/passwd && mount --bind {g} /etc/group && exec {sg} recv --stdio --owner --dir {dst}'",
            p = d.path().join("passwd").display(),
            g = d.path().join("group").display(),
            sg = sg_bin(),
            dst = dst.display()
        )
    };
    let (named, kept) = (d.path().join("named"), d.path().join("kept"));
    for (dst, extra) in [(&named, None), (&kept, Some("--numeric-ids"))] {
        let mut c = Command::new(sg_bin());
        c.args(["send", "--owner", "--json", "--rsh", &other_host(dst)])
            .args(extra)
            .arg(&from);
        ok(&c.output().unwrap());
    }
    let f = std::fs::metadata(named.join("f")).unwrap();
    assert_eq!((f.uid(), f.gid()), (5555, 5555), "mapped by name");
    let g = std::fs::metadata(named.join("g")).unwrap();
    assert_eq!(g.uid(), 4242, "an id without a name stays a number");
    let f = std::fs::metadata(kept.join("f")).unwrap();
    assert_eq!(f.uid(), 65534, "--numeric-ids");
}

#[test]
fn a_changed_file_sends_only_the_blocks_that_differ() {
    let d = scratch();
    let src = d.path().join("src");
    let data: Vec<u8> = (0..8u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    write(&src.join("image.bin"), &data);
    let from = format!("{}/", src.display());
    let dst = d.path().join("dst");
    let first = send(&[], &from, &dst, "");
    assert_eq!(first["blocks_sent"], 32, "{first}");
    // 4 KiB changed in the middle: one 256 KiB block goes, the other 31 are copied on the
    // receiver from the old file (each read back from its device like a sent block).
    let mut changed = data.clone();
    changed[3_000_000..3_004_096].fill(0xaa);
    write(&src.join("image.bin"), &changed);
    let s = send(&[], &from, &dst, "");
    assert_same(&src, &dst);
    assert_eq!(
        (s["blocks_sent"].clone(), s["blocks_copied"].clone()),
        (1.into(), 31.into()),
        "{s}"
    );
    let ours = s["bytes_sent"].as_u64().unwrap();
    // --whole-file (the negative control) sends it all.
    changed[7_000_000] ^= 1;
    write(&src.join("image.bin"), &changed);
    let w = send(&["--whole-file"], &from, &dst, "");
    assert_eq!(w["blocks_sent"], 32, "{w}");
    assert_same(&src, &dst);
    // Data moved by whole blocks is found; data moved by one byte is not (no rolling
    // checksum: said in docs/TRANSFER.md).
    let mut moved = vec![5u8; 256 << 10];
    moved.extend_from_slice(&changed);
    write(&src.join("image.bin"), &moved);
    let m = send(&[], &from, &dst, "");
    assert_eq!(m["blocks_sent"], 1, "a block-aligned insert: {m}");
    assert_same(&src, &dst);
    // rsync's delta on the same change, for the record (its literal data).
    if have("rsync") {
        let r = d.path().join("rsync");
        write(&src.join("image.bin"), &data);
        rsync(&["-a"], &from, &r);
        write(&src.join("image.bin"), &changed_once(&data));
        let out = Command::new("rsync")
            .args(["-a", "-I", "--no-whole-file", "--stats"])
            .arg(&from)
            .arg(&r)
            .output()
            .unwrap();
        let stats = String::from_utf8_lossy(&out.stdout);
        let literal = stats
            .lines()
            .find_map(|l| l.strip_prefix("Literal data: "))
            .unwrap_or("?");
        eprintln!("4 KiB changed in 8 MiB: stripeguard sent {ours} bytes of blocks; rsync --no-whole-file literal data {literal}");
    }
}

fn changed_once(data: &[u8]) -> Vec<u8> {
    let mut c = data.to_vec();
    c[3_000_000..3_004_096].fill(0xaa);
    c
}

#[test]
fn quick_reruns_trust_the_receivers_records_and_only_its_own() {
    let d = scratch();
    let src = d.path().join("src");
    for i in 0..200 {
        let dir = if i < 100 { "f" } else { "g" };
        write(
            &src.join(format!("{dir}/{i:03}")),
            format!("file {i}\n").as_bytes(),
        );
    }
    let from = format!("{}/", src.display());
    let dst = d.path().join("dst");
    let first = send(&["--quick", "1h"], &from, &dst, "");
    assert_eq!(first["files"], 200, "{first}");
    assert!(dst.join(".stripeguard-verified").is_dir());
    let q = send(&["--quick", "1h"], &from, &dst, "");
    assert_eq!(
        (q["trusted"].clone(), q["skipped"].clone()),
        (200.into(), 0.into()),
        "{q}"
    );
    // The default still proves every file from the device.
    let p = send(&[], &from, &dst, "");
    assert_eq!(
        (p["trusted"].clone(), p["skipped"].clone()),
        (0.into(), 200.into()),
        "{p}"
    );
    // A file changed on the receiver behind the record's back (same size, mtime put back):
    // its ctime moved, so it is read, found different, and sent again.
    let victim = dst.join("f/007");
    let mtime = std::fs::metadata(&victim).unwrap().modified().unwrap();
    std::fs::write(&victim, b"FILE 7\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&victim)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    // A record anyone may write is not trusted (g's: its 100 files are read from the device).
    let key = blake3::hash(b"g").as_bytes()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    let rec = dst.join(".stripeguard-verified").join(key);
    assert!(rec.exists(), "the record of directory g");
    std::fs::set_permissions(&rec, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let q = send(&["--quick", "1h"], &from, &dst, "");
    assert_eq!(
        (
            q["trusted"].clone(),
            q["skipped"].clone(),
            q["files"].clone()
        ),
        (99.into(), 100.into(), 1.into()),
        "{q}"
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"file 7\n");
    // Records older than the age given are not trusted.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let old = send(&["--quick", "1s"], &from, &dst, "");
    assert_eq!(old["trusted"], 0, "{old}");
}

#[test]
fn a_daemon_serves_modules_until_stopped() {
    let d = scratch();
    let src = d.path().join("src");
    tree(&src);
    let sock = d.path().join("sock");
    let (m1, m2) = (d.path().join("m1"), d.path().join("m2"));
    let mut daemon = Command::new(sg_bin())
        .args(["recv", "--daemon", "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .arg("--module")
        .arg(format!("photos={}", m1.display()))
        .arg("--module")
        .arg(format!("backups={}", m2.display()))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !sock.exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let to = format!("unix:{}", sock.display());
    let send_to = |module: Option<&str>| {
        let mut c = Command::new(sg_bin());
        c.args(["send", "--json", "--to", &to]).arg(&src);
        if let Some(m) = module {
            c.args(["--module", m]);
        }
        c.output().unwrap()
    };
    for _ in 0..2 {
        ok(&send_to(Some("photos")));
    }
    ok(&send_to(Some("backups")));
    assert_same(&src, &m1.join("src"));
    assert_same(&src, &m2.join("src"));
    let unknown = send_to(Some("music"));
    assert!(!unknown.status.success());
    assert!(
        err_of(&unknown).contains("photos, backups"),
        "{}",
        err_of(&unknown)
    );
    let none = send_to(None);
    assert!(err_of(&none).contains("--module"), "{}", err_of(&none));
    // Still serving after refusals; stopped by SIGTERM, its socket gone.
    ok(&send_to(Some("backups")));
    let pid = rustix::process::Pid::from_raw(daemon.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let st = daemon.wait().unwrap();
    assert_eq!(st.code(), Some(128 + 15));
    assert!(!sock.exists());
    let mut err = String::new();
    use std::io::Read;
    daemon
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    // Over TCP the key rules hold per session: without the key nothing lands.
    let key = d.path().join("key");
    common::xfer::keygen(&key);
    let port = common::xfer::free_port();
    let addr = format!("127.0.0.1:{port}");
    let m3 = d.path().join("m3");
    let mut tcp = Command::new(sg_bin())
        .args(["recv", "--daemon", "--listen", &addr, "--key-file"])
        .arg(&key)
        .arg("--module")
        .arg(format!("docs={}", m3.display()))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let send_tcp = |with_key: bool| {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let mut c = Command::new(sg_bin());
            c.args(["send", "--json", "--module", "docs", "--to", &addr])
                .arg(&src);
            if with_key {
                c.arg("--key-file").arg(&key);
            }
            let out = c.output().unwrap();
            if !err_of(&out).contains("cannot connect") || std::time::Instant::now() > until {
                return out;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let nokey = send_tcp(false);
    assert!(!nokey.status.success(), "{}", err_of(&nokey));
    assert!(err_of(&nokey).contains("key"), "{}", err_of(&nokey));
    assert!(!m3.join("src").exists());
    ok(&send_tcp(true));
    assert_same(&src, &m3.join("src"));
    let _ = tcp.kill();
    let _ = tcp.wait();
    // Six connections, each logged as it came (a session's summary may still be on its way
    // when SIGTERM arrives, so those are not counted).
    assert_eq!(err.matches("stripeguard recv: sender ").count(), 6, "{err}");
}

/// A hostile sender with the key (or on the pipe) cannot delete, list or link outside DIR, or
/// delete the receiver's own state, whatever paths it names; a hard link must name a file that
/// landed in the session.
#[test]
fn a_hostile_sender_cannot_delete_or_link_outside_the_directory() {
    use stripeguard_xfer::proto;
    let d = scratch();
    let dst = d.path().join("dst");
    let outside = d.path().join("outside");
    write(&outside.join("victim"), b"keep me\n");
    write(&dst.join("inside.txt"), b"mine\n");
    write(&dst.join(".stripeguard-verified/planted"), b"state\n");
    std::os::unix::fs::symlink(&outside, dst.join("esc")).unwrap();
    let link = |id: u32, path: &[u8], target: &[u8]| {
        frame(
            proto::T_FILE,
            &proto::FileHeader {
                id,
                kind: proto::KIND_HARDLINK,
                path: path.to_vec(),
                size: 0,
                mode: 0o644,
                mtime_s: 0,
                mtime_ns: 0,
                target: target.to_vec(),
                block_size: 4096,
                hash: [0; 32],
                attrs: Default::default(),
            }
            .encode(),
        )
    };
    let opening = {
        let mut v = proto::hello_bytes(0).to_vec();
        let o = proto::Options {
            flags: proto::OPT_DELETE,
            quick_secs: 0,
            module: Vec::new(),
        };
        v.extend(frame(proto::T_OPTIONS, &o.encode()));
        v
    };
    let recv = |stream: &[u8]| {
        let mut c = Command::new(sg_bin())
            .args(["recv", "--stdio", "--allow-delete", "--dir"])
            .arg(&dst)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        let _ = c.stdin.take().unwrap().write_all(stream);
        let out = c.wait_with_output().unwrap();
        let err = err_of(&out);
        eprintln!("{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_ne!(out.status.code(), Some(0), "{err}");
        err
    };
    // Each path in a session of its own (a path that is not relative ends the session).
    for (i, p) in [
        &b"../outside/victim"[..],
        b"esc/victim",
        b"esc/",
        b".stripeguard-verified",
        b".stripeguard-verified/planted",
        b".stripeguard-partial",
        b"/etc/hostname",
    ]
    .iter()
    .enumerate()
    {
        let mut stream = opening.clone();
        stream.extend(frame(proto::T_LIST, &proto::encode_list(i as u32, p)));
        stream.extend(frame(proto::T_DELETE, &proto::encode_list(i as u32, p)));
        stream.extend(frame(proto::T_DONE, &[]));
        recv(&stream);
        assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"keep me\n");
        assert!(dst.join(".stripeguard-verified/planted").exists());
    }
    // The receiver holds the delete rules itself: not while an entry is in flight.
    let mut stream = opening.clone();
    stream.extend(frame(
        proto::T_FILE,
        &proto::FileHeader {
            id: 9,
            kind: proto::KIND_FILE,
            path: b"incoming".to_vec(),
            size: 10,
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
            target: Vec::new(),
            block_size: 4096,
            hash: [0; 32],
            attrs: Default::default(),
        }
        .encode(),
    ));
    stream.extend(frame(
        proto::T_DELETE,
        &proto::encode_list(0, b"inside.txt"),
    ));
    stream.extend(frame(proto::T_DONE, &[]));
    let err = recv(&stream);
    assert!(err.contains("in flight"), "{err}");
    assert!(dst.join("inside.txt").exists());
    let mut stream = opening.clone();
    stream.extend(link(1, b"hl1", b"../outside/victim"));
    stream.extend(link(2, b"hl2", b"esc/victim"));
    stream.extend(link(3, b"hl3", b"inside.txt"));
    stream.extend(frame(proto::T_DONE, &[]));
    let err = recv(&stream);
    assert!(err.contains("FAILED"), "{err}");
    assert!(dst.join("inside.txt").exists());
    // "esc" itself is a symlink in DIR: removing the link (not what it points to) is allowed.
    for l in ["hl1", "hl2", "hl3"] {
        assert!(
            std::fs::symlink_metadata(dst.join(l)).is_err(),
            "{l} was made: {err}"
        );
    }
    assert_eq!(
        std::fs::metadata(outside.join("victim")).unwrap().nlink(),
        1,
        "a link to a file outside DIR"
    );
}

/// A receiver that answers the hello and then says nothing is given up after `--timeout`
/// (found by an outside attack: the sender waited for ever).
#[test]
fn a_silent_receiver_is_given_up_after_the_timeout() {
    if !have("python3") {
        eprintln!("skipped: no python3");
        return;
    }
    let d = scratch();
    let src = d.path().join("src");
    write(&src.join("f"), b"x\n");
    let fake = "python3 -c 'import sys,time; sys.stdout.buffer.write(b\"SGXF\\x03\\x00\\x00\\x00\\x00\\x00\"); sys.stdout.flush(); time.sleep(60)'";
    let t = std::time::Instant::now();
    // (stderr to a file: the fake's own process keeps a pipe open for its minute.)
    let log = d.path().join("err");
    let st = Command::new(sg_bin())
        .args(["send", "--timeout", "2", "--rsh", fake])
        .arg(&src)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .unwrap();
    let err = std::fs::read_to_string(&log).unwrap();
    assert_eq!(st.code(), Some(5), "{err}");
    assert!(err.contains("--timeout"), "{err}");
    assert!(t.elapsed() < std::time::Duration::from_secs(50));
}

/// A hard link is made to the inode that landed, not to whatever is under the target's name
/// when the link comes (found by an outside attack: a file renamed over the target after it
/// landed was linked, unverified).
#[test]
fn a_hard_link_is_made_only_to_the_file_that_landed() {
    use std::io::Write;
    use stripeguard_xfer::proto;
    let d = scratch();
    let dst = d.path().join("dst");
    std::fs::create_dir_all(&dst).unwrap();
    let data = b"the verified bytes\n";
    let bh = *blake3::hash(data).as_bytes();
    let header = |id: u32, kind: u8, path: &[u8], target: &[u8], hash: [u8; 32]| {
        proto::FileHeader {
            id,
            kind,
            path: path.to_vec(),
            size: if kind == proto::KIND_FILE {
                data.len() as u64
            } else {
                0
            },
            mode: 0o644,
            mtime_s: 0,
            mtime_ns: 0,
            target: target.to_vec(),
            block_size: 4096,
            hash,
            attrs: Default::default(),
        }
        .encode()
    };
    let mut c = Command::new(sg_bin())
        .args(["recv", "--stdio", "--dir"])
        .arg(&dst)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = c.stdin.take().unwrap();
    let mut first = proto::hello_bytes(0).to_vec();
    first.extend(frame(proto::T_OPTIONS, &proto::Options::default().encode()));
    first.extend(frame(
        proto::T_FILE,
        &header(
            1,
            proto::KIND_FILE,
            b"t",
            b"",
            stripeguard_xfer::send::hash_of_list(&[bh]),
        ),
    ));
    let mut block = proto::encode_block_header(1, 0, &bh, data.len());
    block.extend_from_slice(data);
    first.extend(frame(proto::T_BLOCK, &block));
    w.write_all(&first).unwrap();
    w.flush().unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dst.join("t").exists() && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(dst.join("t").exists(), "t did not land");
    // Someone renames other bytes over the landed file; then the link comes.
    std::fs::write(d.path().join("evil"), b"EVIL\n").unwrap();
    std::fs::rename(d.path().join("evil"), dst.join("t")).unwrap();
    let mut rest = frame(
        proto::T_FILE,
        &header(2, proto::KIND_HARDLINK, b"h", b"t", [0; 32]),
    );
    rest.extend(frame(proto::T_DONE, &[]));
    w.write_all(&rest).unwrap();
    drop(w);
    let out = c.wait_with_output().unwrap();
    let err = err_of(&out);
    assert!(
        std::fs::symlink_metadata(dst.join("h")).is_err(),
        "linked to bytes nobody verified: {err}"
    );
    assert!(err.contains("replaced since it landed"), "{err}");
}
