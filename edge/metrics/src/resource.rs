//! The kubelet's `/metrics/resource` in the Prometheus text format 0.0.4: the metrics of its
//! resource metrics collector, which metrics-server scrapes, with the same names, stability
//! marks (`[STABLE]` in HELP), label sets and timestamps; the HELP texts are Verge's.
//!
//! As the kubelet's: families come sorted by name and samples by label values; a family with
//! no samples is left out; CPU and memory samples carry the millisecond timestamp of their
//! reading (metrics-server computes rates from it), `container_start_time_seconds` and
//! `resource_scrape_error` carry none. Written by hand: prometheus-client's encoder writes
//! no timestamps.

use std::fmt::{self, Write};

use chrono::{DateTime, Utc};

use crate::snapshot::{Sample, Snapshot};

/// The `Content-Type` of the rendered text.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's description.
struct Family {
    name: &'static str,
    help: &'static str,
    counter: bool,
}

const CONTAINER_CPU: Family = Family {
    name: "container_cpu_usage_seconds_total",
    help: "CPU time the container has used since it started, in core-seconds",
    counter: true,
};
const CONTAINER_MEMORY: Family = Family {
    name: "container_memory_working_set_bytes",
    help: "Memory the container uses that cannot be reclaimed at once (usage less inactive file pages), in bytes",
    counter: false,
};
const CONTAINER_START: Family = Family {
    name: "container_start_time_seconds",
    help: "When the container started, in seconds since the Unix epoch",
    counter: false,
};
const NODE_CPU: Family = Family {
    name: "node_cpu_usage_seconds_total",
    help: "CPU time the node has used since it booted, in core-seconds",
    counter: true,
};
const NODE_MEMORY: Family = Family {
    name: "node_memory_working_set_bytes",
    help: "Memory the node uses that cannot be reclaimed at once, in bytes",
    counter: false,
};
const POD_CPU: Family = Family {
    name: "pod_cpu_usage_seconds_total",
    help: "CPU time the pod's containers and sandbox have used, in core-seconds",
    counter: true,
};
const POD_MEMORY: Family = Family {
    name: "pod_memory_working_set_bytes",
    help: "Memory the pod's containers and sandbox use that cannot be reclaimed at once, in bytes",
    counter: false,
};
const SCRAPE_ERROR: Family = Family {
    name: "resource_scrape_error",
    help: "1 when a figure of this scrape could not be read, else 0",
    counter: false,
};

/// One sample: label pairs in name order, value, optional timestamp in Unix milliseconds.
type Line<'a> = (Vec<(&'static str, &'a str)>, f64, Option<i64>);

/// Renders `snapshot` as `/metrics/resource` (serve it with [`CONTENT_TYPE`]).
///
/// Per container with a [`Sample`]: `container_cpu_usage_seconds_total` (counter, seconds)
/// and `container_memory_working_set_bytes` (gauge, bytes), labels `container`, `namespace`,
/// `pod`; per container started after the epoch, `container_start_time_seconds`. Per pod
/// with a sample: `pod_cpu_usage_seconds_total`, `pod_memory_working_set_bytes` (labels
/// `namespace`, `pod`). For the node with a sample: `node_cpu_usage_seconds_total`,
/// `node_memory_working_set_bytes`. Always `resource_scrape_error` (0 or 1).
pub fn render(snapshot: &Snapshot) -> String {
    let (mut container_cpu, mut container_memory, mut container_start) = (vec![], vec![], vec![]);
    let (mut pod_cpu, mut pod_memory) = (vec![], vec![]);
    for pod in &snapshot.pods {
        let (namespace, name) = (pod.namespace.as_str(), pod.name.as_str());
        for c in &pod.containers {
            let labels = vec![
                ("container", c.name.as_str()),
                ("namespace", namespace),
                ("pod", name),
            ];
            if let Some(s) = &c.usage {
                container_cpu.push(cpu_line(labels.clone(), s));
                container_memory.push(memory_line(labels.clone(), s));
            }
            if c.start_time.timestamp() > 0 {
                container_start.push((labels, unix_seconds(c.start_time), None));
            }
        }
        if let Some(s) = &pod.usage {
            let labels = vec![("namespace", namespace), ("pod", name)];
            pod_cpu.push(cpu_line(labels.clone(), s));
            pod_memory.push(memory_line(labels, s));
        }
    }
    let node = snapshot.node.usage.as_ref();
    let node_cpu = node.map(|s| cpu_line(vec![], s)).into_iter().collect();
    let node_memory = node.map(|s| memory_line(vec![], s)).into_iter().collect();
    let scrape_error = vec![(vec![], if snapshot.scrape_error { 1.0 } else { 0.0 }, None)];

    let mut out = String::new();
    for (family, lines) in [
        (CONTAINER_CPU, container_cpu),
        (CONTAINER_MEMORY, container_memory),
        (CONTAINER_START, container_start),
        (NODE_CPU, node_cpu),
        (NODE_MEMORY, node_memory),
        (POD_CPU, pod_cpu),
        (POD_MEMORY, pod_memory),
        (SCRAPE_ERROR, scrape_error),
    ] {
        // Writing to a String cannot fail.
        let _ = write_family(&mut out, &family, lines);
    }
    out
}

fn cpu_line<'a>(labels: Vec<(&'static str, &'a str)>, s: &Sample) -> Line<'a> {
    (
        labels,
        s.cpu_usage_nanos as f64 / 1e9,
        Some(s.timestamp.timestamp_millis()),
    )
}

fn memory_line<'a>(labels: Vec<(&'static str, &'a str)>, s: &Sample) -> Line<'a> {
    (
        labels,
        s.memory.working_set_bytes as f64,
        Some(s.timestamp.timestamp_millis()),
    )
}

fn unix_seconds(t: DateTime<Utc>) -> f64 {
    t.timestamp() as f64 + f64::from(t.timestamp_subsec_nanos()) / 1e9
}

fn write_family(out: &mut String, family: &Family, mut lines: Vec<Line<'_>>) -> fmt::Result {
    if lines.is_empty() {
        return Ok(());
    }
    lines.sort_by(|a, b| a.0.cmp(&b.0));
    let kind = if family.counter { "counter" } else { "gauge" };
    writeln!(out, "# HELP {} [STABLE] {}", family.name, family.help)?;
    writeln!(out, "# TYPE {} {kind}", family.name)?;
    for (labels, value, timestamp) in lines {
        out.push_str(family.name);
        for (i, (name, label)) in labels.iter().enumerate() {
            out.push(if i == 0 { '{' } else { ',' });
            write!(out, "{name}=\"")?;
            escape_label_value(out, label);
            out.push('"');
        }
        if !labels.is_empty() {
            out.push('}');
        }
        write!(out, " {value}")?;
        if let Some(ms) = timestamp {
            write!(out, " {ms}")?;
        }
        out.push('\n');
    }
    Ok(())
}

/// Escapes a label value as the text format requires: `\` → `\\`, `"` → `\"`, newline → `\n`.
fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
