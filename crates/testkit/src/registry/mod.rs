//! A real OCI registry for tests: the CNCF distribution registry (`registry serve`) of one
//! pinned release ([`REGISTRY_VERSION`]), built from its Go module and started as a child
//! process of the test, one private instance per handle, for image pre-pull and node-upgrade
//! tests (no registry on the internet can be reached).
//!
//! [`RegistryConfig::ensure_built`] builds `registry` once into
//! `~/.cache/verge/registry/v<version>/bin/` (a cold build prints progress every 10 s);
//! [`Registry::start`] (loopback) and [`Registry::start_on`] (any local IPv4 address, e.g. the
//! host side of a network namespace's veth) build if needed, generate the registry's files
//! into a fresh temporary directory and start it on a free port.
//!
//! Secure by default, like [`crate::mosquitto`]: it serves HTTPS only, with a certificate for
//! the bound address signed by a CA generated per instance, and accepts one user
//! ([`REGISTRY_USER`]) with a random password (htpasswd, bcrypt). Docker trusts the CA
//! through `/etc/docker/certs.d/<ip>:<port>/ca.crt`, which Docker reads per pull (no daemon
//! restart). Dropping the handle kills the registry and removes that file, the storage and
//! the credentials.
//!
//! # Layout
//!
//! * this module — [`RegistryConfig`], [`REGISTRY_VERSION`], [`REGISTRY_USER`];
//! * `build` — building the binary from the Go module (`assets/registry/build.sh`);
//! * `files` — the CA, serving certificate, htpasswd file and `config.yml` of one instance;
//! * `launch` — starting it, the readiness wait, Docker's trust of the CA;
//! * `handle` — [`Registry`]: addresses, credentials, pull-secret JSON, an HTTPS client,
//!   `docker push`.
//!
//! # Files of one instance (a `verge-registry-*` temporary directory)
//!
//! ```text
//! <dir>/config.yml    the registry's configuration
//! <dir>/ca.crt        the instance's CA (also in /etc/docker/certs.d/<ip>:<port>/ca.crt)
//! <dir>/tls.crt, tls.key   the serving certificate for <ip> and its key (0600)
//! <dir>/htpasswd      <user>:<bcrypt hash> (0600)
//! <dir>/storage/      the filesystem storage driver's root
//! ```

mod build;
mod files;
mod handle;
mod launch;

use std::path::PathBuf;
use std::time::Duration;

pub use build::build_script;
pub use handle::{Pushed, Registry};
pub use launch::DOCKER_CERTS_DIR;

use crate::paths;

/// The pinned distribution release (`github.com/distribution/distribution/v3`), without the
/// `v`: the newest v3 on the Go module proxy.
pub const REGISTRY_VERSION: &str = "3.1.2";

/// The binary's file name in [`RegistryConfig::bin_dir`].
pub const BINARY: &str = "registry";

/// The user name every test registry accepts (with a random password per instance).
pub const REGISTRY_USER: &str = "verge-test";

/// Where the registry binary is built and how long a start may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryConfig {
    /// distribution release without the `v`, e.g. `"3.1.2"`.
    pub version: String,
    /// Build cache: `bin/registry` and the `complete` stamp (reading `v<version>`).
    /// Default `$VERGE_REGISTRY_CACHE_DIR`, else `~/.cache/verge/registry/v<version>`.
    pub cache_dir: PathBuf,
    /// How long a start waits for the registry to listen. Default 30 s.
    pub ready_timeout: Duration,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self::from_env()
    }
}

impl RegistryConfig {
    /// The configuration for [`REGISTRY_VERSION`] with the cache directory from
    /// `$VERGE_REGISTRY_CACHE_DIR` (unset or empty: `~/.cache/verge/registry/v<version>`).
    pub fn from_env() -> Self {
        let version = REGISTRY_VERSION.to_owned();
        Self {
            cache_dir: std::env::var_os("VERGE_REGISTRY_CACHE_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    paths::verge_home()
                        .join("registry")
                        .join(format!("v{version}"))
                }),
            version,
            ready_timeout: Duration::from_secs(30),
        }
    }

    /// `<cache-dir>/bin`.
    pub fn bin_dir(&self) -> PathBuf {
        self.cache_dir.join("bin")
    }

    /// `<cache-dir>/bin/registry`.
    pub fn binary(&self) -> PathBuf {
        self.bin_dir().join(BINARY)
    }
}
