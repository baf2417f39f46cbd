//! Images: the kubelet's pull policy (`pkg/kubelet/images/image_manager.go`) and registry
//! credentials from `imagePullSecrets` of type `kubernetes.io/dockerconfigjson`.
//!
//! # `Always` with an unreachable registry (edge behaviour)
//! The kubelet fails a pull under policy `Always` whenever the pull fails. An edge node
//! loses its link for hours, and every restart of such a container would then wait in
//! `ImagePullBackOff` although the image is on the node. So [`ensure_image`] differs in one
//! case: policy `Always`, the image present locally, and the pull failed because the engine
//! could not *reach* the registry ([`RuntimeError::RegistryUnreachable`], decided from the
//! engine's message by [`registry_unreachable`]: DNS failure, connection refused, no route,
//! timeout). The local image is used then ([`ImageOutcome::RegistryUnreachable`]; edged
//! records a `Warning` event `ImagePullFailedUsingLocal`). Any answer of the registry (an
//! authentication error, an unknown manifest or tag, too many requests, a certificate it
//! presented) still fails the pull as with the kubelet, and so does an unreachable registry
//! when the image is absent.

use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;

use super::{ContainerRuntime, RegistryAuth, RuntimeError};

/// `imagePullPolicy`, parsed once from the container spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Pull on every container start.
    Always,
    /// Pull only when the image is not present.
    IfNotPresent,
    /// Never pull; fail with `ErrImageNeverPull` when absent.
    Never,
}

impl PullPolicy {
    /// The policy of a container: its `imagePullPolicy`, or the Kubernetes default (`Always`
    /// for the tag `latest` or no tag and no digest, else `IfNotPresent`).
    pub fn of(image: &str, policy: Option<&str>) -> Self {
        match policy {
            Some("Always") => Self::Always,
            Some("Never") => Self::Never,
            Some("IfNotPresent") => Self::IfNotPresent,
            _ => match split_reference(image) {
                (_, Reference::Tag(t)) if t != "latest" => Self::IfNotPresent,
                (_, Reference::Digest(_)) => Self::IfNotPresent,
                _ => Self::Always,
            },
        }
    }

    /// Whether an image must be pulled under this policy when it is (`present`) or is not
    /// there (kubelet: `shouldPullImage`).
    ///
    /// # Errors
    /// [`ImageError::NeverPull`] for `Never` and an absent image.
    pub fn needs_pull(self, image: &str, present: bool) -> Result<bool, ImageError> {
        match self {
            Self::Never if present => Ok(false),
            Self::Never => Err(ImageError::NeverPull {
                image: image.to_owned(),
            }),
            Self::IfNotPresent => Ok(!present),
            Self::Always => Ok(true),
        }
    }
}

/// Why an image is not available (kubelet: `images.ErrImagePull`, `ErrImageNeverPull`).
/// The messages are the kubelet's.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    /// Policy `Never` and the image is absent (waiting reason `ErrImageNeverPull`).
    #[error("Container image \"{image}\" is not present with pull policy of Never")]
    NeverPull {
        /// The image reference.
        image: String,
    },
    /// The local image could not be inspected (waiting reason `ErrImagePull`).
    #[error("{}", .source.engine())]
    Inspect {
        /// The runtime's failure.
        #[source]
        source: RuntimeError,
    },
    /// The pull failed (waiting reason `ErrImagePull`, then `ImagePullBackOff`).
    #[error("failed to pull image \"{image}\": {}", .source.engine())]
    Pull {
        /// The image reference.
        image: String,
        /// The runtime's failure.
        #[source]
        source: RuntimeError,
    },
}

/// How [`ensure_image`] made an image available.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageOutcome {
    /// It was already present (not pulled).
    Present,
    /// It was pulled; the pull took this long.
    Pulled(Duration),
    /// Policy `Always`, but the registry could not be reached: the image present on the node
    /// is used (see the module docs). `error` is the engine's message.
    RegistryUnreachable {
        /// Why the pull failed, as the engine said it.
        error: String,
    },
}

