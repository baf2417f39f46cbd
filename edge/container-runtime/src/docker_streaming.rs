//! [`StreamingRuntime`] for [`DockerRuntime`]: `docker exec` and `docker attach` with their
//! streams, resizes and exit codes, container logs (from the `json-file` log when this process
//! can read it, [`super::docker_logfile`], else through the log API) and the main process's
//! pid.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, LogsOptions, ResizeContainerTTYOptionsBuilder,
    ResizeExecOptionsBuilder,
};
use bytes::Bytes;
use futures::StreamExt as _;

use super::docker::err;
use super::docker_logfile::{self, Selection};
use super::streaming::{
    AttachedProcess, ExecSession, LogOptions, LogStream, OutputChunk, OutputStream, Stdio,
    StreamingRuntime, TerminalSize,
};
use super::{DockerRuntime, Result, RuntimeError};

/// How often, and how many times, an exec's state is read again while Docker still reports
/// it running after its output ended (it may, for a moment).
const EXIT_POLL: Duration = Duration::from_millis(50);
const EXIT_POLLS: u32 = 100;

/// Docker's multiplexed output as [`OutputChunk`]s (stdin echoes dropped).
fn output(
    stream: impl futures::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send + 'static,
    op: &'static str,
) -> OutputStream {
    stream
        .filter_map(move |item| async move {
            match item {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    Some(Ok(OutputChunk::Stdout(message)))
                }
                Ok(LogOutput::StdErr { message }) => Some(Ok(OutputChunk::Stderr(message))),
                Ok(LogOutput::StdIn { .. }) => None,
                Err(error) => Some(Err(err(op)(error))),
            }
        })
        .boxed()
}

/// An error of Docker's behaviour rather than of a call (`op` names what was done).
fn engine(op: &str, message: &'static str) -> RuntimeError {
    RuntimeError::Engine {
        op: op.to_owned(),
        source: message.into(),
    }
}

impl StreamingRuntime for DockerRuntime {
    async fn prepared(self) -> Self {
        match self.clone().negotiate().await {
            Ok(negotiated) => negotiated,
            Err(error) => {
                let error = verge_runtime::ErrorChain(&error);
                tracing::warn!(%error, "streaming: cannot negotiate the Docker API version");
                self
            }
        }
    }

    async fn container_logs(&self, id: &str, options: LogOptions) -> Result<LogStream> {
        if let Some(log) = docker_logfile::open(&self.docker, id).await {
            let selection = Selection {
                follow: options.follow,
                timestamps: options.timestamps,
                since: options.since,
                tail_lines: options.tail_lines,
            };
            return Ok(docker_logfile::stream(
                log,
                selection,
                self.docker.clone(),
                id.to_owned(),
            ));
        }
        Ok(from_log_api(&self.docker, id, options))
    }

    async fn exec_attached(
        &self,
        id: &str,
        command: &[String],
        stdio: Stdio,
    ) -> Result<ExecSession> {
        let config = ExecConfig {
            attach_stdin: Some(stdio.stdin),
            attach_stdout: Some(stdio.stdout),
            attach_stderr: Some(stdio.stderr),
            tty: Some(stdio.tty),
            cmd: Some(command.to_vec()),
            ..ExecConfig::default()
        };
        let exec = self
            .docker
            .create_exec(id, config)
            .await
            .map_err(err("create exec"))?
            .id;
        let start = StartExecOptions {
            detach: false,
            tty: stdio.tty,
            output_capacity: None,
        };
        let started = self
            .docker
            .start_exec(&exec, Some(start))
            .await
            .map_err(err("start exec"))?;
        let StartExecResults::Attached { output: out, input } = started else {
            return Err(engine("start exec", "docker started the exec detached"));
        };
        Ok(ExecSession {
            id: exec,
            process: AttachedProcess {
                output: output(out, "read exec output"),
                input,
                close_stdin: true,
            },
        })
    }

    async fn resize_exec(&self, exec_id: &str, size: TerminalSize) -> Result<()> {
        let options = ResizeExecOptionsBuilder::new()
            .h(i32::from(size.height))
            .w(i32::from(size.width))
            .build();
        self.docker
            .resize_exec(exec_id, options)
            .await
            .map_err(err("resize exec"))
    }

    async fn exec_exit_code(&self, exec_id: &str) -> Result<Option<i64>> {
        for _ in 0..EXIT_POLLS {
            let inspect = self
                .docker
                .inspect_exec(exec_id)
                .await
                .map_err(err("inspect exec"))?;
            if inspect.running != Some(true) {
                return Ok(inspect.exit_code);
            }
            tokio::time::sleep(EXIT_POLL).await;
        }
        Err(engine(
            "inspect exec",
            "the exec still runs after its output ended",
        ))
    }

