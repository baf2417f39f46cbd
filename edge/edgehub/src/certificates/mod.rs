//! The node's credentials: its private key (made on the node, never sent), its client
//! certificate from the Verge CA and the CA certificate, kept in `<dataDir>/pki/`
//! (`node.key` 0600, `node.crt`, `ca.crt`; the data directory itself is 0700).
//!
//! - [`join`]: trade a Kubernetes bootstrap token and a CSR for the first certificate at
//!   cloudhub's Join service (`edgecore join`, or on start when `edgeHub.token` is set).
//! - [`Credentials`]: the stored files, loaded for every connection so a renewed
//!   certificate is used from the next connection on. The TLS client configuration made
//!   from them is kept while they stay the same, so its session store lets a reconnect
//!   resume the TLS session (cloudhub issues session tickets to nodes).
//! - [`renew`]: at 80 % of the certificate's lifetime, a new key and certificate over the
//!   authenticated EdgeHub connection (kubelet certificate rotation).
//! - [`serving`]: serving certificates the cluster CA signs for this node (the kubelet's, the
//!   edge API's).

mod error;
mod join;
mod renew;
pub mod serving;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use rustls::ClientConfig;
use tracing::info;
use verge_pki::pem_io::{
    read_pem_file, read_private_key_file, write_cert_file, write_private_key_file,
};
use verge_pki::{CertInfo, ClientIdentity, PrivateKeyPem};

pub use error::Error;
pub use join::{JoinParams, Joined, join, join_address};
pub use renew::{renew, renew_once};
/// A taint of `JoinParams::register_with_taints` (the wire type).
pub use verge_proto::hub::Taint;

use crate::HubSettings;

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The node's credential files.
#[derive(Clone)]
pub struct Credentials {
    dir: PathBuf,
    /// The last client configuration and the files it was made from (shared by clones).
    reused: Arc<Mutex<Option<Reused>>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

/// A client configuration and the credentials it presents and trusts.
struct Reused {
    cert_pem: String,
    key: PrivateKeyPem,
    ca_pem: String,
    config: Arc<ClientConfig>,
}

/// Loaded credentials.
pub struct Loaded {
    /// The CA certificate, PEM.
    pub ca_pem: String,
    /// The node certificate, PEM.
    pub cert_pem: String,
    /// The node's private key.
    pub key: PrivateKeyPem,
    /// The node certificate's fields.
    pub info: CertInfo,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// The credentials of `config`: `<dataDir>/pki`.
    pub fn of(config: &HubSettings) -> Self {
        Self::in_dir(config.data_dir.join("pki"))
    }

