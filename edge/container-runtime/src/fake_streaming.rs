//! [`StreamingRuntime`] for [`FakeRuntime`]: execs play the output scripted for their command
//! ([`FakeRuntime::script_exec`]; `cat` echoes its stdin), attaches play
//! [`FakeRuntime::script_attach`], logs are [`FakeRuntime::set_logs`]. Execs, resizes and
//! attaches are recorded in [`FakeRuntime::take_calls`].

use bytes::Bytes;
use futures::StreamExt as _;
use futures::stream::{self, BoxStream};
use tokio::io::AsyncRead as _;

use super::super::streaming::{
    AttachedProcess, ExecSession, LogOptions, LogStream, OutputChunk, OutputStream, Stdio,
    StreamingRuntime, TerminalSize,
};
use super::super::{Result, RunState};
use super::FakeRuntime;

/// What a scripted exec writes and how it exits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecScript {
    /// Written to stdout first.
    pub stdout: Vec<u8>,
    /// Then written to stderr.
    pub stderr: Vec<u8>,
    /// Its exit code.
    pub exit_code: i64,
}

impl FakeRuntime {
    /// Makes streaming execs of `command` (its words joined by spaces) play `script`.
    pub fn script_exec(&self, command: &str, script: ExecScript) {
        self.lock().exec_scripts.insert(command.to_owned(), script);
    }

    /// Makes attaches to container `id` play `output` on stdout, then end.
    pub fn script_attach(&self, id: &str, output: &str) {
        self.lock()
            .attach_output
            .insert(id.to_owned(), output.as_bytes().to_vec());
    }

    /// Whether container `id` exists and runs.
    fn running(&self, id: &str) -> bool {
        self.lock()
            .containers
            .get(id)
            .is_some_and(|c| c.info.state == RunState::Running)
    }
}

/// `chunks` as a process's whole output.
fn scripted(chunks: Vec<OutputChunk>) -> OutputStream {
    stream::iter(chunks.into_iter().map(Ok)).boxed()
}

/// A process that writes its stdin to its stdout (`cat`): the input and the output.
fn echo() -> (super::super::InputWriter, OutputStream) {
    let (input, mut reader) = tokio::io::duplex(64 * 1024);
    let output: BoxStream<'static, Result<OutputChunk>> = stream::poll_fn(move |cx| {
        let mut buf = [0u8; 8192];
        let mut read = tokio::io::ReadBuf::new(&mut buf);
        match std::pin::Pin::new(&mut reader).poll_read(cx, &mut read) {
            std::task::Poll::Pending => std::task::Poll::Pending,
            std::task::Poll::Ready(Ok(())) if read.filled().is_empty() => {
                std::task::Poll::Ready(None)
            }
            std::task::Poll::Ready(Ok(())) => std::task::Poll::Ready(Some(Ok(
                OutputChunk::Stdout(Bytes::copy_from_slice(read.filled())),
            ))),
            std::task::Poll::Ready(Err(_)) => std::task::Poll::Ready(None),
        }
    })
    .boxed();
    (Box::pin(input), output)
}

impl StreamingRuntime for FakeRuntime {
    /// The output set with [`FakeRuntime::set_logs`]: `tail_lines` applies; `follow`,
    /// `since` and `timestamps` do not (the fake has no times of lines), and the stream ends.
    async fn container_logs(&self, id: &str, options: LogOptions) -> Result<LogStream> {
        let state = self.lock();
        if !state.containers.contains_key(id) {
            return Err(Self::not_found(format!("logs {id}")));
        }
        let output = state.logs.get(id).cloned().unwrap_or_default();
        let lines: Vec<&[u8]> = output.split_inclusive(|b| *b == b'\n').collect();
        let keep = options
            .tail_lines
            .and_then(|n| usize::try_from(n).ok())
            .map_or(lines.len(), |n| n.min(lines.len()));
        let selected = lines[lines.len() - keep..].concat();
        let chunks = (!selected.is_empty()).then(|| Ok(Bytes::from(selected)));
        Ok(stream::iter(chunks).boxed())
    }

