//! The server's configuration and the Kubernetes version it behaves as.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

/// Server configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Bearer token clients must present; a random one is generated if empty.
    pub token: String,
    /// Webhook service resolution: (namespace, name, port) -> address.
    pub service_map: HashMap<(String, String, u16), SocketAddr>,
    /// Number of watch events kept for resuming watches (older versions get 410 Gone).
    pub history: usize,
    /// Interval between BOOKMARK events on watches that asked for them.
    pub bookmark_interval: Duration,
    /// Address to listen on (port 0 = ephemeral).
    pub bind: SocketAddr,
    /// How long a deleted namespace stays `Terminating` before its content is deleted (a real cluster's
    /// namespace controller takes seconds; creates in it are refused meanwhile).
    pub namespace_termination_delay: Duration,
    /// How long a created CRD waits to be established (its names accepted, `Established`, its resource served):
    /// a real API server's own controllers take tens of milliseconds, and a request for the resource in between
    /// is answered 404 (`tests/corpus`: crd-served-once-established).
    pub crd_establish_delay: Duration,
    /// The Kubernetes version the server presents (`/version`) and whose version-gated behaviour it
    /// follows (see [`KubeVersion`]).
    pub version: KubeVersion,
}

/// The Kubernetes version the embedded server behaves as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum KubeVersion {
    /// Kubernetes 1.24: webhook configurations have no `matchConditions` (server-side apply of one that has
    /// them fails with 500 "field not declared in schema", POST silently drops them, none are evaluated).
    V1_24,
    /// The newest version modelled (1.36).
    #[default]
    Latest,
}

impl KubeVersion {
    /// Parses `1.24`, `v1.24`, `1.36`, `latest`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().trim_start_matches('v') {
            "1.24" => Some(KubeVersion::V1_24),
            "1.36" | "latest" => Some(KubeVersion::Latest),
            _ => None,
        }
    }
    /// (major, minor, gitVersion)
    pub fn numbers(self) -> (&'static str, &'static str, &'static str) {
        match self {
            KubeVersion::V1_24 => ("1", "24", "v1.24.0-btp-apiserver"),
            KubeVersion::Latest => ("1", "36", "v1.36.2-btp-apiserver"),
        }
    }
    /// Whether webhook configurations know `matchConditions` (1.28 beta on by default; GA 1.30).
    pub fn has_match_conditions(self) -> bool {
        self != KubeVersion::V1_24
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            token: String::new(),
            service_map: HashMap::new(),
            history: 10_000,
            bookmark_interval: Duration::from_secs(5),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            namespace_termination_delay: Duration::from_millis(500),
            crd_establish_delay: Duration::from_millis(20),
            version: KubeVersion::default(),
        }
    }
}
