//! [`ContainerSpec`]s for a pod's sandbox and containers, following the kubelet's
//! `kuberuntime_container.go` and dockershim's `helpers.go`.
//!
//! * Command: `command` replaces the image's Entrypoint (and then the image's Cmd is not
//!   used), `args` replaces its Cmd; `$(VAR)` in both expands from the container's env
//!   (`$$` escapes), unknown references stay as written.
//! * Resources: CPU shares, CFS quota and period, memory limit as the kubelet computes them
//!   ([`crate::resources`], shared with in-place resize).
//! * securityContext (container over pod): runAsUser/runAsGroup -> `User "uid[:gid]"`,
//!   privileged, capabilities add/drop, readOnlyRootFilesystem; the pod's fsGroup and
//!   supplementalGroups -> `GroupAdd`.
//! * Network: the sandbox owns the network (bridge, or `host` for hostNetwork pods) and
//!   publishes `hostPort`s; containers join with `container:<sandbox id>` for network and IPC.
//!   A pod without a sandbox (the pod worker's `own_network`) has its one container
//!   own them instead, with what the sandbox would have had ([`holding_network`]).

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};

use verge_container_runtime::labels::ContainerLabels;
use verge_container_runtime::types::{ContainerSpec, IpcMode, NetworkMode, PortBinding};

/// Expands `$(NAME)` references in `s` from `env` (`KEY=VALUE` entries; later wins);
/// `$$` becomes `$`; unknown references are kept verbatim (Kubernetes `expansion.Expand`).
pub fn expand(s: &str, env: &[String]) -> String {
    crate::env::expand_with(s, |name| {
        env.iter()
            .rev()
            .find_map(|kv| kv.split_once('=').filter(|(k, _)| *k == name))
            .map_or_else(|| format!("$({name})"), |(_, v)| v.to_owned())
    })
}

/// The `User` string of a container: `uid[:gid]` from the container's or the pod's
/// securityContext; `None` keeps the image's user.
fn user(pod: &Pod, container: &Container) -> Option<String> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = container.security_context.as_ref();
    let uid = csc
        .and_then(|c| c.run_as_user)
        .or_else(|| psc.and_then(|p| p.run_as_user));
    let gid = csc
        .and_then(|c| c.run_as_group)
        .or_else(|| psc.and_then(|p| p.run_as_group));
    match (uid, gid) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        // Docker needs a user to set a group; root with that group is what runc would do.
        (None, Some(g)) => Some(format!("0:{g}")),
        (None, None) => None,
    }
}

/// Docker `GroupAdd` of every container: the pod's `fsGroup`, then its
/// `supplementalGroups` (kubelet `determineEffectiveSecurityContext`), without repeats;
/// `None` when there are none.
fn group_add(pod: &Pod) -> Option<Vec<String>> {
    let psc = pod.spec.as_ref()?.security_context.as_ref()?;
    let mut groups: Vec<String> = Vec::new();
    for gid in psc
        .fs_group
        .iter()
        .chain(psc.supplemental_groups.iter().flatten())
    {
        let gid = gid.to_string();
        if !groups.contains(&gid) {
            groups.push(gid);
        }
    }
    Some(groups).filter(|g| !g.is_empty())
}

