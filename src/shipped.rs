//! What `deploy/` installs, built into the binary: `local` installs the manager's part of it into the embedded
//! API server (so that it looks like a cluster installed with `kubectl apply -k deploy/`), and `doctor` asks
//! the API server for every permission `deploy/rbac.yaml` grants (one table for both).

/// `deploy/rbac.yaml`.
pub const RBAC: &str = include_str!("../deploy/rbac.yaml");

/// The files of `deploy/` that `local` installs (the namespace, the CRD and the webhook configurations it
/// makes itself; `local`'s webhooks are reached by URL, not through the Service).
pub const FOR_LOCAL: [(&str, &str); 7] = [
    ("priority-class.yaml", include_str!("../deploy/priority-class.yaml")),
    ("service-account.yaml", include_str!("../deploy/service-account.yaml")),
    ("rbac.yaml", RBAC),
    ("services.yaml", include_str!("../deploy/services.yaml")),
    ("deployment.yaml", include_str!("../deploy/deployment.yaml")),
    ("pdb.yaml", include_str!("../deploy/pdb.yaml")),
    ("network-policy.yaml", include_str!("../deploy/network-policy.yaml")),
];

/// The ServiceAccount the manager runs as (`deploy/service-account.yaml`).
pub const SERVICE_ACCOUNT: &str = "btp-manager-controller-manager";

/// The user a client of [`SERVICE_ACCOUNT`] in `namespace` authenticates as.
pub fn manager_user(namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}")
}

/// Every object of the YAML documents `text`.
pub fn objects(text: &str) -> Result<Vec<serde_json::Value>, serde_saphyr::Error> {
    Ok(serde_saphyr::from_multiple::<serde_json::Value>(text)?
        .into_iter()
        .filter(|v| !v.is_null())
        .collect())
}

/// Why [`apply`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// An object lacks `apiVersion`, `kind` or `metadata.name`.
    #[error("an object without apiVersion, kind or metadata.name: {0}")]
    Incomplete(String),
    /// The API server refused it.
    #[error("applying {kind} {name}: {source}")]
    Api {
        /// Its kind.
        kind: String,
        /// Its name.
        name: String,
        /// The error.
        source: kube::Error,
    },
}

/// Server-side apply `objects` (field manager `field_manager`, force), cluster-scoped where they carry no
/// namespace, in order.
pub async fn apply(
    client: &kube::Client,
    objects: &[serde_json::Value],
    field_manager: &str,
) -> Result<(), ApplyError> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    for object in objects {
        let (Some(api_version), Some(kind), Some(name)) = (
            object["apiVersion"].as_str(),
            object["kind"].as_str(),
            object["metadata"]["name"].as_str(),
        ) else {
            return Err(ApplyError::Incomplete(object.to_string().chars().take(200).collect()));
        };
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        api.patch(name, &PatchParams::apply(field_manager).force(), &Patch::Apply(object))
            .await
            .map_err(|source| ApplyError::Api {
                kind: kind.into(),
                name: name.into(),
                source,
            })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_copies_are_the_files_of_deploy() {
        for (file, text) in FOR_LOCAL {
            let on_disk = std::fs::read_to_string(format!("{}/deploy/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
            assert_eq!(text, on_disk, "{file}");
            assert!(!objects(text).unwrap().is_empty(), "{file}");
        }
        let names: Vec<String> = objects(include_str!("../deploy/service-account.yaml"))
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect();
        assert_eq!(names, [SERVICE_ACCOUNT]);
    }
}
