//! Unit tests of image volumes against [`FakeRuntime`](verge_container_runtime::fake::FakeRuntime):
//! the pull by the volume's policy with its events, the mounts planned for an engine that
//! mounts images and for one that does not (edged mounts the layers), `subPath`, failures,
//! and `Always` with an unreachable registry.

use serde_json::json;
use verge_container_runtime::ImageMount;
use verge_container_runtime::labels::IMAGE_VOLUMES;

use super::tests::{IMAGE, harness, pod, settle, status, waiting_reason};

const KITTEN: &str = "registry.example/kitten:1.8";
const DNS_FAILURE: &str = "Get \"https://registry.example/v2/\": dial tcp: lookup \
                           registry.example on 10.255.255.53:53: no such host";

fn image_pod(policy: &str, mounts: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
    pod(json!({
        "restartPolicy": "Always",
        "volumes": [{"name": "volume", "image": {"reference": KITTEN, "pullPolicy": policy}}],
        "containers": [{"name": "app", "image": IMAGE, "volumeMounts": mounts}],
    }))
}

fn has(events: &[(String, String)], reason: &str, message: &str) -> bool {
    events
        .iter()
        .any(|(r, m)| r == reason && m.starts_with(message))
}

/// The upstream spec `ImageVolume should succeed with pod and pull policy of Always`: the
/// image is pulled, then mounted whole (and by a subPath) read-only by the engine, and the
/// container carries its id for image garbage collection.
#[tokio::test(start_paused = true)]
async fn an_engine_that_mounts_images_gets_image_mounts() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    let p = image_pod(
        "Always",
        json!([{"name": "volume", "mountPath": "/volume"},
               {"name": "volume", "mountPath": "/etc-of-kitten", "subPath": "etc"}]),
    );
    let mut w = h.worker(&p);
    let _ = settle(&mut w).await;
    let app = h.rt.instances("app");
    assert_eq!(app.len(), 1, "started");
    let id = format!("sha256:{KITTEN}");
    assert_eq!(
        app[0].spec.image_mounts,
        [
            ImageMount {
                image: id.clone(),
                target: "/volume".into(),
                sub_path: None,
            },
            ImageMount {
                image: id.clone(),
                target: "/etc-of-kitten".into(),
                sub_path: Some("etc".into()),
            },
        ]
    );
    assert_eq!(app[0].spec.labels.get(IMAGE_VOLUMES), Some(&id));
    assert!(app[0].spec.binds.iter().all(|b| !b.contains("/volume")));
    let pulls: Vec<String> =
        h.rt.take_calls()
            .into_iter()
            .filter(|c| c.starts_with("pull "))
            .collect();
    assert_eq!(
        pulls,
        [format!("pull {KITTEN}")],
        "the app's image is present"
    );
    let events = h.events();
    assert!(has(
        &events,
        "Pulling",
        &format!("Pulling image \"{KITTEN}\"")
    ));
    let pulled = format!("Successfully pulled image \"{KITTEN}\"");
    assert!(has(&events, "Pulled", &pulled), "{events:?}");
}

/// A volume image that cannot be pulled keeps the containers mounting it from starting:
/// `ErrImagePull` with the pull's message, then `ImagePullBackOff`; they start once it can.
#[tokio::test(start_paused = true)]
async fn a_volume_image_that_cannot_be_pulled_holds_its_containers() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    h.rt.fail_pull(KITTEN, "manifest unknown");
    let p = image_pod(
        "IfNotPresent",
        json!([{"name": "volume", "mountPath": "/v"}]),
    );
    let mut w = h.worker(&p);
    let _ = settle(&mut w).await;
    assert_eq!(waiting_reason(&w, "app").as_deref(), Some("ErrImagePull"));
    let msg = status(&w, "app").state.and_then(|s| s.waiting?.message);
    let expected = format!("failed to pull image \"{KITTEN}\": manifest unknown");
    assert_eq!(msg.as_deref(), Some(expected.as_str()));
    assert!(h.rt.instances("app").is_empty());
    let events = h.events();
    let failed = format!("Failed to pull image \"{KITTEN}\": manifest unknown");
    assert!(has(&events, "Failed", &failed), "{events:?}");
    assert!(has(&events, "Failed", "Error: ErrImagePull"), "{events:?}");

    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    w.sync().await.expect("sync");
    assert_eq!(
        waiting_reason(&w, "app").as_deref(),
        Some("ImagePullBackOff")
    );
    h.rt.heal_pull(KITTEN);
    tokio::time::advance(std::time::Duration::from_secs(10)).await;
    let _ = settle(&mut w).await;
    assert_eq!(h.rt.instances("app").len(), 1, "started once pulled");
}

