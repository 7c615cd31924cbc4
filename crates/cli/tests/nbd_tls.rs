//! `serve --tls-certificates DIR` (issue 37 §4): TLS with client certificates, tested with real
//! clients (libnbd's nbdinfo and nbdcopy, qemu-img) on certificates made here (rcgen): a client
//! with a certificate from the configured CA reads and writes byte for byte; a plaintext client,
//! one without a certificate and one whose certificate another CA signed are refused; and
//! `--allow-remote` without TLS is refused unless `--no-tls` says so.

mod common;

use common::{free_port, have, ok, sg};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A CA, and certificates it signs.
struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, name.to_string());
        p.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let cert = p.self_signed(&key).unwrap();
        Ca { cert, key }
    }

    /// (certificate PEM, key PEM) for a server (`localhost`, 127.0.0.1) or a client.
    fn issue(&self, server: bool) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let names: Vec<String> = if server {
            vec!["localhost".into(), "127.0.0.1".into()]
        } else {
            vec![]
        };
        let mut p = rcgen::CertificateParams::new(names).unwrap();
        p.distinguished_name.push(
            rcgen::DnType::CommonName,
            if server { "localhost" } else { "client" },
        );
        p.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

/// A credentials directory as libnbd, qemu and `serve` read it.
fn creds(dir: &Path, ca: &Ca, side: Option<(&str, (String, String))>) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("ca-cert.pem"), ca.cert.pem()).unwrap();
    if let Some((who, (cert, key))) = side {
        std::fs::write(dir.join(format!("{who}-cert.pem")), cert).unwrap();
        std::fs::write(dir.join(format!("{who}-key.pem")), key).unwrap();
    }
}

struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

fn serve(d: &Path, args: &[&str]) -> Served {
    let child = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args(["serve", "m0", "m1", "m2", "m3"])
        .args(args)
        .current_dir(d)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Served(child)
}

