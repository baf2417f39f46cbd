//! gRPC probes (kubelet: `probe/grpc`): one `grpc.health.v1.Health/Check` call over plaintext
//! HTTP/2 on a fresh connection, bounded by the probe's timeout. `SERVING` is a success; any
//! other status, and any connection or RPC error, is a failure with the kubelet's message.

use std::time::Duration;

use tokio::time::{Instant, timeout_at};
use tonic::transport::Endpoint;
use tonic::{Code, Request, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::USER_AGENT;
use super::error::ProbeError;

/// Checks `service` ("" for the server as a whole) of the health service at `addr`
/// (`host:port`) within `timeout`.
///
/// # Errors
/// [`ProbeError`] with the kubelet's message for an unusable address, a failed or slow
/// connection or call, and any status but `SERVING`.
pub(super) async fn check(addr: &str, service: &str, timeout: Duration) -> Result<(), ProbeError> {
    let deadline = Instant::now() + timeout;
    let endpoint = match Endpoint::from_shared(format!("http://{addr}"))
        .and_then(|e| e.user_agent(USER_AGENT))
    {
        Ok(e) => e.connect_timeout(timeout),
        Err(source) => {
            let addr = addr.to_owned();
            return Err(ProbeError::GrpcAddress { addr, source });
        }
    };
    let channel = match timeout_at(deadline, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(source)) => {
            let addr = addr.to_owned();
            return Err(ProbeError::GrpcConnect { addr, source });
        }
        Err(_) => {
            let addr = addr.to_owned();
            return Err(ProbeError::GrpcConnectTimeout { addr, timeout });
        }
    };
    let mut request = Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    // Tell the server the deadline too (`grpc-timeout`), as a Go client's context does.
    request.set_timeout(deadline.saturating_duration_since(Instant::now()));
    let response = match timeout_at(deadline, HealthClient::new(channel).check(request)).await {
        Ok(Ok(response)) => response.into_inner(),
        Ok(Err(status)) => return Err(rpc_failure(status, timeout)),
        Err(_) => return Err(ProbeError::GrpcTimeout(timeout)),
    };
    match ServingStatus::try_from(response.status) {
        Ok(ServingStatus::Serving) => Ok(()),
        Ok(status) => Err(ProbeError::Unhealthy(format!("{:?}", status.as_str_name()))),
        Err(_) => Err(ProbeError::Unhealthy(format!("\"{}\"", response.status))),
    }
}

/// The kubelet's failure of a failed `Check` call.
fn rpc_failure(status: Status, timeout: Duration) -> ProbeError {
    match status.code() {
        Code::Unimplemented => ProbeError::GrpcUnimplemented(Box::new(status)),
        Code::DeadlineExceeded => ProbeError::GrpcTimeout(timeout),
        _ => ProbeError::GrpcCall(Box::new(status)),
    }
}
