//! Labels and names that tie Docker containers to pods (the dockershim conventions, so that
//! tools that know them keep working).
//!
//! Names: `k8s_<container>_<pod>_<namespace>_<uid>_<restart count>` for containers and
//! `k8s_POD_<pod>_<namespace>_<uid>_<attempt>` for the sandbox.

use std::collections::HashMap;

/// Marks every container edged manages; the value is the node name (set by
/// [`ContainerRuntime::create`](super::ContainerRuntime::create), which replaces the `true` of [`ContainerLabels::to_map`]).
pub const MANAGED: &str = "io.verge.managed";
/// The pod's namespace.
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// The pod's name.
pub const POD_NAME: &str = "io.kubernetes.pod.name";
/// The pod's uid.
pub const POD_UID: &str = "io.kubernetes.pod.uid";
/// The container's name in the pod spec (`POD` for the sandbox).
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";
/// How many times this container was restarted before this instance (decimal).
pub const RESTART_COUNT: &str = "io.verge.restart-count";
/// `podsandbox` or `container` (dockershim's `io.kubernetes.docker.type`).
pub const KIND: &str = "io.kubernetes.docker.type";
/// The pod's grace period in seconds, so that orphans can be stopped like their pod.
pub const GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";
/// The local image ids (`sha256:...`, comma-separated) of the image volumes a container
/// mounts, so that image garbage collection counts them as in use while the container
/// exists (the kubelet reads them from the container's mounts).
pub const IMAGE_VOLUMES: &str = "io.verge.image-volumes";
/// The pod IP a container was created with, on the node's pod network (edged's own
/// address management, [`ContainerSpec::ipv4_address`](crate::ContainerSpec::ipv4_address)): on a sandbox, and on the
/// container of a pod without a sandbox, which holds the pod's network namespace itself.
/// The address is the pod's for its life: every new instance is created with it again.
pub const POD_IP: &str = "io.verge.pod-ip";
/// The sandbox name in [`CONTAINER_NAME`].
pub const SANDBOX_NAME: &str = "POD";

/// Which pod a container belongs to, as its labels say.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodRef {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

/// What the labels of one container say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLabels {
    /// Its pod.
    pub pod: PodRef,
    /// The spec's container name, or [`SANDBOX_NAME`].
    pub container: String,
    /// Restart count (sandbox: attempt) of this instance.
    pub restart_count: u32,
    /// Whether this is the sandbox (infra) container.
    pub sandbox: bool,
    /// The fixed pod IP it was created with ([`POD_IP`]). On a container that is not the
    /// sandbox it means that the container holds the pod's network namespace (a pod without
    /// a sandbox).
    pub pod_ip: Option<String>,
}

impl ContainerLabels {
    /// Whether this container holds the pod's network namespace: the sandbox, or the one
    /// container of a pod without a sandbox.
    pub fn holds_network(&self) -> bool {
        self.sandbox || self.pod_ip.is_some()
    }

    /// The labels to set on a new container.
    pub fn to_map(&self) -> HashMap<String, String> {
        let mut map = HashMap::from([
            (MANAGED.to_owned(), "true".to_owned()),
            (POD_NAMESPACE.to_owned(), self.pod.namespace.clone()),
            (POD_NAME.to_owned(), self.pod.name.clone()),
            (POD_UID.to_owned(), self.pod.uid.clone()),
            (CONTAINER_NAME.to_owned(), self.container.clone()),
            (RESTART_COUNT.to_owned(), self.restart_count.to_string()),
            (
                KIND.to_owned(),
                if self.sandbox {
                    "podsandbox"
                } else {
                    "container"
                }
                .to_owned(),
            ),
        ]);
        if let Some(ip) = &self.pod_ip {
            map.insert(POD_IP.to_owned(), ip.clone());
        }
        map
    }

    /// Reads the labels of an existing container; `None` if it is not one of edged's.
    pub fn parse(labels: &HashMap<String, String>) -> Option<Self> {
        let get = |k: &str| labels.get(k).cloned();
        let container = get(CONTAINER_NAME)?;
        Some(Self {
            pod: PodRef {
                namespace: get(POD_NAMESPACE)?,
                name: get(POD_NAME)?,
                uid: get(POD_UID)?,
            },
            sandbox: labels
                .get(KIND)
                .map_or(container == SANDBOX_NAME, |k| k == "podsandbox"),
            restart_count: labels
                .get(RESTART_COUNT)
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            pod_ip: get(POD_IP),
            container,
        })
    }

    /// The Docker container name: `k8s_<container>_<pod>_<namespace>_<uid>_<restart>`.
    pub fn docker_name(&self) -> String {
        format!(
            "k8s_{}_{}_{}_{}_{}",
            self.container, self.pod.name, self.pod.namespace, self.pod.uid, self.restart_count
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_and_name() {
        let l = ContainerLabels {
            pod: PodRef {
                namespace: "ns".into(),
                name: "web".into(),
                uid: "u-1".into(),
            },
            container: "app".into(),
            restart_count: 3,
            sandbox: false,
            pod_ip: None,
        };
        assert_eq!(ContainerLabels::parse(&l.to_map()), Some(l.clone()));
        assert_eq!(l.docker_name(), "k8s_app_web_ns_u-1_3");
        assert_eq!(ContainerLabels::parse(&HashMap::new()), None);
        let own = ContainerLabels {
            pod_ip: Some("10.244.1.7".into()),
            ..l
        };
        assert!(own.holds_network());
        assert_eq!(ContainerLabels::parse(&own.to_map()), Some(own));
    }
}
