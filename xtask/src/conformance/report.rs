//! The results of a run against the selection, and the document (`docs/conformance.md` or
//! `docs/node-conformance.md`, [`Suite::document`]) written from them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::images::IMAGES;
use super::junit::{PRIVILEGED_REFUSED, SpecResult, State};
use super::kubeedge;
use super::run::SelectedSpec;
use super::suite::{PACKAGES, Selection, Suite};

/// What one run found, counted over the selected specs (the dry run's list).
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Passed specs' texts.
    pub passed: Vec<String>,
    /// Failed specs: text and first error line.
    pub failed: Vec<(String, String)>,
    /// Specs failed for the environment (a privileged container the machine's Docker cannot
    /// start, [`super::junit::PRIVILEGED_REFUSED`]): text, first error line, and the line
    /// of the failure naming runc's refusal.
    pub environment: Vec<(String, String, String)>,
    /// Specs left out by an exclusion: text and the exclusion's tag.
    pub excluded: Vec<(String, &'static str)>,
    /// Specs that skipped themselves at run time (`Skip()`), or were never reached
    /// (suite timeout): text and message.
    pub skipped: Vec<(String, String)>,
    /// Failures of suite nodes (`[SynchronizedBeforeSuite]` …): name and first error line.
    pub suite_failures: Vec<(String, String)>,
    /// Each selected spec's package (`test/e2e/<package>/`), by text.
    pub packages: BTreeMap<String, String>,
}

impl Summary {
    /// Counts the `cases` of the run for the `selected` specs, those the `selection`
    /// excludes apart; a selected spec missing from the report counts as skipped ("not in
    /// the report").
    pub fn new(selected: &[SelectedSpec], cases: &[SpecResult], selection: &Selection) -> Self {
        let by_text: BTreeMap<&str, &SpecResult> = cases
            .iter()
            .filter(|c| c.is_spec())
            .map(|c| (c.text(), c))
            .collect();
        let mut summary = Self::default();
        for spec in selected {
            let text = &spec.text;
            summary.packages.insert(text.clone(), spec.package.clone());
            let excluded = selection.excluded_by(text);
            match (by_text.get(text.as_str()), excluded) {
                (Some(c), _) if c.state == State::Passed => summary.passed.push(text.clone()),
                (Some(c), _) if c.state == State::Failed => {
                    let message = c.message.clone().unwrap_or_else(|| c.status.clone());
                    match &c.privileged_refused {
                        Some(evidence) => {
                            summary
                                .environment
                                .push((text.clone(), message, evidence.clone()))
                        }
                        None => summary.failed.push((text.clone(), message)),
                    }
                }
                (_, Some(e)) => summary.excluded.push((text.clone(), e.tag)),
                (Some(c), None) => summary.skipped.push((
                    text.clone(),
                    c.message.clone().unwrap_or_else(|| "skipped".to_owned()),
                )),
                (None, None) => summary
                    .skipped
                    .push((text.clone(), "not in the report".to_owned())),
            }
        }
        summary.suite_failures = cases
            .iter()
            .filter(|c| !c.is_spec() && c.state == State::Failed)
            .map(|c| (c.name.clone(), c.message.clone().unwrap_or_default()))
            .collect();
        summary
    }

    /// The number of selected specs.
    pub fn total(&self) -> usize {
        self.passed.len()
            + self.failed.len()
            + self.environment.len()
            + self.excluded.len()
            + self.skipped.len()
    }

    /// The part of the summary whose spec texts contain `needle` (e.g. `[sig-network]`).
    pub fn only(&self, needle: &str) -> Self {
        self.only_where(|text| text.contains(needle))
    }

    /// The part of the summary whose specs are declared in `test/e2e/<package>/`.
    pub fn in_package(&self, package: &str) -> Self {
        self.only_where(|text| self.packages.get(text).is_some_and(|p| p == package))
    }

    /// The part of the summary whose spec texts `keep` holds for.
    fn only_where(&self, keep: impl Fn(&str) -> bool) -> Self {
        let keep = |text: &String| keep(text);
        Self {
            passed: self.passed.iter().filter(|t| keep(t)).cloned().collect(),
            failed: self.failed.iter().filter(|f| keep(&f.0)).cloned().collect(),
            environment: self
                .environment
                .iter()
                .filter(|f| keep(&f.0))
                .cloned()
                .collect(),
            excluded: self
                .excluded
                .iter()
                .filter(|f| keep(&f.0))
                .cloned()
                .collect(),
            skipped: self
                .skipped
                .iter()
                .filter(|f| keep(&f.0))
                .cloned()
                .collect(),
            suite_failures: Vec::new(),
            packages: self.packages.clone(),
        }
    }

