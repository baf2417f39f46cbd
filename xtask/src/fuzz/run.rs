//! One bounded libFuzzer run of a target, and what it found.
//!
//! The run reads the committed seeds (`fuzz/seeds/<target>/`, never written) and grows the
//! corpus `fuzz/target/corpus/<target>/`; a crash (a panic, which libfuzzer-sys turns into
//! an abort; a deadly signal; an input over `-timeout`; memory over `-rss_limit_mb`) is
//! written under `fuzz/target/artifacts/<target>/` and ends the run. libFuzzer's output goes
//! to `fuzz/target/logs/<target>.log`; its last status line gives the figures printed.

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;

/// Bounds of one run.
#[derive(Debug, Clone)]
pub struct Limits {
    /// `-max_total_time`, seconds.
    pub seconds: u64,
    /// `-rss_limit_mb`, MiB.
    pub rss_limit_mb: u64,
    /// `-timeout` for one input, seconds.
    pub timeout_seconds: u64,
}

/// What a run found.
#[derive(Debug)]
pub enum Verdict {
    /// It ran for its time without a crash.
    Clean,
    /// It crashed on the input saved at `reproducer`.
    Crashed {
        /// The input that crashed it.
        reproducer: PathBuf,
        /// The end of libFuzzer's output: the panic message and backtrace.
        excerpt: String,
    },
}

/// The figures of a run (from libFuzzer's last status line and final statistics).
#[derive(Debug, Default)]
pub struct Stats {
    /// Inputs executed.
    pub runs: u64,
    /// Executions per second.
    pub exec_per_sec: u64,
    /// Coverage: instrumented edges (PCs) reached.
    pub cov: u64,
    /// Features (edges with hit counts, comparisons) reached.
    pub features: u64,
    /// Inputs in the corpus at the end.
    pub corpus: u64,
    /// Inputs added to the corpus by this run.
    pub new_units: u64,
    /// Peak resident memory, MiB.
    pub peak_rss_mb: u64,
}

/// A finished run.
#[derive(Debug)]
pub struct Outcome {
    /// Its figures.
    pub stats: Stats,
    /// Its verdict.
    pub verdict: Verdict,
    /// libFuzzer's output.
    pub log: PathBuf,
}

impl Outcome {
    /// One line: target, result, runs, coverage, corpus.
    pub fn summary(&self, target: &str) -> String {
        let s = &self.stats;
        let result = match self.verdict {
            Verdict::Clean => "ok",
            Verdict::Crashed { .. } => "CRASH",
        };
        format!(
            "{target:<16} {result:<5} runs {:>10} ({:>6}/s)  cov {:>5}  ft {:>6}  corpus {:>5} \
             (+{})  rss {} MiB  log {}",
            s.runs,
            s.exec_per_sec,
            s.cov,
            s.features,
            s.corpus,
            s.new_units,
            s.peak_rss_mb,
            self.log.display()
        )
    }
}

/// Runs the target binary `bin` within `limits`.
pub fn run_target(
    fuzz: &Path,
    bin: &Path,
    target: &str,
    limits: &Limits,
) -> anyhow::Result<Outcome> {
    let work = fuzz.join("target");
    let corpus = work.join("corpus").join(target);
    let artifacts = work.join("artifacts").join(target);
    let logs = work.join("logs");
    for dir in [&corpus, &artifacts, &logs] {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let log = logs.join(format!("{target}.log"));
    let log_file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    eprintln!("xtask fuzz: {target}: fuzzing for {} s", limits.seconds);
    let mut artifact_prefix = artifacts.into_os_string();
    artifact_prefix.push("/");
    let mut cmd = Command::new(bin);
    cmd.arg(format!("-max_total_time={}", limits.seconds))
        .arg(format!("-rss_limit_mb={}", limits.rss_limit_mb))
        .arg(format!("-timeout={}", limits.timeout_seconds))
        .arg("-print_final_stats=1")
        .arg({
            let mut arg = std::ffi::OsString::from("-artifact_prefix=");
            arg.push(artifact_prefix);
            arg
        })
        .arg(&corpus);
    let seeds = fuzz.join("seeds").join(target);
    if seeds.is_dir() {
        cmd.arg(&seeds);
    }
    let status = cmd
        .stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    let text =
        std::fs::read_to_string(&log).with_context(|| format!("reading {}", log.display()))?;
    let stats = parse_stats(&text);
    let verdict = match (status.success(), reproducer(&text)) {
        (true, _) => Verdict::Clean,
        (false, reproducer) => Verdict::Crashed {
            reproducer: reproducer.unwrap_or_else(|| PathBuf::from("(none written; see the log)")),
            excerpt: excerpt(&text, status),
        },
    };
    Ok(Outcome {
        stats,
        verdict,
        log,
    })
}

/// The file libFuzzer saved the crashing input to (`Test unit written to <path>`).
fn reproducer(log: &str) -> Option<PathBuf> {
    log.lines()
        .rev()
        .find_map(|l| l.split_once("Test unit written to "))
        .map(|(_, path)| PathBuf::from(path.trim()))
}

/// What to show of the log: the panic message (from `panicked at` to the backtrace) when
/// there is one, then libFuzzer's last lines (the kind of crash, the reproducer).
fn excerpt(log: &str, status: std::process::ExitStatus) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let mut out = format!("---- libFuzzer's output ({status}), excerpt ----\n");
    if let Some(start) = lines.iter().position(|l| l.contains(" panicked at ")) {
        let panic = lines[start..]
            .iter()
            .take(20)
            .take_while(|l| !l.starts_with("stack backtrace:"));
        for line in panic {
            let _ = writeln!(out, "{line}");
        }
        out.push_str("...\n");
    }
    let tail = lines
        .iter()
        .rposition(|l| l.contains("ERROR: libFuzzer") || l.contains("ERROR: AddressSanitizer"))
        .unwrap_or_else(|| lines.len().saturating_sub(20));
    for line in &lines[tail..] {
        let _ = writeln!(out, "{line}");
    }
    out
}