    async fn attach(&self, id: &str, stdio: Stdio) -> Result<AttachedProcess> {
        // Docker would end the output when the attach's stdin is half-closed; the caller
        // closes it only for `stdinOnce` containers.
        let stdin_once = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(err("inspect container"))?
            .config
            .and_then(|config| config.stdin_once)
            .unwrap_or(false);
        let options = AttachContainerOptionsBuilder::new()
            .stream(true)
            .logs(false)
            .stdin(stdio.stdin)
            .stdout(stdio.stdout)
            .stderr(stdio.stderr)
            .build();
        let attached = self
            .docker
            .attach_container(id, Some(options))
            .await
            .map_err(err("attach"))?;
        Ok(AttachedProcess {
            output: output(attached.output, "read attach output"),
            input: attached.input,
            close_stdin: stdin_once,
        })
    }

    async fn resize_attached(&self, id: &str, size: TerminalSize) -> Result<()> {
        let options = ResizeContainerTTYOptionsBuilder::new()
            .h(i32::from(size.height))
            .w(i32::from(size.width))
            .build();
        self.docker
            .resize_container_tty(id, options)
            .await
            .map_err(err("resize container tty"))
    }

    async fn process_id(&self, id: &str) -> Result<Option<u32>> {
        let inspected = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(err(format!("inspect {id}")))?;
        Ok(inspected
            .state
            .and_then(|s| s.pid)
            .and_then(|pid| u32::try_from(pid).ok())
            .filter(|pid| *pid > 0))
    }
}

/// The output through Docker's log API (drivers other than `json-file`, or a log file this
/// process cannot open), lines that arrive together sent as one chunk.
fn from_log_api(docker: &bollard::Docker, id: &str, options: LogOptions) -> LogStream {
    let query = LogsOptions {
        follow: options.follow,
        stdout: true,
        stderr: true,
        since: i32::try_from(options.since).unwrap_or(i32::MAX),
        until: 0,
        timestamps: options.timestamps,
        tail: options
            .tail_lines
            .map_or_else(|| "all".to_owned(), |n| n.to_string()),
    };
    let timestamps = options.timestamps;
    docker
        .logs(id, Some(query))
        .map(move |chunk| match chunk {
            Ok(
                LogOutput::StdOut { message }
                | LogOutput::StdErr { message }
                | LogOutput::Console { message }
                | LogOutput::StdIn { message },
            ) => Ok(if timestamps {
                fixed_width_timestamps(&message)
            } else {
                message
            }),
            Err(error) => Err(err("read logs")(error)),
        })
        .ready_chunks(256)
        .map(|chunks| {
            let mut joined = Vec::new();
            for chunk in chunks {
                joined.extend_from_slice(&chunk?);
            }
            Ok(Bytes::from(joined))
        })
        .boxed()
}

/// Rewrites Docker's line prefix (RFC 3339 with up to nine fractional digits, trailing
/// zeros dropped) to the kubelet's fixed nine digits; other bytes are kept.
fn fixed_width_timestamps(chunk: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(chunk.len() + 16);
    for line in chunk.split_inclusive(|b| *b == b'\n') {
        let Some(space) = line.iter().position(|b| *b == b' ') else {
            out.extend_from_slice(line);
            continue;
        };
        let parsed = std::str::from_utf8(&line[..space])
            .ok()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        match parsed {
            Some(time) => {
                let time = time.with_timezone(&chrono::Utc);
                out.extend_from_slice(time.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string().as_bytes());
                out.extend_from_slice(&line[space..]);
            }
            None => out.extend_from_slice(line),
        }
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_get_nine_fractional_digits() {
        let chunk = b"2026-11-24T10:00:00.12Z hello\n2026-11-24T10:00:01Z world\n";
        assert_eq!(
            &fixed_width_timestamps(chunk)[..],
            b"2026-11-24T10:00:00.120000000Z hello\n2026-11-24T10:00:01.000000000Z world\n"
        );
    }

    #[tokio::test]
    async fn output_is_split_by_stream_and_stdin_echoes_dropped() {
        let items = vec![
            Ok(LogOutput::StdOut {
                message: Bytes::from_static(b"out"),
            }),
            Ok(LogOutput::StdIn {
                message: Bytes::from_static(b"in"),
            }),
            Ok(LogOutput::StdErr {
                message: Bytes::from_static(b"err"),
            }),
            Ok(LogOutput::Console {
                message: Bytes::from_static(b"tty"),
            }),
        ];
        let chunks: Vec<OutputChunk> = output(futures::stream::iter(items), "read")
            .map(|c| c.expect("ok"))
            .collect()
            .await;
        assert_eq!(
            chunks,
            [
                OutputChunk::Stdout(Bytes::from_static(b"out")),
                OutputChunk::Stderr(Bytes::from_static(b"err")),
                OutputChunk::Stdout(Bytes::from_static(b"tty")),
            ]
        );
    }
}
