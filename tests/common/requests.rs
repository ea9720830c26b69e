//! The requests an API server answered, for tests that count who sent what: the embedded server's request log,
//! or a real kube-apiserver's audit log (`BTP_E2E_AUDIT_LOG`: the file its `--audit-log-path` writes, JSON lines
//! at level Metadata; `scripts/e2e-real` starts its servers with one). Both give the same records: verb,
//! resource, namespace, name, the user, the `User-Agent` (which names the manager's replica) and the answer's
//! code.
#![allow(dead_code)]

use btp_apiserver::testing::{RequestLog, RequestRecord};
use std::path::PathBuf;

/// The audit log of the real cluster under test, where the stage keeps one.
pub fn audit_log() -> Option<PathBuf> {
    std::env::var_os("BTP_E2E_AUDIT_LOG")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// Where the requests are read from.
#[derive(Clone)]
pub enum Requests {
    Embedded(RequestLog),
    /// The audit log, read as it grows.
    Audit(std::sync::Arc<AuditLog>),
}

impl Requests {
    /// The audit log from its current end on.
    pub fn audit(path: PathBuf) -> Self {
        Self::Audit(std::sync::Arc::new(AuditLog::from_end(path)))
    }

    /// How many records there are (since this test began).
    pub fn len(&self) -> usize {
        match self {
            Self::Embedded(log) => log.len(),
            Self::Audit(log) => log.since(0).len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records after the first `skip` (counted as [`Requests::len`] counts).
    pub fn since(&self, skip: usize) -> Vec<RequestRecord> {
        match self {
            Self::Embedded(log) => log.since(skip),
            Self::Audit(log) => log.since(skip),
        }
    }
}

/// An audit log, parsed once and then only what was appended since the last read (the stage's log grows to
/// tens of megabytes; a test polls it).
pub struct AuditLog {
    path: PathBuf,
    /// How many records came before this test began (they are not this test's).
    start: usize,
    state: std::sync::Mutex<AuditState>,
}

#[derive(Default)]
struct AuditState {
    /// Bytes consumed: complete lines only.
    offset: u64,
    records: Vec<RequestRecord>,
    /// Long-running requests (watches) counted when their response started.
    started: std::collections::HashSet<String>,
}

impl AuditLog {
    fn from_end(path: PathBuf) -> Self {
        let log = Self {
            path,
            start: 0,
            state: std::sync::Mutex::default(),
        };
        let start = log.refreshed().records.len();
        Self { start, ..log }
    }

    fn since(&self, skip: usize) -> Vec<RequestRecord> {
        let state = self.refreshed();
        state
            .records
            .get(self.start + skip..)
            .map(<[RequestRecord]>::to_vec)
            .unwrap_or_default()
    }

    /// The state with every complete line appended since the last read parsed. A long-running request (a watch)
    /// is recorded when its response starts (it completes only when it ends); its completion is then not counted
    /// again.
    fn refreshed(&self) -> std::sync::MutexGuard<'_, AuditState> {
        use std::io::{Read as _, Seek as _};
        let mut state = super::sync_lock(&self.state);
        let mut appended = Vec::new();
        if let Ok(mut file) = std::fs::File::open(&self.path) {
            if file.seek(std::io::SeekFrom::Start(state.offset)).is_ok() {
                let _ = file.read_to_end(&mut appended);
            }
        }
        let complete = appended.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        for line in appended[..complete].split(|b| *b == b'\n') {
            let Ok(event) = serde_json::from_slice::<serde_json::Value>(line) else {
                continue;
            };
            let id = event["auditID"].as_str().unwrap_or_default().to_string();
            match event["stage"].as_str() {
                Some("ResponseStarted") => {
                    state.started.insert(id);
                }
                Some("ResponseComplete") if !state.started.contains(&id) => {}
                _ => continue,
            }
            state.records.push(record(&event));
        }
        state.offset += complete as u64;
        state
    }
}

/// An audit event as the embedded server's record of the same request.
fn record(event: &serde_json::Value) -> RequestRecord {
    let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let verb = s(&event["verb"]);
    let method = match verb.as_str() {
        "create" => "POST",
        "update" => "PUT",
        "patch" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        _ => "GET",
    };
    let uri = s(&event["requestURI"]);
    let (path, query) = uri.split_once('?').unwrap_or((uri.as_str(), ""));
    let object = &event["objectRef"];
    // A request of no resource: discovery, as the embedded server names it, or another path.
    let verb = if object.is_null() {
        let discovery = ["/api", "/apis", "/version", "/openapi"]
            .iter()
            .any(|p| path == *p || path.starts_with(&format!("{p}/")));
        if discovery { "discovery" } else { "other" }.to_string()
    } else {
        verb
    };
    let code = event["responseStatus"]["code"].as_u64().unwrap_or_default();
    RequestRecord {
        method: method.to_string(),
        verb: verb.clone(),
        path: path.to_string(),
        query: query.to_string(),
        group: s(&object["apiGroup"]),
        resource: s(&object["resource"]),
        subresource: s(&object["subresource"]),
        namespace: s(&object["namespace"]),
        name: s(&object["name"]),
        user: s(&event["user"]["username"]),
        user_agent: s(&event["userAgent"]),
        code: u16::try_from(code).unwrap_or(u16::MAX),
        // The audit log does not say whether a write changed the object: a successful write counts as one.
        changed: method != "GET" && code < 300,
    }
}
