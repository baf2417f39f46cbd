//! The probe endpoint of a cloudhub replica: a tonic-health client sees the replica not
//! ready before its servers run, ready once they run (an edge can connect), and not ready
//! again as soon as shutdown begins.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)]

mod common;

use tokio_util::sync::CancellationToken;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use verge_runtime::health::{HealthEndpoint, LIVENESS_SERVICE};

/// The next status the watch reports that differs from `from`.
async fn next_status(
    watch: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>,
    from: ServingStatus,
) -> ServingStatus {
    loop {
        let message = tokio::time::timeout(common::WAIT, watch.message())
            .await
            .expect("a status change in time")
            .unwrap()
            .expect("the watch stays open");
        let status = ServingStatus::try_from(message.status).unwrap();
        if status != from {
            return status;
        }
    }
}

#[tokio::test]
async fn ready_while_serving_not_ready_from_shutdown() {
    verge_telemetry::init_for_tests();
    let endpoint = HealthEndpoint::bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = endpoint.local_addr();
    let health = endpoint.health();
    let stop = CancellationToken::new();
    let server = tokio::spawn(endpoint.serve(stop.clone()));
    let mut client = HealthClient::new(
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap(),
    );
    let request = |service: &str| HealthCheckRequest {
        service: service.to_owned(),
    };
    let mut watch = client.watch(request("")).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(
        ServingStatus::try_from(first.status),
        Ok(ServingStatus::NotServing),
        "not ready before cloudhub serves"
    );

    let hub = common::start_with_health(common::config(), Some(health)).await;
    assert_eq!(
        next_status(&mut watch, ServingStatus::NotServing).await,
        ServingStatus::Serving
    );
    // Ready means serving: an edge gets through the handshake and the hello.
    let _edge = common::connect(&hub, "edge-ready").await;

    hub.stop().await;
    assert_eq!(
        next_status(&mut watch, ServingStatus::Serving).await,
        ServingStatus::NotServing
    );
    let live = client.check(request(LIVENESS_SERVICE)).await.unwrap();
    assert_eq!(
        ServingStatus::try_from(live.into_inner().status),
        Ok(ServingStatus::Serving)
    );
    drop(watch);
    drop(client);
    stop.cancel();
    server.await.unwrap().unwrap();
}
