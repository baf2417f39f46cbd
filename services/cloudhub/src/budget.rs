//! Byte budgets of upstream messages (issue 31, weakness 5): queues bounded by message count
//! alone let one node fill cloudhub's memory with large reports (4,096 frames of 4 MiB per
//! controller queue). Each upstream message takes its size from two budgets before it is
//! queued for a controller: its node's (`nodeUpstreamBytes`, so one node holds only a share)
//! and the controller's (`controllerQueueBytes`, the bound on what the queue holds); both are
//! given back when the message is written to the controller's stream ([`Held`] is dropped).

use tokio::sync::OwnedSemaphorePermit;

pub(crate) use verge_runtime::budget::ByteBudget;

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
