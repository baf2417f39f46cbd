//! `securityContext.runAsNonRoot`, verified before a container is created, as the kubelet's
//! `verifyRunAsNonRoot` does: with the effective (container over pod) `runAsNonRoot: true`,
//! an explicit `runAsUser: 0` is refused; without `runAsUser`, the image's user decides — no
//! user or uid 0 is root and refused, a non-numeric user name cannot be verified and is
//! refused, any other uid passes. A refusal is the container's `CreateContainerConfigError`
//! with the kubelet's message.

use k8s_openapi::api::core::v1::{Container, Pod};

/// The effective `runAsNonRoot` and `runAsUser` of `c` in `pod` (container values first).
fn effective(pod: &Pod, c: &Container) -> (bool, Option<i64>) {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let sc = c.security_context.as_ref();
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| pod_sc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    let user = sc
        .and_then(|s| s.run_as_user)
        .or_else(|| pod_sc.and_then(|s| s.run_as_user));
    (non_root, user)
}

/// Whether the image must be inspected for its user: `runAsNonRoot` is on and no
/// `runAsUser` decides.
pub fn needs_image_user(pod: &Pod, c: &Container) -> bool {
    matches!(effective(pod, c), (true, None))
}

/// Checks `c` against its `runAsNonRoot`; `image_user` is the image's `Config.User` (only
/// read when [`needs_image_user`]).
///
/// # Errors
/// The kubelet's message when the container would run as root or its user cannot be
/// verified; `pod_name` is the kubelet's `format.Pod` form (`name_namespace(uid)`).
pub fn verify(pod: &Pod, c: &Container, image_user: &str, pod_name: &str) -> Result<(), String> {
    let (non_root, user) = effective(pod, c);
    if !non_root {
        return Ok(());
    }
    let name = &c.name;
    match user {
        Some(0) => Err(format!(
            "container's runAsUser breaks non-root policy (pod: \"{pod_name}\", container: {name})"
        )),
        Some(_) => Ok(()),
        None => {
            // The user part of `user[:group]`, as the runtime reports an image's uid.
            let user = image_user.split(':').next().unwrap_or_default();
            match user.parse::<i64>() {
                _ if user.is_empty() => Err(root(pod_name, name)),
                Ok(0) => Err(root(pod_name, name)),
                Ok(_) => Ok(()),
                Err(_) => Err(format!(
                    "container has runAsNonRoot and image has non-numeric user ({user}), cannot \
                     verify user is non-root (pod: \"{pod_name}\", container: {name})"
                )),
            }
        }
    }
}

fn root(pod_name: &str, container: &str) -> String {
    format!(
        "container has runAsNonRoot and image will run as root (pod: \"{pod_name}\", container: \
         {container})"
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn case(pod_sc: serde_json::Value, sc: serde_json::Value) -> (Pod, Container) {
        let c: Container =
            serde_json::from_value(json!({ "name": "c", "securityContext": sc })).expect("c");
        let pod: Pod = serde_json::from_value(json!({
            "spec": { "securityContext": pod_sc, "containers": [c] },
        }))
        .expect("pod");
        (pod, c)
    }

    const POD: &str = "p_ns(u)";

    #[test]
    fn without_run_as_non_root_anything_goes() {
        let (pod, c) = case(json!({}), json!({ "runAsUser": 0 }));
        assert!(!needs_image_user(&pod, &c));
        assert_eq!(verify(&pod, &c, "", POD), Ok(()));
    }

    #[test]
    fn an_explicit_user_decides() {
        let (pod, c) = case(json!({ "runAsNonRoot": true }), json!({ "runAsUser": 0 }));
        assert!(!needs_image_user(&pod, &c));
        assert_eq!(
            verify(&pod, &c, "1234", POD),
            Err(
                "container's runAsUser breaks non-root policy (pod: \"p_ns(u)\", container: c)"
                    .into()
            )
        );
        let (pod, c) = case(
            json!({ "runAsUser": 1000 }),
            json!({ "runAsNonRoot": true }),
        );
        assert_eq!(verify(&pod, &c, "", POD), Ok(()));
    }

    #[test]
    fn otherwise_the_image_user_decides() {
        let (pod, c) = case(json!({}), json!({ "runAsNonRoot": true }));
        assert!(needs_image_user(&pod, &c));
        assert_eq!(
            verify(&pod, &c, "", POD),
            Err(
                "container has runAsNonRoot and image will run as root (pod: \"p_ns(u)\", \
                 container: c)"
                    .into()
            )
        );
        assert!(verify(&pod, &c, "0:0", POD).is_err());
        assert_eq!(verify(&pod, &c, "1234", POD), Ok(()));
        assert_eq!(verify(&pod, &c, "1000:50", POD), Ok(()));
        assert_eq!(
            verify(&pod, &c, "nobody", POD),
            Err(
                "container has runAsNonRoot and image has non-numeric user (nobody), cannot \
                 verify user is non-root (pod: \"p_ns(u)\", container: c)"
                    .into()
            )
        );
        // The container's `runAsNonRoot: false` overrides the pod's `true`.
        let (pod, c) = case(
            json!({ "runAsNonRoot": true }),
            json!({ "runAsNonRoot": false }),
        );
        assert_eq!(verify(&pod, &c, "", POD), Ok(()));
    }
}
