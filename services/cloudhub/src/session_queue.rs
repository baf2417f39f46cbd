//! The glue between an edge session and its [`DeliveryQueue`]: controllers and the session
//! push into the [`SessionQueue`], the edge's answers clear it, and one task per session
//! ([`deliver`]) moves messages onto the gRPC stream, resends overdue ones on `tokio::time`
//! and reports the ones it gave up on to the controller that sent them.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, mpsc};
use tokio::time::Instant;
use tracing::{debug, warn};
use verge_core::Envelope;
use verge_proto::hub::{DeliveryError, DeliveryFailure};

use crate::delivery::{DeliveryQueue, Limits, Origin, QueueFull, Unacked};
use crate::metrics::{self, Metrics};
use crate::sessions::ToController;
use crate::stream::StreamEnd;
use crate::{Config, Shared};

/// Capacity, in messages, of the channel between [`deliver`] and the gRPC response stream.
/// Small, so that a message's ack timer starts about when it is written to the wire.
pub(crate) const WIRE_BUFFER: usize = 16;

/// The downstream queue of one edge session, shared by the controllers that push into it, the
/// session that clears answered messages, and the [`deliver`] task.
#[derive(Debug)]
pub(crate) struct SessionQueue {
    queue: Mutex<DeliveryQueue>,
    wake: Notify,
}

