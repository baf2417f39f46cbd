//! edgecore: the Verge agent on an edge node (KubeEdge: EdgeCore). It replaces the kubelet
//! there, holds every object the cloud sends in an embedded redb store, and keeps working
//! while the link to the cloud is down.
//!
//! # Layout
//! The edge crates it builds on, from the bottom: `verge-edge-store` (the redb file and
//! every table) and `verge-container-runtime` (the container runtime traits and Docker),
//! `verge-edgehub` (the session with cloudhub and the node's certificates) and
//! `verge-eventbus` (MQTT), then `verge-edge-apps`, `verge-metamanager`, and at the top
//! `verge-edged`, `verge-streaming` and `verge-devicetwin`; edgecore re-exports them under
//! their module names, wires them, and owns the configuration file.
//! - [`edgehub`] (crate `verge-edgehub`): the client end of cloudhub's `EdgeHub.Connect`
//!   stream: hello with inventory, keepalives, reconnect with jittered exponential backoff,
//!   draining the upstream outbox; [`EdgeHubHandle`] reports durably
//!   ([`EdgeHubHandle::report`]) or sends transient frames.
//! - [`metamanager`] (crate `verge-metamanager`): the component that commits downstream
//!   objects to the store before acking them, and cloud queries. The store itself
//!   ([`MetaStore`]: objects, the upstream outbox keyed by [`OutboxKey`], every other table)
//!   is the crate `verge-edge-store`, the bottom of the edge crates.
//! - [`edged`] (crate `verge-edged`): pods on Docker ([`Edged`]): sandbox, containers,
//!   volumes, probes, restart policy, status reports, garbage collection; and [`node`]:
//!   node registration, node status and node lease (the kubelet's node status manager and
//!   lease controller).
//! - [`container_runtime`] (crate `verge-container-runtime`): the `ContainerRuntime` and
//!   `StreamingRuntime` traits and their Docker implementation, the one door to Docker.
//! - [`devicetwin`] (crate `verge-devicetwin`): device twins in redb, the DMI server
//!   mappers register and report on, and the calls that hand Devices to mappers
//!   ([`DeviceTwin`], [`DeviceTwinHandle`]).
//! - [`certificates`] (in `verge-edgehub`): the node's key and client certificate: join with
//!   a bootstrap token, load for every connection, renew at 80 % of the lifetime.
//! - [`eventbus`] (crate `verge-eventbus`): MQTT for edge applications: KubeEdge's
//!   `$hw/events/device/...` twin topics served through the [`eventbus::TwinService`] trait
//!   ([`eventbus::EventBus`], [`eventbus::EventBusHandle`]).
//! - [`apps`] (crate `verge-edge-apps`): edge apps of third-party groups over the same
//!   broker (`verge/apps/...`): an inbox committed before the ack, published with QoS 1;
//!   replies committed to the outbox before the broker is acknowledged
//!   ([`apps::AppsBridge`]).
//! - [`metrics`]: the Prometheus series served on `metricsAddr` (`/metrics`).
//! - [`streaming`] (crate `verge-streaming`): the kubelet streaming API (kubectl logs, exec, attach, port-forward)
//!   on tunnels from cloudhub ([`streaming::StreamingServer`]).
//! - [`net`] (crate `verge-edge-net`): the pod network, the Service proxy and cluster DNS.
//! - [`edge_api`] (crate `verge-edge-api`): the Kubernetes API for the node's pods at the
//!   `kubernetes` Service ([`edge_api::EdgeApi`]).
//! - [`config`]: the YAML configuration file ([`Config`]), made of the sections each crate
//!   owns.
//! - [`error`]: the crate's [`Error`].
//!
//! Each module is a struct with `async fn run(self, shutdown)`, fed by typed channels.
//!
//! [`EdgeCore`] wires the modules together: build it from a [`Config`] and
//! [`run`](EdgeCore::run) it until a [`CancellationToken`] is cancelled.

// Unit tests may start untracked tasks: they end with the test's runtime.
#![cfg_attr(test, allow(clippy::disallowed_methods))]

