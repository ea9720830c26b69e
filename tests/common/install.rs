//! What `kubectl apply -k deploy/` installs for the manager's identity: its ServiceAccount and its RBAC, as
//! shipped. With them applied, an API server that enforces RBAC (the embedded one does for every user but its
//! admin) lets the manager do exactly what `deploy/` grants it.
#![allow(dead_code)]

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};

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

/// Server-side apply `objects` as the client's user (field manager `kubectl`), cluster-scoped where they
/// carry no namespace.
pub async fn apply(client: &kube::Client, objects: &[serde_json::Value]) {
    for object in objects {
        let api_version = object["apiVersion"].as_str().expect("apiVersion");
        let kind = object["kind"].as_str().expect("kind");
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let name = object["metadata"]["name"].as_str().expect("metadata.name");
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        api.patch(name, &PatchParams::apply("kubectl").force(), &Patch::Apply(object))
            .await
            .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }
}

/// Install the manager's ServiceAccount and RBAC from `deploy/` (the namespace `kyma-system` must exist).
pub async fn manager_identity(client: &kube::Client) {
    let mut objects = deploy_objects("service-account.yaml");
    objects.extend(deploy_objects("rbac.yaml"));
    apply(client, &objects).await;
}
