//! The set of cloudhub replicas to attach to: the static `cloudhub` endpoints plus, with
//! `cloudhub_service`, every ready endpoint of that Service's EndpointSlices
//! ([`crate::discovery`]), watched through the API server. One [`hub::run`] task per
//! endpoint, each with its own backoff; a replica that leaves the EndpointSlices (deleted,
//! or not ready) is detached.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::Endpoint;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::discovery::{ServiceRef, ready_endpoints};
use crate::hub::{self, HubEvent};
use crate::hub_auth::HubAuth;
use crate::{Config, Identity, Result};

/// The attach tasks, by endpoint URI.
pub struct Replicas {
    config: Arc<Config>,
    identity: Identity,
    auth: Arc<HubAuth>,
    client: kube::Client,
    service: Option<ServiceRef>,
    events: mpsc::Sender<HubEvent>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    attached: HashMap<String, CancellationToken>,
    statics: Vec<String>,
}

impl Replicas {
    /// Checks the configured endpoints and `cloudhub_service`, and starts one attach task
    /// per static endpoint on `tracker`, attaching as `identity`; they report to `events`
    /// and stop at `shutdown`. `client` watches the EndpointSlices (list and watch on
    /// `endpointslices` in the Service's namespace).
    ///
    /// # Errors
    /// [`crate::Error::Endpoint`] for an invalid `cloudhub` URI, [`crate::Error::Discovery`]
    /// for a `cloudhub_service` that is not `<namespace>/<service>`.
    pub fn start(
        config: Arc<Config>,
        identity: Identity,
        auth: Arc<HubAuth>,
        client: kube::Client,
        events: mpsc::Sender<HubEvent>,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        let service = config
            .cloudhub_service
            .as_deref()
            .map(ServiceRef::parse)
            .transpose()?;
        let statics = config
            .endpoints()
            .into_iter()
            .map(|address| Ok((hub::endpoint(&config, &address)?, address)))
            .collect::<Result<Vec<_>>>()?;
        let mut replicas = Self {
            config,
            identity,
            auth,
            client,
            service,
            events,
            tracker,
            shutdown,
            attached: HashMap::new(),
            statics: statics.iter().map(|(_, a)| a.clone()).collect(),
        };
        let server_name = replicas.config.cloudhub_auth.tls_server_name.clone();
        for (endpoint, address) in statics {
            replicas.spawn(address, endpoint, server_name.clone());
        }
        Ok(replicas)
    }

    fn spawn(&mut self, address: String, endpoint: Endpoint, server_name: Option<String>) {
        let stop = self.shutdown.child_token();
        let span = info_span!("hub", cloudhub = %address);
        let target = hub::Target {
            address: address.clone(),
            endpoint,
            server_name,
            auth: self.auth.clone(),
            identity: self.identity.clone(),
        };
        let task = hub::run(
            target,
            self.config.clone(),
            self.events.clone(),
            stop.clone(),
        );
        self.tracker.spawn(task.instrument(span));
        self.attached.insert(address, stop);
    }

    /// With `cloudhub_service`, watches its EndpointSlices until shutdown, attaching to
    /// new ready endpoints and detaching from vanished ones after every change (a failed
    /// watch is logged and retried with backoff, keeping the current set); without, waits
    /// for shutdown.
    pub async fn run(mut self) {
        let Some(service) = self.service.clone() else {
            self.shutdown.cancelled().await;
            return;
        };
        let api: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &service.namespace);
        let writer = reflector::store::Writer::default();
        let store = writer.as_reader();
        let config = watch::Config::default().labels(&service.slice_selector());
        let stream = reflector::reflector(writer, watcher::watcher(api, config).default_backoff());
        let mut stream = std::pin::pin!(stream);
        info!(service = %format!("{}/{}", service.namespace, service.name),
            port = %self.config.cloudhub_port, "watching cloudhub EndpointSlices");
        loop {
            let item = tokio::select! {
                () = self.shutdown.cancelled() => return,
                item = stream.next() => item,
            };
            match item {
                None => return,
                Some(Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone)) => {
                    self.reconcile(&service, &store);
                }
                Some(Ok(Event::Init | Event::InitApply(_))) => {}
                Some(Err(error)) => {
                    warn!(%error, "EndpointSlice watch failed; keeping the current replicas");
                }
            }
        }
    }

    /// Attaches to every ready endpoint in `store` not attached yet and detaches from the
    /// discovered ones no longer there (static endpoints stay).
    fn reconcile(&mut self, service: &ServiceRef, store: &Store<EndpointSlice>) {
        let slices = store.state();
        let wanted = ready_endpoints(slices.iter().map(|s| &**s), &self.config.cloudhub_port);
        let vanished: Vec<String> = self
            .attached
            .keys()
            .filter(|a| !wanted.contains(a) && !self.statics.contains(a))
            .cloned()
            .collect();
        for gone in vanished {
            if let Some(stop) = self.attached.remove(&gone) {
                info!(cloudhub = %gone, "cloudhub replica left the EndpointSlices; detaching");
                stop.cancel();
            }
        }
        let server_name = self
            .config
            .cloudhub_auth
            .tls_server_name
            .clone()
            .unwrap_or_else(|| service.server_name());
        for address in wanted {
            if self.attached.contains_key(&address) {
                continue;
            }
            match hub::endpoint(&self.config, &address) {
                Ok(endpoint) => {
                    info!(cloudhub = %address, "cloudhub replica discovered");
                    self.spawn(address, endpoint, Some(server_name.clone()));
                }
                Err(error) => warn!(error = %error.reason(), "discovered address unusable"),
            }
        }
        debug!(
            replicas = self.attached.len(),
            "cloudhub replicas reconciled"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn start(config: Config) -> Result<Replicas> {
        let (tx, _rx) = mpsc::channel(1);
        let client = kube::Client::try_from(kube::Config::new(
            "https://127.0.0.1:1".parse().expect("uri"),
        ))
        .expect("client");
        let identity = Identity {
            name: "test",
            module: verge_core::Module::EdgeController,
            group: verge_core::Group::Resource,
        };
        let auth = crate::hub_auth::HubAuth::new(&config.cloudhub_auth, &identity, client.clone());
        Replicas::start(
            Arc::new(config),
            identity,
            auth,
            client,
            tx,
            TaskTracker::new(),
            CancellationToken::new(),
        )
    }

    #[tokio::test]
    async fn invalid_static_endpoint_is_refused() {
        let config = Config {
            cloudhub: vec!["not a uri".into()],
            ..Config::default()
        };
        assert!(matches!(start(config), Err(Error::Endpoint { .. })));
    }

    #[tokio::test]
    async fn invalid_service_is_refused() {
        let config = Config {
            cloudhub_service: Some("cloudhub-controllers".into()),
            ..Config::default()
        };
        assert!(matches!(start(config), Err(Error::Discovery(_))));
    }
}
