//! Reading the JUnit XML report Ginkgo v2 writes (`--ginkgo.junit-report`): one
//! `<testcase name="[It] <full text>" status="passed|failed|skipped|…" time="<s>">` per spec
//! or suite node, failures as `<failure message="…">…</failure>` (or `<error>`), skips as
//! `<skipped message="…"/>`.

use anyhow::Context as _;

/// How a spec ended (Ginkgo's `types.SpecState`, as the report's `status` attribute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// `passed`.
    Passed,
    /// `failed`, `panicked`, `timedout`, `interrupted` or `aborted`: counted as failed.
    Failed,
    /// `skipped` (filtered out, or `Skip()` at run time) or `pending`.
    Skipped,
}

/// One `<testcase>` of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecResult {
    /// The node type and the spec's full text, e.g. `[It] [sig-node] Pods should …`; suite
    /// nodes read `[SynchronizedBeforeSuite]` etc.
    pub name: String,
    /// How it ended.
    pub state: State,
    /// Ginkgo's `status` attribute as written (`timedout`, `panicked`, …).
    pub status: String,
    /// The first non-empty line of the failure (or skip) message, if any.
    pub message: Option<String>,
    /// Run time in seconds (`time`).
    pub seconds: f64,
    /// Where the failure's text names [`PRIVILEGED_REFUSED`] (the machine's Docker could not
    /// start a privileged container), that line of it, trimmed: the evidence the spec failed
    /// for the environment (e.g. a pod dump whose container waits with `RunContainerError`
    /// and runc's `unable to apply caps: operation not permitted`).
    pub privileged_refused: Option<String>,
}

/// runc's error when the engine asks for capabilities outside its own bounding set, which
/// every privileged container does on this kind of machine (`docker run --privileged` fails
/// the same way): an environment limit, not edged's.
pub const PRIVILEGED_REFUSED: &str = "unable to apply caps";

/// The part of `line` that shows [`PRIVILEGED_REFUSED`]: at most 200 characters before it
/// and 60 from it on (`…` where cut), so a long event line quoted in a report keeps the
/// refusal itself.
fn around_refusal(line: &str) -> String {
    let Some(at) = line.find(PRIVILEGED_REFUSED) else {
        return line.to_owned();
    };
    let before: Vec<char> = line[..at].chars().collect();
    let skip = before.len().saturating_sub(200);
    let mut out = String::new();
    if skip > 0 {
        out.push('…');
    }
    out.extend(&before[skip..]);
    let rest: Vec<char> = line[at..].chars().collect();
    out.extend(rest.iter().take(60));
    if rest.len() > 60 {
        out.push('…');
    }
    out
}

impl SpecResult {
    /// Whether this is a spec (`[It] …`) rather than a suite node.
    pub fn is_spec(&self) -> bool {
        self.name.starts_with("[It] ")
    }

    /// The spec's full text without the `[It] ` prefix.
    pub fn text(&self) -> &str {
        self.name.strip_prefix("[It] ").unwrap_or(&self.name)
    }
}

/// Parses a Ginkgo JUnit report into its test cases, in document order.
///
/// # Errors
/// The text is not XML.
pub fn parse(xml: &str) -> anyhow::Result<Vec<SpecResult>> {
    let doc = roxmltree::Document::parse(xml).context("parsing the JUnit report")?;
    let cases = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .map(|case| {
            let status = case.attribute("status").unwrap_or_default().to_owned();
            let child = |tag: &str| case.children().find(|c| c.has_tag_name(tag));
            let problem = child("failure").or_else(|| child("error"));
            let state = match status.as_str() {
                "passed" => State::Passed,
                "skipped" | "pending" => State::Skipped,
                "" if problem.is_none() && child("skipped").is_some() => State::Skipped,
                "" if problem.is_none() => State::Passed,
                _ => State::Failed,
            };
            let message = problem.or_else(|| child("skipped")).and_then(|n| {
                let attr = n.attribute("message").unwrap_or_default();
                first_line(attr).or_else(|| first_line(n.text().unwrap_or_default()))
            });
            // The refusal shows in the failure's own text (a pod dump on a timeout), or in the
            // spec's captured output (the namespace's events the framework dumps on failure).
            let privileged_refused = problem.and_then(|problem| {
                [Some(problem), child("system-err"), child("system-out")]
                    .into_iter()
                    .flatten()
                    .filter_map(|n| n.text())
                    .find_map(|t| {
                        t.lines()
                            .find(|l| l.contains(PRIVILEGED_REFUSED))
                            .map(|l| around_refusal(l.trim().trim_matches(['\'', '"'])))
                    })
            });
            SpecResult {
                name: case.attribute("name").unwrap_or_default().to_owned(),
                state,
                status,
                message,
                privileged_refused,
                seconds: case
                    .attribute("time")
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0.0),
            }
        })
        .collect();
    Ok(cases)
}

