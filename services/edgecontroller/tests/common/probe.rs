//! The hub stream as the downstream tests see it: answers and downstream messages apart.

use std::collections::VecDeque;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use verge_core::Operation;
use verge_proto::hub::{NodeSession, Routed, controller_frame, hub_frame};
use verge_proto::{Inventory, InventoryEntry, Message, MessageExt};

use super::Attach;

/// How long a step waits for an expected downstream message.
pub const WAIT: Duration = Duration::from_secs(30);

/// An inventory entry for an object's metadata.
pub fn entry(kind: &str, ns: &str, name: &str, meta: &kube::api::ObjectMeta) -> InventoryEntry {
    InventoryEntry {
        r#type: kind.into(),
        namespace: ns.into(),
        name: name.into(),
        uid: meta.uid.clone().unwrap_or_default(),
        resource_version: meta.resource_version.clone().unwrap_or_default(),
    }
}

pub async fn connect(h: &Probe<'_>, node: &str, inventory: Inventory) -> anyhow::Result<()> {
    h.h.send(hub_frame::Frame::Session(NodeSession {
        node: node.into(),
        connected: true,
        inventory: Some(inventory),
        cloudhub: "fake".into(),
    }))
    .await
}

pub async fn disconnect(h: &Probe<'_>, node: &str) -> anyhow::Result<()> {
    h.h.send(hub_frame::Frame::Session(NodeSession {
        node: node.into(),
        connected: false,
        inventory: None,
        cloudhub: "fake".into(),
    }))
    .await
}

/// The hub stream seen by the test, with downstream messages that arrived while the test
/// waited for an answer.
pub struct Probe<'a> {
    /// The stream.
    pub h: &'a mut Attach,
    /// Downstream messages received while waiting for an answer.
    pub pending: VecDeque<Message>,
    /// The Services and EndpointSlices [`next_own`] acked and skipped, by resource path:
    /// the inventory entries of what the node holds of them.
    pub shared: std::collections::BTreeMap<String, InventoryEntry>,
    /// How many such updates [`next_own`] skipped so far.
    pub shared_updates: usize,
}

impl<'a> Probe<'a> {
    /// A probe of `h` with nothing received yet.
    pub fn new(h: &'a mut Attach) -> Self {
        Self {
            h,
            pending: VecDeque::new(),
            shared: std::collections::BTreeMap::new(),
            shared_updates: 0,
        }
    }
}

/// Whether `m` carries a Service or an EndpointSlice, which every node gets (the shared
/// control plane's Services come and go with other tests).
pub fn is_shared(m: &Message) -> bool {
    let resource = m.resource();
    resource.contains("/service/") || resource.contains("/endpointslice/")
}

/// [`next_downstream`], except that Services and EndpointSlices are acked as the edge does,
/// remembered in [`Probe::shared`] and counted in [`Probe::shared_updates`], not returned.
pub async fn next_own(h: &mut Probe<'_>, wait: Duration) -> anyhow::Result<Option<Message>> {
    loop {
        let Some(m) = next_downstream(h, wait).await? else {
            return Ok(None);
        };
        if !is_shared(&m) {
            return Ok(Some(m));
        }
        let path = m.resource().to_owned();
        let node = path.split('/').nth(1).unwrap_or_default().to_owned();
        if m.operation()? == Operation::Delete {
            h.shared.remove(&path);
        } else {
            h.shared_updates += 1;
            let header = m.header.clone().unwrap_or_default();
            let parts: Vec<&str> = path.splitn(5, '/').collect();
            if let [_, _, ns, kind, name] = parts.as_slice() {
                h.shared.insert(
                    path.clone(),
                    InventoryEntry {
                        r#type: (*kind).into(),
                        namespace: (*ns).into(),
                        name: (*name).into(),
                        uid: header.uid,
                        resource_version: header.resource_version,
                    },
                );
            }
        }
        ack(h, &node, &m).await?;
    }
}

/// The next downstream (non-answer) message within `wait`, or `None`.
pub async fn next_downstream(h: &mut Probe<'_>, wait: Duration) -> anyhow::Result<Option<Message>> {
    if let Some(m) = h.pending.pop_front() {
        return Ok(Some(m));
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let frame = tokio::time::timeout_at(deadline, h.h.from_controller.message()).await;
        let Ok(frame) = frame else { return Ok(None) };
        let frame = frame?.context("controller stream ended")?;
        match frame.frame {
            Some(controller_frame::Frame::Message(Routed {
                message: Some(m), ..
            })) if m.parent_id().is_empty() => {
                return Ok(Some(m));
            }
            other => tracing::debug!(?other, "skipped frame"),
        }
    }
}

/// Discards downstream messages until none came for `quiet`; returns how many there were.
pub async fn drain(h: &mut Probe<'_>, quiet: Duration) -> anyhow::Result<usize> {
    let mut n = 0;
    while let Some(m) = next_downstream(h, quiet).await? {
        tracing::debug!(operation = ?m.operation(), resource = %m.resource(), "drained");
        n += 1;
    }
    Ok(n)
}

/// Sends `message` from `node`; returns the answer, skipping downstream messages meanwhile.
pub async fn ask(h: &mut Probe<'_>, node: &str, message: Message) -> anyhow::Result<Message> {
    let id = message.id().to_owned();
    h.h.send(hub_frame::Frame::Message(Routed {
        node: node.into(),
        message: Some(message),
    }))
    .await?;
    loop {
        match h.h.next().await? {
            controller_frame::Frame::Message(Routed {
                message: Some(m), ..
            }) if m.parent_id() == id => {
                return Ok(m);
            }
            controller_frame::Frame::Message(Routed {
                message: Some(m), ..
            }) if m.parent_id().is_empty() => h.pending.push_back(m),
            other => tracing::debug!(?other, "skipped frame while waiting for an answer"),
        }
    }
}

/// Waits for `delete <resource>` with header uid `uid`, skipping other downstream messages.
pub async fn wait_for_delete(h: &mut Probe<'_>, resource: &str, uid: &str) -> anyhow::Result<()> {
    loop {
        let m = next_downstream(h, WAIT)
            .await?
            .with_context(|| format!("no delete of {resource}"))?;
        if m.operation()? == Operation::Delete && m.resource() == resource {
            ensure!(m.header.as_ref().is_some_and(|h| h.uid == uid), "{m:?}");
            return Ok(());
        }
    }
}

/// Waits until the controller-manager created the namespace's `default` ServiceAccount.
pub async fn wait_for_service_account(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    for _ in 0..120 {
        if accounts.get_opt("default").await?.is_some() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("ServiceAccount {ns}/default was not created")
}

/// Acks downstream message `m` as the edge does after its commit.
pub async fn ack(h: &Probe<'_>, node: &str, m: &Message) -> anyhow::Result<()> {
    let ack = super::msg(
        Operation::Ack,
        m.resource().to_owned(),
        serde_json::Value::Null,
    );
    h.h.send(hub_frame::Frame::Message(Routed {
        node: node.into(),
        message: Some(Message {
            header: ack.header.map(|mut header| {
                header.parent_id = m.id().to_owned();
                header
            }),
            ..ack
        }),
    }))
    .await
}
