//! The shipped RBAC (`deploy/`) is exactly what the manager uses.
//!
//! The scenario runs the manager the way `btp-manager run --leader-elect` does (`ManagerBuilder::start`
//! with `run`'s options), authenticated as its ServiceAccount against the embedded API server: leader
//! election, its own webhook certificates and configurations, both webhooks called by the API server
//! (the validating DELETE webhook counts ServiceInstances/ServiceBindings), provisioning to Ready with
//! the operand's certificates over a legacy network policy (removed), a credentials change (new cluster ID
//! and credentials namespace), the CR's deletion, and shutdown (the Lease released). Every request the ServiceAccount sent is then taken from
//! the server's request log and evaluated against the Roles and ClusterRoles of `deploy/` bound to it
//! (`common/rbac.rs`); so is every Role/ClusterRole the manager writes (the API server's escalation
//! check: the manager must hold each permission it grants). A request the shipped RBAC would deny fails
//! the test; permissions nothing used are listed, and fail the test unless allow-listed below with the
//! reason.

mod common;
#[path = "common/rbac.rs"]
mod rbac;

use btp_api::{names, Reason};
use btp_apiserver::testing::RequestRecord;
use btp_manager::config::Config;
use btp_manager::manager::{self, ManagerBuilder, Options, Reach};
use common::*;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams};
use rbac::{Rbac, Request, Triple};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

const NS: &str = names::KYMA_SYSTEM;
const SERVICE_ACCOUNT: &str = "btp-manager-controller-manager";

fn user() -> String {
    format!("system:serviceaccount:{NS}:{SERVICE_ACCOUNT}")
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Every object in the YAML files of `dir`.
fn objects_in(dir: &str) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// The manager as `run --leader-elect` wires it, under the ServiceAccount's identity, and the sender that
/// asks it to shut down.
struct Manager {
    term: tokio::sync::watch::Sender<bool>,
    manager: manager::Manager,
}

async fn start_manager(env: &Env) -> Manager {
    let args = common::run_args([
        "--leader-elect".into(),
        "--operand-image".into(),
        IMAGE.into(),
        "--resources-path".into(),
        repo("module-resources").into_os_string(),
        "--manager-resources-path".into(),
        repo("manager-resources").into_os_string(),
        "--webhook-bind-address=127.0.0.1:0".into(),
        "--metrics-bind-address=127.0.0.1:0".into(),
        "--health-probe-bind-address=127.0.0.1:0".into(),
        "--shutdown-drain-delay=0s".into(),
        // Tests reach nothing beyond loopback: the Secret's token endpoint does not exist.
        "--credentials-check-interval=0".into(),
    ]);
    let mut options = Options::run(&args);
    // Outside the cluster whatever the environment says: reached at https://127.0.0.1:<bound port>.
    options.webhooks.reach = Reach::Run {
        url: None,
        in_cluster: false,
    };
    let (term, term_rx) = tokio::sync::watch::channel(false);
    let manager = ManagerBuilder::new(env.manager_client.clone(), options)
        .unwrap()
        .start(term_rx)
        .await
        .unwrap();
    Manager { term, manager }
}

async fn lease_holder(env: &Env) -> String {
    Api::<Lease>::namespaced(env.client.clone(), NS)
        .get_opt(manager::LEADER_LEASE)
        .await
        .unwrap()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .unwrap_or_default()
}

/// Provisioning to Ready (operand certificates included) and a credentials change.
/// The network policy of versions before the current set (`network_policies::LEGACY_POLICY`).
const LEGACY_NETWORK_POLICY: &str = "kyma-project.io--btp-operator-allow-to-webhook";

async fn provision_and_change_credentials(env: &Env) {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    // An upgrade from a version that shipped the legacy network policy: the first pass removes it.
    let policies: Api<NetworkPolicy> = Api::namespaced(env.client.clone(), NS);
    let legacy: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": LEGACY_NETWORK_POLICY},
        "spec": {"podSelector": {}},
    }))
    .expect("a NetworkPolicy");
    policies
        .create(&Default::default(), &legacy)
        .await
        .expect("the legacy network policy is created");
    env.create_secret_and_cr().await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
    assert!(
        policies.get_opt(LEGACY_NETWORK_POLICY).await.expect("read").is_none(),
        "the legacy network policy is removed"
    );
    env.ensure_namespace("custom-creds").await;
    env.patch_secret(
        serde_json::json!({"stringData": {"cluster_id": "cluster-2", "credentials_namespace": "custom-creds"}}),
    )
    .await;
    let configs: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    eventually(
        Duration::from_secs(10),
        "the credentials change reached the operand",
        || {
            let configs = configs.clone();
            async move {
                let data = configs
                    .get("sap-btp-operator-config")
                    .await
                    .unwrap()
                    .data
                    .unwrap_or_default();
                data.get("CLUSTER_ID").map(String::as_str) == Some("cluster-2")
                    && data.get("RELEASE_NAMESPACE").map(String::as_str) == Some("custom-creds")
            }
        },
    )
    .await;
    env.wait_cr(Reason::ReconcileSucceeded, 10).await;
}

