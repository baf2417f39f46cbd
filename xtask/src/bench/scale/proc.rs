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
