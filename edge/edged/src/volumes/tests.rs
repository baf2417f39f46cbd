use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::*;
use crate::Error;
use crate::objects::fake::FakeObjects;

mod cluster_trust_bundle;
mod pod_certificate_volume;
mod safe_sub_path;
mod tmpfs_fs_group_sub_path_expr;

fn pod(volumes: serde_json::Value, mounts: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": { "name": "web", "namespace": "ns", "uid": "u-1",
            "labels": { "b": "2", "a": "1" } },
        "spec": { "containers": [{ "name": "c", "volumeMounts": mounts,
            "resources": { "limits": { "memory": "32Mi" } } }], "volumes": volumes },
    }))
    .expect("pod")
}

/// A test's temporary directory; whatever is still mounted under it (a tmpfs of a secret
/// or projected volume of a test that does not clean up, a pin) is unmounted before it is
/// removed.
pub(super) struct TestDir(tempfile::TempDir);

impl TestDir {
    pub(super) fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = mounts::unmount_under(self.0.path());
    }
}

fn manager() -> (TestDir, Arc<FakeObjects>, VolumeManager<FakeObjects>) {
    let dir = TestDir(tempfile::tempdir().expect("tempdir"));
    let objects = Arc::new(FakeObjects::default());
    let m = VolumeManager::new(dir.path().join("pods"), Arc::clone(&objects))
        .with_memory_mount(super::mount_for_tests);
    (dir, objects, m)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).expect("read")
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("meta").permissions().mode() & 0o7777
}

#[tokio::test]
async fn config_map_volume_updates_atomically() {
    let (_d, objects, m) = manager();
    objects.put_config_map(json!({"metadata": {"name": "cfg", "namespace": "ns"},
        "data": {"a": "1", "b": "2"}}));
    let p = pod(
        json!([{"name": "v", "configMap": {"name": "cfg", "defaultMode": 0o600}}]),
        json!([]),
    );
    let vols = m.prepare(&p).await.expect("prepare");
    let dir = vols.host_path("v").expect("v").to_owned();
    assert_eq!(
        (read(&dir.join("a")), read(&dir.join("b"))),
        ("1".into(), "2".into())
    );
    assert_eq!(mode(&dir.join("a")), 0o600);
    assert_eq!(
        std::fs::read_link(dir.join("a")).expect("link"),
        Path::new("..data/a")
    );
    let first = std::fs::read_link(dir.join("..data")).expect("..data");

    m.refresh(&p).await.expect("unchanged refresh");
    assert_eq!(
        std::fs::read_link(dir.join("..data")).expect("..data"),
        first,
        "no rewrite"
    );

    objects.put_config_map(json!({"metadata": {"name": "cfg", "namespace": "ns"},
        "data": {"a": "one", "c": "3"}}));
    m.refresh(&p).await.expect("refresh");
    let second = std::fs::read_link(dir.join("..data")).expect("..data");
    assert_ne!(second, first, "..data swapped");
    assert!(second.to_string_lossy().starts_with(".."));
    assert!(!dir.join(&first).exists(), "old version removed");
    assert_eq!(
        (read(&dir.join("a")), read(&dir.join("c"))),
        ("one".into(), "3".into())
    );
    assert!(
        std::fs::symlink_metadata(dir.join("b")).is_err(),
        "removed key gone"
    );
    assert!(!dir.join("..data_tmp").exists());
}

