//! The image of the Python example in-cluster client (`examples/python-incluster`): the
//! official Kubernetes Python client as Debian packages it, unmodified, on the test busybox.
//!
//! There is no registry here, so the image is made locally: [`crate::docker::busybox_rootfs`]
//! plus the dependency closure of Debian's `python3-kubernetes` ([`SUITE`]; Python, the
//! client and what it needs, unpacked with [`crate::debian::Archive::install_closure`], no
//! maintainer script run; the CA bundle `ca-certificates` would write is written the same way)
//! plus `client.py` at `/app/client.py`. The image is labelled with a
//! hash of its inputs and made again only when they change (an apt run takes ~15 s and
//! fetches ~24 MB).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;

use crate::docker;
use crate::example_clients::hash_files;

/// The image reference.
pub const IMAGE: &str = "verge-test/python-kube:latest";

/// The Debian release the packages come from.
pub const SUITE: &str = "trixie";

/// The packages installed with their dependencies.
pub const PACKAGES: &[&str] = &["python3-kubernetes"];

/// Changed when the way the image is made changes (so an older image is made again).
const REVISION: &str = "2";

/// The label holding the hash of the image's inputs.
const INPUTS_LABEL: &str = "io.verge.inputs";

/// `examples/python-incluster`.
pub fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/python-incluster")
}

/// Makes [`IMAGE`] unless one of the same inputs exists; returns its reference.
///
/// # Errors
/// apt (no network to deb.debian.org), the unpacking or `docker import` fail.
pub fn ensure_image() -> anyhow::Result<&'static str> {
    let client = example_dir().join("client.py");
    let hash = format!(
        "{}-{SUITE}-{}-{REVISION}",
        hash_files(std::slice::from_ref(&client))?,
        PACKAGES.join("+")
    );
    let current = docker::docker(&[
        "image",
        "inspect",
        "-f",
        &format!("{{{{index .Config.Labels \"{INPUTS_LABEL}\"}}}}"),
        IMAGE,
    ])
    .unwrap_or_default();
    if current.trim() == hash {
        return Ok(IMAGE);
    }
    let started = Instant::now();
    eprintln!("python-kube: making {IMAGE} from Debian {SUITE}'s {PACKAGES:?}");
    let root = tempfile::tempdir()?;
    docker::busybox_rootfs(root.path())?;
    let archive = crate::debian::Archive::new(SUITE, false)?;
    let count = archive.install_closure(PACKAGES, root.path())?;
    ca_bundle(root.path())?;
    std::fs::create_dir_all(root.path().join("app"))?;
    std::fs::copy(&client, root.path().join("app/client.py"))
        .with_context(|| format!("copying {}", client.display()))?;
    let label = format!("LABEL {INPUTS_LABEL}={hash}");
    docker::import_rootfs(
        root.path(),
        IMAGE,
        &[
            "ENV PATH=/usr/local/bin:/usr/bin:/bin",
            "ENV PYTHONDONTWRITEBYTECODE=1",
            "ENV PYTHONUNBUFFERED=1",
            &label,
            r#"ENTRYPOINT ["/usr/bin/python3", "/app/client.py"]"#,
        ],
    )?;
    eprintln!(
        "python-kube: {IMAGE} made from {count} packages in {:.0?}",
        started.elapsed()
    );
    Ok(IMAGE)
}

/// Writes `/etc/ssl/certs/ca-certificates.crt` from the Mozilla certificates that
/// `ca-certificates` unpacked (what its maintainer script's `update-ca-certificates` would
/// write): `requests`, under the Kubernetes client, loads that bundle on import.
fn ca_bundle(root: &Path) -> anyhow::Result<()> {
    let mozilla = root.join("usr/share/ca-certificates/mozilla");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&mozilla)
        .with_context(|| format!("reading {}", mozilla.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "crt"))
        .collect();
    files.sort();
    let mut bundle = String::new();
    for file in files {
        bundle.push_str(&std::fs::read_to_string(&file)?);
        if !bundle.ends_with('\n') {
            bundle.push('\n');
        }
    }
    let certs = root.join("etc/ssl/certs");
    std::fs::create_dir_all(&certs)?;
    std::fs::write(certs.join("ca-certificates.crt"), bundle)?;
    Ok(())
}