/// The spec of app or init container `container` of `pod` (its image as given), joining the
/// network and IPC namespaces of container `holder` (the sandbox; `None`: it holds its own,
/// see [`holding_network`]); `env` is the resolved `KEY=VALUE` list, `binds` the volume
/// binds, `grace` the pod's grace period (kept as a label).
pub fn container_spec(
    pod: &Pod,
    container: &Container,
    labels: &ContainerLabels,
    holder: Option<&str>,
    env: Vec<String>,
    binds: Vec<String>,
    grace: Duration,
) -> ContainerSpec {
    let expand_all = |v: &Option<Vec<String>>| {
        v.as_ref()
            .map(|v| v.iter().map(|s| expand(s, &env)).collect::<Vec<_>>())
    };
    let (entrypoint, cmd) = (expand_all(&container.command), expand_all(&container.args));
    let (entrypoint, cmd) = match (entrypoint, cmd) {
        // `command` without `args`: the image's Cmd must not be appended.
        (Some(e), None) => (Some(e), Some(Vec::new())),
        other => other,
    };
    let sc = container.security_context.as_ref();
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let mut spec = ContainerSpec {
        image: container.image.clone().unwrap_or_default(),
        entrypoint,
        cmd,
        working_dir: container.working_dir.clone(),
        user: user(pod, container),
        tty: container.tty,
        open_stdin: container.stdin,
        stdin_once: container.stdin_once,
        labels: with_grace(labels, grace),
        binds,
        network: holder.map_or(NetworkMode::default(), |id| {
            NetworkMode::Container(id.to_owned())
        }),
        ipc: holder.map_or(IpcMode::default(), |id| IpcMode::Container(id.to_owned())),
        privileged: sc.and_then(|s| s.privileged),
        readonly_rootfs: sc.and_then(|s| s.read_only_root_filesystem),
        cap_add: caps.and_then(|c| c.add.clone()),
        cap_drop: caps.and_then(|c| c.drop.clone()),
        group_add: group_add(pod),
        // kubelet: `AddNoNewPrivileges`: only an explicit `allowPrivilegeEscalation: false`.
        security_opt: sc
            .and_then(|s| s.allow_privilege_escalation)
            .filter(|allow| !allow)
            .map(|_| vec!["no-new-privileges".to_owned()]),
        ..ContainerSpec::default()
    };
    spec.resources = crate::resources::linux(container.resources.as_ref());
    spec.env = Some(env);
    spec
}

/// The labels plus the grace period label ([`labels::GRACE`](verge_container_runtime::labels::GRACE)).
fn with_grace(labels: &ContainerLabels, grace: Duration) -> HashMap<String, String> {
    let mut map = labels.to_map();
    map.insert(
        verge_container_runtime::labels::GRACE.to_owned(),
        grace.as_secs().to_string(),
    );
    map
}

/// Whether the pod uses the node's network namespace.
pub fn host_network(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false)
}

/// The `hostPort`s of `pod`'s containers as Docker's exposed ports and bindings (none for a
/// hostNetwork pod, whose ports are the node's).
fn host_ports(pod: &Pod) -> HashMap<String, Vec<PortBinding>> {
    let mut bindings: HashMap<String, Vec<PortBinding>> = HashMap::new();
    if host_network(pod) {
        return bindings;
    }
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice());
    for c in containers.unwrap_or_default() {
        for p in c.ports.iter().flatten() {
            let Some(host_port) = p.host_port.filter(|hp| *hp > 0) else {
                continue;
            };
            let proto = p.protocol.as_deref().unwrap_or("TCP").to_lowercase();
            bindings
                .entry(format!("{}/{proto}", p.container_port))
                .or_default()
                .push(PortBinding {
                    host_ip: p.host_ip.clone(),
                    host_port: host_port.to_string(),
                });
        }
    }
    bindings
}

/// `spec` (a container's, [`container_spec`] without a holder) made to hold the pod's network
/// itself, as a pod without a sandbox's one container does: what [`sandbox_spec`] gives a
/// sandbox (hostname, sysctls, `hostPort`s, shareable IPC so that ephemeral containers can
/// join it) on pod network `network` at the pod's fixed address `ip`.
pub fn holding_network(
    mut spec: ContainerSpec,
    pod: &Pod,
    network: &str,
    ip: &str,
) -> ContainerSpec {
    let bindings = host_ports(pod);
    spec.hostname = Some(crate::etc_hosts::hostname(pod));
    let sysctls = crate::sysctls::for_sandbox(pod);
    spec.sysctls = Some(sysctls).filter(|s| !s.is_empty());
    spec.exposed_ports = bindings.keys().cloned().collect();
    spec.port_bindings = bindings;
    spec.network = NetworkMode::Network(network.to_owned());
    spec.ipv4_address = Some(ip.to_owned());
    spec.ipc = IpcMode::Shareable;
    spec
}

