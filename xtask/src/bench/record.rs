//! Writing a benchmark's result table into `docs/benchmarks.md`.
//!
//! Each benchmark owns one section of that file, between `<!-- bench:<name> -->` and
//! `<!-- /bench:<name> -->`. A run puts its table (date, machine, command, figures) at the
//! top of its section and keeps the previous [`KEEP`]` - 1` runs below it, so a change that
//! moves a figure shows the before and after side by side. Sections of other benchmarks and
//! the text outside any section are left as they are.

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

/// Runs kept per benchmark, the newest first.
const KEEP: usize = 5;
/// Separates runs inside a section.
const RUN_MARK: &str = "<!-- run -->";

const HEADER: &str = "# Benchmarks\n\n\
Written by `cargo xtask bench <name>`: each benchmark replaces its own section below with \
its newest run on top and keeps its previous runs under it. Every figure the README quotes \
comes from this file. Ratios compare against a baseline measured in the same run on the same \
machine.\n";

/// `docs/benchmarks.md` of the workspace.
pub fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md")
}

/// The machine the benchmark runs on, for the table's heading: cores, memory, CPU model.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|v| v.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim());
    format!(
        "{cores} cores, {:.1} GiB, {model}",
        mem_kib as f64 / (1024.0 * 1024.0)
    )
}

/// The command line of this run as the user typed it (`cargo xtask ...`).
pub fn command() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    format!("cargo xtask {}", args.join(" "))
}

/// Puts `body` (Markdown) as the newest run of benchmark `name` (titled `title`) into
/// `docs/benchmarks.md`, with the date, machine and command line above it; keeps the
/// previous runs of that benchmark up to [`KEEP`] in all. Prints where it wrote.
///
/// # Errors
/// Reading or writing the file.
pub fn write(name: &str, title: &str, body: &str) -> anyhow::Result<()> {
    let path = path();
    let mut old = std::fs::read_to_string(&path).unwrap_or_else(|_| HEADER.to_owned());
    let open = format!("<!-- bench:{name} -->");
    if name == SUMMARY
        && !old.contains(&open)
        && let Some(first) = old.find("<!-- bench:")
    {
        // The overview goes first, above every benchmark's section.
        old.insert_str(first, &format!("{open}\n<!-- /bench:{name} -->\n\n"));
    }
    let date = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC");
    let mut run = String::new();
    let _ = writeln!(run, "### {date}\n");
    let _ = writeln!(run, "`{}` — {}\n", command(), machine());
    run.push_str(body.trim_end());
    run.push('\n');
    let text = splice(&old, name, title, &run);
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("bench: table written to {}", path.display());
    Ok(())
}

/// `old` with `run` as the newest run of section `name`.
fn splice(old: &str, name: &str, title: &str, run: &str) -> String {
    let open = format!("<!-- bench:{name} -->");
    let close = format!("<!-- /bench:{name} -->");
    let (before, previous, after) = match (old.find(&open), old.find(&close)) {
        (Some(start), Some(end)) if start < end => {
            let inner = &old[start + open.len()..end];
            (&old[..start], inner, &old[end + close.len()..])
        }
        _ => (old.trim_end(), "", "\n"),
    };
    let mut runs: Vec<&str> = previous
        .split(RUN_MARK)
        .skip(1)
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .collect();
    runs.insert(0, run.trim());
    runs.truncate(KEEP);
    let mut section = format!("{open}\n## {title}\n");
    for r in runs {
        let _ = write!(section, "\n{RUN_MARK}\n{r}\n");
    }
    section.push_str(&close);
    let sep = if before.is_empty() || before.ends_with("\n\n") {
        ""
    } else if before.ends_with('\n') {
        "\n"
    } else {
        "\n\n"
    };
    format!("{before}{sep}{section}{after}")
}

