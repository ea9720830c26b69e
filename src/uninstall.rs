//! `btp-manager uninstall --keep-operand`: the way back to the Go BTP Manager
//! (docs/upgrading.md#rolling-back-to-the-go-btp-manager). It stops the manager (its Deployment scaled to
//! zero, then waits for its Pods to end, so no replica registers anything again) and deletes the manager's own
//! registrations, by name. Nothing else: the operand, the BtpOperator, its CRD, the credentials Secret, the
//! Lease and the objects the Go install shares by name stay. Read-only unless `--apply`: without it, it prints
//! what it would do. The plan is [`plan`] (pure); [`run`] carries it out.

use anyhow::Context as _;
use btp_api::names;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use std::time::Duration;

/// The manager's Deployment (`deploy/deployment.yaml`; the Go install's has the same name).
pub const DEPLOYMENT: &str = "btp-manager-controller-manager";

/// One object the plan touches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Object {
    /// `group/version` (`v1` for the core group).
    pub api_version: &'static str,
    /// Its kind.
    pub kind: &'static str,
    /// Its namespace; None when cluster-scoped.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl Object {
    fn new(api_version: &'static str, kind: &'static str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            api_version,
            kind,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }

    /// `Kind namespace/name` or `Kind name`.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// One step, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Scale the manager's Deployment to zero and wait until its Pods are gone.
    Stop(Object),
    /// Delete the object if it exists.
    Delete(Object),
}

/// The steps for the manager installed in `namespace`: stop it, then delete what only it has (its webhook
/// configurations above all: the validating one refuses every BtpOperator create once nobody serves it).
pub fn plan(namespace: &str) -> Vec<Step> {
    let ns = Some(namespace);
    let mut steps = vec![Step::Stop(Object::new("apps/v1", "Deployment", ns, DEPLOYMENT))];
    let admission = "admissionregistration.k8s.io/v1";
    let rbac = "rbac.authorization.k8s.io/v1";
    for object in [
        Object::new(
            admission,
            "ValidatingWebhookConfiguration",
            None,
            names::webhook::VALIDATING_CONFIGURATION,
        ),
        Object::new(
            admission,
            "MutatingWebhookConfiguration",
            None,
            names::webhook::MUTATING_CONFIGURATION,
        ),
        Object::new("v1", "Service", ns, names::webhook::SERVICE_NAME),
        Object::new("networking.k8s.io/v1", "NetworkPolicy", ns, "btp-manager-allow-webhook"),
        // It selects the Go manager's single Pod too (same Deployment, same labels): kept, it would block
        // every node drain.
        Object::new("policy/v1", "PodDisruptionBudget", ns, DEPLOYMENT),
        Object::new("v1", "Secret", ns, names::webhook::CERT_SECRET_NAME),
        Object::new(rbac, "ClusterRole", None, "kyma-btp-operator-view"),
        Object::new(rbac, "ClusterRole", None, "kyma-btp-operator-edit"),
        // Its read of the API server's EndpointSlices (the operand's network policies), in `default`.
        Object::new(
            rbac,
            "RoleBinding",
            Some("default"),
            "btp-manager-api-server-endpoints-rolebinding",
        ),
        Object::new(rbac, "Role", Some("default"), "btp-manager-api-server-endpoints-role"),
    ] {
        steps.push(Step::Delete(object));
    }
    steps
}

fn api(client: &kube::Client, object: &Object) -> Api<DynamicObject> {
    let (group, version) = object.api_version.rsplit_once('/').unwrap_or(("", object.api_version));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, object.kind));
    match &object.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The Deployment's Pod selector (`spec.selector.matchLabels`) as a label selector string.
