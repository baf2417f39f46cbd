//! Byte budgets of upstream messages (issue 31, weakness 5): queues bounded by message count
//! alone let one node fill cloudhub's memory with large reports (4,096 frames of 4 MiB per
//! controller queue). Each upstream message takes its size from two budgets before it is
//! queued for a controller: its node's (`nodeUpstreamBytes`, so one node holds only a share)
//! and the controller's (`controllerQueueBytes`, the bound on what the queue holds); both are
//! given back when the message is written to the controller's stream ([`Held`] is dropped).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A budget of bytes; cheap to clone (clones share it).
#[derive(Debug, Clone)]
pub(crate) struct ByteBudget {
    bytes: Arc<Semaphore>,
    capacity: u32,
}

impl ByteBudget {
    /// A budget of `capacity` bytes (at most 4 GiB).
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = u32::try_from(capacity).unwrap_or(u32::MAX).max(1);
        Self {
            bytes: Arc::new(Semaphore::new(capacity as usize)),
            capacity,
        }
    }

    /// What a message of `size` bytes costs: its size, at most the whole budget (so that any
    /// message fits once the budget is free).
    fn cost(&self, size: usize) -> u32 {
        u32::try_from(size)
            .unwrap_or(u32::MAX)
            .clamp(1, self.capacity)
    }

    /// `size` bytes of the budget if they are free now.
    pub(crate) fn try_take(&self, size: usize) -> Option<OwnedSemaphorePermit> {
        self.bytes
            .clone()
            .try_acquire_many_owned(self.cost(size))
            .ok()
    }

    /// `size` bytes of the budget, once they are free.
    pub(crate) async fn take(&self, size: usize) -> OwnedSemaphorePermit {
        match self.bytes.clone().acquire_many_owned(self.cost(size)).await {
            Ok(permit) => permit,
            // The semaphore is never closed.
            Err(_) => unreachable!("byte budgets are never closed"),
        }
    }

    /// Bytes taken now.
    pub(crate) fn used(&self) -> usize {
        self.capacity as usize - self.bytes.available_permits()
    }
}

/// The bytes a queued upstream message holds of its node's and its controller's budgets,
/// given back when it is dropped (when the message is written to the controller's stream).
#[derive(Debug)]
pub(crate) struct Held {
    _node: OwnedSemaphorePermit,
    _controller: OwnedSemaphorePermit,
}

impl Held {
    /// Holds `node` and `controller` bytes together.
    pub(crate) fn new(node: OwnedSemaphorePermit, controller: OwnedSemaphorePermit) -> Self {
        Self {
            _node: node,
            _controller: controller,
        }
    }
}

/// The size an upstream message is counted with: its body, path and ids, plus the framing.
pub(crate) fn message_size(envelope: &verge_core::Envelope) -> usize {
    envelope.body.len() + envelope.path().len() + envelope.id.as_str().len() + 128
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_come_back_when_the_holder_is_dropped() {
        let node = ByteBudget::new(100);
        let controller = ByteBudget::new(150);
        let a = Held::new(
            node.try_take(60).expect("free"),
            controller.try_take(60).expect("free"),
        );
        assert!(node.try_take(60).is_none(), "the node's budget is used up");
        assert_eq!((node.used(), controller.used()), (60, 60));
        // A message larger than the whole budget costs the whole budget.
        assert!(controller.try_take(1_000).is_none());
        drop(a);
        assert_eq!((node.used(), controller.used()), (0, 0));
        let whole = controller.take(1_000).await;
        assert_eq!(controller.used(), 150);
        drop(whole);
    }
}