fn wait_tcp(port: u16) {
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "serve did not listen"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn nbdinfo(uri: &str) -> (bool, String) {
    let out = Command::new("nbdinfo")
        .args(["--json", uri])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn tls_with_client_certificates_lets_in_only_the_cas_clients() {
    if !have("nbdinfo") || !have("nbdcopy") {
        eprintln!("skipping: nbdinfo/nbdcopy (libnbd-bin) are not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&["create", "m0", "m1", "m2", "m3", "--size", "4M"], d));
    let ca = Ca::new("stripeguard test CA");
    let other = Ca::new("another CA");
    creds(&d.join("server"), &ca, Some(("server", ca.issue(true))));
    creds(&d.join("client"), &ca, Some(("client", ca.issue(false))));
    creds(
        &d.join("stranger"),
        &ca,
        Some(("client", other.issue(false))),
    );
    creds(&d.join("nocert"), &ca, None);

    // A bad credentials directory is refused before the array is touched.
    let bad = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args([
            "serve",
            "m0",
            "m1",
            "m2",
            "m3",
            "--tls-certificates",
            "nocert",
        ])
        .current_dir(d)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("server-cert.pem"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let _held = serve(d, &["--listen", &listen, "--tls-certificates", "server"]);
    wait_tcp(port);
    let uri = |creds: &str| {
        format!(
            "nbds://localhost:{port}/?tls-certificates={}",
            d.join(creds).display()
        )
    };
    let (ok, said) = nbdinfo(&uri("client"));
    assert!(ok, "{said}");
    let v: serde_json::Value = serde_json::from_str(&said).unwrap();
    assert_eq!(v["TLS"], true, "{said}");
    assert_eq!(v["structured"], true, "{said}");
    // Bytes through the session, both ways, byte for byte (3 MiB: many TLS records).
    let data: Vec<u8> = (0..3u32 << 20)
        .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[1])
        .collect();
    std::fs::write(d.join("in"), &data).unwrap();
    let copy = |from: &str, to: &str| {
        let out = Command::new("nbdcopy").args([from, to]).output().unwrap();
        assert!(
            out.status.success(),
            "nbdcopy {from} {to}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    copy(d.join("in").to_str().unwrap(), &uri("client"));
    copy(&uri("client"), d.join("out").to_str().unwrap());
    let back = std::fs::read(d.join("out")).unwrap();
    assert_eq!(&back[..data.len()], &data[..]);
    // Refused: plaintext, no client certificate, a certificate of another CA.
    let (ok, said) = nbdinfo(&format!("nbd://localhost:{port}/"));
    assert!(!ok, "a plaintext client got in: {said}");
    let (ok, said) = nbdinfo(&uri("nocert"));
    assert!(!ok, "a client without a certificate got in: {said}");
    let (ok, said) = nbdinfo(&uri("stranger"));
    assert!(!ok, "another CA's client got in: {said}");
    // qemu-img, the other client family, over the same TLS.
    if have("qemu-img") {
        let out = Command::new("qemu-img")
            .args([
                "info",
                "--object",
                &format!(
                    "tls-creds-x509,id=tls0,endpoint=client,dir={}",
                    d.join("client").display()
                ),
                "--image-opts",
                &format!("driver=nbd,server.type=inet,server.host=localhost,server.port={port},tls-creds=tls0"),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "qemu-img over TLS: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn allow_remote_needs_tls_or_says_no_tls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    ok(&sg(&["create", "m0", "m1", "m2", "m3", "--size", "1M"], d));
    let port = free_port();
    let listen = format!("0.0.0.0:{port}");
    let out = Command::new(env!("CARGO_BIN_EXE_stripeguard"))
        .args([
            "serve",
            "m0",
            "m1",
            "m2",
            "m3",
            "--listen",
            &listen,
            "--allow-remote",
        ])
        .current_dir(d)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--tls-certificates"), "{said}");
    let _held = serve(d, &["--listen", &listen, "--allow-remote", "--no-tls"]);
    wait_tcp(port);
}

/// A remote member over TLS (`nbds://HOST:PORT/?tls-certificates=DIR`): nbdkit's file plugin
/// serves a member file with `--tls=require --tls-verify-peer`; the array is made, written and
/// read back through it byte for byte; the same member with another CA's client certificate is
/// refused with the TLS failure named.
#[test]
fn a_remote_member_over_tls() {
    if !have("nbdkit") {
        eprintln!("skipping: nbdkit is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = Ca::new("stripeguard test CA");
    let other = Ca::new("another CA");
    creds(&d.join("server"), &ca, Some(("server", ca.issue(true))));
    creds(&d.join("client"), &ca, Some(("client", ca.issue(false))));
    creds(
        &d.join("stranger"),
        &ca,
        Some(("client", other.issue(false))),
    );
    let f = std::fs::File::create(d.join("remote")).unwrap();
    f.set_len(4 << 20).unwrap();
    drop(f);
    let port = free_port();
    let mut nbdkit = Command::new("nbdkit")
        .args([
            "-f",
            "-p",
            &port.to_string(),
            "-i",
            "127.0.0.1",
            "--tls=require",
        ])
        .arg(format!("--tls-certificates={}", d.join("server").display()))
        .args(["--tls-verify-peer", "file"])
        .arg(d.join("remote"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_tcp(port);
    let member = |creds: &str| {
        format!(
            "nbds://localhost:{port}/?tls-certificates={}",
            d.join(creds).display()
        )
    };
    let good = member("client");
    let out = sg(&["create", "m0", "m1", "m2", &good, "--size", "4M"], d);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| i.wrapping_mul(2_246_822_519).to_le_bytes()[2])
        .collect();
    std::fs::write(d.join("in"), &data).unwrap();
    let out = sg(&["write", "m0", "m1", "m2", &good, "-i", "in"], d);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = sg(
        &[
            "read", "m0", "m1", "m2", &good, "--length", "1048576", "-o", "out",
        ],
        d,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(d.join("out")).unwrap(), data);
    // Another CA's certificate: the member is refused (the array reads on degraded, saying so).
    let out = sg(&["status", "m0", "m1", "m2", &member("stranger")], d);
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("TLS"), "{said}");
    let _ = nbdkit.kill();
    let _ = nbdkit.wait();
}