/// Restoring what someone deleted: the manager's own webhook configurations and certificate Secret, and
/// module objects of every cluster-scoped and namespaced kind it applies. Each comes back through a
/// server-side apply that creates it (authorized as `patch` and `create`).
async fn restore_deleted(env: &Env) {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let deleted: Vec<(&str, &str, &str, Option<&str>, &str)> = vec![
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            None,
            names::webhook::VALIDATING_CONFIGURATION,
        ),
        (
            "admissionregistration.k8s.io/v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            None,
            names::webhook::MUTATING_CONFIGURATION,
        ),
        ("v1", "Secret", "secrets", Some(NS), names::webhook::CERT_SECRET_NAME),
        (
            "apps/v1",
            "Deployment",
            "deployments",
            Some(NS),
            names::operand::DEPLOYMENT,
        ),
        ("v1", "ServiceAccount", "serviceaccounts", Some(NS), "sap-btp-operator"),
        ("v1", "Service", "services", Some(NS), names::operand::WEBHOOK_SERVICE),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            "clusterroles",
            None,
            "sap-btp-operator-manager-role",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            None,
            "sap-btp-operator-manager-rolebinding",
        ),
        (
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            None,
            names::operand::VALIDATING_WEBHOOK_CONFIGURATION,
        ),
        (
            "networking.k8s.io/v1",
            "NetworkPolicy",
            "networkpolicies",
            Some(NS),
            "kyma-project.io--btp-operator-allow-to-apiserver",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "Role",
            "roles",
            Some(NS),
            "sap-btp-operator-leader-election-role",
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            "rolebindings",
            Some(NS),
            "sap-btp-operator-leader-election-rolebinding",
        ),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            None,
            "servicebindings.services.cloud.sap.com",
        ),
    ];
    let api = |api_version: &str, kind: &str, plural: &str, ns: Option<&str>| {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
        match ns {
            Some(ns) => Api::<DynamicObject>::namespaced_with(env.client.clone(), ns, &resource),
            None => Api::<DynamicObject>::all_with(env.client.clone(), &resource),
        }
    };
    for (api_version, kind, plural, ns, name) in &deleted {
        api(api_version, kind, plural, *ns)
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {kind} {name}: {e}"));
    }
    // Not every kind is watched: a forced pass re-applies the module at once.
    reconcile_now(env).await;
    eventually(Duration::from_secs(15), "everything deleted is back", || async {
        for (api_version, kind, plural, ns, name) in &deleted {
            if api(api_version, kind, plural, *ns)
                .get_opt(name)
                .await
                .unwrap()
                .is_none()
            {
                return false;
            }
        }
        true
    })
    .await;
}

/// Deleting the CR: the validating DELETE webhook counts ServiceInstances/ServiceBindings.
/// Deprovisioning (issue 8) extends this: wait here until the CR and the module resources are gone.
async fn deprovision(env: &Env) {
    env.delete_cr().await;
    // The whole deprovisioning, as the manager's ServiceAccount: everything it installed is removed, then
    // its finalizer.
    env.wait_cr_gone(15).await;
}

