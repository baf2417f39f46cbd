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

use super::handler::{ProbeOutcome, USER_AGENT};
use verge_runtime::ErrorChain;

/// Checks `service` ("" for the server as a whole) of the health service at `addr`
/// (`host:port`) within `timeout`.
pub(super) async fn check(addr: &str, service: &str, timeout: Duration) -> ProbeOutcome {
    let deadline = Instant::now() + timeout;
    let endpoint = match Endpoint::from_shared(format!("http://{addr}"))
        .and_then(|e| e.user_agent(USER_AGENT))
    {
        Ok(e) => e.connect_timeout(timeout),
        Err(e) => {
            return ProbeOutcome::failure(format!(
                "error: invalid gRPC address {addr:?}: {}",
                ErrorChain(&e)
            ));
        }
    };
    let channel = match timeout_at(deadline, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(e)) => {
            return ProbeOutcome::failure(format!(
                "error: failed to connect service at {addr:?}: {}",
                ErrorChain(&e)
            ));
        }
        Err(_) => {
            return ProbeOutcome::failure(format!(
                "timeout: failed to connect service {addr:?} within {timeout:?}"
            ));
        }
    };
    let mut request = Request::new(HealthCheckRequest {
        service: service.to_owned(),
    });
    // Tell the server the deadline too (`grpc-timeout`), as a Go client's context does.
    request.set_timeout(deadline.saturating_duration_since(Instant::now()));
    let response = match timeout_at(deadline, HealthClient::new(channel).check(request)).await {
        Ok(Ok(response)) => response.into_inner(),
        Ok(Err(status)) => return rpc_failure(&status, timeout),
        Err(_) => return rpc_timeout(timeout),
    };
    match ServingStatus::try_from(response.status) {
        Ok(ServingStatus::Serving) => ProbeOutcome::success(),
        Ok(status) => ProbeOutcome::failure(format!(
            "service unhealthy (responded with {:?})",
            status.as_str_name()
        )),
        Err(_) => ProbeOutcome::failure(format!(
            "service unhealthy (responded with \"{}\")",
            response.status
        )),
    }
}

/// The kubelet's message for a failed `Check` call.
fn rpc_failure(status: &Status, timeout: Duration) -> ProbeOutcome {
    match status.code() {
        Code::Unimplemented => ProbeOutcome::failure(format!(
            "error: this server does not implement the grpc health protocol \
             (grpc.health.v1.Health): {}",
            status.message()
        )),
        Code::DeadlineExceeded => rpc_timeout(timeout),
        code => {
            let mut message = format!(
                "error: health rpc probe failed: rpc error: code = {code:?} desc = {}",
                status.message()
            );
            if let Some(source) = std::error::Error::source(status) {
                message.push_str(&format!(": {}", ErrorChain(source)));
            }
            ProbeOutcome::failure(message)
        }
    }
}

fn rpc_timeout(timeout: Duration) -> ProbeOutcome {
    ProbeOutcome::failure(format!(
        "timeout: health rpc did not complete within {timeout:?}"
    ))
}
