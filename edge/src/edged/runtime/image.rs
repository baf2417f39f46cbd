//! Images: the kubelet's pull policy (`pkg/kubelet/images/image_manager.go`) and registry
//! credentials from `imagePullSecrets` of type `kubernetes.io/dockerconfigjson`.

use base64::Engine as _;
use bollard::auth::DockerCredentials;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::Secret;

use super::{Runtime, is_not_found};

/// `imagePullPolicy`.
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
}

/// Why an image is not available; `reason` is the kubelet's waiting reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageError {
    /// `ErrImagePull` or `ErrImageNeverPull` (the back-off turns the former into
    /// `ImagePullBackOff`).
    pub reason: &'static str,
    /// Human-readable detail (Docker's message).
    pub message: String,
}

/// How [`Runtime::ensure_image`] made an image available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageOutcome {
    /// It was already present (not pulled).
    Present,
    /// It was pulled; the pull took this long.
    Pulled(std::time::Duration),
}

/// The tag or digest part of an image reference.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reference<'a> {
    None,
    Tag(&'a str),
    Digest(&'a str),
}

/// Splits `repo[:tag][@digest]` into the repository and its tag or digest.
fn split_reference(image: &str) -> (&str, Reference<'_>) {
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
pub fn credentials_for(image: &str, secrets: &[Secret]) -> Option<DockerCredentials> {
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
            return Some(DockerCredentials {
                username,
                password,
                serveraddress: Some(key.clone()),
                identitytoken: field("identitytoken"),
                ..DockerCredentials::default()
            });
        }
    }
    None
}

impl Runtime {
    /// Whether `image` is present locally; returns its inspect (id, repo digests).
    async fn image_present(
        &self,
        image: &str,
    ) -> Result<Option<bollard::models::ImageInspect>, ImageError> {
        match self.docker.inspect_image(image).await {
            Ok(i) => Ok(Some(i)),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(ImageError {
                reason: "ErrImagePull",
                message: e.to_string(),
            }),
        }
    }

    /// Makes `image` available according to `policy`, pulling with `credentials`;
    /// `on_pull` runs just before a pull starts (for the `Pulling` event).
    ///
    /// # Errors
    /// [`ImageError`] with reason `ErrImageNeverPull` (policy `Never`, image absent) or
    /// `ErrImagePull` (the pull or the inspect failed).
    pub async fn ensure_image(
        &self,
        image: &str,
        policy: PullPolicy,
        credentials: Option<DockerCredentials>,
        on_pull: impl FnOnce(),
    ) -> Result<ImageOutcome, ImageError> {
        let present = self.image_present(image).await?.is_some();
        match policy {
            PullPolicy::Never if present => return Ok(ImageOutcome::Present),
            PullPolicy::Never => {
                return Err(ImageError {
                    reason: "ErrImageNeverPull",
                    message: format!(
                        "Container image \"{image}\" is not present with pull policy of Never"
                    ),
                });
            }
            PullPolicy::IfNotPresent if present => return Ok(ImageOutcome::Present),
            _ => {}
        }
        on_pull();
        let started = std::time::Instant::now();
        let (repo, reference) = split_reference(image);
        let builder = CreateImageOptionsBuilder::default();
        let opts = match reference {
            Reference::Digest(_) => builder.from_image(image),
            Reference::Tag(t) => builder.from_image(repo).tag(t),
            Reference::None => builder.from_image(repo).tag("latest"),
        }
        .build();
        let pulled = self
            .docker
            .create_image(Some(opts), None, credentials)
            .try_for_each(|_| async { Ok(()) })
            .await;
        match pulled {
            Ok(()) => Ok(ImageOutcome::Pulled(started.elapsed())),
            // `Always` with an unreachable registry: kubelet fails the pull too.
            Err(e) => Err(ImageError {
                reason: "ErrImagePull",
                message: format!("failed to pull image \"{image}\": {e}"),
            }),
        }
    }

    /// The kubelet's `imageID` of a local image id (`sha256:...`):
    /// `docker-pullable://<repo>@<digest>` when it has a repo digest, else `docker://<id>`.
    pub async fn image_ref(&self, image_id: &str) -> String {
        match self.image_present(image_id).await {
            Ok(Some(i)) => match i.repo_digests.unwrap_or_default().into_iter().next() {
                Some(d) => format!("docker-pullable://{d}"),
                None => format!("docker://{image_id}"),
            },
            _ => format!("docker://{image_id}"),
        }
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