#[tokio::test]
async fn secret_items_optional_and_missing() {
    let (_d, objects, m) = manager();
    objects.put_secret(json!({"metadata": {"name": "s", "namespace": "ns"},
        "data": {"k": "aGk="}}));
    let p = pod(
        json!([
            {"name": "s", "secret": {"secretName": "s", "items": [{"key": "k", "path": "sub/file", "mode": 0o400}]}},
            {"name": "o", "secret": {"secretName": "gone", "optional": true}},
        ]),
        json!([]),
    );
    let vols = m.prepare(&p).await.expect("prepare");
    let f = vols.host_path("s").expect("s").join("sub/file");
    assert_eq!((read(&f), mode(&f)), ("hi".into(), 0o400));
    let empty = vols.host_path("o").expect("o");
    assert!(
        empty.join("..data").exists(),
        "optional missing secret: empty volume"
    );

    for (volume, want) in [
        (
            json!({"name": "x", "secret": {"secretName": "gone"}}),
            "secret \"gone\" not found",
        ),
        (
            json!({"name": "x", "secret": {"secretName": "s", "items": [{"key": "no", "path": "p"}]}}),
            "secret references non-existent secret key: no",
        ),
        (
            json!({"name": "x", "configMap": {"name": "nope"}}),
            "configmap \"nope\" not found",
        ),
        (
            // Sources are read at once; the failure reported is the first in source order.
            json!({"name": "x", "projected": {"sources": [
                {"secret": {"name": "s"}}, {"secret": {"name": "first-gone"}},
                {"configMap": {"name": "second-gone"}}]}}),
            "secret \"first-gone\" not found",
        ),
    ] {
        let err = m
            .prepare(&pod(json!([volume]), json!([])))
            .await
            .expect_err(want);
        assert_eq!(
            err.to_string(),
            format!("MountVolume.SetUp failed for volume \"x\" : {want}")
        );
    }
}

#[tokio::test]
async fn empty_dir_and_host_path_types() {
    let (d, _objects, m) = manager();
    let host = d.path().join("host");
    let (dir, file) = (host.join("made/dir"), host.join("file"));
    let p = pod(
        json!([
            {"name": "e", "emptyDir": {"medium": "Memory"}},
            {"name": "hd", "hostPath": {"path": dir, "type": "DirectoryOrCreate"}},
            {"name": "hf", "hostPath": {"path": file, "type": "FileOrCreate"}},
            {"name": "hu", "hostPath": {"path": host.join("whatever")}},
        ]),
        json!([]),
    );
    let vols = m.prepare(&p).await.expect("prepare");
    let e = vols.host_path("e").expect("e");
    assert_eq!(e, d.path().join("pods/u-1/volumes/e"));
    // A tmpfs (mode 1777) as root, else a plain directory (0777).
    assert_eq!(mode(e) & 0o777, 0o777);
    assert!(dir.is_dir() && file.is_file());
    assert_eq!(vols.host_path("hd"), Some(dir.as_path()));

    for (ty, path, want) in [
        ("Directory", host.join("missing"), "is not a directory"),
        ("File", dir.clone(), "is not a file"),
        ("Socket", file.clone(), "is not a socket file"),
        ("Bogus", file.clone(), "Bogus is an invalid volume type"),
    ] {
        let p = pod(
            json!([{"name": "h", "hostPath": {"path": path, "type": ty}}]),
            json!([]),
        );
        let err = m.prepare(&p).await.expect_err(ty).to_string();
        assert!(err.contains(want), "{err}");
    }
    m.cleanup("u-1").await.expect("cleanup");
    assert!(!d.path().join("pods/u-1").exists());
}

