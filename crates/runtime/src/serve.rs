//! Running a component until a signal, then draining it within a grace period.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::ErrorChain;
#[cfg(feature = "health")]
use crate::health::{Health, HealthEndpoint};

/// The signal that asked the process to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM (what Kubernetes and systemd send first).
    Terminate,
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
        })
    }
}

/// Resolves on the first SIGINT or SIGTERM. When the SIGTERM handler cannot be installed
/// (logged), only SIGINT is awaited; when neither can, it never resolves.
pub async fn signal() -> Signal {
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            error!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
        Signal::Interrupt
    };
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            s = interrupt => s,
            _ = term.recv() => Signal::Terminate,
        },
        Err(error) => {
            warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the process");
            interrupt.await
        }
    }
}

/// How a served component ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It returned `Ok` on its own.
    Completed,
    /// A signal stopped it and it drained within the grace period.
    Drained(Signal),
    /// It returned an error or panicked (printed).
    Failed,
    /// A signal stopped it and it was still draining when the grace period ended.
    GraceExceeded(Signal),
}

impl Outcome {
    /// The process exit code: success for [`Outcome::Completed`] and [`Outcome::Drained`],
    /// failure otherwise.
    pub fn exit_code(self) -> ExitCode {
        match self {
            Self::Completed | Self::Drained(_) => ExitCode::SUCCESS,
            Self::Failed | Self::GraceExceeded(_) => ExitCode::FAILURE,
        }
    }
}

/// Runs `component` (given a fresh shutdown token) on its own task until it ends or the
/// process receives SIGINT/SIGTERM; then cancels the token and waits at most `grace` for
/// it to drain. Errors are printed once, as an [`ErrorChain`], both as a `tracing` event
/// and on stderr prefixed with `service`.
///
/// Then the tasks of the process ([`crate::tasks::spawn`]) get what is left of the grace
/// period to end ([`crate::tasks::drain`]; the whole `grace` when the component ended on its
/// own, after its token was cancelled); tasks still running after it are logged and do not
/// change the outcome.
pub async fn serve<F, E>(
    service: &'static str,
    grace: Duration,
    component: impl FnOnce(CancellationToken) -> F,
) -> Outcome
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Error + Send + Sync + 'static,
{
    let (outcome, deadline) = run(service, grace, component, async {}).await;
    drain_tasks(service, outcome, deadline).await
}

/// [`serve`] with a health endpoint ([`crate::health`]): the endpoint serves from before the
/// component starts until it stopped; `component` gets the [`Health`] handle and says when it
/// is ready ([`Health::set_ready`]). On SIGINT/SIGTERM readiness drops first, then the
/// component is cancelled, so Kubernetes stops routing to the pod while it drains; liveness
/// stays SERVING until the component stopped; then the endpoint stops and the tasks of the
/// process get the rest of the grace period, as with [`serve`]. A failure of the endpoint is
/// logged (the liveness probe then fails and the kubelet restarts the container).
#[cfg(feature = "health")]
pub async fn serve_with_health<F, E>(
    service: &'static str,
    grace: Duration,
    endpoint: HealthEndpoint,
    component: impl FnOnce(CancellationToken, Health) -> F,
) -> Outcome
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Error + Send + Sync + 'static,
{
    let health = endpoint.health();
    let stop = CancellationToken::new();
    let server = crate::tasks::spawn("health endpoint", endpoint.serve(stop.clone()));
    let draining = health.clone();
    let (outcome, deadline) = run(
        service,
        grace,
        |shutdown| component(shutdown, health),
        async move { draining.set_ready(false).await },
    )
    .await;
    if server.is_finished() {
        match server.await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                error!(service, error = %ErrorChain(&error), "health endpoint failed")
            }
            Err(join) => error!(service, error = %ErrorChain(&join), "health endpoint panicked"),
        }
    } else {
        // Not a graceful stop: a client watching the status would hold it open forever.
        stop.cancel();
        server.abort();
    }
    drain_tasks(service, outcome, deadline).await
}

