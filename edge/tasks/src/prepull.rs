//! ImagePrePullJob on the node: each image pulled through the container runtime (as the
//! kubelet pulls, never through a shell), with the login of its registry from the job's pull
//! Secret, tried `1 + retries` times (2 s apart); an image already present is not pulled
//! again. The task succeeds when every image is present.

use std::time::Duration;

use verge_container_runtime::image::registry_of;
use verge_container_runtime::{ContainerRuntime, RegistryAuth};
use verge_core::task::{ActionReport, ImageReport, NodeTaskReport, PrePull};

use crate::report;

/// The pause between two tries of a failed pull.
const RETRY_PAUSE: Duration = Duration::from_secs(2);

/// Pulls `pull`'s images on `runtime` after the `check` step passed.
pub async fn run<R: ContainerRuntime>(
    runtime: &R,
    pull: &PrePull,
    check: ActionReport,
) -> NodeTaskReport {
    let mut images = Vec::new();
    for image in &pull.images {
        let failure = pull_one(runtime, pull, image).await.err();
        images.push(ImageReport {
            image: image.clone(),
            status: if failure.is_some() { "False" } else { "True" }.to_owned(),
            reason: failure.unwrap_or_default(),
        });
    }
    let failed: Vec<&str> = images
        .iter()
        .filter(|i| i.status != "True")
        .map(|i| i.image.as_str())
        .collect();
    let failure = (!failed.is_empty()).then(|| format!("not pulled: {}", failed.join(", ")));
    NodeTaskReport {
        phase: if failure.is_some() {
            "Failure"
        } else {
            "Successful"
        }
        .to_owned(),
        reason: failure.clone().unwrap_or_default(),
        action_flow: vec![check, report::step("Pull", failure)],
        image_status: images,
        ..NodeTaskReport::default()
    }
}

async fn pull_one<R: ContainerRuntime>(
    runtime: &R,
    pull: &PrePull,
    image: &str,
) -> Result<(), String> {
    if matches!(runtime.image_status(image).await, Ok(Some(_))) {
        return Ok(());
    }
    let registry = registry_of(image);
    let auth = pull.auths.get(registry).map(|login| RegistryAuth {
        username: Some(login.username.clone()),
        password: Some(login.password.clone()),
        server_address: Some(registry.to_owned()),
        identity_token: None,
    });
    let mut last = String::new();
    for attempt in 0..=pull.retries {
        if attempt > 0 {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        match runtime.pull_image(image, auth.clone()).await {
            Ok(()) => return Ok(()),
            Err(error) => last = error.to_string(),
        }
    }
    Err(last)
}
