//! The two selections `cargo xtask conformance` runs (`--suite`), and the CI subset's.
//!
//! - `node-conformance`: the `[NodeConformance]` specs of `test/e2e/common/{node,storage,
//!   network}` (the kubelet's own conformance, issue 15) and sig-network's `[Conformance]`
//!   specs of `test/e2e/network` (issue 32); `[Slow]`, `[Serial]`, `[Flaky]` and
//!   `[Disruptive]` left out, as upstream's node-conformance job leaves them out.
//! - `conformance`: every `[Conformance]` spec of the packages KubeEdge's own conformance
//!   binary compiles in, `test/e2e/{apps,auth,common,node,scheduling,storage}`, plus
//!   `test/e2e/network` (issue 35); only `[Serial]` and `[Disruptive]` left out.

use super::run::Exclusion;

/// Which specs a run selects (`cargo xtask conformance --suite`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Suite {
    /// The kubelet's `[NodeConformance]` specs and sig-network's `[Conformance]` specs;
    /// written to `docs/node-conformance.md`.
    NodeConformance,
    /// Kubernetes' `[Conformance]` specs of apps, auth, common, network, node, scheduling and
    /// storage; written to `docs/conformance.md`.
    Conformance,
}

/// The packages of the conformance binary (`xtask/assets/conformance/suite`), under
/// `test/e2e/`, in the order the document lists them.
pub const PACKAGES: [&str; 7] = [
    "apps",
    "auth",
    "common",
    "network",
    "node",
    "scheduling",
    "storage",
];

/// Everything that decides which specs e2e.test runs.
#[derive(Debug, Clone)]
pub struct Selection {
    /// `--ginkgo.focus-file`: the spec packages.
    pub focus_file: &'static str,
    /// `--ginkgo.label-filter`.
    pub label_filter: &'static str,
    /// `--ginkgo.focus`.
    pub focus: String,
    /// What is left out (`--ginkgo.skip`), with the reasons the document gives.
    pub exclusions: &'static [Exclusion],
}

/// What the node-conformance suite leaves out: the tags upstream's node-conformance job
/// skips.
const NODE_EXCLUSIONS: [Exclusion; 4] = [
    Exclusion {
        tag: "[Slow]",
        reason: "minutes each; upstream's node conformance skips [Slow] specs",
    },
    SERIAL,
    Exclusion {
        tag: "[Flaky]",
        reason: "known flaky upstream; every upstream job skips [Flaky]",
    },
    DISRUPTIVE,
];

/// What the conformance suite leaves out, as Kubernetes' conformance runs in parallel do
/// (and KubeEdge's run does).
const CONFORMANCE_EXCLUSIONS: [Exclusion; 2] = [SERIAL, DISRUPTIVE];

const SERIAL: Exclusion = Exclusion {
    tag: "[Serial]",
    reason: "must run alone on the cluster (they fill or taint nodes, or pull from a \
             registry server they start), which a parallel run cannot give them; upstream's \
             parallel conformance runs and KubeEdge's skip [Serial] specs",
};

const DISRUPTIVE: Exclusion = Exclusion {
    tag: "[Disruptive]",
    reason: "disrupt the node (restarts); upstream's parallel runs skip [Disruptive]",
};

impl Suite {
    /// The selection of the whole suite; `focus` overrides its default focus.
    pub fn selection(self, focus: Option<&str>) -> Selection {
        let (focus_file, label_filter, default_focus, exclusions): (_, _, _, &'static [_]) =
            match self {
                Self::NodeConformance => (
                    "test/e2e/(common/(node|storage|network)|network)/",
                    "NodeConformance || Conformance",
                    r"\[NodeConformance\]|\[sig-network\]",
                    &NODE_EXCLUSIONS,
                ),
                Self::Conformance => (
                    "test/e2e/(apps|auth|common|network|node|scheduling|storage)/",
                    "Conformance",
                    r"\[Conformance\]",
                    &CONFORMANCE_EXCLUSIONS,
                ),
            };
        Selection {
            focus_file,
            label_filter,
            focus: focus.unwrap_or(default_focus).to_owned(),
            exclusions,
        }
    }

    /// The selection of the CI subset (`--subset`): the named `focus` among both suites'
    /// specs, with the conformance suite's exclusions.
    pub fn subset(focus: String) -> Selection {
        Selection {
            focus_file: Self::Conformance.selection(None).focus_file,
            label_filter: "NodeConformance || Conformance",
            focus,
            exclusions: &CONFORMANCE_EXCLUSIONS,
        }
    }

    /// The document a full run writes, relative to the workspace.
    pub fn document(self) -> &'static str {
        match self {
            Self::NodeConformance => "docs/node-conformance.md",
            Self::Conformance => "docs/conformance.md",
        }
    }
}

impl Selection {
    /// `--ginkgo.skip`: the exclusions' tags, regex-quoted, joined by `|`.
    pub fn skip_regex(&self) -> String {
        self.exclusions
            .iter()
            .map(|e| regex::escape(e.tag))
            .collect::<Vec<_>>()
            .join("|")
    }

    /// The exclusion that leaves `text` out, if any.
    pub fn excluded_by(&self, text: &str) -> Option<&'static Exclusion> {
        self.exclusions.iter().find(|e| text.contains(e.tag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_regex_quotes_the_tags() {
        assert_eq!(
            Suite::NodeConformance.selection(None).skip_regex(),
            r"\[Slow\]|\[Serial\]|\[Flaky\]|\[Disruptive\]"
        );
        assert_eq!(
            Suite::Conformance.selection(None).skip_regex(),
            r"\[Serial\]|\[Disruptive\]"
        );
    }

    #[test]
    fn conformance_keeps_slow_specs() {
        let s = Suite::Conformance.selection(None);
        assert!(s.excluded_by("[sig-apps] x [Slow] [Conformance]").is_none());
        assert_eq!(
            s.excluded_by("[sig-apps] x [Serial] [Conformance]")
                .map(|e| e.tag),
            Some("[Serial]")
        );
    }
}
