//! The files of one registry instance: its CA and serving certificate (rcgen, ECDSA P-256),
//! the htpasswd file (bcrypt) and `config.yml` (layout in the [module docs](super)).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rand::distr::{Alphanumeric, SampleString as _};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::REGISTRY_USER;
use crate::mosquitto::write_private;

/// The bcrypt cost of the htpasswd entry: `htpasswd -B`'s default. The registry checks the
/// hash on every request, and the password is 24 random alphanumerics, so a higher cost
/// would only slow the tests down.
const BCRYPT_COST: u32 = 5;

/// The basic-auth realm the registry names in its `WWW-Authenticate` challenge.
const REALM: &str = "verge-test-registry";

/// What a start needs from the generated credentials.
#[derive(Debug, Clone)]
pub(super) struct Credentials {
    /// The CA certificate (PEM) that signed the serving certificate.
    pub(super) ca_pem: String,
    /// [`REGISTRY_USER`]'s password (24 random alphanumerics).
    pub(super) password: String,
}

/// Writes a fresh CA (`ca.crt`; its key is not kept), a serving certificate for `ip`
/// (`tls.crt`, `tls.key`; `localhost` too when `ip` is loopback) and `htpasswd` for
/// [`REGISTRY_USER`] with a random password into `dir`, and creates `dir/storage`.
pub(super) fn write_credentials(dir: &Path, ip: Ipv4Addr) -> anyhow::Result<Credentials> {
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "verge-test-registry-ca");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, &ca_key);

    let server_key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(std::net::IpAddr::V4(ip)));
    if ip.is_loopback() {
        params
            .subject_alt_names
            .push(SanType::DnsName("localhost".try_into()?));
    }
    params
        .distinguished_name
        .push(DnType::CommonName, "verge-test-registry");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let server_cert = params.signed_by(&server_key, &issuer)?;

    let ca_pem = ca_cert.pem();
    std::fs::write(dir.join("ca.crt"), &ca_pem).context("writing the registry's ca.crt")?;
    std::fs::write(dir.join("tls.crt"), server_cert.pem())
        .context("writing the registry's tls.crt")?;
    write_private(&dir.join("tls.key"), &server_key.serialize_pem())?;

    let password = Alphanumeric.sample_string(&mut rand::rng(), 24);
    let hash = bcrypt::hash(&password, BCRYPT_COST).context("bcrypt of the registry password")?;
    write_private(&dir.join("htpasswd"), &format!("{REGISTRY_USER}:{hash}\n"))?;

    let storage = dir.join("storage");
    std::fs::create_dir_all(&storage).with_context(|| format!("creating {}", storage.display()))?;
    Ok(Credentials { ca_pem, password })
}

/// Writes `<dir>/config.yml` for a registry on `addr` with the files of
/// [`write_credentials`]; returns its path. Filesystem storage with deletes allowed, HTTPS
/// (TLS 1.2 or newer) only, htpasswd auth, an access log, no debug server.
pub(super) fn write_config(dir: &Path, addr: SocketAddrV4) -> anyhow::Result<PathBuf> {
    let path = |name: &str| dir.join(name).display().to_string();
    let config = serde_json::json!({
        "version": "0.1",
        "log": {"level": "info", "formatter": "text"},
        "storage": {
            "filesystem": {"rootdirectory": path("storage")},
            "delete": {"enabled": true},
            // No background upload purging: nothing outlives the instance anyway.
            "maintenance": {"uploadpurging": {"enabled": false}},
        },
        "http": {
            "addr": addr.to_string(),
            // The HMAC key of upload state; a fixed one avoids the registry's warning.
            "secret": Alphanumeric.sample_string(&mut rand::rng(), 32),
            "tls": {
                "certificate": path("tls.crt"),
                "key": path("tls.key"),
                "minimumtls": "tls1.2",
            },
            "headers": {"X-Content-Type-Options": ["nosniff"]},
        },
        "auth": {"htpasswd": {"realm": REALM, "path": path("htpasswd")}},
    });
    let file = dir.join("config.yml");
    write_private(&file, &serde_norway::to_string(&config)?)?;
    Ok(file)
}
