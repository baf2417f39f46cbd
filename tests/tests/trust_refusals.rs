//! Refusals at a real cloudhub on the real control plane: plaintext, no client certificate,
//! a certificate from another CA, node A's certificate with a hello naming node B, a
//! certificate for a name a non-edge Node holds, and an
//! in-cluster client without controller credentials (its own service-account token, checked
//! by a real TokenReview) attaching to ControllerHub.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::PostParams;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Code;
use tonic::transport::Channel;
use verge_e2e::Cloud;
use verge_proto::hub::controller_hub_client::ControllerHubClient;
use verge_proto::hub::edge_hub_client::EdgeHubClient;
use verge_proto::hub::{
    ControllerFrame, ControllerHello, EdgeFrame, EdgeHello, controller_frame, edge_frame,
};

/// A TLS channel to `url` with `config`.
async fn channel(url: &str, config: Arc<rustls::ClientConfig>) -> anyhow::Result<Channel> {
    let endpoint = verge_proto::transport::endpoint(url)?.timeout(Duration::from_secs(5));
    Ok(verge_proto::transport::connect_tls(endpoint, config, None).await?)
}

/// Opens EdgeHub.Connect with a hello naming `node`; the call's status code.
async fn hello_as(channel: Channel, node: &str) -> Code {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let hello = EdgeFrame {
        frame: Some(edge_frame::Frame::Hello(EdgeHello {
            node_name: node.to_owned(),
            ..EdgeHello::default()
        })),
    };
    let _ = tx.send(hello).await;
    match EdgeHubClient::new(channel)
        .connect(ReceiverStream::new(rx))
        .await
    {
        Ok(mut stream) => match stream.get_mut().message().await {
            Ok(Some(_)) => Code::Ok,
            Ok(None) => Code::Unknown,
            Err(status) => status.code(),
        },
        Err(status) => status.code(),
    }
}

/// Attaches to ControllerHub with `token` as bearer (or none); the call's status code.
async fn attach_with(channel: Channel, token: Option<&str>) -> Code {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let hello = ControllerFrame {
        frame: Some(controller_frame::Frame::Hello(ControllerHello {
            name: "intruder".to_owned(),
            groups: vec!["resource".to_owned()],
        })),
    };
    let _ = tx.send(hello).await;
    let mut request = tonic::Request::new(ReceiverStream::new(rx));
    if let Some(value) = token.and_then(|t| format!("Bearer {t}").parse().ok()) {
        request.metadata_mut().insert("authorization", value);
    }
    match ControllerHubClient::new(channel).attach(request).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    }
}

