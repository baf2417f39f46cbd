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
    let old = std::fs::read_to_string(&path).unwrap_or_else(|_| HEADER.to_owned());
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
