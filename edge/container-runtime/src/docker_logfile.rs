//! Container logs read from the file Docker's `json-file` driver writes, as the kubelet
//! reads the log files of CRI runtimes rather than asking the runtime to stream them:
//! Docker's own log API decodes and re-frames every line (about 12 MB/s of 100-byte lines
//! here, `docs/benchmarks.md`), the file is read at disk speed.
//!
//! The file holds one JSON object a line, `{"log":"<text>","stream":"stdout","time":
//! "<RFC 3339, up to nine fractional digits>"}`; a line longer than 16 KiB is split over
//! several objects, only the last ending in `\n`, so the texts concatenated are the output.
//! Used by [`DockerRuntime`](super::DockerRuntime)'s
//! [`container_logs`](super::StreamingRuntime::container_logs) when the container's driver is
//! `json-file` and its `LogPath` can be opened (an edgecore in a container without Docker's
//! data directory falls back to the API).

use std::borrow::Cow;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bollard::Docker;
use bytes::Bytes;
use futures::StreamExt as _;
use tokio::io::AsyncReadExt as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::RuntimeError;
use super::streaming::LogStream;

/// Bytes read from the file at a time (and the largest chunk of the body).
const READ_BYTES: usize = 256 * 1024;
/// How often a follower looks for new lines at the end of the file.
const FOLLOW_POLL: Duration = Duration::from_millis(100);
/// How long a follower waits without new lines before it checks the container still runs.
const FOLLOW_CHECK: Duration = Duration::from_secs(1);

/// What to read from a log file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Selection {
    /// Keep reading new lines until the container stops or the client goes.
    pub follow: bool,
    /// Prefix each line with its time, nine fractional digits (the kubelet's format).
    pub timestamps: bool,
    /// Unix seconds; lines written before are skipped (0: none).
    pub since: i64,
    /// Only the last this many lines (`None`: all).
    pub tail_lines: Option<u64>,
}

/// A container's `json-file` log, open.
pub(super) struct LogFile {
    path: PathBuf,
    file: std::fs::File,
}

/// The `json-file` log of container `id`, opened, if Docker writes one this process can open.
pub(super) async fn open(docker: &Docker, id: &str) -> Option<LogFile> {
    let inspected = docker.inspect_container(id, None).await.ok()?;
    let driver = inspected.host_config?.log_config?.typ?;
    let path = PathBuf::from(inspected.log_path.filter(|p| !p.is_empty())?);
    if driver != "json-file" {
        return None;
    }
    let file = std::fs::File::open(&path).ok()?;
    Some(LogFile { path, file })
}

/// The selected output of `log` of container `id`, in chunks of up to [`READ_BYTES`] of
/// whole lines. A follower ends when the container no longer runs (after reading what it
/// wrote last) or when the stream is dropped; a read error (`read log file`) ends it.
pub(super) fn stream(log: LogFile, selection: Selection, docker: Docker, id: String) -> LogStream {
    let (tx, rx) = mpsc::channel(4);
    verge_runtime::tasks::spawn("container log", async move {
        if let Err(error) = read(log, selection, &docker, &id, &tx).await {
            let _ = tx.send(Err(error)).await;
        }
    });
    ReceiverStream::new(rx)
        .map(|chunk| {
            chunk.map_err(|source| RuntimeError::Engine {
                op: "read log file".to_owned(),
                source: Box::new(source),
            })
        })
        .boxed()
}

async fn read(
    LogFile { path, file }: LogFile,
    selection: Selection,
    docker: &Docker,
    id: &str,
    tx: &mpsc::Sender<std::io::Result<Bytes>>,
) -> std::io::Result<()> {
    let tail = selection.tail_lines;
    let file = tokio::task::spawn_blocking(move || seek_to_tail(file, tail))
        .await
        .map_err(std::io::Error::other)??;
    let mut inode = file.metadata()?.ino();
    let mut file = tokio::fs::File::from_std(file);
    let mut pending = Vec::new();
    let mut buf = vec![0; READ_BYTES];
    let (mut idle_since, mut stopped) = (Instant::now(), false);
    loop {
        let read = file.read(&mut buf).await?;
        if read > 0 {
            pending.extend_from_slice(&buf[..read]);
            let whole = pending
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            let mut out = Vec::with_capacity(whole + whole / 8);
            for line in pending[..whole].split_inclusive(|b| *b == b'\n') {
                render(line, selection, &mut out);
            }
            pending.drain(..whole);
            if !out.is_empty() && tx.send(Ok(Bytes::from(out))).await.is_err() {
                return Ok(());
            }
            idle_since = Instant::now();
            continue;
        }
        if !selection.follow || stopped {
            return Ok(());
        }
        if idle_since.elapsed() >= FOLLOW_CHECK {
            // One more read after the container stopped takes its last lines.
            stopped = !running(docker, id).await;
            idle_since = Instant::now();
        }
        // Docker rotated the file (`max-size`): go on from the start of the new one.
        if let Ok(now) = tokio::fs::metadata(&path).await
            && now.ino() != inode
        {
            let reopened = tokio::fs::File::open(&path).await?;
            inode = reopened.metadata().await?.ino();
            file = reopened;
            pending.clear();
        }
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_POLL) => {}
            () = tx.closed() => return Ok(()),
        }
    }
}

