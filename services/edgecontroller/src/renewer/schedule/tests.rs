use super::*;

fn params(seconds: i32) -> Params {
    Params {
        holder_identity: "h".into(),
        lease_duration_seconds: seconds,
    }
}

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

/// Every job due up to `until`, stepping through the schedule's turns, each finished at once
/// with `outcome`.
fn run_until(s: &mut Schedule, until: Instant, outcome: &Outcome) -> Vec<(Instant, Job)> {
    let mut done = Vec::new();
    while let Some(at) = s.next_due().filter(|at| *at <= until) {
        for job in s.take_due(at, usize::MAX) {
            s.finished(&job, outcome.clone(), at);
            done.push((at, job));
        }
    }
    done
}

#[test]
fn renew_interval_is_a_quarter_of_the_lease() {
    assert_eq!(renew_interval(40), secs(10.0));
    assert_eq!(renew_interval(8), secs(2.0));
    assert_eq!(renew_interval(0), secs(0.25));
}

#[test]
fn a_connected_node_is_adopted_unless_its_lease_message_comes_first() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    s.connected("a", t0);
    s.connected("b", t0);
    assert!(s.take_due(t0 + secs(0.9), 10).is_empty());
    // b's edge sends its Lease at once: b is renewed with it, a is adopted.
    assert!(s.lease_message("b", params(8), true, t0 + secs(0.1)));
    let jobs = s.take_due(t0 + ADOPT_AFTER, 10);
    assert_eq!(jobs.len(), 1);
    assert_eq!(
        (jobs[0].node.as_str(), &jobs[0].action),
        ("a", &Action::Adopt)
    );
    // The answer tells a's duration: from then on a is renewed every 2 s with it.
    let adopted = t0 + ADOPT_AFTER;
    s.finished(&jobs[0], Outcome::Renewed(Some(params(8))), adopted);
    let turns: Vec<Instant> = run_until(&mut s, adopted + secs(10.0), &Outcome::Renewed(None))
        .into_iter()
        .filter(|(_, j)| j.node == "a")
        .map(|(at, j)| {
            assert_eq!(j.action, Action::Renew(params(8)));
            at
        })
        .collect();
    let first = turns[0].duration_since(adopted);
    assert!(first >= secs(0.5) && first <= secs(2.5), "{first:?}");
    for pair in turns.windows(2) {
        assert_eq!(pair[1] - pair[0], secs(2.0));
    }
    assert!(turns.len() >= 4, "{turns:?}");
}

#[test]
fn renewals_follow_the_lease_message_every_quarter_duration() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    s.connected("n", t0);
    let sent = t0 + secs(0.2);
    s.lease_message("n", params(40), true, sent);
    let turns = run_until(&mut s, sent + secs(60.0), &Outcome::Renewed(None));
    assert!(
        turns
            .iter()
            .all(|(_, j)| j.action == Action::Renew(params(40)))
    );
    let first = turns[0].0.duration_since(sent);
    assert!(first >= secs(2.5) && first <= secs(12.5), "{first:?}");
    for pair in turns.windows(2) {
        assert_eq!(pair[1].0 - pair[0].0, secs(10.0));
    }
}

#[test]
fn a_node_without_a_session_is_not_renewed() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    // A Lease message of an ended session, applied after its end: nothing to renew.
    assert!(!s.lease_message("gone", params(40), true, t0));
    s.connected("n", t0);
    s.lease_message("n", params(8), true, t0);
    assert!(!run_until(&mut s, t0 + secs(5.0), &Outcome::Renewed(None)).is_empty());
    s.disconnected("n");
    assert!(s.is_empty());
    assert_eq!(s.next_due(), None);
    assert!(run_until(&mut s, t0 + secs(60.0), &Outcome::Renewed(None)).is_empty());
}

#[test]
fn a_404_drops_the_node_until_its_next_lease_message() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    s.connected("n", t0);
    s.lease_message("n", params(8), true, t0);
    let turns = run_until(&mut s, t0 + secs(3.0), &Outcome::NotFound);
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert_eq!(s.next_due(), None);
    assert_eq!(s.len(), 1, "still connected");
    // The next session's Lease message (here: the same node connected again).
    s.connected("n", t0 + secs(30.0));
    assert_eq!(
        s.next_due(),
        None,
        "a new session alone does not undo the 404"
    );
    s.lease_message("n", params(8), true, t0 + secs(30.0));
    assert!(!run_until(&mut s, t0 + secs(40.0), &Outcome::Renewed(None)).is_empty());
}

