//! Manifests of `deploy/` installed into a test control plane: the
//! CustomResourceDefinitions of `deploy/crds/` (Device, DeviceModel, DeviceStatus of
//! `devices.kubeedge.io`; NodeGroup, EdgeApplication of `apps.kubeedge.io`; NodeUpgradeJob,
//! ImagePrePullJob, ConfigUpdateJob of `operations.kubeedge.io`) and the cloud
//! services' RBAC (`deploy/cloud/access/`).

use std::path::PathBuf;
use std::process::Output;

use anyhow::{Context as _, bail};

use crate::ControlPlane;

/// The repository's `deploy/crds/` directory.
pub fn crds_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

/// The CRDs of [`crds_dir`], by name.
pub const DEVICE_CRDS: [&str; 3] = [
    "devices.devices.kubeedge.io",
    "devicemodels.devices.kubeedge.io",
    "devicestatuses.devices.kubeedge.io",
];

/// The fleet CRDs of [`crds_dir`], by name.
pub const FLEET_CRDS: [&str; 5] = [
    "nodegroups.apps.kubeedge.io",
    "edgeapplications.apps.kubeedge.io",
    "nodeupgradejobs.operations.kubeedge.io",
    "imageprepulljobs.operations.kubeedge.io",
    "configupdatejobs.operations.kubeedge.io",
];

/// Applies the kustomization of [`crds_dir`] server-side (`kubectl apply -k --server-side
/// --force-conflicts`, so a run with changed definitions takes over the fields) and waits up
/// to 60 s until each of [`DEVICE_CRDS`] is `Established` (its resources are served).
/// Idempotent: the shared control plane keeps them for the next test binary.
///
/// # Errors
/// kubectl cannot be run, the apply fails (the error holds kubectl's output), or a CRD is
/// not established in time.
pub async fn install_device_crds(cp: &ControlPlane) -> anyhow::Result<()> {
    install_crds(cp, &DEVICE_CRDS).await
}

/// As [`install_device_crds`], waiting for [`FLEET_CRDS`].
///
/// # Errors
/// As [`install_device_crds`].
pub async fn install_fleet_crds(cp: &ControlPlane) -> anyhow::Result<()> {
    install_crds(cp, &FLEET_CRDS).await
}

async fn install_crds(cp: &ControlPlane, names: &[&str]) -> anyhow::Result<()> {
    let dir = crds_dir();
    let mut apply = cp.kubectl_command();
    apply
        .args(["apply", "--server-side", "--force-conflicts", "-k"])
        .arg(&dir);
    let mut wait = cp.kubectl_command();
    wait.args(["wait", "--for=condition=Established", "--timeout=60s"])
        .args(names.iter().map(|name| format!("crd/{name}")));
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        check("kubectl apply of the CRDs", apply.output())?;
        check("kubectl wait for the CRDs", wait.output())
    })
    .await?
}

/// The repository's `deploy/cloud/access/` kustomization: the `verge-system` namespace, the
/// device CRDs, and the service accounts, roles and bindings of cloudhub, edgecontroller
/// and devicecontroller.
pub fn cloud_access_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/cloud/access")
}

/// Applies [`cloud_access_dir`] server-side (`kubectl apply --server-side --force-conflicts
/// -k`), so that a test can act as a service account with [`ControlPlane::client_as`].
/// Idempotent.
///
/// # Errors
/// kubectl cannot be run or the apply fails (the error holds kubectl's output).
pub async fn install_cloud_rbac(cp: &ControlPlane) -> anyhow::Result<()> {
    let mut apply = cp.kubectl_command();
    apply
        .args(["apply", "--server-side", "--force-conflicts", "-k"])
        .arg(cloud_access_dir());
    tokio::task::spawn_blocking(move || check("kubectl apply of the cloud RBAC", apply.output()))
        .await?
}

/// Fails with kubectl's output unless it succeeded.
fn check(what: &str, output: std::io::Result<Output>) -> anyhow::Result<()> {
    let output = output.with_context(|| format!("cannot run {what}"))?;
    if !output.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}
