//! The Go manager's release stress dataset (reference §16.4, docs/behaviour.md#performance-scenario), shared
//! by the stress benchmark and the stress test: 500 ServiceInstances and 500 ServiceBindings in `team`, 120
//! ConfigMaps and 120 Secrets of about 4,000 keys each and 100 Secrets of 64 KiB in `stress`, and 8 Secrets of
//! 512 KiB labelled `managed-by=btp-manager` in kyma-system. Needs `crate::operand` (tests/common/operand.rs).

use btp_api::names;
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, PostParams};

/// The namespaces the dataset needs besides kyma-system.
pub const NAMESPACES: [&str; 2] = ["stress", "team"];

/// How many of each there are.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub services: usize,
    pub wide: usize,
    pub large: usize,
    pub labelled: usize,
}

impl Sizes {
    /// The release dataset, every count multiplied by `scale` (at least 1 of each).
    pub fn scaled(scale: f64) -> Self {
        let n = |n: usize| ((n as f64) * scale).round().max(1.0) as usize;
        Sizes {
            services: n(500),
            wide: n(120),
            large: n(100),
            labelled: 8,
        }
    }
}

impl std::fmt::Display for Sizes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Sizes {
            services,
            wide,
            large,
            labelled,
        } = self;
        write!(
            f,
            "{services} ServiceInstances + {services} ServiceBindings, {wide} ConfigMaps and {wide} Secrets of 4,000 \
             keys, {large} Secrets of 64 KiB, {labelled} labelled Secrets of 512 KiB"
        )
    }
}

/// `keys` keys of about `value_len` bytes each.
fn many_keys(keys: usize, value_len: usize) -> serde_json::Map<String, serde_json::Value> {
    (0..keys)
        .map(|i| (format!("key-{i:05}"), serde_json::json!("v".repeat(value_len))))
        .collect()
}

async fn create_all<K>(api: Api<K>, objects: Vec<K>) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    futures::stream::iter(objects)
        .map(|o| {
            let api = api.clone();
            async move { api.create(&PostParams::default(), &o).await.map(|_| ()) }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}

fn secret(name: String, ns: &str, labels: serde_json::Value, data: serde_json::Value) -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns, "labels": labels}, "stringData": data
    }))
    .expect("a Secret")
}

/// Create the dataset (the namespaces of [`NAMESPACES`], kyma-system and the operand's CRDs must exist).
pub async fn create(client: &kube::Client, sizes: Sizes) -> Result<(), kube::Error> {
    let si =
        Api::<DynamicObject>::namespaced_with(client.clone(), "team", &crate::operand::services("ServiceInstance"));
    let sb = Api::<DynamicObject>::namespaced_with(client.clone(), "team", &crate::operand::services("ServiceBinding"));
    create_all(
        si,
        (0..sizes.services)
            .map(|i| crate::operand::service_instance("team", &format!("si-{i}")))
            .collect(),
    )
    .await?;
    create_all(
        sb,
        (0..sizes.services)
            .map(|i| crate::operand::service_binding("team", &format!("sb-{i}"), None))
            .collect(),
    )
    .await?;
    let configmaps: Vec<ConfigMap> = (0..sizes.wide)
        .map(|i| {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("wide-{i}"), "namespace": "stress"}, "data": many_keys(4000, 8)
            }))
            .expect("a ConfigMap")
        })
        .collect();
    create_all(Api::namespaced(client.clone(), "stress"), configmaps).await?;
    let wide_secrets = (0..sizes.wide)
        .map(|i| {
            secret(
                format!("wide-{i}"),
                "stress",
                serde_json::json!({}),
                many_keys(4000, 8).into(),
            )
        })
        .collect();
    create_all(Api::namespaced(client.clone(), "stress"), wide_secrets).await?;
    let large = (0..sizes.large)
        .map(|i| {
            secret(
                format!("large-{i}"),
                "stress",
                serde_json::json!({}),
                serde_json::json!({"blob": "x".repeat(64 * 1024)}),
            )
        })
        .collect();
    create_all(Api::namespaced(client.clone(), "stress"), large).await?;
    let labelled = (0..sizes.labelled)
        .map(|i| {
            secret(
                format!("large-labelled-{i}"),
                names::KYMA_SYSTEM,
                serde_json::json!({"app.kubernetes.io/managed-by": "btp-manager"}),
                serde_json::json!({"blob": "x".repeat(512 * 1024)}),
            )
        })
        .collect();
    create_all(Api::namespaced(client.clone(), names::KYMA_SYSTEM), labelled).await
}
