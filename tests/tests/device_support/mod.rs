//! The set-up of the device scenarios: cloud services with devicecontroller, one edge node,
//! mappers on the edge's DMI socket, the example manifests and views of the DeviceStatus.
//! Shared by several test binaries (`devices`, `device_tracing`), each using a part of it.

// Test code: its tasks end with the test's runtime; clippy.toml forbids bare spawns in
// production code only.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::Value;
use tokio::sync::mpsc;
use verge_e2e::{Cloud, Config, Edge, create_namespace, via_host, wait_for};
use verge_proto::dmi::v1beta1::GetDeviceRequest;
use verge_testkit::ControlPlane;
use verge_testkit::mosquitto::Mosquitto;
use verge_testkit::netns::EdgeNetns;
use verge_testkit::process::{ChildProcess, workspace_bin};

/// Scenarios start cloud, edge and mappers; one at a time keeps the time bounds honest on
/// a 2-core machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The example manifests (KubeEdge's format), shipped in `deploy/examples/devices/`.
const MODEL: &str = include_str!("../../../deploy/examples/devices/thermometer-model.yaml");
const DEVICE: &str = include_str!("../../../deploy/examples/devices/thermometer-device.yaml");

/// The example DeviceModel in namespace `ns`.
pub fn model_yaml(ns: &str) -> String {
    MODEL.replace("namespace: default", &format!("namespace: {ns}"))
}

/// One property's twin as the DeviceStatus shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TwinView {
    /// `reported.value`.
    pub reported: Option<String>,
    /// `reported.value` with `reported.metadata.timestamp`: changes with every report.
    pub reported_at: Option<String>,
    /// `observedDesired.value`.
    pub observed_desired: Option<String>,
}

/// Cloud (with devicecontroller), one edge node, its namespace and its mappers.
pub struct DeviceEnv {
    pub client: Client,
    pub cloud: Cloud,
    pub edge: Edge,
    pub ns: String,
    cp: ControlPlane,
    dir: tempfile::TempDir,
    mappers: Vec<(String, ChildProcess)>,
    _serial: tokio::sync::MutexGuard<'static, ()>,
}

impl DeviceEnv {
    /// Starts everything for a node named after `tag`; `change` adjusts the edge config.
    pub async fn start(tag: &str, change: impl FnOnce(&mut Config)) -> anyhow::Result<Self> {
        Self::start_with(tag, None, None, change).await
    }

