//! `stripeguard examine`: what each member's own metadata says, without assembling the array
//! (md's `--examine`): works on a member of an array that cannot be assembled, and while
//! another process holds it.

use crate::cmd::shared::ago;
use crate::exit;
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_ops::examine;

#[derive(Args)]
pub struct ExamineArgs {
    /// Member files, block devices or NBD URIs (each examined on its own).
    #[arg(required = true)]
    members: Vec<PathBuf>,
    /// Print JSON: one array, an object per member (`error` for one that holds no superblock).
    #[arg(long, conflicts_with = "export")]
    json: bool,
    /// Print KEY=VALUE lines for udev (`IMPORT{program}`, packaging/udev/69-stripeguard.rules):
    /// ID_FS_TYPE=stripeguard_member, ID_FS_UUID, ID_FS_LABEL (the array's name) and
    /// STRIPEGUARD_* fields, so `lsblk -f` and udev rules see members. One member only; exit 1
    /// and nothing printed for a device that is not one.
    #[arg(long)]
    export: bool,
}

pub fn run(a: ExamineArgs) -> Result<ExitCode> {
    if a.export {
        anyhow::ensure!(
            a.members.len() == 1,
            "--export takes one member (udev runs it per device)"
        );
        return Ok(match examine(&a.members[0]) {
            Ok(x) => {
                print!("{}", export(&x));
                ExitCode::from(exit::OK)
            }
            Err(_) => ExitCode::from(exit::FOUND),
        });
    }
    let mut failed = false;
    let mut all = Vec::new();
    for p in &a.members {
        match examine(p) {
            Ok(x) => {
                if !a.json {
                    print(&x);
                }
                all.push(serde_json::to_value(&x)?);
            }
            Err(e) => {
                failed = true;
                if a.json {
                    all.push(serde_json::json!({"path": p.display().to_string(), "error": e.to_string()}));
                } else {
                    eprintln!("stripeguard: {e}");
                }
            }
        }
    }
    if a.json {
        println!("{}", serde_json::Value::Array(all));
    }
    Ok(ExitCode::from(if failed { exit::USAGE } else { exit::OK }))
}

/// udev's `KEY=VALUE` lines: values are shell-safe by construction (hex, digits, and names of
/// `A-Z a-z 0-9 . _ -`).
fn export(x: &stripeguard_ops::Examined) -> String {
    let u = &x.array_uuid;
    let dashed = format!(
        "{}-{}-{}-{}-{}",
        &u[..8],
        &u[8..12],
        &u[12..16],
        &u[16..20],
        &u[20..]
    );
    let mut out = String::new();
    out += "ID_FS_TYPE=stripeguard_member\n";
    out += "ID_FS_USAGE=raid\n";
    out += &format!("ID_FS_UUID={dashed}\nID_FS_UUID_ENC={dashed}\n");
    if !x.name.is_empty() {
        out += &format!("ID_FS_LABEL={0}\nID_FS_LABEL_ENC={0}\n", x.name);
    }
    out += &format!("STRIPEGUARD_ARRAY_UUID={u}\n");
    out += &format!("STRIPEGUARD_ARRAY_NAME={}\n", x.name);
    out += &format!("STRIPEGUARD_MEMBER_INDEX={}\n", x.member_index);
    out += &format!("STRIPEGUARD_MEMBERS={}\n", x.members);
    out += &format!("STRIPEGUARD_EVENT_COUNT={}\n", x.event_count);
    out
}

fn print(x: &stripeguard_ops::Examined) {
    let secs = |ms: u64| ms / 1000;
    println!("{}", x.path);
    println!(
        "  array {}{} member {} of {} ({} data + {} parity, {}), scheme {}, chunk {} bytes, {} stripes",
        x.array_uuid,
        if x.name.is_empty() {
            String::new()
        } else {
            format!(" ({})", x.name)
        },
        x.member_index,
        x.members,
        x.data_chunks,
        x.parity_chunks,
        x.code,
        x.scheme,
        x.chunk_bytes,
        x.stripes
    );
    if let Some(r) = &x.reshape {
        println!(
            "  RESHAPE in progress: from {} members ({} data chunks per stripe) to the geometry above; {} of {} new stripes moved (this member's checkpoint record)",
            r.from_members, r.from_data_chunks, r.done, r.stripes
        );
    }
    if x.truncated {
        println!(
            "  TRUNCATED: {} bytes, shorter than the array needs on each member (it is out of the array until replaced)",
            x.size_bytes
        );
    }
    println!(
        "  state {} (as this member last recorded it), event count {}, created {}",
        x.state,
        x.event_count,
        ago(x.created_unix_seconds)
    );
    let copies: Vec<String> = x
        .copies
        .iter()
        .enumerate()
        .map(|(i, c)| match (c.event_count, &c.error) {
            (Some(g), _) if c.member_index != Some(x.member_index) => format!(
                "copy {i} names member {} (MISDIRECTED here; event count {g})",
                c.member_index.unwrap_or_default()
            ),
            (Some(g), _) => format!("copy {i} valid (event count {g})"),
            (None, why) => format!("copy {i} INVALID ({})", why.as_deref().unwrap_or("?")),
        })
        .collect();
    println!("  superblock: {}", copies.join(", "));
    match &x.owner {
        Some(o) if o.held => println!(
            "  owner: held by process {} on {} ({}), last heartbeat {}",
            o.pid,
            o.host,
            o.command,
            ago(secs(o.heartbeat_ms))
        ),
        Some(o) => println!(
            "  owner: free since {} (last holder {} on {})",
            ago(secs(o.heartbeat_ms)),
            o.pid,
            o.host
        ),
        None => println!("  owner: no record"),
    }
    match x.last_written_ms {
        Some(ms) => println!(
            "  last written {} (the later of the owner's heartbeat and the newest event)",
            ago(secs(ms))
        ),
        None => println!("  last written: unknown (no owner record, no event)"),
    }
    println!(
        "  events: {} in its log{}",
        x.events,
        x.newest_event_ms
            .map(|ms| format!(", newest {}", ago(secs(ms))))
            .unwrap_or_default()
    );
    let table: Vec<String> = x
        .member_table
        .iter()
        .enumerate()
        .map(|(i, s)| {
            format!(
                "{i} {:?} (device {}, event count {})",
                s.state, s.device, s.last_event
            )
            .to_lowercase()
        })
        .collect();
    println!("  member table: {}", table.join("; "));
}
