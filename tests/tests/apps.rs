//! Third-party integration through the gRPC API (architecture.md §11), end to end on the real
//! control plane: a controller that is not Verge's own attaches to ControllerHub with its own
//! service-account token, allowed by an RBAC rule (`attach` on `messagegroups.verge.io`), and
//! exchanges messages of its group with an edge app over the edge's MQTT broker (mosquitto): a
//! command and its reply; across a cut of the edge's link to cloudhub, a command sent while the
//! node is offline (refused with `NOT_CONNECTED`, sent again when the node connects) reaches the
//! app exactly once, and what the app publishes meanwhile reaches the controller after the heal.
//! Refusals: no credentials, Verge's own group, no RBAC rule, a group not named; nothing reaches
//! the app.
//!
//! The controller here is a Rust tonic client; `examples/` holds the Go and Python ones.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use kube::Client;
use rumqttc::MqttOptions;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Status, Streaming};
use verge_core::{Group, Operation};
use verge_e2e::{Cloud, Edge, create_namespace};
use verge_proto::hub::controller_hub_client::ControllerHubClient;
use verge_proto::hub::{
    ControllerFrame, ControllerHello, DeliveryFailure, HubFrame, Routed, controller_frame,
    hub_frame,
};
use verge_proto::{Message, MessageExt};
use verge_testkit::cuttable::CuttableLink;
use verge_testkit::edge_app::{EchoApp, content};
use verge_testkit::mosquitto::Mosquitto;

const GROUP: &str = "robots.example.com";
const STEP: Duration = Duration::from_secs(60);

fn group() -> Group {
    GROUP.parse().expect("group")
}

/// A third-party controller's stream.
struct Controller {
    tx: mpsc::Sender<ControllerFrame>,
    rx: Streaming<HubFrame>,
}

impl Controller {
    /// Attaches to `url` trusting `ca_pem`, with `token` as bearer (none: no credentials).
    async fn attach(
        url: &str,
        ca_pem: &str,
        token: Option<&str>,
        groups: &[&str],
    ) -> anyhow::Result<Result<Self, Status>> {
        Self::attach_as("robots-controller", url, ca_pem, token, groups).await
    }

    /// [`Controller::attach`] under the controller name `name`.
    async fn attach_as(
        name: &str,
        url: &str,
        ca_pem: &str,
        token: Option<&str>,
        groups: &[&str],
    ) -> anyhow::Result<Result<Self, Status>> {
        let config = verge_pki::tls::client_config(ca_pem, None)?;
        let endpoint = verge_proto::transport::endpoint(url)?;
        let channel =
            verge_proto::transport::connect_tls(endpoint, std::sync::Arc::new(config), None)
                .await?;
        let (tx, rx) = mpsc::channel(64);
        tx.send(ControllerFrame {
            frame: Some(controller_frame::Frame::Hello(ControllerHello {
                name: name.into(),
                groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            })),
        })
        .await?;
        let mut request = tonic::Request::new(ReceiverStream::new(rx));
        if let Some(token) = token {
            request
                .metadata_mut()
                .insert("authorization", format!("Bearer {token}").parse()?);
        }
        Ok(ControllerHubClient::new(channel)
            .attach(request)
            .await
            .map(|r| Self {
                tx,
                rx: r.into_inner(),
            }))
    }

    async fn send(&self, node: &str, message: Message) -> anyhow::Result<()> {
        self.tx
            .send(ControllerFrame {
                frame: Some(controller_frame::Frame::Message(Routed {
                    node: node.into(),
                    message: Some(message),
                })),
            })
            .await?;
        Ok(())
    }

    /// The next frame within [`STEP`].
    async fn next(&mut self) -> anyhow::Result<hub_frame::Frame> {
        let frame = tokio::time::timeout(STEP, self.rx.message())
            .await
            .context("no frame from cloudhub")??
            .context("the stream ended")?;
        frame.frame.context("an empty frame")
    }

    /// Waits for the session event of `node` with `connected`.
    async fn session(&mut self, node: &str, connected: bool) -> anyhow::Result<()> {
        loop {
            if let hub_frame::Frame::Session(s) = self.next().await?
                && s.node == node
                && s.connected == connected
            {
                return Ok(());
            }
        }
    }