/// Edge apps of third-party groups, the crate `verge-edge-apps`.
pub use verge_edge_apps as apps;
pub mod config;
/// The container runtime (the one door to Docker), the crate `verge-container-runtime`.
pub use verge_container_runtime as container_runtime;
/// devicetwin, the crate `verge-devicetwin`.
pub use verge_devicetwin as devicetwin;
/// The edge API (MetaServer), the crate `verge-edge-api`.
pub use verge_edge_api as edge_api;
pub use verge_edge_net as net;
/// taskmanager: the fleet tasks of `operations.kubeedge.io` jobs, the crate `verge-edge-tasks`.
pub use verge_edge_tasks as tasks;
/// edged and the node agent, the crate `verge-edged`.
pub use verge_edged as edged;
/// edgehub and the node's certificates, the crate `verge-edgehub`, under the names
/// edgecore's other modules use for them.
pub use verge_edgehub as edgehub;
pub use verge_edgehub::certificates;
pub mod error;
/// The eventbus, the crate `verge-eventbus` (KubeEdge's MQTT device topics), under the name
/// edgecore's other modules use for it.
pub use verge_eventbus as eventbus;
/// metamanager, the crate `verge-metamanager`.
pub use verge_metamanager as metamanager;
pub mod metrics;
/// The node agent (registration, status, lease), in the crate `verge-edged`.
pub use verge_edged::node;
/// The streaming server, the crate `verge-streaming`.
pub use verge_streaming as streaming;

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

pub use config::Config;
pub use devicetwin::{DeviceTwin, DeviceTwinHandle};
pub use edged::Edged;
pub use edgehub::{EdgeHub, EdgeHubHandle, SessionInfo};
pub use error::{Error, Result};
pub use metamanager::MetaManager;
pub use node::NodeAgent;
use streaming::StreamingServer;
pub use verge_edge_store::{MetaStore, OutboxKey, StoredObject};

/// The whole edge agent: edgehub, metamanager, edged, node and devicetwin, sharing one
/// store.
#[derive(Debug)]
pub struct EdgeCore {
    config: Arc<Config>,
    store: MetaStore,
    config_file: Option<std::path::PathBuf>,
    binary: Option<std::path::PathBuf>,
    restart: tasks::restart::Restart,
}

impl EdgeCore {
    /// Validates `config`, creates `data_dir` and its `pods` directory private (mode 0700,
    /// owned by edgecore's user; an existing directory's mode and owner are fixed) and opens
    /// `<data_dir>/edgecore.redb` (mode 0600).
    ///
    /// # Errors
    /// [`Error::ConfigValue`] for an unusable value; [`Error::DataDir`] if a directory
    /// cannot be created or made private; [`Store`](Error::Store) if the database cannot be opened (e.g. another
    /// edgecore holds it).
    pub fn new(config: Config) -> Result<Self> {
        config.validate()?;
        for dir in [config.data_dir.clone(), config.pods_dir()] {
            verge_edge_store::private_dir::ensure(&dir)
                .map_err(|source| Error::DataDir { path: dir, source })?;
        }
        let store = MetaStore::open(&config.store_path())?;
        Ok(Self {
            config: Arc::new(config),
            store,
            config_file: None,
            binary: None,
            restart: tasks::restart::Restart::default(),
        })
    }

    /// The same, started from the configuration file at `path` (`--config`): ConfigUpdateJobs
    /// change it (checked by [`Config::from_yaml`] first).
    #[must_use]
    pub fn with_config_file(mut self, path: std::path::PathBuf) -> Self {
        self.config_file = Some(path);
        self
    }

    /// The same, running from the binary at `path` (`/proc/self/exe` at start): a
    /// NodeUpgradeJob replaces it.
    #[must_use]
    pub fn with_binary(mut self, path: std::path::PathBuf) -> Self {
        self.binary = Some(path);
        self
    }

    /// The restart a task may ask for: once [`EdgeCore::run`] returned, `main` restarts
    /// edgecore in place when it was requested.
    pub fn restart(&self) -> tasks::restart::Restart {
        self.restart.clone()
    }

    /// The store, e.g. for inspection by tests.
    pub fn store(&self) -> &MetaStore {
        &self.store
    }

    /// The streaming server (kubectl logs/exec/...), unless `streaming.enable` is off.
    fn streaming_server(&self) -> Option<(StreamingServer, streaming::TunnelRequests)> {
        self.config.streaming.enable.then(|| {
            let mut metrics = streaming::ServedMetrics::default();
            crate::metrics::register(&mut metrics.process, &self.store);
            crate::edged::metrics::global().register_probes(&mut metrics.probes);
            let (server, tunnels) = StreamingServer::new(
                self.store.clone(),
                &self.config.node_name,
                &self.config.data_dir,
            );
            (server.with_metrics(metrics), tunnels)
        })
    }

