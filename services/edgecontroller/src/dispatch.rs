//! Routing of hub frames: session events to [`Sessions`] and to the downstream task, upstream
//! messages to one worker task per node, the edge's answers to downstream messages and
//! delivery errors to the downstream task.
//!
//! Each node has a bounded queue (`node_queue`) drained by its own task, so messages of one
//! node are applied in order while a slow API call for one node never delays another. A full
//! queue is answered `error` at once (back-pressure; the edge keeps the report in its outbox
//! and retries). A node's worker ends when its session ends and its queue is drained.

use std::collections::HashMap;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, info, info_span, warn};
use verge_core::Operation;
use verge_proto::hub::{
    ControllerFrame, HubFrame, NodeSession, Routed, controller_frame, hub_frame,
};
use verge_proto::{Message, MessageExt};

use crate::downstream::Input;
use crate::sessions::{Change, Sessions};
use crate::upstream::Context;
use crate::{Error, upstream};

/// Wraps `message` for `node` as a `ControllerFrame`.
pub fn routed_frame(node: &str, message: Message) -> ControllerFrame {
    ControllerFrame {
        frame: Some(controller_frame::Frame::Message(Routed {
            node: node.to_owned(),
            message: Some(message),
        })),
    }
}

/// Owns the per-node workers and the session map; driven by the hub loop.
pub struct Dispatcher {
    context: Context,
    downstream: mpsc::UnboundedSender<Input>,
    outbound: mpsc::Sender<ControllerFrame>,
    node_queue: usize,
    workers: HashMap<String, mpsc::Sender<Message>>,
    sessions: Sessions,
    tracker: TaskTracker,
    shutdown: CancellationToken,
}

impl Dispatcher {
    /// A dispatcher whose workers apply messages with `context`, send answers to `outbound`,
    /// run on `tracker` and stop at `shutdown`; session changes, the edge's answers and
    /// delivery errors go to `downstream`.
    pub fn new(
        context: Context,
        downstream: mpsc::UnboundedSender<Input>,
        outbound: mpsc::Sender<ControllerFrame>,
        node_queue: usize,
        tracker: TaskTracker,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            context,
            downstream,
            outbound,
            node_queue: node_queue.max(1),
            workers: HashMap::new(),
            sessions: Sessions::default(),
            tracker,
            shutdown,
        }
    }

    /// The connected nodes.
    pub fn sessions(&self) -> &Sessions {
        &self.sessions
    }

    /// A (new) hub stream is attached: cloudhub will announce every connected node again.
    pub fn attached(&mut self) {
        self.sessions.clear();
        self.to_downstream(Input::Reattached);
    }

    fn to_downstream(&self, input: Input) {
        if self.downstream.send(input).is_err() {
            debug!("downstream task ended, input dropped");
        }
    }

    /// Handles one frame from cloudhub. Never waits.
    pub fn on_frame(&mut self, frame: HubFrame) {
        match frame.frame {
            Some(hub_frame::Frame::Message(routed)) => self.on_message(routed),
            Some(hub_frame::Frame::Session(session)) => self.on_session(session),
            Some(hub_frame::Frame::DeliveryError(e)) => {
                warn!(node = %e.node, message_id = %e.message_id, reason = %e.reason,
                    "cloudhub could not deliver a downstream message");
                self.to_downstream(Input::DeliveryError {
                    node: e.node,
                    message_id: e.message_id,
                });
            }
            None => warn!("empty hub frame ignored"),
        }
    }

    fn on_session(&mut self, event: NodeSession) {
        let (node, hub) = (event.node.clone(), event.cloudhub.clone());
        let objects = event.inventory.as_ref().map_or(0, |i| i.entries.len());
        let inventory = event.inventory.clone().unwrap_or_default();
        match self.sessions.apply(event) {
            Change::Connected => {
                self.to_downstream(Input::Connected {
                    node: node.clone(),
                    inventory,
                });
                info!(node = %node, cloudhub = %hub, objects, nodes = self.sessions.len(),
                    "node connected");
            }
            Change::Disconnected => {
                // Dropping the sender lets the worker drain its queue and end.
                self.workers.remove(&node);
                self.to_downstream(Input::Disconnected { node: node.clone() });
                info!(node = %node, cloudhub = %hub, nodes = self.sessions.len(),
                    "node disconnected");
            }
            Change::Stale => debug!(node = %node, cloudhub = %hub, "stale disconnect ignored"),
        }
    }

    fn on_message(&mut self, routed: Routed) {
        let Routed { node, message } = routed;
        let Some(message) = message else {
            warn!(node = %node, "routed frame without message ignored");
            return;
        };
        if let Ok(operation @ (Operation::Ack | Operation::Response | Operation::Error)) =
            message.operation()
        {
            debug!(node = %node, %operation, parent_id = %message.parent_id(),
                "edge answered a downstream message");
            self.to_downstream(Input::Answer {
                node,
                operation,
                parent_id: message.parent_id().to_owned(),
            });
            return;
        }
        let message = match self.worker(&node).try_send(message) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(message)) => message,
            Err(mpsc::error::TrySendError::Closed(message)) => {
                // The worker ended (shutdown in progress); try a fresh one once.
                self.workers.remove(&node);
                match self.worker(&node).try_send(message) {
                    Ok(()) => return,
                    Err(e) => e.into_inner(),
                }
            }
        };
        let error = Error::QueueFull {
            node: node.clone(),
            capacity: self.node_queue,
        };
        warn!(error = %error, id = %message.id(), "upstream message refused");
        let reply = upstream::answer(&message, Operation::Error, error.reason().into_bytes());
        if self.outbound.try_send(routed_frame(&node, reply)).is_err() {
            warn!(node = %node, id = %message.id(), "outbound queue full, error answer dropped");
        }
    }

    /// The queue of `node`'s worker, starting the worker if needed.
    fn worker(&mut self, node: &str) -> &mpsc::Sender<Message> {
        if !self.workers.contains_key(node) {
            let (tx, rx) = mpsc::channel(self.node_queue);
            let task = run_worker(
                self.context.clone(),
                node.to_owned(),
                rx,
                self.outbound.clone(),
                self.shutdown.clone(),
            );
            self.tracker
                .spawn(task.instrument(info_span!("node_worker", node = %node)));
            self.workers.insert(node.to_owned(), tx);
        }
        &self.workers[node]
    }
}

/// Applies `node`'s messages one at a time, in arrival order, and sends each answer.
async fn run_worker(
    context: Context,
    node: String,
    mut queue: mpsc::Receiver<Message>,
    outbound: mpsc::Sender<ControllerFrame>,
    shutdown: CancellationToken,
) {
    loop {
        let message = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            m = queue.recv() => match m { Some(m) => m, None => break },
        };
        let Some(reply) = upstream::handle(&context, &node, &message).await else {
            continue;
        };
        tokio::select! {
            sent = outbound.send(routed_frame(&node, reply)) => if sent.is_err() { break },
            () = shutdown.cancelled() => break,
        }
    }
    debug!("node worker ended");
}
