//! Certificates and credentials of a test control plane, generated with rcgen.
//!
//! All keys are ECDSA P-256. Files (in `<state>/pki/`): `ca.crt`/`ca.key` (the cluster
//! CA, also the kube-controller-manager's CSR signer), `apiserver.crt`/`apiserver.key`
//! (serving certificate), `apiserver-kubelet-client.crt`/`.key` (kube-apiserver's client
//! certificate towards kubelets, for `kubectl logs`/`exec`), `sa.key`/`sa.pub`
//! (service-account token signing pair), and `<state>/tokens.csv` (kube-apiserver
//! `--token-auth-file`). [`issue`] signs further certificates with the CA (the kubelet
//! node's identities).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Subject alternative names of the API server's serving certificate: loopback, and
/// the in-cluster names and service IP (first address of `10.96.0.0/16`). The advertise
/// address ([`super::ADVERTISE_ADDRESS`]) is added to these.
pub const APISERVER_SANS: &[&str] = &[
    "127.0.0.1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "10.96.0.1",
];

/// Paths of the generated PKI files.
#[derive(Debug, Clone)]
pub(crate) struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub apiserver_cert: PathBuf,
    pub apiserver_key: PathBuf,
    pub kubelet_client_cert: PathBuf,
    pub kubelet_client_key: PathBuf,
    pub egress_client_cert: PathBuf,
    pub egress_client_key: PathBuf,
    pub streams_front_cert: PathBuf,
    pub streams_front_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
    /// The aggregation layer's CA (kubeadm's `front-proxy-ca`): aggregated API servers
    /// (metrics-server) trust the requests the API server proxies to them with its client.
    pub front_proxy_ca_cert: PathBuf,
    /// The API server's client certificate towards aggregated API servers (CN
    /// [`FRONT_PROXY_CLIENT`]).
    pub front_proxy_client_cert: PathBuf,
    pub front_proxy_client_key: PathBuf,
}

impl Pki {
    /// The file paths under `<state>/pki`.
    pub(crate) fn paths(state_dir: &Path) -> Self {
        let dir = state_dir.join("pki");
        Self {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            apiserver_cert: dir.join("apiserver.crt"),
            apiserver_key: dir.join("apiserver.key"),
            kubelet_client_cert: dir.join("apiserver-kubelet-client.crt"),
            kubelet_client_key: dir.join("apiserver-kubelet-client.key"),
            egress_client_cert: dir.join("apiserver-egress-client.crt"),
            egress_client_key: dir.join("apiserver-egress-client.key"),
            streams_front_cert: dir.join("streams-front.crt"),
            streams_front_key: dir.join("streams-front.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
            front_proxy_ca_cert: dir.join("front-proxy-ca.crt"),
            front_proxy_client_cert: dir.join("front-proxy-client.crt"),
            front_proxy_client_key: dir.join("front-proxy-client.key"),
        }
    }

    /// Generates a fresh CA, serving certificate (for [`APISERVER_SANS`] and `advertise`),
    /// kubelet client certificate and service-account key pair and writes them (keys with
    /// mode 0600).
    pub(crate) fn generate(state_dir: &Path, advertise: Ipv4Addr) -> anyhow::Result<Self> {
        let pki = Self::paths(state_dir);
        let dir = state_dir.join("pki");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

        let (ca_params, ca_key) = ca("verge-test-ca")?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, &ca_key);
        let (front_params, front_key) = ca("verge-test-front-proxy-ca")?;
        let front_cert = front_params.self_signed(&front_key)?;
        let front_issuer = Issuer::new(front_params, &front_key);
        write_file(&pki.front_proxy_ca_cert, &front_cert.pem(), false)?;
        issue_with(&front_issuer, &Identity::client(FRONT_PROXY_CLIENT, None))?
            .write(&pki.front_proxy_client_cert, &pki.front_proxy_client_key)?;

        let server_key = KeyPair::generate()?;
        let mut sans: Vec<String> = APISERVER_SANS.iter().map(|s| (*s).to_owned()).collect();
        sans.push(advertise.to_string());
        let mut server_params = CertificateParams::new(sans)?;
        server_params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        server_params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server_params.signed_by(&server_key, &issuer)?;

        let sa_key = KeyPair::generate()?;
        let kubelet_client = issue_with(
            &issuer,
            &Identity::client("kube-apiserver-kubelet-client", Some("system:masters")),
        )?;

        write_file(&pki.ca_cert, &ca_cert.pem(), false)?;
        write_file(&pki.ca_key, &ca_key.serialize_pem(), true)?;
        write_file(&pki.apiserver_cert, &server_cert.pem(), false)?;
        write_file(&pki.apiserver_key, &server_key.serialize_pem(), true)?;
        kubelet_client.write(&pki.kubelet_client_cert, &pki.kubelet_client_key)?;
        // kube-apiserver's client certificate towards its egress proxy (the streams front,
        // a cloudhub), and that proxy's serving certificate.
        issue_with(&issuer, &Identity::client(EGRESS_CLIENT, None))?
            .write(&pki.egress_client_cert, &pki.egress_client_key)?;
        issue_with(
            &issuer,
            &Identity::server(
                "streams-front",
                &["127.0.0.1".to_owned(), "localhost".to_owned()],
            ),
        )?
        .write(&pki.streams_front_cert, &pki.streams_front_key)?;
        write_file(&pki.sa_key, &sa_key.serialize_pem(), true)?;
        write_file(&pki.sa_pub, &sa_key.public_key_pem(), false)?;
        Ok(pki)
    }
}