/// [`serve`] up to the end of the component, awaiting `on_signal` between the signal and the
/// cancellation of the component. Returns the outcome and the deadline of the tracked tasks:
/// the end of the grace period after a signal, `grace` from the end of a component that
/// ended on its own (its token is cancelled then, so that its tasks stop).
async fn run<F, E>(
    service: &'static str,
    grace: Duration,
    component: impl FnOnce(CancellationToken) -> F,
    on_signal: impl Future<Output = ()>,
) -> (Outcome, Instant)
where
    F: Future<Output = Result<(), E>> + Send + 'static,
    E: Error + Send + Sync + 'static,
{
    let shutdown = CancellationToken::new();
    let mut task = crate::tasks::spawn(service, component(shutdown.clone()));
    let signal = tokio::select! {
        joined = &mut task => {
            shutdown.cancel();
            let deadline = Instant::now() + grace;
            return (finished(service, joined, Outcome::Completed), deadline);
        }
        signal = signal() => signal,
    };
    let deadline = Instant::now() + grace;
    info!(service, %signal, ?grace, "shutting down; draining");
    on_signal.await;
    shutdown.cancel();
    let outcome = match tokio::time::timeout_at(deadline, task).await {
        Ok(joined) => finished(service, joined, Outcome::Drained(signal)),
        Err(_) => {
            warn!(
                service,
                ?grace,
                "still draining when the grace period ended; exiting"
            );
            eprintln!("{service}: did not stop within the grace period of {grace:?}");
            Outcome::GraceExceeded(signal)
        }
    };
    (outcome, deadline)
}

/// Waits until `deadline` for the tracked tasks of the process ([`crate::tasks::drain`]).
/// Tasks still running then (e.g. a `kubectl logs -f` tunnel that ends only when its client
/// closes it) are logged by the drain and end with the runtime; the outcome stays the
/// component's, so a stop whose component drained in time still exits 0.
async fn drain_tasks(service: &'static str, outcome: Outcome, deadline: Instant) -> Outcome {
    let left = deadline.saturating_duration_since(Instant::now());
    if !crate::tasks::drain(left).await {
        warn!(
            service,
            "tasks were still running when the grace period ended; exiting"
        );
    }
    outcome
}

fn finished<E: Error + 'static>(
    service: &'static str,
    joined: Result<Result<(), E>, tokio::task::JoinError>,
    ok: Outcome,
) -> Outcome {
    match joined {
        Ok(Ok(())) => {
            info!(service, "stopped");
            ok
        }
        Ok(Err(error)) => {
            fail(service, &error);
            Outcome::Failed
        }
        Err(join) => {
            fail(service, &join);
            Outcome::Failed
        }
    }
}

/// Prints `error` with its causes as the reason `service` fails — a `tracing` error event
/// and one line on stderr — and returns [`ExitCode::FAILURE`]. For errors before
/// [`serve`] (flags, configuration, set-up) as well.
pub fn fail(service: &str, error: &(dyn Error + 'static)) -> ExitCode {
    let chain = ErrorChain(error);
    error!(service, error = %chain, "failed");
    eprintln!("{service}: error: {chain}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("bind failed")]
    struct BindFailed(#[source] std::io::Error);

    #[tokio::test]
    async fn completion_and_failure() {
        let ok = serve("t", Duration::from_secs(1), |_| async {
            Ok::<(), BindFailed>(())
        })
        .await;
        assert_eq!(ok, Outcome::Completed);
        let failed = serve("t", Duration::from_secs(1), |_| async {
            Err(BindFailed(std::io::Error::other("address in use")))
        })
        .await;
        assert_eq!(failed, Outcome::Failed);
        assert_eq!(failed.exit_code(), ExitCode::FAILURE);
    }

    /// A component that ends on its own has its token cancelled, and `serve` returns once
    /// the tasks it started stopped on it.
    #[tokio::test]
    async fn the_tasks_of_a_completed_component_stop_on_its_token() {
        let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ended.clone();
        let outcome = serve("t", Duration::from_secs(10), |shutdown| async move {
            crate::tasks::spawn("helper", async move {
                shutdown.cancelled().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                flag.store(true, std::sync::atomic::Ordering::SeqCst);
            });
            Ok::<(), BindFailed>(())
        })
        .await;
        assert_eq!(outcome, Outcome::Completed);
        assert!(ended.load(std::sync::atomic::Ordering::SeqCst));
    }
}
