//! [`GcConfig`]: the garbage collection settings (kubelet: `KubeletConfiguration`'s
//! `imageGC*` fields and the container GC policy flags).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Container and image garbage collection settings; every field optional in YAML.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default, rename_all = "camelCase")]
pub struct GcConfig {
    /// How often both collections run (the kubelet runs container GC every minute, image GC
    /// every five). Default `1m`.
    #[serde(with = "humantime_serde")]
    #[serde(rename = "gcPeriod")]
    pub gc_period: Duration,
    /// Dead containers younger than this (by creation time) are kept (kubelet
    /// `--minimum-container-ttl-duration`). Default `1m`.
    #[serde(with = "humantime_serde")]
    #[serde(rename = "minimumGCAge")]
    pub minimum_gc_age: Duration,
    /// Dead instances kept per (pod, container name) of pods that still exist; negative =
    /// unlimited (kubelet `--maximum-dead-containers-per-container`). Default 1.
    pub max_per_pod_container: i32,
    /// Dead containers kept on the node in total; negative = unlimited (kubelet
    /// `--maximum-dead-containers`). Default -1.
    pub max_containers: i32,
    /// Image GC starts when the image filesystem (Docker's root directory) is at least this
    /// full, in percent; 100 disables image GC (kubelet `imageGCHighThresholdPercent`).
    /// Default 85.
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: u8,
    /// Image GC frees space until the filesystem is at most this full, in percent (kubelet
    /// `imageGCLowThresholdPercent`). Default 80.
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: u8,
    /// Images first seen (by this edgecore) less than this long ago are never deleted (kubelet
    /// `imageMinimumGCAge`). Default `2m`.
    #[serde(with = "humantime_serde")]
    #[serde(rename = "imageMinimumGCAge")]
    pub image_minimum_gc_age: Duration,
    /// Images never deleted, by reference (`busybox`, `busybox:1.36`, `repo/name:tag`: only
    /// that tag is kept) or by id (`sha256:…`: the whole image is kept). edged's pod infra image
    /// belongs here (kubelet: the sandbox image is pinned). Default none.
    pub pinned_images: Vec<String>,
}

impl Default for GcConfig {
    fn default() -> Self {
        Self {
            gc_period: Duration::from_secs(60),
            minimum_gc_age: Duration::from_secs(60),
            max_per_pod_container: 1,
            max_containers: -1,
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            pinned_images: Vec::new(),
        }
    }
}

impl GcConfig {
    /// Checks the values that parse but cannot work.
    ///
    /// # Errors
    /// A description of the first bad field: a threshold above 100, low above high, or a zero
    /// `gcPeriod`.
    pub fn validate(&self) -> Result<(), String> {
        let (high, low) = (
            self.image_gc_high_threshold_percent,
            self.image_gc_low_threshold_percent,
        );
        if high > 100 {
            return Err(format!(
                "imageGCHighThresholdPercent must be at most 100, got {high}"
            ));
        }
        if low > high {
            return Err(format!(
                "imageGCLowThresholdPercent ({low}) must not exceed imageGCHighThresholdPercent ({high})"
            ));
        }
        if self.gc_period.is_zero() {
            return Err("gcPeriod must be positive".to_owned());
        }
        Ok(())
    }
}

/// `reference` in the form Docker lists in `RepoTags`: `:latest` added when there is no tag,
/// `docker.io/library/` and `docker.io/` dropped. Ids (`sha256:…`) are returned unchanged.
pub(crate) fn normalize_reference(reference: &str) -> String {
    if reference.starts_with("sha256:") {
        return reference.to_owned();
    }
    let short = reference
        .strip_prefix("docker.io/library/")
        .or_else(|| reference.strip_prefix("docker.io/"))
        .unwrap_or(reference);
    let name = short.rsplit('/').next().unwrap_or(short);
    if name.contains(':') || name.contains('@') {
        short.to_owned()
    } else {
        format!("{short}:latest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_yaml() -> anyhow::Result<()> {
        let c: GcConfig = serde_json::from_str(r#"{"gcPeriod":"30s","maxContainers":10}"#)?;
        assert_eq!(c.gc_period, Duration::from_secs(30));
        assert_eq!(c.max_containers, 10);
        assert_eq!(c.max_per_pod_container, 1);
        assert_eq!(c.image_gc_high_threshold_percent, 85);
        assert!(serde_json::from_str::<GcConfig>(r#"{"bogus":1}"#).is_err());
        assert!(c.validate().is_ok());
        let bad = GcConfig {
            image_gc_low_threshold_percent: 90,
            ..GcConfig::default()
        };
        assert!(bad.validate().is_err());
        Ok(())
    }

    #[test]
    fn references_normalize() {
        assert_eq!(normalize_reference("busybox"), "busybox:latest");
        assert_eq!(
            normalize_reference("docker.io/library/busybox:1"),
            "busybox:1"
        );
        assert_eq!(
            normalize_reference("localhost:5000/a/b"),
            "localhost:5000/a/b:latest"
        );
        assert_eq!(
            normalize_reference("verge-test/busybox:latest"),
            "verge-test/busybox:latest"
        );
        assert_eq!(normalize_reference("sha256:abc"), "sha256:abc");
    }
}
