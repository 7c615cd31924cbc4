//! The control socket (FORMAT.md §3) is mode 0600 whatever the process's umask, set at bind
//! (the negative control: under umask 0 a plain bind makes it 0777, so any local user could ask
//! a root holder to replace a member onto a path of their choosing), and it still answers its
//! holder's user.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use stripeguard_disk::{DiskRef, MemDisk};
use stripeguard_engine::{Array, ArrayConfig};
use stripeguard_integrity::Scheme;
use stripeguard_ops::{control_socket_path, with_control_socket};

#[test]
fn the_control_socket_is_the_holders_alone_whatever_the_umask() {
    let cfg = ArrayConfig::new(2, 1, Scheme::HybridSeq, 4096, 8);
    let members: Vec<DiskRef> = (0..3)
        .map(|i| Arc::new(MemDisk::new(format!("m{i}"), cfg.member_bytes())) as DiskRef)
        .collect();
    let array = Array::create(members, &cfg, true, &mut |_, _| {}).unwrap();
    let path = control_socket_path(&array.superblock().array_uuid);
    let old = rustix::process::umask(rustix::fs::Mode::from_raw_mode(0));
    let (mode, reply) = with_control_socket(&array, || {
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"status\n").unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        (mode, line)
    });
    rustix::process::umask(old);
    assert_eq!(mode, 0o600, "the socket's mode is {mode:o}");
    assert!(reply.contains("\"pid\""), "{reply}");
    assert!(
        !path.exists(),
        "the socket is removed when the holder finishes"
    );
    array.close().unwrap();
}
