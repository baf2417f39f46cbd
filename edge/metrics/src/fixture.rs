//! Test fixtures: cgroup and proc trees in a temporary directory, and a sample snapshot.

use std::path::PathBuf;

use chrono::{DateTime, TimeZone, Utc};

use crate::{
    CgroupFs, ContainerSample, FsStats, InterfaceStats, MemoryStats, NodeSample, PodSample, Sample,
    Snapshot, Timed, VolumeSample,
};

/// A temporary directory with `cgroup/` and `proc/` below it.
pub(crate) struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    pub(crate) fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    /// Writes `text` at `rel` (below the temporary directory), making its directories.
    pub(crate) fn write(&self, rel: &str, text: &str) -> &Self {
        let path = self.path(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&path, text).expect("write");
        self
    }

    /// Makes the directory `rel`.
    pub(crate) fn mkdir(&self, rel: &str) -> &Self {
        std::fs::create_dir_all(self.path(rel)).expect("mkdir");
        self
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// The [`CgroupFs`] at `cgroup/` and `proc/`.
    pub(crate) fn fs(&self) -> CgroupFs {
        CgroupFs::at(self.path("cgroup"), self.path("proc"))
    }
}

pub(crate) fn at(secs: i64, millis: u32) -> DateTime<Utc> {
    Utc.timestamp_opt(secs, millis * 1_000_000)
        .single()
        .expect("valid time")
}

fn sample(timestamp: DateTime<Utc>, cpu_nanos: u64, working_set: u64) -> Sample {
    Sample {
        timestamp,
        cpu_usage_nanos: cpu_nanos,
        usage_nano_cores: Some(250_000_000),
        memory: MemoryStats {
            usage_bytes: working_set + 100,
            working_set_bytes: working_set,
            rss_bytes: 7,
            page_faults: 8,
            major_page_faults: 9,
        },
        memory_available_bytes: None,
    }
}

fn fs(time: DateTime<Utc>) -> Timed<FsStats> {
    Timed {
        time,
        value: FsStats {
            available_bytes: 1,
            capacity_bytes: 2,
            used_bytes: 3,
            inodes_free: 4,
            inodes: 5,
            inodes_used: 6,
        },
    }
}

/// A node with one pod (`kube-system/web"1`) of two containers, one with a quoted and
/// backslashed name and no start time.
pub(crate) fn snapshot() -> Snapshot {
    let t = at(1_700_000_000, 123);
    let eth0 = InterfaceStats {
        name: "eth0".into(),
        rx_bytes: 1,
        rx_errors: 2,
        tx_bytes: 3,
        tx_errors: 4,
    };
    let wlan0 = InterfaceStats {
        name: "wlan0".into(),
        ..eth0.clone()
    };
    Snapshot {
        node: NodeSample {
            name: "edge-1".into(),
            start_time: at(1_600_000_000, 0),
            usage: Some(Sample {
                memory_available_bytes: Some(1000),
                ..sample(t, 12_500_000_000, 4096)
            }),
            network: Some(Timed {
                time: t,
                value: vec![wlan0],
            }),
            fs: Some(fs(t)),
            image_fs: Some(fs(t)),
            system_containers: vec![],
        },
        pods: vec![PodSample {
            namespace: "kube-system".into(),
            name: "web\"1".into(),
            uid: "uid-1".into(),
            start_time: at(1_699_999_000, 0),
            usage: Some(sample(t, 3_000_000_000, 2048)),
            network: Some(Timed {
                time: t,
                value: vec![eth0],
            }),
            containers: vec![
                ContainerSample {
                    name: "app".into(),
                    start_time: at(1_699_999_100, 500),
                    usage: Some(sample(t, 1_500_000_000, 1024)),
                    rootfs: Some(fs(t)),
                    logs: Some(fs(t)),
                },
                ContainerSample {
                    name: "side\\car\n".into(),
                    start_time: at(0, 0),
                    usage: None,
                    rootfs: None,
                    logs: None,
                },
            ],
            volumes: vec![VolumeSample {
                name: "data".into(),
                fs: fs(t),
            }],
            ephemeral_storage: Some(fs(t)),
            process_count: Some(3),
        }],
        scrape_error: false,
    }
}
