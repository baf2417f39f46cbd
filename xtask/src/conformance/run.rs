//! Running `e2e.test`: the selection (`--ginkgo.focus`, `--ginkgo.focus-file`, the label
//! filter and the exclusions, [`Selection`]), a dry run that lists the selected specs, and the real run
//! against a cluster, each writing Ginkgo's JUnit report.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::junit::{self, SpecResult, State};
use super::suite::Selection;

/// A group of specs left out of the run, with the reason written to the document.
#[derive(Debug, Clone, Copy)]
pub struct Exclusion {
    /// The tag in the spec's text, e.g. `[Slow]` (`--ginkgo.skip` gets it regex-quoted).
    pub tag: &'static str,
    /// Why it is left out.
    pub reason: &'static str,
}

/// One spec of the selection (the dry run's list).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedSpec {
    /// The spec's full text as the JUnit report names it, without `[It] `.
    pub text: String,
    /// Its package under `test/e2e/` (`common`, `apps`, ...): the first directory of the
    /// file that declares it.
    pub package: String,
}

/// One e2e.test invocation.
#[derive(Debug, Clone)]
pub struct E2eRun {
    /// `bin/e2e.test`.
    pub e2e_test: PathBuf,
    /// `bin/ginkgo`, the Ginkgo CLI that runs e2e.test in parallel processes (as upstream's
    /// `hack/ginkgo-e2e.sh` does).
    pub ginkgo: PathBuf,
    /// Parallel Ginkgo processes (`--procs`); specs marked `[Serial]` would need 1.
    pub procs: usize,
    /// The release's sources (`--repo-root`).
    pub repo_root: PathBuf,
    /// Which specs run.
    pub selection: Selection,
    /// Where the report, the log and e2e's output go.
    pub out_dir: PathBuf,
}

impl E2eRun {
    /// The selection flags of the dry run (no exclusions); [`E2eRun::run`] gives the Ginkgo
    /// CLI the same ones.
    fn selection(&self, cmd: &mut Command) {
        cmd.arg(format!("--ginkgo.focus={}", self.selection.focus))
            .arg(format!("--ginkgo.focus-file={}", self.selection.focus_file))
            .arg(format!(
                "--ginkgo.label-filter={}",
                self.selection.label_filter
            ))
            .arg("--ginkgo.no-color")
            .arg(format!("--repo-root={}", self.repo_root.display()))
            .arg(format!("--e2e-output-dir={}", self.out_dir.display()));
    }