#[test]
fn a_failed_patch_is_tried_again_at_the_next_turn() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    s.connected("n", t0);
    s.lease_message("n", params(8), true, t0);
    let turns = run_until(&mut s, t0 + secs(10.0), &Outcome::Failed);
    assert!(turns.len() >= 4, "{turns:?}");
    assert!(
        turns
            .iter()
            .all(|(_, j)| j.action == Action::Renew(params(8)))
    );
}

#[test]
fn a_failed_lease_message_is_renewed_whole_until_it_works() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    s.connected("n", t0);
    // E.g. the Lease message overtook the registration: the Node did not exist yet.
    s.lease_message("n", params(8), false, t0);
    let turns = run_until(&mut s, t0 + secs(5.0), &Outcome::Failed);
    assert!(
        turns
            .iter()
            .all(|(_, j)| j.action == Action::Create(params(8)))
    );
    let at = s.next_due().expect("next turn");
    let jobs = s.take_due(at, 1);
    assert_eq!(jobs[0].action, Action::Create(params(8)));
    s.finished(&jobs[0], Outcome::Renewed(None), at);
    let at = s.next_due().expect("next turn");
    assert_eq!(s.take_due(at, 1)[0].action, Action::Renew(params(8)));
}

#[test]
fn an_outcome_of_an_older_state_changes_nothing() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    s.connected("n", t0);
    let jobs = s.take_due(t0 + ADOPT_AFTER, 1);
    assert_eq!(jobs[0].action, Action::Adopt);
    // The edge's Lease arrives while the adoption patch runs; then the patch says 404.
    s.lease_message("n", params(8), true, t0 + ADOPT_AFTER);
    s.finished(&jobs[0], Outcome::NotFound, t0 + ADOPT_AFTER);
    let turns = run_until(&mut s, t0 + secs(5.0), &Outcome::Renewed(None));
    assert!(!turns.is_empty());
    assert!(
        turns
            .iter()
            .all(|(_, j)| j.action == Action::Renew(params(8)))
    );
}

#[test]
fn a_turn_whose_previous_patch_still_runs_is_skipped() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    s.connected("n", t0);
    s.lease_message("n", params(8), true, t0);
    let first = s.next_due().expect("turn");
    let running = s.take_due(first, 10);
    assert_eq!(running.len(), 1);
    let second = s.next_due().expect("turn");
    assert_eq!(second - first, secs(2.0));
    assert!(s.take_due(second, 10).is_empty(), "still running");
    s.finished(&running[0], Outcome::Renewed(None), second);
    let third = s.next_due().expect("turn");
    assert_eq!(s.take_due(third, 10).len(), 1);
}

#[test]
fn nodes_that_connect_together_are_spread_over_the_interval() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    let n = 400;
    for i in 0..n {
        let node = format!("edge-{i}");
        s.connected(&node, t0);
        s.lease_message(&node, params(40), true, t0);
    }
    // One full interval, after every first turn came.
    let from = t0 + secs(12.5);
    run_until(&mut s, from, &Outcome::Renewed(None));
    let turns = run_until(&mut s, from + secs(10.0), &Outcome::Renewed(None));
    assert_eq!(turns.len(), n, "each node once per interval");
    // Ten one-second slots: each holds about a tenth of the nodes.
    let mut slots = [0usize; 10];
    for (at, _) in &turns {
        let slot = (at.duration_since(from).as_secs_f64().floor() as usize).min(9);
        slots[slot] += 1;
    }
    assert!(slots.iter().all(|&c| c > n / 20 && c < n / 5), "{slots:?}");
}

#[test]
fn take_due_hands_out_at_most_max() {
    let t0 = Instant::now();
    let mut s = Schedule::new(t0);
    for i in 0..10 {
        s.connected(&format!("n{i}"), t0);
    }
    let at = t0 + ADOPT_AFTER;
    assert_eq!(s.take_due(at, 4).len(), 4);
    assert_eq!(s.take_due(at, 4).len(), 4);
    assert_eq!(s.take_due(at, 4).len(), 2);
    assert!(s.take_due(at, 4).is_empty());
}
