//! emptyDir `medium: Memory` on tmpfs, fsGroup ownership and `subPathExpr`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};

use serde_json::json;

use super::*;
use crate::volumes::binds::expand_sub_path;

/// Whether `p` is a mount point of this process.
fn mounted(p: &Path) -> bool {
    let p = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    text.lines()
        .any(|l| l.split(' ').nth(4) == Some(p.to_str().expect("utf-8")))
}

#[tokio::test]
async fn memory_empty_dir_is_a_tmpfs_until_cleanup() {
    let (d, _objects, m) = manager();
    let p = pod(
        json!([{"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]),
        json!([]),
    );
    let vols = m.prepare(&p).await.expect("prepare");
    let dir = vols.host_path("m").expect("m").to_owned();
    // Not root: a plain directory (and a warning); as root, a 1 MiB tmpfs.
    if mounted(&dir) {
        let mounts = std::fs::read_to_string("/proc/self/mounts").expect("mounts");
        let canonical = std::fs::canonicalize(&dir).expect("canonical");
        let line = mounts
            .lines()
            .find(|l| l.split(' ').nth(1) == canonical.to_str())
            .expect("line");
        assert!(
            line.starts_with("tmpfs ") && line.contains("size=1024k"),
            "{line}"
        );
        std::fs::write(dir.join("f"), "x").expect("write");
        // Idempotent: a second set-up (an edgecore restart) does not stack a mount.
        m.prepare(&p).await.expect("again");
        assert_eq!(read(&dir.join("f")), "x", "same tmpfs");
        let count = std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .lines()
            .filter(|l| l.split(' ').nth(4) == canonical.to_str())
            .count();
        assert_eq!(count, 1);
    }
    m.cleanup("u-1").await.expect("cleanup");
    assert!(!mounted(&dir), "unmounted");
    assert!(!d.path().join("pods/u-1").exists());

    let bad = pod(
        json!([{"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "1e6"}}]),
        json!([]),
    );
    let err = m.prepare(&bad).await.expect_err("1e6").to_string();
    assert!(
        err.contains("sizeLimit \"1e6\" is not a supported quantity"),
        "{err}"
    );
    m.cleanup("u-1").await.expect("cleanup");
}

#[tokio::test]
async fn fs_group_owns_volumes() {
    let (d, objects, m) = manager();
    // Root may give any group; otherwise our own primary group.
    let meta = std::fs::metadata(d.path()).expect("meta");
    let gid = if meta.uid() == 0 { 2000 } else { meta.gid() };
    objects.put_config_map(
        json!({"metadata": {"name": "cfg", "namespace": "ns"}, "data": {"k": "v"}}),
    );
    let volumes = json!([
        {"name": "e", "emptyDir": {}},
        {"name": "c", "configMap": {"name": "cfg", "defaultMode": 0o400}},
        {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
        {"name": "h", "hostPath": {"path": d.path().join("host"), "type": "DirectoryOrCreate"}},
    ]);
    let mut p = pod(volumes, json!([]));
    let spec = p.spec.as_mut().expect("spec");
    spec.security_context = Some(
        serde_json::from_value(json!({"fsGroup": gid, "fsGroupChangePolicy": "OnRootMismatch"}))
            .expect("sc"),
    );
    let vols = m.prepare(&p).await.expect("prepare");
    let gid_of = |p: &Path| std::fs::metadata(p).expect("meta").gid();
    let e = vols.host_path("e").expect("e").to_owned();
    assert_eq!((mode(&e), gid_of(&e)), (0o2777, gid));
    let c = vols.host_path("c").expect("c").to_owned();
    assert_eq!((mode(&c), gid_of(&c)), (0o2755, gid));
    assert_eq!((mode(&c.join("k")), gid_of(&c.join("k"))), (0o440, gid));
    let token = vols.host_path("t").expect("t").join("token");
    assert_eq!(
        (mode(&token), gid_of(&token)),
        (0o640, gid),
        "token 0600 + group read"
    );
    assert_eq!(mode(&d.path().join("host")), 0o755, "hostPath untouched");
    let data = std::fs::read_link(c.join("..data")).expect("..data");
    m.refresh(&p).await.expect("refresh");
    assert_eq!(
        std::fs::read_link(c.join("..data")).expect("..data"),
        data,
        "group modes count as unchanged"
    );

    // OnRootMismatch: the root is right, so the tree is not walked again...
    let f = e.join("f");
    std::fs::write(&f, "x").expect("write");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    m.prepare(&p).await.expect("prepare again");
    assert_eq!(mode(&f), 0o600);
    // ... while Always (the default) walks it.
    let spec = p.spec.as_mut().expect("spec");
    spec.security_context = Some(serde_json::from_value(json!({"fsGroup": gid})).expect("sc"));
    m.prepare(&p).await.expect("prepare always");
    assert_eq!((mode(&f), gid_of(&f)), (0o660, gid));
    m.cleanup("u-1").await.expect("cleanup");
}

#[test]
fn sub_path_expr_expansion() {
    let env = ["POD=web", "NS=ns", "EMPTY=", "POD=web-2"].map(String::from);
    assert_eq!(
        expand_sub_path("$(NS)/$(POD)/$$(POD)", &env)
            .ok()
            .as_deref(),
        Some("ns/web-2/$(POD)"),
        "later wins, $$ escapes"
    );
    assert_eq!(
        expand_sub_path("$(NOPE)/$(EMPTY)/$(POD)/$(NOPE)", &env).map_err(|e| e.to_string()),
        Err("missing value for EMPTY, NOPE".to_owned())
    );
}

#[tokio::test]
async fn binds_with_sub_path_expr() {
    let (d, _objects, m) = manager();
    let mount = |m: serde_json::Value| -> k8s_openapi::api::core::v1::VolumeMount {
        serde_json::from_value(m).expect("mount")
    };
    let p = pod(
        json!([{"name": "e", "emptyDir": {}}]),
        json!([{"name": "e", "mountPath": "/logs", "subPathExpr": "logs/$(POD_NAME)"}]),
    );
    let vols = m.prepare(&p).await.expect("prepare");
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let env = [
        "POD_NAME=web".to_owned(),
        "UP=..".to_owned(),
        "ABS=/etc".to_owned(),
    ];
    let e = d.path().join("pods/u-1/volumes/e");
    if super::safe_sub_path::root() {
        let pin = d.path().join("pods/u-1/volume-subpaths/e/c/0");
        assert_eq!(
            vols.binds_for(c, &env).await.expect("binds"),
            [format!("{}:/logs", pin.display())]
        );
        assert!(e.join("logs/web").is_dir(), "expanded subPath created");
    }

    let mut bad = c.clone();
    for (m, want) in [
        (
            json!({"name": "e", "mountPath": "/x", "subPathExpr": "$(UP)/x"}),
            "must be a relative path without '..'",
        ),
        (
            json!({"name": "e", "mountPath": "/x", "subPathExpr": "$(ABS)"}),
            "must be a relative path without '..'",
        ),
        (
            json!({"name": "e", "mountPath": "/x", "subPathExpr": "$(GONE)"}),
            "missing value for GONE",
        ),
        (
            json!({"name": "e", "mountPath": "/x", "subPath": "a", "subPathExpr": "b"}),
            "subPathExpr and subPath are mutually exclusive",
        ),
    ] {
        bad.volume_mounts = Some(vec![mount(m)]);
        let err = vols
            .binds_for(&bad, &env)
            .await
            .expect_err(want)
            .to_string();
        assert!(err.contains(want), "{err}");
    }
    assert!(!d.path().join("pods/u-1/volumes/etc").exists());
    m.cleanup("u-1").await.expect("cleanup");
}

#[tokio::test]
async fn orphaned_pod_dirs_are_removed_and_unmounted() {
    let (d, _objects, m) = manager();
    let p = pod(
        json!([{"name": "m", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]),
        json!([]),
    );
    let vols = m.prepare(&p).await.expect("prepare");
    let tmpfs = vols.host_path("m").expect("m").to_owned();
    std::fs::create_dir_all(d.path().join("pods/live-uid/volumes")).expect("live dir");

    let live = HashSet::from(["live-uid".to_owned()]);
    assert_eq!(m.cleanup_orphaned_dirs(&live).await, 1);
    assert!(!d.path().join("pods/u-1").exists(), "orphan removed");
    assert!(!mounted(&tmpfs), "its tmpfs unmounted");
    assert!(
        d.path().join("pods/live-uid/volumes").exists(),
        "live pod kept"
    );
    assert_eq!(m.cleanup_orphaned_dirs(&live).await, 0);
}
