//! The Ready loop against the embedded API server: what the manager owns is restored, what others add
//! survives, configuration changes propagate, chart upgrades relabel and clean up, `ignore` is honoured,
//! and a steady-state reconcile writes nothing.

mod common;

use btp_api::{names, Reason};
use btp_manager::config::Config;
use btp_manager::reconciler::resources::ModuleResources;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use std::time::Duration;

const NS: &str = names::KYMA_SYSTEM;
const DEPLOYMENT: &str = "sap-btp-operator-controller-manager";

fn manager_image(d: &Deployment) -> Option<String> {
    d.spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "manager")?
        .image
        .clone()
}

#[tokio::test]
async fn an_image_changed_by_hand_is_restored() {
    let env = ready_env(Config::default()).await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
    let patch =
        serde_json::json!({"spec": {"template": {"spec": {"containers": [{"name": "manager", "image": "bogus:1"}]}}}});
    deployments
        .patch(DEPLOYMENT, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "the operand image restored", || async {
        manager_image(&deployments.get(DEPLOYMENT).await.unwrap()).as_deref() == Some(IMAGE)
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn fields_we_own_are_restored_and_fields_others_add_survive() {
    let env = ready_env(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    let patch = serde_json::json!({"metadata": {"labels": {"team": "platform"}}, "data": {"CLUSTER_ID": "hacked"}});
    cms.patch(
        "sap-btp-operator-config",
        &PatchParams::apply("platform-team").force(),
        &Patch::Apply(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "sap-btp-operator-config", "namespace": NS, "labels": patch["metadata"]["labels"]},
            "data": patch["data"]
        })),
    )
    .await
    .unwrap();
    reconcile_now(&env).await;
    let cm = cms.get("sap-btp-operator-config").await.unwrap();
    assert_eq!(cm.data.unwrap()["CLUSTER_ID"], "cluster-1", "our field restored");
    assert_eq!(
        cm.metadata.labels.unwrap()["team"],
        "platform",
        "a foreign field survives"
    );
    env.stop().await;
}

#[tokio::test]
async fn the_runtime_configmap_changes_the_operand_and_deleting_it_reverts() {
    let env = ready_env(Config::default()).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    let config: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sap-btp-manager", "namespace": NS, "labels": {"app.kubernetes.io/managed-by": "kcp-kyma-environment-broker"}},
        "data": {"EnableLimitedCache": "false"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &config).await.unwrap();
    let limited =
        || async { cms.get("sap-btp-operator-config").await.unwrap().data.unwrap()["ENABLE_LIMITED_CACHE"].clone() };
    eventually(Duration::from_secs(5), "ENABLE_LIMITED_CACHE=false", || async {
        limited().await == "false"
    })
    .await;
    cms.delete("sap-btp-manager", &DeleteParams::default()).await.unwrap();
    eventually(
        Duration::from_secs(5),
        "ENABLE_LIMITED_CACHE back to the default",
        || async { limited().await == "true" },
    )
    .await;
    env.stop().await;
}

#[tokio::test]
async fn a_chart_upgrade_relabels_everything_and_removes_what_moved_to_delete() {
    let env = ready_env(Config::default()).await;
    let old = env.ctx.settings().module.clone();
    // The new chart renames the metrics Service; the old one is listed in delete/.
    let mut new = ModuleResources {
        chart_version: "v9.9.9".into(),
        ..(*old).clone()
    };
    let renamed = "sap-btp-operator-controller-manager-metrics-service";
    for obj in &mut new.apply {
        if obj["kind"] == "Service" && obj["metadata"]["name"] == renamed {
            obj["metadata"]["name"] = serde_json::json!(format!("{renamed}-v2"));
        }
    }
    new.delete = old
        .apply
        .iter()
        .filter(|o| o["kind"] == "Service" && o["metadata"]["name"] == renamed)
        .cloned()
        .collect();
    assert_eq!(new.delete.len(), 1);
    env.ctx.set_settings(btp_manager::config::Settings {
        module: std::sync::Arc::new(new.clone()),
        ..(*env.ctx.settings()).clone()
    });
    reconcile_now(&env).await;

    let services: Api<Service> = Api::namespaced(env.client.clone(), NS);
    assert!(
        services.get_opt(renamed).await.unwrap().is_none(),
        "the object in delete/ is gone"
    );
    assert!(services.get_opt(&format!("{renamed}-v2")).await.unwrap().is_some());
    for kind in [
        "ConfigMap",
        "Secret",
        "Service",
        "Deployment",
        "ServiceAccount",
        "Role",
        "RoleBinding",
    ] {
        let ar = kube::api::ApiResource::from_gvk(&match kind {
            "Deployment" => kube::api::GroupVersionKind::gvk("apps", "v1", kind),
            "Role" | "RoleBinding" => kube::api::GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
            _ => kube::api::GroupVersionKind::gvk("", "v1", kind),
        });
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(env.client.clone(), NS, &ar);
        let old_labelled = api
            .list(&ListParams::default().labels("chart-version=v0.11.10"))
            .await
            .unwrap();
        assert!(
            old_labelled.items.is_empty(),
            "{kind}: objects left on the old chart version"
        );
    }
    env.stop().await;
}

#[tokio::test]
async fn ignore_touches_nothing() {
    let env = Env::start(Config::default(), true).await;
    env.create_secret(credentials(), true).await;
    let mut cr = btp_api::BtpOperator::new(names::BTP_OPERATOR_NAME);
    cr.metadata.annotations = Some([(names::OPERATION_ANNOTATION.to_string(), "ignore".to_string())].into());
    env.crs(NS).create(&PostParams::default(), &cr).await.unwrap();
    let ctx = env.ctx.clone();
    eventually(Duration::from_secs(5), "the CR was reconciled at least once", || {
        let ctx = ctx.clone();
        async move { ctx.metrics.reconciles() >= 1 }
    })
    .await;
    let cr = env.cr().await;
    assert!(cr.status.is_none(), "no status written");
    assert!(cr.metadata.finalizers.unwrap_or_default().is_empty(), "no finalizer");
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
    assert!(
        deployments.get_opt(DEPLOYMENT).await.unwrap().is_none(),
        "nothing installed"
    );
    env.stop().await;
}

#[tokio::test]
async fn a_steady_state_reconcile_changes_no_resource_version() {
    let config = Config {
        ready_state_requeue_interval: Duration::from_millis(200),
        ..Config::default()
    };
    let env = ready_env(config).await;
    // Let the dust settle (our own status write and the Deployment controller's updates), then watch
    // several periodic reconciles.
    let ctx = env.ctx.clone();
    // Every pass begun so far has ended (the one that wrote Ready is counted only after its status write
    // returns), and two more.
    let settled = ctx.passes() + 2;
    eventually(Duration::from_secs(5), "two more reconciles", || {
        let ctx = ctx.clone();
        async move { ctx.metrics.reconciles() >= settled }
    })
    .await;
    let log = env.request_log();
    if let Some(log) = &log {
        log.clear();
    }
    let before = managed_versions(&env).await;
    let start = ctx.metrics.reconciles();
    eventually(Duration::from_secs(5), "three periodic reconciles", || {
        let ctx = ctx.clone();
        async move { ctx.metrics.reconciles() >= start + 3 }
    })
    .await;
    assert_eq!(
        managed_versions(&env).await,
        before,
        "steady-state reconciles changed objects"
    );
    // On the embedded server, also: nothing at all was written, and the reconciles did run their applies.
    if let Some(log) = log {
        let entries = log.entries();
        let writes: Vec<_> = entries
            .iter()
            .filter(|r| r.changed)
            .map(|r| format!("{} {}", r.verb, r.path))
            .collect();
        assert!(
            writes.is_empty(),
            "steady-state reconciles changed resourceVersions: {writes:?}"
        );
        // Not even a no-op apply is sent (Kubernetes 1.24 re-writes unchanged webhook configurations on
        // apply); the reconciles did compare what they would apply.
        let patches: Vec<_> = entries
            .iter()
            .filter(|r| r.verb == "patch" && r.resource != "btpoperators")
            .map(|r| format!("{} {}", r.verb, r.path))
            .collect();
        assert!(patches.is_empty(), "steady-state reconciles sent applies: {patches:?}");
        // What they compared came from the manager's caches: not one read of the operand's objects.
        assert!(ctx.view().is_some_and(|v| v.ready()), "the view answers");
        let reads: Vec<_> = entries
            .iter()
            .filter(|r| r.verb == "get" && (r.name.starts_with("sap-btp-operator") || r.name.ends_with("-server-cert")))
            .map(|r| format!("{} {}", r.verb, r.path))
            .collect();
        assert!(
            reads.is_empty(),
            "steady-state reconciles read from the API server: {reads:?}"
        );
    }
    env.stop().await;
}

#[tokio::test]
async fn network_policies_follow_the_disable_annotation_and_spare_foreign_ones() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let env = ready_env(Config::default()).await;
    let policies: Api<NetworkPolicy> = Api::namespaced(env.client.clone(), NS);
    let managed =
        ListParams::default().labels("app.kubernetes.io/managed-by=btp-manager,kyma-project.io/module=btp-operator");
    let count = || async { policies.list(&managed).await.unwrap().items.len() };
    eventually(Duration::from_secs(5), "the four policies installed", || async {
        count().await == 4
    })
    .await;
    let foreign: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "team-policy", "namespace": NS}, "spec": {"podSelector": {}}
    }))
    .unwrap();
    policies.create(&PostParams::default(), &foreign).await.unwrap();

    let annotate = |value| {
        env.patch_cr(
            serde_json::json!({"metadata": {"annotations": {names::DISABLE_NETWORK_POLICIES_ANNOTATION: value}}}),
        )
    };
    annotate(serde_json::json!("TRUE")).await;
    eventually(Duration::from_secs(5), "managed policies removed", || async {
        count().await == 0
    })
    .await;
    assert!(
        policies.get_opt("team-policy").await.unwrap().is_some(),
        "an unlabelled policy survives"
    );
    annotate(serde_json::Value::Null).await;
    eventually(Duration::from_secs(5), "policies back after re-enabling", || async {
        count().await == 4
    })
    .await;
    env.stop().await;
}

