use super::*;
use crate::fixture::snapshot;

#[test]
fn renders_kubelet_names_labels_and_timestamps() {
    let text = render(&snapshot());
    let expected = [
        "# HELP container_cpu_usage_seconds_total [STABLE] CPU time the container has used since it started, in core-seconds",
        "# TYPE container_cpu_usage_seconds_total counter",
        "container_cpu_usage_seconds_total{container=\"app\",namespace=\"kube-system\",pod=\"web\\\"1\"} 1.5 1700000000123",
        "# TYPE container_memory_working_set_bytes gauge",
        "container_memory_working_set_bytes{container=\"app\",namespace=\"kube-system\",pod=\"web\\\"1\"} 1024 1700000000123",
        "container_start_time_seconds{container=\"app\",namespace=\"kube-system\",pod=\"web\\\"1\"} 1699999100.5",
        "# HELP node_cpu_usage_seconds_total [STABLE] CPU time the node has used since it booted, in core-seconds",
        "node_cpu_usage_seconds_total 12.5 1700000000123",
        "node_memory_working_set_bytes 4096 1700000000123",
        "pod_cpu_usage_seconds_total{namespace=\"kube-system\",pod=\"web\\\"1\"} 3 1700000000123",
        "# TYPE pod_memory_working_set_bytes gauge",
        "pod_memory_working_set_bytes{namespace=\"kube-system\",pod=\"web\\\"1\"} 2048 1700000000123",
        "# HELP resource_scrape_error [STABLE] 1 when a figure of this scrape could not be read, else 0",
        "resource_scrape_error 0",
    ];
    let lines = text.lines().collect::<Vec<_>>();
    for line in expected {
        assert!(lines.contains(&line), "missing {line:?} in:\n{text}");
    }
    // The container without a sample or a start time has no samples at all.
    assert!(!text.contains("side"), "{text}");
    // Families in name order; every sample line ends with a value (and maybe a timestamp).
    let families = lines
        .iter()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect::<Vec<_>>();
    let mut sorted = families.clone();
    sorted.sort();
    assert_eq!(families, sorted);
    assert_eq!(families.len(), 8);
}

#[test]
fn escapes_label_values_and_reports_scrape_errors() {
    let mut snap = snapshot();
    snap.pods[0].containers[1].start_time = crate::fixture::at(1_699_999_200, 0);
    snap.node.usage = None;
    snap.scrape_error = true;
    let text = render(&snap);
    assert!(
        text.contains("container_start_time_seconds{container=\"side\\\\car\\n\",namespace=\"kube-system\",pod=\"web\\\"1\"} 1699999200\n"),
        "{text}"
    );
    assert!(text.ends_with("resource_scrape_error 1\n"), "{text}");
    assert!(!text.contains("node_"), "{text}");
}
