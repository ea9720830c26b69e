//! Logging and error text.
//!
//! The rule: logs always go to stderr, never to stdout.
//! - `run` (a service): JSON lines when stderr is not a terminal (a container runtime or a collector reads
//!   them), readable lines on a terminal; level `info` unless `RUST_LOG` says otherwise.
//! - `local` (a person watching): readable lines only, `warn` and above unless `RUST_LOG` says otherwise;
//!   stdout carries the story `local` prints.
//! - `check` (a step of a script): as `local`, without kube-client's own error line for each failed request
//!   (the command's error names the last one).
//!
//! Errors are printed as one line (see [`one_line`]).

use std::io::IsTerminal as _;
use tracing_subscriber::EnvFilter;

/// Who reads the logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audience {
    /// `run`: a log collector (JSON) or an operator's terminal.
    Service,
    /// `local`: a person reading the console.
    Console,
    /// `check`: a script, which reads the exit code and the command's own error.
    Script,
}

/// Install the global subscriber (once; later calls are ignored).
pub fn init(audience: Audience) {
    let default = match audience {
        Audience::Service => "info",
        Audience::Console => "warn",
        Audience::Script => "warn,kube_client=off",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let terminal = std::io::stderr().is_terminal();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match (audience, terminal) {
        (Audience::Service, false) => builder.json().flatten_event(true).with_current_span(true).try_init(),
        _ => builder.compact().with_ansi(terminal).try_init(),
    };
}

/// A Kubernetes client error as the API server worded it: for an API error its `message` (with the
/// reason and code), not the debug form of the `Status` object.
pub fn kube_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            let reason = if status.reason.is_empty() {
                String::new()
            } else {
                format!("{}, ", status.reason)
            };
            format!("{} ({reason}{})", status.message, status.code)
        }
        other => other.to_string(),
    }
}

/// An error and its causes on one line, `outer: inner: root`, API errors worded by [`kube_message`].
pub fn one_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        if let Some(kube) = cause.downcast_ref::<kube::Error>() {
            parts.push(kube_message(kube));
            // The rest of the chain repeats the API error's Status.
            if matches!(kube, kube::Error::Api(_)) {
                break;
            }
            continue;
        }
        if cause.downcast_ref::<kube::core::Status>().is_some() {
            continue;
        }
        parts.push(cause.to_string());
    }
    parts.dedup();
    parts.join(": ").split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> kube::core::Status {
        serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "admission webhook \"x\" denied the request: BtpOperator must be named \"btpoperator\""
        }))
        .unwrap()
    }

    #[test]
    fn api_errors_are_worded_by_the_api_server() {
        let e = kube::Error::Api(Box::new(status()));
        let text = kube_message(&e);
        assert_eq!(
            text,
            "admission webhook \"x\" denied the request: BtpOperator must be named \"btpoperator\" (Forbidden, 403)"
        );
        assert!(!format!("{e}").is_empty());
    }

    #[test]
    fn an_error_chain_is_one_line_without_debug_output() {
        let e = anyhow::Error::new(kube::Error::Api(Box::new(status()))).context("creating kyma-system/btpoperator");
        let line = one_line(&e);
        assert_eq!(
            line,
            "creating kyma-system/btpoperator: admission webhook \"x\" denied the request: BtpOperator must be \
             named \"btpoperator\" (Forbidden, 403)"
        );
        assert!(!line.contains("Status {"), "{line}");
        let e = anyhow::anyhow!("first line\nsecond line").context("loading");
        assert_eq!(one_line(&e), "loading: first line second line");
    }
}
