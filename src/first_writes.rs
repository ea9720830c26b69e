//! The first webhook certificate and caBundle, written by any replica where none exists yet
//! (docs/behaviour.md#who-writes-what): the one exception to "only the leader writes".
//!
//! Before any replica of this manager has led, the webhook configurations `kubectl apply -k deploy/` registered
//! have no `caBundle`, and nothing serves them: every BtpOperator write is refused. When another manager holds
//! the Lease (the Go BTP Manager during the switch, renewing it as long as its Pod runs) no replica of ours
//! leads, and a Deployment with `maxUnavailable: 0` keeps the Go Pod until one of ours is ready: neither would
//! move. So a follower may make the two first writes itself, and only these:
//!
//! - the certificate Secret, with a create (POST), which the API server refuses when the Secret exists: it never
//!   replaces what another replica (or a leader) stored;
//! - the `caBundle` of a webhook of our configurations that has none, with a JSON patch whose first operation
//!   tests the `resourceVersion` read (and then each webhook's name): it never replaces a caBundle, and fails
//!   when the configuration changed since it was read.
//!
//! Neither can undo another writer's work, so two replicas (or a follower and a leader) cannot fight: the loser
//! of a race reads what the winner wrote and serves that. These writes are not fenced (no Lease of ours
//! grants them); [`FirstWrites`] can send nothing else. The objects are this manager's own; the Go manager
//! never reads or writes them.

use btp_api::names;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// The webhooks of `configuration` (JSON) without a `caBundle` (absent or empty): their index and name.
pub fn without_ca_bundle(configuration: &Value) -> Vec<(usize, String)> {
    configuration["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, hook)| hook["clientConfig"]["caBundle"].as_str().is_none_or(str::is_empty))
        .map(|(i, hook)| (i, hook["name"].as_str().unwrap_or_default().to_string()))
        .collect()
}

/// The JSON patch that gives the webhooks `missing` (index, name) of the configuration read at
/// `resource_version` the `caBundle` `bundle_b64`, and nothing else: it fails when the configuration changed
/// since, or a webhook moved.
pub fn ca_bundle_patch(resource_version: &str, missing: &[(usize, String)], bundle_b64: &str) -> Value {
    let mut ops = vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})];
    for (i, name) in missing {
        ops.push(json!({"op": "test", "path": format!("/webhooks/{i}/name"), "value": name}));
        ops.push(json!({"op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": bundle_b64}));
    }
    Value::Array(ops)
}

/// Whether `e` says that a conditional write lost: the object exists already (409 on a create), or changed
/// since it was read (a failed `test` operation: 422; or 409).
fn lost(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 || s.code == 422)
}

/// A client that can make the first writes and nothing else (see the module documentation). Cheap to clone.
#[derive(Clone)]
pub struct FirstWrites {
    /// Unfenced: these writes hold without a Lease.
    client: kube::Client,
}

impl FirstWrites {
    /// First writes through `client`, which must not be fenced (the manager's client refuses every write of a
    /// replica that does not lead).
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }

    /// Create `secret` in `namespace` unless a Secret of its name exists: whether this call created it.
    pub async fn create_secret(&self, namespace: &str, secret: &Secret) -> Result<bool, kube::Error> {
        let secrets: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        match secrets.create(&PostParams::default(), secret).await {
            Ok(_) => Ok(true),
            Err(e) if lost(&e) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Give the webhooks of `current` (the configuration `name` of kind `K`, as read) that have no caBundle
    /// `bundle_b64`: the configuration as stored afterwards, None when there was nothing to add or it changed
    /// since it was read (the caller reads it again).
    pub async fn add_ca_bundles<K>(
        &self,
        name: &str,
        current: &Value,
        bundle_b64: &str,
    ) -> Result<Option<Value>, kube::Error>
    where
        K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
    {
        let missing = without_ca_bundle(current);
        let Some(version) = current["metadata"]["resourceVersion"].as_str() else {
            return Ok(None);
        };
        if missing.is_empty() {
            return Ok(None);
        }
        let patch: json_patch::Patch =
            serde_json::from_value(ca_bundle_patch(version, &missing, bundle_b64)).map_err(kube::Error::SerdeError)?;
        let params = PatchParams {
            field_manager: Some(names::FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match Api::<K>::all(self.client.clone())
            .patch(name, &params, &Patch::<()>::Json(patch))
            .await
        {
            Ok(stored) => Ok(Some(serde_json::to_value(stored).map_err(kube::Error::SerdeError)?)),
            Err(e) if lost(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_webhooks_without_a_ca_bundle_are_missing_one() {
        let configuration = json!({"webhooks": [
            {"name": "a", "clientConfig": {"service": {"name": "s"}}},
            {"name": "b", "clientConfig": {"caBundle": ""}},
            {"name": "c", "clientConfig": {"caBundle": "Q0E="}},
        ]});
        assert_eq!(
            without_ca_bundle(&configuration),
            vec![(0, "a".to_string()), (1, "b".to_string())]
        );
        assert!(without_ca_bundle(&json!({"webhooks": []})).is_empty());
        assert!(without_ca_bundle(&json!({})).is_empty());
    }

    #[test]
    fn the_patch_is_guarded_by_the_version_read_and_the_webhooks_names() {
        let patch = ca_bundle_patch("42", &[(0, "a".into()), (2, "c".into())], "Q0E=");
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "test", "path": "/webhooks/0/name", "value": "a"},
                {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Q0E="},
                {"op": "test", "path": "/webhooks/2/name", "value": "c"},
                {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": "Q0E="},
            ])
        );
        // Applied to what was read, it adds the bundles and touches nothing else.
        let mut read = json!({"metadata": {"resourceVersion": "42"}, "webhooks": [
            {"name": "a", "clientConfig": {}}, {"name": "b", "clientConfig": {"caBundle": "T1RIRVI="}},
            {"name": "c", "clientConfig": {}}]});
        let p: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
        json_patch::patch(&mut read, &p).unwrap();
        assert_eq!(read["webhooks"][0]["clientConfig"]["caBundle"], "Q0E=");
        assert_eq!(read["webhooks"][1]["clientConfig"]["caBundle"], "T1RIRVI=");
        assert_eq!(read["webhooks"][2]["clientConfig"]["caBundle"], "Q0E=");
        // Applied to a configuration changed since, it fails as a whole.
        let mut changed = json!({"metadata": {"resourceVersion": "43"}, "webhooks": [
            {"name": "a", "clientConfig": {}}, {"name": "b", "clientConfig": {}}, {"name": "c", "clientConfig": {}}]});
        let before = changed.clone();
        assert!(json_patch::patch(&mut changed, &p).is_err());
        assert_eq!(changed, before, "nothing of a failed patch is applied");
    }
}
