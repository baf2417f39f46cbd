//! What the bench knows of the fleet: the newest resync of each hollow edge and when each
//! probe pod reached its node (from the hollow edges' [`Event`]s), and how many bench Nodes
//! the API server has Ready.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use tokio::sync::mpsc;

use super::edge::Event;

/// The newest resync of each node and its replica, from the hollow edges' events; probe
/// arrivals by pod name.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    pub(super) last: HashMap<usize, (usize, Instant)>,
    pub(super) probes: HashMap<String, Instant>,
}

impl Tracker {
    pub(super) fn take(&mut self, event: Event) {
        match event {
            Event::Resynced { index, replica, at } => {
                self.last.insert(index, (replica, at));
            }
            Event::Probe(name, at) => {
                self.probes.insert(name, at);
            }
        }
    }

    /// Takes events until `done` holds, at most `limit`.
    pub(super) async fn wait(
        &mut self,
        events: &mut mpsc::UnboundedReceiver<Event>,
        done: impl Fn(&Self) -> bool,
        limit: Duration,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + limit;
        while !done(self) {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(event)) => self.take(event),
                Ok(None) => bail!("the hollow edges are gone"),
                Err(_) => bail!("not within {limit:?}"),
            }
        }
        while let Ok(event) = events.try_recv() {
            self.take(event);
        }
        Ok(())
    }
}

/// How many bench Nodes are Ready.
pub(super) async fn ready_count(nodes: &Api<Node>) -> anyhow::Result<usize> {
    let listed = nodes
        .list(&ListParams::default().labels("verge.io/bench=fleet"))
        .await?;
    Ok(listed
        .items
        .iter()
        .filter(|n| verge_testkit::wait::ready_status(n).as_deref() == Some("True"))
        .count())
}

/// Waits until `size` bench Nodes are Ready; returns how many are.
pub(super) async fn wait_all_ready(
    nodes: &Api<Node>,
    size: usize,
    limit: Duration,
) -> anyhow::Result<usize> {
    let deadline = Instant::now() + limit;
    loop {
        let ready = ready_count(nodes).await?;
        if ready >= size {
            return Ok(ready);
        }
        if Instant::now() > deadline {
            bail!("{ready} of {size} Nodes Ready after {limit:?}");
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}