/// Figures from the last status line (`#N DONE cov: C ft: F corp: K/...b ... exec/s: E
/// rss: RMb`) and the final `stat::` lines.
fn parse_stats(log: &str) -> Stats {
    let mut stats = Stats::default();
    if let Some(line) = log
        .lines()
        .rev()
        .find(|l| l.starts_with('#') && l.contains(" cov: "))
    {
        stats.runs = line
            .trim_start_matches('#')
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        stats.cov = field(line, "cov:");
        stats.features = field(line, "ft:");
        stats.corpus = field(line, "corp:");
        stats.exec_per_sec = field(line, "exec/s:");
    }
    for line in log.lines() {
        let value = |key: &str| {
            line.strip_prefix(key)
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let Some(v) = value("stat::number_of_executed_units:") {
            stats.runs = v;
        } else if let Some(v) = value("stat::average_exec_per_sec:") {
            stats.exec_per_sec = v;
        } else if let Some(v) = value("stat::new_units_added:") {
            stats.new_units = v;
        } else if let Some(v) = value("stat::peak_rss_mb:") {
            stats.peak_rss_mb = v;
        }
    }
    stats
}

/// The number after `key` in a status line (`corp: 12/3Kb` gives 12).
fn field(line: &str, key: &str) -> u64 {
    line.split_once(key)
        .map(|(_, rest)| rest.trim_start())
        .and_then(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "INFO: Seed: 1\n\
        #2\tINITED cov: 10 ft: 12 corp: 1/1b exec/s: 0 rss: 30Mb\n\
        #123456\tDONE   cov: 1234 ft: 5678 corp: 90/12Kb lim: 4096 exec/s: 4115 rss: 85Mb\n\
        Done 123456 runs in 31 second(s)\n\
        stat::number_of_executed_units: 123457\n\
        stat::average_exec_per_sec:     4115\n\
        stat::new_units_added:          89\n\
        stat::slowest_unit_time_sec:    0\n\
        stat::peak_rss_mb:              86\n";

    #[test]
    fn stats_from_the_log() {
        let s = parse_stats(LOG);
        assert_eq!(
            (
                s.runs,
                s.exec_per_sec,
                s.cov,
                s.features,
                s.corpus,
                s.new_units,
                s.peak_rss_mb
            ),
            (123_457, 4115, 1234, 5678, 90, 89, 86)
        );
    }

    #[test]
    fn reproducer_path() {
        let log = "==1== ERROR: libFuzzer: deadly signal\n\
            artifact_prefix='a/'; Test unit written to a/crash-da39a3ee\nBase64: AA==\n";
        assert_eq!(reproducer(log), Some(PathBuf::from("a/crash-da39a3ee")));
        assert_eq!(reproducer(LOG), None);
    }

    #[test]
    fn excerpt_shows_the_panic_and_the_verdict() {
        use std::os::unix::process::ExitStatusExt as _;
        let log = "#1 INITED\nthread '<unnamed>' (1) panicked at src/a.rs:1:2:\nboom\n\
            stack backtrace:\n   0: frames\n==1== ERROR: libFuzzer: deadly signal\n\
            Test unit written to a/crash-1\n";
        let text = excerpt(log, std::process::ExitStatus::from_raw(77 << 8));
        assert!(
            text.contains("panicked at src/a.rs:1:2:\nboom\n..."),
            "{text}"
        );
        assert!(!text.contains("frames"), "{text}");
        assert!(
            text.contains("deadly signal\nTest unit written to a/crash-1"),
            "{text}"
        );
    }
}