    /// The result of the spec `text` in words (`passed`, `failed`, ...), `None` when it is
    /// not in the selection.
    pub fn result_of(&self, text: &str) -> Option<&'static str> {
        if self.passed.iter().any(|t| t == text) {
            Some("passed")
        } else if self.failed.iter().any(|f| f.0 == text) {
            Some("failed")
        } else if self.environment.iter().any(|f| f.0 == text) {
            Some("failed for the environment")
        } else if self.excluded.iter().any(|f| f.0 == text) {
            Some("excluded")
        } else if self.skipped.iter().any(|f| f.0 == text) {
            Some("skipped")
        } else {
            None
        }
    }

    /// The table row of the counts: selected, passed, failed, failed for the environment,
    /// excluded, skipped.
    fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {} | {} | {} |",
            self.total(),
            self.passed.len(),
            self.failed.len(),
            self.environment.len(),
            self.excluded.len(),
            self.skipped.len()
        )
    }

    /// Failures grouped by their first error line with digits folded to `N`, largest first.
    pub fn failure_causes(&self) -> Vec<(String, usize)> {
        let mut groups: BTreeMap<String, usize> = BTreeMap::new();
        for (_, message) in &self.failed {
            *groups.entry(fold_digits(message)).or_default() += 1;
        }
        let mut causes: Vec<_> = groups.into_iter().collect();
        causes.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        causes
    }
}

/// How a run was made, for the document's head; kept beside the run's report
/// (`run.json`) so that `--from-report` writes the document again without running.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunInfo {
    /// The date, `YYYY-MM-DD` (UTC).
    pub date: String,
    /// The Kubernetes release, e.g. `1.37.1`.
    pub version: String,
    /// `--ginkgo.focus`.
    pub focus: String,
    /// How long e2e.test ran.
    pub duration: Duration,
    /// The commit whose edgecore ran (`git describe --always --dirty`).
    pub commit: String,
    /// The suite that ran (a `run.json` from before suites were named was node
    /// conformance).
    #[serde(default = "node_conformance")]
    pub suite: Suite,
    /// The edge nodes of the cluster.
    #[serde(default = "one_node")]
    pub nodes: Vec<String>,
}

fn node_conformance() -> Suite {
    Suite::NodeConformance
}

fn one_node() -> Vec<String> {
    vec!["verge-edge-1".to_owned()]
}

/// The tag of the networking specs, counted apart in the document.
const NETWORK: &str = "[sig-network]";