/// What the engine says when a pull cannot reach the registry at all: Go's `net` and
/// `net/http` errors as Docker passes them on (`dial tcp: lookup registry.k8s.io on
/// 10.0.0.53:53: no such host`, `dial tcp 10.1.2.3:443: connect: connection refused`,
/// `... i/o timeout`, `net/http: TLS handshake timeout`, ...). Matched case-insensitively.
const UNREACHABLE: &[&str] = &[
    "dial tcp",
    "no such host",
    "temporary failure in name resolution",
    "server misbehaving",
    "connection refused",
    "network is unreachable",
    "no route to host",
    "i/o timeout",
    "tls handshake timeout",
    "request canceled while waiting for connection",
    "client.timeout exceeded while awaiting headers",
    "context deadline exceeded",
];

/// What shows that the registry (or its token server) answered: such a failure is never
/// taken for an unreachable registry, whatever else the message says.
const ANSWERED: &[&str] = &[
    "unauthorized",
    "authentication required",
    "denied",
    "forbidden",
    "manifest unknown",
    "not found",
    "toomanyrequests",
    "too many requests",
    "x509:",
    "certificate",
    "server gave http response",
    "http response to https client",
];

/// Whether the engine's message of a failed pull says the registry could not be reached
/// (no answer came from it: name resolution failed, the connection was refused or found no
/// route, or it timed out). A message that shows an answer of the registry
/// (`unauthorized`, `denied`, `manifest unknown`, `not found`, `toomanyrequests`, a
/// certificate error, ...) never is; neither is a connection reset or an unexpected end of a
/// transfer that had begun.
pub fn registry_unreachable(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    UNREACHABLE.iter().any(|p| message.contains(p)) && !ANSWERED.iter().any(|p| message.contains(p))
}

/// The tag or digest part of an image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reference<'a> {
    None,
    Tag(&'a str),
    Digest(&'a str),
}

/// Splits `repo[:tag][@digest]` into the repository and its tag or digest.
pub(super) fn split_reference(image: &str) -> (&str, Reference<'_>) {
    if let Some((repo, digest)) = image.split_once('@') {
        return (repo, Reference::Digest(digest));
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_slash..].rfind(':') {
        Some(i) => (
            &image[..last_slash + i],
            Reference::Tag(&image[last_slash + i + 1..]),
        ),
        None => (image, Reference::None),
    }
}

/// The registry host of `image` as Docker resolves it: the first component when it names a
/// host (holds `.` or `:`, or is `localhost`), else `docker.io`.
pub fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// Credentials for `image` from `kubernetes.io/dockerconfigjson` secrets: the first `auths`
/// entry whose key names the image's registry (with or without scheme and path).
pub fn credentials_for(image: &str, secrets: &[Secret]) -> Option<RegistryAuth> {
    secrets
        .iter()
        .filter_map(|s| s.data.as_ref()?.get(".dockerconfigjson"))
        .find_map(|raw| credentials_in(image, &raw.0))
}

/// The node's own credentials for `image`: `<data_dir>/config.json`, a Docker `config.json`
/// (`{"auths": {...}}`), as the kubelet reads `<root-dir>/config.json` for every pull. `None`
/// when the file is missing, unreadable or names no login for the image's registry.
pub fn node_credentials(data_dir: &std::path::Path, image: &str) -> Option<RegistryAuth> {
    let bytes = std::fs::read(data_dir.join(NODE_CREDENTIALS_FILE)).ok()?;
    credentials_in(image, &bytes)
}

/// The node's credentials file in edgecore's data directory ([`node_credentials`]).
pub const NODE_CREDENTIALS_FILE: &str = "config.json";

/// The `auths` entry of Docker configuration `config` (JSON) whose key names `image`'s
/// registry.
fn credentials_in(image: &str, config: &[u8]) -> Option<RegistryAuth> {
    let registry = registry_of(image);
    let aliases: &[&str] = if registry == "docker.io" {
        &["docker.io", "index.docker.io", "registry-1.docker.io"]
    } else {
        &[registry]
    };
    let config = serde_json::from_slice::<serde_json::Value>(config).ok()?;
    let auths = config.get("auths")?.as_object()?;
    for (key, entry) in auths {
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let host = host.split('/').next().unwrap_or(host);
        if !aliases.contains(&host) {
            continue;
        }
        let field = |f: &str| entry.get(f).and_then(|v| v.as_str()).map(str::to_owned);
        let (mut username, mut password) = (field("username"), field("password"));
        if username.is_none() {
            let decoded = field("auth")
                .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a).ok());
            if let Some((u, p)) = decoded
                .and_then(|d| String::from_utf8(d).ok())
                .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_owned(), p.to_owned())))
            {
                (username, password) = (Some(u), Some(p));
            }
        }
        return Some(RegistryAuth {
            username,
            password,
            server_address: Some(key.clone()),
            identity_token: field("identitytoken"),
        });
    }
    None
}

