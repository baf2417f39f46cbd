//! One phase: every simulated node connects at once; waits until all are resynced.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::sync::{mpsc, watch};
use tonic::transport::Endpoint;

use super::edge::{self, Event, PhaseShared, SessionStats, SimEdge};
use super::objects::OBJECTS_PER_NODE;

/// Quiet time that ends a phase when the edgecontroller sends no `resync` markers.
const QUIET: Duration = Duration::from_secs(2);

/// The outcome of one phase.
pub(super) struct Phase {
    pub(super) edges: Vec<SimEdge>,
    pub(super) stats: Vec<SessionStats>,
    /// Time until every node was resynced (marker, or the fallback's last object message).
    pub(super) resynced_after: Duration,
    /// Per node, the time to its marker (or to holding its objects, in the fallback).
    pub(super) per_node: Vec<Duration>,
    /// Nodes that received the marker.
    pub(super) markers: usize,
}

/// Connects every node in `edges` at once and waits until all are resynced. `markers`:
/// `Some(true)` requires the `resync` marker of every node, `Some(false)` uses the quiet
/// fallback, `None` decides by whether any marker arrives (phase 1).
pub(super) async fn phase(
    endpoint: &Endpoint,
    edges: Vec<SimEdge>,
    markers: Option<bool>,
) -> anyhow::Result<Phase> {
    let n = edges.len();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let shared = Arc::new(PhaseShared {
        t0: Instant::now(),
        expected: OBJECTS_PER_NODE,
        last_object_ns: AtomicU64::new(0),
        events: events_tx,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let tasks: Vec<_> = edges
        .into_iter()
        .map(|e| {
            tokio::spawn(edge::session(
                e,
                endpoint.clone(),
                shared.clone(),
                stop_rx.clone(),
            ))
        })
        .collect();

    let mut complete = vec![None; n];
    let mut marked = vec![None; n];
    let (mut n_complete, mut n_marked) = (0, 0);
    let mut failure = None;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut last_progress = Instant::now();
    let done = loop {
        tokio::select! {
            event = events.recv() => match event {
                Some(Event::Complete(i, at)) => {
                    if complete[i].replace(at).is_none() { n_complete += 1; }
                }
                Some(Event::Marker(i, at)) => {
                    if marked[i].replace(at).is_none() { n_marked += 1; }
                }
                Some(Event::Failed(reason)) => { failure = Some(reason); break false; }
                None => break false,
            },
            _ = tick.tick() => {
                if last_progress.elapsed() > Duration::from_secs(5) {
                    eprintln!("  ... {n_complete}/{n} nodes hold their objects, {n_marked}/{n} markers");
                    last_progress = Instant::now();
                }
            },
        }
        let last_object = Duration::from_nanos(shared.last_object_ns.load(Ordering::Relaxed));
        let quiet = shared.t0.elapsed().saturating_sub(last_object) >= QUIET;
        let need_markers = markers.unwrap_or(n_marked > 0);
        if n_complete == n && (if need_markers { n_marked == n } else { quiet }) {
            break true;
        }
    };
    stop_tx.send_replace(true);
    let mut out_edges = Vec::with_capacity(n);
    let mut stats = Vec::with_capacity(n);
    for task in tasks {
        let (e, s) = task.await.context("simulated edge task panicked")?;
        out_edges.push(e);
        stats.push(s);
    }
    if !done {
        bail!(
            "a simulated edge failed: {}",
            failure.unwrap_or_else(|| "event channel closed".into())
        );
    }
    let with_markers = n_marked == n;
    let per_node: Vec<Duration> = if with_markers {
        marked.into_iter().flatten().collect()
    } else {
        complete.into_iter().flatten().collect()
    };
    let last_object = Duration::from_nanos(shared.last_object_ns.load(Ordering::Relaxed));
    let resynced_after = per_node
        .iter()
        .copied()
        .max()
        .unwrap_or_default()
        .max(if with_markers {
            Duration::ZERO
        } else {
            last_object
        });
    let mut per_node = per_node;
    per_node.sort();
    Ok(Phase {
        edges: out_edges,
        stats,
        resynced_after,
        per_node,
        markers: n_marked,
    })
}
