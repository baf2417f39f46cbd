//! The `Join` service on cloudhub's join port: certificate bootstrap of edge nodes with a
//! Kubernetes bootstrap token (KubeEdge: cloudcore's certificate server on port 10002;
//! kubeadm: token discovery and TLS bootstrapping). The decisions are
//! [`crate::trust::Trust`]'s.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use verge_proto::hub::join_server::Join;
use verge_proto::hub::{GetCaRequest, GetCaResponse, JoinRequest, JoinResponse};

use crate::trust::Trust;

/// The `Join` gRPC service. Build it through [`crate::CloudHub`].
#[derive(Debug)]
pub struct JoinService {
    trust: Arc<Trust>,
}

impl JoinService {
    pub(crate) fn new(trust: Arc<Trust>) -> Self {
        Self { trust }
    }
}

#[tonic::async_trait]
impl Join for JoinService {
    /// The CA certificate with the token's MAC over it, with `trust.tokenCaDiscovery` only
    /// (FAILED_PRECONDITION otherwise: the edge pins the CA).
    async fn get_ca(
        &self,
        request: Request<GetCaRequest>,
    ) -> Result<Response<GetCaResponse>, Status> {
        let (ca_certificate, token_mac) =
            self.trust.ca_for_token(&request.get_ref().token_id).await?;
        Ok(Response::new(GetCaResponse {
            ca_certificate,
            token_mac,
        }))
    }

    /// A first node certificate for a valid bootstrap token and CSR, and the node's Node with
    /// the taints it registers with.
    async fn join_node(
        &self,
        request: Request<JoinRequest>,
    ) -> Result<Response<JoinResponse>, Status> {
        let JoinRequest {
            token,
            csr,
            register_with_taints,
        } = request.into_inner();
        let issued = self.trust.join(&token, &csr, &register_with_taints).await?;
        Ok(Response::new(JoinResponse {
            certificate: issued.certificate_pem,
            ca_certificate: self.trust.ca().cert_pem().to_owned(),
            csr_name: issued.csr_name,
        }))
    }
}