/// Makes `image` available on `runtime` according to `policy`, pulling with `auth`;
/// `on_pull` runs just before a pull starts (for the `Pulling` event). Kubelet:
/// `imageManager.EnsureImageExists`, except that under `Always` a pull that cannot reach the
/// registry uses the image present on the node ([`ImageOutcome::RegistryUnreachable`]; see
/// the module docs).
///
/// # Errors
/// [`ImageError::NeverPull`] (policy `Never`, image absent), [`ImageError::Inspect`] or
/// [`ImageError::Pull`].
pub async fn ensure_image<R: ContainerRuntime>(
    runtime: &R,
    image: &str,
    policy: PullPolicy,
    auth: Option<RegistryAuth>,
    on_pull: impl FnOnce(),
) -> Result<ImageOutcome, ImageError> {
    let present = runtime
        .image_status(image)
        .await
        .map_err(|source| ImageError::Inspect { source })?
        .is_some();
    if !policy.needs_pull(image, present)? {
        return Ok(ImageOutcome::Present);
    }
    on_pull();
    let started = tokio::time::Instant::now();
    match runtime.pull_image(image, auth).await {
        Ok(()) => Ok(ImageOutcome::Pulled(started.elapsed())),
        // Edge: the link is down, the image is here (the kubelet would fail the pull).
        Err(source) if uses_local(policy, present, &source) => {
            Ok(ImageOutcome::RegistryUnreachable {
                error: source.engine().to_string(),
            })
        }
        Err(source) => Err(ImageError::Pull {
            image: image.to_owned(),
            source,
        }),
    }
}

/// Whether a failed pull falls back to the local image: policy `Always`, the image present,
/// the registry unreachable (see the module docs). `IfNotPresent` pulls only absent images,
/// and `Never` does not pull.
fn uses_local(policy: PullPolicy, present: bool, failure: &RuntimeError) -> bool {
    policy == PullPolicy::Always && present && failure.is_registry_unreachable()
}

