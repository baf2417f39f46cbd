//! The registry credentials of ImagePrePullJobs: the `kubernetes.io/dockerconfigjson` Secret
//! a job names (`imageSecrets: <namespace>/<name>`) is read once when the job is accepted,
//! and only the logins of the registries its images come from are kept, in memory, by job
//! uid, for the tasks sent to its nodes. Nothing of them is ever logged or written to the
//! API server.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use verge_core::task::RegistryAuth;

use crate::edgeapp::image::ImageRef;

/// The Secret type a pre-pull's credentials must have.
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";

/// Credentials by job uid, then registry host; cheap to clone (shared by the job
/// controllers, which fill it, and the downstream task, which reads it).
#[derive(Clone, Default)]
pub struct Credentials(Arc<Mutex<HashMap<String, BTreeMap<String, RegistryAuth>>>>);

impl Credentials {
    /// The logins kept for job `uid`, if it was read.
    pub fn get(&self, uid: &str) -> Option<BTreeMap<String, RegistryAuth>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .cloned()
    }

    /// Keeps `auths` for job `uid`; whether they were new.
    pub fn insert(&self, uid: &str, auths: BTreeMap<String, RegistryAuth>) -> bool {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.insert(uid.to_owned(), auths.clone()) != Some(auths)
    }

    /// Forgets job `uid` (it ended or is gone).
    pub fn forget(&self, uid: &str) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}

/// The registry host of an image as Docker resolves it: its registry, or `docker.io`.
pub fn registry_of(image: &ImageRef) -> String {
    if image.registry.is_empty() {
        "docker.io".to_owned()
    } else {
        image.registry.clone()
    }
}

/// Reads Secret `namespace/name` and keeps the logins of `registries`.
///
/// # Errors
/// A reason for people: the Secret is missing or unreadable, of another type, or holds no
/// `.dockerconfigjson` that parses.
pub async fn fetch(
    client: &Client,
    namespace: &str,
    name: &str,
    registries: &BTreeSet<String>,
) -> Result<BTreeMap<String, RegistryAuth>, String> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match api.get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(format!("Secret {namespace}/{name} not found")),
        Err(e) => return Err(format!("Secret {namespace}/{name} cannot be read: {e}")),
    };
    if secret.type_.as_deref() != Some(DOCKER_CONFIG_JSON) {
        return Err(format!(
            "Secret {namespace}/{name} is not of type {DOCKER_CONFIG_JSON}"
        ));
    }
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .ok_or_else(|| format!("Secret {namespace}/{name} has no .dockerconfigjson"))?;
    logins(&data.0, registries).map_err(|e| format!("Secret {namespace}/{name}: {e}"))
}

/// The logins of `registries` in a `.dockerconfigjson` (`auths` keyed by host, with or without
/// scheme and path; `docker.io` also as `index.docker.io` and `registry-1.docker.io`), each
/// from `username`/`password` or from `auth` (base64 of `user:password`).
///
/// # Errors
/// The content is not a JSON object with `auths`.
pub fn logins(
    config: &[u8],
    registries: &BTreeSet<String>,
) -> Result<BTreeMap<String, RegistryAuth>, String> {
    let config: serde_json::Value = serde_json::from_slice(config)
        .map_err(|e| format!(".dockerconfigjson is not JSON: {e}"))?;
    let auths = config["auths"]
        .as_object()
        .ok_or(".dockerconfigjson has no auths")?;
    let mut out = BTreeMap::new();
    for (key, entry) in auths {
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let host = host.split('/').next().unwrap_or(host);
        let host = match host {
            "index.docker.io" | "registry-1.docker.io" => "docker.io",
            other => other,
        };
        if !registries.contains(host) || out.contains_key(host) {
            continue;
        }
        let field = |f: &str| entry[f].as_str().map(str::to_owned);
        let login = match (field("username"), field("password")) {
            (Some(username), Some(password)) => Some((username, password)),
            _ => field("auth")
                .and_then(|a| base64::engine::general_purpose::STANDARD.decode(a).ok())
                .and_then(|d| String::from_utf8(d).ok())
                .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_owned(), p.to_owned()))),
        };
        if let Some((username, password)) = login {
            out.insert(host.to_owned(), RegistryAuth { username, password });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_images_registries_are_kept() {
        let config = serde_json::json!({"auths": {
            "https://registry.local:5000/v2/": {"username": "u", "password": "p"},
            "other.example": {"username": "x", "password": "y"},
            "index.docker.io": {"auth": base64::engine::general_purpose::STANDARD.encode("hub:pw")},
        }});
        let wanted = BTreeSet::from(["registry.local:5000".to_owned(), "docker.io".to_owned()]);
        let got = logins(config.to_string().as_bytes(), &wanted).expect("parses");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            ["docker.io", "registry.local:5000"]
        );
        assert_eq!(got["docker.io"].username, "hub");
        assert_eq!(got["docker.io"].password, "pw");
        assert_eq!(got["registry.local:5000"].password, "p");
        assert!(logins(b"[]", &wanted).is_err());
    }

    #[test]
    fn images_without_a_registry_come_from_docker_hub() {
        let image = ImageRef::parse("busybox:1.36").expect("valid");
        assert_eq!(registry_of(&image), "docker.io");
        let image = ImageRef::parse("127.0.0.1:5000/app:1").expect("valid");
        assert_eq!(registry_of(&image), "127.0.0.1:5000");
    }
}
