//! The provisioning benchmark's role-write mode (`BTP_BENCH_MODE=real-roles`): what one real API server of
//! `../shared/realk8s` takes to write the operand's Role and ClusterRole as the manager, with the shipped RBAC
//! (`bind` and `escalate` on those two roles by name, deploy/rbac.yaml) and with `escalate` taken out of it.
//!
//! Without `escalate` the API server checks that the writer holds every permission the role grants, which
//! means resolving every role bound to the writer first; with it, that check is skipped. The install is what
//! the real mode installs (`deploy/` but the webhook configurations); then, for each variant, each role is
//! created by server-side apply as the manager's ServiceAccount and deleted again (by the admin),
//! `BTP_BENCH_ROLE_WRITES` times (default 15), one at a time on an otherwise idle server. It prints the
//! median and the slowest create, and the API server's CPU per create and delete.

use super::real::{admin_client, install_deploy, manager_config};
use super::{env_usize, ms};
use crate::eventually::try_eventually;
use crate::realk8s::RealK8s;
use crate::shipped::{self, deploy_objects};
use crate::summary::Summary;
use btp_manager::manifests::module_resources;
use btp_manager::reconciler::cluster::api_resource;
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The module's Roles and ClusterRoles, as the manager applies them.
fn module_roles() -> Result<Vec<Value>, String> {
    let module = module_resources(std::path::Path::new("")).map_err(|e| format!("the module resources: {e}"))?;
    Ok(module
        .apply
        .into_iter()
        .filter(|o| matches!(o["kind"].as_str(), Some("Role" | "ClusterRole")))
        .collect())
}

/// Apply `deploy/rbac.yaml` again (as the install did) with `escalate` taken out of every rule, and wait until
/// the API server's authorizer no longer grants it: a SubjectAccessReview of the manager for `role`.
async fn without_escalate(admin: &kube::Client, role: &Value) -> Result<(), String> {
    let mut rbac = deploy_objects("rbac.yaml");
    // (`get_mut`: indexing a JSON object mutably would add a `rules: null` to the bindings.)
    for rule in rbac
        .iter_mut()
        .filter_map(|o| o.get_mut("rules").and_then(Value::as_array_mut))
        .flatten()
    {
        if let Some(verbs) = rule.get_mut("verbs").and_then(Value::as_array_mut) {
            verbs.retain(|v| v != "escalate");
        }
    }
    shipped::apply(admin, &rbac).await;
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": {"user": shipped::manager_user(), "groups": ["system:serviceaccounts", "system:authenticated"],
                 "resourceAttributes": {"group": "rbac.authorization.k8s.io", "verb": "escalate",
                     "resource": if role["kind"] == "Role" { "roles" } else { "clusterroles" },
                     "namespace": role["metadata"]["namespace"].as_str().unwrap_or_default(),
                     "name": role["metadata"]["name"]}}
    }))
    .map_err(|e| e.to_string())?;
    let reviews = Api::<SubjectAccessReview>::all(admin.clone());
    try_eventually(Duration::from_secs(10), || async {
        let answer = reviews.create(&Default::default(), &review).await;
        answer.is_ok_and(|a| !a.status.is_some_and(|s| s.allowed))
    })
    .await
    .map_err(|()| "the API server still grants escalate after the ClusterRole lost it".to_string())
}

/// Create and delete `role` `n` times; the creates' durations, and the API server's CPU (seconds) meanwhile.
async fn writes(
    up: &crate::realk8s::Up,
    admin: &kube::Client,
    manager: &kube::Client,
    role: &Value,
    n: usize,
) -> Result<(Vec<Duration>, f64), String> {
    let name = role["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let apiserver_cpu = || {
        up.cpu()
            .into_iter()
            .find(|(component, _)| *component == "kube-apiserver")
            .map_or(0.0, |(_, cpu)| cpu)
    };
    let resource = api_resource(
        role["apiVersion"].as_str().unwrap_or_default(),
        role["kind"].as_str().unwrap_or_default(),
    );
    let roles: Api<DynamicObject> = match role["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(admin.clone(), namespace, &resource),
        None => Api::all_with(admin.clone(), &resource),
    };
    let before = apiserver_cpu();
    let mut creates = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        btp_manager::shipped::apply(manager, std::slice::from_ref(role), "btp-manager")
            .await
            .map_err(|e| format!("as the manager: {e}"))?;
        creates.push(started.elapsed());
        roles
            .delete(&name, &DeleteParams::default())
            .await
            .map_err(|e| format!("deleting {name}: {e}"))?;
    }
    Ok((creates, apiserver_cpu() - before))
}

pub async fn run(summary: &mut Summary) -> Result<(), String> {
    let Some(k8s) = RealK8s::from_env_or_report(summary, "provisioning/real-roles", "role writes on a real API server")
    else {
        return Ok(());
    };
    let n = env_usize("BTP_BENCH_ROLE_WRITES", 15).max(1);
    let up = k8s.fresh()?;
    let (admin, admin_config) = admin_client(&up).await?;
    install_deploy(&admin).await;
    let manager = kube::Client::try_from(manager_config(&admin, &admin_config).await).map_err(|e| e.to_string())?;
    let roles = module_roles()?;
    let Some(first) = roles.first() else {
        return Err("the module has no Role or ClusterRole".into());
    };
    for variant in ["shipped RBAC (bind, escalate)", "without escalate"] {
        if variant == "without escalate" {
            without_escalate(&admin, first).await?;
        }
        for role in &roles {
            let (mut creates, cpu) = writes(&up, &admin, &manager, role, n).await?;
            creates.sort();
            let label = format!(
                "{} {} ({variant}, v{}, n={n})",
                role["kind"].as_str().unwrap_or_default(),
                role["metadata"]["name"].as_str().unwrap_or_default(),
                k8s.version
            );
            let median = creates[creates.len() / 2];
            let slowest = creates[creates.len() - 1];
            let per_write = Duration::from_secs_f64(cpu / n as f64);
            println!(
                "provisioning/real-roles {label}: create median {}, max {}; kube-apiserver CPU {} per create and delete",
                ms(median),
                ms(slowest),
                ms(per_write)
            );
            summary.figure(
                &format!("role create as the manager: {label}"),
                &format!("median {} (max {})", ms(median), ms(slowest)),
            );
        }
    }
    Ok(())
}
