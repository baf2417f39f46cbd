//! The exec/attach query (`command=` once per argv element, `input`, `output`, `error`,
//! `tty`), parsed as the kubelet's `remotecommand.NewOptions` does: a flag is set only when
//! its value is exactly `1`; with `tty` set, stderr is dropped (a TTY merges it into stdout).

use super::Error;

/// What the client asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// The command and its arguments (exec only), in order.
    pub command: Vec<String>,
    /// `input=1`: a stdin stream.
    pub stdin: bool,
    /// `output=1`: a stdout stream.
    pub stdout: bool,
    /// `error=1` and not `tty=1`: a stderr stream.
    pub stderr: bool,
    /// `tty=1`: a terminal (and, from protocol v3, a resize stream).
    pub tty: bool,
}

impl Options {
    /// Parses a URL query (without the `?`).
    ///
    /// # Errors
    /// [`Error::NoStreams`] when none of stdin, stdout and stderr is requested.
    pub fn from_query(query: &str) -> Result<Self, Error> {
        let mut options = Self::default();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            let on = value == "1";
            match key.as_ref() {
                "command" => options.command.push(value.into_owned()),
                "input" => options.stdin = on,
                "output" => options.stdout = on,
                "error" => options.stderr = on,
                "tty" => options.tty = on,
                _ => {}
            }
        }
        if options.tty {
            options.stderr = false;
        }
        if !options.stdin && !options.stdout && !options.stderr {
            return Err(Error::NoStreams);
        }
        Ok(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_api_server_exec_query() {
        let options =
            Options::from_query("command=sh&command=-c&command=echo+a%26b&error=1&output=1")
                .expect("valid");
        assert_eq!(options.command, ["sh", "-c", "echo a&b"]);
        assert!(options.stdout && options.stderr && !options.stdin && !options.tty);
    }

    #[test]
    fn only_1_sets_a_flag_and_tty_drops_stderr() {
        let options = Options::from_query("input=1&output=true&error=1&tty=1").expect("valid");
        assert_eq!(
            options,
            Options {
                command: vec![],
                stdin: true,
                stdout: false,
                stderr: false,
                tty: true
            }
        );
    }

    #[test]
    fn no_streams_is_refused_with_the_kubelet_text() {
        let error = Options::from_query("command=ls&tty=1&error=1").expect_err("no streams");
        assert_eq!(
            error.to_string(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
    }
}