    /// `e2e.test --ginkgo.dry-run` of the selection without the exclusions: the full texts
    /// of the selected specs and their packages (needs no cluster). The texts come from the
    /// JUnit report (as the real run's report names the specs), the packages from the JSON
    /// report written beside it, whose spec reports come in the same order.
    ///
    /// # Errors
    /// e2e.test fails or writes no readable report, or the two reports disagree.
    pub fn selected_specs(&self) -> anyhow::Result<Vec<SelectedSpec>> {
        std::fs::create_dir_all(&self.out_dir)?;
        let report = self.out_dir.join("dry-run.xml");
        let json_report = self.out_dir.join("dry-run.json");
        let _ = std::fs::remove_file(&report);
        let _ = std::fs::remove_file(&json_report);
        let mut cmd = Command::new(&self.e2e_test);
        self.selection(&mut cmd);
        let out = cmd
            .arg("--ginkgo.dry-run")
            .arg(format!("--ginkgo.junit-report={}", report.display()))
            .arg(format!("--ginkgo.json-report={}", json_report.display()))
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {} --ginkgo.dry-run", self.e2e_test.display()))?;
        let xml = std::fs::read_to_string(&report).with_context(|| {
            format!(
                "e2e.test --ginkgo.dry-run wrote no report ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        let cases = junit::parse(&xml)?;
        let packages = spec_packages(&std::fs::read(&json_report).with_context(|| {
            format!(
                "e2e.test --ginkgo.dry-run wrote no {}",
                json_report.display()
            )
        })?)?;
        anyhow::ensure!(
            packages.len() == cases.len(),
            "the dry run's JUnit report has {} cases, its JSON report {}",
            cases.len(),
            packages.len()
        );
        Ok(cases
            .into_iter()
            .zip(packages)
            .filter(|(c, _)| c.is_spec() && c.state == State::Passed)
            .map(|(c, package)| SelectedSpec {
                text: c.text().to_owned(),
                package,
            })
            .collect())
    }

    /// Runs the selection minus the exclusions against the cluster of `kubeconfig` in
    /// [`E2eRun::procs`] parallel e2e.test processes under the Ginkgo CLI, with
    /// `--timeout=<timeout>`; output to `<out>/e2e.log`, a progress line every minute;
    /// e2e.test is killed 5 minutes after its own timeout. Returns the report's test cases.
    /// A failing exit status is expected when specs fail and is not an error.
    ///
    /// # Errors
    /// e2e.test cannot start, or writes no readable report.
    pub fn run(
        &self,
        kubeconfig: &Path,
        kubectl: &Path,
        timeout: Duration,
    ) -> anyhow::Result<Vec<SpecResult>> {
        std::fs::create_dir_all(&self.out_dir)?;
        let report = self.report_path();
        let _ = std::fs::remove_file(&report);
        let log_path = self.out_dir.join("e2e.log");
        let log = std::fs::File::create(&log_path)?;
        // `ginkgo [flags] e2e.test -- [e2e flags]`: the CLI runs `procs` copies of e2e.test,
        // each taking specs from a shared queue, and merges their reports.
        let mut cmd = Command::new(&self.ginkgo);
        cmd.arg(format!("--procs={}", self.procs))
            .arg(format!("--focus={}", self.selection.focus))
            .arg(format!("--focus-file={}", self.selection.focus_file))
            .arg(format!("--label-filter={}", self.selection.label_filter))
            .arg(format!("--skip={}", self.selection.skip_regex()))
            .arg(format!("--junit-report={}", report.display()))
            .arg(format!("--timeout={}s", timeout.as_secs()))
            .arg("--no-color")
            .arg("-v")
            .arg(&self.e2e_test)
            .arg("--")
            .arg(format!("--repo-root={}", self.repo_root.display()))
            .arg(format!("--e2e-output-dir={}", self.out_dir.display()))
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--kubectl-path={}", kubectl.display()))
            .arg("--provider=local")
            // The only node is the edge node; no system pods or daemonsets to wait for.
            .arg("--allowed-not-ready-nodes=0")
            .arg("--node-os-distro=debian")
            // On a failure the framework dumps the namespace's events and pods into the
            // spec's output: the evidence of a container the machine refused.
            .arg("--dump-logs-on-failure=true")
            .current_dir(&self.out_dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        eprintln!(
            "conformance: e2e.test running in {} processes (at most {} min); output in {}",
            self.procs,
            timeout.as_secs() / 60,
            log_path.display()
        );
        let mut child = cmd
            .spawn()
            .with_context(|| format!("running {}", self.ginkgo.display()))?;
        let started = Instant::now();
        let hard_limit = timeout + Duration::from_secs(300);
        let mut next_progress = started + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if started.elapsed() > hard_limit {
                eprintln!("conformance: e2e.test outlived its timeout; killing it");
                child.kill()?;
                break child.wait()?;
            }
            std::thread::sleep(Duration::from_secs(1));
            if next_progress.elapsed() > Duration::ZERO {
                next_progress += Duration::from_secs(60);
                eprintln!(
                    "conformance:   e2e.test: {} min, {} specs done",
                    started.elapsed().as_secs() / 60,
                    specs_done(&log_path)
                );
            }
        };
        eprintln!(
            "conformance: e2e.test exited ({status}) after {:.0?}",
            started.elapsed()
        );
        let xml = std::fs::read_to_string(&report).with_context(|| {
            format!(
                "e2e.test wrote no report {}; see {}",
                report.display(),
                log_path.display()
            )
        })?;
        let cases = junit::parse(&xml)?;
        if cases.is_empty() {
            bail!("the report {} holds no test cases", report.display());
        }
        Ok(cases)
    }

    /// `<out>/junit.xml`.
    pub fn report_path(&self) -> PathBuf {
        self.out_dir.join("junit.xml")
    }

    /// `<out>/run.json`: how the last run was made ([`super::report::RunInfo`]).
    pub fn info_path(&self) -> PathBuf {
        self.out_dir.join("run.json")
    }
}

/// How many specs `--ginkgo.v` has finished in the log so far (its `• [` result lines).
fn specs_done(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .map(|t| {
            t.lines()
                .filter(|l| l.starts_with("• [") || l.starts_with("S [SKIPPED]") || *l == "•")
                .count()
        })
        .unwrap_or(0)
}

/// The package (first directory under `test/e2e/`) of each spec report of a Ginkgo JSON
/// report, in order; empty for a node declared elsewhere (suite nodes).
///
/// # Errors
/// The report is not Ginkgo's JSON.
fn spec_packages(json: &[u8]) -> anyhow::Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Report {
        #[serde(default)]
        spec_reports: Vec<SpecReport>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct SpecReport {
        leaf_node_location: Location,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Location {
        #[serde(default)]
        file_name: String,
    }
    let reports: Vec<Report> =
        serde_json::from_slice(json).context("parsing Ginkgo's JSON report")?;
    Ok(reports
        .into_iter()
        .flat_map(|r| r.spec_reports)
        .map(|s| {
            let file = s.leaf_node_location.file_name;
            file.split_once("test/e2e/")
                .and_then(|(_, rest)| rest.split_once('/'))
                .map(|(package, _)| package.to_owned())
                .unwrap_or_default()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packages_from_the_json_report() -> anyhow::Result<()> {
        let json = br#"[{"SpecReports":[
            {"LeafNodeLocation":{"FileName":"/x/k8s.io/kubernetes@v1.37.1/test/e2e/apps/job.go"}},
            {"LeafNodeLocation":{"FileName":"/x/k8s.io/kubernetes@v1.37.1/test/e2e/common/node/pods.go"}},
            {"LeafNodeLocation":{"FileName":""}}
        ]}]"#;
        assert_eq!(spec_packages(json)?, ["apps", "common", ""]);
        Ok(())
    }
}
