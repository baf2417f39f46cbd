//! What `/proc` tells about a process: CPU time and open file descriptors.

/// User + system CPU time of `pid` so far, in seconds (`/proc/<pid>/stat` fields 14 and 15,
/// at the kernel's 100 ticks per second).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<u64>().ok();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    Some((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// Open file descriptors of `pid`.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// Pids of the processes whose command name (`/proc/<pid>/comm`, at most 15 bytes) is
/// `comm`, e.g. `kube-apiserver` or `etcd`.
pub fn pids_named(comm: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|name| name.trim_end() == comm)
        })
        .collect()
}

/// The processes whose CPU a storm reports: (label, pids).
pub fn watched(cloudhub: u32, edgecontroller: u32) -> Vec<(&'static str, Vec<u32>)> {
    vec![
        ("cloudhub", vec![cloudhub]),
        ("edgecontroller", vec![edgecontroller]),
        ("hollow edges (xtask)", vec![std::process::id()]),
        ("kube-apiserver", pids_named("kube-apiserver")),
        ("etcd", pids_named("etcd")),
    ]
}

/// CPU seconds so far of each of `watched`'s groups (a missing process counts 0).
pub fn cpu_of(watched: &[(&'static str, Vec<u32>)]) -> Vec<f64> {
    watched
        .iter()
        .map(|(_, pids)| pids.iter().filter_map(|&p| cpu_seconds(p)).sum())
        .collect()
}
