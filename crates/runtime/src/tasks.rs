//! Every task a Verge process starts, tracked so that shutdown waits for it.
//!
//! Production code starts its tasks with [`spawn`], never with a bare `tokio::spawn` (clippy's
//! `disallowed-methods`, in the workspace's `clippy.toml`, forbids `tokio::spawn`,
//! `tokio::task::spawn` and `tokio::task::spawn_local`; a `JoinSet` or a `TaskTracker` that
//! its owner waits for is tracked already). Each task joins one process-wide
//! [`TaskTracker`]; [`serve`](crate::serve) calls [`drain`] once the component stopped, with
//! what is left of the grace period, so the process does not exit under a task that is still
//! finishing (a write, a reply), and names the tasks that outlived the grace period.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

/// The tracker of the process and the names of its running tasks.
static TASKS: LazyLock<Tasks> = LazyLock::new(Tasks::default);

/// Starts `future` on the current Tokio runtime as a task of the process-wide tracker, named
/// `name` (a short, fixed word such as `"tunnel"`: [`drain`] lists the running tasks by
/// name). Returns its [`JoinHandle`]: awaiting it gives the output, or the
/// [`JoinError`](tokio::task::JoinError) of a panic or an abort; dropping it detaches the
/// task, which stays tracked until it ends.
///
/// The task should end on the shutdown token of its component (or when what it serves
/// closes): [`drain`] waits for it at shutdown, for at most the rest of the grace period.
///
/// # Panics
/// Outside a Tokio runtime, like `tokio::spawn`.
pub fn spawn<F>(name: &'static str, future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    TASKS.spawn(name, future)
}

/// Closes the process-wide tracker and waits at most `grace` for every task started with
/// [`spawn`] to end. Returns `true` when none is left; `false` when some still run after
/// `grace` (logged as a warning, with their number and names; they keep running until the
/// runtime is dropped). Tasks started after the call are still tracked and waited for.
///
/// Called from inside a tracked task, it waits for that task too, and so returns `false`.
pub async fn drain(grace: Duration) -> bool {
    TASKS.drain(grace).await
}

/// A tracker and how many of its tasks run under each name.
#[derive(Default)]
struct Tasks {
    tracker: TaskTracker,
    running: Arc<Mutex<BTreeMap<&'static str, usize>>>,
}

impl Tasks {
    fn spawn<F>(&self, name: &'static str, future: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let running = Running::start(name, &self.running);
        // The one place that starts a task of production code: `TaskTracker::spawn` is
        // `tokio::spawn` of the future with the tracker's token.
        self.tracker.spawn(async move {
            let _running = running;
            future.await
        })
    }

    async fn drain(&self, grace: Duration) -> bool {
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok()
        {
            debug!("every tracked task ended");
            return true;
        }
        let left = self.tracker.len();
        warn!(left, tasks = %Names(&self.running), ?grace,
            "tasks still running when the grace period ended");
        false
    }
}

/// Counts a running task under its name from its start until its future is dropped (it
/// ended, panicked or was aborted).
struct Running {
    name: &'static str,
    running: Arc<Mutex<BTreeMap<&'static str, usize>>>,
}

impl Running {
    fn start(name: &'static str, running: &Arc<Mutex<BTreeMap<&'static str, usize>>>) -> Self {
        *running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(name)
            .or_default() += 1;
        Self {
            name,
            running: Arc::clone(running),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = running.get_mut(self.name) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(self.name);
            }
        }
    }
}

/// `tunnel ×2, logs` for a log line.
struct Names<'a>(&'a Mutex<BTreeMap<&'static str, usize>>);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let running = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, (name, count)) in running.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
            if *count > 1 {
                write!(f, " ×{count}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tasks: &Tasks) -> String {
        Names(&tasks.running).to_string()
    }

    #[tokio::test(start_paused = true)]
    async fn drain_waits_for_a_task_that_ends() {
        let tasks = Tasks::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&ended);
        let handle = tasks.spawn("writer", async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            let _ = rx.await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            7
        });
        assert_eq!(names(&tasks), "writer");
        drop(tx);
        let start = tokio::time::Instant::now();
        assert!(tasks.drain(Duration::from_secs(10)).await);
        assert!(ended.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(3),
            "no longer than the task"
        );
        assert_eq!(handle.await.ok(), Some(7));
        assert_eq!(names(&tasks), "");
    }

    #[tokio::test(start_paused = true)]
    async fn drain_gives_up_after_the_grace_period() {
        let tasks = Tasks::default();
        for _ in 0..2 {
            tasks.spawn("tunnel", std::future::pending::<()>());
        }
        tasks.spawn("logs", std::future::pending::<()>());
        tasks.spawn("done", async {});
        let start = tokio::time::Instant::now();
        assert!(!tasks.drain(Duration::from_secs(5)).await);
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(tasks.tracker.len(), 3);
        assert_eq!(names(&tasks), "logs, tunnel ×2");
    }

    #[tokio::test(start_paused = true)]
    async fn an_aborted_task_is_no_longer_running() {
        let tasks = Tasks::default();
        let handle = tasks.spawn("stuck", std::future::pending::<()>());
        handle.abort();
        assert!(tasks.drain(Duration::from_secs(1)).await);
        assert_eq!(names(&tasks), "");
    }

    #[tokio::test]
    async fn the_process_tracker_waits_for_its_tasks() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = spawn("test", async move { rx.await.is_ok() });
        tx.send(()).ok();
        assert!(drain(Duration::from_secs(10)).await);
        assert_eq!(handle.await.ok(), Some(true));
    }
}