    /// Runs every module until `shutdown` is cancelled, then waits for all of them to stop.
    /// A module that fails stops the others.
    ///
    /// # Errors
    /// The first module error (e.g. [`CloudhubAddress`](crate::edgehub::error::Error::CloudhubAddress)).
    pub async fn run(self, shutdown: CancellationToken) -> Result<()> {
        let (down_tx, down_rx) = mpsc::channel(self.config.edge_hub.downstream_queue);
        let (hub, handle) = EdgeHub::new(
            Arc::new(self.config.hub_settings()),
            self.store.clone(),
            down_tx,
        );
        let apps = apps::AppsBridge::new(
            &self.config.node_name,
            &self.config.event_bus,
            self.store.clone(),
            handle.clone(),
        )?;
        let mut meta = MetaManager::new(self.store.clone(), down_rx, handle.clone());
        if let Some((_, apps)) = &apps {
            meta = meta.with_apps(apps.clone());
        }
        // The Services and EndpointSlices, parsed once for the resolver, the proxy and the
        // edge API.
        let catalog =
            (self.config.network.cluster_dns || self.config.network.service_proxy).then(|| {
                verge_edge_net::catalog::ServiceCatalog::new(self.store.clone(), meta.subscribe())
            });
        let edge_api = catalog
            .as_ref()
            .filter(|_| self.config.network.service_proxy && self.config.edge_api.enable)
            .map(|catalog| {
                verge_edge_api::EdgeApi::new(
                    self.store.clone(),
                    &self.config.node_name,
                    &self.config.network.cluster_domain,
                    &self.config.edge_api,
                    self.config.data_dir.join("edge-api"),
                    catalog.subscribe(),
                    handle.sessions(),
                )
            });
        let objects =
            edged::objects::StoreObjects::new(self.store.clone(), handle.clone(), meta.queries());
        let settings = Arc::new(self.config.edged_settings());
        let edged = Edged::new(
            Arc::clone(&settings),
            self.store.clone(),
            handle.clone(),
            objects,
            meta.subscribe(),
        );
        let device_twin = self.config.device_twin.enable.then(|| {
            DeviceTwin::new(
                self.config.device_twin.clone(),
                self.store.clone(),
                handle.clone(),
                meta.subscribe(),
            )
        });
        let (tasks_hub, tasks_events) = (handle.clone(), meta.subscribe());
        let sessions = handle.sessions();
        let node = NodeAgent::new(settings, handle)?.with_runtime_version(edged.runtime_version());
        let cluster_dns = catalog
            .as_ref()
            .filter(|_| self.config.network.cluster_dns)
            .map(|catalog| {
                verge_edge_net::dns::ClusterDns::new(
                    self.store.clone(),
                    &self.config.node_name,
                    &self.config.network.cluster_domain,
                    catalog.subscribe(),
                    meta.subscribe(),
                )
            });
        let service_proxy = catalog
            .as_ref()
            .filter(|_| self.config.network.service_proxy)
            .map(|catalog| {
                let node_ip = match self.config.edged.node_ip {
                    Some(std::net::IpAddr::V4(ip)) => Some(ip),
                    Some(std::net::IpAddr::V6(_)) => None,
                    None => edged::node::host::first_ipv4(),
                };
                let proxy = verge_edge_net::ServiceProxy::new(
                    self.store.clone(),
                    &self.config.node_name,
                    node_ip,
                    self.config.network.nft.clone(),
                    catalog.subscribe(),
                    meta.subscribe(),
                );
                let proxy = match self.config.network.service_tunnel {
                    true => proxy.with_tunnel(self.config.network.service_tunnel_port, sessions),
                    false => proxy,
                };
                match edge_api {
                    Some(_) => proxy.with_edge_api(self.config.edge_api.port),
                    None => proxy,
                }
            });

        let mut modules = verge_runtime::Modules::new(shutdown.child_token());
        let stop = modules.stop_token().clone();
        let hub = match self.streaming_server() {
            Some((server, tunnels)) => {
                let (config, stop) = (Arc::clone(&self.config), stop.clone());
                modules.spawn("streaming", async move {
                    let endpoint = config.edged.container_runtime_endpoint.as_deref();
                    server
                        .run_on_docker(endpoint, &config.node_name, stop)
                        .await;
                    Ok(())
                });
                hub.with_tunnels(tunnels)
            }
            None => hub,
        };
        // Tunnels cloudhub relays from other edge nodes' pods to this node's pods.
        let hub = if self.config.network.service_proxy && self.config.network.service_tunnel {
            let (tx, rx) = tokio::sync::mpsc::channel(64);
            let (store, node, pod_stop) = (
                self.store.clone(),
                self.config.node_name.clone(),
                stop.clone(),
            );
            modules.spawn("pod-tunnels", async move {
                verge_edge_net::services::tunnel::serve_pod_tunnels(rx, store, node, pod_stop)
                    .await;
                Ok(())
            });
            hub.with_pod_tunnels(tx)
        } else {
            hub
        };
        let hub_stop = stop.clone();
        modules.spawn("edgehub", async move { Ok(hub.run(hub_stop).await?) });
        if let Some((bridge, _)) = apps {
            let apps_stop = stop.clone();
            modules.spawn("apps", async move { Ok(bridge.run(apps_stop).await?) });
        }
        let meta_stop = stop.clone();
        modules.spawn("metamanager", async move { Ok(meta.run(meta_stop).await?) });
        let (edged_stop, node_stop) = (stop.clone(), stop.clone());
        modules.spawn("edged", async move { Ok(edged.run(edged_stop).await?) });
        modules.spawn("node", async move { Ok(node.run(node_stop).await?) });
        if let Some(catalog) = catalog {
            let catalog_stop = stop.clone();
            modules.spawn("servicecatalog", async move {
                catalog.run(catalog_stop).await;
                Ok(())
            });
        }
        if let Some(dns) = cluster_dns {
            let dns_stop = stop.clone();
            modules.spawn("clusterdns", async move {
                dns.run(dns_stop).await;
                Ok(())
            });
        }
        if let Some(api) = edge_api {
            let api_stop = stop.clone();
            modules.spawn("edgeapi", async move {
                api.run(api_stop).await;
                Ok(())
            });
        }
        if let Some(proxy) = service_proxy {
            let proxy_stop = stop.clone();
            modules.spawn("serviceproxy", async move {
                proxy.run(proxy_stop).await;
                Ok(())
            });
        }
        // A task's restart stops every module; `main` then restarts edgecore in place.
        {
            let (restart, all) = (self.restart.clone(), stop.clone());
            modules.spawn("restart", async move {
                tokio::select! {
                    () = restart.cancelled() => all.cancel(),
                    () = all.cancelled() => {}
                }
                Ok(())
            });
        }
        // Fleet tasks (operations.kubeedge.io jobs): pulls through its own Docker connection.
        {
            let (store, hub, events) = (self.store.clone(), tasks_hub, tasks_events);
            let env = tasks::TaskEnv {
                data_dir: self.config.data_dir.clone(),
                config: self
                    .config_file
                    .clone()
                    .map(|path| tasks::config_update::ConfigFile {
                        path,
                        validate: std::sync::Arc::new(|text: &str| {
                            Config::from_yaml(text, "the new configuration")
                                .map(|_| ())
                                .map_err(|e| verge_runtime::ErrorChain(&e).to_string())
                        }),
                    }),
                restart: self.restart.clone(),
                binary: self.binary.clone(),
            };
            let (config, tasks_stop) = (Arc::clone(&self.config), stop.clone());
            modules.spawn("taskmanager", async move {
                let endpoint = config.edged.container_runtime_endpoint.as_deref();
                let node = &config.node_name;
                let connect = || container_runtime::DockerRuntime::connect(endpoint, node);
                let cancelled = tasks_stop.cancelled();
                let Some(runtime) =
                    container_runtime::connect_retrying("docker", cancelled, connect).await
                else {
                    return Ok(());
                };
                let tasks = tasks::TaskManager::new(store, hub, events, runtime, env);
                Ok(tasks.run(tasks_stop).await?)
            });
        }
        if let Some((device_twin, twins)) = device_twin {
            let twin_stop = stop.clone();
            modules.spawn("devicetwin", async move {
                Ok(device_twin.run(twin_stop).await?)
            });
            // The eventbus serves KubeEdge's MQTT device topics from devicetwin and publishes
            // every twin change (architecture.md §8).
            let service = Arc::new(devicetwin::bus::TwinBus::new(twins.clone()));
            let (bus, bus_handle) =
                eventbus::EventBus::new(&self.config.node_name, &self.config.event_bus, service)?;
            if let Some(bus) = bus {
                let bus_stop = stop.clone();
                modules.spawn("eventbus", async move { Ok(bus.run(bus_stop).await?) });
                let stop = stop.clone();
                modules.spawn("eventbus-twins", async move {
                    devicetwin::bus::publish_changes(twins, bus_handle, stop).await;
                    Ok(())
                });
            }
        }
        let config = self.config.hub_settings();
        modules.spawn("certificates", async move {
            certificates::renew(config, stop).await;
            Ok(())
        });
        info!(node = %self.config.node_name, cloudhub = %self.config.edge_hub.server, "edgecore running");
        let result = modules.run().await;
        info!("edgecore stopped");
        result.map_err(|failure| {
            let module = failure.module();
            failure
                .into_error()
                .unwrap_or(Error::ModulePanicked { module })
        })
    }
}
