//! `cargo xtask down`: Stop the local Verge deployment.
//!
//! STUB — not yet implemented; the lead fills this in.

use std::process::ExitCode;

/// Arguments of `cargo xtask down` (none yet; extra arguments are accepted and ignored).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Arguments reserved for the implementation.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub rest: Vec<String>,
}

/// STUB: prints "not yet implemented" and fails.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    eprintln!("xtask down: not yet implemented");
    Ok(ExitCode::FAILURE)
}
