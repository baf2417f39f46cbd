//! The controllers' binary shell serves the probe endpoint: `healthAddr` from the flag, ready
//! while the controller runs, not ready from SIGTERM on while it drains. Runs
//! `binary::main` in this test process and sends it a real SIGTERM (the Kubernetes client is
//! only built, never used, so no API server is needed).

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(clippy::unwrap_used)]

use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use verge_controller::binary::{self, Flags};
use verge_telemetry::LogFormat;

/// A port that was free a moment ago.
fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[tokio::test]
async fn ready_while_running_not_ready_while_draining() {
    // A SIGTERM listener from the start, so the signal never ends this process.
    let _term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
    let dir = std::env::temp_dir().join(format!("verge-binary-health-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let addr = free_addr();
    let flags = Flags {
        config: None,
        cloudhub: Vec::new(),
        cloudhub_service: None,
        health_addr: Some(addr),
        kubeconfig: Some(kubeconfig),
        log_format: LogFormat::Text,
        otlp_endpoint: None,
    };
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let main = tokio::spawn(binary::main(
        "testcontroller",
        "127.0.0.1:9".parse().unwrap(),
        flags,
        move |config, _client, shutdown, health| {
            // A standby: ready, yet not the leader.
            let (status, leadership) = verge_controller::leader::channel();
            binary::report_leadership(health, &leadership);
            async move {
                let _status = status;
                assert_eq!(config.health_addr, Some(addr));
                shutdown.cancelled().await;
                let _ = drain_rx.await;
                Ok::<(), std::io::Error>(())
            }
        },
    ));

    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap();
    let mut channel = None;
    for _ in 0..250 {
        if let Ok(c) = endpoint.connect().await {
            channel = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut client = HealthClient::new(channel.expect("the health endpoint listens"));
    let mut watch = client
        .watch(HealthCheckRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut status = None;
    while status != Some(ServingStatus::Serving) {
        let message = tokio::time::timeout(Duration::from_secs(10), watch.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        status = ServingStatus::try_from(message.status).ok();
    }
    let leader = client
        .check(HealthCheckRequest {
            service: binary::LEADER_SERVICE.to_owned(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        ServingStatus::try_from(leader.status),
        Ok(ServingStatus::NotServing),
        "a standby is ready but not the leader"
    );
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let message = tokio::time::timeout(Duration::from_secs(10), watch.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        ServingStatus::try_from(message.status),
        Ok(ServingStatus::NotServing)
    );
    drain_tx.send(()).unwrap();
    let code = main.await.unwrap();
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::SUCCESS)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