/// The subject common name of kube-apiserver's client certificate towards aggregated API
/// servers (`--requestheader-allowed-names`; kubeadm's name).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

/// A CA's parameters (CN `name`, CA:TRUE, cert and CRL signing) and a fresh key.
fn ca(name: &str) -> anyhow::Result<(CertificateParams, KeyPair)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok((params, key))
}

/// The subject common name of kube-apiserver's egress client certificate (cloudhub's
/// default `streams.clientNames`).
pub const EGRESS_CLIENT: &str = "kube-apiserver-egress";

/// Subject and use of a certificate [`issue`]d by the cluster CA.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    /// Subject common name: the Kubernetes user name of a client certificate.
    pub(crate) common_name: String,
    /// Subject organization: the Kubernetes group of a client certificate.
    pub(crate) organization: Option<String>,
    /// DNS names and IP addresses (serving certificates).
    pub(crate) sans: Vec<String>,
    /// Server (true) or client (false) authentication.
    pub(crate) server: bool,
}

impl Identity {
    /// A client certificate for user `name` in `group`.
    pub(crate) fn client(name: &str, group: Option<&str>) -> Self {
        Self {
            common_name: name.to_owned(),
            organization: group.map(str::to_owned),
            sans: Vec::new(),
            server: false,
        }
    }

    /// A serving certificate named `name` for the DNS names and addresses `sans`.
    pub(crate) fn server(name: &str, sans: &[String]) -> Self {
        Self {
            common_name: name.to_owned(),
            organization: None,
            sans: sans.to_vec(),
            server: true,
        }
    }
}

/// A certificate and its private key, both PEM.
#[derive(Debug, Clone)]
pub(crate) struct Issued {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
}

impl Issued {
    /// Writes the certificate and the key (mode 0600).
    pub(crate) fn write(&self, cert: &Path, key: &Path) -> anyhow::Result<()> {
        write_file(cert, &self.cert_pem, false)?;
        write_file(key, &self.key_pem, true)
    }
}

/// Issues a certificate for `identity` (fresh ECDSA P-256 key) signed by the CA whose
/// certificate and key are the PEM files `ca_cert` and `ca_key` (a control plane's
/// `pki/ca.crt` and `pki/ca.key`).
///
/// # Errors
/// The CA files cannot be read or parsed, or signing fails.
pub(crate) fn issue(ca_cert: &Path, ca_key: &Path, identity: &Identity) -> anyhow::Result<Issued> {
    let read =
        |p: &Path| std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()));
    let key = KeyPair::from_pem(&read(ca_key)?).context("parsing the CA key")?;
    let issuer =
        Issuer::from_ca_cert_pem(&read(ca_cert)?, &key).context("parsing the CA certificate")?;
    issue_with(&issuer, identity)
}

/// [`issue`] with a loaded issuer.
fn issue_with(issuer: &Issuer<'_, &KeyPair>, identity: &Identity) -> anyhow::Result<Issued> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    for san in &identity.sans {
        params.subject_alt_names.push(match san.parse::<IpAddr>() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => rcgen::SanType::DnsName(san.as_str().try_into()?),
        });
    }
    params
        .distinguished_name
        .push(DnType::CommonName, identity.common_name.as_str());
    if let Some(org) = &identity.organization {
        params
            .distinguished_name
            .push(DnType::OrganizationName, org.as_str());
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![if identity.server {
        ExtendedKeyUsagePurpose::ServerAuth
    } else {
        ExtendedKeyUsagePurpose::ClientAuth
    }];
    let cert = params.signed_by(&key, issuer)?;
    Ok(Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A random 32-hex-digit token from `/dev/urandom`.
pub(crate) fn random_token() -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `<state>/tokens.csv`: the admin token (user `admin`, group `system:masters`).
pub(crate) fn write_token_file(path: &Path, admin_token: &str) -> anyhow::Result<()> {
    write_file(
        path,
        &format!("{admin_token},admin,admin,\"system:masters\"\n"),
        true,
    )
}

/// Writes `contents` to `path`, mode 0600 when `secret`.
pub(crate) fn write_file(path: &Path, contents: &str, secret: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    if secret {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("chmod {}", path.display()))?;
    }
    Ok(())
}

/// Standard base64 (RFC 4648, padded), for kubeconfig `*-data` fields.
pub(crate) fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want);
        }
    }
}
