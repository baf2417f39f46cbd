//! [`Registry`], the handle of one running registry: its address and credentials, the
//! pull-secret JSON, an HTTPS client trusting its CA, and `docker push` into it.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt as _;

use super::launch::DockerTrust;
use super::{REGISTRY_USER, RegistryConfig};
use crate::process::ChildProcess;

/// A running distribution registry on `<ip>:<port>`, HTTPS only, requiring [`REGISTRY_USER`]
/// and a random password. Dropping it kills the process (SIGKILL), removes Docker's copy of
/// its CA and deletes its storage and credentials. Its `Debug` leaves the password out.
pub struct Registry {
    // Declared first so the registry is killed before its directory is removed.
    pub(super) process: ChildProcess,
    pub(super) _trust: DockerTrust,
    pub(super) addr: SocketAddrV4,
    pub(super) version: String,
    pub(super) ca_pem: String,
    pub(super) password: String,
    pub(super) dir: tempfile::TempDir,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("addr", &self.addr)
            .field("version", &self.version)
            .field("pid", &self.process.pid())
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// An image [`Registry::push`]ed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// `<ip>:<port>/<repository>:<tag>`, as Docker and Kubernetes name it.
    pub reference: String,
    /// The manifest digest the registry stored, `sha256:<64 hex digits>`.
    pub digest: String,
}

impl Pushed {
    /// The reference pinned by digest: `<ip>:<port>/<repository>@sha256:<hex>`.
    pub fn by_digest(&self) -> String {
        let name = match self.reference.rsplit_once(':') {
            // A tag follows the last `:` only when no `/` does (the port's `:` has one).
            Some((name, tag)) if !tag.contains('/') => name,
            _ => self.reference.as_str(),
        };
        format!("{name}@{}", self.digest)
    }
}