async fn running(docker: &Docker, id: &str) -> bool {
    docker
        .inspect_container(id, None)
        .await
        .ok()
        .and_then(|c| c.state)
        .and_then(|s| s.running)
        .unwrap_or(false)
}

/// `file` positioned at the first of its last `tail` lines (at the start for `None`).
fn seek_to_tail(mut file: std::fs::File, tail: Option<u64>) -> std::io::Result<std::fs::File> {
    if let Some(lines) = tail {
        let offset = tail_offset(&mut file, lines)?;
        file.seek(SeekFrom::Start(offset))?;
    }
    Ok(file)
}

/// The offset of the first of the last `lines` whole lines of `file`, scanning back from its
/// end in blocks.
fn tail_offset(file: &mut std::fs::File, lines: u64) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    let mut end = len;
    // The last byte is the last line's newline; count the newlines before it.
    let mut wanted = lines + 1;
    let mut block = vec![0; 64 * 1024];
    while end > 0 {
        let start = end.saturating_sub(block.len() as u64);
        let size = usize::try_from(end - start).unwrap_or(block.len());
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut block[..size])?;
        for (i, byte) in block[..size].iter().enumerate().rev() {
            if *byte == b'\n' {
                wanted -= 1;
                if wanted == 0 {
                    return Ok(start + i as u64 + 1);
                }
            }
        }
        end = start;
    }
    Ok(0)
}

/// One `json-file` entry.
#[derive(serde::Deserialize)]
struct Entry<'a> {
    #[serde(borrow)]
    log: Cow<'a, str>,
    #[serde(borrow)]
    time: Cow<'a, str>,
}

/// Appends the output of log line `line` (one JSON object and its `\n`) to `out` if it
/// passes `selection`; a line that does not parse is skipped.
fn render(line: &[u8], selection: Selection, out: &mut Vec<u8>) {
    let Ok(entry) = serde_json::from_slice::<Entry<'_>>(line) else {
        tracing::debug!(line = %String::from_utf8_lossy(line), "skipping a malformed log line");
        return;
    };
    if selection.since > 0 || selection.timestamps {
        let Ok(time) = chrono::DateTime::parse_from_rfc3339(&entry.time) else {
            return;
        };
        if time.timestamp() < selection.since {
            return;
        }
        if selection.timestamps {
            let time = time.with_timezone(&chrono::Utc);
            let _ = std::io::Write::write_fmt(
                out,
                format_args!("{} ", time.format("%Y-%m-%dT%H:%M:%S%.9fZ")),
            );
        }
    }
    out.extend_from_slice(entry.log.as_bytes());
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn log(lines: &[(&str, &str)]) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("temp file");
        for (time, text) in lines {
            let entry = serde_json::json!({"log": text, "stream": "stdout", "time": time});
            writeln!(file, "{entry}").expect("write");
        }
        file
    }

    fn rendered(file: &tempfile::NamedTempFile, selection: Selection) -> String {
        let opened = std::fs::File::open(file.path()).expect("open");
        let mut handle = seek_to_tail(opened, selection.tail_lines).expect("seek");
        let mut text = Vec::new();
        handle.read_to_end(&mut text).expect("read");
        let mut out = Vec::new();
        for line in text.split_inclusive(|b| *b == b'\n') {
            render(line, selection, &mut out);
        }
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn entries_render_as_the_output_with_optional_fixed_width_timestamps() {
        let file = log(&[
            ("2026-11-24T10:00:00.12Z", "one \"quoted\"\n"),
            ("2026-11-24T10:00:01Z", "split "),
            ("2026-11-24T10:00:01Z", "line\n"),
        ]);
        assert_eq!(
            rendered(&file, Selection::default()),
            "one \"quoted\"\nsplit line\n"
        );
        let stamped = rendered(
            &file,
            Selection {
                timestamps: true,
                ..Selection::default()
            },
        );
        assert!(
            stamped.starts_with("2026-11-24T10:00:00.120000000Z one"),
            "{stamped}"
        );
    }

    #[test]
    fn tail_and_since_select_the_last_lines() {
        let lines: Vec<(String, String)> = (0..5000)
            .map(|i| {
                (
                    format!("2026-11-24T10:{:02}:{:02}Z", i / 60 % 60, i % 60),
                    format!("line {i}\n"),
                )
            })
            .collect();
        let borrowed: Vec<(&str, &str)> = lines
            .iter()
            .map(|(t, l)| (t.as_str(), l.as_str()))
            .collect();
        let file = log(&borrowed);
        let tail = |n| {
            rendered(
                &file,
                Selection {
                    tail_lines: Some(n),
                    ..Selection::default()
                },
            )
        };
        assert_eq!(tail(2), "line 4998\nline 4999\n");
        assert_eq!(tail(0), "");
        assert_eq!(tail(10_000).lines().count(), 5000);
        let since = chrono::DateTime::parse_from_rfc3339("2026-11-24T10:23:10Z")
            .expect("time")
            .timestamp();
        let recent = rendered(
            &file,
            Selection {
                since,
                ..Selection::default()
            },
        );
        assert!(recent.starts_with("line 1390\n"), "{}", &recent[..20]);
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let mut out = Vec::new();
        render(b"not json\n", Selection::default(), &mut out);
        render(
            br#"{"log":"ok\n","time":"2026-11-24T10:00:00Z"}"#,
            Selection::default(),
            &mut out,
        );
        assert_eq!(out, b"ok\n");
    }
}
