use serde_json::{Value, json};

use super::*;
use crate::fixture::snapshot;

fn keys(value: &Value) -> Vec<&str> {
    let mut keys = value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>();
    keys.sort_unstable();
    keys
}

#[test]
fn json_has_the_kubelets_names() {
    let summary = Summary::from_snapshot(&snapshot());
    let v = serde_json::to_value(&summary).unwrap();
    let node = &v["node"];
    assert_eq!(
        keys(node),
        [
            "cpu",
            "fs",
            "memory",
            "network",
            "nodeName",
            "runtime",
            "startTime"
        ]
    );
    assert_eq!(node["nodeName"], "edge-1");
    assert_eq!(node["startTime"], "2020-09-13T12:26:40Z");
    assert_eq!(
        node["cpu"],
        json!({"time": "2023-11-14T22:13:20Z", "usageNanoCores": 250_000_000u64, "usageCoreNanoSeconds": 12_500_000_000u64})
    );
    assert_eq!(
        keys(&node["memory"]),
        [
            "availableBytes",
            "majorPageFaults",
            "pageFaults",
            "rssBytes",
            "time",
            "usageBytes",
            "workingSetBytes"
        ]
    );
    assert_eq!(node["memory"]["availableBytes"], 1000);
    // No eth0 on the node: the flattened default interface has an empty name only.
    assert_eq!(keys(&node["network"]), ["interfaces", "name", "time"]);
    assert_eq!(node["network"]["name"], "");
    assert_eq!(
        keys(&node["network"]["interfaces"][0]),
        ["name", "rxBytes", "rxErrors", "txBytes", "txErrors"]
    );
    assert_eq!(keys(&node["runtime"]), ["containerFs", "imageFs"]);
    assert_eq!(
        keys(&node["fs"]),
        [
            "availableBytes",
            "capacityBytes",
            "inodes",
            "inodesFree",
            "inodesUsed",
            "time",
            "usedBytes"
        ]
    );

    let pod = &v["pods"][0];
    assert_eq!(
        keys(pod),
        [
            "containers",
            "cpu",
            "ephemeral-storage",
            "memory",
            "network",
            "podRef",
            "process_stats",
            "startTime",
            "volume"
        ]
    );
    assert_eq!(
        pod["podRef"],
        json!({"name": "web\"1", "namespace": "kube-system", "uid": "uid-1"})
    );
    assert_eq!(pod["process_stats"], json!({"process_count": 3}));
    assert_eq!(pod["network"]["name"], "eth0");
    assert_eq!(pod["network"]["rxBytes"], 1);
    assert_eq!(pod["volume"][0]["name"], "data");
    assert_eq!(pod["volume"][0]["inodesUsed"], 6);
    assert!(pod["memory"].get("availableBytes").is_none());
    assert_eq!(
        keys(&pod["containers"][0]),
        ["cpu", "logs", "memory", "name", "rootfs", "startTime"]
    );
    assert_eq!(keys(&pod["containers"][1]), ["name", "startTime"]);
    assert_eq!(pod["containers"][1]["startTime"], "1970-01-01T00:00:00Z");

    // It reads back (times to the second, as metav1.Time writes them).
    let back: Summary = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(serde_json::to_value(&back).unwrap(), v);
    assert_eq!(
        back.node.cpu.unwrap().time,
        Time(crate::fixture::at(1_700_000_000, 0))
    );
}
