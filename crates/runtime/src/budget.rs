//! Byte budgets: bounds on the bytes a queue holds, for every queue a peer feeds (issue 31,
//! weakness 5). A count bound alone lets a peer fill memory with large messages (4,096 frames
//! of 4 MiB); each queued message takes its size from one or more [`ByteBudget`]s and gives it
//! back when dropped (the permit travels with the message).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A budget of bytes (at most 4 GiB); cheap to clone (clones share it).
#[derive(Debug, Clone)]
pub struct ByteBudget {
    bytes: Arc<Semaphore>,
    capacity: u32,
}

impl ByteBudget {
    /// A budget of `capacity` bytes (clamped to 1 B ..= 4 GiB).
    pub fn new(capacity: usize) -> Self {
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

    /// `size` bytes of the budget if they are free now, given back when the permit drops.
    pub fn try_take(&self, size: usize) -> Option<OwnedSemaphorePermit> {
        self.bytes
            .clone()
            .try_acquire_many_owned(self.cost(size))
            .ok()
    }

    /// `size` bytes of the budget, once they are free.
    pub async fn take(&self, size: usize) -> OwnedSemaphorePermit {
        match self.bytes.clone().acquire_many_owned(self.cost(size)).await {
            Ok(permit) => permit,
            // The semaphore is never closed.
            Err(_) => unreachable!("byte budgets are never closed"),
        }
    }

    /// Bytes taken now.
    pub fn used(&self) -> usize {
        self.capacity as usize - self.bytes.available_permits()
    }

    /// The budget's size in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bytes_come_back_when_the_permit_drops() {
        let budget = ByteBudget::new(150);
        let a = budget.try_take(60).expect("free");
        let b = budget.try_take(60).expect("free");
        assert!(budget.try_take(60).is_none(), "used up");
        assert_eq!(budget.used(), 120);
        // A message larger than the whole budget costs the whole budget.
        assert!(budget.try_take(1_000).is_none());
        drop((a, b));
        assert_eq!(budget.used(), 0);
        let whole = budget.take(1_000).await;
        assert_eq!(budget.used(), 150);
        drop(whole);
    }
}
