//! A container's CPU and memory as the kubelet turns them into cgroup settings and back:
//! `kuberuntime_container_linux.go` (`calculateLinuxResources`, `toKubeContainerResources`),
//! `pkg/kubelet/cm/helpers_linux.go` (shares and quota conversions) and `qos/policy.go`
//! (`GetContainerOOMScoreAdjust`). Container creation ([`crate::spec`]) and in-place resize
//! ([`crate::resize`]) use the same conversions:
//!
//! * `requests.cpu` -> CPU shares: millicores × 1024 / 1000, within 2..=262144; no request
//!   gives the shares of the limit if there is one, else 2.
//! * `limits.cpu` -> CFS quota over a 100 ms period: millicores × 100, at least 1 ms; no
//!   limit leaves the quota unset.
//! * `limits.memory` -> the memory limit in bytes (swap limited to the same); `requests.memory`
//!   is not a cgroup setting.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

use crate::quantity::{format_cpu, parse_scaled};
use verge_container_runtime::LinuxResources;

/// CPU shares of one CPU.
pub const SHARES_PER_CPU: i64 = 1024;
/// The fewest CPU shares (kernel minimum; what a container without a CPU request gets).
pub const MIN_SHARES: i64 = 2;
/// The most CPU shares.
pub const MAX_SHARES: i64 = 262_144;
/// The CFS period of every container, microseconds (100 ms).
pub const QUOTA_PERIOD: i64 = 100_000;
/// The smallest CFS quota the kernel takes, microseconds (1 ms).
pub const MIN_QUOTA: i64 = 1000;
/// The smallest CPU limit the quota can express, millicores (kubelet `MinMilliCPULimit`).
pub const MIN_MILLI_CPU_LIMIT: i64 = MIN_QUOTA * 1000 / QUOTA_PERIOD;

/// The four values in-place resize compares (kubelet: `resourceRequirements`): millicores
/// and bytes, 0 when unset. Equal quantities written differently (`1000m`, `1`) are equal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resources {
    /// `requests.cpu`, millicores.
    pub cpu_request: i64,
    /// `limits.cpu`, millicores.
    pub cpu_limit: i64,
    /// `requests.memory`, bytes.
    pub memory_request: i64,
    /// `limits.memory`, bytes.
    pub memory_limit: i64,
}

/// `name` of `list`, scaled by 10^`scale` (rounded up, as `MilliValue`); `None` when absent
/// or malformed.
fn get(list: Option<&BTreeMap<String, Quantity>>, name: &str, scale: u32) -> Option<i64> {
    let q = list?.get(name)?;
    parse_scaled(&q.0, scale).and_then(|v| i64::try_from(v).ok())
}

impl Resources {
    /// The values of `r` (`None`: all 0).
    pub fn of(r: Option<&ResourceRequirements>) -> Self {
        let (req, lim) = (
            r.and_then(|r| r.requests.as_ref()),
            r.and_then(|r| r.limits.as_ref()),
        );
        Self {
            cpu_request: get(req, "cpu", 3).unwrap_or(0),
            cpu_limit: get(lim, "cpu", 3).unwrap_or(0),
            memory_request: get(req, "memory", 0).unwrap_or(0),
            memory_limit: get(lim, "memory", 0).unwrap_or(0),
        }
    }

    /// The cgroup settings of these values, as the kubelet builds them for an update (every
    /// value given, 0 included: no CPU request gives [`MIN_SHARES`]).
    pub fn linux(&self) -> LinuxResources {
        linux_of(Some(self.cpu_request), self.cpu_limit, self.memory_limit)
    }
}

