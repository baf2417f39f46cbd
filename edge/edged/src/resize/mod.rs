//! In-place pod resize (Kubernetes `InPlacePodVerticalScaling`, GA since 1.35; init
//! containers since 1.37), as the kubelet does it. A resize reaches edged as an ordinary pod
//! update whose containers ask for other CPU or memory; the pod's worker then
//!
//! 1. decides whether the node can allocate it (kubelet `handlePodResourcesResize`): its new
//!    effective requests fit beside the other admitted pods' allocations within the node's
//!    allocatable, the registry of admitted pods checking and recording them at once
//!    ([`crate::admission::Admitted::resize`]); if so the allocation is recorded
//!    ([`Checkpoint`], persisted in the pod's directory) and the resize is in progress
//!    (`PodResizeInProgress`, event `ResizeStarted`); if not it waits (`PodResizePending`,
//!    `Infeasible` when the pod alone exceeds the allocatable, else `Deferred`, retried at
//!    every sync; events `ResizeInfeasible` / `ResizeDeferred`);
//! 2. applies the allocation to the running containers (kubelet `computePodResizeAction`,
//!    `doPodResizeAction`; [`plan`]): a changed resource whose `resizePolicy` says
//!    `RestartContainer` restarts the container with the new resources, the others are
//!    updated in place through the runtime (memory first, then CPU, decreases before
//!    increases); a memory limit lowered to or below what the container uses is refused
//!    (`PodResizeInProgress` reason `Error`, event `ResizeError`) and retried;
//! 3. reports `containerStatuses[].allocatedResources` (the allocated requests),
//!    `containerStatuses[].resources` (what the container's cgroup holds, read back from
//!    the runtime; [`status`]) and the conditions ([`ResizeConditions`]), and `ResizeCompleted`
//!    once everything running matches the allocation.
//!
//! New containers are always created with the allocation, not with the spec, while a resize
//! waits. There are no pod-level cgroups under Docker: pod-level resources
//! (`spec.resources`) and memory-backed `emptyDir` resizes are not handled.
//!
//! # Layout
//! - [`checkpoint`]: [`Checkpoint`], the allocated and actuated resources of a pod's
//!   containers and their file (read back at start-up, the registry of admitted pods counts
//!   each pod at its allocation).
//! - [`plan`]: which containers restart or are updated, in which order, and the memory check.
//! - [`conditions`]: [`ResizeConditions`], `PodResizePending` and `PodResizeInProgress`.
//! - [`status`]: `containerStatuses[].resources` and the resize events' messages.

pub mod checkpoint;
pub mod conditions;
pub mod plan;
pub mod status;

pub use checkpoint::Checkpoint;
pub use conditions::ResizeConditions;
pub use plan::{Plan, Running, Update};
