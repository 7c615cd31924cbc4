//! What a package ships beside the binary, generated from the CLI definition itself so it
//! cannot drift from it (issue 36 §4): shell completions and man pages. `scripts/install`
//! runs both.

use anyhow::{Context, Result};
use clap::{Args, Command};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    shell: clap_complete::Shell,
}

#[derive(Args)]
pub struct ManpagesArgs {
    /// Directory to write stripeguard.1 and stripeguard-COMMAND.1 into (made if missing).
    dir: PathBuf,
}

/// Print the completion script for a shell.
pub fn completions(a: CompletionsArgs, mut cmd: Command) -> Result<ExitCode> {
    clap_complete::generate(a.shell, &mut cmd, "stripeguard", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// Write one man page for the command and one per subcommand (`stripeguard-scan.1`, and
/// `stripeguard-shard-encode.1` for nested ones).
pub fn manpages(a: ManpagesArgs, cmd: Command) -> Result<ExitCode> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("cannot make {}", a.dir.display()))?;
    let mut written = 0usize;
    let mut pages: Vec<(String, Command)> = vec![("stripeguard".into(), cmd.clone())];
    while let Some((name, c)) = pages.pop() {
        for sub in c.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages.push((format!("{name}-{}", sub.get_name()), sub.clone()));
        }
        let page = c.clone().name(name.clone()).display_name(name.clone());
        let mut out = Vec::new();
        clap_mangen::Man::new(page)
            .section("1")
            .source(format!("stripeguard {}", env!("CARGO_PKG_VERSION")))
            .manual("stripeguard manual")
            .render(&mut out)?;
        let path = a.dir.join(format!("{name}.1"));
        std::fs::write(&path, out).with_context(|| format!("cannot write {}", path.display()))?;
        written += 1;
    }
    println!("wrote {written} man pages to {}", a.dir.display());
    Ok(ExitCode::SUCCESS)
}
