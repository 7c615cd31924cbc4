//! `stripeguard stop`: ask the process holding an array (`serve`) to stop, over its control
//! socket: refused while clients are connected unless `--force` (which still lets them finish
//! for the server's `--stop-timeout`, then closes the array clean).

use crate::cmd::shared::MembersArgs;
use crate::exit;
use anyhow::{bail, Result};
use clap::Args;
use std::process::ExitCode;
use stripeguard_ops::{ask_holder, ask_holder_stop, peek_uuid};

#[derive(Args)]
pub struct StopArgs {
    #[command(flatten)]
    array: MembersArgs,
    /// Stop even with clients connected: they are cut off at once, as by a second SIGTERM
    /// (requests already read are finished and answered; the array is closed clean).
    #[arg(long)]
    force: bool,
    /// Return at once instead of waiting for the holder to have stopped.
    #[arg(long)]
    no_wait_stop: bool,
}

pub fn run(mut a: StopArgs) -> Result<ExitCode> {
    a.array.resolve(false)?;
    let Some(uuid) = peek_uuid(&a.array.members) else {
        bail!("no member has a readable superblock: not a stripeguard array");
    };
    let pid = match ask_holder(&uuid) {
        Ok(live) => live.pid,
        Err(e) if e.starts_with("no control socket") => {
            bail!("no process on this host holds the array ({e})")
        }
        Err(e) => bail!("the process holding the array does not answer: {e}"),
    };
    ask_holder_stop(&uuid, a.force)
        .map_err(|e| anyhow::anyhow!("the process holding the array refused to stop: {e}"))?;
    if !a.no_wait_stop {
        // Stopped when its process has ended: the array is closed by then.
        let t = std::time::Instant::now();
        let env = stripeguard_engine::RealEnv::shared();
        while env.process_alive(pid) {
            if t.elapsed() > std::time::Duration::from_secs(600) {
                bail!("the holder has not stopped after 10 minutes");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
    println!("stopped");
    Ok(ExitCode::from(exit::OK))
}
