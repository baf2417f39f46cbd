//! Certificates and credentials of a test control plane, generated with rcgen.
//!
//! All keys are ECDSA P-256. Files (in `<state>/pki/`): `ca.crt`/`ca.key` (the cluster
//! CA, also the kube-controller-manager's CSR signer), `apiserver.crt`/`apiserver.key`
//! (serving certificate), `sa.key`/`sa.pub` (service-account token signing pair), and
//! `<state>/tokens.csv` (kube-apiserver `--token-auth-file`).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// Subject alternative names of the API server's serving certificate: loopback, and
/// the in-cluster names and service IP (first address of `10.96.0.0/16`).
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
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
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
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
        }
    }

    /// Generates a fresh CA, serving certificate and service-account key pair and
    /// writes them (keys with mode 0600).
    pub(crate) fn generate(state_dir: &Path) -> anyhow::Result<Self> {
        let pki = Self::paths(state_dir);
        let dir = state_dir.join("pki");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "verge-test-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, &ca_key);

        let server_key = KeyPair::generate()?;
        let mut server_params = CertificateParams::new(
            APISERVER_SANS
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>(),
        )?;
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

        write_file(&pki.ca_cert, &ca_cert.pem(), false)?;
        write_file(&pki.ca_key, &ca_key.serialize_pem(), true)?;
        write_file(&pki.apiserver_cert, &server_cert.pem(), false)?;
        write_file(&pki.apiserver_key, &server_key.serialize_pem(), true)?;
        write_file(&pki.sa_key, &sa_key.serialize_pem(), true)?;
        write_file(&pki.sa_pub, &sa_key.public_key_pem(), false)?;
        Ok(pki)
    }
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
