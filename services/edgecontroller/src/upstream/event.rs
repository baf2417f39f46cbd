//! Events the edge records (kubelet's event recorder), created in the pod's namespace.

use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tracing::{debug, warn};

use crate::{Error, Result};

/// Fills the namespace and name of `event` from its path (`<ns>/event/<name>`).
///
/// # Errors
/// [`Error::Forbidden`] when the object names another namespace or name than its path.
pub fn prepare(node: &str, namespace: &str, name: &str, mut event: Event) -> Result<Event> {
    let meta = &mut event.metadata;
    let mismatch = meta.namespace.as_deref().is_some_and(|n| n != namespace)
        || meta.name.as_deref().is_some_and(|n| n != name);
    if mismatch {
        return Err(Error::Forbidden {
            node: node.to_owned(),
            what: format!("an Event other than {namespace}/{name}"),
        });
    }
    meta.namespace = Some(namespace.to_owned());
    meta.name = Some(name.to_owned());
    Ok(event)
}

/// Creates `event`; when it already exists (a retried message, or the next occurrence of a
/// series the edge aggregates under one name) its `count`, `lastTimestamp` and `message` are
/// patched to the reported ones. An event the API server rejects for good (a 4xx other than
/// 409 and 429: its namespace is gone or terminating, it is invalid, the node may not write
/// it) is dropped with a warning, not retried: client-go's event sink does not retry an
/// event the server rejected either ("Server rejected event (will not retry!)").
///
/// # Errors
/// [`Error::Kube`] when the create or the patch fails in a way worth retrying (5xx, 429,
/// no answer).
pub async fn create(client: &kube::Client, event: &Event) -> Result<()> {
    let namespace = event.metadata.namespace.as_deref().unwrap_or("default");
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), event).await {
        Ok(_) => debug!("event created"),
        // A repeat of an event the edge aggregated (same name, higher count): bump its count
        // and lastTimestamp, as the kubelet's event recorder patches a series.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let name = event.metadata.name.as_deref().unwrap_or_default();
            let patch = serde_json::json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(Error::kube("patch event"))?;
            debug!("event series updated");
        }
        Err(kube::Error::Api(s)) if rejected_for_good(s.code) => {
            if s.is_not_found() {
                debug!(reason = %s.message, "event's namespace is gone; dropped");
            } else {
                warn!(code = s.code, reason = %s.message, "API server rejected event; dropped");
            }
        }
        Err(error) => return Err(Error::kube("create event")(error)),
    }
    Ok(())
}

/// Whether an API status `code` rejects an event for good (see [`create`]).
fn rejected_for_good(code: u16) -> bool {
    (400..500).contains(&code) && code != 409 && code != 429
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_client_errors_other_than_conflict_and_throttling_are_final() {
        assert!(rejected_for_good(404));
        assert!(rejected_for_good(403));
        assert!(rejected_for_good(422));
        assert!(!rejected_for_good(409));
        assert!(!rejected_for_good(429));
        assert!(!rejected_for_good(500));
    }

    #[test]
    fn path_fills_and_bounds_the_object() {
        let e = prepare("edge-1", "ns", "e1", Event::default()).expect("ok");
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(e.metadata.name.as_deref(), Some("e1"));
        let mut other = Event::default();
        other.metadata.namespace = Some("kube-system".into());
        assert!(prepare("edge-1", "ns", "e1", other).is_err());
    }
}
