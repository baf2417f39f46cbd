use super::*;
use crate::fixture::Tree;

const MEMORY_STAT_V1: &str = "\
cache 600
rss 10
pgfault 5
total_cache 606015488
total_rss 4096
total_pgfault 115461993
total_pgmajfault 2422
total_inactive_file 449798144
";

/// A v1 hybrid host: `cpu` and `cpuacct` apart, a `unified` mount, a `0::/` line.
fn v1_tree() -> Tree {
    let tree = Tree::new();
    tree.write(
        "proc/100/cgroup",
        "9:name=systemd:/docker/abc\n4:memory:/docker/abc\n2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n0::/\n",
    )
    .write("cgroup/cpuacct/docker/abc/cpuacct.usage", "39232750632785\n")
    .write("cgroup/memory/docker/abc/memory.usage_in_bytes", "606015488\n")
    .write("cgroup/memory/docker/abc/memory.stat", MEMORY_STAT_V1)
    .mkdir("cgroup/unified");
    tree
}

#[test]
fn v1_process_cgroup_and_stats() {
    let tree = v1_tree();
    let fs = tree.fs();
    assert_eq!(fs.version().unwrap(), CgroupVersion::V1);
    let path = fs.process_cgroup(100).unwrap();
    assert_eq!(
        path,
        CgroupPath::V1 {
            cpuacct: "/docker/abc".into(),
            memory: "/docker/abc".into()
        }
    );
    let stats = fs.stats(&path).unwrap();
    assert_eq!(
        stats,
        CgroupStats {
            cpu_usage_nanos: 39_232_750_632_785,
            memory: MemoryStats {
                usage_bytes: 606_015_488,
                working_set_bytes: 606_015_488 - 449_798_144,
                rss_bytes: 4096,
                page_faults: 115_461_993,
                major_page_faults: 2422,
            },
        }
    );
    assert_eq!(fs.path("/docker/abc").unwrap(), path);
}

#[test]
fn v1_combined_cpu_cpuacct_hierarchy() {
    let tree = Tree::new();
    tree.write(
        "proc/7/cgroup",
        "3:memory:/kubepods/pod1/c\n2:cpu,cpuacct:/kubepods/pod1/c\n",
    )
    .write("cgroup/cpu,cpuacct/kubepods/pod1/c/cpuacct.usage", "5\n")
    .write(
        "cgroup/memory/kubepods/pod1/c/memory.usage_in_bytes",
        "10\n",
    )
    .write(
        "cgroup/memory/kubepods/pod1/c/memory.stat",
        "total_inactive_file 30\n",
    );
    let fs = tree.fs();
    let stats = fs.stats(&fs.process_cgroup(7).unwrap()).unwrap();
    assert_eq!(stats.cpu_usage_nanos, 5);
    // More inactive file than usage: the working set saturates at 0, as cAdvisor's.
    assert_eq!(stats.memory.working_set_bytes, 0);
    assert_eq!(stats.memory.rss_bytes, 0);
}

#[test]
fn v2_process_cgroup_and_stats() {
    let tree = Tree::new();
    tree.write("cgroup/cgroup.controllers", "cpu memory pids\n")
        .write("proc/200/cgroup", "0::/system.slice/docker-abc.scope\n")
        .write(
            "cgroup/system.slice/docker-abc.scope/cpu.stat",
            "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
        )
        .write(
            "cgroup/system.slice/docker-abc.scope/memory.current",
            "8192\n",
        )
        .write(
            "cgroup/system.slice/docker-abc.scope/memory.stat",
            "anon 4096\nfile 4096\ninactive_file 1024\npgfault 11\npgmajfault 1\n",
        );
    let fs = tree.fs();
    assert_eq!(fs.version().unwrap(), CgroupVersion::V2);
    let path = fs.process_cgroup(200).unwrap();
    assert_eq!(
        path,
        CgroupPath::V2 {
            path: "/system.slice/docker-abc.scope".into()
        }
    );
    let stats = fs.stats(&path).unwrap();
    assert_eq!(
        stats,
        CgroupStats {
            cpu_usage_nanos: 1_500_000,
            memory: MemoryStats {
                usage_bytes: 8192,
                working_set_bytes: 7168,
                rss_bytes: 4096,
                page_faults: 11,
                major_page_faults: 1,
            },
        }
    );
    // A v1 path on a v2 mount is refused.
    let v1 = CgroupPath::V1 {
        cpuacct: "/".into(),
        memory: "/".into(),
    };
    assert!(matches!(fs.stats(&v1), Err(Error::UnknownLayout { .. })));
}

#[test]
fn malformed_files_name_the_line() {
    let tree = v1_tree();
    tree.write("proc/101/cgroup", "4:memory:/x\nnot a cgroup line\n");
    let fs = tree.fs();
    let err = fs.process_cgroup(101).unwrap_err();
    assert!(
        matches!(&err, Error::Malformed { line, .. } if line == "not a cgroup line"),
        "{err}"
    );
    assert!(err.to_string().contains("101/cgroup"), "{err}");

    tree.write("cgroup/memory/docker/abc/memory.stat", "total_rss 12 kB\n");
    let err = fs.stats(&fs.process_cgroup(100).unwrap()).unwrap_err();
    assert!(err.to_string().contains("memory.stat") && err.to_string().contains("total_rss 12 kB"));

    tree.write("proc/102/cgroup", "2:cpuacct:/x\n");
    assert!(matches!(
        fs.process_cgroup(102),
        Err(Error::MissingKey { key: "memory", .. })
    ));
    assert!(matches!(fs.process_cgroup(103), Err(Error::Missing { .. })));
}

#[test]
fn unknown_layout_and_escaping_paths() {
    let tree = Tree::new();
    tree.mkdir("cgroup/memory");
    assert!(matches!(
        tree.fs().version(),
        Err(Error::UnknownLayout { .. })
    ));
    let tree = v1_tree();
    let path = CgroupPath::V1 {
        cpuacct: "/../../etc".into(),
        memory: "/".into(),
    };
    assert!(matches!(
        tree.fs().stats(&path),
        Err(Error::InvalidCgroupPath { .. })
    ));
}

#[test]
fn host_cgroup_and_node_are_readable() {
    if !Path::new("/sys/fs/cgroup").is_dir() {
        return;
    }
    let fs = CgroupFs::host();
    fs.process_cgroup(std::process::id()).unwrap();
    let node = fs.node_stats().unwrap();
    assert!(
        node.memory_capacity_bytes > 0 && node.cpu_usage_nanos > 0,
        "{node:?}"
    );
}