/// The whole scenario; returns the ServiceAccount's requests.
async fn scenario(env: &Env) -> Vec<RequestRecord> {
    let manager = start_manager(env).await;
    eventually(Duration::from_secs(10), "a replica leads", || async {
        !lease_holder(env).await.is_empty()
    })
    .await;
    provision_and_change_credentials(env).await;
    restore_deleted(env).await;
    // The operation annotation: the manager removes it after the pass.
    reconcile_now(env).await;
    deprovision(env).await;
    let _ = manager.term.send(true);
    tokio::time::timeout(Duration::from_secs(15), manager.manager.shut_down())
        .await
        .expect("the reconciler stops")
        .unwrap();
    assert_eq!(lease_holder(env).await, "", "the Lease is released at shutdown");
    let log = env.requests.clone().expect("a request log");
    let user = user();
    log.since(0).into_iter().filter(|r| r.user == user).collect()
}

/// What the API server authorizes for one request: its verb, and for a PATCH that created the object (a
/// server-side apply of something absent: 201) `create` of that name as well, as a real API server checks
/// (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go`; the corpus case
/// `authz-apply-create-without-create-verb`).
fn as_requests(r: &RequestRecord) -> Vec<Request> {
    let request = Request {
        verb: r.verb.clone(),
        group: r.group.clone(),
        resource: r.resource.clone(),
        subresource: r.subresource.clone(),
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        path: String::new(),
    };
    if r.verb == "patch" && r.code == 201 {
        let create = Request {
            verb: "create".into(),
            ..request.clone()
        };
        vec![request, create]
    } else {
        vec![request]
    }
}

/// Permissions the scenario does not exercise, and why they stay.
fn allowed_unused() -> BTreeMap<Triple, &'static str> {
    let mut out = BTreeMap::new();
    // The scenario deprovisions without ServiceInstances/ServiceBindings and with an empty `delete/`; these
    // are what the other paths of the same code need (exercised by tests/deprovisioning.rs).
    let outdated = "deleting outdated objects listed in module-resources/delete/ (empty in chart v0.11.10)";
    for (verb, group, resource) in [
        ("delete", "", "serviceaccounts"),
        ("delete", "", "services"),
        ("delete", "apiextensions.k8s.io", "customresourcedefinitions"),
        ("delete", "rbac.authorization.k8s.io", "clusterrolebindings"),
        ("delete", "rbac.authorization.k8s.io", "clusterroles"),
        ("delete", "rbac.authorization.k8s.io", "rolebindings"),
        ("delete", "rbac.authorization.k8s.io", "roles"),
    ] {
        out.insert(Triple::new(verb, group, resource), outdated);
    }
    // Passes read these through the view's watch-fed stores; a GET is their fallback (a store that has not
    // listed yet, or has not caught up with the manager's own write: src/reconciler/view/), which a
    // scenario on a loopback API server does not hit.
    let lagging = "read while its store lags behind the manager's own write (docs/behaviour.md#the-read-path)";
    for (group, resource) in [
        ("", "serviceaccounts"),
        ("apps", "deployments"),
        ("", "services"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("networking.k8s.io", "networkpolicies"),
        ("rbac.authorization.k8s.io", "clusterrolebindings"),
        ("rbac.authorization.k8s.io", "clusterroles"),
        ("rbac.authorization.k8s.io", "rolebindings"),
        ("rbac.authorization.k8s.io", "roles"),
        ("operator.kyma-project.io", "btpoperators"),
    ] {
        out.insert(Triple::new("get", group, resource), lagging);
    }
    let soft = "soft delete: the operand's Deployment and webhook configurations go first";
    for (verb, group, resource) in [
        ("delete", "apps", "deployments"),
        (
            "delete",
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
        ),
        (
            "delete",
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
        ),
    ] {
        out.insert(Triple::new(verb, group, resource), soft);
    }
    // Not a request: the API server asks its authorizer whether the manager may `bind` the role a binding
    // it applies references, and when it may, skips resolving the role's rules against the manager's own
    // (a binding no longer waits for its role: src/reconciler/waves.rs). Granted for the operand's two
    // roles by name.
    let bind = "authorizes applying the operand's bindings without resolving their roles (src/reconciler/waves.rs)";
    // Likewise `escalate`: asked when the manager writes one of the operand's roles, it spares the API server
    // resolving every role bound to the manager (deploy/rbac.yaml).
    let escalate = "authorizes applying the operand's roles without resolving the manager's own (deploy/rbac.yaml)";
    for resource in ["clusterroles", "roles"] {
        out.insert(Triple::new("bind", "rbac.authorization.k8s.io", resource), bind);
        out.insert(Triple::new("escalate", "rbac.authorization.k8s.io", resource), escalate);
    }
    // The manager renews with PATCH; the Go manager, still running during a switch as the same
    // ServiceAccount, renews with PUT while `kubectl apply -k deploy/` replaces its Role of this name.
    out.insert(
        Triple::new("update", "coordination.k8s.io", "leases"),
        "the Go manager's renewals during a switch (docs/upgrading.md; tests/migration.rs)",
    );
    let hard = "hard delete: delete-collection of ServiceBindings, then ServiceInstances, per namespace";
    for resource in ["servicebindings", "serviceinstances"] {
        out.insert(
            Triple::new("deletecollection", "services.cloud.sap.com", resource),
            hard,
        );
    }
    out
}