    /// The next upstream message that is not an ack (acking it to the edge, as a
    /// controller must: the edge keeps it in its outbox until then).
    async fn upstream(&mut self) -> anyhow::Result<Message> {
        loop {
            if let hub_frame::Frame::Message(Routed { node, message }) = self.next().await? {
                let message = message.context("a Routed without a message")?;
                if message.operation()? == Operation::Ack {
                    continue;
                }
                let ack = Message::reply(
                    uuid::Uuid::new_v4().to_string(),
                    message.id(),
                    "robots-controller",
                    group(),
                    Operation::Ack,
                    "",
                    Vec::new(),
                );
                self.send(&node, ack).await?;
                return Ok(message);
            }
        }
    }

    /// The delivery error of message `id` (others, e.g. of acks to an offline node, are
    /// skipped).
    async fn delivery_error(
        &mut self,
        id: &str,
    ) -> anyhow::Result<verge_proto::hub::DeliveryError> {
        loop {
            if let hub_frame::Frame::DeliveryError(e) = self.next().await?
                && e.message_id == id
            {
                return Ok(e);
            }
        }
    }
}

/// A command of the robots group for `default/robot/arm` on `node`.
fn command(id: &str, node: &str, group: Group) -> Message {
    Message::build(
        id,
        "robots-controller",
        group,
        Operation::Update,
        format!("node/{node}/default/robot/arm"),
        json!({"move": id}).to_string().into_bytes(),
    )
}

/// The edge app: answers every command of [`GROUP`] (`{"done": <id>}`) and records what it
/// received.
async fn start_app(broker: &Mosquitto) -> anyhow::Result<EchoApp> {
    let mut options = MqttOptions::new("robots-app", "127.0.0.1", broker.port());
    options.set_credentials(broker.username(), broker.password());
    EchoApp::start(options, &[format!("verge/apps/{GROUP}/+/+/+")]).await
}

/// Everything a scenario runs on: the cloud, an edge whose link to cloudhub goes through a
/// [`CuttableLink`] and whose eventbus uses `broker`, the edge's namespace, a token of a
/// third-party service account allowed the groups given, and the Verge CA.
struct Site {
    client: Client,
    cloud: Cloud,
    broker: Mosquitto,
    link: CuttableLink,
    edge: Edge,
    name: String,
    token: String,
    ca_pem: String,
}

impl Site {
    async fn start(tag: &str, groups: &[&str]) -> anyhow::Result<Self> {
        verge_telemetry::init_for_tests();
        let cp = verge_testkit::shared().await?;
        let client = cp.client().await?;
        let cloud = Cloud::start(&cp).await?;
        let broker = Mosquitto::start().await?;
        let link = CuttableLink::start(([127, 0, 0, 1], cloud.edge_port).into()).await?;
        let name = format!("e2e-{tag}-{}", std::process::id());
        let mut edge = Edge::with_config(&name, &cloud, |c| {
            c.edge_hub.server = format!("https://127.0.0.1:{}", link.addr().port());
            c.event_bus.enable = true;
            c.event_bus.mqtt_server = broker.url();
            c.event_bus.username = broker.username().to_owned();
            c.event_bus.password_file = Some(broker.password_file());
        })?;
        edge.start()?;
        create_namespace(&client, &name).await?;
        let token =
            verge_testkit::trust::third_party_controller(&client, &name, "robots", groups).await?;
        let ca_pem = verge_testkit::trust::verge_ca(&client)
            .await?
            .cert_pem()
            .to_owned();
        Ok(Self {
            client,
            cloud,
            broker,
            link,
            edge,
            name,
            token,
            ca_pem,
        })
    }

