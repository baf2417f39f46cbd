//! Images: the kubelet's pull policy (`pkg/kubelet/images/image_manager.go`) and registry
//! credentials from `imagePullSecrets` of type `kubernetes.io/dockerconfigjson`.

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageOutcome {
    /// It was already present (not pulled).
    Present,
    /// It was pulled; the pull took this long.
    Pulled(Duration),
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

/// The registry host of `image` (`docker.io` when the first component is not a host).
fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// Credentials for `image` from `kubernetes.io/dockerconfigjson` secrets: the first `auths`
/// entry whose key names the image's registry (with or without scheme and path).
pub fn credentials_for(image: &str, secrets: &[Secret]) -> Option<RegistryAuth> {
    let registry = registry_of(image);
    let aliases: &[&str] = if registry == "docker.io" {
        &["docker.io", "index.docker.io", "registry-1.docker.io"]
    } else {
        &[registry]
    };
    for secret in secrets {
        let Some(raw) = secret
            .data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
        else {
            continue;
        };
        let Ok(config) = serde_json::from_slice::<serde_json::Value>(&raw.0) else {
            continue;
        };
        let Some(auths) = config.get("auths").and_then(|a| a.as_object()) else {
            continue;
        };
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
    }
    None
}

/// Makes `image` available on `runtime` according to `policy`, pulling with `auth`;
/// `on_pull` runs just before a pull starts (for the `Pulling` event). Kubelet:
/// `imageManager.EnsureImageExists`.
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
        // `Always` with an unreachable registry: kubelet fails the pull too.
        Err(source) => Err(ImageError::Pull {
            image: image.to_owned(),
            source,
        }),
    }
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
}
