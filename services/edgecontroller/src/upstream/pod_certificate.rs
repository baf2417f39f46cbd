//! PodCertificateRequests for `podCertificate` projected volume sources (the kubelet's
//! podcertificate manager): the edge makes the private key and a stub PKCS#10 request, and
//! edgecontroller creates the `certificates.k8s.io/v1` PodCertificateRequest and reads it
//! back until the signer has issued, denied or failed it.
//!
//! - `query <ns>/podcertificaterequest/<pod>` with a PodCertificateRequest as content:
//!   create it for the pod `<pod>` (its `spec.podName`). edgecontroller fills in what the
//!   kubelet takes from its own caches: `generateName: req-`, the pod as owner,
//!   `spec.nodeName` (the session's node), `spec.nodeUID`, `spec.serviceAccountUID`. Answered
//!   with the created request (its generated name).
//! - `query <ns>/podcertificaterequest/<name>` without content: the request `<name>`, with
//!   its status (an `error` "NotFound" when it is gone).
//!
//! Authorization is the node's own: every call goes through the node's client
//! ([`crate::node_clients`]). The Node authorizer lets a node create PodCertificateRequests,
//! get the ones naming it and get the service accounts of its pods; NodeRestriction admits a
//! create only for a pod bound to the node, with the pod's, its service account's and the
//! node's uids and a signer the pod's volumes name. edgecontroller checks the pod binding,
//! uid and service account first, for a clear refusal.

use k8s_openapi::api::certificates::v1::PodCertificateRequest;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Api;
use kube::api::PostParams;
use tracing::debug;

use super::pod::check_bound;
use crate::{Error, Result};

/// What a PodCertificateRequest query asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Query {
    /// Create `request` for the pod it names.
    Create {
        /// The namespace.
        namespace: String,
        /// The request as the edge made it (signer, pod name and uid, service account name,
        /// key, lifetime, annotations).
        request: Box<PodCertificateRequest>,
    },
    /// Read the request of this name.
    Read {
        /// The namespace.
        namespace: String,
        /// The request's name.
        name: String,
    },
}

/// The query of `content` at `<namespace>/podcertificaterequest/<name>`, from `node`.
///
/// # Errors
/// [`Error::Decode`] for content that is no PodCertificateRequest JSON;
/// [`Error::Forbidden`] when it names another pod than `<name>`.
pub fn parse(node: &str, namespace: &str, name: &str, content: &[u8]) -> Result<Query> {
    if content.is_empty() {
        return Ok(Query::Read {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    let request: PodCertificateRequest =
        serde_json::from_slice(content).map_err(|source| Error::Decode {
            kind: "certificates.k8s.io/v1.PodCertificateRequest",
            source,
        })?;
    if request.spec.pod_name != name {
        return Err(Error::Forbidden {
            node: node.to_owned(),
            what: format!(
                "a PodCertificateRequest for pod {:?} at {namespace}/podcertificaterequest/{name}",
                request.spec.pod_name
            ),
        });
    }
    Ok(Query::Create {
        namespace: namespace.to_owned(),
        request: Box::new(request),
    })
}

/// Checks that `pod` may get `request` from `node`: bound to it, the request's pod uid (when
/// given) its uid, the request's service account its own.
///
/// # Errors
/// [`Error::Forbidden`] when the pod is bound elsewhere; [`Error::NotReferenced`] when the
/// uid or the service account differ.
pub fn check(node: &str, request: &PodCertificateRequest, pod: &Pod) -> Result<()> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    check_bound(node, pod, &format!("a pod certificate for pod {ns}/{name}"))?;
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.as_deref())
        .unwrap_or("default");
    let spec = &request.spec;
    if (spec.pod_uid.is_empty() || spec.pod_uid == uid) && spec.service_account_name == account {
        return Ok(());
    }
    Err(Error::NotReferenced {
        node: node.to_owned(),
        what: format!(
            "a pod certificate for pod {ns}/{name} (uid {:?}, service account {:?})",
            spec.pod_uid, spec.service_account_name
        ),
    })
}

/// `request` completed as the kubelet creates it for `pod` on the node `node_uid`:
/// `generateName: req-` in the pod's namespace, the pod as owner, the pod's uid, the node's
/// name and uid, the service account's uid.
pub fn complete(
    mut request: PodCertificateRequest,
    pod: &Pod,
    node: &str,
    node_uid: &str,
    service_account_uid: &str,
) -> PodCertificateRequest {
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    request.metadata = ObjectMeta {
        namespace: pod.metadata.namespace.clone(),
        generate_name: Some("req-".into()),
        owner_references: Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod_uid.clone(),
            ..OwnerReference::default()
        }]),
        ..ObjectMeta::default()
    };
    request.spec.pod_uid = pod_uid;
    request.spec.node_name = node.to_owned();
    request.spec.node_uid = node_uid.to_owned();
    request.spec.service_account_uid = service_account_uid.to_owned();
    request.status = None;
    request
}

/// A request as answered to the edge: without managed fields.
pub fn trim(mut request: PodCertificateRequest) -> PodCertificateRequest {
    request.metadata.managed_fields = None;
    request
}

/// Answers `query` from `node` with `client` (the node's): the created or read request JSON.
///
/// # Errors
/// As [`check`]; [`Error::Kube`] when a read or the creation is refused or fails (a request
/// that does not exist: its `NotFound`).
pub async fn answer(client: &kube::Client, node: &str, query: Query) -> Result<Vec<u8>> {
    let request = match query {
        Query::Read { namespace, name } => {
            let api: Api<PodCertificateRequest> = Api::namespaced(client.clone(), &namespace);
            api.get(&name)
                .await
                .map_err(Error::kube("get podcertificaterequest"))?
        }
        Query::Create { namespace, request } => {
            let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
            let pod = pods
                .get(&request.spec.pod_name)
                .await
                .map_err(Error::kube("get pod"))?;
            check(node, &request, &pod)?;
            let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
            let account = accounts
                .get(&request.spec.service_account_name)
                .await
                .map_err(Error::kube("get serviceaccount"))?;
            let nodes: Api<Node> = Api::all(client.clone());
            let node_object = nodes.get(node).await.map_err(Error::kube("get node"))?;
            let request = complete(
                *request,
                &pod,
                node,
                node_object.metadata.uid.as_deref().unwrap_or_default(),
                account.metadata.uid.as_deref().unwrap_or_default(),
            );
            let api: Api<PodCertificateRequest> = Api::namespaced(client.clone(), &namespace);
            let created = api
                .create(&PostParams::default(), &request)
                .await
                .map_err(Error::kube("create podcertificaterequest"))?;
            debug!(name = ?created.metadata.name, signer = %created.spec.signer_name, "pod certificate requested");
            created
        }
    };
    // Serializing k8s-openapi types to a Vec cannot fail.
    Ok(serde_json::to_vec(&trim(request)).unwrap_or_default())
}

#[cfg(test)]
mod tests;