/// The spec of the pod's sandbox: `image` running `command` (empty: the image's), hostname =
/// `spec.hostname` or the pod name (cut to 63 characters), shareable IPC, on `network` (the
/// node's pod network, [`crate::network`]) or the host's with every container port that has a
/// `hostPort` published.
pub fn sandbox_spec(
    pod: &Pod,
    labels: &ContainerLabels,
    network: NetworkMode,
    image: &str,
    command: &[String],
    grace: Duration,
) -> ContainerSpec {
    let host_net = host_network(pod);
    let bindings = host_ports(pod);
    // The same hostname as the pod's /etc/hosts names (kubelet: `GeneratePodHostNameAndDomain`).
    let hostname = (!host_net).then(|| crate::etc_hosts::hostname(pod));
    let sysctls = crate::sysctls::for_sandbox(pod);
    ContainerSpec {
        image: image.to_owned(),
        cmd: Some(command.to_vec()).filter(|c| !c.is_empty()),
        hostname,
        sysctls: Some(sysctls).filter(|s| !s.is_empty()),
        labels: with_grace(labels, grace),
        exposed_ports: bindings.keys().cloned().collect(),
        port_bindings: bindings,
        network: if host_net { NetworkMode::Host } else { network },
        ipc: IpcMode::Shareable,
        ..ContainerSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_kubernetes() {
        let env = vec!["A=1".to_owned(), "B=two".to_owned()];
        assert_eq!(expand("x$(A)-$(B)", &env), "x1-two");
        assert_eq!(expand("$$(A) $(C) $", &env), "$(A) $(C) $");
    }

    #[test]
    fn command_args_resources_security() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                "supplementalGroups": [3000, 2000, 4000]}, "containers": [{
                "name": "c", "image": "img", "command": ["sh", "-c"], "ports": [{"containerPort": 80, "hostPort": 8080}],
                "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
                "securityContext": {"runAsUser": 7, "capabilities": {"add": ["NET_ADMIN"]}, "readOnlyRootFilesystem": true,
                    "allowPrivilegeEscalation": false}
            }]}
        }))
        .expect("pod");
        let c = &pod.spec.as_ref().expect("spec").containers[0];
        let labels = ContainerLabels::parse(&HashMap::from([
            ("io.kubernetes.pod.namespace".to_owned(), "ns".to_owned()),
            ("io.kubernetes.pod.name".to_owned(), "p".to_owned()),
            ("io.kubernetes.pod.uid".to_owned(), "u".to_owned()),
            ("io.kubernetes.container.name".to_owned(), "c".to_owned()),
        ]))
        .expect("labels");
        let h = container_spec(
            &pod,
            c,
            &labels,
            Some("sb"),
            vec![],
            vec![],
            Duration::from_secs(3),
        );
        assert_eq!(h.image, "img");
        assert_eq!(h.entrypoint, Some(vec!["sh".to_owned(), "-c".to_owned()]));
        assert_eq!(h.cmd, Some(vec![]));
        assert_eq!(h.user.as_deref(), Some("7:3000"));
        let r = h.resources;
        assert_eq!((r.cpu_quota, r.cpu_period), (Some(50_000), Some(100_000)));
        assert_eq!((r.cpu_shares, r.memory), (Some(512), Some(64 << 20)));
        assert_eq!(h.network, NetworkMode::Container("sb".into()));
        assert_eq!(h.readonly_rootfs, Some(true));
        assert_eq!(h.security_opt, Some(vec!["no-new-privileges".to_owned()]));
        let groups = ["2000", "3000", "4000"].map(String::from);
        assert_eq!(h.group_add.as_deref(), Some(groups.as_slice()));
        assert_eq!(group_add(&Pod::default()), None);
        let net = NetworkMode::Network("verge-pods-n".into());
        let s = sandbox_spec(&pod, &labels, net.clone(), "pause", &[], Duration::ZERO);
        assert_eq!(s.network, net);
        assert_eq!(s.port_bindings["80/tcp"][0].host_port, "8080");
        assert_eq!(s.exposed_ports, ["80/tcp"]);
        let own = container_spec(&pod, c, &labels, None, vec![], vec![], Duration::ZERO);
        let own = holding_network(own, &pod, "verge-pods-n", "10.244.1.9");
        assert_eq!(own.network, net);
        assert_eq!(own.ipv4_address.as_deref(), Some("10.244.1.9"));
        assert_eq!(own.hostname.as_deref(), Some("p"));
        assert_eq!(own.ipc, IpcMode::Shareable);
        assert_eq!(own.port_bindings, s.port_bindings);
        assert_eq!(own.image, "img");
    }
}