impl SessionQueue {
    /// An empty queue bounded by `session_queue_len`, `max_inflight`, `ack_timeout` and
    /// `max_retries` of `config`.
    pub(crate) fn new(config: &Config) -> Arc<Self> {
        let limits = Limits {
            capacity: config.session_queue_len,
            max_inflight: config.max_inflight,
            ack_timeout: config.ack_timeout,
            max_retries: config.max_retries,
        };
        Arc::new(Self {
            queue: Mutex::new(DeliveryQueue::new(limits)),
            wake: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, DeliveryQueue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues an edge-side `message` from `origin` without waiting (see
    /// [`DeliveryQueue::push`]).
    ///
    /// # Errors
    /// [`QueueFull`] with the number of messages waiting; nothing was queued.
    pub(crate) fn push(&self, message: Envelope, origin: Origin) -> Result<(), QueueFull> {
        self.lock().push(message, origin)?;
        self.wake.notify_one();
        Ok(())
    }

    /// The edge answered `parent_id`: clears it if it was in flight (see
    /// [`DeliveryQueue::ack`]). Returns whether it was.
    pub(crate) fn answered(&self, parent_id: &str) -> bool {
        let cleared = self.lock().ack(parent_id);
        if cleared {
            self.wake.notify_one();
        }
        cleared
    }

    /// At `now`: handles overdue messages, then moves what may be sent into `tx` while it has
    /// room. Returns the messages given up, whether `tx` was full (or closed), and the next
    /// deadline; records the queue's depth and resends in `metrics`.
    fn pump(
        &self,
        tx: &mpsc::Sender<Box<Envelope>>,
        now: Instant,
        node: &str,
        metrics: &Metrics,
    ) -> (Vec<Unacked>, bool, Option<Instant>) {
        let now = now.into_std();
        let mut queue = self.lock();
        let unacked = queue.expired(now);
        let mut blocked = false;
        loop {
            let Ok(permit) = tx.try_reserve() else {
                blocked = true;
                break;
            };
            let Some(message) = queue.next_to_send(now) else {
                break;
            };
            permit.send(Box::new(message));
        }
        queue.release_idle_tables();
        let deadline = queue.next_deadline().map(Instant::from_std);
        metrics.retries(queue.take_resends());
        metrics.set_queue_depth(node, queue.waiting() + queue.inflight());
        (unacked, blocked, deadline)
    }
}

/// Drives `queue` of the session of `node` until `end` finishes: sends into `tx` (the
/// session's response stream, which writes the wire frames) as room allows, wakes for new messages, answers and deadlines,
/// and reports messages dropped unacknowledged. What is still queued when the session ends is
/// dropped: the node resyncs by inventory when it reconnects; a third-party group's messages
/// are reported to their controllers (`DELIVERY_FAILURE_SESSION_ENDED`) to be sent again.
pub(crate) async fn deliver(
    shared: Arc<Shared>,
    node: String,
    queue: Arc<SessionQueue>,
    tx: mpsc::Sender<Box<Envelope>>,
    end: Arc<StreamEnd>,
) {
    loop {
        let now = Instant::now();
        let (unacked, blocked, deadline) = queue.pump(&tx, now, &node, metrics::global());
        for dropped in unacked {
            report(&shared, &node, dropped);
        }
        // Nothing in flight: only a push or an answer can make work.
        let wake_at = deadline.unwrap_or(now + Duration::from_secs(3600));
        tokio::select! {
            () = end.ended() => break,
            () = queue.wake.notified() => {}
            () = tokio::time::sleep_until(wake_at) => {}
            room = tx.reserve(), if blocked => if room.is_err() { break },
        }
    }
    metrics::global().forget_node(&node);
    let app_messages = {
        let queue = queue.lock();
        debug!(
            waiting = queue.waiting(),
            inflight = queue.inflight(),
            "session over; its queue is dropped (the node resyncs by inventory)"
        );
        queue.app_messages()
    };
    for (message_id, origin) in app_messages {
        metrics::global().delivery_failure("session_ended");
        let Some(controller) = origin else { continue };
        let error = DeliveryError {
            node: node.clone(),
            message_id,
            reason: "the node's session ended before the edge acknowledged the message; send it again when the node connects".to_owned(),
            failure: DeliveryFailure::SessionEnded.into(),
        };
        shared
            .registry
            .send_to_controller(controller, ToController::DeliveryError(error));
    }
}

/// Tells the controller that queued `dropped` that the edge never acknowledged it.
fn report(shared: &Shared, node: &str, dropped: Unacked) {
    let Unacked {
        message_id,
        origin,
        attempts,
    } = dropped;
    warn!(%message_id, attempts, "downstream message not acknowledged; dropped");
    metrics::global().delivery_failure("unacknowledged");
    let Some(controller) = origin else {
        return;
    };
    let error = DeliveryError {
        node: node.to_owned(),
        message_id,
        reason: format!("not acknowledged after {attempts} attempts"),
        failure: DeliveryFailure::NotAcknowledged.into(),
    };
    shared
        .registry
        .send_to_controller(controller, ToController::DeliveryError(error));
}

#[cfg(test)]
mod tests {
    use tokio_util::sync::CancellationToken;
    use tokio_util::task::TaskTracker;
    use verge_core::{Group, Operation};
    use verge_proto::Message;

    use super::*;
    use crate::sessions::Registry;

    fn pod(id: &str) -> Envelope {
        Envelope::try_from(Message::build(
            id,
            "edgecontroller",
            Group::Resource,
            Operation::Update,
            "default/pod/web",
            Vec::new(),
        ))
        .expect("valid")
    }

    fn id(message: Option<Box<Envelope>>) -> String {
        match message {
            Some(m) => m.id.to_string(),
            None => panic!("expected a message"),
        }
    }

    /// The task resends on `tokio::time` until answered, then sends the next version.
    #[tokio::test(start_paused = true)]
    async fn resends_on_tokio_time_until_answered() {
        let config = Config {
            ack_timeout: Duration::from_secs(10),
            ..Config::default()
        };
        let shared = Arc::new(Shared {
            config: config.clone(),
            trust: crate::trust::Trust::for_tests(),
            registry: Registry::new("test".into()),
            tracker: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            streams: None,
        });
        let queue = SessionQueue::new(&config);
        let (tx, mut rx) = mpsc::channel(WIRE_BUFFER);
        let end = StreamEnd::new();
        let task = tokio::spawn(deliver(shared, "n".into(), queue.clone(), tx, end.clone()));
        queue.push(pod("v1"), None).expect("room");
        let start = Instant::now();
        assert_eq!(id(rx.recv().await), "v1");
        queue.push(pod("v2"), None).expect("room");
        assert_eq!(id(rx.recv().await), "v1", "resent, same id");
        assert!(start.elapsed() >= config.ack_timeout);
        assert!(queue.answered("v1"));
        assert_eq!(id(rx.recv().await), "v2");
        end.finish(None);
        task.await.expect("joins");
        assert!(rx.recv().await.is_none(), "the task dropped its sender");
    }
}
