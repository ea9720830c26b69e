//! Small helpers over Kubernetes objects shared by the reconciler, the webhook certificate manager and `local`.

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

/// Why [`crd_established`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum EstablishedError {
    #[error("watching CustomResourceDefinition {name}: {source}")]
    Watch {
        name: String,
        #[source]
        source: kube::runtime::wait::Error,
    },
    #[error("CustomResourceDefinition {name} was not established within {within:?}")]
    Timeout { name: String, within: std::time::Duration },
}

/// Wait until CRD `name` is established: an API server serves a CRD's resource only some time after the CRD's
/// create (until then a request for it is answered 404), so whoever creates one and then its objects waits,
/// as `kubectl wait --for condition=established` does.
pub async fn crd_established(
    client: &kube::Client,
    name: &str,
    within: std::time::Duration,
) -> Result<(), EstablishedError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds = kube::Api::<CustomResourceDefinition>::all(client.clone());
    let wait = kube::runtime::wait::await_condition(crds, name, kube::runtime::wait::conditions::is_crd_established());
    match tokio::time::timeout(within, wait).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(EstablishedError::Watch {
            name: name.into(),
            source,
        }),
        Err(_) => Err(EstablishedError::Timeout {
            name: name.into(),
            within,
        }),
    }
}
