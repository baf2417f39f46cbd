//! The in-place resize half of [`DockerRuntime`]: updating a container's CPU and memory
//! settings (Docker `ContainerUpdate`, what cri-dockerd does for the kubelet's CRI
//! `UpdateContainerResources`) and reading its memory usage (Docker stats, one shot).

use bollard::models::ContainerUpdateBody;
use bollard::query_parameters::StatsOptions;
use futures::StreamExt as _;

use super::Result;
use super::docker::{DockerRuntime, err};
use super::docker_convert::NANO_CPUS_PERIOD;
use super::types::LinuxResources;

/// Docker's update body for `r`. `nano` says the container's CPU limit is held as
/// `NanoCpus` (created by an earlier edgecore): Docker refuses to set a CFS quota or period
/// on such a container, so the limit is given as `NanoCpus` too (quota × 10⁹ / period).
/// Settings `r` leaves out stay as they are (Docker: 0 = unchanged); the swap limit follows
/// the memory limit.
pub(super) fn update_body(r: &LinuxResources, nano: bool) -> ContainerUpdateBody {
    let period = r.cpu_period.unwrap_or(NANO_CPUS_PERIOD).max(1);
    let (cpu_period, cpu_quota, nano_cpus) = match r.cpu_quota {
        None => (None, None, None),
        Some(quota) if nano => (
            None,
            None,
            Some(quota.saturating_mul(1_000_000_000) / period),
        ),
        Some(quota) => (Some(period), Some(quota), None),
    };
    ContainerUpdateBody {
        cpu_shares: r.cpu_shares,
        cpu_period,
        cpu_quota,
        nano_cpus,
        memory: r.memory,
        memory_swap: r.memory,
        ..ContainerUpdateBody::default()
    }
}

/// See [`ContainerRuntime::update_resources`](crate::ContainerRuntime::update_resources).
pub(super) async fn update(rt: &DockerRuntime, id: &str, r: &LinuxResources) -> Result<()> {
    let current = rt
        .docker
        .inspect_container(id, None)
        .await
        .map_err(err(format!("inspect {id}")))?;
    let nano = current
        .host_config
        .as_ref()
        .and_then(|h| h.nano_cpus)
        .is_some_and(|n| n > 0);
    rt.docker
        .update_container(id, update_body(r, nano))
        .await
        .map_err(err(format!("update {id}")))
}

/// See [`ContainerRuntime::memory_usage`](crate::ContainerRuntime::memory_usage).
pub(super) async fn memory_usage(rt: &DockerRuntime, id: &str) -> Result<Option<u64>> {
    let options = StatsOptions {
        stream: false,
        one_shot: true,
    };
    let mut stats = rt.docker.stats(id, Some(options));
    match stats.next().await {
        Some(Ok(s)) => Ok(s.memory_stats.and_then(|m| m.usage)),
        Some(Err(e)) => Err(err(format!("stats {id}"))(e)),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_bodies_set_quota_or_nano_cpus_and_no_swap() {
        let r = LinuxResources {
            cpu_shares: Some(25),
            cpu_period: Some(100_000),
            cpu_quota: Some(3500),
            memory: Some(50 << 20),
        };
        let b = update_body(&r, false);
        assert_eq!(
            (b.cpu_period, b.cpu_quota, b.nano_cpus),
            (Some(100_000), Some(3500), None)
        );
        assert_eq!(
            (b.cpu_shares, b.memory, b.memory_swap),
            (Some(25), Some(50 << 20), Some(50 << 20))
        );
        let b = update_body(&r, true);
        assert_eq!(
            (b.cpu_period, b.cpu_quota, b.nano_cpus),
            (None, None, Some(35_000_000))
        );
        let none = update_body(&LinuxResources::default(), true);
        assert_eq!(
            (none.cpu_quota, none.nano_cpus, none.memory),
            (None, None, None)
        );
    }
}