/// The document's text for `summary` of the run `info` with `selection`.
pub fn markdown(info: &RunInfo, selection: &Selection, summary: &Summary) -> String {
    let mut md = String::new();
    let nodes = info
        .nodes
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    let cluster = if info.nodes.len() == 1 {
        format!(
            "the quickstart cluster, whose only schedulable node is the Verge edge node {nodes}"
        )
    } else {
        format!(
            "the quickstart cluster with {} Verge edge nodes ({nodes}), its only schedulable \
             nodes",
            info.nodes.len()
        )
    };
    match info.suite {
        Suite::NodeConformance => {
            let _ = writeln!(md, "# Node conformance of the edge node\n");
            let _ = write!(
                md,
                "Written by `cargo xtask conformance --suite node-conformance` on {} (UTC): the \
                 `[NodeConformance]` specs of `test/e2e/common/{{node,storage,network}}` and the \
                 sig-network `[Conformance]` specs of `test/e2e/network` of Kubernetes v{}",
                info.date, info.version
            );
        }
        Suite::Conformance => {
            let _ = writeln!(md, "# Kubernetes conformance of edge nodes\n");
            let _ = write!(
                md,
                "Written by `cargo xtask conformance --suite conformance` on {} (UTC): the \
                 `[Conformance]` specs of `test/e2e/{{{}}}` of Kubernetes v{} (the packages \
                 KubeEdge's own conformance run compiles in, plus sig-network's)",
                info.date,
                PACKAGES.join(","),
                info.version
            );
        }
    }
    let _ = writeln!(
        md,
        ", run unmodified (`e2e.test` built from the release's Go module) against {cluster}, \
         running pods on Docker, with Services, cluster DNS and the pod network served by \
         edgecore (no kube-proxy, no CoreDNS, no CNI plugin). Focus `{}`, skipping `{}`; \
         e2e.test ran for {} min, with Verge at commit `{}`.\n",
        info.focus,
        selection.skip_regex(),
        info.duration.as_secs().div_ceil(60),
        info.commit
    );
    let _ = writeln!(
        md,
        "| specs | selected | passed | failed | failed for the environment | excluded | skipped \
         at run time / not reached |\n|---|---:|---:|---:|---:|---:|---:|\n| all {}",
        summary.row()
    );
    match info.suite {
        Suite::NodeConformance => {
            let _ = writeln!(md, "| of them `{NETWORK}` {}", summary.only(NETWORK).row());
        }
        Suite::Conformance => {
            for package in PACKAGES {
                let _ = writeln!(
                    md,
                    "| `test/e2e/{package}` {}",
                    summary.in_package(package).row()
                );
            }
        }
    }
    md.push('\n');
    let _ = writeln!(
        md,
        "How the cluster differs from one whose edge nodes are remote: the quickstart's edge \
         nodes run on the API server's host, where their pod networks are routed. The specs \
         that read results through the API server's `pods/proxy` and `services/proxy` (the \
         DNS specs and `Proxy version v1`) reach the edges' pod IPs that way; across a real \
         link the API server cannot dial an edge pod's IP (cloudhub carries its CONNECTs to \
         edge nodes by their stream addresses only). Everything the specs check inside a node \
         (pod to pod, pod to Service, node ports, DNS answers, host ports) runs on edgecore's \
         own pod network, Service rules and resolver.\n"
    );
    if info.suite == Suite::Conformance {
        kubeedge_section(&mut md, summary);
    }
    let network = summary.only(NETWORK);
    if info.suite == Suite::NodeConformance && network.total() > 0 {
        let _ = writeln!(md, "## `{NETWORK}` specs\n");
        for text in summary.packages.keys().filter(|t| t.contains(NETWORK)) {
            let result = summary.result_of(text).unwrap_or("?");
            let _ = writeln!(md, "- {}: {result}", short_text(text));
        }
        md.push('\n');
    }
    let _ = writeln!(md, "## Exclusions\n");
    for e in selection.exclusions {
        let n = summary.excluded.iter().filter(|(_, t)| *t == e.tag).count();
        let _ = writeln!(md, "- `{}` ({n} specs): {}.", e.tag, e.reason);
    }
    if info.suite == Suite::Conformance && !summary.excluded.is_empty() {
        let _ = writeln!(md, "\nThe excluded specs:\n");
        for (text, _) in &summary.excluded {
            let _ = writeln!(md, "- {}", short_text(text));
        }
    }
    let _ = writeln!(
        md,
        "\nNot excluded, but counted apart: a spec whose privileged container the machine's \
         Docker cannot start (runc: `{PRIVILEGED_REFUSED}`, as a bare `docker run --privileged` \
         fails where the engine asks for capabilities outside its own bounding set) failed for \
         the environment, not for edged, which passes `privileged` to Docker as the kubelet \
         passes it to the runtime. Only a failure whose own text shows runc's refusal (the \
         pod dump Ginkgo prints on a timeout, with the container waiting in \
         `RunContainerError`, or the refusal the spec itself reports) counts so; each is \
         listed below with that line. Where the environment allows, these specs run and \
         count like the others.\n"
    );
    let _ = writeln!(
        md,
        "## Images\n\nMade locally under their names in the release's `test/utils/image/manifest.go`, no registry:\n"
    );
    for image in IMAGES {
        let _ = writeln!(md, "- `{}`: {}.", image.reference, image.how);
    }
    if !summary.suite_failures.is_empty() {
        let _ = writeln!(md, "\n## Suite failures\n");
        for (name, message) in &summary.suite_failures {
            let _ = writeln!(md, "- {name}: `{}`", code(message));
        }
    }
    if !summary.failed.is_empty() {
        let _ = writeln!(md, "\n## Failures by first error line\n");
        for (cause, n) in summary.failure_causes() {
            let _ = writeln!(md, "- {n} × `{}`", code(&cause));
        }
        let _ = writeln!(md, "\n## Failures\n");
        for (text, message) in &summary.failed {
            let _ = writeln!(md, "- {text}  \n  `{}`", code(message));
        }
    }
    if !summary.environment.is_empty() {
        let _ = writeln!(md, "\n## Failed for the environment\n");
        for (text, message, evidence) in &summary.environment {
            let _ = writeln!(
                md,
                "- {text}  \n  `{}`; the evidence, from the failure's output: `{}`",
                code(message),
                code(evidence)
            );
        }
    }
    if !summary.skipped.is_empty() {
        let _ = writeln!(md, "\n## Skipped at run time or not reached\n");
        for (text, message) in &summary.skipped {
            let _ = writeln!(md, "- {text}: {}", code(message));
        }
    }
    md
}