/// The API server policy carries the ports of the live `default/kubernetes` EndpointSlices: read before the
/// first apply, followed by a watch. On a real cluster the API server owns that slice: only its port is
/// checked there.
#[tokio::test]
async fn the_api_server_policy_follows_the_kubernetes_endpoint_slices() {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let slice = |port: u16| -> EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        }))
        .unwrap()
    };
    let real = real_cluster().is_some();
    let env = if real {
        ready_env(Config::default()).await
    } else {
        // Before the manager starts: its first apply already allows 7443.
        let env = Env::start(Config::default(), true).await;
        let slices: Api<EndpointSlice> = Api::namespaced(env.client.clone(), "default");
        slices.create(&PostParams::default(), &slice(7443)).await.unwrap();
        env.create_secret_and_cr().await;
        env
    };
    let policies: Api<NetworkPolicy> = Api::namespaced(env.client.clone(), NS);
    let allowed = |port: u16| {
        let policies = policies.clone();
        async move {
            policies
                .get_opt("kyma-project.io--btp-operator-allow-to-apiserver")
                .await
                .unwrap()
                .and_then(|p| p.spec)
                .and_then(|s| s.egress)
                .unwrap_or_default()
                .iter()
                .flat_map(|rule| rule.ports.iter().flatten())
                .any(|p| p.port == Some(IntOrString::Int(i32::from(port))))
        }
    };
    let slices: Api<EndpointSlice> = Api::namespaced(env.client.clone(), "default");
    if real {
        let live = slices
            .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
            .await
            .unwrap();
        for port in live
            .items
            .iter()
            .flat_map(|s| s.ports.iter().flatten())
            .filter_map(|p| p.port)
        {
            let port = u16::try_from(port).unwrap();
            eventually(Duration::from_secs(10), &format!("port {port} allowed"), || {
                allowed(port)
            })
            .await;
        }
        env.stop().await;
        return;
    }
    eventually(Duration::from_secs(10), "7443 allowed", || allowed(7443)).await;
    slices
        .patch(
            "kubernetes",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"ports": [{"name": "https", "port": 6443, "protocol": "TCP"}]})),
        )
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "6443 allowed, 7443 no longer", || async {
        allowed(6443).await && !allowed(7443).await
    })
    .await;
    env.stop().await;
}

