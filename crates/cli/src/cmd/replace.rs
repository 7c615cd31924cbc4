//! `stripeguard replace`: rebuild a member onto a new file or device here, or ask the process
//! holding the array to do it while it serves, and follow its progress.

use crate::cmd::shared::{assemble_or_holder, counters_json, print_events, Held, MembersArgs};
use crate::exit;
use crate::progress::{count_bar, updater};
use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use stripeguard_engine::ReplaceForce;
use stripeguard_ops::{ask_holder, ask_holder_replace, Confirmations, Replacement};

#[derive(Args)]
pub struct ReplaceArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// The member to rebuild (its index: its position in the member list).
    #[arg(long)]
    member: usize,
    /// The new file or block device (a file that does not exist is created at the member size).
    #[arg(long)]
    with: PathBuf,
    /// Retire a healthy member, or abandon an interrupted replace of this slot onto another
    /// device and start over.
    #[arg(long)]
    force: bool,
    /// NEW holds a filesystem, partition table or other signature (found by libblkid): destroy
    /// it (give NEW again). A device in use is refused whatever the flags.
    #[arg(long, value_name = "NEW")]
    force_overwrite: Option<PathBuf>,
    /// NEW is a member of another stripeguard array, or an old copy of this one's: overwrite
    /// it (give NEW again). A member of an array a running process holds is refused.
    #[arg(long, value_name = "NEW")]
    force_take: Option<PathBuf>,
    /// A stripe that cannot be rebuilt (more of it lost than the parity covers) does not stop
    /// the replace: NEW's unit there is written as one that never verifies, the stripe stays
    /// refused on read, and the replace goes on (exit 3, the stripes listed). For an array that
    /// lost more than its parity covers: what remains gets its redundancy back.
    #[arg(long)]
    skip_unrecoverable: bool,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `replace` of an array another process holds: ask it over its control socket, then follow
/// its progress in its status until it finishes.
fn via_holder(a: &ReplaceArgs, uuid: &[u8; 16]) -> Result<ExitCode> {
    let target = match a.with.to_str() {
        Some(t) if stripeguard_nbd::is_uri(t) => t.to_string(),
        _ => {
            // The holder runs elsewhere (its own working directory): an absolute path.
            let parent = a.with.parent().filter(|p| !p.as_os_str().is_empty());
            let dir = std::fs::canonicalize(parent.unwrap_or(std::path::Path::new(".")))
                .with_context(|| format!("cannot resolve {}", a.with.display()))?;
            let name = a
                .with
                .file_name()
                .with_context(|| format!("{} names no file", a.with.display()))?;
            let full = dir.join(name);
            full.to_str()
                .with_context(|| {
                    format!(
                        "{} has a name that is not UTF-8, which the request to the process holding the array cannot carry; rename it, or replace when that process has stopped",
                        full.display()
                    )
                })?
                .to_string()
        }
    };
    ask_holder_replace(
        uuid,
        a.member,
        &target,
        a.force_flags(),
        a.force_overwrite.is_some(),
    )
    .map_err(|e| anyhow::anyhow!("the process holding the array refused the replace: {e}"))?;
    eprintln!("stripeguard: the array is in use; the process holding it rebuilds member {} onto {target} while it goes on serving", a.member);
    let bar = count_bar("rebuilding");
    let last = loop {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let live = ask_holder(uuid)
            .map_err(|e| anyhow::anyhow!("the holder stopped (or stopped answering) while it rebuilt ({e}); a holder that stops saves the replace's position: run the same replace again to resume"))?;
        let Some(r) = live.replace else {
            bail!("the holder reports no replace");
        };
        bar.set_length(r.total.max(1));
        bar.set_position(r.done);
        if !r.running {
            break r;
        }
    };
    bar.finish_and_clear();
    let outcome = last.outcome.unwrap_or_default();
    if a.json {
        println!(
            "{}",
            json!({"via_holder": true, "ok": last.ok, "outcome": outcome})
        );
    } else if last.ok {
        println!("{outcome}");
    }
    if last.ok {
        Ok(ExitCode::from(exit::OK))
    } else {
        bail!("{outcome}")
    }
}