/// The kubelet's `imageID` of a local image id (`sha256:...`):
/// `docker-pullable://<repo>@<digest>` when it has a repo digest, else `docker://<id>`.
pub async fn image_ref<R: ContainerRuntime>(runtime: &R, image_id: &str) -> String {
    match runtime.image_status(image_id).await {
        Ok(Some(i)) => match i.repo_digests.into_iter().next() {
            Some(d) => format!("docker-pullable://{d}"),
            None => format!("docker://{image_id}"),
        },
        _ => format!("docker://{image_id}"),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::ByteString;

    use super::*;

    #[test]
    fn default_policy_follows_kubernetes() {
        assert_eq!(PullPolicy::of("busybox", None), PullPolicy::Always);
        assert_eq!(PullPolicy::of("busybox:latest", None), PullPolicy::Always);
        assert_eq!(
            PullPolicy::of("busybox:1.36", None),
            PullPolicy::IfNotPresent
        );
        assert_eq!(PullPolicy::of("localhost:5000/b", None), PullPolicy::Always);
        assert_eq!(
            PullPolicy::of("localhost:5000/b:v1", None),
            PullPolicy::IfNotPresent
        );
        assert_eq!(
            PullPolicy::of("b@sha256:ab", None),
            PullPolicy::IfNotPresent
        );
        assert_eq!(PullPolicy::of("b", Some("Never")), PullPolicy::Never);
    }

    #[test]
    fn pull_decisions_follow_the_kubelet() {
        use PullPolicy::{Always, IfNotPresent, Never};
        assert!(Always.needs_pull("a", true).expect("always"));
        assert!(!IfNotPresent.needs_pull("a", true).expect("present"));
        assert!(IfNotPresent.needs_pull("a", false).expect("absent"));
        assert!(!Never.needs_pull("a", true).expect("never, present"));
        let e = Never.needs_pull("a", false).expect_err("never, absent");
        assert_eq!(
            e.to_string(),
            "Container image \"a\" is not present with pull policy of Never"
        );
    }

    /// Docker's messages (as the daemon answers a pull, `Error response from daemon: ...`).
    #[test]
    fn unreachable_registries_are_told_from_answers() {
        let unreachable = [
            // What this machine's dockerd says without a network (seen in edgecore's log).
            "Get \"https://registry.k8s.io/v2/\": dial tcp: lookup registry.k8s.io on \
             10.255.255.53:53: no such host",
            "Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: \
             Temporary failure in name resolution",
            "Get \"https://r.example:5000/v2/\": dial tcp 10.1.2.3:5000: connect: connection refused",
            "Get \"https://r.example/v2/\": dial tcp 10.1.2.3:443: connect: network is unreachable",
            "Get \"https://r.example/v2/\": dial tcp 10.1.2.3:443: connect: no route to host",
            "Get \"https://r.example/v2/\": dial tcp 10.1.2.3:443: i/o timeout",
            "Get \"https://r.example/v2/\": dial tcp: lookup r.example on 127.0.0.53:53: \
             server misbehaving",
            "Get \"https://registry-1.docker.io/v2/\": net/http: request canceled while \
             waiting for connection (Client.Timeout exceeded while awaiting headers)",
            "Get \"https://r.example/v2/\": net/http: TLS handshake timeout",
            "Get \"https://r.example/v2/\": context deadline exceeded",
            "Get \"https://r.example/v2/\": proxyconnect tcp: dial tcp 10.0.0.1:3128: connect: \
             connection refused",
        ];
        for m in unreachable {
            assert!(registry_unreachable(m), "unreachable: {m}");
        }
        let answered = [
            "pull access denied for x, repository does not exist or may require 'docker \
             login': denied: requested access to the resource is denied",
            "Head \"https://r.example/v2/a/manifests/1\": unauthorized: authentication required",
            "manifest for busybox:nope not found: manifest unknown: manifest unknown",
            "toomanyrequests: You have reached your pull rate limit.",
            "Get \"https://r.example/v2/\": x509: certificate signed by unknown authority",
            "Get \"https://r.example/v2/\": http: server gave HTTP response to HTTPS client",
            "Get \"https://r.example/v2/\": tls: failed to verify certificate: x509: \
             certificate has expired or is not yet valid",
            // A transfer that had begun: the registry was reached.
            "read tcp 10.0.0.2:50000->10.1.2.3:443: read: connection reset by peer",
            "unexpected EOF",
            "invalid reference format",
            "",
        ];
        for m in answered {
            assert!(!registry_unreachable(m), "answered: {m}");
        }
    }

    const DNS_FAILURE: &str = "Get \"https://registry.k8s.io/v2/\": dial tcp: lookup \
                               registry.k8s.io on 10.255.255.53:53: no such host";

    /// `Always` uses the local image only when the registry cannot be reached; every other
    /// case is the kubelet's.
    #[tokio::test]
    async fn always_uses_the_local_image_only_when_the_registry_is_unreachable() {
        use crate::fake::FakeRuntime;
        use PullPolicy::{Always, IfNotPresent};
        let rt = FakeRuntime::new("n");
        rt.add_image("kitten:1.8");
        rt.fail_pull("kitten:1.8", DNS_FAILURE);
        let mut pulling = 0;
        let got = ensure_image(&rt, "kitten:1.8", Always, None, || pulling += 1).await;
        let Ok(ImageOutcome::RegistryUnreachable { error }) = got else {
            panic!("the local image is used: {got:?}");
        };
        assert_eq!(error, DNS_FAILURE);
        assert_eq!(pulling, 1, "the pull was tried");
        assert_eq!(rt.take_calls(), ["pull kitten:1.8"]);

        // Absent: nothing to fall back on.
        rt.fail_pull("absent:1", DNS_FAILURE);
        let got = ensure_image(&rt, "absent:1", Always, None, || {}).await;
        assert!(
            matches!(&got, Err(ImageError::Pull { source, .. }) if source.is_registry_unreachable()),
            "{got:?}"
        );

        // An answer of the registry fails the pull, image present or not.
        rt.fail_pull("kitten:1.8", "unauthorized: authentication required");
        let got = ensure_image(&rt, "kitten:1.8", Always, None, || {}).await;
        let e = got.expect_err("an authentication error fails");
        assert_eq!(
            e.to_string(),
            "failed to pull image \"kitten:1.8\": unauthorized: authentication required"
        );
        rt.fail_pull(
            "kitten:1.8",
            "manifest for kitten:1.8 not found: manifest unknown",
        );
        assert!(
            ensure_image(&rt, "kitten:1.8", Always, None, || {})
                .await
                .is_err()
        );

        // IfNotPresent never pulls a present image; a reachable registry pulls as before.
        let got = ensure_image(&rt, "kitten:1.8", IfNotPresent, None, || {}).await;
        assert_eq!(got.ok(), Some(ImageOutcome::Present));
        rt.heal_pull("kitten:1.8");
        let got = ensure_image(&rt, "kitten:1.8", Always, None, || {}).await;
        assert!(matches!(got, Ok(ImageOutcome::Pulled(_))), "{got:?}");
    }

    #[test]
    fn credentials_from_dockerconfigjson() {
        let config = serde_json::json!({"auths": {
            "https://index.docker.io/v1/": {"auth": "dTpw"},
            "reg.example.com:5000": {"username": "a", "password": "b"},
        }});
        let secret = Secret {
            type_: Some("kubernetes.io/dockerconfigjson".into()),
            data: Some(BTreeMap::from([(
                ".dockerconfigjson".to_owned(),
                ByteString(serde_json::to_vec(&config).expect("json")),
            )])),
            ..Secret::default()
        };
        let hub = credentials_for("library/busybox", std::slice::from_ref(&secret)).expect("hub");
        assert_eq!(
            (hub.username.as_deref(), hub.password.as_deref()),
            (Some("u"), Some("p"))
        );
        let own = credentials_for("reg.example.com:5000/x:1", std::slice::from_ref(&secret))
            .expect("own");
        assert_eq!(own.username.as_deref(), Some("a"));
        assert!(credentials_for("other.io/x", &[secret]).is_none());
    }

    #[test]
    fn the_nodes_own_logins_come_from_its_config_json() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(node_credentials(dir.path(), "reg.example.com:5000/x:1").is_none());
        let config = r#"{"auths": {"reg.example.com:5000": {"username": "a", "password": "b"}}}"#;
        std::fs::write(dir.path().join(NODE_CREDENTIALS_FILE), config).expect("written");
        let login =
            node_credentials(dir.path(), "reg.example.com:5000/x@sha256:00").expect("login");
        assert_eq!(login.username.as_deref(), Some("a"));
        assert!(node_credentials(dir.path(), "other.io/x").is_none());
    }
}
