//! A cloudhub replica killed (its nodes move to the others) and every replica restarted
//! (full TLS handshakes): how long until the fleet is resynced.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::mpsc;

use super::cloud::Cloud;
use super::edge::{Event, Shared};
use super::report::Failover;
use super::tracker::Tracker;

/// Kills replica 1 (its nodes move to the others: time until all resynced there), starts it
/// again, then restarts every replica with TLS resumption off (time until every node
/// resynced after full handshakes).
pub(super) async fn failover(
    cloud: &mut Cloud,
    shared: &Shared,
    events: &mut mpsc::UnboundedReceiver<Event>,
    tracker: &mut Tracker,
    size: usize,
) -> anyhow::Result<Failover> {
    while let Ok(event) = events.try_recv() {
        tracker.take(event);
    }
    let victims: Vec<usize> = (0..size)
        .filter(|i| tracker.last.get(i).is_some_and(|(r, _)| *r == 1))
        .collect();
    eprintln!(
        "bench fleet: killing {} ({} nodes)",
        cloud.replicas[1].name,
        victims.len()
    );
    let killed = Instant::now();
    cloud.kill(1);
    tracker
        .wait(
            events,
            |t| {
                victims
                    .iter()
                    .all(|i| t.last.get(i).is_some_and(|(r, at)| *r != 1 && *at > killed))
            },
            Duration::from_secs(600),
        )
        .await
        .context("the killed replica's nodes did not move")?;
    let moved_in = killed.elapsed();
    eprintln!("  its nodes resynced on the other replicas after {moved_in:.1?}");
    cloud.restart(1).await?;

    eprintln!("bench fleet: restarting every replica (full TLS handshakes)");
    shared.resume_tls.store(false, Ordering::Relaxed);
    let reconnects_before = shared.reconnects.load(Ordering::Relaxed);
    let restarted = Instant::now();
    for i in 0..cloud.replicas.len() {
        cloud.kill(i);
    }
    for i in 0..cloud.replicas.len() {
        cloud.restart(i).await?;
    }
    tracker
        .wait(
            events,
            |t| (0..size).all(|i| t.last.get(&i).is_some_and(|(_, at)| *at > restarted)),
            Duration::from_secs(900),
        )
        .await
        .context("not every node resynced after the restart")?;
    let all_back_in = restarted.elapsed();
    eprintln!("  all {size} resynced after {all_back_in:.1?}");
    shared.resume_tls.store(true, Ordering::Relaxed);
    Ok(Failover {
        moved: victims.len(),
        moved_in,
        all_back_in,
        reconnects: shared.reconnects.load(Ordering::Relaxed) - reconnects_before,
    })
}