#[tokio::test]
async fn the_legacy_network_policy_is_deleted() {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let env = ready_env(Config::default()).await;
    let policies: Api<NetworkPolicy> = Api::namespaced(env.client.clone(), NS);
    let legacy: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "kyma-project.io--btp-operator-allow-to-webhook", "namespace": NS},
        "spec": {"podSelector": {}}
    }))
    .unwrap();
    policies.create(&PostParams::default(), &legacy).await.unwrap();
    reconcile_now(&env).await;
    assert!(policies
        .get_opt("kyma-project.io--btp-operator-allow-to-webhook")
        .await
        .unwrap()
        .is_none());
    env.stop().await;
}

/// resourceVersion of the CR and of every object labelled managed-by=btp-manager, by kind/namespace/name.
async fn managed_versions(env: &Env) -> Vec<(String, String)> {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let mut out = Vec::new();
    let cr = env.cr().await;
    out.push((
        "BtpOperator".to_string(),
        cr.metadata.resource_version.unwrap_or_default(),
    ));
    for (group, version, kind, namespaced) in MANAGED_KINDS {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(env.client.clone(), NS, &ar)
        } else {
            Api::all_with(env.client.clone(), &ar)
        };
        let list = api
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=btp-manager"))
            .await
            .unwrap();
        for o in list.items {
            let id = format!("{kind}/{}", o.metadata.name.unwrap_or_default());
            out.push((id, o.metadata.resource_version.unwrap_or_default()));
        }
    }
    assert!(out.len() > 14, "the managed objects were found: {out:?}");
    out.sort();
    out
}

