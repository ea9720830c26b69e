//! Small helpers over Kubernetes objects shared by the reconciler and the webhook certificate manager.

use k8s_openapi::api::core::v1::Secret;
use std::collections::BTreeMap;

/// A Secret's `data` as raw bytes by key (empty when it has none).
pub fn secret_data(secret: &Secret) -> BTreeMap<String, Vec<u8>> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}
