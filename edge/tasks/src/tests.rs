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
    assert_eq!(
        verge_container_runtime::image::registry_of("busybox"),
        "docker.io"
    );
    assert_eq!(
        verge_container_runtime::image::registry_of("library/busybox:1"),
        "docker.io"
    );
    assert_eq!(
        verge_container_runtime::image::registry_of("10.0.0.1:5000/app"),
        "10.0.0.1:5000"
    );
    assert_eq!(
        verge_container_runtime::image::registry_of("localhost/app"),
        "localhost"
    );
}

/// A configuration change whose edgecore never reconnects is rolled back: the backup is
/// restored, edgecore restarts, and the restarted one reports the failure with the steps.
#[tokio::test(start_paused = true)]
async fn an_unconfirmed_config_change_is_rolled_back_then_reported() {
    use crate::pending::{Change, Pending, Stage, TaskFiles};
    use crate::report::Reporter;
    use crate::restart::Restart;

    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("edgecore.yaml");
    let backup = dir.path().join("edgecore.yaml.backup");
    std::fs::write(&config, "edged:\n  maxPods: 57\n").expect("new");
    std::fs::write(&backup, "edged:\n  maxPods: 110\n").expect("old");
    let files = TaskFiles::new(dir.path());
    let pending = Pending {
        task: "configupdatejob.pods".into(),
        uid: "u1".into(),
        version: "1".into(),
        stage: Stage::Applied,
        change: Change::Config {
            config: config.clone(),
            backup: backup.clone(),
        },
        timeout_seconds: 5,
        boots: 0,
        steps: vec![
            report::step("Check", None),
            report::step("BackUp", None),
            report::step("Update", None),
        ],
        reason: String::new(),
    };
    files.set_pending(Some(&pending)).expect("pending");
    // A detached hub never announces a session: edgecore "does not come back".
    let (hub, mut upstream) = verge_edgehub::EdgeHubHandle::detached(8);
    let reporter = Reporter::new(hub.clone());
    let restart = Restart::default();
    let resume = |restart| crate::resume::Resume {
        files: &files,
        reporter: &reporter,
        sessions: hub.sessions(),
        restart,
        running: None,
    };
    let ended = crate::resume::resume(pending, resume(&restart)).await;
    assert_eq!(ended, None, "a roll-back restarts before it reports");
    assert!(restart.requested());
    assert_eq!(
        std::fs::read_to_string(&config).expect("config"),
        "edged:\n  maxPods: 110\n"
    );
    let rolled = files.pending().expect("readable").expect("still pending");
    assert_eq!(rolled.stage, Stage::RolledBack);
    assert!(rolled.reason.contains("within 5s"), "{}", rolled.reason);

    // The restarted edgecore reports it and forgets it.
    let restart = Restart::default();
    let ended = crate::resume::resume(rolled, resume(&restart)).await;
    assert_eq!(
        ended,
        Some(("configupdatejob.pods".into(), "u1".into(), "1".into()))
    );
    assert!(!restart.requested());
    assert_eq!(files.pending(), Ok(None));
    let message = upstream.recv().await.expect("a report");
    let body: verge_core::task::NodeTaskReport =
        serde_json::from_slice(&message.body).expect("a report body");
    assert_eq!(body.phase, "Failure");
    assert!(body.reason.starts_with("rolled back: "), "{}", body.reason);
    let steps: Vec<(&str, &str)> = body
        .action_flow
        .iter()
        .map(|s| (s.action.as_str(), s.status.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            ("Check", "True"),
            ("BackUp", "True"),
            ("Update", "False"),
            ("RollBack", "True")
        ]
    );
}

/// A trial binary that died before it was connected: the supervisor starts the installed
/// binary, which finds the trial pending, removes it and reports the roll-back with the
/// version still running.
#[tokio::test(start_paused = true)]
async fn an_upgrade_whose_trial_died_is_rolled_back_by_the_installed_binary() {
    use crate::pending::{Change, Pending, Stage, TaskFiles};
    use crate::report::Reporter;
    use crate::restart::Restart;

    let dir = tempfile::tempdir().expect("tempdir");
    let installed = dir.path().join("edgecore");
    let (_, staged) = crate::upgrade::paths(&installed);
    std::fs::write(&installed, b"old").expect("installed");
    std::fs::write(&staged, b"broken").expect("staged");
    let files = TaskFiles::new(dir.path());
    let pending = Pending {
        task: "nodeupgradejob.fleet".into(),
        uid: "u1".into(),
        version: "2".into(),
        stage: Stage::Applied,
        change: Change::Upgrade {
            installed: installed.clone(),
            staged: staged.clone(),
            from_version: "v0.1.0".into(),
            to_version: "v0.2.0".into(),
            requested_at_ms: 0,
        },
        timeout_seconds: 60,
        boots: 0,
        steps: vec![
            report::step("Check", None),
            report::step("BackUp", None),
            report::step("Upgrade", None),
        ],
        reason: String::new(),
    };
    files.set_pending(Some(&pending)).expect("pending");
    let (hub, mut upstream) = verge_edgehub::EdgeHubHandle::detached(8);
    let reporter = Reporter::new(hub.clone());
    let restart = Restart::default();
    let resume = crate::resume::Resume {
        files: &files,
        reporter: &reporter,
        sessions: hub.sessions(),
        restart: &restart,
        running: Some(installed.clone()),
    };
    let ended = crate::resume::resume(pending, resume).await;
    assert_eq!(
        ended,
        Some(("nodeupgradejob.fleet".into(), "u1".into(), "2".into()))
    );
    assert!(!restart.requested(), "the installed binary runs on");
    assert!(!staged.exists(), "the trial binary is removed");
    assert_eq!(std::fs::read(&installed).expect("installed"), b"old");
    assert_eq!(files.pending(), Ok(None));
    let message = upstream.recv().await.expect("a report");
    let body: verge_core::task::NodeTaskReport =
        serde_json::from_slice(&message.body).expect("a report body");
    assert_eq!(body.phase, "Failure");
    assert_eq!(body.current_version, "v0.1.0");
    assert!(
        body.reason.contains("exited before it was connected"),
        "{}",
        body.reason
    );
    let last = body.action_flow.last().map(|s| s.action.as_str());
    assert_eq!(last, Some("RollBack"));
}
