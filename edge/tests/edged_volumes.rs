//! edged volumes against the real Docker engine: a pod with `fsGroup` and
//! `supplementalGroups`, an emptyDir `medium: Memory` (a tmpfs with its `sizeLimit`), an
//! emptyDir mounted with `subPathExpr` from a `fieldRef` variable and a downwardAPI file
//! readable only through the fsGroup; after the pod's deletion the tmpfs is unmounted and
//! the pod directory removed. An image volume of a local two-layer image under `pullPolicy:
//! Always` with its registry unreachable (the local image is used), mounted whole and by a
//! `subPath`, read-only. The harness is in `edged_common`.

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

/// Removes a test's image even when it fails.
struct RemoveImage(String);

impl Drop for RemoveImage {
    fn drop(&mut self) {
        let _ = Command::new("docker").args(["rmi", "-f", &self.0]).output();
    }
}

/// The upstream spec `ImageVolume should succeed with pod and pull policy of Always`, on an
/// edge node without its registry: the image is made locally (two layers: `docker import`,
/// then a file added by `docker commit`) under a registry on a closed loopback port, so the
/// pull under `Always` cannot reach it and the local image is used
/// (`ImagePullFailedUsingLocal`). The container reads the image's files at the mount and
/// through a `subPath`, and cannot write them. On an engine without image mounts (Docker
/// before 28) edged mounts the layers itself; they are unmounted with the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_volume_with_pull_policy_always_offline() -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut h = Harness::new()?;
    let uid = uid("imgvol");
    let _cleanup = Cleanup(uid.clone());
    let reference = format!("localhost:1/verge-test/image-volume:{uid}");
    let _image = RemoveImage(reference.clone());
    let root = tempfile::tempdir()?;
    std::fs::create_dir_all(root.path().join("etc"))?;
    std::fs::write(
        root.path().join("data.json"),
        "{\"image\": \"kitten.jpg\"}\n",
    )?;
    std::fs::write(
        root.path().join("etc/os-release"),
        "NAME=\"Alpine Linux\"\n",
    )?;
    verge_testkit::docker::import_rootfs(root.path(), &reference, &["CMD [\"none\"]"])?;
    let layer = format!("imgvol-layer-{uid}");
    docker(&["create", "--name", &layer, &reference])?;
    let added = root.path().join("added");
    std::fs::write(&added, "second layer\n")?;
    let committed = docker(&[
        "cp",
        &added.display().to_string(),
        &format!("{layer}:/added"),
    ])
    .and_then(|_| docker(&["commit", &layer, &reference]));
    docker(&["rm", "-f", &layer])?;
    committed?;

    let pod_dir = std::fs::canonicalize(&h.config.data_dir)?
        .join("pods")
        .join(&uid);
    let _unmount = Unmount(pod_dir.clone());
    let spec = json!({"terminationGracePeriodSeconds": 0,
    "volumes": [{"name": "volume", "image": {"reference": reference, "pullPolicy": "Always"}}],
    "containers": [{"name": "app", "image": TEST_IMAGE, "imagePullPolicy": "Never",
        "command": ["sleep", "3600"],
        "volumeMounts": [
            {"name": "volume", "mountPath": "/volume"},
            {"name": "volume", "mountPath": "/etc2", "subPath": "etc"},
        ]}]});
    let key = h.put(&pod("imgvol", &uid, spec), "1")?;
    let s = h.status("imgvol", |s| running(s, "app")).await?;
    let id = docker_id(&s, "app")?;
    let exec = |script: &str| docker(&["exec", &id, "sh", "-c", script]);
    assert!(exec("cat /volume/data.json")?.contains("kitten.jpg"));
    assert!(exec("cat /volume/etc/os-release")?.contains("Alpine Linux"));
    assert!(exec("cat /etc2/os-release")?.contains("Alpine Linux"));
    assert_eq!(exec("cat /volume/added")?, "second layer");
    assert!(exec("touch /volume/x").is_err(), "read-only");
    assert!(exec("touch /etc2/x").is_err(), "read-only");
    h.event(
        "imgvol",
        "ImagePullFailedUsingLocal",
        "the registry is unreachable",
    )
    .await?;
    let image_id = docker(&["image", "inspect", "-f", "{{.Id}}", &reference])?;
    let label = docker(&[
        "inspect",
        "-f",
        "{{index .Config.Labels \"io.verge.image-volumes\"}}",
        &id,
    ])?;
    assert_eq!(label, image_id, "the image is in use for image GC");

    h.delete(&key, &uid)?;
    h.deleted("imgvol", &uid).await?;
    assert_eq!(mounts_under(&pod_dir), Vec::<String>::new());
    assert!(!pod_dir.exists(), "pod directory removed");
    assert_eq!(
        docker(&["image", "inspect", "-f", "{{.Id}}", &reference])?,
        image_id,
        "the image's layers are untouched"
    );
    h.restart().await
}
