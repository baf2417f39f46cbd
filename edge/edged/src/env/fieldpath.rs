//! Downward API values (Kubernetes `fieldpath.ExtractFieldPathAsString`, the kubelet's
//! `podFieldSelectorRuntimeValue` and `resource.ExtractContainerResourceValue`), shared by
//! env and downwardAPI volumes. Errors are the kubelet's messages.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, ResourceFieldSelector};

use crate::quantity::parse_scaled;

/// Go's `%q` of a string (as `FormatMap` writes values).
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Kubernetes `fieldpath.FormatMap`: `k="v"` lines in key order, no trailing newline.
pub(crate) fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `metadata['key']` subscripts: `metadata.labels['k']` -> `("metadata.labels", "k")`.
fn subscript(path: &str) -> Option<(&str, &str)> {
    let (base, rest) = path.split_once("['")?;
    Some((base, rest.strip_suffix("']")?))
}

/// `ExtractFieldPathAsString` for pod metadata: `metadata.name`, `.namespace`, `.uid`,
/// `.labels`, `.annotations` (whole: [`format_map`]) and `metadata.labels['k']`,
/// `metadata.annotations['k']` (empty when absent).
///
/// # Errors
/// `unsupported fieldPath: <path>` for anything else.
pub(crate) fn pod_field(pod: &Pod, path: &str) -> Result<String, String> {
    let m = &pod.metadata;
    if let Some((base, key)) = subscript(path) {
        let map = match base {
            "metadata.labels" => m.labels.as_ref(),
            "metadata.annotations" => m.annotations.as_ref(),
            _ => return Err(format!("unsupported fieldPath: {path}")),
        };
        return Ok(map.and_then(|m| m.get(key)).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(m.labels.as_ref()),
        "metadata.annotations" => format_map(m.annotations.as_ref()),
        _ => return Err(format!("unsupported fieldPath: {path}")),
    })
}

/// The kubelet's `podFieldSelectorRuntimeValue`: [`pod_field`] plus `spec.nodeName` (the
/// pod's, else `node_name`), `spec.serviceAccountName`, `status.podIP` / `status.podIPs`
/// (`pod_ip`) and `status.hostIP` / `status.hostIPs` (the node's IP, as the kubelet answers
/// them from the node rather than the pod status, which is not yet written when the first
/// container starts; else the pod status' host IP).
///
/// # Errors
/// `unsupported fieldPath: <path>` for an unknown path.
pub(crate) fn env_field(
    pod: &Pod,
    path: &str,
    pod_ip: Option<&str>,
    host_ip: Option<&str>,
    node_name: &str,
) -> Result<String, String> {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    Ok(match path {
        "spec.nodeName" => spec
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| node_name.to_owned()),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => pod_ip.unwrap_or_default().to_owned(),
        "status.hostIP" | "status.hostIPs" => host_ip
            .map(str::to_owned)
            .or_else(|| status.and_then(|s| s.host_ip.clone()))
            .unwrap_or_default(),
        _ => return pod_field(pod, path),
    })
}

/// The node's capacity, standing in for allocatable when a container sets no limit (the
/// kubelet's `defaultPodLimitsForDownwardAPI`): CPUs as millicores, memory from
/// `/proc/meminfo` in bytes.
fn host_capacity(resource: &str) -> u64 {
    match resource {
        "cpu" => std::thread::available_parallelism().map_or(1000, |n| n.get() as u64 * 1000),
        "memory" => std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(kib * 1024)
            })
            .unwrap_or(0),
        _ => 0,
    }
}

/// `ExtractContainerResourceValue` for container `container_name` of `pod`:
/// `limits.cpu` / `requests.cpu` as `ceil(milli / divisor milli)` (divisor default `1`),
/// `limits.memory` / `requests.memory` / `*.ephemeral-storage` as `ceil(bytes / divisor)`.
/// An unset limit is the node's capacity; an unset request is the limit, else 0.
///
/// # Errors
/// `unsupported container resource : <r>`; a missing container or a malformed quantity.
pub(crate) fn container_resource(
    pod: &Pod,
    container_name: &str,
    selector: &ResourceFieldSelector,
) -> Result<String, String> {
    let container = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .find(|c| c.name == container_name)
        .ok_or_else(|| format!("container {container_name} not found"))?;
    let (kind, name) = selector
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", selector.resource))?;
    if !matches!(kind, "limits" | "requests")
        || !matches!(name, "cpu" | "memory" | "ephemeral-storage")
    {
        return Err(format!(
            "unsupported container resource : {}",
            selector.resource
        ));
    }
    let scale = if name == "cpu" { 3 } else { 0 };
    let parse = |q: &str| parse_scaled(q, scale).ok_or_else(|| format!("invalid quantity {q:?}"));
    let res = container.resources.as_ref();
    let limit = res
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get(name));
    let request = res
        .and_then(|r| r.requests.as_ref())
        .and_then(|l| l.get(name));
    let value = match (kind, request, limit) {
        ("limits", _, Some(l)) => parse(&l.0)?,
        ("limits", _, None) => host_capacity(name),
        (_, Some(r), _) | (_, None, Some(r)) => parse(&r.0)?,
        _ => 0,
    };
    // A zero (or unset) divisor means 1, as in the kubelet.
    let divisor = match selector.divisor.as_ref().filter(|d| !d.0.is_empty()) {
        Some(d) => parse(&d.0)?,
        None => 0,
    };
    let divisor = if divisor == 0 { parse("1")? } else { divisor };
    Ok(value.div_ceil(divisor).to_string())
}
