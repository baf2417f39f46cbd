//! Supervising the long-lived modules of one component.

use std::collections::HashMap;
use std::error::Error;
use std::future::Future;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::ErrorChain;

/// Why [`Modules::run`] ended with an error: the first module that failed, or panicked.
#[derive(Debug)]
pub enum ModuleError<E> {
    /// The module returned this error.
    Failed {
        /// The module's name.
        module: &'static str,
        /// Its error.
        error: E,
    },
    /// The module panicked (the panic message was printed by the panic hook).
    Panicked {
        /// The module's name.
        module: &'static str,
    },
}

impl<E> ModuleError<E> {
    /// The name of the module that failed.
    pub fn module(&self) -> &'static str {
        match self {
            Self::Failed { module, .. } | Self::Panicked { module } => module,
        }
    }

    /// The module's own error; `None` for a panic.
    pub fn into_error(self) -> Option<E> {
        match self {
            Self::Failed { error, .. } => Some(error),
            Self::Panicked { .. } => None,
        }
    }
}

/// The named modules of one component (edgecore: edgehub, metamanager, edged, node), each
/// a future that runs until the shared stop token is cancelled. The first module that
/// returns an error or panics cancels the token, so the others drain and stop; a module
/// that returns `Ok` early is logged and the others keep running.
///
/// Replaces a shared `Mutex<Option<Error>>` slot: the first failure is simply the first
/// [`JoinSet::join_next`] result that is not `Ok`.
pub struct Modules<E> {
    set: JoinSet<(&'static str, Result<(), E>)>,
    /// Module names by task id, to name a module that panicked.
    names: HashMap<tokio::task::Id, &'static str>,
    stop: CancellationToken,
}

impl<E: Send + 'static> Modules<E> {
    /// No modules yet; `stop` is cancelled on the first failure (pass a child of the
    /// process's shutdown token).
    pub fn new(stop: CancellationToken) -> Self {
        Self {
            set: JoinSet::new(),
            names: HashMap::new(),
            stop,
        }
    }

    /// The token every module should stop on.
    pub fn stop_token(&self) -> &CancellationToken {
        &self.stop
    }

    /// Starts `module` named `name` on the current runtime.
    pub fn spawn(
        &mut self,
        name: &'static str,
        module: impl Future<Output = Result<(), E>> + Send + 'static,
    ) {
        let handle = self.set.spawn(async move { (name, module.await) });
        self.names.insert(handle.id(), name);
    }

    /// Waits until every module stopped. Returns the first failure (later ones are logged),
    /// or `Ok` when all stopped without one.
    ///
    /// # Errors
    /// [`ModuleError`] naming the first module that failed or panicked.
    pub async fn run(mut self) -> Result<(), ModuleError<E>>
    where
        E: Error + 'static,
    {
        let mut first = None;
        while let Some(joined) = self.set.join_next().await {
            let failure = match joined {
                Ok((module, Ok(()))) => {
                    if !self.stop.is_cancelled() {
                        info!(module, "module finished");
                    }
                    continue;
                }
                Ok((module, Err(error))) => {
                    error!(module, error = %ErrorChain(&error), "module failed; stopping the others");
                    ModuleError::Failed { module, error }
                }
                Err(join) => {
                    let module = self.names.get(&join.id()).copied().unwrap_or("unknown");
                    error!(module, error = %join, "module panicked; stopping the others");
                    ModuleError::Panicked { module }
                }
            };
            self.stop.cancel();
            first.get_or_insert(failure);
        }
        first.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom;

    #[tokio::test]
    async fn first_failure_stops_the_others() {
        let stop = CancellationToken::new();
        let mut modules = Modules::new(stop.clone());
        let waiter = stop.clone();
        modules.spawn("patient", async move {
            waiter.cancelled().await;
            Ok::<(), Boom>(())
        });
        modules.spawn("failing", async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Err(Boom)
        });
        let error = modules.run().await.expect_err("failure reported");
        assert_eq!(error.module(), "failing");
        assert!(stop.is_cancelled());
    }

    #[tokio::test]
    async fn all_ok_after_stop() {
        let stop = CancellationToken::new();
        let mut modules = Modules::<Boom>::new(stop.clone());
        for name in ["a", "b"] {
            let s = stop.clone();
            modules.spawn(name, async move {
                s.cancelled().await;
                Ok(())
            });
        }
        stop.cancel();
        assert!(modules.run().await.is_ok());
    }
}
