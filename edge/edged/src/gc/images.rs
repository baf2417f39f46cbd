//! Image garbage collection (kubelet: `realImageGCManager`: `detectImages` and `freeSpace`).
//! An image is in use while a container exists that was created from it or mounts it as an
//! image volume (label [`IMAGE_VOLUMES`], the kubelet's `handleImageVolumes`).

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::config::normalize_reference;
use super::{GcConfig, GcError, runtime_err};
use verge_container_runtime::labels::IMAGE_VOLUMES;
use verge_container_runtime::{ContainerRuntime, ContainerSummary, ImageSummary, ListFilter};

/// What one image pass saw and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageGcReport {
    /// Usage of the image filesystem before the pass, percent (kubelet: `100 - available *
    /// 100 / capacity`); `None` when image GC is disabled (high threshold 100).
    pub usage_percent: Option<u8>,
    /// What was removed: tags (`repo:tag`) for tagged images, `sha256:` ids for untagged ones.
    pub removed: Vec<String>,
    /// Bytes freed by images that disappeared completely (untagging alone frees nothing).
    pub freed_bytes: u64,
}

#[derive(Debug, Clone, Copy)]
struct Record {
    first_detected: Instant,
    /// `None` = never seen in use by this edgecore (sorts first, like the kubelet's zero time).
    last_used: Option<Instant>,
}

/// In-memory image records and pinned references.
#[derive(Debug, Default)]
pub(super) struct ImageTracker {
    pinned: HashSet<String>,
    records: HashMap<String, Record>,
}

impl ImageTracker {
    pub fn new(pinned: &[String]) -> Self {
        let mut tracker = Self::default();
        tracker.pin(pinned);
        tracker
    }

    pub fn pin<S: AsRef<str>>(&mut self, references: impl IntoIterator<Item = S>) {
        self.pinned.extend(
            references
                .into_iter()
                .map(|r| normalize_reference(r.as_ref())),
        );
    }

    fn id_pinned(&self, id: &str) -> bool {
        self.pinned.contains(id) || self.pinned.contains(&format!("sha256:{id}"))
    }

    /// Records new images, marks those in use as used `now`, forgets images that are gone.
    fn detect(&mut self, images: &[ImageSummary], in_use: &HashSet<String>, now: Instant) {
        let present: HashSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
        self.records.retain(|id, _| present.contains(id.as_str()));
        for image in images {
            let record = self.records.entry(image.id.clone()).or_insert(Record {
                first_detected: now,
                last_used: None,
            });
            if in_use.contains(&image.id) {
                record.last_used = Some(now);
            }
        }
    }

    /// Unused, unpinned images first detected at least `min_age` ago, least recently used
    /// first, each with the references to remove (its unpinned tags, or its id if untagged).
    fn candidates<'a>(
        &self,
        images: &'a [ImageSummary],
        in_use: &HashSet<String>,
        min_age: std::time::Duration,
        now: Instant,
    ) -> Vec<(&'a ImageSummary, Vec<String>)> {
        let mut out: Vec<(&ImageSummary, Record, Vec<String>)> = Vec::new();
        for image in images {
            let Some(record) = self.records.get(&image.id) else {
                continue;
            };
            if in_use.contains(&image.id)
                || self.id_pinned(&image.id)
                || now.saturating_duration_since(record.first_detected) < min_age
            {
                continue;
            }
            let tags = tags_of(image);
            let refs: Vec<String> = if tags.is_empty() {
                vec![image.id.clone()]
            } else {
                tags.into_iter()
                    .filter(|t| !self.pinned.contains(&normalize_reference(t)))
                    .collect()
            };
            if !refs.is_empty() {
                out.push((image, *record, refs));
            }
        }
        out.sort_by_key(|(image, r, _)| (r.last_used, r.first_detected, image.id.clone()));
        out.into_iter()
            .map(|(image, _, refs)| (image, refs))
            .collect()
    }
}

/// The ids of the images `containers` use: each one's image and the images it mounts as
/// image volumes ([`IMAGE_VOLUMES`]).
fn images_in_use(containers: Vec<ContainerSummary>) -> HashSet<String> {
    let mut in_use = HashSet::new();
    for c in containers {
        if let Some(mounted) = c.labels.get(IMAGE_VOLUMES) {
            let ids = mounted.split(',').filter(|id| !id.is_empty());
            in_use.extend(ids.map(str::to_owned));
        }
        in_use.extend(c.image_id);
    }
    in_use
}

fn tags_of(image: &ImageSummary) -> Vec<String> {
    image
        .repo_tags
        .iter()
        .filter(|t| t.as_str() != "<none>:<none>")
        .cloned()
        .collect()
}

