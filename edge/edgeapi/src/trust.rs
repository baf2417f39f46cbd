//! Why a pod trusts the edge API: the node's own CA, limited by X.509 name constraints
//! (critical) to the `kubernetes` Service's DNS names ([`service_names`]) and its cluster IP.
//! edged appends its certificate to the `ca.crt` of the `kube-root-ca.crt` ConfigMap the
//! pods' projected volumes carry; so an in-cluster client that verifies the API server with
//! `ca.crt` accepts the edge API's serving certificate for exactly those names, and a node
//! that is compromised gains no trust for any other name or address (a verifier refuses
//! whatever else the CA signs: rustls-webpki, Go's crypto/x509, OpenSSL).
//!
//! The CA is made once per cluster IP and kept in the node's data directory
//! (`edge-api/ca-<cluster IP>.{crt,key}`, the key mode 0600), so pods that already hold its
//! certificate keep trusting the edge API across edgecore restarts. The serving certificate
//! is made at start with a fresh key and lives in memory only.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::sign::CertifiedKey;
use verge_pki::Ca;

use crate::{Error, Result};

/// How long the node's CA is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How long a serving certificate is valid; one is made at start and again every
/// [`SERVING_RENEWAL`].
pub const SERVING_VALIDITY: Duration = Duration::from_secs(90 * 24 * 3600);

/// How often the serving certificate is made anew.
pub const SERVING_RENEWAL: Duration = Duration::from_secs(24 * 3600);

/// The DNS names in-cluster clients give the `kubernetes` Service in cluster domain
/// `domain`: `kubernetes`, `kubernetes.default`, `kubernetes.default.svc` and
/// `kubernetes.default.svc.<domain>` (the names the API server's own certificate carries).
pub fn service_names(domain: &str) -> Vec<String> {
    vec![
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        format!("kubernetes.default.svc.{domain}"),
    ]
}

/// The names the node's CA may sign for: [`service_names`] and `cluster_ip`.
fn permitted(cluster_ip: Ipv4Addr, domain: &str) -> Vec<String> {
    let mut names = service_names(domain);
    names.push(cluster_ip.to_string());
    names
}

/// The node's CA for the `kubernetes` Service at `cluster_ip`: loaded from `dir` if made
/// before, else made and written there (see the module docs). `node` names it
/// (`CN=verge-edge-api:<node>`).
///
/// # Errors
/// [`Error::File`] when `dir` or a file cannot be made or read, [`Error::Pki`] for a file
/// that holds no usable CA or when making it fails.
pub fn load_or_create_ca(dir: &Path, node: &str, cluster_ip: Ipv4Addr, domain: &str) -> Result<Ca> {
    let (cert, key) = ca_files(dir, cluster_ip);
    if cert.exists() && key.exists() {
        let pki = |action| move |source| Error::Pki { action, source };
        let cert_pem = verge_pki::pem_io::read_pem_file(&cert).map_err(pki("reading the CA"))?;
        let key_pem =
            verge_pki::pem_io::read_private_key_file(&key).map_err(pki("reading the CA key"))?;
        return Ca::from_pem(&cert_pem, &key_pem).map_err(pki("loading the CA"));
    }
    std::fs::create_dir_all(dir).map_err(|source| Error::File {
        path: dir.to_owned(),
        source,
    })?;
    let ca = Ca::generate_name_constrained(
        &format!("verge-edge-api:{node}"),
        CA_VALIDITY,
        &permitted(cluster_ip, domain),
    )
    .map_err(|source| Error::Pki {
        action: "making the CA",
        source,
    })?;
    // The key first: a certificate without its key is never left behind as a usable pair.
    verge_pki::pem_io::write_private_key_file(&key, &ca.key_pem()).map_err(|source| {
        Error::Pki {
            action: "writing the CA key",
            source,
        }
    })?;
    verge_pki::pem_io::write_cert_file(&cert, ca.cert_pem()).map_err(|source| Error::Pki {
        action: "writing the CA",
        source,
    })?;
    Ok(ca)
}

/// The CA's certificate and key files in `dir` for `cluster_ip`.
fn ca_files(dir: &Path, cluster_ip: Ipv4Addr) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("ca-{cluster_ip}.crt")),
        dir.join(format!("ca-{cluster_ip}.key")),
    )
}

/// A serving certificate of `ca` for the `kubernetes` Service's names and `cluster_ip`,
/// with a fresh key, valid [`SERVING_VALIDITY`]; as rustls serves it (the leaf then the CA).
///
/// # Errors
/// [`Error::Pki`] when issuing fails (e.g. the CA expired).
pub fn serving(ca: &Ca, cluster_ip: Ipv4Addr, domain: &str) -> Result<Arc<CertifiedKey>> {
    let pki = |source| Error::Pki {
        action: "issuing the serving certificate",
        source,
    };
    ca.issue_serving(
        "kubernetes",
        &permitted(cluster_ip, domain),
        SERVING_VALIDITY,
    )
    .map_err(pki)?
    .certified_key()
    .map_err(pki)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_kept_per_cluster_ip() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|source| Error::File {
            path: PathBuf::new(),
            source,
        })?;
        let ip = Ipv4Addr::new(10, 96, 0, 1);
        let first = load_or_create_ca(dir.path(), "edge-a", ip, "cluster.local")?;
        let again = load_or_create_ca(dir.path(), "edge-a", ip, "cluster.local")?;
        assert_eq!(first.cert_pem(), again.cert_pem(), "loaded, not made anew");
        let other = load_or_create_ca(dir.path(), "edge-a", Ipv4Addr::new(10, 0, 0, 1), "x")?;
        assert_ne!(
            first.cert_pem(),
            other.cert_pem(),
            "another cluster IP, another CA"
        );
        let key_mode = std::fs::metadata(dir.path().join("ca-10.96.0.1.key"))
            .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777)
            .ok();
        assert_eq!(key_mode, Some(0o600));
        serving(&first, ip, "cluster.local")?;
        Ok(())
    }
}