    async fn exec_attached(
        &self,
        id: &str,
        command: &[String],
        stdio: Stdio,
    ) -> Result<ExecSession> {
        let command = command.join(" ");
        if !self.running(id) {
            return Err(Self::not_found("create exec".to_owned()));
        }
        let mut state = self.lock();
        state.calls.push(format!("exec {id} {command}"));
        state.next_id += 1;
        let exec = format!("e{:04}", state.next_id);
        let script = state.exec_scripts.get(&command).cloned();
        let code = script
            .as_ref()
            .map(|s| s.exit_code)
            .or_else(|| state.exec_exit.get(&command).copied())
            .unwrap_or(0);
        state.execs.insert(exec.clone(), Some(code));
        drop(state);
        let (input, output) = match script {
            _ if command == "cat" && stdio.stdin => echo(),
            Some(script) => {
                let mut chunks = Vec::new();
                if stdio.stdout && !script.stdout.is_empty() {
                    chunks.push(OutputChunk::Stdout(script.stdout.into()));
                }
                if stdio.stderr && !script.stderr.is_empty() {
                    chunks.push(OutputChunk::Stderr(script.stderr.into()));
                }
                (sink(), scripted(chunks))
            }
            None => (sink(), scripted(Vec::new())),
        };
        Ok(ExecSession {
            id: exec,
            process: AttachedProcess {
                output,
                input,
                close_stdin: true,
            },
        })
    }

    async fn resize_exec(&self, exec_id: &str, size: TerminalSize) -> Result<()> {
        let mut state = self.lock();
        if !state.execs.contains_key(exec_id) {
            return Err(Self::not_found(format!("resize exec {exec_id}")));
        }
        let (w, h) = (size.width, size.height);
        state.calls.push(format!("resize {exec_id} {w}x{h}"));
        Ok(())
    }

    async fn exec_exit_code(&self, exec_id: &str) -> Result<Option<i64>> {
        self.lock()
            .execs
            .get(exec_id)
            .copied()
            .ok_or_else(|| Self::not_found(format!("inspect exec {exec_id}")))
    }

    async fn attach(&self, id: &str, stdio: Stdio) -> Result<AttachedProcess> {
        if !self.running(id) {
            return Err(Self::not_found(format!("attach {id}")));
        }
        let mut state = self.lock();
        state.calls.push(format!("attach {id}"));
        let close_stdin = state
            .containers
            .get(id)
            .and_then(|c| c.spec.stdin_once)
            .unwrap_or(false);
        let output = state.attach_output.get(id).cloned().unwrap_or_default();
        let chunks = (stdio.stdout && !output.is_empty())
            .then(|| OutputChunk::Stdout(output.into()))
            .into_iter()
            .collect();
        Ok(AttachedProcess {
            output: scripted(chunks),
            input: sink(),
            close_stdin,
        })
    }

    async fn resize_attached(&self, id: &str, size: TerminalSize) -> Result<()> {
        let (w, h) = (size.width, size.height);
        self.lock().calls.push(format!("resize {id} {w}x{h}"));
        Ok(())
    }

    /// 10000 plus the container's creation order while it runs.
    async fn process_id(&self, id: &str) -> Result<Option<u32>> {
        let state = self.lock();
        let Some(c) = state.containers.get(id) else {
            return Err(Self::not_found(format!("inspect {id}")));
        };
        Ok((c.info.state == RunState::Running)
            .then(|| u32::try_from(c.created).ok().map(|n| 10_000 + n))
            .flatten())
    }
}

/// Stdin that takes every byte and drops it.
fn sink() -> super::super::InputWriter {
    Box::pin(tokio::io::sink())
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    #[tokio::test]
    async fn cat_echoes_its_stdin_until_it_is_closed() {
        let (mut input, output) = echo();
        input.write_all(b"hello").await.expect("write");
        input.shutdown().await.expect("close");
        drop(input);
        let out: Vec<OutputChunk> = output.map(|c| c.expect("ok")).collect().await;
        assert_eq!(out, [OutputChunk::Stdout(Bytes::from_static(b"hello"))]);
    }
}
