//! Process resource limits a server raises for itself at start.

/// Raises this process's soft limit of open files (`RLIMIT_NOFILE`) to its hard limit, as the
/// Go runtime does for every Kubernetes binary since Go 1.19: a server holding one socket per
/// edge node (cloudhub with 10,000 sessions) would otherwise stop accepting at the common
/// soft default of 1,024 (`accept` fails with `EMFILE`). Returns the soft limit (before,
/// after); `None` for an unlimited value.
///
/// # Errors
/// `setrlimit` failing (not expected: lowering nothing, raising only to the hard limit).
pub fn raise_open_files() -> std::io::Result<(Option<u64>, Option<u64>)> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    let before = limit.current;
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        setrlimit(Resource::Nofile, limit)?;
    }
    Ok((before, getrlimit(Resource::Nofile).current))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_soft_limit_reaches_the_hard_limit() {
        let (_, after) = super::raise_open_files().expect("setrlimit");
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
        assert_eq!(after, hard);
    }
}