/// CPU shares of `milli` millicores (kubelet `MilliCPUToShares`): 0 gives [`MIN_SHARES`].
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    (milli.saturating_mul(SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The CFS quota of `milli` millicores over [`QUOTA_PERIOD`] (kubelet `MilliCPUToQuota`): at
/// least [`MIN_QUOTA`]; 0 for no limit.
pub fn milli_cpu_to_quota(milli: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli.saturating_mul(QUOTA_PERIOD) / 1000).max(MIN_QUOTA)
}

/// Millicores of `shares` (kubelet `SharesToMilliCPU`, rounded up): 0 below [`MIN_SHARES`].
pub fn shares_to_milli_cpu(shares: i64) -> i64 {
    if shares < MIN_SHARES {
        return 0;
    }
    (shares.saturating_mul(1000) + SHARES_PER_CPU - 1) / SHARES_PER_CPU
}

/// Millicores of a CFS quota over `period` (kubelet `QuotaToMilliCPU`): 0 for no quota.
pub fn quota_to_milli_cpu(quota: i64, period: i64) -> i64 {
    if quota <= 0 || period <= 0 {
        return 0;
    }
    quota.saturating_mul(1000) / period
}

/// The settings of a CPU request (`None`: not given), CPU limit and memory limit (0: none).
fn linux_of(cpu_request: Option<i64>, cpu_limit: i64, memory_limit: i64) -> LinuxResources {
    let shares = match cpu_request {
        None if cpu_limit > 0 => milli_cpu_to_shares(cpu_limit),
        request => milli_cpu_to_shares(request.unwrap_or(0)),
    };
    let quota = Some(milli_cpu_to_quota(cpu_limit)).filter(|q| *q > 0);
    LinuxResources {
        cpu_shares: Some(shares),
        cpu_period: quota.map(|_| QUOTA_PERIOD),
        cpu_quota: quota,
        memory: Some(memory_limit).filter(|m| *m > 0),
    }
}

/// The cgroup settings of a new container with `r` (kubelet `calculateLinuxResources`).
pub fn linux(r: Option<&ResourceRequirements>) -> LinuxResources {
    let values = Resources::of(r);
    let request = get(r.and_then(|r| r.requests.as_ref()), "cpu", 3);
    linux_of(request, values.cpu_limit, values.memory_limit)
}

/// What a container's cgroup settings say of its resources (kubelet
/// `toKubeContainerResources`): millicores and bytes, `None` when unset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Applied {
    /// From the CPU shares.
    pub cpu_request: Option<i64>,
    /// From the CFS quota and period.
    pub cpu_limit: Option<i64>,
    /// The memory limit.
    pub memory_limit: Option<i64>,
}

/// Reads `l` back as requests and limits.
pub fn applied(l: &LinuxResources) -> Applied {
    let cpu_limit = match (l.cpu_quota, l.cpu_period) {
        (Some(q), Some(p)) => Some(quota_to_milli_cpu(q, p)),
        _ => None,
    };
    Applied {
        cpu_request: l.cpu_shares.map(shares_to_milli_cpu).filter(|m| *m > 0),
        cpu_limit: cpu_limit.filter(|m| *m > 0),
        memory_limit: l.memory.filter(|m| *m > 0),
    }
}

/// `milli` millicores as a quantity (`"25m"`, `"2"`).
pub fn cpu_quantity(milli: i64) -> Quantity {
    Quantity(format_cpu(u64::try_from(milli).unwrap_or(0)))
}

/// `bytes` as a quantity with the largest exact binary suffix (`"35Mi"`, `"1000"`).
pub fn memory_quantity(bytes: i64) -> Quantity {
    const SUFFIXES: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
    for (i, suffix) in SUFFIXES.iter().enumerate() {
        let unit = 1i64 << (10 * (6 - i));
        if bytes != 0 && bytes % unit == 0 {
            return Quantity(format!("{}{suffix}", bytes / unit));
        }
    }
    Quantity(bytes.to_string())
}

