//! `cargo xtask quickstart`: Start a local Verge deployment.
//!
//! STUB — not yet implemented; the lead fills this in.

use std::process::ExitCode;

/// Arguments of `cargo xtask quickstart` (none yet; extra arguments are accepted and ignored).
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Arguments reserved for the implementation.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub rest: Vec<String>,
}

/// STUB: prints "not yet implemented" and fails.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    eprintln!("xtask quickstart: not yet implemented");
    Ok(ExitCode::FAILURE)
}
