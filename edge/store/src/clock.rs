//! The current time, as Kubernetes timestamps (`metav1.Time`) want it.

use k8s_openapi::jiff::Timestamp;

/// The current wall-clock time (k8s-openapi's jiff is built without `std`, so it has no
/// `Timestamp::now`). A clock before 1970 gives the epoch.
pub fn now() -> Timestamp {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(since_epoch.as_secs()).unwrap_or(i64::MAX);
    let nanos = i32::try_from(since_epoch.subsec_nanos()).unwrap_or(0);
    Timestamp::new(secs, nanos).unwrap_or(Timestamp::UNIX_EPOCH)
}
