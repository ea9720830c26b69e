//! Logging: JSON lines when stderr is not a terminal (in a cluster), readable lines on a terminal.
//! Level from `RUST_LOG` (default `info`).

use std::io::IsTerminal as _;
use tracing_subscriber::EnvFilter;

/// Install the global subscriber (once; later calls are ignored).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if std::io::stderr().is_terminal() {
        builder.compact().try_init()
    } else {
        builder.json().flatten_event(true).with_current_span(true).try_init()
    };
}