impl ReplaceArgs {
    fn force_flags(&self) -> ReplaceForce {
        ReplaceForce {
            retire: self.force,
            take: self.force_take.is_some(),
            skip_unrecoverable: self.skip_unrecoverable,
            spare: None,
        }
    }
    fn confirmations(&self) -> Confirmations {
        Confirmations {
            overwrite: self.force_overwrite.iter().cloned().collect(),
            take: self.force_take.iter().cloned().collect(),
            take_all: false,
        }
    }
    /// The per-device flags must name NEW (a flag naming another device confirms nothing).
    fn check_flags(&self) -> Result<()> {
        for (flag, v) in [
            ("--force-overwrite", &self.force_overwrite),
            ("--force-take", &self.force_take),
        ] {
            if let Some(p) = v {
                if self
                    .confirmations()
                    .refuse_strays(&[self.with.as_path()])
                    .is_err()
                {
                    bail!(
                        "{flag} {} does not name the device given with --with ({})",
                        p.display(),
                        self.with.display()
                    );
                }
            }
        }
        Ok(())
    }
}

pub fn run(mut a: ReplaceArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    a.check_flags()?;
    // The slot's own path again is the device coming back (a re-add, which the engine checks);
    // another member's path is a mistake.
    let own_slot = a.array.members.get(a.member) == Some(&a.with);
    if !own_slot && a.array.members.iter().any(|m| m == &a.with) && !a.force {
        bail!(
            "{} is already a member of the array; give a new device",
            a.with.display()
        );
    }
    // Ctrl-C stops at the next stripe, the position saved, the array closed clean (from the
    // start: one during the assembly stops the replace before its first stripe).
    let canceller: std::sync::Arc<std::sync::Mutex<Option<stripeguard_engine::RebuildCanceller>>> =
        std::sync::Arc::default();
    let interrupt = {
        let canceller = std::sync::Arc::clone(&canceller);
        crate::interrupt::Interrupt::on_first(move || {
            if let Some(c) = canceller.lock().expect("lock").as_ref() {
                c.cancel();
            }
        })
    };
    // Held by a running `serve`: it runs the replace while it goes on serving.
    let array = match assemble_or_holder(&a.array, true)? {
        Held::Here(array) => array,
        Held::ByHolder(uuid) => return via_holder(&a, &uuid),
    };
    let target = match Replacement::open(
        &array,
        a.member,
        &a.with,
        own_slot,
        a.array.direct,
        &a.confirmations(),
    ) {
        Ok(t) => t,
        Err(e) => {
            let _ = array.close();
            return Err(e.into());
        }
    };
    let bar = count_bar("rebuilding");
    let started = std::time::Instant::now();
    // Ctrl-C stops at the next stripe, the position saved, the array closed clean.
    *canceller.lock().expect("lock") = Some(array.rebuild_canceller());
    if interrupt.fired() {
        // Interrupted while the array was assembled: stop before the first stripe.
        array.cancel_rebuild();
    }
    let result = target.run(&array, a.member, a.force_flags(), &mut updater(&bar));
    bar.finish_and_clear();
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            let _ = array.close();
            if interrupt.fired() {
                eprintln!(
                    "stripeguard: replace interrupted; the array is closed clean, and `replace` onto {} again resumes where it stopped",
                    a.with.display()
                );
                return Ok(ExitCode::from(130));
            }
            return Err(e.into());
        }
    };
    if a.json {
        println!(
            "{}",
            json!({"summary": summary, "counters": counters_json(&array.counters()), "events": array.events()})
        );
    } else {
        if summary.resumed_at > 0 {
            println!(
                "resumed an interrupted replace at stripe {}",
                summary.resumed_at
            );
        }
        if let Some(why) = &summary.full_rebuild_reason {
            println!(
                "member {} ({}) is this slot's own device back, but it is rebuilt in full, not re-added: {why}",
                summary.member,
                a.with.display()
            );
        }
        if summary.readded {
            println!(
                "member {} ({}) is the device that left, back: re-added through the write-intent record ({} of {} stripes were written while it was out)",
                summary.member,
                a.with.display(),
                summary.stripes_to_rebuild,
                array.geometry().stripes
            );
        }
        println!(
            "rebuilt member {} onto {}: {} stripes in {:.1} s; {} silently wrong survivor unit(s) found and repaired on the way",
            summary.member,
            a.with.display(),
            summary.stripes_rebuilt,
            started.elapsed().as_secs_f64(),
            summary.survivors_repaired
        );
        print_events(&array, true);
        if !summary.skipped.is_empty() {
            println!(
                "{} unrecoverable stripe(s) passed over; they stay refused on read: {}",
                summary.skipped.len(),
                summary
                    .skipped
                    .iter()
                    .take(20)
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
                    + if summary.skipped.len() > 20 {
                        ", ..."
                    } else {
                        ""
                    }
            );
        }
        println!(
            "from now on give {} in place of the old member {}",
            a.with.display(),
            a.member
        );
    }
    array.close()?;
    Ok(ExitCode::from(if summary.skipped.is_empty() {
        exit::OK
    } else {
        exit::UNRECOVERABLE
    }))
}
