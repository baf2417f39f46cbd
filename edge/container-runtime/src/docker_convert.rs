//! Docker's API types to and from the runtime's ([`super::types`]): inspects, create bodies
//! (with image mounts), events, pull options and image layers.

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerStateStatusEnum,
    ContainerSummaryNetworkSettings, EndpointIpamConfig, EndpointSettings, EventMessage,
    HostConfig, Mount, MountImageOptions, MountType, NetworkingConfig,
};
use bollard::query_parameters::CreateImageOptionsBuilder;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::types::{
    ContainerInfo, ContainerSpec, ImageMount, IpcMode, LinuxResources, NetworkMode, NetworkSpec,
    RunState, RuntimeEvent,
};

/// Docker's "zero time" (`0001-01-01T00:00:00Z`) and garbage are `None`.
fn parse_time(s: Option<&str>) -> Option<Time> {
    let t: Timestamp = s?.parse().ok()?;
    (t.as_second() > 0).then_some(Time(t))
}

/// A container is on one network (the default bridge or the pod network); the address on
/// the first by name that has one, should there be more.
fn first_address(networks: HashMap<String, EndpointSettings>) -> Option<String> {
    let mut networks: Vec<_> = networks.into_iter().collect();
    networks.sort_by(|a, b| a.0.cmp(&b.0));
    networks
        .into_iter()
        .find_map(|(_, e)| e.ip_address.filter(|ip| !ip.is_empty()))
}

/// The address of a listed container ([`first_address`]).
pub(super) fn summary_ip(settings: Option<ContainerSummaryNetworkSettings>) -> Option<String> {
    settings.and_then(|s| s.networks).and_then(first_address)
}

/// The CFS period Docker gives `NanoCpus` (100 ms, as the kubelet's), microseconds.
pub(super) const NANO_CPUS_PERIOD: i64 = 100_000;

/// The CPU and memory settings of an inspected host config; Docker's 0 ("unset") is `None`.
/// A CPU limit set as `NanoCpus` (containers created by an earlier edgecore) reads as the
/// quota and period Docker derives from it.
pub(super) fn resources(host: Option<&HostConfig>) -> LinuxResources {
    let Some(h) = host else {
        return LinuxResources::default();
    };
    let set = |v: Option<i64>| v.filter(|v| *v > 0);
    let (cpu_period, cpu_quota) = match set(h.nano_cpus) {
        Some(nano) => (
            Some(NANO_CPUS_PERIOD),
            Some(nano.saturating_mul(NANO_CPUS_PERIOD) / 1_000_000_000),
        ),
        None => (set(h.cpu_period), set(h.cpu_quota)),
    };
    LinuxResources {
        cpu_shares: set(h.cpu_shares),
        cpu_period,
        cpu_quota,
        memory: set(h.memory),
    }
}

/// An inspect as [`ContainerInfo`].
pub(super) fn info(c: ContainerInspectResponse) -> ContainerInfo {
    let resources = resources(c.host_config.as_ref());
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
        .and_then(first_address);
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
        resources,
    }
}

/// An image mount as Docker's `Mount` of type `image` (API 1.48+): the image's id or
/// reference as `Source`, always read-only, the sub-path as `ImageOptions.Subpath`.
fn image_mount(m: ImageMount) -> Mount {
    Mount {
        typ: Some(MountType::IMAGE),
        source: Some(m.image),
        target: Some(m.target),
        read_only: Some(true),
        image_options: m.sub_path.map(|subpath| MountImageOptions {
            subpath: Some(subpath),
        }),
        ..Mount::default()
    }
}

