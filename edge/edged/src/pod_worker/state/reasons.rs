//! Restart policy and waiting reasons as enums, parsed once from the spec or made from errors;
//! the kubelet's spellings appear only in [`WaitingReason::as_str`] (the status and event
//! boundary).

use k8s_openapi::api::core::v1::Pod;

use verge_container_runtime::ImageError;

/// `spec.restartPolicy`, parsed once (kubelet: `v1.RestartPolicy`; absent or unknown means
/// `Always`, the API server's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart every exited app container; init containers only after a failure.
    Always,
    /// Restart containers that exited with a non-zero code.
    OnFailure,
    /// Never restart.
    Never,
}

impl RestartPolicy {
    /// The policy of `pod`.
    pub fn of(pod: &Pod) -> Self {
        match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
            Some("Never") => Self::Never,
            Some("OnFailure") => Self::OnFailure,
            _ => Self::Always,
        }
    }

    /// Whether a container that exited with `code` is started again (`init`: an init
    /// container, never restarted after success).
    pub fn restarts(self, code: i32, init: bool) -> bool {
        match self {
            Self::Never => false,
            Self::OnFailure => code != 0,
            Self::Always => !init || code != 0,
        }
    }
}

impl RestartPolicy {
    /// Whether app container `c` that exited with `code` is started again: its own
    /// `restartPolicy` and `restartPolicyRules` when it has a `restartPolicy` (Kubernetes
    /// 1.34+, `ContainerRestartRules`: the first rule whose exit codes match decides, `Restart`
    /// restarts), else the pod's policy (`self`), as the kubelet's `ContainerShouldRestart`.
    pub fn restarts_app(self, c: &k8s_openapi::api::core::v1::Container, code: i32) -> bool {
        let own = match c.restart_policy.as_deref() {
            Some("Always") => Self::Always,
            Some("OnFailure") => Self::OnFailure,
            Some("Never") => Self::Never,
            _ => return self.restarts(code, false),
        };
        let rule = c.restart_policy_rules.iter().flatten().find(|rule| {
            rule.exit_codes.as_ref().is_some_and(|codes| {
                let listed = codes.values.iter().flatten().any(|v| *v == code);
                match codes.operator.as_str() {
                    "In" => listed,
                    "NotIn" => !listed,
                    _ => false,
                }
            })
        });
        match rule {
            Some(rule) => rule.action == "Restart",
            None => own.restarts(code, false),
        }
    }
}

/// Whether `c` (an init container) is a sidecar: a restartable init container
/// (`restartPolicy: Always` on the container, Kubernetes' `IsRestartableInitContainer`), which
/// keeps running beside the app containers and is restarted whenever it exits.
pub fn is_sidecar(c: &k8s_openapi::api::core::v1::Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Why a container is not running: the kubelet's waiting reasons
/// (`pkg/kubelet/container/sync_result.go`, `images/types.go`, `kuberuntime`), spelled as the
/// kubelet spells them only by [`as_str`](Self::as_str), at the status and event boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitingReason {
    /// Nothing ran yet (sandbox, volumes or the first start under way).
    ContainerCreating,
    /// An app container waits for the init containers.
    PodInitializing,
    /// Restarting an exited container is backing off.
    CrashLoopBackOff,
    /// The image pull failed (shown once, then [`Self::ImagePullBackOff`]).
    ErrImagePull,
    /// The next pull attempt is backing off after [`Self::ErrImagePull`].
    ImagePullBackOff,
    /// The image is absent and the pull policy is `Never`.
    ErrImageNeverPull,
    /// Env or volume mounts cannot be built.
    CreateContainerConfigError,
    /// The runtime refused to create the container.
    CreateContainerError,
    /// The runtime could not start the container.
    RunContainerError,
}

impl WaitingReason {
    /// The kubelet's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ContainerCreating => "ContainerCreating",
            Self::PodInitializing => "PodInitializing",
            Self::CrashLoopBackOff => "CrashLoopBackOff",
            Self::ErrImagePull => "ErrImagePull",
            Self::ImagePullBackOff => "ImagePullBackOff",
            Self::ErrImageNeverPull => "ErrImageNeverPull",
            Self::CreateContainerConfigError => "CreateContainerConfigError",
            Self::CreateContainerError => "CreateContainerError",
            Self::RunContainerError => "RunContainerError",
        }
    }

    /// The reason of an image that is not available.
    pub fn of_image(e: &ImageError) -> Self {
        match e {
            ImageError::NeverPull { .. } => Self::ErrImageNeverPull,
            ImageError::Inspect { .. } | ImageError::Pull { .. } => Self::ErrImagePull,
        }
    }

    /// Whether it is an image error whose `Failed` event says `Error: <reason>` (kubelet:
    /// `ErrImagePull`, `ErrImageNeverPull`) instead of the detail.
    pub fn is_image_error(self) -> bool {
        matches!(self, Self::ErrImagePull | Self::ErrImageNeverPull)
    }
}

impl std::fmt::Display for WaitingReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A waiting reason and message as reported in `state.waiting`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Why.
    pub reason: WaitingReason,
    /// Detail.
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_restart_policy_and_its_rules_override_the_pods() {
        let c = |json: serde_json::Value| -> k8s_openapi::api::core::v1::Container {
            serde_json::from_value(json).expect("container")
        };
        let plain = c(serde_json::json!({"name": "a"}));
        assert!(!RestartPolicy::Never.restarts_app(&plain, 1));
        let always = c(serde_json::json!({"name": "a", "restartPolicy": "Always"}));
        assert!(RestartPolicy::Never.restarts_app(&always, 0));
        let ruled = c(serde_json::json!({"name": "a", "restartPolicy": "Never",
            "restartPolicyRules": [
                {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}]}));
        assert!(RestartPolicy::Always.restarts_app(&ruled, 42));
        assert!(!RestartPolicy::Always.restarts_app(&ruled, 1));
        let not_in = c(serde_json::json!({"name": "a", "restartPolicy": "Never",
            "restartPolicyRules": [
                {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0]}}]}));
        assert!(RestartPolicy::Never.restarts_app(&not_in, 3));
        assert!(!RestartPolicy::Never.restarts_app(&not_in, 0));
    }

    #[test]
    fn restart_policy_is_parsed_once_and_decides_restarts() {
        let pod = |p: &str| -> Pod {
            serde_json::from_value(
                serde_json::json!({"spec": {"restartPolicy": p, "containers": []}}),
            )
            .expect("pod")
        };
        assert_eq!(RestartPolicy::of(&pod("Never")), RestartPolicy::Never);
        assert_eq!(
            RestartPolicy::of(&pod("OnFailure")),
            RestartPolicy::OnFailure
        );
        assert_eq!(RestartPolicy::of(&Pod::default()), RestartPolicy::Always);
        use RestartPolicy::{Always, Never, OnFailure};
        assert!(Always.restarts(0, false));
        assert!(!Always.restarts(0, true));
        assert!(Always.restarts(1, true));
        assert!(OnFailure.restarts(2, false));
        assert!(!OnFailure.restarts(0, false));
        assert!(!Never.restarts(1, false));
    }
}
