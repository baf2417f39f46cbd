//! The `edge-api` section of `docs/benchmarks.md`.

use std::time::Duration;

use super::super::Summary;
use super::super::record::{self, Target};
use super::{Args, Measured};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Writes the section and prints it.
pub fn report(args: &Args, m: &Measured) -> anyhow::Result<()> {
    let lists: Vec<Summary> = m.lists.iter().map(|l| Summary::of(l)).collect();
    let events: Vec<Summary> = m.events.iter().map(|l| Summary::of(l)).collect();
    let own = Summary::of(&m.own_changes);
    let p99 = |s: &Summary| {
        s.p99
            .map_or_else(|| "–".to_owned(), |d| format!("{:.2} ms", ms(d)))
    };
    let row = |name: &str, s: &Summary| {
        format!(
            "| {name} | {} | {:.2} ms | {} | {:.2} ms |\n",
            s.n,
            ms(s.p50),
            p99(s),
            ms(s.max)
        )
    };
    let mut list_rows =
        String::from("| list of the pods | n | p50 | p99 | max |\n|---|---|---|---|---|\n");
    for (name, s) in [
        "the API server directly (baseline)",
        "edge API online (through the link)",
        "edge API offline, kept answer",
        "edge API offline, from the store (label selector)",
    ]
    .iter()
    .zip(&lists)
    {
        list_rows.push_str(&row(name, s));
    }
    let mut event_rows =
        String::from("| watch event | n | p50 | p99 | max |\n|---|---|---|---|---|\n");
    for (name, s) in [
        "cloud patch → watch on the API server directly (baseline)",
        "cloud patch → watch through the edge API online",
        "offline: container killed → pod watch through the edge API",
    ]
    .iter()
    .zip(events.iter().chain([&own]))
    {
        event_rows.push_str(&row(name, s));
    }
    let idle_delta = mib(m.idle_kib.1) - mib(m.idle_kib.0);
    let cache_delta = mib(m.cache_kib.1) - mib(m.cache_kib.0);
    let ratio = |a: usize, b: usize| lists[a].p50.as_secs_f64() / lists[b].p50.as_secs_f64();
    let targets = [
        Target {
            goal: "edge API idle ≤ +5 MiB edgecore RSS".into(),
            figure: format!("{idle_delta:+.1} MiB"),
            anchor: format!("{:.1} MiB with it off (same run)", mib(m.idle_kib.0)),
            met: idle_delta <= 5.0,
        },
        Target {
            goal: format!("offline list of {} pods no slower than online", args.pods),
            figure: format!("{:.2}× kept, {:.2}× store", ratio(2, 1), ratio(3, 1)),
            anchor: format!("online p50 {:.2} ms (same run)", ms(lists[1].p50)),
            met: ratio(2, 1) <= 1.0 && ratio(3, 1) <= 1.0,
        },
        Target {
            goal: format!(
                "memory bounded with {} objects kept (cache limit 64 MiB)",
                args.objects
            ),
            figure: format!("{cache_delta:+.1} MiB RSS"),
            anchor: format!(
                "cache file {:.1} MiB",
                m.cache_file as f64 / 1024.0 / 1024.0
            ),
            met: cache_delta <= 64.0,
        },
    ];
    let body = format!(
        "One local edge node ({} build), {} pods on it (busybox `sleep`), the kit's control \
         plane; all on this machine, so the link's latency is not in the online figures. The \
         client is the bench on the host at the edge API's listener on the node's pod-network \
         gateway, verifying it as a pod does (the cluster CA of its `ca.crt`, \
         `kubernetes.default.svc`), with a token bound to one of the pods and the namespace's \
         `view` role; plain JSON answers, \
         whole body read. Lists: {} per path after 10 of warm-up, online paths interleaved in \
         rounds of 10, then cloudhub is killed (SIGKILL) and, once the edge API answers a write \
         with its offline 503, the offline paths interleaved the same way. Watch events: {} \
         ConfigMap patches 100 ms apart, each timed from sending the patch to its `MODIFIED` \
         event on both watches; offline: {} containers killed one by one (`docker kill`), each \
         timed until the open pod watch has the pod with its restart (edged's restart reaches \
         the watch by its 1 s poll of the store). Idle memory: edgecore restarted with \
         `edgeApi.enable: false`, then `true`, RSS settled 10 s after each start, before any \
         request. Kept answers: a GET of each of {} ConfigMaps through the edge API (8 in \
         flight, {:.1} s) and their list.\n\n{}\n{list_rows}\n{event_rows}\n\
         | edgecore RSS | MiB |\n|---|---|\n| idle, edge API off | {:.1} |\n\
         | idle, edge API on | {:.1} |\n| before keeping {} objects' answers | {:.1} |\n\
         | after | {:.1} |\n| edge API cache file (`cache.redb`) | {:.1} |\n",
        if args.debug { "debug" } else { "release" },
        args.pods,
        args.requests,
        args.events,
        m.own_changes.len(),
        args.objects,
        m.cache_fill.as_secs_f64(),
        record::targets_table(&targets),
        mib(m.idle_kib.0),
        mib(m.idle_kib.1),
        args.objects,
        mib(m.cache_kib.0),
        mib(m.cache_kib.1),
        m.cache_file as f64 / 1024.0 / 1024.0,
    );
    println!("{body}");
    record::write("edge-api", "edge-api: the edge API on and off line", &body)
}
