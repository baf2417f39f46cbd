//! What `/proc` tells about a process: CPU time and open file descriptors; and this process's
//! file-descriptor limit, raised for 10,000 connections.

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

/// Raises this process's soft limit of open files to its hard limit (each hollow edge holds a
/// socket); returns the new soft limit.
pub fn raise_fd_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    limit.current = limit.maximum;
    let _ = setrlimit(Resource::Nofile, limit);
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}
