//! The set of cloudhub replicas to attach to: the static `cloudhub` endpoints plus, with
//! `cloudhub_dns`, every address the headless Service resolves to, re-resolved every
//! `cloudhub_resolve_interval`. One [`hub::run`] task per endpoint, each with its own
//! backoff; a replica that leaves the DNS answer is detached.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::Endpoint;
use tracing::{Instrument, debug, info, info_span, warn};

use crate::hub::{self, HubEvent};
use crate::hub_auth::HubAuth;
use crate::{Config, Error, Identity, Result};

/// The attach tasks, by endpoint URI.
pub struct Replicas {
    config: Arc<Config>,
    identity: Identity,
    auth: Arc<HubAuth>,
    events: mpsc::Sender<HubEvent>,
    tracker: TaskTracker,
    shutdown: CancellationToken,
    attached: HashMap<String, CancellationToken>,
}

impl Replicas {
    /// Checks the configured endpoints and `cloudhub_dns`, and starts one attach task per
    /// static endpoint on `tracker`, attaching as `identity`; they report to `events` and
    /// stop at `shutdown`.
    ///
    /// # Errors
    /// [`Error::Endpoint`] for an invalid `cloudhub` URI, [`Error::Discovery`] for a
    /// `cloudhub_dns` that is not `<host>:<port>`.
    pub fn start(
        config: Arc<Config>,
        identity: Identity,
        auth: Arc<HubAuth>,
        events: mpsc::Sender<HubEvent>,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Result<Self> {
        if let Some(dns) = &config.cloudhub_dns {
            parse_dns(dns)?;
        }
        let statics = config
            .endpoints()
            .into_iter()
            .map(|address| Ok((hub::endpoint(&config, &address)?, address)))
            .collect::<Result<Vec<_>>>()?;
        let mut replicas = Self {
            config,
            identity,
            auth,
            events,
            tracker,
            shutdown,
            attached: HashMap::new(),
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

    /// With `cloudhub_dns`, resolves it now and every `cloudhub_resolve_interval` until
    /// shutdown, attaching to new addresses and detaching from vanished ones; without, waits
    /// for shutdown.
    pub async fn run(mut self) {
        let Some(dns) = self.config.cloudhub_dns.clone() else {
            self.shutdown.cancelled().await;
            return;
        };
        let statics: Vec<String> = self.attached.keys().cloned().collect();
        let mut discovered: Vec<String> = Vec::new();
        let mut tick = tokio::time::interval(self.config.cloudhub_resolve_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                _ = tick.tick() => {}
            }
            let addresses = match tokio::net::lookup_host(dns.as_str()).await {
                Ok(found) => addresses(found),
                Err(error) => {
                    warn!(%error, cloudhub_dns = %dns, "cannot resolve cloudhub replicas");
                    continue;
                }
            };
            if addresses.is_empty() {
                warn!(cloudhub_dns = %dns, "no cloudhub replica resolved; keeping the current set");
                continue;
            }
            let vanished = discovered
                .iter()
                .filter(|a| !addresses.contains(a) && !statics.contains(a));
            for gone in vanished {
                if let Some(stop) = self.attached.remove(gone) {
                    info!(cloudhub = %gone, "cloudhub replica left the DNS answer; detaching");
                    stop.cancel();
                }
            }
            for address in &addresses {
                if self.attached.contains_key(address) {
                    continue;
                }
                match hub::endpoint(&self.config, address) {
                    Ok(endpoint) => {
                        info!(cloudhub = %address, "cloudhub replica discovered");
                        // Replicas are verified for the Service's name, not their pod IPs.
                        let host = dns.rsplit_once(':').map(|(h, _)| h.to_owned());
                        self.spawn(address.clone(), endpoint, host);
                    }
                    Err(error) => warn!(error = %error.reason(), "discovered address unusable"),
                }
            }
            discovered = addresses;
            debug!(replicas = self.attached.len(), "cloudhub replicas resolved");
        }
    }
}

/// Checks that `dns` is `<host>:<port>`.
fn parse_dns(dns: &str) -> Result<()> {
    match dns.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(Error::Discovery(dns.to_owned())),
    }
}

/// The endpoint URIs of resolved socket addresses, sorted, without duplicates.
fn addresses(found: impl IntoIterator<Item = SocketAddr>) -> Vec<String> {
    let mut out: Vec<String> = found.into_iter().map(|a| format!("https://{a}")).collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_must_name_a_port() {
        assert!(parse_dns("hubs.verge-system.svc:10001").is_ok());
        for bad in ["hubs", "hubs:", ":10001", "hubs:99999"] {
            assert!(matches!(parse_dns(bad), Err(Error::Discovery(_))), "{bad}");
        }
    }

    #[test]
    fn resolved_addresses_become_endpoints() {
        let found: Vec<SocketAddr> = ["10.0.0.2:10001", "[fd00::1]:10001", "10.0.0.2:10001"]
            .iter()
            .map(|a| a.parse().expect("address"))
            .collect();
        assert_eq!(
            addresses(found),
            ["https://10.0.0.2:10001", "https://[fd00::1]:10001"]
        );
    }

    #[tokio::test]
    async fn invalid_static_endpoint_is_refused() {
        let config = Config {
            cloudhub: vec!["not a uri".into()],
            ..Config::default()
        };
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
        let auth = crate::hub_auth::HubAuth::new(&config.cloudhub_auth, &identity, client);
        let r = Replicas::start(
            Arc::new(config),
            identity,
            auth,
            tx,
            TaskTracker::new(),
            CancellationToken::new(),
        );
        assert!(matches!(r, Err(Error::Endpoint { .. })));
    }
}
