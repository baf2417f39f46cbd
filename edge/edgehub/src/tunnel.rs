//! Cloudhub's tunnel requests (kubectl logs, exec, attach, port-forward), handed by the
//! session to whoever serves them (edgecore's streaming server).

use tokio::sync::mpsc;
use tonic::transport::Channel;
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{KubeletClients, ServiceDial};

/// Cloudhub's request to open tunnel `id` (from `CloudFrame.open_tunnel`), with what the
/// session knows: its client and who may use the endpoint.
pub struct TunnelRequest {
    /// `OpenTunnel.tunnel_id`.
    pub id: String,
    /// The session's client (the same connection).
    pub client: EdgeHubClient<Channel>,
    /// The session's `Welcome.kubelet_clients`.
    pub clients: Option<KubeletClients>,
    /// `OpenTunnel.dial`: the tunnel goes to this pod endpoint of the node (another node's
    /// pod reaching it through cloudhub), not to the kubelet endpoint.
    pub dial: Option<ServiceDial>,
}

/// Where edgehub hands tunnel requests.
pub type TunnelRequests = mpsc::Sender<TunnelRequest>;