/// One row of durations as Markdown cells: n, p50, p90, p99 (only with at least 20 samples,
/// else "–"), max.
pub fn duration_cells(s: &super::Summary) -> String {
    let p99 = s
        .p99
        .map_or_else(|| "–".to_owned(), |d| format!("{:.0} ms", ms(d)));
    format!(
        "{} | {:.0} ms | {:.0} ms | {p99} | {:.0} ms",
        s.n,
        ms(s.p50),
        ms(s.p90),
        ms(s.max)
    )
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One target a benchmark reports on: what is aimed at, the figure of this run, the anchor
/// beside it (a baseline of the same run, or a published figure), and whether it is met.
#[derive(Debug, Clone)]
pub struct Target {
    /// The goal, e.g. "pod create → Running p50 ≤ 1.25× `docker run -d`".
    pub goal: String,
    /// This run's figure, e.g. "1.76× (489 ms)".
    pub figure: String,
    /// What it is compared with, e.g. "docker run -d: 278 ms (same run)".
    pub anchor: String,
    /// Whether the figure meets the goal.
    pub met: bool,
}

/// Header of a [`targets_table`]; the overview of `cargo xtask bench all` collects the rows
/// of the tables under it.
pub const TARGETS_HEADER: &str = "| target | this run | anchor | met |";

/// The Markdown table of `targets` (see [`TARGETS_HEADER`]).
pub fn targets_table(targets: &[Target]) -> String {
    let mut out = format!("{TARGETS_HEADER}\n|---|---|---|---|\n");
    for t in targets {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            t.goal,
            t.figure,
            t.anchor,
            if t.met { "yes" } else { "**no**" }
        );
    }
    out
}

/// The target rows of the newest run of every section of `text` (a `docs/benchmarks.md`),
/// as `(section name, row)`.
pub fn newest_targets(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<!-- bench:") {
        let after = &rest[start + "<!-- bench:".len()..];
        let Some(name_end) = after.find(" -->") else {
            break;
        };
        let name = &after[..name_end];
        let close = format!("<!-- /bench:{name} -->");
        let Some(end) = after.find(&close) else {
            break;
        };
        let section = &after[..end];
        rest = &after[end..];
        if name == SUMMARY {
            continue;
        }
        let Some(newest) = section.split(RUN_MARK).nth(1) else {
            continue;
        };
        let Some(table) = newest.split(TARGETS_HEADER).nth(1) else {
            continue;
        };
        out.extend(
            table
                .lines()
                .skip(2)
                .take_while(|l| l.starts_with('|'))
                .map(|row| (name.to_owned(), row.to_owned())),
        );
    }
    out
}

/// The section of the overview written by `cargo xtask bench all`.
pub const SUMMARY: &str = "summary";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_keeps_other_sections_and_previous_runs() {
        let first = splice(HEADER, "a", "A", "run 1\n");
        let second = splice(&first, "b", "B", "b run\n");
        let third = splice(&second, "a", "A", "run 2\n");
        assert!(third.starts_with("# Benchmarks"));
        let a = third.find("run 2").expect("new run");
        let a1 = third.find("run 1").expect("previous run kept");
        assert!(a < a1, "newest first:\n{third}");
        assert!(third.contains("b run"), "{third}");
        assert_eq!(third.matches("<!-- bench:a -->").count(), 1);
    }

    #[test]
    fn the_overview_takes_the_target_rows_of_each_newest_run() {
        let row = |goal: &str, met| Target {
            goal: goal.into(),
            figure: "f".into(),
            anchor: "a".into(),
            met,
        };
        let old = format!("old\n\n{}", targets_table(&[row("old goal", false)]));
        let new = format!("new\n\n{}", targets_table(&[row("new goal", true)]));
        let mut text = splice(HEADER, "a", "A", &old);
        text = splice(&text, "a", "A", &new);
        text = splice(&text, "b", "B", "no targets\n");
        text = splice(&text, SUMMARY, "S", &targets_table(&[row("summary", true)]));
        let rows = newest_targets(&text);
        assert_eq!(
            rows,
            vec![("a".to_owned(), "| new goal | f | a | yes |".to_owned())]
        );
    }

    #[test]
    fn splice_keeps_at_most_keep_runs() {
        let mut text = HEADER.to_owned();
        for i in 0..KEEP + 3 {
            text = splice(&text, "a", "A", &format!("run {i}\n"));
        }
        assert_eq!(text.matches(RUN_MARK).count(), KEEP);
        assert!(text.contains(&format!("run {}", KEEP + 2)));
        assert!(!text.contains("run 0\n"));
    }
}
