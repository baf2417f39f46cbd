//! The steps of the tasks that change what edgecore runs with, up to the restart that applies
//! them: a ConfigUpdateJob ([`configure`], see [`crate::config_update`]) and a NodeUpgradeJob
//! ([`upgrade`], see [`crate::upgrade`]). Each either ends with a report (refused, or a step
//! failed; nothing changed) or leaves a [`Pending`] change and asks for the restart, after
//! which [`crate::resume`] confirms or rolls it back.

use tracing::info;
use verge_container_runtime::ContainerRuntime;
use verge_container_runtime::image::node_credentials;
use verge_core::task::{ActionReport, ConfigUpdate, NodeTask, NodeTaskReport, Upgrade};

use crate::pending::{Change, Pending, Stage};
use crate::report;
use crate::{Context, StoredTask, config_update, upgrade as binary};

/// A ConfigUpdateJob's steps up to the restart: the report when it ended before (refused, or
/// a step failed), `None` once edgecore restarts with the new file.
pub(crate) async fn configure<R: ContainerRuntime>(
    task: &StoredTask,
    spec: &NodeTask,
    update: &ConfigUpdate,
    check: ActionReport,
    context: &Context<R>,
) -> Option<NodeTaskReport> {
    let Some(file) = &context.env.config else {
        let reason = "edgecore runs without a configuration file (--config)".to_owned();
        return Some(report::failed(reason, vec![check]));
    };
    let (file, fields) = (file.clone(), update.fields.clone());
    let prepared = tokio::task::spawn_blocking(move || {
        let text = config_update::prepare(&file, &fields)?;
        config_update::back_up(&file)?;
        Ok::<_, String>((file, text))
    })
    .await
    .unwrap_or_else(|e| Err(e.to_string()));
    let (file, text) = match prepared {
        Ok(prepared) => prepared,
        Err(reason) => {
            let steps = vec![report::step("Check", Some(reason.clone()))];
            return Some(report::failed(reason, steps));
        }
    };
    let steps = vec![
        check,
        report::step("BackUp", None),
        report::step("Update", None),
    ];
    let change = Change::Config {
        config: file.path.clone(),
        backup: file.backup(),
    };
    let pending = pending(task, spec, change, steps.clone());
    if let Err(reason) = context.files.set_pending(Some(&pending)) {
        return Some(report::failed(reason, steps));
    }
    if let Err(reason) = config_update::write(&file, &text) {
        let _ = context.files.set_pending(None);
        return Some(report::failed(reason, steps));
    }
    info!(task = %task.name, "configuration written; edgecore restarts with it");
    restart(task, context, pending, None).await;
    None
}

/// A NodeUpgradeJob's steps up to the restart into the new binary: the report when it ended
/// before (no digest for this architecture, the pull or the binary failed; nothing changed),
/// `None` once edgecore restarts into it.
pub(crate) async fn upgrade<R: ContainerRuntime>(
    task: &StoredTask,
    spec: &NodeTask,
    up: &Upgrade,
    mut steps: Vec<ActionReport>,
    context: &Context<R>,
) -> Option<NodeTaskReport> {
    let failed = |steps: &mut Vec<ActionReport>, action: &str, reason: String| {
        steps.push(report::step(action, Some(reason.clone())));
        let mut report = report::failed(reason, std::mem::take(steps));
        report.current_version = binary::RUNNING_VERSION.to_owned();
        Some(report)
    };
    let Some(running) = context.env.binary.clone() else {
        let reason = "edgecore does not know the path of its binary".to_owned();
        return failed(&mut steps, "BackUp", reason);
    };
    let arch = binary::arch().unwrap_or(std::env::consts::ARCH);
    let Some(digest) = up.digests.get(arch) else {
        let reason = format!(
            "the job gives no image digest for {arch} (imageDigestGatter.{arch}): the binary \
             could not be verified"
        );
        return failed(&mut steps, "BackUp", reason);
    };
    let image = binary::pinned(&up.image, digest);
    let auth = node_credentials(&context.env.data_dir, &image);
    if let Err(e) = context.runtime.pull_image(&image, auth).await {
        let reason = format!("pulling {image}: {}", e.engine());
        return failed(&mut steps, "BackUp", reason);
    }
    let bytes = match context
        .runtime
        .read_image_file(&image, binary::BINARY_IN_IMAGE, binary::MAX_BINARY_BYTES)
        .await
    {
        Ok(bytes) => bytes,
        Err(e) => {
            let reason = format!(
                "reading {} of {image}: {}",
                binary::BINARY_IN_IMAGE,
                e.engine()
            );
            return failed(&mut steps, "BackUp", reason);
        }
    };
    let (installed, staged) = binary::paths(&running);
    let staging = {
        let staged = staged.clone();
        tokio::task::spawn_blocking(move || binary::stage(&staged, &bytes))
            .await
            .unwrap_or_else(|e| Err(e.to_string()))
    };
    if let Err(reason) = staging {
        return failed(&mut steps, "BackUp", reason);
    }
    let says = match binary::sanity_check(&staged).await {
        Ok(says) => says,
        Err(reason) => {
            binary::discard(&staged);
            return failed(&mut steps, "BackUp", reason);
        }
    };
    info!(task = %task.name, %image, new = %says, "new edgecore staged");
    let mut backed_up = report::step("BackUp", None);
    backed_up.reason = format!("{image} ({says}) staged beside {}", installed.display());
    steps.push(backed_up);
    steps.push(report::step("Upgrade", None));
    let change = Change::Upgrade {
        installed,
        staged: staged.clone(),
        from_version: binary::RUNNING_VERSION.to_owned(),
        to_version: format!("v{}", up.version),
        requested_at_ms: binary::now_ms(),
    };
    let pending = pending(task, spec, change, steps.clone());
    if let Err(reason) = context.files.set_pending(Some(&pending)) {
        binary::discard(&staged);
        return failed(&mut steps, "Upgrade", reason);
    }
    info!(task = %task.name, "edgecore restarts into the new binary on trial");
    restart(task, context, pending, Some(staged)).await;
    None
}

fn pending(
    task: &StoredTask,
    spec: &NodeTask,
    change: Change,
    steps: Vec<ActionReport>,
) -> Pending {
    Pending {
        task: task.name.to_string(),
        uid: task.uid.clone(),
        version: task.version.clone(),
        stage: Stage::Applied,
        change,
        timeout_seconds: spec.timeout_seconds,
        boots: 0,
        steps,
        reason: String::new(),
    }
}

/// Reports the steps so far and asks for the restart (into `program` when set).
async fn restart<R: ContainerRuntime>(
    task: &StoredTask,
    context: &Context<R>,
    pending: Pending,
    program: Option<std::path::PathBuf>,
) {
    let progress = NodeTaskReport {
        phase: "InProgress".to_owned(),
        action_flow: pending.steps,
        ..NodeTaskReport::default()
    };
    context
        .reporter
        .report(&task.name, &task.uid, &task.version, progress)
        .await;
    match program {
        Some(program) => context.env.restart.request_exec(program),
        None => context.env.restart.request(),
    }
}