    /// The credentials in `dir`.
    pub fn in_dir(dir: PathBuf) -> Self {
        Self {
            dir,
            reused: Arc::default(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Whether a node certificate is stored.
    pub fn exists(&self) -> bool {
        self.path("node.crt").exists() && self.path("node.key").exists()
    }

    /// Reads the three files.
    ///
    /// # Errors
    /// [`Error::NotJoined`] when they are missing, [`Error::Pki`] when unreadable.
    pub fn load(&self) -> Result<Loaded> {
        if !self.exists() {
            return Err(Error::NotJoined {
                dir: self.dir.clone(),
            });
        }
        let cert_pem = read_pem_file(&self.path("node.crt"))?;
        Ok(Loaded {
            ca_pem: read_pem_file(&self.path("ca.crt"))?,
            info: CertInfo::parse(cert_pem.as_bytes())?,
            cert_pem,
            key: read_private_key_file(&self.path("node.key"))?,
        })
    }

    /// Stores a new key, certificate and CA (the key first, each file replaced atomically;
    /// the directory is created 0700).
    ///
    /// # Errors
    /// [`Error::Pki`] for I/O errors.
    pub fn store(&self, key: &PrivateKeyPem, cert_pem: &str, ca_pem: &str) -> Result<()> {
        ensure_private_dir(&self.dir)?;
        write_private_key_file(&self.path("node.key"), key)?;
        write_cert_file(&self.path("node.crt"), cert_pem)?;
        write_cert_file(&self.path("ca.crt"), ca_pem)?;
        Ok(())
    }

    /// A TLS client configuration presenting the node certificate and trusting the CA, after
    /// checking that the certificate is for `node` and not expired. The files are read on
    /// every call; while the certificate, key and CA are those of the previous call, its
    /// configuration is returned again, with the TLS session tickets cloudhub gave the
    /// earlier connections (a reconnect resumes the session instead of a full handshake).
    /// New files (a renewal, a re-join) get a new configuration, so a new session store.
    ///
    /// # Errors
    /// As [`Credentials::load`], [`Error::Expired`], [`Error::OtherNode`].
    pub fn client_config(&self, node: &str) -> Result<Arc<ClientConfig>> {
        let loaded = self.load()?;
        loaded.check(node, SystemTime::now())?;
        let mut reused = self.reused.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(reused) = reused.as_ref()
            && reused.cert_pem == loaded.cert_pem
            && reused.key == loaded.key
            && reused.ca_pem == loaded.ca_pem
        {
            return Ok(reused.config.clone());
        }
        let config = loaded.client_config(node)?;
        *reused = Some(Reused {
            cert_pem: loaded.cert_pem,
            key: loaded.key,
            ca_pem: loaded.ca_pem,
            config: config.clone(),
        });
        Ok(config)
    }
}

impl Loaded {
    /// A TLS client configuration presenting this certificate and trusting this CA, after
    /// checking that the certificate is for `node` and not expired.
    ///
    /// # Errors
    /// [`Error::Expired`], [`Error::OtherNode`], [`Error::Pki`].
    pub fn client_config(&self, node: &str) -> Result<Arc<ClientConfig>> {
        self.check(node, SystemTime::now())?;
        let identity = ClientIdentity {
            cert_chain_pem: &self.cert_pem,
            key_pem: &self.key,
        };
        Ok(Arc::new(verge_pki::tls::client_config(
            &self.ca_pem,
            Some(identity),
        )?))
    }

    /// Checks that the certificate names `node` and is valid at `now`.
    ///
    /// # Errors
    /// [`Error::OtherNode`], [`Error::Expired`].
    pub fn check(&self, node: &str, now: SystemTime) -> Result<()> {
        let der = verge_pki::pem_io::cert_from_pem(&self.cert_pem)?;
        let certificate = verge_pki::node_identity(&der)?;
        if certificate != node {
            return Err(Error::OtherNode {
                certificate,
                configured: node.to_owned(),
            });
        }
        if self.info.not_after <= now {
            return Err(Error::Expired {
                not_after: self.info.not_after,
            });
        }
        Ok(())
    }
}

/// Makes sure the node has a valid certificate before edgecore starts: joins with
/// `edgeHub.token` when there is none or it expired (the data directory survives, so pods
/// and their state are kept), asking for the Node to be created with `register_with_taints`
/// (`edged.registerWithTaints`).
///
/// # Errors
/// [`Error::NotJoined`] / [`Error::Expired`] without a token, else the join's errors.
pub async fn ensure(config: &HubSettings, register_with_taints: Vec<Taint>) -> Result<()> {
    let credentials = Credentials::of(config);
    let usable = match credentials.load() {
        Ok(loaded) => loaded.check(&config.node_name, SystemTime::now()),
        Err(error) => Err(error),
    };
    let error = match usable {
        Ok(()) => return Ok(()),
        Err(error @ (Error::NotJoined { .. } | Error::Expired { .. })) => error,
        Err(error) => return Err(error),
    };
    if config.edge_hub.token.is_empty() {
        return Err(error);
    }
    info!(reason = %error, "joining with the configured bootstrap token");
    let request = JoinParams {
        address: join_address(config)?,
        token: config.edge_hub.token.clone(),
        ca_cert_hash: config.edge_hub.ca_cert_hash.clone(),
        node_name: config.node_name.clone(),
        tls_server_name: config.edge_hub.tls_server_name.clone(),
        register_with_taints,
    };
    join(&request, &credentials).await.map(|_| ())
}

/// Creates `dir` for key and certificate files private to edgecore (mode 0700, owned by
/// edgecore's user; an existing directory's mode and owner are fixed), as the node's
/// certificates and the kubelet serving certificate keep theirs.
///
/// # Errors
/// [`verge_pki::Error::Io`] (action `create`) when the directory cannot be created or fixed.
pub fn ensure_private_dir(dir: &Path) -> Result<(), verge_pki::Error> {
    verge_edge_store::private_dir::ensure(dir).map_err(|source| verge_pki::Error::Io {
        action: "create",
        path: dir.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use verge_pki::Ca;

    use super::*;

    /// The configuration (and with it its TLS session store) is the same across connections
    /// until the certificate changes.
    #[test]
    fn the_client_config_is_kept_until_the_certificate_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = Ca::generate("test-ca", Duration::from_secs(600)).expect("CA");
        let issue = || {
            ca.issue_client(
                "system:node:edge-1",
                Some("system:nodes"),
                Duration::from_secs(600),
            )
            .expect("certificate")
        };
        let credentials = Credentials::in_dir(dir.path().join("pki"));
        let first = issue();
        credentials
            .store(&first.key_pem, &first.cert_pem, ca.cert_pem())
            .expect("stored");
        let a = credentials.client_config("edge-1").expect("config");
        let b = credentials.client_config("edge-1").expect("config");
        assert!(Arc::ptr_eq(&a, &b), "the same configuration is reused");
        let clone = credentials.clone();
        assert!(Arc::ptr_eq(
            &a,
            &clone.client_config("edge-1").expect("config")
        ));
        // The checks still run on every call.
        assert!(matches!(
            credentials.client_config("edge-2"),
            Err(Error::OtherNode { .. })
        ));

        // A renewal: new key and certificate, a new configuration (a new session store).
        let second = issue();
        credentials
            .store(&second.key_pem, &second.cert_pem, ca.cert_pem())
            .expect("stored");
        let c = credentials.client_config("edge-1").expect("config");
        assert!(
            !Arc::ptr_eq(&a, &c),
            "a new certificate gets a new configuration"
        );
        let d = credentials.client_config("edge-1").expect("config");
        assert!(Arc::ptr_eq(&c, &d));
    }
}
