//! Default locations of the test kit's cache and run directories.
//!
//! Everything lives under `~/.cache/verge` (outside the repository, so `cargo clean`
//! keeps the control-plane build): `control-plane/v<version>/` holds builds,
//! `run/` holds state of running components (control plane, dockerd logs, locks).

use std::path::PathBuf;

/// `~/.cache/verge` (`$HOME/.cache/verge`; `/root/.cache/verge` when `HOME` is unset).
pub fn verge_home() -> PathBuf {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache").join("verge")
}

/// `~/.cache/verge/run`: state of running components and the setup lock.
pub fn run_dir() -> PathBuf {
    verge_home().join("run")
}