fn pod_selector(deployment: &DynamicObject) -> Option<String> {
    let labels = deployment.data["spec"]["selector"]["matchLabels"].as_object()?;
    let parts: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// Carry out `steps` against `client`'s cluster (only print them unless `apply`); one line per step on
/// `out`.
pub async fn execute(
    client: &kube::Client,
    steps: &[Step],
    apply: bool,
    timeout: Duration,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    for step in steps {
        match step {
            Step::Stop(object) => {
                let deployments = api(client, object);
                let what = object.describe();
                let Some(deployment) = deployments
                    .get_opt(&object.name)
                    .await
                    .with_context(|| format!("reading {what}"))?
                else {
                    writeln!(out, "absent: {what}")?;
                    continue;
                };
                if !apply {
                    writeln!(out, "would scale {what} to 0 replicas and wait for its Pods to end")?;
                    continue;
                }
                let patch = serde_json::json!({"spec": {"replicas": 0}});
                deployments
                    .patch(&object.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("scaling {what} to 0 replicas"))?;
                if let Some(selector) = pod_selector(&deployment) {
                    let pods: Api<k8s_openapi::api::core::v1::Pod> =
                        Api::namespaced(client.clone(), object.namespace.as_deref().unwrap_or_default());
                    let deadline = tokio::time::Instant::now() + timeout;
                    loop {
                        let left = pods
                            .list_metadata(&ListParams::default().labels(&selector))
                            .await
                            .with_context(|| format!("listing the Pods of {what}"))?
                            .items
                            .len();
                        if left == 0 {
                            break;
                        }
                        if tokio::time::Instant::now() >= deadline {
                            anyhow::bail!("{left} Pod(s) of {what} still running after {timeout:?}; nothing deleted");
                        }
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                }
                writeln!(out, "scaled {what} to 0 replicas; its Pods have ended")?;
            }
            Step::Delete(object) => {
                let objects = api(client, object);
                let what = object.describe();
                let found = objects
                    .get_opt(&object.name)
                    .await
                    .with_context(|| format!("reading {what}"))?;
                match (found, apply) {
                    (None, _) => writeln!(out, "absent: {what}")?,
                    (Some(_), false) => writeln!(out, "would delete {what}")?,
                    (Some(_), true) => {
                        match objects.delete(&object.name, &DeleteParams::default()).await {
                            Ok(_) => {}
                            Err(kube::Error::Api(s)) if s.code == 404 => {}
                            Err(e) => return Err(anyhow::Error::new(e).context(format!("deleting {what}"))),
                        }
                        writeln!(out, "deleted {what}")?;
                    }
                }
            }
        }
    }
    if !apply {
        writeln!(
            out,
            "dry run: nothing changed; run again with --apply to make these changes"
        )?;
    }
    Ok(())
}

/// `btp-manager uninstall --keep-operand`.
pub async fn run(args: crate::cli::UninstallArgs) -> anyhow::Result<()> {
    let client = crate::manager::kubeconfig_client(args.kubeconfig.as_deref(), "uninstall").await?;
    let steps = plan(&args.namespace);
    execute(&client, &steps, args.apply, args.timeout, &mut std::io::stdout()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan stops the manager before anything is deleted, and never names the operand, the CR, its CRD,
    /// the credentials Secret, the Lease or an object the Go install shares by name.
    #[test]
    fn the_plan_stops_first_and_deletes_only_the_managers_own_registrations() {
        let steps = plan("kyma-system");
        assert!(matches!(&steps[0], Step::Stop(o) if o.name == DEPLOYMENT));
        let deleted: Vec<&Object> = steps[1..]
            .iter()
            .map(|s| match s {
                Step::Delete(o) => o,
                Step::Stop(o) => panic!("a second stop: {o:?}"),
            })
            .collect();
        assert!(deleted
            .iter()
            .any(|o| o.name == names::webhook::VALIDATING_CONFIGURATION));
        for o in &deleted {
            assert!(
                o.name.starts_with("btp-manager-") || o.name.starts_with("kyma-btp-operator-"),
                "{o:?}"
            );
            for (kind, name) in [
                ("Deployment", DEPLOYMENT),
                ("ServiceAccount", DEPLOYMENT),
                ("ClusterRole", "btp-manager-manager-role"),
                ("Service", "btp-manager-metrics-service"),
                ("PriorityClass", "btp-manager-kyma-priority"),
            ] {
                assert!(
                    !(o.kind == kind && o.name == name),
                    "{kind} {name} is shared with the Go install by name"
                );
            }
            assert!(!["CustomResourceDefinition", "BtpOperator", "Lease"].contains(&o.kind));
        }
    }

    #[test]
    fn the_pod_selector_is_the_deployments() {
        let d: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
            "spec": {"selector": {"matchLabels": {"a": "b", "c": "d"}}}
        }))
        .unwrap();
        assert_eq!(pod_selector(&d).as_deref(), Some("a=b,c=d"));
    }
}
