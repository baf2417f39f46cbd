//! The checks before a task (KubeEdge's `checkItems`): `cpu` (use over one sampling interval),
//! `mem` (used of total memory) and `disk` (used of the filesystem holding edgecore's data
//! directory), each below [`MAX_USE_PERCENT`]. Read with `sysinfo`, on a blocking thread.

use std::path::Path;

use sysinfo::{Disks, System};
use verge_core::task::ActionReport;

use crate::report;

/// The highest use, in percent, a check accepts (KubeEdge's threshold).
pub const MAX_USE_PERCENT: f64 = 90.0;

/// Runs `items` and returns the `Check` step: `True` when every one passed (also for none),
/// else `False` with each failure (`mem use 93.1% >= 90%`) or unknown item.
pub async fn run(items: &[String], data_dir: &Path) -> ActionReport {
    let (items, dir) = (items.to_vec(), data_dir.to_path_buf());
    let failures = tokio::task::spawn_blocking(move || failures(&items, &dir))
        .await
        .unwrap_or_else(|e| vec![format!("the checks did not run: {e}")]);
    let failure = (!failures.is_empty()).then(|| failures.join("; "));
    report::step("Check", failure)
}

fn failures(items: &[String], data_dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for item in items {
        let used = match item.as_str() {
            "cpu" => cpu_use(),
            "mem" => memory_use(),
            "disk" => disk_use(data_dir),
            other => {
                out.push(format!("unknown check {other:?}"));
                continue;
            }
        };
        match used {
            Some(used) if used >= MAX_USE_PERCENT => {
                out.push(format!("{item} use {used:.1}% >= {MAX_USE_PERCENT}%"));
            }
            Some(_) => {}
            None => out.push(format!("{item} use cannot be read")),
        }
    }
    out
}

fn cpu_use() -> Option<f64> {
    let mut system = System::new().ok()?;
    system.refresh_cpu_usage();
    std::thread::sleep(sysinfo::MINIMUM_CPU_UPDATE_INTERVAL);
    system.refresh_cpu_usage();
    Some(f64::from(system.global_cpu_usage()))
}

fn memory_use() -> Option<f64> {
    let mut system = System::new().ok()?;
    system.refresh_memory();
    let total = system.total_memory();
    #[allow(clippy::cast_precision_loss, reason = "a percentage")]
    (total > 0).then(|| system.used_memory() as f64 * 100.0 / total as f64)
}

/// The use of the mounted filesystem whose mount point is the longest prefix of `dir`.
fn disk_use(dir: &Path) -> Option<f64> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let disks = Disks::new_with_refreshed_list().ok()?;
    let disk = disks
        .iter()
        .filter(|d| dir.starts_with(d.mount_point()))
        .max_by_key(|d| d.mount_point().as_os_str().len())?;
    let total = disk.total_space();
    #[allow(clippy::cast_precision_loss, reason = "a percentage")]
    (total > 0).then(|| (total - disk.available_space().min(total)) as f64 * 100.0 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_items_pass_and_unknown_ones_fail() {
        let dir = std::env::temp_dir();
        let step = run(&[], &dir).await;
        assert_eq!(
            (step.action.as_str(), step.status.as_str()),
            ("Check", "True")
        );
        let step = run(&["gpu".to_owned()], &dir).await;
        assert_eq!(step.status, "False");
        assert_eq!(step.reason, "unknown check \"gpu\"");
    }

    #[test]
    fn readings_are_percentages() {
        for used in [memory_use(), cpu_use()].into_iter().flatten() {
            assert!((0.0..=100.0).contains(&used), "{used}");
        }
    }
}