#[test]
fn the_manager_may_bind_and_escalate_the_modules_roles_and_no_other() {
    // What the API server asks its authorizer before it writes a role or a binding to one (the request
    // names the role): granted for each Role and ClusterRole of the module, by name, so that neither waits
    // for the manager's own roles to be resolved (deploy/rbac.yaml); a role of another name is refused.
    let rbac = Rbac::for_service_account(&objects_in("deploy"), NS, SERVICE_ACCOUNT);
    let module = objects_in("module-resources/apply");
    let roles: Vec<(&str, String, String)> = module
        .iter()
        .filter_map(|o| {
            let resource = match o["kind"].as_str()? {
                "ClusterRole" => "clusterroles",
                "Role" => "roles",
                _ => return None,
            };
            let namespace = o["metadata"]["namespace"].as_str().unwrap_or_default();
            Some((
                resource,
                namespace.to_string(),
                o["metadata"]["name"].as_str()?.to_string(),
            ))
        })
        .collect();
    assert_eq!(roles.len(), 2, "the module's Role and ClusterRole: {roles:?}");
    let ask = |verb: &str, resource: &str, namespace: &str, name: &str| {
        Request::new(verb, "rbac.authorization.k8s.io", resource, namespace, name)
    };
    for (resource, namespace, name) in &roles {
        for verb in ["bind", "escalate"] {
            assert!(
                rbac.allowing(&ask(verb, resource, namespace, name)).is_some(),
                "{verb} on {resource} {name}"
            );
            assert!(
                rbac.allowing(&ask(verb, resource, namespace, "cluster-admin"))
                    .is_none(),
                "{verb} on {resource} of another name"
            );
        }
    }
}