impl Registry {
    /// A registry on `127.0.0.1` ([`RegistryConfig::start_on`] with
    /// [`RegistryConfig::from_env`]).
    ///
    /// # Errors
    /// As [`RegistryConfig::start_on`].
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_on(Ipv4Addr::LOCALHOST).await
    }

    /// A registry on `ip`, an address of this host, e.g. the host side of a network
    /// namespace's veth, so that an edge host in the namespace pulls from it
    /// ([`RegistryConfig::start_on`] with [`RegistryConfig::from_env`]).
    ///
    /// # Errors
    /// As [`RegistryConfig::start_on`].
    pub async fn start_on(ip: Ipv4Addr) -> anyhow::Result<Self> {
        RegistryConfig::from_env().start_on(ip).await
    }

    /// The bound address, `<ip>:<port>`.
    pub fn addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// The registry host as image references and Docker name it: `"<ip>:<port>"`, e.g.
    /// `"127.0.0.1:23456"`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The reference of `repository_and_tag` (e.g. `"verge/app:v1"`) in this registry:
    /// `"<ip>:<port>/verge/app:v1"`.
    pub fn image(&self, repository_and_tag: &str) -> String {
        format!("{}/{repository_and_tag}", self.addr)
    }

    /// `https://<ip>:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The distribution release it runs, e.g. `"3.1.2"`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The PEM certificate of the CA that signed the serving certificate (generated for this
    /// instance; its key is not kept).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A file holding [`Registry::ca_pem`] (removed on drop), for clients configured with
    /// a CA file (`curl --cacert`, containerd's `hosts.toml`).
    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.crt")
    }

    /// The one accepted user name ([`REGISTRY_USER`]).
    pub fn username(&self) -> &str {
        REGISTRY_USER
    }

    /// The user's password (24 random alphanumerics).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The `Authorization` header value of the user: `Basic <base64(user:password)>`.
    pub fn basic_auth(&self) -> String {
        format!("Basic {}", self.auth_token())
    }

    /// The content of a Kubernetes pull Secret's `.dockerconfigjson` key (type
    /// `kubernetes.io/dockerconfigjson`; also a Docker `config.json`):
    /// `{"auths":{"<ip>:<port>":{"username":…,"password":…,"auth":"<base64(user:password)>"}}}`.
    pub fn docker_config_json(&self) -> String {
        serde_json::json!({
            "auths": {
                self.host(): {
                    "username": REGISTRY_USER,
                    "password": self.password,
                    "auth": self.auth_token(),
                }
            }
        })
        .to_string()
    }

    /// A pull Secret `name` (namespace left unset) of type `kubernetes.io/dockerconfigjson`
    /// holding [`Registry::docker_config_json`], for a pod's `imagePullSecrets`.
    pub fn pull_secret(&self, name: &str) -> k8s_openapi::api::core::v1::Secret {
        use k8s_openapi::ByteString;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        k8s_openapi::api::core::v1::Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/dockerconfigjson".to_owned()),
            data: Some(
                [(
                    ".dockerconfigjson".to_owned(),
                    ByteString(self.docker_config_json().into_bytes()),
                )]
                .into(),
            ),
            ..k8s_openapi::api::core::v1::Secret::default()
        }
    }

    /// A rustls client configuration trusting only this registry's CA, with no ALPN
    /// protocols set (hyper-rustls sets its own).
    ///
    /// # Errors
    /// The CA does not parse (never for a CA this kit generated).
    pub fn client_config(&self) -> anyhow::Result<rustls::ClientConfig> {
        let mut config = verge_pki::tls::client_config(&self.ca_pem, None)?;
        config.alpn_protocols.clear();
        Ok(config)
    }

    /// `GET https://<ip>:<port><path>` (e.g. `/v2/verge/app/manifests/v1`) over HTTP/1.1,
    /// trusting only this registry's CA, with `accept` as the `Accept` header when given and,
    /// when `authenticated`, the user's basic credentials. Returns the whole response;
    /// statuses other than 2xx (e.g. 401 without credentials) are not errors.
    ///
    /// # Errors
    /// No TLS connection (e.g. the registry stopped) or a malformed request.
    pub async fn get(
        &self,
        path: &str,
        accept: Option<&str>,
        authenticated: bool,
    ) -> anyhow::Result<http::Response<Bytes>> {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(self.client_config()?)
            .https_only()
            .enable_http1()
            .build();
        let client: Client<_, Empty<Bytes>> =
            Client::builder(TokioExecutor::new()).build(connector);
        let mut request = http::Request::get(format!("{}{path}", self.url()));
        if let Some(accept) = accept {
            request = request.header(http::header::ACCEPT, accept);
        }
        if authenticated {
            request = request.header(http::header::AUTHORIZATION, self.basic_auth());
        }
        let response = client
            .request(request.body(Empty::new())?)
            .await
            .with_context(|| format!("GET {}{path}", self.url()))?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(http::Response::from_parts(parts, body))
    }

    /// `docker login` to this registry as the user, with `DOCKER_CONFIG=<config_dir>`: the
    /// credentials go into `<config_dir>/config.json` (created), never into `~/.docker`.
    /// The password goes through stdin.
    ///
    /// # Errors
    /// `docker` cannot run or the login fails (the error holds its stderr).
    pub async fn docker_login(&self, config_dir: &Path) -> anyhow::Result<()> {
        let host = self.host();
        let args = [
            "login",
            "--username",
            REGISTRY_USER,
            "--password-stdin",
            host.as_str(),
        ];
        docker_with_config(config_dir, &args, Some(&self.password)).await?;
        Ok(())
    }

    /// Tags the local Docker image `local_image` (e.g. [`crate::docker::TEST_IMAGE`]) as
    /// [`Registry::image`]`(repository_and_tag)` and pushes it with the `docker` CLI, logged
    /// in ([`Registry::docker_login`]) into a temporary `DOCKER_CONFIG` directory removed
    /// afterwards. The registry-tagged image stays in the local engine (`docker rmi` it to
    /// make a later pull fetch it). `repository_and_tag` is `<repository>:<tag>`, e.g.
    /// `"verge/app:v1"`.
    ///
    /// # Errors
    /// `repository_and_tag` has no tag; `docker tag`, login or push fails (the error holds
    /// docker's stderr); the push output names no digest.
    pub async fn push(
        &self,
        local_image: &str,
        repository_and_tag: &str,
    ) -> anyhow::Result<Pushed> {
        let has_tag = repository_and_tag
            .rsplit_once(':')
            .is_some_and(|(_, tag)| !tag.is_empty() && !tag.contains('/'));
        if !has_tag {
            bail!("push: {repository_and_tag:?} is not <repository>:<tag>");
        }
        let reference = self.image(repository_and_tag);
        let config = tempfile::Builder::new()
            .prefix("verge-docker-config-")
            .tempdir()
            .context("creating a temporary DOCKER_CONFIG")?;
        docker_with_config(config.path(), &["tag", local_image, &reference], None).await?;
        self.docker_login(config.path()).await?;
        let out = docker_with_config(config.path(), &["push", &reference], None).await?;
        // The last line: `<tag>: digest: sha256:<hex> size: <bytes>`.
        let digest = out
            .lines()
            .filter_map(|line| line.split_once("digest: ")?.1.split_whitespace().next())
            .next_back()
            .with_context(|| format!("docker push {reference} printed no digest:\n{out}"))?;
        Ok(Pushed {
            digest: digest.to_owned(),
            reference,
        })
    }

    /// Whether the registry process is running.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Its log (stdout and stderr: start-up, the access log, errors).
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// `base64(user:password)`.
    fn auth_token(&self) -> String {
        base64::engine::general_purpose::STANDARD
            .encode(format!("{REGISTRY_USER}:{}", self.password))
    }
}

/// `docker <args>` with `DOCKER_CONFIG=<config_dir>`, `stdin` written to its standard input;
/// its stdout.
async fn docker_with_config(
    config_dir: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> anyhow::Result<String> {
    let mut child = tokio::process::Command::new("docker")
        .args(args)
        .env("DOCKER_CONFIG", config_dir)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("running docker {args:?}"))?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        input.write_all(text.as_bytes()).await?;
        // Dropped here: EOF.
    }
    let out = child.wait_with_output().await?;
    if !out.status.success() {
        bail!(
            "docker {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