/// A [`ContainerSpec`] as Docker's create body (its image mounts as `HostConfig.Mounts`).
pub(super) fn body(spec: ContainerSpec) -> ContainerCreateBody {
    let mode = |m: String| Some(m);
    // A fixed address is an endpoint setting of the user-defined network it is on.
    let networking_config = match (&spec.network, spec.ipv4_address) {
        (NetworkMode::Network(name), Some(ip)) => Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                name.clone(),
                EndpointSettings {
                    ipam_config: Some(EndpointIpamConfig {
                        ipv4_address: Some(ip),
                        ..EndpointIpamConfig::default()
                    }),
                    ..EndpointSettings::default()
                },
            )])),
        }),
        _ => None,
    };
    let network_mode = match spec.network {
        NetworkMode::Bridge => mode("bridge".to_owned()),
        NetworkMode::Host => mode("host".to_owned()),
        NetworkMode::Container(id) => mode(format!("container:{id}")),
        NetworkMode::Network(name) => mode(name),
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
    let mounts: Vec<Mount> = spec.image_mounts.into_iter().map(image_mount).collect();
    let host = HostConfig {
        binds: Some(spec.binds).filter(|b| !b.is_empty()),
        mounts: Some(mounts).filter(|m| !m.is_empty()),
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
        cpu_shares: spec.resources.cpu_shares,
        cpu_period: spec.resources.cpu_period,
        cpu_quota: spec.resources.cpu_quota,
        memory: spec.resources.memory,
        // No swap beyond the memory limit (kubelet `NoSwap`).
        memory_swap: spec.resources.memory,
        oom_score_adj: spec.oom_score_adj,
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
        networking_config,
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

/// The layer directories, topmost first, of an image whose storage driver `driver` says
/// `data`: `overlay2` (and the older `overlay`) give the top layer's `UpperDir` and the
/// colon-separated `LowerDir` below it; other drivers `None`.
pub(super) fn layer_dirs(driver: &str, data: &HashMap<String, String>) -> Option<Vec<PathBuf>> {
    if !matches!(driver, "overlay2" | "overlay") {
        return None;
    }
    let upper = data.get("UpperDir").filter(|d| !d.is_empty())?;
    let lower = data.get("LowerDir").map(String::as_str).unwrap_or_default();
    let dirs = std::iter::once(upper.as_str())
        .chain(lower.split(':').filter(|d| !d.is_empty()))
        .map(PathBuf::from)
        .collect();
    Some(dirs)
}

/// Docker's bridge driver options for `spec`: the bridge device and masquerading.
fn bridge_options(spec: &NetworkSpec) -> HashMap<String, String> {
    HashMap::from([
        (
            "com.docker.network.bridge.name".to_owned(),
            spec.bridge.clone(),
        ),
        (
            "com.docker.network.bridge.enable_ip_masquerade".to_owned(),
            spec.masquerade.to_string(),
        ),
    ])
}

/// The create request of network `spec`, labelled `labels`.
pub(super) fn network_request(
    spec: &NetworkSpec,
    labels: HashMap<String, String>,
) -> bollard::models::NetworkCreateRequest {
    bollard::models::NetworkCreateRequest {
        name: spec.name.clone(),
        driver: Some("bridge".to_owned()),
        ipam: Some(bollard::models::Ipam {
            driver: Some("default".to_owned()),
            config: Some(vec![bollard::models::IpamConfig {
                subnet: Some(spec.subnet.clone()),
                gateway: Some(spec.gateway.clone()),
                ..bollard::models::IpamConfig::default()
            }]),
            options: None,
        }),
        options: Some(bridge_options(spec)),
        labels: Some(labels),
        ..bollard::models::NetworkCreateRequest::default()
    }
}

/// Whether the inspected network `n` is `spec` (subnet, gateway, bridge, masquerading).
pub(super) fn network_matches(n: &bollard::models::NetworkInspect, spec: &NetworkSpec) -> bool {
    let ipam = n
        .ipam
        .as_ref()
        .and_then(|i| i.config.as_ref())
        .and_then(|c| c.first());
    let options = n.options.clone().unwrap_or_default();
    let wanted = bridge_options(spec);
    n.driver.as_deref() == Some("bridge")
        && ipam.and_then(|c| c.subnet.as_deref()) == Some(spec.subnet.as_str())
        && ipam.and_then(|c| c.gateway.as_deref()) == Some(spec.gateway.as_str())
        && wanted.iter().all(|(k, v)| options.get(k) == Some(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The create body Docker receives for an image volume mounted whole and one mounted by
    /// its sub-path: `HostConfig.Mounts` entries of type `image`, read-only.
    #[test]
    fn image_mounts_become_docker_mounts_of_type_image() {
        let spec = ContainerSpec {
            image: "busybox".into(),
            binds: vec!["/h:/c:ro".into()],
            image_mounts: vec![
                ImageMount {
                    image: "sha256:abc".into(),
                    target: "/volume".into(),
                    sub_path: None,
                },
                ImageMount {
                    image: "kitten:1.8".into(),
                    target: "/etc-of-kitten".into(),
                    sub_path: Some("etc".into()),
                },
            ],
            ..ContainerSpec::default()
        };
        let json = serde_json::to_value(body(spec)).expect("json");
        assert_eq!(
            json["HostConfig"]["Mounts"],
            serde_json::json!([
                {"Target": "/volume", "Source": "sha256:abc", "Type": "image", "ReadOnly": true},
                {"Target": "/etc-of-kitten", "Source": "kitten:1.8", "Type": "image",
                 "ReadOnly": true, "ImageOptions": {"Subpath": "etc"}},
            ])
        );
        assert_eq!(json["HostConfig"]["Binds"], serde_json::json!(["/h:/c:ro"]));
        let plain = serde_json::to_value(body(ContainerSpec::default())).expect("json");
        assert!(
            plain["HostConfig"].get("Mounts").is_none(),
            "no image mounts, no Mounts"
        );
    }

    #[test]
    fn overlay_layers_are_listed_topmost_first() {
        let data = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let layers = layer_dirs(
            "overlay2",
            &data(&[
                ("UpperDir", "/d/3/diff"),
                ("LowerDir", "/d/2/diff:/d/1/diff"),
                ("MergedDir", "/d/3/merged"),
            ]),
        );
        let expected: Vec<PathBuf> = ["/d/3/diff", "/d/2/diff", "/d/1/diff"]
            .map(Into::into)
            .to_vec();
        assert_eq!(layers, Some(expected));
        let single = layer_dirs("overlay2", &data(&[("UpperDir", "/d/1")]));
        assert_eq!(single, Some(vec!["/d/1".into()]));
        assert_eq!(layer_dirs("btrfs", &data(&[])), None);
        assert_eq!(layer_dirs("overlay2", &data(&[])), None);
    }
}