/// The first line of `text` that is not blank and not Ginkgo's `[FAILED]` banner alone,
/// trimmed.
fn first_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .map(|l| l.strip_prefix("[FAILED] ").unwrap_or(l))
        .find(|l| !l.is_empty() && *l != "[FAILED]")
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" disabled="0" errors="0" failures="1" time="12.5">
  <testsuite name="Kubernetes e2e suite" package="/e2e" tests="3" skipped="1" failures="1">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="0.1"></testcase>
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]" classname="Kubernetes e2e suite" status="passed" time="4.2"></testcase>
    <testcase name="[It] [sig-node] Probing container should be restarted [NodeConformance]" classname="Kubernetes e2e suite" status="failed" time="300">
      <failure message="" type="failed">[FAILED] pod never restarted: timed out after 5m0s&#xA;In [It] at: probe.go:12</failure>
    </testcase>
    <testcase name="[It] [sig-node] Sysctls [Slow] x" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
  </testsuite>
</testsuites>"#;

    #[test]
    fn reads_states_messages_and_times() -> anyhow::Result<()> {
        let cases = parse(REPORT)?;
        assert_eq!(cases.len(), 4);
        assert!(!cases[0].is_spec());
        assert_eq!(cases[1].state, State::Passed);
        assert_eq!(
            cases[1].text(),
            "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]"
        );
        assert_eq!(cases[2].state, State::Failed);
        assert_eq!(
            cases[2].message.as_deref(),
            Some("pod never restarted: timed out after 5m0s")
        );
        assert!((cases[2].seconds - 300.0).abs() < f64::EPSILON);
        assert_eq!(cases[3].state, State::Skipped);
        assert_eq!(cases[3].message.as_deref(), Some("skipped"));
        Ok(())
    }

    #[test]
    fn the_refusal_may_be_in_the_specs_output() -> anyhow::Result<()> {
        let xml = r#"<testsuites><testsuite><testcase name="[It] job" status="failed" time="900"><failure message="Timed out after 900s">x</failure><system-err>events:
  Warning Failed pod/p Error: failed to start: unable to apply caps: operation not permitted</system-err></testcase></testsuite></testsuites>"#;
        let cases = parse(xml)?;
        assert_eq!(cases[0].state, State::Failed);
        assert!(
            cases[0]
                .privileged_refused
                .as_deref()
                .is_some_and(|l| l.contains(PRIVILEGED_REFUSED)),
            "{:?}",
            cases[0].privileged_refused
        );
        Ok(())
    }

    #[test]
    fn the_evidence_keeps_the_refusal_of_a_long_line() {
        let line = format!(
            "At 2026-12-06 event for p: {{kubelet e}} Failed: Error: docker: start {} failed: \
             Docker responded with status code 500: failed to create shim task: OCI runtime \
             create failed: runc create failed: unable to start container process: unable to \
             apply caps: operation not permitted: unknown",
            "a".repeat(300)
        );
        let evidence = around_refusal(&line);
        assert!(evidence.starts_with('…'), "{evidence}");
        assert!(
            evidence.ends_with("unable to apply caps: operation not permitted: unknown"),
            "{evidence}"
        );
        assert!(evidence.chars().count() <= 262, "{evidence}");
        assert_eq!(
            around_refusal("short: unable to apply caps"),
            "short: unable to apply caps"
        );
    }

    #[test]
    fn timed_out_counts_as_failed() -> anyhow::Result<()> {
        let xml = r#"<testsuites><testsuite><testcase name="[It] a" status="timedout" time="1"><failure message="A suite timeout occurred">x</failure></testcase></testsuite></testsuites>"#;
        let cases = parse(xml)?;
        assert_eq!(cases[0].state, State::Failed);
        assert_eq!(cases[0].status, "timedout");
        assert_eq!(
            cases[0].message.as_deref(),
            Some("A suite timeout occurred")
        );
        Ok(())
    }
}
