use super::*;
use crate::fixture::Tree;

const MEMINFO: &str = "\
MemTotal:       16000000 kB
MemFree:         4000000 kB
MemAvailable:    9000000 kB
Buffers:          100000 kB
Inactive(file):  3000000 kB
AnonPages:       2000000 kB
HugePages_Total:       0
";

const VMSTAT: &str = "nr_free_pages 1000\npgfault 123456\npgmajfault 78\n";

const PROC_STAT: &str = "\
cpu  2403903 1103987 398076 982107 14192 0 11158 9687 0 0
cpu0 1212769 548563 199182 483602 7922 0 4937 4555 0 0
intr 1 2 3
";

fn proc_tree() -> Tree {
    let tree = Tree::new();
    tree.write("proc/meminfo", MEMINFO)
        .write("proc/vmstat", VMSTAT)
        .write("proc/stat", PROC_STAT);
    tree
}

#[test]
fn v1_node_from_root_cgroups_and_meminfo() {
    let tree = proc_tree();
    tree.write("cgroup/cpuacct/cpuacct.usage", "39232750632785\n")
        .write("cgroup/memory/memory.usage_in_bytes", "11000000000\n")
        .write(
            "cgroup/memory/memory.stat",
            "cache 5\ntotal_inactive_file 2000000000\ntotal_rss 1500000000\n",
        );
    let node = tree.fs().node_stats().unwrap();
    let kib = 1024;
    assert_eq!(
        node,
        NodeStats {
            cpu_usage_nanos: 39_232_750_632_785,
            // The root memory cgroup's, as cAdvisor reads it on v1.
            memory: MemoryStats {
                usage_bytes: 11_000_000_000,
                working_set_bytes: 9_000_000_000,
                rss_bytes: 1_500_000_000,
                page_faults: 123_456,
                major_page_faults: 78,
            },
            memory_available_bytes: 9_000_000 * kib,
            memory_capacity_bytes: 16_000_000 * kib,
        }
    );
    assert_eq!(
        node.kubelet_available_bytes(),
        16_000_000 * kib - 9_000_000_000
    );
}

#[test]
fn v2_node_cpu_from_root_cpu_stat_else_proc_stat() {
    let tree = proc_tree();
    tree.write("cgroup/cgroup.controllers", "cpu memory\n")
        .write("cgroup/cpu.stat", "usage_usec 42\n");
    assert_eq!(tree.fs().node_stats().unwrap().cpu_usage_nanos, 42_000);

    std::fs::remove_file(tree.path("cgroup/cpu.stat")).unwrap();
    let busy: u64 = 2_403_903 + 1_103_987 + 398_076 + 11_158 + 9_687;
    assert_eq!(
        tree.fs().node_stats().unwrap().cpu_usage_nanos,
        busy * 10_000_000
    );
}

#[test]
fn node_errors_name_the_file() {
    let tree = proc_tree();
    tree.write("proc/meminfo", "MemTotal: 1 kB\nMemFree: 1 kB\n");
    let err = tree.fs().node_stats().unwrap_err();
    assert!(matches!(err, Error::MissingKey { .. }), "{err}");
    assert!(err.to_string().contains("meminfo"), "{err}");

    let tree = proc_tree();
    tree.write("proc/stat", "cpu  1 2 x\n");
    let err = tree.fs().node_stats().unwrap_err();
    assert!(
        matches!(&err, Error::Malformed { line, .. } if line == "cpu  1 2 x"),
        "{err}"
    );
    tree.write("proc/stat", "cpu  1 2 3\n");
    assert!(matches!(
        tree.fs().node_stats(),
        Err(Error::Malformed { .. })
    ));
}
