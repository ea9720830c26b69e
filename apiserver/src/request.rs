//! What a request asked for and how it ended. The server fills one record per request: authorization
//! reads it for requests of resources the server does not serve, and the request log (`testing`) keeps it.

/// One logged request.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RequestRecord {
    pub method: String,
    /// Kubernetes verb (get, list, watch, create, update, patch, delete, deletecollection,
    /// or `discovery` / `other`).
    pub verb: String,
    pub path: String,
    pub query: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// Who sent it: `system:admin` for the server's own token, else the user given to
    /// `RunningApiServer::client_as` (empty when unauthenticated).
    pub user: String,
    /// The client's `User-Agent` (the manager names its replica there), as a real audit log records it.
    pub user_agent: String,
    pub code: u16,
    /// Whether the request changed the store (a new resourceVersion was written).
    pub changed: bool,
}
