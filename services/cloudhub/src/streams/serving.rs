//! Serving certificates for edge nodes (`EdgeHub.ServingCertificate`): the node's CSR
//! becomes a `certificates.k8s.io/v1` CertificateSigningRequest with signer
//! `kubernetes.io/kubelet-serving`, which cloudhub approves and kube-controller-manager signs
//! with the cluster CA. Two kinds are approved, for the calling node only:
//!
//! - its kubelet serving certificate (its name and stream address): what a kubelet with
//!   `serverTLSBootstrap: true` gets, so the API server's `--kubelet-certificate-authority`
//!   verifies edges as it verifies kubelets;
//! - the edge API's: names among `kubernetes`, `kubernetes.default`,
//!   `kubernetes.default.svc`, `kubernetes.default.svc.<streams.clusterDomain>` and the
//!   cluster IPs of the `default/kubernetes` Service as the API server holds it now, so the
//!   node's pods verify the edge API with the cluster CA of their `ca.crt`.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use tonic::Status;
use verge_pki::{CsrError, CsrRequest};

use super::StreamsState;

/// The signer of kubelet serving certificates (kube-controller-manager's
/// `csrsigning` controller).
pub const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
/// How long to wait for kube-controller-manager to sign an approved CSR.
const SIGN_WAIT: Duration = Duration::from_secs(30);

/// Issues a serving certificate for `node` from `csr_pem` (see the module docs); returns the
/// certificate PEM and the CSR object's name.
///
/// # Errors
/// `INVALID_ARGUMENT` for a CSR that is neither the node's serving CSR nor one for the
/// `kubernetes` Service, `UNAVAILABLE` when the API server refuses, `DEADLINE_EXCEEDED`
/// when the CSR is not signed in 30 s (no kube-controller-manager signing
/// `kubernetes.io/kubelet-serving`), `FAILED_PRECONDITION` when it was denied or failed.
#[allow(clippy::result_large_err)]
pub(crate) async fn issue(
    streams: &StreamsState,
    node: &str,
    csr_pem: &str,
) -> Result<(String, String), Status> {
    let client = &streams.client;
    let refused = |e: CsrError| Status::invalid_argument(format!("serving CSR refused: {e}"));
    let (csr, reason) = match CsrRequest::parse_serving(csr_pem) {
        Ok(csr) => (
            csr,
            format!("edge node {node} asked for the serving certificate of its own name"),
        ),
        Err(CsrError::ServingNames { .. }) => {
            let allowed = api_service_names(client, &streams.config.cluster_domain).await?;
            let csr = CsrRequest::parse_service_serving(csr_pem, &allowed).map_err(refused)?;
            (
                csr,
                format!(
                    "edge node {node} asked for the serving certificate of the kubernetes \
                     Service it serves to its pods (edge API)"
                ),
            )
        }
        Err(e) => return Err(refused(e)),
    };
    if csr.node_name() != node {
        return Err(Status::invalid_argument(format!(
            "node {node} asked for a serving certificate of node {}",
            csr.node_name()
        )));
    }
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let unavailable = |e: kube::Error| Status::unavailable(format!("API server: {e}"));
    let object = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(format!("verge-serving-{node}-")),
            ..ObjectMeta::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(csr_pem.as_bytes().to_vec()),
            signer_name: KUBELET_SERVING_SIGNER.to_owned(),
            usages: Some(vec![
                "digital signature".to_owned(),
                "server auth".to_owned(),
            ]),
            ..CertificateSigningRequestSpec::default()
        },
        status: None,
    };
    let created = api
        .create(&PostParams::default(), &object)
        .await
        .map_err(unavailable)?;
    let name = created.metadata.name.unwrap_or_default();
    crate::trust::cluster::approve(&api, &name, "VergeKubeletServing".to_owned(), reason)
        .await
        .map_err(unavailable)?;
    let deadline = tokio::time::Instant::now() + SIGN_WAIT;
    loop {
        let current = api.get(&name).await.map_err(unavailable)?;
        let status = current.status.unwrap_or_default();
        if let Some(ByteString(pem)) = status.certificate.filter(|c| !c.0.is_empty()) {
            let pem = String::from_utf8(pem)
                .map_err(|_| Status::internal(format!("CSR {name}: certificate is not PEM")))?;
            return Ok((pem, name));
        }
        if let Some(c) = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True")
        {
            return Err(Status::failed_precondition(format!(
                "CSR {name} {}: {}",
                c.type_,
                c.message.unwrap_or_default()
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Status::deadline_exceeded(format!(
                "CSR {name} was approved but not signed within {SIGN_WAIT:?}: is \
                 kube-controller-manager signing {KUBELET_SERVING_SIGNER}?"
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the edge API's serving certificate may name: the `kubernetes` Service's DNS names in
/// `domain` and its cluster IPs, read from the API server (`DNS:…`, `IP:…`).
#[allow(clippy::result_large_err)]
async fn api_service_names(client: &kube::Client, domain: &str) -> Result<Vec<String>, Status> {
    let service = Api::<Service>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .map_err(|e| Status::unavailable(format!("API server: the kubernetes Service: {e}")))?;
    let spec = service.spec.unwrap_or_default();
    let ips = spec
        .cluster_ips
        .unwrap_or_default()
        .into_iter()
        .chain(spec.cluster_ip)
        .filter_map(|ip| ip.parse::<std::net::IpAddr>().ok());
    let mut names: Vec<String> = verge_pki::kubernetes_service_names(domain)
        .iter()
        .map(|name| format!("DNS:{name}"))
        .collect();
    names.extend(ips.map(|ip| format!("IP:{ip}")));
    Ok(names)
}
