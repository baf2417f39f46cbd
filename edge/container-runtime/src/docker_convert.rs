//! Docker's API types to and from the runtime's ([`super::types`]): inspects, create bodies,
//! events and pull options.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum, EventMessage,
    HostConfig,
};
use bollard::query_parameters::CreateImageOptionsBuilder;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::types::{ContainerInfo, ContainerSpec, IpcMode, NetworkMode, RunState, RuntimeEvent};

/// Docker's "zero time" (`0001-01-01T00:00:00Z`) and garbage are `None`.
fn parse_time(s: Option<&str>) -> Option<Time> {
    let t: Timestamp = s?.parse().ok()?;
    (t.as_second() > 0).then_some(Time(t))
}

/// An inspect as [`ContainerInfo`].
pub(super) fn info(c: ContainerInspectResponse) -> ContainerInfo {
    let config = c.config.unwrap_or_default();
    let st = c.state.unwrap_or_default();
    let state = match st.status {
        Some(
            ContainerStateStatusEnum::RUNNING
            | ContainerStateStatusEnum::PAUSED
            | ContainerStateStatusEnum::RESTARTING,
        ) => RunState::Running,
        Some(ContainerStateStatusEnum::CREATED) => RunState::Created,
        _ if st.running == Some(true) => RunState::Running,
        _ => RunState::Exited,
    };
    let ip = c
        .network_settings
        .and_then(|n| n.networks)
        .and_then(|n| n.get("bridge").and_then(|b| b.ip_address.clone()))
        .filter(|ip| !ip.is_empty());
    ContainerInfo {
        id: c.id.unwrap_or_default(),
        labels: config.labels.unwrap_or_default(),
        state,
        exit_code: st
            .exit_code
            .and_then(|e| i32::try_from(e).ok())
            .unwrap_or(0),
        oom_killed: st.oom_killed.unwrap_or(false),
        error: st.error.filter(|e| !e.is_empty()),
        started_at: parse_time(st.started_at.as_deref()),
        finished_at: parse_time(st.finished_at.as_deref()),
        image: config.image.unwrap_or_default(),
        image_id: c.image.unwrap_or_default(),
        ip,
    }
}

/// A [`ContainerSpec`] as Docker's create body.
pub(super) fn body(spec: ContainerSpec) -> ContainerCreateBody {
    let mode = |m: String| Some(m);
    let network_mode = match spec.network {
        NetworkMode::Bridge => mode("bridge".to_owned()),
        NetworkMode::Host => mode("host".to_owned()),
        NetworkMode::Container(id) => mode(format!("container:{id}")),
    };
    let ipc_mode = match spec.ipc {
        IpcMode::Default => None,
        IpcMode::Shareable => mode("shareable".to_owned()),
        IpcMode::Container(id) => mode(format!("container:{id}")),
    };
    let port_bindings: HashMap<String, Option<Vec<bollard::models::PortBinding>>> = spec
        .port_bindings
        .into_iter()
        .map(|(port, bindings)| {
            let bindings = bindings
                .into_iter()
                .map(|b| bollard::models::PortBinding {
                    host_ip: b.host_ip,
                    host_port: Some(b.host_port),
                })
                .collect();
            (port, Some(bindings))
        })
        .collect();
    let host = HostConfig {
        binds: Some(spec.binds).filter(|b| !b.is_empty()),
        network_mode,
        ipc_mode,
        port_bindings: Some(port_bindings).filter(|b| !b.is_empty()),
        privileged: spec.privileged,
        readonly_rootfs: spec.readonly_rootfs,
        cap_add: spec.cap_add,
        cap_drop: spec.cap_drop,
        group_add: spec.group_add,
        security_opt: spec.security_opt,
        sysctls: spec.sysctls,
        nano_cpus: spec.nano_cpus,
        memory: spec.memory,
        cpu_shares: spec.cpu_shares,
        ..HostConfig::default()
    };
    ContainerCreateBody {
        image: Some(spec.image),
        entrypoint: spec.entrypoint,
        cmd: spec.cmd,
        env: spec.env,
        working_dir: spec.working_dir,
        user: spec.user,
        tty: spec.tty,
        open_stdin: spec.open_stdin,
        stdin_once: spec.stdin_once,
        hostname: spec.hostname,
        labels: Some(spec.labels),
        exposed_ports: Some(spec.exposed_ports).filter(|e| !e.is_empty()),
        host_config: Some(host),
        ..ContainerCreateBody::default()
    }
}

/// A Docker event as a [`RuntimeEvent`]; `None` for other actions.
pub(super) fn event(e: EventMessage) -> Option<RuntimeEvent> {
    let id = e.actor.and_then(|a| a.id).unwrap_or_default();
    match e.action.as_deref()? {
        "start" => Some(RuntimeEvent::Start(id)),
        "die" => Some(RuntimeEvent::Die(id)),
        "oom" => Some(RuntimeEvent::Oom(id)),
        "destroy" => Some(RuntimeEvent::Destroy(id)),
        _ => None,
    }
}

/// `repo[:tag][@digest]` as bollard's create-image options.
pub(super) fn pull_options(image: &str) -> bollard::query_parameters::CreateImageOptions {
    let builder = CreateImageOptionsBuilder::default();
    match super::image::split_reference(image) {
        (_, super::image::Reference::Digest(_)) => builder.from_image(image),
        (repo, super::image::Reference::Tag(t)) => builder.from_image(repo).tag(t),
        (repo, super::image::Reference::None) => builder.from_image(repo).tag("latest"),
    }
    .build()
}
