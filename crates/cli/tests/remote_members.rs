//! Arrays across hosts: members that are qemu-nbd exports in network namespaces. The scenario is
//! the shell script beside this file (namespaces, veths and processes are what it is about);
//! it prints why and passes when root, `ip`, `tc` or qemu-nbd are missing.

#[test]
fn members_on_nbd_servers_in_network_namespaces() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/remote_members.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .env("SG", env!("CARGO_BIN_EXE_stripeguard"))
        .output()
        .expect("run the scenario");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "the scenario failed:\n{text}");
    assert!(
        text.contains("remote members: ok") || text.contains("skipping:"),
        "{text}"
    );
}
