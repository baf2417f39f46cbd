//! What the error stream carries at the end (cri-streaming `remotecommand` `writeStatus`):
//! from v4 one JSON status; before v4 nothing on success and the message on failure.

use serde::Serialize;

use super::protocol::Protocol;

/// How an exec or attach ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The process exited 0 (exec) or the attach ended.
    Success,
    /// The process exited with this non-zero code (0–255).
    ExitCode {
        /// Exit code.
        code: u8,
        /// The command, for the message.
        command: Vec<String>,
    },
    /// The runtime failed; the message (e.g. "error executing command in container: ...").
    Failed(String),
}

/// The status object (the kubelet's `streamStatus`: apimachinery `Status` without TypeMeta
/// and metadata).
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Status {
    #[serde(skip_serializing_if = "str::is_empty")]
    status: &'static str,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Details>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<i32>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
struct Details {
    causes: Vec<Cause>,
}

/// A cause; Go's `StatusCause.Type` serialises as `reason`.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct Cause {
    reason: &'static str,
    message: String,
}

impl Outcome {
    /// The bytes to write to the error stream (empty: write nothing).
    pub fn encode(&self, protocol: Protocol) -> Vec<u8> {
        let status = match self {
            Self::Success => Status {
                status: "Success",
                message: String::new(),
                reason: "",
                details: None,
                code: None,
            },
            Self::ExitCode { code, command } => Status {
                status: "Failure",
                message: format!(
                    "command terminated with non-zero exit code: error executing command [{}], exit code {code}",
                    command.join(" ")
                ),
                reason: "NonZeroExitCode",
                details: Some(Details {
                    causes: vec![Cause {
                        reason: "ExitCode",
                        message: code.to_string(),
                    }],
                }),
                code: None,
            },
            Self::Failed(message) => Status {
                status: "Failure",
                message: format!("Internal error occurred: {message}"),
                reason: "InternalError",
                details: None,
                code: Some(500),
            },
        };
        if protocol >= Protocol::V4 {
            serde_json::to_vec(&status).unwrap_or_default()
        } else if matches!(self, Self::Success) {
            Vec::new()
        } else {
            status.message.into_bytes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(outcome: &Outcome, protocol: Protocol) -> String {
        String::from_utf8(outcome.encode(protocol)).expect("UTF-8")
    }

    #[test]
    fn v4_shapes_match_the_kubelet() {
        assert_eq!(
            text(&Outcome::Success, Protocol::V4),
            r#"{"status":"Success"}"#
        );
        let exit = Outcome::ExitCode {
            code: 3,
            command: vec!["sh".into(), "-c".into(), "exit 3".into()],
        };
        assert_eq!(
            text(&exit, Protocol::V4),
            r#"{"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#
        );
        assert_eq!(
            text(
                &Outcome::Failed("error executing command in container: boom".into()),
                Protocol::V4
            ),
            r#"{"status":"Failure","message":"Internal error occurred: error executing command in container: boom","reason":"InternalError","code":500}"#
        );
    }

    #[test]
    fn before_v4_success_is_silent_and_failures_are_text() {
        assert!(Outcome::Success.encode(Protocol::V3).is_empty());
        assert_eq!(
            text(&Outcome::Failed("x".into()), Protocol::V2),
            "Internal error occurred: x"
        );
    }
}