#[tokio::test]
async fn the_shipped_rbac_allows_every_request_the_manager_makes_and_nothing_unused() {
    if real_cluster().is_some() && common::requests::audit_log().is_none() {
        skip("holds each request of the manager against deploy/rbac.yaml: needs the API server's audit log (BTP_E2E_AUDIT_LOG)");
        return;
    }
    let env = Env::start_with(
        Config::default(),
        true,
        StartOptions {
            manager_user: Some(user()),
            reconcile: false,
            ..StartOptions::default()
        },
    )
    .await;
    let requests = scenario(&env).await;
    assert!(
        requests.len() > 50,
        "the log holds the manager's requests ({})",
        requests.len()
    );

    let shipped = objects_in("deploy");
    let rbac = Rbac::for_service_account(&shipped, NS, SERVICE_ACCOUNT);
    assert!(!rbac.grants.is_empty(), "deploy/ binds roles to {SERVICE_ACCOUNT}");
    let mut used: BTreeMap<(usize, Triple), String> = BTreeMap::new();
    let mut denied: BTreeSet<String> = BTreeSet::new();
    for record in &requests {
        if record.verb == "discovery" {
            if !rbac::is_discovery(&record.path) {
                denied.insert(format!("GET {} (not a discovery path)", record.path));
            }
            continue;
        }
        for request in as_requests(record) {
            match rbac.allowing(&request) {
                Some(i) => {
                    used.entry((i, rbac.used_triple(i, &request)))
                        .or_insert_with(|| request.to_string());
                }
                None => {
                    denied.insert(format!(
                        "{request}   ({} {}?{})",
                        record.method, record.path, record.query
                    ));
                }
            }
        }
    }

    // Roles and bindings the manager writes: it must hold what they grant (or `bind` the role).
    let module = objects_in("module-resources/apply");
    let find = |kind: &str, name: &str| {
        module
            .iter()
            .find(|o| o["kind"].as_str() == Some(kind) && o["metadata"]["name"].as_str() == Some(name))
    };
    // Roles before bindings (so the first reason given for a permission is the role granting it).
    let written: BTreeSet<(bool, String, String, String)> = requests
        .iter()
        .filter(|r| r.group == "rbac.authorization.k8s.io" && matches!(r.verb.as_str(), "create" | "update" | "patch"))
        .map(|r| {
            (
                r.resource.ends_with("bindings"),
                r.resource.clone(),
                r.namespace.clone(),
                r.name.clone(),
            )
        })
        .collect();
    assert!(!written.is_empty(), "the manager writes the operand's RBAC");
    let mut escalations = Vec::new();
    for (_, resource, namespace, name) in &written {
        let (role, scope, why) = match resource.as_str() {
            "clusterroles" => (
                find("ClusterRole", name),
                String::new(),
                format!("grants it in ClusterRole {name}"),
            ),
            "roles" => (
                find("Role", name),
                namespace.clone(),
                format!("grants it in Role {namespace}/{name}"),
            ),
            "clusterrolebindings" | "rolebindings" => {
                let kind = if resource == "clusterrolebindings" {
                    "ClusterRoleBinding"
                } else {
                    "RoleBinding"
                };
                let Some(binding) = find(kind, name) else { continue };
                let role_kind = binding["roleRef"]["kind"].as_str().unwrap_or("");
                let role_name = binding["roleRef"]["name"].as_str().unwrap_or("");
                (
                    find(role_kind, role_name),
                    namespace.clone(),
                    format!("binds it in {kind} {name}"),
                )
            }
            _ => continue,
        };
        let Some(role) = role else { continue };
        let missing = rbac.missing_for_role(role, &scope, |i, t| {
            used.entry((i, t.clone())).or_insert_with(|| why.clone());
        });
        escalations.extend(missing.into_iter().map(|t| format!("{t}   ({why})")));
    }

    println!(
        "\nRBAC the scenario derived ({} requests by {}):",
        requests.len(),
        user()
    );
    println!(
        "{:<45} {:<16} {:<30} {:<40} why (first use)",
        "role", "verb", "group", "resource"
    );
    for ((i, t), why) in &used {
        let group = if t.group.is_empty() { "\"\"" } else { &t.group };
        println!(
            "{:<45} {:<16} {:<30} {:<40} {why}",
            rbac.grants[*i].role, t.verb, group, t.resource
        );
    }
    let used_set: BTreeSet<(usize, Triple)> = used.keys().cloned().collect();
    let mut allowed = allowed_unused();
    if real_cluster().is_some() {
        // The audit policy of the real servers (../shared/realk8s) leaves out reads of Leases and Events.
        for verb in ["get", "list", "watch"] {
            for (group, resource) in [
                ("coordination.k8s.io", "leases"),
                ("", "events"),
                ("events.k8s.io", "events"),
            ] {
                allowed.insert(
                    Triple::new(verb, group, resource),
                    "not recorded: the real server's audit policy leaves out Lease and Event reads",
                );
            }
        }
    }
    let unused: Vec<(usize, Triple)> = rbac.all_triples().difference(&used_set).cloned().collect();
    println!("\nGranted but unused in the scenario:");
    let mut unexplained = Vec::new();
    for (i, t) in &unused {
        let note = allowed.get(t).copied().unwrap_or("NOT USED");
        println!("  {:<45} {t}   {note}", rbac.grants[*i].role);
        if !allowed.contains_key(t) {
            unexplained.push(format!("{} {t}", rbac.grants[*i].role));
        }
    }
    assert!(
        denied.is_empty(),
        "the shipped RBAC denies these requests:\n{}",
        Vec::from_iter(denied).join("\n")
    );
    assert!(
        escalations.is_empty(),
        "the manager writes RBAC granting permissions it does not hold:\n{}",
        escalations.join("\n")
    );
    assert!(
        unexplained.is_empty(),
        "deploy/ grants permissions nothing uses (remove them, or allow-list them with the reason):\n{}",
        unexplained.join("\n")
    );
    env.stop().await;
}
