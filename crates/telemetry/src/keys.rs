//! The attribute names of Verge's spans, following OpenTelemetry's semantic conventions
//! where one exists (`k8s.*`) and prefixed `verge.` otherwise. Use them as `tracing` field
//! names (`tracing::info_span!("edged.sync", k8s.pod.name = %name)` spells the same key);
//! these constants name them for tests and queries.

/// The edge node a span concerns (`verge.node`).
pub const NODE: &str = "verge.node";
/// The Message id (`verge.message.id`, a UUID).
pub const MESSAGE_ID: &str = "verge.message.id";
/// The Message's resource path (`verge.resource`, e.g. `default/pod/web`).
pub const RESOURCE: &str = "verge.resource";
/// The Message's operation (`verge.operation`, e.g. `update`).
pub const OPERATION: &str = "verge.operation";
/// A pod's name (`k8s.pod.name`, OpenTelemetry semantic convention).
pub const POD_NAME: &str = "k8s.pod.name";
/// A pod's namespace (`k8s.namespace.name`, OpenTelemetry semantic convention).
pub const NAMESPACE: &str = "k8s.namespace.name";
/// A pod's uid (`k8s.pod.uid`, OpenTelemetry semantic convention).
pub const POD_UID: &str = "k8s.pod.uid";
/// A container's name (`k8s.container.name`, OpenTelemetry semantic convention).
pub const CONTAINER_NAME: &str = "k8s.container.name";
/// A container image reference (`container.image.name`, OpenTelemetry semantic convention).
pub const IMAGE: &str = "container.image.name";
/// How many times a message was sent before this attempt (`verge.attempt`).
pub const ATTEMPT: &str = "verge.attempt";
/// A Device's name (`verge.device.name`; its namespace is [`NAMESPACE`]).
pub const DEVICE_NAME: &str = "verge.device.name";
/// A Device's uid (`verge.device.uid`).
pub const DEVICE_UID: &str = "verge.device.uid";
/// How many twin properties a report or desired change names (`verge.twin.properties`).
pub const TWIN_PROPERTIES: &str = "verge.twin.properties";
