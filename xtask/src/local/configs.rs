//! The cloud controllers' configuration files of a local deployment.

use std::path::Path;

use anyhow::Context as _;

/// Writes `<controller>.yaml` in `dir` for a controller running as its own service account
/// ([`super::start`]): the cloudhub at `ctrl_port`, the shipped leader-election Lease
/// (`verge-system/<controller>`, the only one its RBAC may update) with a fixed identity, and
/// `hub_token` (a token of the account for cloudhub's ControllerHub audience) as
/// `cloudhubAuth.tokenFile`. Returns the file's path.
pub fn deployed_controller_config(
    dir: &Path,
    controller: &str,
    ctrl_port: u16,
    hub_token: &Path,
) -> anyhow::Result<String> {
    let run = lease_suffix(dir);
    write(
        dir,
        &format!("{controller}.yaml"),
        &format!(
            "cloudhub: https://127.0.0.1:{ctrl_port}
healthAddr: 127.0.0.1:0
leaderElection:
  \
             leaseName: {controller}
  identity: {controller}-{run}-0
\
             cloudhubAuth:
  tokenFile: {}
",
            hub_token.display()
        ),
    )
}

/// Writes `<controller>.yaml` in `dir`: the cloudhub at `ctrl_port`, and leader election on
/// a Lease of this run directory's own (`<controller>-<directory name>`, so runs against a
/// shared control plane do not wait for each other) with a fixed identity (a restarted
/// controller takes its Lease back at once, as a restarted container of the same pod does).
/// Returns the file's path.
pub fn controller_config(dir: &Path, controller: &str, ctrl_port: u16) -> anyhow::Result<String> {
    let run = lease_suffix(dir);
    write(
        dir,
        &format!("{controller}.yaml"),
        &format!(
            "cloudhub: https://127.0.0.1:{ctrl_port}\nhealthAddr: 127.0.0.1:0\nleaderElection:\n  \
             leaseName: {controller}-{run}\n  identity: {controller}-{run}-0\n"
        ),
    )
}

/// The last component of `dir` as a DNS label part: lower-case alphanumerics and `-`.
fn lease_suffix(dir: &Path) -> String {
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let label: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    let label = label.trim_matches('-');
    if label.is_empty() {
        "local".to_owned()
    } else {
        label.to_owned()
    }
}

/// Writes `text` to `dir/name`; returns the path as a string (for a command line).
pub fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path.display().to_string())
}
