//! [`OutboxKey`]: what an upstream report is about, i.e. which older report it replaces.

use std::fmt;

use verge_core::{Envelope, Kind, ResourceKey, ResourceType, Write};

/// The coalescing key of a durable upstream report: a newer report with the same key
/// replaces the older one in the outbox (only the newest status of a pod matters).
///
/// Its text form (the redb key) is shown on each variant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OutboxKey {
    /// `podstatus/<ns>/<name>`: `update <ns>/podstatus/<name>`.
    PodStatus {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
    },
    /// `pod-delete/<ns>/<name>/<uid>`: the completed deletion `delete <ns>/pod/<name>` of
    /// one pod incarnation.
    PodDelete {
        /// The pod's namespace.
        namespace: String,
        /// The pod's name.
        name: String,
        /// The pod's uid.
        uid: String,
    },
    /// `node`: the registration `insert _/node/<node>`.
    Node,
    /// `nodestatus`: `update _/nodestatus/<node>`.
    NodeStatus,
    /// `lease`: `update kube-node-lease/lease/<node>`, the node Lease sent once per session
    /// (edgecontroller renews it from then on). Durable, so that a session whose first
    /// messages reach cloudhub before a controller attached still gets its Lease.
    Lease,
    /// `devicestatus/<ns>/<name>`: `update <ns>/devicestatus/<name>`, the whole current
    /// twin state of one Device (devicetwin): a newer snapshot replaces the older, so per
    /// device and property the newest value survives an outage.
    DeviceStatus {
        /// The Device's namespace.
        namespace: String,
        /// The Device's name.
        name: String,
    },
    /// `nodetaskstatus/<name>`: `update _/nodetaskstatus/<name>`, a node's progress on one
    /// task of a fleet job (`<job kind>.<job name>`): the newest replaces the older, so the
    /// final state survives an outage. Bounded by the number of jobs naming the node.
    NodeTaskStatus {
        /// The task's name.
        name: String,
    },
    /// `event/<ns>/<name>`: `insert <ns>/event/<name>`. Droppable: when the outbox is
    /// full, new event keys are refused.
    Event {
        /// The event's namespace.
        namespace: String,
        /// The event's name.
        name: String,
    },
    /// `app/<group>/<id>`: a message of a third-party group from an edge app (module
    /// `apps`), any operation; a message the app publishes again with the same id replaces
    /// it. Droppable like events: when the outbox is full, new ones are refused.
    App {
        /// The third-party group.
        group: String,
        /// The message id.
        id: String,
    },
}

impl OutboxKey {
    /// The key of the report `envelope`, derived from its kind and resource so that the key
    /// and the route cannot disagree; `None` for a message that is not a durable report (an
    /// answer, a query).
    pub fn of(envelope: &Envelope) -> Option<Self> {
        let names = |key: &ResourceKey| (key.namespace.clone(), key.name.clone());
        if !envelope.group.is_verge() && !matches!(envelope.kind, Kind::Keepalive { .. }) {
            return Some(Self::App {
                group: envelope.group.to_string(),
                id: envelope.id.to_string(),
            });
        }
        match &envelope.kind {
            Kind::Upsert {
                write: Write::Update,
                key,
                ..
            } => match key.kind {
                ResourceType::PodStatus => {
                    let (namespace, name) = names(key);
                    Some(Self::PodStatus { namespace, name })
                }
                ResourceType::NodeStatus => Some(Self::NodeStatus),
                ResourceType::Lease => Some(Self::Lease),
                ResourceType::DeviceStatus => {
                    let (namespace, name) = names(key);
                    Some(Self::DeviceStatus { namespace, name })
                }
                ResourceType::NodeTaskStatus => Some(Self::NodeTaskStatus {
                    name: key.name.clone(),
                }),
                _ => None,
            },
            Kind::Upsert {
                write: Write::Insert,
                key,
                ..
            } => match key.kind {
                ResourceType::Node => Some(Self::Node),
                ResourceType::Event => {
                    let (namespace, name) = names(key);
                    Some(Self::Event { namespace, name })
                }
                _ => None,
            },
            Kind::Delete { key, version } if key.kind == ResourceType::Pod => {
                let (namespace, name) = names(key);
                Some(Self::PodDelete {
                    namespace,
                    name,
                    uid: version.uid.clone(),
                })
            }
            _ => None,
        }
    }

    /// [`OutboxKey::source`] of a key in its text form (as stored): `event/…` is `event`,
    /// `app/<group>/…` is `app/<group>`.
    pub fn source_of(stored: &str) -> Option<String> {
        if stored.starts_with("event/") {
            return Some("event".to_owned());
        }
        let rest = stored.strip_prefix("app/")?;
        let (group, _) = rest.split_once('/')?;
        Some(format!("app/{group}"))
    }

    /// The status key of the pod at `pod` (`<ns>/pod/<name>`).
    pub fn pod_status(pod: &ResourceKey) -> Self {
        Self::PodStatus {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
        }
    }

    /// The deletion key of the pod at `pod` with `uid`.
    pub fn pod_delete(pod: &ResourceKey, uid: &str) -> Self {
        Self::PodDelete {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: uid.to_owned(),
        }
    }

    /// The status key of Device `name` in `namespace`.
    pub fn device_status(namespace: &str, name: &str) -> Self {
        Self::DeviceStatus {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// The key of event `name` in `namespace`.
    pub fn event(namespace: &str, name: &str) -> Self {
        Self::Event {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        }
    }

    /// Whether a report of this class may be refused when the outbox is full (events and
    /// edge apps' messages; statuses and deletions are bounded by the number of pods and
    /// devices).
    pub const fn is_droppable(&self) -> bool {
        matches!(self, Self::Event { .. } | Self::App { .. })
    }

    /// The source whose byte budget a droppable report takes from: `event` (edged's events)
    /// or `app/<group>` (each third-party group's apps); `None` for the other reports, which
    /// are bounded by the number of pods and devices.
    pub fn source(&self) -> Option<String> {
        match self {
            Self::Event { .. } => Some("event".to_owned()),
            Self::App { group, .. } => Some(format!("app/{group}")),
            _ => None,
        }
    }
}

impl fmt::Display for OutboxKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::PodStatus { namespace, name } => write!(f, "podstatus/{namespace}/{name}"),
            Self::PodDelete {
                namespace,
                name,
                uid,
            } => write!(f, "pod-delete/{namespace}/{name}/{uid}"),
            Self::Node => f.write_str("node"),
            Self::NodeStatus => f.write_str("nodestatus"),
            Self::Lease => f.write_str("lease"),
            Self::DeviceStatus { namespace, name } => {
                write!(f, "devicestatus/{namespace}/{name}")
            }
            Self::NodeTaskStatus { name } => write!(f, "nodetaskstatus/{name}"),
            Self::Event { namespace, name } => write!(f, "event/{namespace}/{name}"),
            Self::App { group, id } => write!(f, "app/{group}/{id}"),
        }
    }
}
