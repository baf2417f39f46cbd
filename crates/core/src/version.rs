//! resourceVersion comparison (architecture.md §3.1).

use std::cmp::Ordering;

/// Whether `incoming` is newer than `stored`.
///
/// Kubernetes documents resourceVersions as opaque, but every etcd-backed API server issues
/// them as increasing integers; like KubeEdge's metamanager we compare them as integers when
/// both parse, and otherwise treat any *different* version as newer (last writer wins).
/// An empty `stored` version is always older.
pub fn is_newer(incoming: &str, stored: &str) -> bool {
    if stored.is_empty() {
        return true;
    }
    match (incoming.parse::<u64>(), stored.parse::<u64>()) {
        (Ok(a), Ok(b)) => a.cmp(&b) == Ordering::Greater,
        _ => incoming != stored,
    }
}

#[cfg(test)]
mod tests {
    use super::is_newer;

    #[test]
    fn integers_compare_numerically() {
        assert!(is_newer("10", "9"));
        assert!(!is_newer("9", "10"));
        assert!(!is_newer("10", "10"));
    }

    #[test]
    fn empty_or_opaque() {
        assert!(is_newer("1", ""));
        assert!(is_newer("abc", "abd"));
        assert!(!is_newer("abc", "abc"));
    }
}
