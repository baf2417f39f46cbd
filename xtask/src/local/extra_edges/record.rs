//! What [`super::start`] made, written to `<run dir>/extra-edges.json` as it makes it, so that
//! [`super::clean`] undoes everything even after a crash (as `pids` does for the processes).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

/// The file's name in the run directory.
const FILE: &str = "extra-edges.json";

/// The site's namespaces, links, engines and processes, and the pod CIDRs its nodes hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The site's namespace (`verge_testkit::netns::SiteNet`), once made.
    pub site: Option<String>,
    /// The host's leg on the site, once made.
    pub host_link: Option<String>,
    /// The namespaced edge nodes, in start order.
    pub edges: Vec<EdgeRecord>,
    /// The pod CIDRs of every node of the site (the node on the host included), once known:
    /// the host's routes and `verge-site` rules that name them go with the site.
    pub pod_cidrs: Vec<String>,
}

/// One namespaced edge node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EdgeRecord {
    /// The node name.
    pub node: String,
    /// Its network namespace (`verge_testkit::netns::EdgeNetns`).
    pub netns: String,
    /// The host's end of the namespace's veth pair.
    pub host_if: String,
    /// Its directory: the engine's (`docker/`), edgecore's data (`data/`) and configuration.
    pub dir: PathBuf,
    /// edgecore's pid, once started.
    pub edgecore_pid: Option<u32>,
}

impl Record {
    /// The record in `dir`, if there is one.
    pub fn load(dir: &Path) -> Option<Self> {
        let text = std::fs::read(dir.join(FILE)).ok()?;
        match serde_json::from_slice(&text) {
            Ok(record) => Some(record),
            Err(error) => {
                eprintln!(
                    "warning: {} does not parse ({error}); nothing cleaned from it",
                    dir.join(FILE).display()
                );
                None
            }
        }
    }

    /// Writes the record to `dir`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let path = dir.join(FILE);
        std::fs::write(&path, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", path.display()))
    }

    /// Removes the record from `dir`.
    pub fn remove(dir: &Path) {
        let _ = std::fs::remove_file(dir.join(FILE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_the_file() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        assert_eq!(Record::load(dir.path()), None);
        let record = Record {
            site: Some("verge-site-1-200".to_owned()),
            host_link: Some("verge-site200".to_owned()),
            edges: vec![EdgeRecord {
                node: "verge-edge-2".to_owned(),
                netns: "verge-e2e-1-201".to_owned(),
                host_if: "vh1x201".to_owned(),
                dir: dir.path().join("edge-2"),
                edgecore_pid: Some(42),
            }],
            pod_cidrs: vec!["10.244.1.0/24".to_owned()],
        };
        record.save(dir.path())?;
        assert_eq!(Record::load(dir.path()), Some(record));
        Record::remove(dir.path());
        assert_eq!(Record::load(dir.path()), None);
        Ok(())
    }
}
