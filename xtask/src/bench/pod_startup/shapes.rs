//! The pods the bench starts, by shape, and the baseline each is compared with: the same
//! containers started by `docker run` in sequence, timed until the last command returns.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use verge_testkit::docker::docker;

use super::{CONTAINER, IMAGE};

/// What a bench pod holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One container sleeping an hour.
    One,
    /// Two containers sleeping an hour.
    TwoContainers,
    /// An init container that exits at once (`true`), then one container sleeping an hour.
    InitContainer,
}

impl Shape {
    /// The shapes measured besides [`Shape::One`], each with its own baseline.
    pub(super) const OTHERS: [Self; 2] = [Self::TwoContainers, Self::InitContainer];

    /// The shape in the report's words.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Self::One => "one container",
            Self::TwoContainers => "two containers",
            Self::InitContainer => "an init container, then one container",
        }
    }

    /// Its baseline in the report's words.
    pub(super) fn baseline(self) -> &'static str {
        match self {
            Self::One => "docker run -d",
            Self::TwoContainers => "docker run -d, twice",
            Self::InitContainer => "docker run (exits), then docker run -d",
        }
    }

    /// Pod `name` of this shape bound to `node`; every container runs [`IMAGE`].
    pub(super) fn pod(self, name: &str, node: &str) -> anyhow::Result<Pod> {
        let sleeper = |container: &str| {
            json!({"name": container, "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                   "command": ["sleep", "3600"]})
        };
        let mut spec = json!({
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [sleeper(CONTAINER)],
        });
        match self {
            Self::One => {}
            Self::TwoContainers => {
                spec["containers"] = json!([sleeper(CONTAINER), sleeper("side")])
            }
            Self::InitContainer => {
                spec["initContainers"] = json!([{"name": "init", "image": IMAGE,
                    "imagePullPolicy": "IfNotPresent", "command": ["true"]}]);
            }
        }
        Ok(serde_json::from_value(
            json!({"metadata": {"name": name}, "spec": spec}),
        )?)
    }

    /// The same containers by `docker run`, one after another; returns the time until the
    /// last command returned and the containers' ids.
    fn docker_sequence(self) -> anyhow::Result<(Duration, Vec<String>)> {
        let detached = || docker(&["run", "-d", IMAGE, "sleep", "3600"]);
        let t0 = Instant::now();
        let ids = match self {
            Self::One => vec![detached()?],
            Self::TwoContainers => vec![detached()?, detached()?],
            Self::InitContainer => {
                // In the foreground: it returns when the container has exited.
                static NEXT: std::sync::atomic::AtomicUsize =
                    std::sync::atomic::AtomicUsize::new(0);
                let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let name = format!("verge-bench-init-{}-{i}", std::process::id());
                docker(&["run", "--name", &name, IMAGE, "true"])?;
                vec![name, detached()?]
            }
        };
        Ok((t0.elapsed(), ids))
    }
}

/// The baseline of `shape`, `n` times, one after another or all at once (a thread each);
/// the containers are removed afterwards. Returns the sorted times.
///
/// # Errors
/// A `docker run` failed (its containers are removed all the same).
pub(super) fn docker_baseline(
    shape: Shape,
    n: usize,
    concurrent: bool,
) -> anyhow::Result<Vec<Duration>> {
    timed_runs(n, concurrent, |_| shape.docker_sequence())
}

/// A user-defined bridge network like a node's pod network, for
/// [`docker_baseline_on_network`].
const BASELINE_NETWORK: &str = "verge-bench-baseline";
/// Its subnet; container `i` gets `10.252.<i / 200>.<i % 200 + 10>`.
const BASELINE_SUBNET: &str = "10.252.0.0/16";

/// `docker run -d` of the image, `n` times as [`docker_baseline`], on a user-defined bridge
/// network at a fixed address: what a pod's container holding its own network needs from
/// Docker (Docker gives a container on a user-defined network its embedded DNS resolver,
/// which a container on the default bridge does without). The network is removed afterwards.
///
/// # Errors
/// A `docker run` failed, or the network cannot be made.
pub(super) fn docker_baseline_on_network(
    n: usize,
    concurrent: bool,
) -> anyhow::Result<Vec<Duration>> {
    let _ = docker(&["network", "rm", BASELINE_NETWORK]);
    docker(&[
        "network",
        "create",
        "--subnet",
        BASELINE_SUBNET,
        BASELINE_NETWORK,
    ])?;
    let result = timed_runs(n, concurrent, |i| {
        let ip = format!("10.252.{}.{}", i / 200, i % 200 + 10);
        let t0 = Instant::now();
        let id = docker(&[
            "run",
            "-d",
            "--network",
            BASELINE_NETWORK,
            "--ip",
            &ip,
            IMAGE,
            "sleep",
            "3600",
        ])?;
        Ok((t0.elapsed(), vec![id]))
    });
    let _ = docker(&["network", "rm", BASELINE_NETWORK]);
    result
}

/// Runs `run(i)` for `i` in `0..n`, one after another or all at once (a thread each); removes
/// the containers each returns; returns the sorted times.
fn timed_runs(
    n: usize,
    concurrent: bool,
    run: impl Fn(usize) -> anyhow::Result<(Duration, Vec<String>)> + Sync,
) -> anyhow::Result<Vec<Duration>> {
    let results: Vec<anyhow::Result<(Duration, Vec<String>)>> = if concurrent {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    let run = &run;
                    s.spawn(move || run(i))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(anyhow::anyhow!("docker run thread panicked")))
                })
                .collect()
        })
    } else {
        (0..n).map(&run).collect()
    };
    let mut times = Vec::with_capacity(n);
    let mut ids = Vec::new();
    let mut failure = None;
    for r in results {
        match r {
            Ok((t, started)) => {
                times.push(t);
                ids.extend(started);
            }
            Err(e) => failure = Some(e),
        }
    }
    let rm: Vec<&str> = ["rm", "-f"]
        .into_iter()
        .chain(ids.iter().map(String::as_str))
        .collect();
    let _ = docker(&rm);
    if let Some(e) = failure {
        return Err(e);
    }
    times.sort();
    Ok(times)
}