/// The section on the specs KubeEdge's conformance run skips by name
/// ([`kubeedge::SKIPPED_NAMES`]): how many of them ran here and passed, each with its
/// result.
fn kubeedge_section(md: &mut String, summary: &Summary) {
    let mut skipped: Vec<&str> = summary
        .packages
        .keys()
        .map(String::as_str)
        .filter(|t| kubeedge::skips(t))
        .collect();
    skipped.sort_unstable();
    let passed = skipped
        .iter()
        .filter(|t| summary.result_of(t) == Some("passed"))
        .count();
    let _ = writeln!(
        md,
        "## The specs KubeEdge skips\n\nKubeEdge's own conformance run skips {} names \
         (`build/conformance/kubernetes/edge_skip_case.yaml` in its repository); they match \
         {} specs of this selection, which run here like the others: **{passed} of {} \
         passed**.\n",
        kubeedge::SKIPPED_NAMES.len(),
        skipped.len(),
        skipped.len()
    );
    for text in skipped {
        let _ = writeln!(
            md,
            "- {}: {}",
            short_text(text),
            summary.result_of(text).unwrap_or("?")
        );
    }
    md.push('\n');
}

/// A spec's text without its trailing label list (`[sig-network, Conformance]`).
fn short_text(text: &str) -> &str {
    match text.rfind(" [") {
        Some(i) if text.ends_with(']') && text[i..].contains(", ") => &text[..i],
        _ => text,
    }
}

/// `text` shortened to 300 characters, backticks replaced, for an inline code span.
fn code(text: &str) -> String {
    let mut short: String = text.chars().take(300).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short.replace('`', "'")
}

/// `text` with every run of ASCII digits replaced by `N`.
fn fold_digits(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_digits = false;
    for c in text.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, state: State, message: Option<&str>) -> SpecResult {
        SpecResult {
            name: name.to_owned(),
            state,
            status: String::new(),
            message: message.map(str::to_owned),
            seconds: 1.0,
            privileged_refused: None,
        }
    }

    #[test]
    fn counts_over_the_selection() {
        let selected: Vec<SelectedSpec> = ["a", "b", "c [Slow]", "d", "e"]
            .iter()
            .map(|t| SelectedSpec {
                text: format!("{t} [NodeConformance]"),
                package: "common".to_owned(),
            })
            .collect();
        let cases = vec![
            case("[SynchronizedBeforeSuite]", State::Passed, None),
            case("[It] a [NodeConformance]", State::Passed, None),
            case(
                "[It] b [NodeConformance]",
                State::Failed,
                Some("timed out after 300s"),
            ),
            case("[It] c [Slow] [NodeConformance]", State::Skipped, None),
            case(
                "[It] d [NodeConformance]",
                State::Skipped,
                Some("only on gce"),
            ),
            case("[It] other", State::Skipped, None),
        ];
        let selection = Suite::NodeConformance.selection(None);
        let s = Summary::new(&selected, &cases, &selection);
        assert_eq!(s.total(), 5);
        assert_eq!(s.passed, ["a [NodeConformance]"]);
        assert_eq!(s.failed.len(), 1);
        assert_eq!(
            s.excluded,
            [("c [Slow] [NodeConformance]".to_owned(), "[Slow]")]
        );
        assert_eq!(s.skipped.len(), 2);
        assert_eq!(s.skipped[1].1, "not in the report");
        assert_eq!(s.failure_causes(), [("timed out after Ns".to_owned(), 1)]);
        let md = markdown(
            &RunInfo {
                date: "2026-11-24".to_owned(),
                version: "1.37.1".to_owned(),
                focus: r"\[NodeConformance\]".to_owned(),
                duration: Duration::from_secs(61),
                commit: "abc1234".to_owned(),
                suite: Suite::NodeConformance,
                nodes: vec!["verge-edge-1".to_owned()],
            },
            &selection,
            &s,
        );
        assert!(md.contains("| 5 | 1 | 1 | 0 | 1 | 2 |"), "{md}");
        assert!(md.contains("- `[Slow]` (1 specs)"), "{md}");
        assert!(md.contains("e2e.test ran for 2 min"), "{md}");
    }
}