/// The OOM score adjustment of `container` of `pod` on a node with `memory_capacity`
/// bytes (kubelet `GetContainerOOMScoreAdjust`): -997 for node-critical and Guaranteed pods,
/// 1000 for BestEffort ones; for Burstable ones 1000 - 1000 × memory request / capacity
/// within 3..=999, a sidecar's no higher than that of the regular container requesting the
/// least memory. `None` without a known capacity.
pub fn oom_score_adj(pod: &Pod, container: &Container, memory_capacity: i64) -> Option<i64> {
    const GUARANTEED: i64 = -997;
    const BEST_EFFORT: i64 = 1000;
    let spec = pod.spec.as_ref()?;
    if spec.priority_class_name.as_deref() == Some("system-node-critical") {
        return Some(GUARANTEED);
    }
    match crate::status::build::qos_class(pod) {
        "Guaranteed" => return Some(GUARANTEED),
        "BestEffort" => return Some(BEST_EFFORT),
        _ => {}
    }
    if memory_capacity <= 0 {
        return None;
    }
    let score = |request: i64| 1000 - request.saturating_mul(1000) / memory_capacity;
    let mut adj = score(Resources::of(container.resources.as_ref()).memory_request);
    let sidecar = crate::pod_worker::state::is_sidecar(container)
        && spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| c.name == container.name);
    if sidecar {
        let least = spec
            .containers
            .iter()
            .map(|c| Resources::of(c.resources.as_ref()).memory_request)
            .min()
            .unwrap_or(0);
        adj = adj.min(score(least));
    }
    Some(if adj < 1000 + GUARANTEED {
        1000 + GUARANTEED
    } else if adj == BEST_EFFORT {
        BEST_EFFORT - 1
    } else {
        adj
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn requirements(v: serde_json::Value) -> ResourceRequirements {
        serde_json::from_value(v).expect("resources")
    }

    #[test]
    fn conversions_follow_the_kubelet() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(25), 25);
        assert_eq!(milli_cpu_to_shares(1000), 1024);
        assert_eq!(milli_cpu_to_shares(1_000_000), MAX_SHARES);
        assert_eq!(milli_cpu_to_quota(0), 0);
        assert_eq!(milli_cpu_to_quota(5), 1000, "at least 1 ms");
        assert_eq!(milli_cpu_to_quota(35), 3500);
        assert_eq!(shares_to_milli_cpu(25), 25);
        assert_eq!(shares_to_milli_cpu(1), 0);
        assert_eq!(quota_to_milli_cpu(3500, QUOTA_PERIOD), 35);
        assert_eq!(quota_to_milli_cpu(-1, QUOTA_PERIOD), 0);
        // Shares round-trip for every request the quota can express exactly.
        for m in 2..2000 {
            assert_eq!(shares_to_milli_cpu(milli_cpu_to_shares(m)), m, "{m}m");
        }
    }

    #[test]
    fn requirements_become_cgroup_settings_and_back() {
        let r = requirements(json!({"requests": {"cpu": "20m", "memory": "35Mi"},
            "limits": {"cpu": "30m", "memory": "45Mi"}}));
        let l = linux(Some(&r));
        assert_eq!(
            l,
            LinuxResources {
                cpu_shares: Some(20),
                cpu_period: Some(QUOTA_PERIOD),
                cpu_quota: Some(3000),
                memory: Some(45 << 20),
            }
        );
        let a = applied(&l);
        assert_eq!(
            (a.cpu_request, a.cpu_limit, a.memory_limit),
            (Some(20), Some(30), Some(45 << 20))
        );
        assert_eq!(Resources::of(Some(&r)).linux(), l);
        // A limit without a request: the shares of the limit; nothing: the minimum.
        let limit_only = requirements(json!({"limits": {"cpu": "1"}}));
        assert_eq!(linux(Some(&limit_only)).cpu_shares, Some(1024));
        assert_eq!(linux(None).cpu_shares, Some(MIN_SHARES));
        assert_eq!((linux(None).cpu_quota, linux(None).memory), (None, None));
        let equal = Resources::of(Some(&requirements(json!({"requests": {"cpu": "1000m"}}))));
        let same = Resources::of(Some(&requirements(json!({"requests": {"cpu": "1"}}))));
        assert_eq!(equal, same);
    }

    #[test]
    fn quantities_are_written_as_the_kubelet_writes_them() {
        assert_eq!(cpu_quantity(25).0, "25m");
        assert_eq!(cpu_quantity(2000).0, "2");
        assert_eq!(memory_quantity(35 << 20).0, "35Mi");
        assert_eq!(memory_quantity(10 << 10).0, "10Ki");
        assert_eq!(memory_quantity(1000).0, "1000");
    }

    #[test]
    fn oom_score_adjustment_by_qos() {
        let pod = |res: serde_json::Value| -> Pod {
            serde_json::from_value(
                json!({"spec": {"containers": [{"name": "c", "resources": res}]}}),
            )
            .expect("pod")
        };
        let adj =
            |p: &Pod| oom_score_adj(p, &p.spec.as_ref().expect("spec").containers[0], 1 << 30);
        let guaranteed = pod(json!({"limits": {"cpu": "1", "memory": "64Mi"}}));
        assert_eq!(adj(&guaranteed), Some(-997));
        assert_eq!(adj(&pod(json!({}))), Some(1000));
        // 256Mi of 1Gi: 1000 - 250.
        assert_eq!(
            adj(&pod(json!({"requests": {"memory": "256Mi"}}))),
            Some(750)
        );
        assert_eq!(adj(&pod(json!({"requests": {"cpu": "1"}}))), Some(999));
        assert_eq!(adj(&pod(json!({"requests": {"memory": "2Gi"}}))), Some(3));
    }
}
