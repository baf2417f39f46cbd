//! Service account tokens for pods of the asking node (kubelet's token manager: a
//! `TokenRequest` bound to the pod, `serviceaccounts/token` subresource).

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Api;
use kube::api::PostParams;
use tracing::debug;

use super::pod::check_bound;
use crate::{Error, Result};

/// The pod a token request is bound to: `spec.boundObjectRef` of kind `Pod`, with its name
/// and uid (uid may be empty).
///
/// # Errors
/// [`Error::NotReferenced`] when the request is not bound to a pod.
pub fn bound_pod<'a>(node: &str, request: &'a TokenRequest) -> Result<(&'a str, &'a str)> {
    let bound = request
        .spec
        .as_ref()
        .and_then(|s| s.bound_object_ref.as_ref());
    match bound {
        Some(r) if r.kind.as_deref() == Some("Pod") && r.name.as_deref().is_some() => Ok((
            r.name.as_deref().unwrap_or_default(),
            r.uid.as_deref().unwrap_or_default(),
        )),
        _ => Err(Error::NotReferenced {
            node: node.to_owned(),
            what: "a service account token not bound to a pod".into(),
        }),
    }
}

/// Checks that `pod` (the one the request is bound to, with `uid` from the request) is bound
/// to `node` and runs as `service_account` (`spec.serviceAccountName`, default `default`).
///
/// # Errors
/// [`Error::Forbidden`] when the pod is bound elsewhere; [`Error::NotReferenced`] when the
/// uid or the service account differ.
pub fn check(node: &str, service_account: &str, uid: &str, pod: &Pod) -> Result<()> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    check_bound(node, pod, &format!("a token for pod {ns}/{name}"))?;
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .unwrap_or("default");
    if (uid.is_empty() || uid == pod_uid) && account == service_account {
        return Ok(());
    }
    Err(Error::NotReferenced {
        node: node.to_owned(),
        what: format!("service account {ns}/{service_account} (pod {name} uid {uid:?})"),
    })
}

/// Creates a token for `service_account` in `namespace` from `request`, after checking that
/// the pod it is bound to is bound to `node` and uses that service account. Returns the
/// TokenRequest JSON with `status.token` and `status.expirationTimestamp`.
///
/// # Errors
/// As [`bound_pod`] and [`check`]; [`Error::Kube`] when the pod cannot be read or the token
/// request is refused.
pub async fn request(
    client: &kube::Client,
    node: &str,
    namespace: &str,
    service_account: &str,
    request: &TokenRequest,
) -> Result<Vec<u8>> {
    let (pod_name, uid) = bound_pod(node, request)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = pods.get(pod_name).await.map_err(Error::kube("get pod"))?;
    check(node, service_account, uid, &pod)?;
    let mut request = request.clone();
    if let Some(r) = request
        .spec
        .as_mut()
        .and_then(|s| s.bound_object_ref.as_mut())
    {
        r.uid = pod.metadata.uid.clone();
        r.api_version = Some("v1".into());
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let token = accounts
        .create_token_request(service_account, &PostParams::default(), &request)
        .await
        .map_err(Error::kube("create token request"))?;
    debug!(expires = ?token.status.as_ref().map(|s| &s.expiration_timestamp), "token issued");
    Ok(serde_json::to_vec(&token).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(node: &str, sa: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u-1" },
            "spec": { "nodeName": node, "serviceAccountName": sa, "containers": [] },
        }))
        .expect("pod")
    }

    #[test]
    fn token_only_for_own_pod_and_its_account() {
        assert!(check("edge-1", "default", "u-1", &pod("edge-1", None)).is_ok());
        assert!(check("edge-1", "app", "", &pod("edge-1", Some("app"))).is_ok());
        assert!(check("edge-1", "app", "u-1", &pod("edge-1", None)).is_err());
        assert!(check("edge-1", "default", "u-2", &pod("edge-1", None)).is_err());
        assert!(check("edge-2", "default", "u-1", &pod("edge-1", None)).is_err());
    }

    #[test]
    fn request_must_be_bound_to_a_pod() {
        let bound: TokenRequest = serde_json::from_value(json!({ "spec": { "audiences": [],
            "boundObjectRef": { "kind": "Pod", "name": "p", "uid": "u-1" } } }))
        .expect("request");
        assert_eq!(bound_pod("e", &bound).expect("pod"), ("p", "u-1"));
        let secret: TokenRequest = serde_json::from_value(json!({ "spec": { "audiences": [],
            "boundObjectRef": { "kind": "Secret", "name": "s" } } }))
        .expect("request");
        assert!(bound_pod("e", &secret).is_err());
        assert!(bound_pod("e", &TokenRequest::default()).is_err());
    }
}