/// A `--resources-path` whose manifests hold kinds outside the built-in table: a `PodDisruptionBudget`
/// (policy/v1) and a cluster-scoped custom resource whose plural no rule guesses (`Mouse`/`mice`, its CRD in
/// the same manifests). Scope and resource name come from discovery (and the CRD): both are applied, and
/// removed when the CR is deleted.
#[tokio::test]
async fn kinds_outside_the_built_in_table_are_applied_and_removed_by_discovery() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let dir = std::env::temp_dir().join(format!("btp-kinds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("module-resources");
    for sub in ["apply", "delete"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        for entry in std::fs::read_dir(source.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.join(sub).join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::copy(source.join("chart-version"), dir.join("chart-version")).unwrap();
    std::fs::write(
        dir.join("apply/zz-extra-kinds.yml"),
        r#"apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: sap-btp-operator-pdb
  namespace: kyma-system
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: sap-btp-operator
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: mice.example.com
spec:
  group: example.com
  scope: Cluster
  names: {kind: Mouse, plural: mice, singular: mouse, listKind: MouseList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: example.com/v1
kind: Mouse
metadata:
  name: jerry
"#,
    )
    .unwrap();
    let module = btp_manager::reconciler::resources::load(&dir).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(module
        .sources
        .contains_key(&("policy/v1".to_string(), "PodDisruptionBudget".to_string())));

    let env = ready_env(Config::default()).await;
    // A chart with kinds beyond the shipped RBAC comes with RBAC for them (as an operator who upgrades the chart
    // grants it): on a real cluster the manager runs as the shipped ServiceAccount.
    let extra_rbac = serde_json::json!([
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "btp-e2e-extra-kinds"},
         "rules": [
             {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["*"]},
             {"apiGroups": ["example.com"], "resources": ["mice"], "verbs": ["*"]},
             {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["*"]},
         ]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "btp-e2e-extra-kinds"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "btp-e2e-extra-kinds"},
         "subjects": [{"kind": "ServiceAccount", "name": common::install::SERVICE_ACCOUNT, "namespace": NS}]},
    ]);
    common::install::apply(&env.client, extra_rbac.as_array().unwrap()).await;
    // As a runtime ConfigMap naming another resources path would (the term's settings).
    env.ctx.set_settings(btp_manager::config::Settings {
        module: std::sync::Arc::new(module),
        ..(*env.ctx.settings()).clone()
    });
    reconcile_now(&env).await;
    env.wait_cr(Reason::ReconcileSucceeded, 20).await;
    let pdbs: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("policy", "v1", "PodDisruptionBudget")),
    );
    let mice: Api<DynamicObject> = Api::all_with(
        env.client.clone(),
        &ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("example.com", "v1", "Mouse"), "mice"),
    );
    assert!(
        pdbs.get_opt("sap-btp-operator-pdb").await.unwrap().is_some(),
        "PDB applied"
    );
    let jerry = mice
        .get_opt("jerry")
        .await
        .unwrap()
        .expect("the Mouse applied, cluster-scoped");
    assert_eq!(jerry.metadata.namespace, None);

    env.delete_cr().await;
    env.wait_cr_gone(20).await;
    assert!(
        pdbs.get_opt("sap-btp-operator-pdb").await.unwrap().is_none(),
        "PDB removed"
    );
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(env.client.clone());
    eventually(Duration::from_secs(10), "the Mouse CRD removed", || async {
        crds.get_opt("mice.example.com").await.unwrap().is_none()
    })
    .await;
    for (kind, plural) in [
        ("ClusterRoleBinding", "clusterrolebindings"),
        ("ClusterRole", "clusterroles"),
    ] {
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind), plural);
        Api::<DynamicObject>::all_with(env.client.clone(), &resource)
            .delete("btp-e2e-extra-kinds", &Default::default())
            .await
            .unwrap();
    }
    env.stop().await;
}

/// A kind that neither the API server nor the manifests' CRDs define is an error naming the kind and the
/// file it came from, and nothing is applied.
#[tokio::test]
async fn an_unknown_kind_fails_naming_the_kind_and_its_file() {
    let env = ready_env(Config::default()).await;
    let mut module = (*env.ctx.settings().module).clone();
    module.apply.push(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": NS}
    }));
    module.sources.insert(
        ("example.com/v1".to_string(), "Widget".to_string()),
        "module-resources/apply/widget.yml".to_string(),
    );
    env.ctx.set_settings(btp_manager::config::Settings {
        module: std::sync::Arc::new(module),
        ..(*env.ctx.settings()).clone()
    });
    env.patch_cr(serde_json::json!({"metadata": {"annotations": {names::OPERATION_ANNOTATION: "reconcile"}}}))
        .await;
    let cr = env.wait_cr(Reason::ProvisioningFailed, 10).await;
    let message = &cr.status.unwrap().conditions[0].message;
    assert!(
        message.contains("Widget") && message.contains("example.com/v1") && message.contains("widget.yml"),
        "{message}"
    );
    env.stop().await;
}
