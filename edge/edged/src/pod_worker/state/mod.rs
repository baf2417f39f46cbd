//! The explicit lifecycle of one pod and of each of its containers, and the per-container
//! state the worker keeps across syncs (back-off included), after krustlet's state machine
//! and the kubelet's pod worker. Each state decides the next through a transition function;
//! the worker only reports what happened.
//!
//! # Layout
//! - `pod`: [`PodState`] (admission refusal, eviction and deletion included) and its
//!   [`PodEvent`] transitions.
//! - `container`: [`ContainerTrack`] and [`ContainerPhase`] (running, backing off, done).
//! - `reasons`: [`RestartPolicy`], [`WaitingReason`] and [`Waiting`].

mod container;
mod pod;
mod reasons;

#[cfg(test)]
pub use container::ContainerPhase;
pub use container::{ContainerTrack, ExitDecision};
pub use pod::{Failure, PodEvent, PodState};
pub use reasons::{RestartPolicy, Waiting, WaitingReason, is_sidecar};