#[tokio::test]
async fn refused_at_cloudhub() -> anyhow::Result<()> {
    verge_telemetry::init_for_tests();
    let cp = verge_testkit::shared().await?;
    let client = cp.client().await?;
    let cloud = Cloud::start(&cp).await?;
    let r = async {
        let ca = verge_testkit::trust::verge_ca(&client).await?;
        let ca_only = Arc::new(verge_pki::tls::client_config(ca.cert_pem(), None)?);
        let pid = std::process::id();
        let (a, b) = (format!("e2e-node-a-{pid}"), format!("e2e-node-b-{pid}"));

        // Plaintext HTTP/2 to the EdgeHub port: refused by the clients, and by the server.
        ensure!(
            verge_proto::transport::endpoint(&cloud.edge_url.replace("https", "http")).is_err()
        );
        let plain =
            tonic::transport::Endpoint::from_shared(cloud.edge_url.replace("https", "http"))?
                .timeout(Duration::from_secs(5))
                .connect_timeout(Duration::from_secs(5));
        if let Ok(channel) = plain.connect().await {
            ensure!(
                hello_as(channel, &a).await != Code::Ok,
                "plaintext accepted"
            );
        }
        // TLS without a client certificate, and with one from another CA.
        if let Ok(channel) = channel(&cloud.edge_url, ca_only.clone()).await {
            ensure!(
                hello_as(channel, &a).await != Code::Ok,
                "no client certificate accepted"
            );
        }
        let other = verge_pki::Ca::generate("other", Duration::from_secs(600))?;
        let issued = other.issue_client(
            &format!("system:node:{a}"),
            Some("system:nodes"),
            Duration::from_secs(600),
        )?;
        let identity = verge_pki::ClientIdentity {
            cert_chain_pem: &issued.cert_pem,
            key_pem: &issued.key_pem,
        };
        let foreign = Arc::new(verge_pki::tls::client_config(
            ca.cert_pem(),
            Some(identity),
        )?);
        if let Ok(channel) = channel(&cloud.edge_url, foreign).await {
            ensure!(
                hello_as(channel, &a).await != Code::Ok,
                "a foreign CA's certificate accepted"
            );
        }
        // Node A's certificate, hello naming B: PERMISSION_DENIED, no session for B.
        let a_config = verge_testkit::trust::node_client_config(&ca, &a)?;
        let code = hello_as(channel(&cloud.edge_url, a_config.clone()).await?, &b).await;
        ensure!(
            code == Code::PermissionDenied,
            "hello naming another node: {code:?}"
        );
        // A's own hello is accepted (the welcome arrives).
        let code = hello_as(channel(&cloud.edge_url, a_config).await?, &a).await;
        ensure!(code == Code::Ok, "node A's own session: {code:?}");

        // Issue 31, weakness 1: a certificate for a name that a Node without the edge label
        // now holds (a kubelet took the name after the edge joined): no session.
        let taken = format!("e2e-kubelet-{pid}");
        let nodes: Api<Node> = Api::all(client.clone());
        let kubelet_node = Node {
            metadata: ObjectMeta {
                name: Some(taken.clone()),
                ..ObjectMeta::default()
            },
            ..Node::default()
        };
        nodes.create(&PostParams::default(), &kubelet_node).await?;
        let taken_config = verge_testkit::trust::node_client_config(&ca, &taken)?;
        let code = hello_as(channel(&cloud.edge_url, taken_config).await?, &taken).await;
        nodes.delete(&taken, &Default::default()).await?;
        ensure!(
            code == Code::PermissionDenied,
            "a session for a Node that is not an edge node: {code:?}"
        );

        // ControllerHub: no token, then a real in-cluster token of the default service account
        // (authenticated by the TokenReview, but not an allowed controller), then a token of
        // edgecontroller's account for another audience.
        let code = attach_with(channel(&cloud.controller_url, ca_only.clone()).await?, None).await;
        ensure!(
            code == Code::Unauthenticated,
            "attach without a token: {code:?}"
        );
        let token = |namespace: &str, name: &str, audience: &str| {
            let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
            let request = TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: Some(vec![audience.to_owned()]),
                    expiration_seconds: Some(600),
                    ..TokenRequestSpec::default()
                }),
                ..TokenRequest::default()
            };
            let name = name.to_owned();
            async move {
                let answer = accounts
                    .create_token_request(&name, &PostParams::default(), &request)
                    .await?;
                anyhow::Ok(answer.status.and_then(|s| s.token).unwrap_or_default())
            }
        };
        let stranger = token("default", "default", "verge-controllerhub").await?;
        let code = attach_with(
            channel(&cloud.controller_url, ca_only.clone()).await?,
            Some(&stranger),
        )
        .await;
        ensure!(
            code == Code::PermissionDenied,
            "default service account attached: {code:?}"
        );
        let wrong_audience = token(
            "verge-system",
            "edgecontroller",
            "https://kubernetes.default.svc",
        )
        .await?;
        let code = attach_with(
            channel(&cloud.controller_url, ca_only.clone()).await?,
            Some(&wrong_audience),
        )
        .await;
        ensure!(
            code == Code::Unauthenticated,
            "API-audience token attached: {code:?}"
        );
        anyhow::Ok(())
    }
    .await;
    if let Err(e) = r {
        bail!("{e:#}\n{}", cloud.logs(40));
    }
    Ok(())
}
