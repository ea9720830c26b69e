//! What `kubectl apply -k deploy/` installs for the manager's identity: its ServiceAccount and its RBAC, as
//! shipped. With them applied, an API server that enforces RBAC (the embedded one does for every user but its
//! admin) lets the manager do exactly what `deploy/` grants it.
#![allow(dead_code)]

/// The ServiceAccount of `deploy/service-account.yaml`.
pub const SERVICE_ACCOUNT: &str = "btp-manager-controller-manager";

/// The user a client of the shipped ServiceAccount authenticates as.
pub fn manager_user() -> String {
    format!(
        "system:serviceaccount:{}:{SERVICE_ACCOUNT}",
        btp_api::names::KYMA_SYSTEM
    )
}

/// Every object of the YAML file `deploy/<file>`.
pub fn deploy_objects(file: &str) -> Vec<serde_json::Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple::<serde_json::Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

/// Server-side apply `objects` as the client's user (field manager `kubectl`), as `kubectl apply
/// --server-side` would.
pub async fn apply(client: &kube::Client, objects: &[serde_json::Value]) {
    btp_manager::shipped::apply(client, objects, "kubectl")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Install the manager's ServiceAccount and RBAC from `deploy/` (the namespace `kyma-system` must exist).
pub async fn manager_identity(client: &kube::Client) {
    let mut objects = deploy_objects("service-account.yaml");
    objects.extend(deploy_objects("rbac.yaml"));
    apply(client, &objects).await;
}