/// Edge: under `Always`, a registry that cannot be reached does not hold back a container
/// whose images are on the node; a `Warning` event says the local image is used.
#[tokio::test(start_paused = true)]
async fn always_with_an_unreachable_registry_uses_the_local_images() {
    let mut h = harness();
    for image in [IMAGE, KITTEN] {
        h.rt.add_image(image);
        h.rt.fail_pull(image, DNS_FAILURE);
    }
    let mut p = image_pod("Always", json!([{"name": "volume", "mountPath": "/v"}]));
    if let Some(c) = p.spec.as_mut().map(|s| &mut s.containers[0]) {
        c.image_pull_policy = Some("Always".into());
    }
    let mut w = h.worker(&p);
    let _ = settle(&mut w).await;
    assert_eq!(h.rt.instances("app").len(), 1, "started offline");
    let events = h.events();
    for image in [KITTEN, IMAGE] {
        let msg = format!(
            "Failed to pull image \"{image}\": the registry is unreachable ({DNS_FAILURE}); \
             using the image present on the node"
        );
        assert!(
            has(&events, "ImagePullFailedUsingLocal", &msg),
            "{events:?}"
        );
    }
    assert!(!events.iter().any(|(r, _)| r == "Failed"), "{events:?}");

    // An answer of the registry still fails the pull.
    let h = harness();
    h.rt.add_image(IMAGE);
    h.rt.add_image(KITTEN);
    h.rt.fail_pull(KITTEN, "unauthorized: authentication required");
    let mut w = h.worker(&p);
    let _ = settle(&mut w).await;
    assert_eq!(waiting_reason(&w, "app").as_deref(), Some("ErrImagePull"));
}

/// A subPath climbing out of the image is refused before anything is created
/// (`CreateContainerConfigError`, as any subPath with `..`).
#[tokio::test(start_paused = true)]
async fn an_image_sub_path_with_dot_dot_is_refused() {
    let mut h = harness();
    h.rt.add_image(IMAGE);
    let p = image_pod(
        "IfNotPresent",
        json!([{"name": "volume", "mountPath": "/v", "subPath": "../etc"}]),
    );
    let mut w = h.worker(&p);
    let _ = settle(&mut w).await;
    assert_eq!(
        waiting_reason(&w, "app").as_deref(),
        Some("CreateContainerConfigError")
    );
    assert!(h.rt.instances("app").is_empty());
    let _ = h.events();
}

/// An engine without image mounts (Docker before 28): edged mounts the image's layers
/// read-only under the pod directory and binds them; a subPath must be a directory of the
/// image (missing: `CreateContainerError` with `ImageVolumeMountFailed`). Mounting needs root.
#[tokio::test(start_paused = true)]
async fn an_engine_without_image_mounts_gets_binds_of_the_mounted_layers() {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let mut h = harness();
    h.rt.add_image(IMAGE);
    h.rt.set_image_mounts(false);
    let kitten = "kitten";
    h.rt.add_image(kitten);
    let layers = tempfile::tempdir().expect("layers");
    let (upper, lower) = (layers.path().join("2"), layers.path().join("1"));
    std::fs::create_dir_all(upper.join("etc")).expect("upper");
    std::fs::create_dir_all(&lower).expect("lower");
    std::fs::write(upper.join("etc/os-release"), "Alpine Linux").expect("write");
    std::fs::write(lower.join("data.json"), "kitten.jpg").expect("write");
    h.rt.set_image_layers(kitten, vec![upper, lower]);
    let p = pod(json!({
        "restartPolicy": "Always",
        "volumes": [{"name": "volume", "image": {"reference": kitten, "pullPolicy": "Never"}}],
        "containers": [
            {"name": "app", "image": IMAGE, "volumeMounts": [
                {"name": "volume", "mountPath": "/volume"},
                {"name": "volume", "mountPath": "/etc2", "subPath": "etc"}]},
            {"name": "missing", "image": IMAGE, "volumeMounts": [
                {"name": "volume", "mountPath": "/v", "subPath": "not-existing"}]}],
    }));
    let mut w = h.worker(&p);
    let _ = settle(&mut w).await;
    let pod_dir = h.ctx.config.pods_dir().join("u-1");
    let mounted = pod_dir.join("volume-images/kitten");
    assert_eq!(
        std::fs::read_to_string(mounted.join("data.json")).expect("mounted"),
        "kitten.jpg"
    );
    assert!(std::fs::write(mounted.join("x"), "").is_err(), "read-only");
    let app = h.rt.instances("app");
    assert_eq!(app.len(), 1, "started");
    assert!(app[0].spec.image_mounts.is_empty());
    let pin = pod_dir.join("volume-subpaths/volume/app/1");
    let expected = [
        format!("{}:/volume:ro", mounted.display()),
        format!("{}:/etc2:ro", pin.display()),
    ];
    for bind in &expected {
        assert!(app[0].spec.binds.contains(bind), "{:?}", app[0].spec.binds);
    }
    assert_eq!(
        std::fs::read_to_string(pin.join("os-release")).expect("pinned"),
        "Alpine Linux"
    );
    assert_eq!(
        app[0].spec.labels.get(IMAGE_VOLUMES).map(String::as_str),
        Some("sha256:kitten")
    );
    assert_eq!(
        waiting_reason(&w, "missing").as_deref(),
        Some("CreateContainerError")
    );
    let msg = status(&w, "missing").state.and_then(|s| s.waiting?.message);
    let msg = msg.unwrap_or_default();
    assert!(
        msg.starts_with(
            "ImageVolumeMountFailed: volume \"volume\" of container \"missing\": failed to \
             ensure image subpath \"not-existing\""
        ),
        "{msg}"
    );
    assert!(!mounted.join("not-existing").exists(), "never created");
    let _ = h.events();
    h.ctx.volumes.cleanup("u-1").await.expect("cleanup");
    assert!(!pod_dir.exists());
    assert!(
        layers.path().join("1/data.json").exists(),
        "the layers stay"
    );
}