    /// The last lines of the cloud's and the edge's logs.
    fn logs(&self) -> String {
        format!("{}\n{}", self.cloud.logs(60), self.edge.logs(60))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_third_party_controller_and_an_edge_app_exchange_messages_across_a_cut()
-> anyhow::Result<()> {
    let site = Site::start("apps", &[GROUP]).await?;
    let Site {
        client,
        cloud,
        link,
        name,
        token,
        ca_pem,
        ..
    } = &site;
    let url = &cloud.controller_url;

    // Refusals, each with its reason, before anything is attached.
    let refused = |r: Result<Controller, Status>| r.err().context("attach must be refused");
    let status = refused(Controller::attach(url, ca_pem, None, &[GROUP]).await?)?;
    ensure!(status.code() == Code::Unauthenticated, "{status:?}");
    let status = refused(Controller::attach(url, ca_pem, Some(token), &["resource"]).await?)?;
    ensure!(
        status.code() == Code::PermissionDenied
            && status.message().contains("trust.controllerUsers"),
        "{status:?}"
    );
    let stranger =
        verge_testkit::trust::third_party_controller(client, name, "stranger", &[]).await?;
    let status = refused(Controller::attach(url, ca_pem, Some(&stranger), &[GROUP]).await?)?;
    ensure!(
        status.code() == Code::PermissionDenied && status.message().contains("RBAC"),
        "{status:?}"
    );

    let mut app = start_app(&site.broker).await?;
    let mut ctrl = Controller::attach(url, ca_pem, Some(token), &[GROUP])
        .await?
        .map_err(|s| anyhow::anyhow!("attach refused: {s:?}"))?;
    ctrl.session(name, true)
        .await
        .with_context(|| site.logs())?;

    // A message of a group it did not name is refused and reaches nothing.
    ctrl.send(
        name,
        command("other-1", name, "lights.example.com".parse()?),
    )
    .await?;
    let error = ctrl.delivery_error("other-1").await?;
    ensure!(
        error.message_id == "other-1" && error.failure() == DeliveryFailure::GroupNotServed,
        "{error:?}"
    );

    // A command and its reply.
    ctrl.send(name, command("cmd-1", name, group())).await?;
    let received = app
        .next(STEP)
        .await
        .with_context(|| format!("the app got no command\n{}", site.logs()))?;
    ensure!(received["id"] == "cmd-1", "{received}");
    ensure!(received["resource"] == "default/robot/arm", "{received}");
    let reply = ctrl.upstream().await?;
    ensure!(reply.parent_id() == "cmd-1", "{reply:?}");
    ensure!(
        serde_json::from_slice::<Value>(&reply.content)? == json!({"done": "cmd-1"}),
        "{reply:?}"
    );

    // The link to cloudhub is cut: the node goes offline for the controller.
    link.cut();
    ctrl.session(name, false)
        .await
        .with_context(|| site.logs())?;
    // Sent while offline: refused at once, kept by the controller for the reconnect.
    ctrl.send(name, command("cmd-2", name, group())).await?;
    let error = ctrl.delivery_error("cmd-2").await?;
    ensure!(
        error.message_id == "cmd-2" && error.failure() == DeliveryFailure::NotConnected,
        "{error:?}"
    );
    // What the app publishes meanwhile waits in the edge's outbox.
    let own =
        json!({"id": "own-1", "operation": "update", "content": content(&json!({"battery": 80}))});
    app.publish(&format!("verge/apps/{GROUP}/default/robot/arm/reply"), &own)
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    link.heal();
    ctrl.session(name, true)
        .await
        .with_context(|| site.logs())?;
    ctrl.send(name, command("cmd-2", name, group())).await?;

    // Upstream is at-least-once: a report whose ack the cut swallowed comes again (same
    // id), so the controller keeps what it saw by id.
    let mut upstream = BTreeMap::new();
    while !(upstream.contains_key("own-1") && upstream.contains_key("reply-cmd-2")) {
        let message = ctrl.upstream().await.with_context(|| site.logs())?;
        upstream.insert(message.id().to_owned(), message);
    }
    let own = upstream.get("own-1").context("the app's own message")?;
    ensure!(
        own.resource() == format!("node/{name}/default/robot/arm"),
        "{own:?}"
    );

    // The app got cmd-2 exactly once, and nothing else.
    let received = app
        .next(STEP)
        .await
        .context("cmd-2 never reached the app")?;
    ensure!(received["id"] == "cmd-2", "{received}");
    if let Some(extra) = app.next(Duration::from_secs(3)).await {
        bail!("the app got a duplicate or stray message: {extra}");
    }
    Ok(())
}

/// The group a test's observer serves: it only watches node sessions, so the example
/// controller under test gets every message of [`GROUP`].
const OBSERVER: &str = "observer.example.com";

/// One run of an example controller: its stdout lines as JSON, read as they come.
struct ExampleRun {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    seen: Vec<Value>,
}

impl ExampleRun {
    fn start(command: &[std::path::PathBuf], args: &[String]) -> anyhow::Result<Self> {
        use tokio::io::AsyncBufReadExt as _;
        let (program, leading) = command.split_first().context("an empty command")?;
        let mut child = tokio::process::Command::new(program)
            .args(leading)
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        let stdout = child.stdout.take().context("stdout")?;
        Ok(Self {
            child,
            lines: tokio::io::BufReader::new(stdout).lines(),
            seen: Vec::new(),
        })
    }

    /// Reads lines until one whose `event` is `event`; returns it.
    async fn until(&mut self, event: &str) -> anyhow::Result<Value> {
        loop {
            let line = tokio::time::timeout(STEP, self.lines.next_line())
                .await
                .with_context(|| format!("no {event:?} line; saw {:?}", self.seen))??
                .with_context(|| format!("stdout ended before {event:?}; saw {:?}", self.seen))?;
            let value: Value =
                serde_json::from_str(&line).with_context(|| format!("not a JSON line: {line}"))?;
            self.seen.push(value.clone());
            if value["event"] == event {
                return Ok(value);
            }
        }
    }

    /// Waits for the exit; requires success.
    async fn succeeded(mut self) -> anyhow::Result<()> {
        let status = tokio::time::timeout(STEP, self.child.wait())
            .await
            .context("the controller did not exit")??;
        ensure!(
            status.success(),
            "the controller exited {status}; saw {:?}",
            self.seen
        );
        Ok(())
    }
}

/// An example controller of `examples/` completes the command/reply round trip with an edge
/// app, online and across a cut of the edge's link (sent while offline, refused
/// `NOT_CONNECTED`, sent again when the node connects); the app gets each command once.
async fn example_round_trip(
    example: verge_testkit::example_clients::Example,
    tag: &str,
) -> anyhow::Result<()> {
    let command = tokio::task::spawn_blocking(move || example.ensure_built()).await??;
    let site = Site::start(tag, &[GROUP, OBSERVER]).await?;
    let Site {
        cloud,
        link,
        name,
        token,
        ca_pem,
        ..
    } = &site;
    let access = verge_testkit::example_clients::Access::write(ca_pem, token)?;
    let args = |id: &str| -> Vec<String> {
        let mut args = access.args(&cloud.controller_url, GROUP, name);
        args.extend(
            [
                "--command-id",
                id,
                "--content",
                &json!({"move": id}).to_string(),
            ]
            .map(str::to_owned),
        );
        args
    };
    let mut app = start_app(&site.broker).await?;
    let mut observer = Controller::attach_as(
        "observer",
        &cloud.controller_url,
        ca_pem,
        Some(token),
        &[OBSERVER],
    )
    .await?
    .map_err(|s| anyhow::anyhow!("observer refused: {s:?}"))?;
    observer
        .session(name, true)
        .await
        .with_context(|| site.logs())?;

    // Online.
    let first = format!("{tag}-1");
    let mut run = ExampleRun::start(&command, &args(&first))?;
    let reply = run.until("reply").await.with_context(|| site.logs())?;
    ensure!(reply["parentId"] == first.as_str(), "{reply}");
    ensure!(
        serde_json::from_str::<Value>(reply["content"].as_str().unwrap_or_default())?
            == json!({"done": first}),
        "{reply}"
    );
    run.succeeded().await?;
    let received = app.next(STEP).await.context("the app got no command")?;
    ensure!(received["id"] == first.as_str(), "{received}");

    // Sent while the edge's link is cut: refused, sent again when the node connects.
    link.cut();
    observer
        .session(name, false)
        .await
        .with_context(|| site.logs())?;
    let second = format!("{tag}-2");
    let mut run = ExampleRun::start(&command, &args(&second))?;
    let undelivered = run.until("undelivered").await?;
    ensure!(
        undelivered["failure"] == "DELIVERY_FAILURE_NOT_CONNECTED",
        "{undelivered}"
    );
    link.heal();
    let reply = run.until("reply").await.with_context(|| site.logs())?;
    ensure!(reply["parentId"] == second.as_str(), "{reply}");
    run.succeeded().await?;
    let received = app
        .next(STEP)
        .await
        .context("the offline command never reached the app")?;
    ensure!(received["id"] == second.as_str(), "{received}");
    if let Some(extra) = app.next(Duration::from_secs(3)).await {
        bail!("the app got a duplicate or stray message: {extra}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_go_example_controller_round_trips_across_a_cut() -> anyhow::Result<()> {
    example_round_trip(verge_testkit::example_clients::Example::Go, "apps-go").await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_example_controller_round_trips_across_a_cut() -> anyhow::Result<()> {
    example_round_trip(verge_testkit::example_clients::Example::Python, "apps-py").await
}