    /// Like [`DeviceEnv::start`] with the cloud processes (devicecontroller too) exporting
    /// their spans to the OTLP/gRPC endpoint `otlp`; `change` sets the edge's tracing.
    pub async fn start_traced(
        tag: &str,
        otlp: &str,
        change: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Self> {
        Self::start_with(tag, None, Some(otlp), change).await
    }

    /// Like [`DeviceEnv::start`] with edgecore in `netns`.
    pub async fn start_in(
        tag: &str,
        netns: &EdgeNetns,
        change: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Self> {
        Self::start_with(tag, Some(netns), None, change).await
    }

    async fn start_with(
        tag: &str,
        netns: Option<&EdgeNetns>,
        otlp: Option<&str>,
        change: impl FnOnce(&mut Config),
    ) -> anyhow::Result<Self> {
        verge_telemetry::init_for_tests();
        let serial = SERIAL.lock().await;
        let cp = verge_testkit::shared().await?;
        let client = cp.client().await?;
        let mut cloud = match otlp {
            Some(otlp) => Cloud::start_traced(&cp, otlp).await?,
            None => Cloud::start(&cp).await?,
        };
        cloud.start_devicecontroller(&cp).await?;
        let name = format!("e2e-{tag}-{}", std::process::id());
        let mut edge = Edge::with_config(&name, &cloud, |c| {
            c.device_twin.dmi_socket = c.data_dir.join("dmi.sock");
            if let Some(ns) = netns {
                via_host(c, &cloud, ns.host_addr());
            }
            change(c);
        })?;
        match netns {
            Some(ns) => edge.start_in(ns)?,
            None => edge.start()?,
        }
        verge_testkit::wait::wait_node_ready(&client, &name, Duration::from_secs(30)).await?;
        create_namespace(&client, &name).await?;
        Ok(Self {
            client,
            cloud,
            edge,
            ns: name,
            cp,
            dir: tempfile::tempdir()?,
            mappers: Vec::new(),
            _serial: serial,
        })
    }

    /// The edge's DMI socket.
    pub fn dmi_socket(&self) -> PathBuf {
        self.edge.data_dir().join("dmi.sock")
    }

    /// The DeviceMapperService socket of the mapper serving `protocol`: beside the DMI
    /// socket, where edgecore accepts mapper sockets (`deviceTwin.mapperSocketDir`).
    pub fn mapper_socket(&self, protocol: &str) -> PathBuf {
        self.edge.data_dir().join(format!("{protocol}.sock"))
    }

    /// Starts Verge's Rust virtual mapper for `protocol` on this edge.
    pub fn start_rust_mapper(&mut self, protocol: &str) -> anyhow::Result<()> {
        let args = [
            "--protocol".to_owned(),
            protocol.to_owned(),
            "--name".to_owned(),
            format!("{protocol}-mapper"),
            "--socket".to_owned(),
            self.mapper_socket(protocol).display().to_string(),
            "--dmi-socket".to_owned(),
            self.dmi_socket().display().to_string(),
        ];
        let process = ChildProcess::spawn(
            workspace_bin("virtual-mapper")?,
            &args,
            [("RUST_LOG", "info")],
        )?;
        self.mappers
            .push((format!("rust mapper {protocol}"), process));
        Ok(())
    }

    /// Builds (cached) and starts the Go mapper for `protocol` on this edge.
    pub async fn start_go_mapper(&mut self, protocol: &str) -> anyhow::Result<()> {
        let bin = tokio::task::spawn_blocking(verge_testkit::go_mapper::ensure_built).await??;
        let args = [
            "-protocol".to_owned(),
            protocol.to_owned(),
            "-name".to_owned(),
            format!("{protocol}-mapper"),
            "-socket".to_owned(),
            self.mapper_socket(protocol).display().to_string(),
            "-dmi-socket".to_owned(),
            self.dmi_socket().display().to_string(),
        ];
        let process = ChildProcess::spawn(bin, &args, [("RUST_LOG", "info")])?;
        self.mappers
            .push((format!("go mapper {protocol}"), process));
        Ok(())
    }

    /// Kills every mapper.
    pub fn stop_mappers(&mut self) {
        for (_, process) in &mut self.mappers {
            let _ = process.kill9();
        }
    }

    /// `kubectl apply -f -` of `yaml` (strict field validation, as users run it).
    pub fn apply(&self, yaml: &str) -> anyhow::Result<()> {
        let out = self
            .cp
            .kubectl_with_input(&["apply", "--validate=strict", "-f", "-"], yaml)?;
        if !out.status.success() {
            bail!(
                "kubectl apply failed: {}\n{yaml}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }

    /// Applies the example Device as `name` on this edge node for mapper `protocol`.
    pub fn apply_device(&self, name: &str, protocol: &str) -> anyhow::Result<()> {
        let yaml = DEVICE
            .replace("  name: thermometer\n", &format!("  name: {name}\n"))
            .replace("namespace: default", &format!("namespace: {}", self.ns))
            .replace(
                "nodeName: verge-edge-1",
                &format!("nodeName: {}", self.edge.name),
            )
            .replace(
                "protocolName: virtual",
                &format!("protocolName: {protocol}"),
            );
        self.apply(&yaml)
    }

    /// The Devices of this namespace.
    pub fn devices(&self) -> Api<DynamicObject> {
        let resource = resource("Device", "devices");
        Api::namespaced_with(self.client.clone(), &self.ns, &resource)
    }

    fn statuses(&self) -> Api<DynamicObject> {
        let resource = resource("DeviceStatus", "devicestatuses");
        Api::namespaced_with(self.client.clone(), &self.ns, &resource)
    }

    /// `property`'s twin in the DeviceStatus of `device`, if any.
    pub async fn twin(&self, device: &str, property: &str) -> anyhow::Result<Option<TwinView>> {
        let Some(status) = self.statuses().get_opt(device).await? else {
            return Ok(None);
        };
        let twins = status.data["status"]["twins"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(twins
            .iter()
            .find(|t| t["propertyName"] == property)
            .map(|t| {
                let text = |v: &Value| v.as_str().map(str::to_owned);
                let reported = text(&t["reported"]["value"]);
                TwinView {
                    reported_at: reported.as_ref().map(|r| {
                        format!(
                            "{r}@{}",
                            t["reported"]["metadata"]["timestamp"]
                                .as_str()
                                .unwrap_or("")
                        )
                    }),
                    reported,
                    observed_desired: text(&t["observedDesired"]["value"]),
                }
            }))
    }

    /// Waits until `property`'s twin of `device` satisfies `ready`; returns it.
    pub async fn wait_twin(
        &self,
        device: &str,
        property: &str,
        timeout: Duration,
        ready: impl Fn(&TwinView) -> bool,
    ) -> anyhow::Result<TwinView> {
        let what = format!("twin {device}/{property}");
        let ready = &ready;
        wait_for(&what, timeout, || async move {
            Ok(self.twin(device, property).await?.filter(|t| ready(t)))
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", self.logs()))
    }

    /// Sets the desired value of `property` of `device` (a merge patch of the properties).
    pub async fn set_desired(
        &self,
        device: &str,
        property: &str,
        value: &str,
    ) -> anyhow::Result<()> {
        let current = self.devices().get(device).await?;
        let mut properties = current.data["spec"]["properties"].clone();
        let list = properties.as_array_mut().context("spec.properties")?;
        let p = list
            .iter_mut()
            .find(|p| p["name"] == property)
            .context("no such property")?;
        p["desired"] = serde_json::json!({"value": value});
        let patch = serde_json::json!({"spec": {"properties": properties}});
        self.devices()
            .patch(device, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Stops edgecore (SIGKILL: the store is crash-safe) and lists the Devices in its store.
    pub fn edge_devices_after_stop(&mut self) -> anyhow::Result<Vec<String>> {
        self.edge.kill9()?;
        let store = verge_edgecore::MetaStore::open(&self.edge.data_dir().join("edgecore.redb"))?;
        Ok(store
            .list(verge_core::ResourceType::Device)?
            .into_iter()
            .map(|(key, _)| key.to_string())
            .collect())
    }

    /// Recent logs of every process.
    pub fn logs(&self) -> String {
        let mut out = format!(
            "{}\n--- edgecore ---\n{}",
            self.cloud.logs(30),
            self.edge.logs(60)
        );
        for (name, process) in &self.mappers {
            out.push_str(&format!("\n--- {name} ---\n{}", process.log_tail(20)));
        }
        out
    }
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: verge_device_api::GROUP.to_owned(),
        version: verge_device_api::VERSION.to_owned(),
        api_version: verge_device_api::API_VERSION.to_owned(),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

/// Whether the mapper at `socket` does not know `ns/name` (GetDevice answers an error).
pub async fn mapper_lacks(socket: &Path, ns: &str, name: &str) -> bool {
    let mut client = verge_testkit::dmi::mapper_client(socket);
    let request = GetDeviceRequest {
        device_name: name.to_owned(),
        device_namespace: ns.to_owned(),
    };
    client.get_device(request).await.is_err()
}

/// An edge app on the broker: publishes, and receives what it subscribed to.
pub struct Mqtt {
    client: AsyncClient,
    received: mpsc::UnboundedReceiver<(String, Vec<u8>)>,
    /// Messages received while waiting for another topic, oldest first.
    backlog: Vec<(String, Vec<u8>)>,
}

impl Mqtt {
    /// Connects as `client_id` with the broker's test credentials.
    pub async fn connect(broker: &Mosquitto, client_id: &str) -> anyhow::Result<Self> {
        let mut options = MqttOptions::new(client_id, "127.0.0.1", broker.port());
        options.set_credentials(broker.username(), broker.password());
        options.set_keep_alive(Duration::from_secs(5));
        let (client, mut events) = AsyncClient::new(options, 64);
        let (tx, received) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        if tx.send((p.topic.clone(), p.payload.to_vec())).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
        Ok(Self {
            client,
            received,
            backlog: Vec::new(),
        })
    }

    /// Subscribes to `topic` (QoS 1) and gives the broker a moment to register it.
    pub async fn subscribe(&mut self, topic: &str) -> anyhow::Result<()> {
        self.client.subscribe(topic, QoS::AtLeastOnce).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(())
    }

    /// Publishes `payload` on `topic` (QoS 1).
    pub async fn publish(&mut self, topic: &str, payload: &str) -> anyhow::Result<()> {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload.as_bytes().to_vec())
            .await?;
        Ok(())
    }

    /// The next message on `topic` as JSON; messages of other topics are kept for later
    /// calls.
    pub async fn next(&mut self, topic: &str, timeout: Duration) -> anyhow::Result<Value> {
        if let Some(at) = self.backlog.iter().position(|(t, _)| t == topic) {
            let (_, payload) = self.backlog.remove(at);
            return Ok(serde_json::from_slice(&payload)?);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let Ok(Some((t, payload))) =
                tokio::time::timeout_at(deadline, self.received.recv()).await
            else {
                bail!("nothing on {topic} within {timeout:?}");
            };
            if t == topic {
                return Ok(serde_json::from_slice(&payload)?);
            }
            self.backlog.push((t, payload));
        }
    }
}
