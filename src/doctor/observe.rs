//! The reads behind `btp-manager doctor`: GETs and LISTs, SubjectAccessReviews, and one server-side dry-run
//! create. A read that fails becomes a failed check naming the error; nothing here decides a verdict.

use super::checks::{self, DryRun, Permission};
use super::report::{Check, Report};
use super::target::Target;
use btp_api::{names, BtpOperator, State};
use futures::StreamExt as _;
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};
use kube::ResourceExt as _;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

/// Every permission `deploy/rbac.yaml` grants the manager: its ClusterRole cluster-wide, its Role in `namespace`.
pub fn needed_permissions(namespace: &str) -> Vec<Permission> {
    // The shipped RBAC is the one table of what the manager needs.
    let documents = crate::shipped::objects(crate::shipped::RBAC).unwrap_or_default();
    let mut out = Vec::new();
    for doc in &documents {
        let (kind, name) = (
            doc["kind"].as_str().unwrap_or(""),
            doc["metadata"]["name"].as_str().unwrap_or(""),
        );
        let scope = match (kind, name) {
            ("ClusterRole", "btp-manager-manager-role") => String::new(),
            ("Role", "btp-manager-leader-election-role") => namespace.to_string(),
            ("Role", "btp-manager-api-server-endpoints-role") => {
                crate::reconciler::network_policies::API_SERVER_SLICES_NAMESPACE.to_string()
            }
            _ => continue,
        };
        let strings = |v: &serde_json::Value| -> Vec<String> {
            v.as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        for rule in doc["rules"].as_array().into_iter().flatten() {
            // A rule without resourceNames grants every object: one permission without a name.
            let mut names = strings(&rule["resourceNames"]);
            if names.is_empty() {
                names.push(String::new());
            }
            for group in strings(&rule["apiGroups"]) {
                for resource in strings(&rule["resources"]) {
                    for verb in strings(&rule["verbs"]) {
                        for object in &names {
                            out.push(Permission {
                                verb: verb.clone(),
                                group: group.clone(),
                                resource: resource.clone(),
                                namespace: scope.clone(),
                                name: object.clone(),
                                granted_by: format!("{kind} {name}"),
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Run every check.
pub async fn all(client: &kube::Client, target: &Target) -> Report {
    let mut report = Report::default();
    let ns = target.namespace.as_str();
    report.extend([version(client).await]);
    report.extend([crd(client).await]);
    report.extend([rbac(client, target).await]);
    report.extend(manager_workload(client, ns).await);
    report.extend(manager_webhooks(client, ns).await);
    report.extend(credentials_and_cr(client, ns).await);
    report
}

/// An API error in one line (the Status' code, reason and message).
fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}: {}", s.code, s.reason, s.message),
        // A failed connection says why only in its sources ("client error (Connect)": refused, TLS, DNS).
        other => {
            let mut text = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(cause) = source {
                let part = cause.to_string();
                if !text.contains(&part) {
                    text = format!("{text}: {part}");
                }
                source = cause.source();
            }
            text
        }
    }
}

fn read_failed(name: &str, what: &str, e: &kube::Error) -> Check {
    Check::fail(
        name,
        format!("reading {what} failed: {}", describe(e)),
        "check that the kubeconfig's user may read it (doctor needs get/list on what it checks)",
    )
}

async fn version(client: &kube::Client) -> Check {
    match client.apiserver_version().await {
        Ok(v) => checks::version(&v.major, &v.minor, &v.git_version),
        Err(e) => read_failed("version", "/version", &e),
    }
}

async fn crd(client: &kube::Client) -> Check {
    let expected = BtpOperator::crd()
        .map(|c| serde_json::to_value(c).unwrap_or_default())
        .unwrap_or_default();
    match Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt("btpoperators.operator.kyma-project.io")
        .await
    {
        Ok(found) => checks::crd(
            found.map(|c| serde_json::to_value(c).unwrap_or_default()).as_ref(),
            &expected,
        ),
        Err(e) => read_failed("crd", "the BtpOperator CRD", &e),
    }
}

async fn rbac(client: &kube::Client, target: &Target) -> Check {
    let user = format!("system:serviceaccount:{}:{}", target.namespace, target.service_account);
    let groups = vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{}", target.namespace),
        "system:authenticated".to_string(),
    ];
    let needed = needed_permissions(&target.namespace);
    let reviews = Api::<SubjectAccessReview>::all(client.clone());
    let answers: Vec<(Permission, Result<bool, kube::Error>)> = futures::stream::iter(needed.iter().cloned())
        .map(|p| {
            let reviews = reviews.clone();
            let (user, groups) = (user.clone(), groups.clone());
            async move {
                let (resource, subresource) = match p.resource.split_once('/') {
                    Some((r, s)) => (r.to_string(), Some(s.to_string())),
                    None => (p.resource.clone(), None),
                };
                let review = SubjectAccessReview {
                    spec: SubjectAccessReviewSpec {
                        user: Some(user),
                        groups: Some(groups),
                        resource_attributes: Some(ResourceAttributes {
                            verb: Some(p.verb.clone()),
                            group: Some(p.group.clone()),
                            resource: Some(resource),
                            subresource,
                            namespace: (!p.namespace.is_empty()).then(|| p.namespace.clone()),
                            name: (!p.name.is_empty()).then(|| p.name.clone()),
                            ..ResourceAttributes::default()
                        }),
                        ..SubjectAccessReviewSpec::default()
                    },
                    ..SubjectAccessReview::default()
                };
                let answer = reviews
                    .create(&PostParams::default(), &review)
                    .await
                    .map(|r| r.status.is_some_and(|s| s.allowed));
                (p, answer)
            }
        })
        .buffered(8)
        .collect()
        .await;
    if let Some((_, Err(e))) = answers.iter().find(|(_, a)| a.is_err()) {
        return Check::fail(
            "rbac",
            format!(
                "asking the API server about {user}'s permissions failed: {}",
                describe(e)
            ),
            "doctor needs create on subjectaccessreviews.authorization.k8s.io",
        );
    }
    let denied: Vec<Permission> = answers
        .into_iter()
        .filter(|(_, a)| matches!(a, Ok(false)))
        .map(|(p, _)| p)
        .collect();
    checks::rbac(&user, needed.len(), &denied)
}

async fn manager_workload(client: &kube::Client, ns: &str) -> Vec<Check> {
    const DEPLOYMENT: &str = "btp-manager-controller-manager";
    let mut pod_labels = None;
    let deployment = match Api::<Deployment>::namespaced(client.clone(), ns)
        .get_opt(DEPLOYMENT)
        .await
    {
        Ok(d) => {
            pod_labels = d
                .as_ref()
                .and_then(|d| d.spec.as_ref())
                .and_then(|s| s.template.metadata.as_ref())
                .and_then(|m| m.labels.clone());
            let desired = d
                .as_ref()
                .and_then(|d| d.spec.as_ref())
                .and_then(|s| s.replicas)
                .unwrap_or(1);
            let ready = d
                .as_ref()
                .and_then(|d| d.status.as_ref())
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0);
            checks::deployment(DEPLOYMENT, d.is_some(), desired, ready)
        }
        Err(e) => read_failed("deployment", "the manager's Deployment", &e),
    };
    let lease = match Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(crate::manager::LEADER_LEASE)
        .await
    {
        Ok(lease) => {
            let spec = lease.and_then(|l| l.spec);
            let holder = spec.as_ref().and_then(|s| s.holder_identity.clone());
            let renewed = spec
                .as_ref()
                .and_then(|s| s.renew_time.as_ref())
                .map(|t| SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(t.0.as_second()).unwrap_or(0)));
            let duration = spec
                .as_ref()
                .and_then(|s| s.lease_duration_seconds)
                .map_or(crate::manager::DEFAULT_LEASE_DURATION, |s| {
                    Duration::from_secs(u64::try_from(s).unwrap_or(0))
                });
            // Renewal times are whole seconds here: a second of slack.
            checks::lease(
                holder.as_deref(),
                renewed,
                duration + Duration::from_secs(1),
                SystemTime::now(),
            )
        }
        Err(e) => read_failed("leader", "the leader-election Lease", &e),
    };
    let mut out = vec![deployment, lease];
    if let Some(labels) = pod_labels {
        out.push(api_server_egress(client, ns, &labels).await);
    }
    out
}

fn values<T: serde::Serialize>(items: Vec<T>) -> Vec<serde_json::Value> {
    items.into_iter().filter_map(|i| serde_json::to_value(i).ok()).collect()
}

/// Whether the chart namespace's NetworkPolicies let the manager's pod (labelled `labels`) reach the API
/// server's endpoints.
async fn api_server_egress(client: &kube::Client, ns: &str, labels: &BTreeMap<String, String>) -> Check {
    use crate::reconciler::network_policies::{API_SERVER_SLICES_NAMESPACE, API_SERVER_SLICES_SELECTOR};
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let policies = match Api::<NetworkPolicy>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => return read_failed("apiserver-egress", "the network policies", &e),
    };
    let slices = match Api::<EndpointSlice>::namespaced(client.clone(), API_SERVER_SLICES_NAMESPACE)
        .list(&ListParams::default().labels(API_SERVER_SLICES_SELECTOR))
        .await
    {
        Ok(list) => list.items,
        Err(e) => return read_failed("apiserver-egress", "the default/kubernetes EndpointSlices", &e),
    };
    let endpoints = super::egress::endpoints(&values(slices));
    let blocked = super::egress::blocked(&values(policies), labels, &endpoints);
    checks::api_server_egress(&blocked, endpoints.len())
}

/// The caBundle of every webhook of the two configurations named (missing configurations are left out).
async fn bundles(
    client: &kube::Client,
    validating: &str,
    mutating: &str,
) -> Result<Vec<(String, Vec<u8>)>, kube::Error> {
    let mut out = Vec::new();
    if let Some(c) = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt(validating)
        .await?
    {
        for w in c.webhooks.unwrap_or_default() {
            out.push((w.name, w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()));
        }
    }
    if let Some(c) = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt(mutating)
        .await?
    {
        for w in c.webhooks.unwrap_or_default() {
            out.push((w.name, w.client_config.ca_bundle.map(|b| b.0).unwrap_or_default()));
        }
    }
    Ok(out)
}

fn not_after(pem: Option<&[u8]>) -> Option<SystemTime> {
    pem.and_then(|p| btp_certs::parse_cert_pem(p).ok()).map(|i| i.not_after)
}

async fn manager_webhooks(client: &kube::Client, ns: &str) -> Vec<Check> {
    const FIX: &str =
        "delete the Secret btp-manager-webhook-cert and restart the manager's pods: it issues a new CA and \
                       republishes it (docs/troubleshooting.md#certificate-errors)";
    let secret = match Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(names::webhook::CERT_SECRET_NAME)
        .await
    {
        Ok(s) => s,
        Err(e) => return vec![read_failed("webhook-certs", "the manager's certificate Secret", &e)],
    };
    let stored =
        btp_certs::rotation::Stored::from_data(&secret.as_ref().map(crate::objects::secret_data).unwrap_or_default());
    let leaf = stored.leaf.as_ref().map(|l| l.cert_pem.as_bytes());
    let ca = stored.ca.as_ref().map(|c| c.cert_pem.as_bytes());
    let now = SystemTime::now();
    let mut out = vec![
        checks::expiry("manager-ca", "the manager's webhook CA", not_after(ca), now, FIX),
        checks::expiry(
            "manager-leaf",
            "the manager's serving certificate",
            not_after(leaf),
            now,
            FIX,
        ),
    ];
    out.push(
        match bundles(
            client,
            names::webhook::VALIDATING_CONFIGURATION,
            names::webhook::MUTATING_CONFIGURATION,
        )
        .await
        {
            Ok(b) => checks::ca_bundles("webhooks", "the manager's webhook configurations", &b, leaf, FIX),
            Err(e) => read_failed("webhooks", "the manager's webhook configurations", &e),
        },
    );
    // End to end: the API server calls our validating webhook, which refuses a misnamed BtpOperator.
    let result = admission_probe(client).await;
    out.push(checks::admission(&result));
    out
}

/// The probe of admission end to end ([`checks::ADMISSION_PROBE_NAME`]): a server-side dry-run create of a
/// misnamed BtpOperator, and what the API server answered. Nothing is stored.
pub async fn admission_probe(client: &kube::Client) -> DryRun {
    let mut probe = BtpOperator::new(checks::ADMISSION_PROBE_NAME);
    probe.metadata.namespace = Some(checks::ADMISSION_PROBE_NAMESPACE.to_string());
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match Api::<BtpOperator>::namespaced(client.clone(), checks::ADMISSION_PROBE_NAMESPACE)
        .create(&dry_run, &probe)
        .await
    {
        Ok(_) => DryRun::Allowed,
        Err(kube::Error::Api(s)) => DryRun::Refused(s.code, s.message),
        Err(e) => DryRun::NoAnswer(describe(&e)),
    }
}

async fn credentials_and_cr(client: &kube::Client, ns: &str) -> Vec<Check> {
    let mut out = Vec::new();
    let secret = match Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(names::REQUIRED_SECRET_NAME)
        .await
    {
        Ok(s) => s,
        Err(e) => return vec![read_failed("secret", "the credentials Secret", &e)],
    };
    let data = secret.as_ref().map(crate::objects::secret_data).unwrap_or_default();
    let missing: Vec<&str> = ["clientid", "clientsecret", "sm_url", "tokenurl", "cluster_id"]
        .into_iter()
        .filter(|k| data.get(*k).is_none_or(|v| v.iter().all(u8::is_ascii_whitespace)))
        .collect();
    let labelled = secret
        .as_ref()
        .is_some_and(|s| names::visible_to_manager(s.metadata.labels.as_ref()));
    out.push(checks::secret(secret.is_some(), labelled, &missing));

    let cr = match Api::<BtpOperator>::namespaced(client.clone(), names::KYMA_SYSTEM)
        .get_opt(names::BTP_OPERATOR_NAME)
        .await
    {
        Ok(cr) => cr,
        Err(e) => {
            out.push(read_failed("btpoperator", "kyma-system/btpoperator", &e));
            return out;
        }
    };
    let Some(cr) = cr else {
        out.push(checks::cr(None));
        return out;
    };
    let status = cr.status.as_ref();
    let ready = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"));
    let state: Option<State> = status.map(|s| s.state);
    out.push(checks::cr(Some((
        state,
        ready.map(|c| c.reason.as_str()),
        ready.map(|c| c.message.as_str()),
    ))));
    if cr.metadata.deletion_timestamp.is_some() {
        return out;
    }
    let credentials = status.and_then(|s| s.conditions.iter().find(|c| c.type_ == btp_api::CREDENTIALS_VALID));
    out.push(checks::credentials(
        credentials.map(|c| (c.status, c.reason.as_str(), c.message.as_str())),
    ));
    out.extend(operand(client, ns, &cr).await);
    out
}

/// The operand, once the BtpOperator exists: its Deployment, its certificates and their caBundles, its
/// network policies.
async fn operand(client: &kube::Client, ns: &str, cr: &BtpOperator) -> Vec<Check> {
    use btp_certs::operand as op;
    const FIX: &str = "delete the Secret ca-server-cert and annotate the BtpOperator with \
                       operator.kyma-project.io/operation=reconcile: the manager issues new ones";
    let mut out = Vec::new();
    out.push(
        match Api::<Deployment>::namespaced(client.clone(), ns)
            .get_opt(names::operand::DEPLOYMENT)
            .await
        {
            Ok(d) => {
                let available = d
                    .as_ref()
                    .and_then(|d| d.status.as_ref())
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Available" && c.status == "True"));
                checks::operand(d.is_some(), available)
            }
            Err(e) => read_failed("operand", "the operand's Deployment", &e),
        },
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    let read = |name: &'static str| {
        let secrets = secrets.clone();
        async move {
            secrets
                .get_opt(name)
                .await
                .map(|s| s.as_ref().map(crate::objects::secret_data))
        }
    };
    let (ca, leaf) = match (read(op::CA_SECRET).await, read(op::WEBHOOK_SECRET).await) {
        (Ok(ca), Ok(leaf)) => (ca, leaf),
        (Err(e), _) | (_, Err(e)) => {
            out.push(read_failed("operand-certs", "the operand's certificate Secrets", &e));
            return out;
        }
    };
    let pem = |data: &Option<BTreeMap<String, Vec<u8>>>, key: &str| data.as_ref().and_then(|d| d.get(key).cloned());
    let (ca_pem, leaf_pem) = (pem(&ca, op::keys::CA_CRT), pem(&leaf, op::keys::TLS_CRT));
    let now = SystemTime::now();
    out.push(checks::expiry(
        "operand-ca",
        "the operand's webhook CA",
        not_after(ca_pem.as_deref()),
        now,
        FIX,
    ));
    out.push(checks::expiry(
        "operand-leaf",
        "the operand's serving certificate",
        not_after(leaf_pem.as_deref()),
        now,
        FIX,
    ));
    out.push(
        match bundles(
            client,
            op::VALIDATING_WEBHOOK_CONFIGURATION,
            op::MUTATING_WEBHOOK_CONFIGURATION,
        )
        .await
        {
            Ok(b) => checks::ca_bundles(
                "operand-hooks",
                "the operand's webhook configurations",
                &b,
                leaf_pem.as_deref(),
                FIX,
            ),
            Err(e) => read_failed("operand-hooks", "the operand's webhook configurations", &e),
        },
    );
    let disabled = !crate::reconciler::network_policies::enabled(cr.annotations());
    let expected = crate::reconciler::network_policies::load(std::path::Path::new("")).map_or(0, |p| p.len());
    let params = ListParams::default().labels(&crate::reconciler::network_policies::managed_selector());
    out.push(
        match Api::<NetworkPolicy>::namespaced(client.clone(), ns)
            .list_metadata(&params)
            .await
        {
            Ok(list) => checks::network_policies(list.items.len(), expected, disabled),
            Err(e) => read_failed("netpol", "the network policies", &e),
        },
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_permission_table_is_the_shipped_rbac() {
        let needed = needed_permissions("kyma-system");
        assert!(needed.len() > 50, "{}", needed.len());
        assert!(needed
            .iter()
            .any(|p| p.verb == "create" && p.resource == "customresourcedefinitions" && p.namespace.is_empty()));
        assert!(needed
            .iter()
            .any(|p| p.verb == "patch" && p.resource == "leases" && p.namespace == "kyma-system"));
        // A rule with resourceNames grants those objects only.
        assert!(needed
            .iter()
            .any(|p| p.verb == "bind" && p.resource == "clusterroles" && p.name == "sap-btp-operator-manager-role"));
        assert!(needed.iter().filter(|p| p.verb == "bind").all(|p| !p.name.is_empty()));
        // The aggregated user roles are not the manager's.
        assert!(needed.iter().all(|p| !p.granted_by.contains("kyma-btp-operator")));
    }
}
