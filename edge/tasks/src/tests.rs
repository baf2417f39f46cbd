use std::collections::BTreeMap;

use verge_container_runtime::fake::FakeRuntime;
use verge_core::task::{PrePull, RegistryAuth};

use crate::prepull;
use crate::report;

fn pull(images: &[&str], retries: u32) -> PrePull {
    PrePull {
        images: images.iter().map(|i| (*i).to_owned()).collect(),
        auths: BTreeMap::from([(
            "registry.local:5000".to_owned(),
            RegistryAuth {
                username: "u".into(),
                password: "p".into(),
            },
        )]),
        retries,
    }
}

#[tokio::test(start_paused = true)]
async fn a_prepull_reports_each_image_and_retries() {
    let runtime = FakeRuntime::new("edge-1");
    runtime.add_image("busybox:1.36");
    runtime.fail_pull("registry.local:5000/gone:1", "manifest unknown");
    let check = report::step("Check", None);
    let out = prepull::run(
        &runtime,
        &pull(
            &[
                "busybox:1.36",
                "registry.local:5000/app:1",
                "registry.local:5000/gone:1",
            ],
            2,
        ),
        check,
    )
    .await;
    assert_eq!(out.phase, "Failure");
    assert_eq!(out.reason, "not pulled: registry.local:5000/gone:1");
    let states: Vec<(&str, &str)> = out
        .image_status
        .iter()
        .map(|i| (i.image.as_str(), i.status.as_str()))
        .collect();
    assert_eq!(
        states,
        [
            ("busybox:1.36", "True"),
            ("registry.local:5000/app:1", "True"),
            ("registry.local:5000/gone:1", "False")
        ]
    );
    let pulls: Vec<String> = runtime
        .take_calls()
        .into_iter()
        .filter(|c| c.starts_with("pull "))
        .collect();
    assert_eq!(
        pulls,
        [
            "pull registry.local:5000/app:1",
            "pull registry.local:5000/gone:1",
            "pull registry.local:5000/gone:1",
            "pull registry.local:5000/gone:1"
        ],
        "present images are not pulled; a failing one is tried 1 + retries times"
    );
    let flow: Vec<(&str, &str)> = out
        .action_flow
        .iter()
        .map(|a| (a.action.as_str(), a.status.as_str()))
        .collect();
    assert_eq!(flow, [("Check", "True"), ("Pull", "False")]);
}

#[test]
fn registries_are_read_as_docker_does() {
    assert_eq!(prepull::registry_of("busybox"), "docker.io");
    assert_eq!(prepull::registry_of("library/busybox:1"), "docker.io");
    assert_eq!(prepull::registry_of("10.0.0.1:5000/app"), "10.0.0.1:5000");
    assert_eq!(prepull::registry_of("localhost/app"), "localhost");
}