#[tokio::test]
async fn downward_api_and_projected_with_token_refresh() {
    let (_d, objects, m) = manager();
    objects.put_config_map(
        json!({"metadata": {"name": "kube-root-ca.crt", "namespace": "ns"},
        "data": {"ca.crt": "CA"}}),
    );
    let start = 1_000_000;
    *objects.now_s.lock().expect("lock") = start;
    let p = pod(
        json!([
            {"name": "d", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}}]}},
            {"name": "api", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "audience": "api"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
        ]),
        json!([]),
    );
    let t0 = UNIX_EPOCH + Duration::from_secs(u64::try_from(start).expect("start"));
    let vols = m.write_all(&p, t0, true).await.expect("prepare");
    let d = vols.host_path("d").expect("d");
    assert_eq!(read(&d.join("labels")), "a=\"1\"\nb=\"2\"");
    assert_eq!(
        (read(&d.join("name")), read(&d.join("mem"))),
        ("web".into(), "32".into())
    );
    let api = vols.host_path("api").expect("api").to_owned();
    assert_eq!(read(&api.join("token")), "token-1");
    assert_eq!(
        (read(&api.join("ca.crt")), read(&api.join("namespace"))),
        ("CA".into(), "ns".into())
    );

    assert_eq!(m.next_refresh("u-1"), Some(t0 + Duration::from_secs(2880)));
    // Before 80% of 3600 s: the cached token, nothing rewritten.
    let data = std::fs::read_link(api.join("..data")).expect("..data");
    m.refresh_at(&p, t0 + Duration::from_secs(2879))
        .await
        .expect("refresh");
    assert_eq!(*objects.tokens_issued.lock().expect("lock"), 1);
    assert_eq!(
        std::fs::read_link(api.join("..data")).expect("..data"),
        data
    );
    // After 80%: a new token, written atomically.
    m.refresh_at(&p, t0 + Duration::from_secs(2881))
        .await
        .expect("refresh");
    assert_eq!(read(&api.join("token")), "token-2");
    assert_ne!(
        std::fs::read_link(api.join("..data")).expect("..data"),
        data
    );
    // The cloud unreachable: the old token is kept until it expires, then the refresh fails.
    *objects.fail_tokens.lock().expect("lock") = true;
    let later = |s| t0 + Duration::from_secs(s);
    m.refresh_at(&p, later(3000)).await.expect("kept");
    assert_eq!(read(&api.join("token")), "token-2");
    let expired = m.refresh_at(&p, later(3601)).await;
    assert!(
        matches!(&expired, Err(VolumeError::Objects(e)) if matches!(**e, Error::EdgeHub(verge_edgehub::Error::HubStopped))),
        "{expired:?}"
    );
}

#[tokio::test]
async fn binds_with_read_only_and_sub_path_then_cleanup() {
    let (d, objects, m) = manager();
    objects.put_config_map(
        json!({"metadata": {"name": "cfg", "namespace": "ns"}, "data": {"f": "x"}}),
    );
    let mounts = json!([
        {"name": "e", "mountPath": "/data"},
        {"name": "e", "mountPath": "/logs", "subPath": "logs/app", "readOnly": true},
        {"name": "c", "mountPath": "/etc/f", "subPath": "f"},
    ]);
    let p = pod(
        json!([{"name": "e", "emptyDir": {}}, {"name": "c", "configMap": {"name": "cfg"}}]),
        mounts,
    );
    let vols = m.prepare(&p).await.expect("prepare");
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let e = d.path().join("pods/u-1/volumes/e");
    let pins = d.path().join("pods/u-1/volume-subpaths");
    if safe_sub_path::root() {
        assert_eq!(
            vols.binds_for(c, &[]).await.expect("binds"),
            [
                format!("{}:/data", e.display()),
                format!("{}/e/c/1:/logs:ro", pins.display()),
                format!("{}/c/c/2:/etc/f:ro", pins.display()),
            ]
        );
        assert!(e.join("logs/app").is_dir(), "subPath created");
        // The configMap key (`f -> ..data/f -> ..<ts>/f`) is pinned as a file.
        assert_eq!(read(&pins.join("c/c/2")), "x");
    }

    let mut bad = c.clone();
    bad.volume_mounts = Some(vec![
        serde_json::from_value(json!({"name": "e", "mountPath": "/x", "subPath": "../up"}))
            .expect("m"),
    ]);
    assert!(vols.binds_for(&bad, &[]).await.is_err());
    bad.volume_mounts = Some(vec![
        serde_json::from_value(json!({"name": "nope", "mountPath": "/x"})).expect("m"),
    ]);
    let err = vols
        .binds_for(&bad, &[])
        .await
        .expect_err("unknown volume")
        .to_string();
    assert_eq!(
        err,
        "cannot find volume \"nope\" to mount into container \"c\""
    );

    m.cleanup("u-1").await.expect("cleanup");
    assert!(!d.path().join("pods/u-1").exists());
    m.cleanup("u-1").await.expect("cleanup again");
}
