//! edged volumes against the real Docker engine: a pod with `fsGroup` and
//! `supplementalGroups`, an emptyDir `medium: Memory` (a tmpfs with its `sizeLimit`), an
//! emptyDir mounted with `subPathExpr` from a `fieldRef` variable and a downwardAPI file
//! readable only through the fsGroup; after the pod's deletion the tmpfs is unmounted and
//! the pod directory removed. The harness is in `edged_common`.

mod edged_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Result;
use serde_json::json;
use verge_testkit::docker::TEST_IMAGE;

use edged_common::{Cleanup, Harness, SERIAL, docker, docker_id, pod, running, uid};

/// Lines of `/proc/self/mounts` whose mount point is under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    text.lines()
        .filter(|l| {
            l.split(' ')
                .nth(1)
                .is_some_and(|p| Path::new(p).starts_with(dir))
        })
        .map(str::to_owned)
        .collect()
}

/// Unmounts what a failed test left under the pod directory (the tempdir can go then).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        for line in mounts_under(&self.0) {
            if let Some(p) = line.split(' ').nth(1) {
                let _ = Command::new("umount").arg(p).output();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fs_group_memory_empty_dir_and_sub_path_expr() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("vols");
    let _cleanup = Cleanup(uid.clone());
    let pod_dir = std::fs::canonicalize(&h.config.data_dir)?
        .join("pods")
        .join(&uid);
    let _unmount = Unmount(pod_dir.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0,
    "securityContext": {"runAsUser": 1000, "fsGroup": 2000, "supplementalGroups": [3000]},
    "volumes": [
        {"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
        {"name": "logs", "emptyDir": {}},
        {"name": "info", "downwardAPI": {"defaultMode": 0o400,
            "items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}},
    ],
    "containers": [{"name": "app", "image": TEST_IMAGE, "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "volumeMounts": [
            {"name": "cache", "mountPath": "/cache"},
            {"name": "logs", "mountPath": "/logs", "subPathExpr": "$(POD_NAME)"},
            {"name": "info", "mountPath": "/info"},
        ]}]});
    let key = h.put(&pod("vols", &uid, spec), "1")?;
    let s = h.status("vols", |s| running(s, "app")).await?;
    let id = docker_id(&s, "app")?;
    let exec = |script: &str| docker(&["exec", &id, "sh", "-c", script]);

    // fsGroup and supplementalGroups are supplementary groups of the container's processes.
    let groups = exec("id -u; id -G")?;
    let mut lines = groups.lines();
    assert_eq!(lines.next(), Some("1000"));
    let gids: Vec<&str> = lines.next().unwrap_or_default().split(' ').collect();
    assert!(
        gids.contains(&"2000") && gids.contains(&"3000"),
        "groups: {gids:?}"
    );

    // /cache is a 16 MiB tmpfs, on the host too.
    let line = exec("grep ' /cache ' /proc/mounts")?;
    assert!(
        line.starts_with("tmpfs ") && line.contains("size=16384k"),
        "{line}"
    );
    let host = mounts_under(&pod_dir.join("volumes/cache"));
    assert!(
        host.len() == 1 && host[0].starts_with("tmpfs "),
        "host: {host:?}"
    );

    // User 1000 writes into both emptyDirs; new files get the fsGroup (setgid directories).
    assert_eq!(exec("echo a > /cache/f && stat -c %g /cache/f")?, "2000");
    assert_eq!(exec("echo b > /logs/f && stat -c %g /logs/f")?, "2000");
    assert_eq!(exec("stat -c '%a %g' /logs")?, "2777 2000");
    // A 0400 downwardAPI file: readable through the group.
    assert_eq!(exec("cat /info/name")?, "vols");
    assert_eq!(exec("stat -L -c '%a %g' /info/name")?, "440 2000");

    // The subPathExpr directory is named after the pod, inside the volume.
    let sub = pod_dir.join("volumes/logs/vols");
    assert!(sub.is_dir(), "{}", sub.display());
    assert_eq!(std::fs::read_to_string(sub.join("f"))?, "b\n");

    // Deletion: the tmpfs is unmounted and the pod directory removed.
    h.delete(&key, &uid)?;
    h.deleted("vols", &uid).await?;
    assert_eq!(mounts_under(&pod_dir), Vec::<String>::new());
    assert!(!pod_dir.exists(), "pod directory removed");
    h.restart().await
}
