//! The kit's OCI registry: built from its Go module, started with TLS and a password, the
//! busybox test image pushed into it with the `docker` CLI. On the host side of a veth (an
//! address Docker does not treat as insecure, unlike loopback), Docker verifies the registry
//! against the CA in `/etc/docker/certs.d` and pulls only when logged in; on loopback, the
//! registry serves the manifest over HTTPS only, only with credentials. Needs the Docker
//! engine (the kit starts it) and root, not the control plane.

use std::path::Path;
use std::process::Output;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use verge_testkit::docker;
use verge_testkit::netns::EdgeNetns;
use verge_testkit::registry::{DOCKER_CERTS_DIR, Pushed, Registry};

/// The manifest types Docker pushes (Docker's schema 2, or OCI with the containerd image
/// store), and their lists.
const MANIFEST_TYPES: &str = "application/vnd.docker.distribution.manifest.v2+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";

/// The test image's repository in the registries.
const REPOSITORY: &str = "verge-test/busybox";

/// The Docker engine and [`docker::TEST_IMAGE`].
async fn ensure_docker() -> anyhow::Result<()> {
    tokio::task::spawn_blocking(|| -> anyhow::Result<()> {
        docker::ensure_docker()?;
        docker::ensure_test_image()
    })
    .await?
}

/// Pushes [`docker::TEST_IMAGE`] as `REPOSITORY:<tag>` and checks what `push` returns.
async fn push_test_image(registry: &Registry, tag: &str) -> anyhow::Result<Pushed> {
    let pushed = registry
        .push(docker::TEST_IMAGE, &format!("{REPOSITORY}:{tag}"))
        .await?;
    assert_eq!(
        pushed.reference,
        format!("{}/{REPOSITORY}:{tag}", registry.host())
    );
    assert!(
        pushed.digest.starts_with("sha256:") && pushed.digest.len() == 71,
        "{pushed:?}"
    );
    assert_eq!(
        pushed.by_digest(),
        format!("{}/{REPOSITORY}@{}", registry.host(), pushed.digest)
    );
    Ok(pushed)
}

/// `docker <args>` with `DOCKER_CONFIG=<config>` (never `~/.docker`).
async fn docker_with(config: &Path, args: &[&str]) -> anyhow::Result<Output> {
    Ok(tokio::process::Command::new("docker")
        .args(args)
        .env("DOCKER_CONFIG", config)
        .output()
        .await?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn docker_pulls_from_a_registry_on_a_veth_only_when_logged_in() -> anyhow::Result<()> {
    ensure_docker().await?;
    let netns = EdgeNetns::create(8)?;
    let registry = Registry::start_on(netns.host_addr()).await?;
    assert_eq!(registry.addr().ip(), &netns.host_addr());
    let certs = Path::new(DOCKER_CERTS_DIR)
        .join(registry.host())
        .join("ca.crt");
    assert_eq!(std::fs::read_to_string(&certs)?, registry.ca_pem());
    let pushed = push_test_image(&registry, "veth").await?;

    // Anonymous: refused by the registry, over a TLS connection Docker verified with the CA.
    docker::docker(&["rmi", &pushed.reference])?;
    assert!(!docker::image_exists(&pushed.reference));
    let anonymous = tempfile::tempdir()?;
    let refused = docker_with(anonymous.path(), &["pull", &pushed.reference]).await?;
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "anonymous pull succeeded");
    assert!(stderr.contains("no basic auth credentials"), "{stderr}");
    assert!(!docker::image_exists(&pushed.reference));

    // Logged in through a temporary DOCKER_CONFIG: by tag and by digest.
    let logged_in = tempfile::tempdir()?;
    registry.docker_login(logged_in.path()).await?;
    let config = std::fs::read_to_string(logged_in.path().join("config.json"))?;
    assert!(config.contains(&registry.host()), "{config}");
    for reference in [pushed.reference.clone(), pushed.by_digest()] {
        let pulled = docker_with(logged_in.path(), &["pull", &reference]).await?;
        assert!(
            pulled.status.success(),
            "docker pull {reference}: {}\nregistry log:\n{}",
            String::from_utf8_lossy(&pulled.stderr),
            registry.log()
        );
        assert!(docker::image_exists(&reference));
    }
    // Both name one image: untagging its last tag removes it with its digest reference.
    docker::docker(&["rmi", &pushed.reference])?;
    assert!(!docker::image_exists(&pushed.by_digest()));

    // Dropping the handle stops the registry and removes Docker's copy of the CA.
    let addr = registry.addr();
    drop(registry);
    assert!(!certs.exists());
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loopback_registry_serves_https_only_and_only_with_credentials() -> anyhow::Result<()> {
    ensure_docker().await?;
    let registry = Registry::start().await?;
    assert_eq!(registry.addr().ip(), &std::net::Ipv4Addr::LOCALHOST);
    let tag = "loopback";
    let pushed = push_test_image(&registry, tag).await?;
    docker::docker(&["rmi", &pushed.reference])?;

    // The manifest over HTTPS, trusting only the kit's CA: 401 without credentials, 200 with
    // them, naming the pushed digest.
    let manifest = format!("/v2/{REPOSITORY}/manifests/{tag}");
    let anonymous = registry.get(&manifest, Some(MANIFEST_TYPES), false).await?;
    assert_eq!(anonymous.status(), http::StatusCode::UNAUTHORIZED);
    let challenge = anonymous
        .headers()
        .get(http::header::WWW_AUTHENTICATE)
        .expect("a WWW-Authenticate challenge")
        .to_str()?;
    assert!(challenge.starts_with("Basic realm="), "{challenge}");
    let ok = registry.get(&manifest, Some(MANIFEST_TYPES), true).await?;
    assert_eq!(ok.status(), http::StatusCode::OK);
    assert_eq!(
        ok.headers()
            .get("docker-content-digest")
            .expect("Docker-Content-Digest")
            .to_str()?,
        pushed.digest
    );
    let body: serde_json::Value = serde_json::from_slice(ok.body())?;
    assert_eq!(body["schemaVersion"], 2, "{body}");

    // HTTPS only: plain HTTP gets Go's TLS server's 400 (or a reset), never the registry.
    let mut plain = tokio::net::TcpStream::connect(registry.addr()).await?;
    plain
        .write_all(b"GET /v2/ HTTP/1.1\r\nHost: registry\r\nConnection: close\r\n\r\n")
        .await?;
    let mut answer = String::new();
    match plain.read_to_string(&mut answer).await {
        Ok(_) => assert!(answer.starts_with("HTTP/1.0 400"), "{answer}"),
        Err(error) => assert_eq!(error.kind(), std::io::ErrorKind::ConnectionReset),
    }

    // The pull Secret's content names the registry with the user's credentials.
    let config: serde_json::Value = serde_json::from_str(&registry.docker_config_json())?;
    let auth = &config["auths"][registry.host()];
    assert_eq!(auth["username"], registry.username());
    assert_eq!(auth["password"], registry.password());
    let secret = registry.pull_secret("registry-pull");
    assert_eq!(
        secret.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );
    Ok(())
}