/// One image pass; see [`super::GarbageCollector::collect_images_once`].
pub(super) async fn collect<R: ContainerRuntime>(
    runtime: &R,
    config: &GcConfig,
    tracker: &mut ImageTracker,
) -> Result<ImageGcReport, GcError> {
    let images = runtime
        .list_images()
        .await
        .map_err(runtime_err("list images"))?;
    // Every container of the engine, whoever made it: their images are in use.
    let containers = runtime
        .list(&ListFilter::engine())
        .await
        .map_err(runtime_err("list containers"))?;
    let in_use = images_in_use(containers);
    let now = Instant::now();
    tracker.detect(&images, &in_use, now);

    let mut report = ImageGcReport::default();
    let (high, low) = (
        config.image_gc_high_threshold_percent,
        config.image_gc_low_threshold_percent,
    );
    if high >= 100 {
        return Ok(report);
    }
    let root = runtime
        .image_fs_root()
        .await
        .map_err(runtime_err("info"))?
        .unwrap_or_else(|| PathBuf::from("/var/lib/docker"));
    let (capacity, available) = tokio::task::spawn_blocking(move || filesystem_of(&root))
        .await
        .map_err(GcError::Blocking)?;
    if capacity == 0 {
        warn!("image filesystem has no capacity; skipping image garbage collection");
        return Ok(report);
    }
    let used = capacity.saturating_sub(available);
    let usage = 100u64.saturating_sub(available.saturating_mul(100) / capacity);
    report.usage_percent = Some(u8::try_from(usage).unwrap_or(100));
    if usage < u64::from(high) {
        debug!(usage, high, "image filesystem below the high threshold");
        return Ok(report);
    }
    let to_free = used.saturating_sub(capacity / 100 * u64::from(low));
    info!(
        usage,
        high, low, to_free, "image filesystem above the high threshold; removing unused images"
    );
    for (image, refs) in tracker.candidates(&images, &in_use, config.image_minimum_gc_age, now) {
        if report.freed_bytes >= to_free {
            break;
        }
        let mut all_removed = refs.len() == tags_of(image).len().max(1);
        for reference in refs {
            match runtime.remove_image(&reference).await {
                Ok(()) => {
                    info!(image = %reference, id = %image.id, "removed unused image");
                    report.removed.push(reference);
                }
                Err(error) => {
                    warn!(image = %reference, error = %verge_runtime::ErrorChain(&error), "cannot remove unused image");
                    all_removed = false;
                }
            }
        }
        if all_removed {
            report.freed_bytes = report
                .freed_bytes
                .saturating_add(u64::try_from(image.size).unwrap_or(0));
        }
    }
    Ok(report)
}

/// (capacity, available) in bytes of the filesystem whose mount point is the longest prefix of
/// `dir` (Docker's root directory); (0, 0) if none is found.
fn filesystem_of(dir: &std::path::Path) -> (u64, u64) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let Ok(disks) = sysinfo::Disks::new_with_refreshed_list() else {
        return (0, 0);
    };
    disks
        .iter()
        .filter(|d| dir.starts_with(d.mount_point()))
        .max_by_key(|d| d.mount_point().as_os_str().len())
        .map_or((0, 0), |d| (d.total_space(), d.available_space()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn image(id: &str, tags: &[&str]) -> ImageSummary {
        ImageSummary {
            id: id.into(),
            repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn images_mounted_as_image_volumes_are_in_use() {
        let container = |image: &str, volumes: Option<&str>| ContainerSummary {
            image_id: Some(image.to_owned()),
            labels: volumes
                .map(|v| (IMAGE_VOLUMES.to_owned(), v.to_owned()))
                .into_iter()
                .collect(),
            ..ContainerSummary::default()
        };
        let in_use = images_in_use(vec![
            container("sha256:busybox", Some("sha256:kitten,sha256:data")),
            container("sha256:app", None),
        ]);
        let mut ids: Vec<&str> = in_use.iter().map(String::as_str).collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            [
                "sha256:app",
                "sha256:busybox",
                "sha256:data",
                "sha256:kitten"
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn candidates_follow_age_use_and_pins() {
        let images = vec![
            image("sha256:used", &["app:1"]),
            image("sha256:old", &["old:1", "keep:me"]),
            image("sha256:dangling", &[]),
            image("sha256:pinned", &["other:1"]),
        ];
        let mut t = ImageTracker::new(&["keep:me".to_owned(), "sha256:pinned".to_owned()]);
        let in_use = HashSet::from(["sha256:used".to_owned()]);
        t.detect(&images, &in_use, Instant::now());
        assert!(
            t.candidates(&images, &in_use, Duration::from_secs(120), Instant::now())
                .is_empty()
        );
        tokio::time::advance(Duration::from_secs(121)).await;
        let c = t.candidates(&images, &in_use, Duration::from_secs(120), Instant::now());
        let refs: Vec<(&str, Vec<String>)> =
            c.iter().map(|(i, r)| (i.id.as_str(), r.clone())).collect();
        assert_eq!(
            refs,
            [
                ("sha256:dangling", vec!["sha256:dangling".to_owned()]),
                ("sha256:old", vec!["old:1".to_owned()])
            ]
        );
        // An image that was in use sorts after never-used ones.
        t.detect(&images, &HashSet::new(), Instant::now());
        let c = t.candidates(&images, &HashSet::new(), Duration::ZERO, Instant::now());
        assert_eq!(c.last().map(|(i, _)| i.id.as_str()), Some("sha256:used"));
    }
}
