//! The manager's own webhook certificates in the cluster: keep the Secret settled, serve its leaf, and
//! publish its CA bundle in the manager's webhook configurations.
//!
//! One writer (docs/behaviour.md#who-writes-what): only the leading replica settles the Secret and applies
//! the configurations ([`WebhookCerts::settle`], [`WebhookCerts::publish`]). Every replica serves the leaf
//! the Secret holds and swaps it when the Secret changes ([`WebhookCerts::follow`]); a follower whose own
//! settings would issue or register something else says so once in its log and writes nothing. The one
//! exception are the first writes ([`crate::first_writes`]): where our webhook configurations are registered
//! without a caBundle, a follower creates the certificate Secret if none exists and adds the caBundle where a
//! webhook has none, so that admission works before any replica of ours leads. Readiness follows whether
//! the served leaf is trusted by the registered caBundle ([`trusted_by`]).
//!
//! What to do is decided by `btp_certs::rotation` (pure); this module only reads and writes the API.
//! Every write of the Secret is a create-if-absent or an update carrying the `resourceVersion` it read,
//! so replicas starting together converge on one CA: the loser of a race re-reads and adopts the winner's.
//!
//! The webhook configurations are watched too: a wiped or foreign `caBundle` (an edit by hand, a GitOps
//! re-sync of `deploy/webhooks.yaml`) is put back at once. They are compared before applying, so a
//! configuration already as wanted is not written (Kubernetes 1.24 re-writes an unchanged one on every
//! server-side apply, which would wake the watch again).

use crate::first_writes::{without_ca_bundle, FirstWrites};
use crate::reconciler::metrics::{Certificate, CertificateExpiry};
use btp_api::names;
use btp_certs::rotation::{self, Policy, Step, Stored};
use btp_webhooks::manifests::{is_match_conditions_schema_error, WebhookManifests};
use btp_webhooks::tls::SwappableCert;
use futures::{FutureExt as _, StreamExt as _};
use k8s_openapi::api::admissionregistration::v1::{MutatingWebhookConfiguration, ValidatingWebhookConfiguration};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// Why a round failed.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was attempted.
        action: String,
        /// The error.
        source: kube::Error,
    },
    /// Generating or reading a certificate failed.
    #[error("certificate: {0}")]
    Cert(#[from] btp_certs::CertError),
    /// The settled Secret holds no usable serving certificate.
    #[error("serving certificate not loadable: {0}")]
    Tls(#[from] btp_webhooks::tls::TlsError),
    /// Other replicas kept winning the write race.
    #[error("gave up after {0} conflicting writes of the certificate Secret")]
    Conflicts(usize),
    /// A patch could not be built.
    #[error("building a patch: {0}")]
    Patch(#[from] serde_json::Error),
    /// Certificate generation task failed.
    #[error("certificate generation task: {0}")]
    Join(#[from] tokio::task::JoinError),
}

fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> CertsError {
    let action = action.into();
    move |source| CertsError::Api { action, source }
}

/// Keeps the webhook certificate Secret, the served certificate and the caBundles in step.
pub struct WebhookCerts {
    client: kube::Client,
    secrets: Api<Secret>,
    secret_name: String,
    policy: Policy,
    manifests: WebhookManifests,
    /// Set when the API server refused `matchConditions` (older than its `/version` claimed).
    without_match_conditions: AtomicBool,
    /// Where the served CA's and leaf's expiry go (alerts).
    expiry: Option<CertificateExpiry>,
    /// What a follower last said about its own settings (said once per difference).
    noted: std::sync::Mutex<Option<String>>,
    /// The first writes a follower may make (None: a follower writes nothing at all).
    first_writes: Option<FirstWrites>,
    /// The namespace of the certificate Secret.
    namespace: String,
}

const MAX_CONFLICTS: usize = 8;

impl WebhookCerts {
    /// Manage Secret `secret_name` in `namespace`; publish into configurations built from `manifests`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        secret_name: &str,
        policy: Policy,
        manifests: WebhookManifests,
    ) -> Self {
        Self {
            secrets: Api::namespaced(client.clone(), namespace),
            client,
            secret_name: secret_name.into(),
            policy,
            manifests,
            without_match_conditions: AtomicBool::new(false),
            expiry: None,
            noted: std::sync::Mutex::new(None),
            first_writes: None,
            namespace: namespace.to_string(),
        }
    }

    /// Let a follower make the first writes where our configurations wait for a caBundle
    /// ([`crate::first_writes`]).
    pub fn with_first_writes(mut self, first_writes: FirstWrites) -> Self {
        self.first_writes = Some(first_writes);
        self
    }

    /// Export the expiry of the CA and the serving certificate in use
    /// (`btpmanager_certificate_expiration_timestamp_seconds`).
    pub fn with_expiry_metrics(mut self, expiry: CertificateExpiry) -> Self {
        self.expiry = Some(expiry);
        self
    }

    fn secret(&self, stored: &Stored, existing: Option<&Secret>) -> Secret {
        // The manager's own labels, keeping labels others added; never the module-resource pair, which
        // would make deprovisioning remove the manager's certificate.
        let mut labels: BTreeMap<String, String> = existing
            .and_then(|s| s.metadata.labels.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, v)| !(k == names::MANAGED_BY_LABEL && v == names::MANAGED_BY_BTP_MANAGER))
            .collect();
        labels.extend(names::manager_labels());
        Secret {
            metadata: ObjectMeta {
                name: Some(self.secret_name.clone()),
                resource_version: existing.and_then(|s| s.metadata.resource_version.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            type_: Some("Opaque".into()),
            data: Some(stored.to_data().into_iter().map(|(k, v)| (k, ByteString(v))).collect()),
            ..Secret::default()
        }
    }

    /// One round: read the Secret, settle it, write it back if anything changed. Returns what is stored.
    pub async fn settle(&self) -> Result<Stored, CertsError> {
        for _ in 0..MAX_CONFLICTS {
            let existing = self
                .secrets
                .get_opt(&self.secret_name)
                .await
                .map_err(api_err("reading the webhook certificate Secret"))?;
            let stored = existing
                .as_ref()
                .map(|s| Stored::from_data(&crate::objects::secret_data(s)))
                .unwrap_or_default();
            let policy = self.policy.clone();
            let current = stored.clone();
            // RSA key generation can take seconds: keep it off the async workers.
            let (next, steps) =
                tokio::task::spawn_blocking(move || rotation::settle(&current, SystemTime::now(), &policy)).await??;
            // A Secret written by an older version carries the module-resource labels: relabel it.
            let relabel = existing
                .as_ref()
                .is_some_and(|s| names::is_module_resource(s.metadata.labels.as_ref()));
            if steps.is_empty() && !relabel {
                return Ok(stored);
            }
            let result = match &existing {
                None => {
                    self.secrets
                        .create(&PostParams::default(), &self.secret(&next, None))
                        .await
                }
                Some(s) => {
                    self.secrets
                        .replace(&self.secret_name, &PostParams::default(), &self.secret(&next, Some(s)))
                        .await
                }
            };
            match result {
                Ok(_) => {
                    for step in &steps {
                        tracing::info!(secret = %self.secret_name, step = %describe(step), "webhook certificate updated");
                    }
                    return Ok(next);
                }
                // Another replica wrote first: read its result and decide again.
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(api_err("writing the webhook certificate Secret")(e)),
            }
        }
        Err(CertsError::Conflicts(MAX_CONFLICTS))
    }

    /// Serve the stored leaf (swapped only when it changed).
    fn serve(&self, stored: &Stored, cert: &SwappableCert) -> Result<(), CertsError> {
        let leaf = stored.leaf.as_ref().ok_or(btp_certs::CertError::NoCertificate)?;
        let next = btp_webhooks::tls::certified_key(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes())?;
        if cert.current().and_then(|c| c.cert.first().cloned()).as_ref() != next.cert.first() {
            cert.set(next);
            tracing::info!("serving a new webhook certificate");
        }
        if let Some(expiry) = &self.expiry {
            expiry.observe_pem(Certificate::ManagerLeaf, leaf.cert_pem.as_bytes());
            match &stored.ca {
                Some(ca) => expiry.observe_pem(Certificate::ManagerCa, ca.cert_pem.as_bytes()),
                None => expiry.forget(Certificate::ManagerCa),
            }
        }
        Ok(())
    }

    /// The configurations this replica would register for `stored`.
    fn wanted(&self, stored: &Stored) -> WebhookManifests {
        let mut manifests = WebhookManifests {
            ca_bundle: stored.ca_bundle().into_bytes(),
            ..self.manifests.clone()
        };
        if self.without_match_conditions.load(Ordering::Relaxed) {
            manifests.match_conditions = false;
        }
        manifests
    }

    /// As a follower: serve what the Secret holds, and say once when this replica's own settings would
    /// issue or register something else. Writes nothing. Returns whether admission through this replica
    /// works: the served leaf is trusted by the caBundle of both registered configurations.
    pub async fn follow(&self, cert: &SwappableCert) -> Result<bool, CertsError> {
        let mut existing = self
            .secrets
            .get_opt(&self.secret_name)
            .await
            .map_err(api_err("reading the webhook certificate Secret"))?;
        let mut validating =
            read_json::<ValidatingWebhookConfiguration>(&self.client, names::webhook::VALIDATING_CONFIGURATION).await?;
        let mut mutating =
            read_json::<MutatingWebhookConfiguration>(&self.client, names::webhook::MUTATING_CONFIGURATION).await?;
        let waiting = [&validating, &mutating]
            .iter()
            .any(|c| c.as_ref().is_some_and(|c| !without_ca_bundle(c).is_empty()));
        if let (None, Some(first), true) = (&existing, &self.first_writes, waiting) {
            existing = Some(self.issue_first(first).await?);
        }
        let Some(existing) = existing else {
            self.note(Some(
                "no webhook certificate Secret yet: waiting for the leader to issue it".into(),
            ));
            return Ok(false);
        };
        let stored = Stored::from_data(&crate::objects::secret_data(&existing));
        if stored.leaf.is_none() {
            return Ok(false);
        }
        self.serve(&stored, cert)?;
        if let Some(first) = &self.first_writes {
            use base64::Engine as _;
            let bundle = base64::engine::general_purpose::STANDARD.encode(stored.ca_bundle());
            if let Some(current) = validating.as_ref().filter(|c| !without_ca_bundle(c).is_empty()) {
                let added = first
                    .add_ca_bundles::<ValidatingWebhookConfiguration>(
                        names::webhook::VALIDATING_CONFIGURATION,
                        current,
                        &bundle,
                    )
                    .await
                    .map_err(api_err(
                        "adding the first caBundle to the ValidatingWebhookConfiguration",
                    ))?;
                validating = match added {
                    Some(stored) => {
                        tracing::info!(
                            "the first caBundle added to the validating webhook configuration (it had none)"
                        );
                        Some(stored)
                    }
                    // Another replica (or the leader) wrote it first: what is stored now.
                    None => {
                        read_json::<ValidatingWebhookConfiguration>(
                            &self.client,
                            names::webhook::VALIDATING_CONFIGURATION,
                        )
                        .await?
                    }
                };
            }
            if let Some(current) = mutating.as_ref().filter(|c| !without_ca_bundle(c).is_empty()) {
                let added = first
                    .add_ca_bundles::<MutatingWebhookConfiguration>(
                        names::webhook::MUTATING_CONFIGURATION,
                        current,
                        &bundle,
                    )
                    .await
                    .map_err(api_err("adding the first caBundle to the MutatingWebhookConfiguration"))?;
                mutating = match added {
                    Some(stored) => {
                        tracing::info!("the first caBundle added to the mutating webhook configuration (it had none)");
                        Some(stored)
                    }
                    // Another replica (or the leader) wrote it first: what is stored now.
                    None => {
                        read_json::<MutatingWebhookConfiguration>(&self.client, names::webhook::MUTATING_CONFIGURATION)
                            .await?
                    }
                };
            }
        }
        let wanted = self.wanted(&stored);
        let step = rotation::decide(&stored, SystemTime::now(), &self.policy);
        let differs = !matches!(step, Step::Keep)
            || !validating
                .as_ref()
                .is_some_and(|c| contains(c, &json_of(&wanted.validating())))
            || !mutating
                .as_ref()
                .is_some_and(|c| contains(c, &json_of(&wanted.mutating())));
        self.note(differs.then(|| match step {
            Step::Keep => "this replica would register the webhook configurations differently".to_string(),
            step => format!(
                "this replica's settings would change the webhook certificate ({})",
                describe(&step)
            ),
        }));
        let leaf = stored.leaf.as_ref().map(|l| l.cert_pem.as_bytes()).unwrap_or_default();
        Ok([validating, mutating]
            .iter()
            .all(|c| c.as_ref().is_some_and(|c| trusted_by(leaf, c))))
    }

    /// The first certificate, where none is stored and our configurations wait for a caBundle: created unless
    /// another replica created one first; either way, what is stored now.
    async fn issue_first(&self, first: &FirstWrites) -> Result<Secret, CertsError> {
        let policy = self.policy.clone();
        let (next, _) =
            tokio::task::spawn_blocking(move || rotation::settle(&Stored::default(), SystemTime::now(), &policy))
                .await??;
        let created = first
            .create_secret(&self.namespace, &self.secret(&next, None))
            .await
            .map_err(api_err("creating the first webhook certificate Secret"))?;
        if created {
            tracing::info!(
                secret = %self.secret_name,
                "issued the first webhook certificate: none was stored and no replica of ours leads yet"
            );
        }
        self.secrets
            .get(&self.secret_name)
            .await
            .map_err(api_err("reading the webhook certificate Secret"))
    }

    /// Say `what` once (again only after it changed); nothing when there is nothing to say.
    fn note(&self, what: Option<String>) {
        let mut noted = crate::sync::lock(&self.noted);
        if *noted != what {
            if let Some(what) = &what {
                tracing::info!(
                    "{what}; the leading replica decides, this one serves what is stored and writes nothing"
                );
            }
            *noted = what;
        }
    }

    /// Serve the stored leaf and publish the stored CA bundle in both webhook configurations (the leader's).
    pub async fn publish(&self, stored: &Stored, cert: &SwappableCert) -> Result<(), CertsError> {
        self.serve(stored, cert)?;
        let mut manifests = self.wanted(stored);
        match apply_configurations(&self.client, &manifests).await {
            Err(CertsError::Api { source, .. })
                if manifests.match_conditions && is_match_conditions_schema_error(&source.to_string()) =>
            {
                tracing::warn!(
                    "the API server does not know matchConditions (Kubernetes before 1.28): registering the \
                     webhooks without them; the handlers still only act on the required Secret"
                );
                self.without_match_conditions.store(true, Ordering::Relaxed);
                manifests.match_conditions = false;
                apply_configurations(&self.client, &manifests).await
            }
            other => other,
        }
    }

    /// Keep everything in step until `shutdown`: while `leading`, settle the Secret and publish it; always,
    /// serve what is stored and tell `ready` whether admission through this replica works. Wakes on any
    /// change of the Secret or the configurations, on a change of leadership and when the next renewal is
    /// due; retries failures with backoff.
    pub async fn run(
        self,
        cert: Arc<SwappableCert>,
        mut leading: tokio::sync::watch::Receiver<bool>,
        ready: crate::ops::Readiness,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let config = watcher::Config::default().fields(&format!("metadata.name={}", self.secret_name));
        // With backoff: a lost API server must not turn this into a busy loop.
        let secret_changes = watcher(self.secrets.clone(), config)
            .backoff(crate::watch_backoff::WatchBackoff::default())
            .map(|e| e.map(|_| ()));
        // Our webhook configurations: a wiped or foreign caBundle is put back at once.
        let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        let validating = watcher(
            Api::<ValidatingWebhookConfiguration>::all(self.client.clone()),
            by_name(names::webhook::VALIDATING_CONFIGURATION),
        )
        .backoff(crate::watch_backoff::WatchBackoff::default())
        .map(|e| e.map(|_| ()));
        let mutating = watcher(
            Api::<MutatingWebhookConfiguration>::all(self.client.clone()),
            by_name(names::webhook::MUTATING_CONFIGURATION),
        )
        .backoff(crate::watch_backoff::WatchBackoff::default())
        .map(|e| e.map(|_| ()));
        let mut changes =
            futures::stream::select(secret_changes, futures::stream::select(validating, mutating)).boxed();
        let mut failures = 0u32;
        tokio::pin!(shutdown);
        loop {
            let leads = *leading.borrow_and_update();
            let round = async {
                if leads {
                    match self.settle().await {
                        Ok(stored) => match self.publish(&stored, &cert).await {
                            Ok(()) => {
                                failures = 0;
                                let leaf = stored.leaf.as_ref().map(|l| l.cert_pem.as_bytes()).unwrap_or_default();
                                ready.set_admission(bundle_trusts(&stored.ca_bundle(), leaf));
                                until_next_check(&stored, &self.policy)
                            }
                            Err(e) => backoff(&mut failures, &e),
                        },
                        Err(e) => backoff(&mut failures, &e),
                    }
                } else {
                    match self.follow(&cert).await {
                        Ok(works) => {
                            failures = 0;
                            ready.set_admission(works);
                            // Every change wakes a follower; this only bounds what a missed event costs.
                            Duration::from_secs(3600)
                        }
                        Err(e) => backoff(&mut failures, &e),
                    }
                }
            };
            // A shutdown also ends a round in flight: a stopped manager must not register its webhooks
            // again (a configuration written after the stop would point the next manager's requests at a
            // closed port). So does the end of leadership: a leader's round stops with its term (its
            // writes would be refused by the fence; a round waiting on an unanswered request must not
            // hold the keeper's next round as a follower).
            let mut lost = leading.clone();
            let wait = tokio::select! {
                () = &mut shutdown => return,
                // (A closed channel keeps its last value: no change to follow.)
                Ok(_) = lost.wait_for(|l| !*l), if leads => Duration::ZERO,
                wait = round => wait,
            };
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(wait) => {}
                Ok(()) = leading.changed() => {}
                event = changes.next() => {
                    // One round answers every change already here: a start lists three objects (nine events
                    // with the list markers), and a round per event would read all three objects nine times.
                    let drained = std::iter::from_fn(|| changes.next().now_or_never().flatten());
                    let mut failed = false;
                    for e in event.into_iter().chain(drained).filter_map(Result::err) {
                        tracing::debug!(error = %e, "webhook certificate Secret watch");
                        failed = true;
                    }
                    if failed {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }
    }
}

/// Whether the served `leaf_pem` is issued by a CA of `bundle` (PEM certificates).
pub fn bundle_trusts(bundle: &str, leaf_pem: &[u8]) -> bool {
    const END: &str = "-----END CERTIFICATE-----";
    bundle
        .split_inclusive(END)
        .filter(|pem| pem.contains(END))
        .any(|ca| btp_certs::verify_signed_by(leaf_pem, ca.trim().as_bytes()).is_ok())
}

/// Whether the served `leaf_pem` is trusted by every webhook's caBundle in `configuration` (JSON).
pub fn trusted_by(leaf_pem: &[u8], configuration: &serde_json::Value) -> bool {
    use base64::Engine as _;
    let Some(hooks) = configuration["webhooks"].as_array().filter(|h| !h.is_empty()) else {
        return false;
    };
    hooks.iter().all(|hook| {
        hook["clientConfig"]["caBundle"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .and_then(|b| String::from_utf8(b).ok())
            .is_some_and(|bundle| bundle_trusts(&bundle, leaf_pem))
    })
}

fn json_of<K: serde::Serialize>(k: &K) -> serde_json::Value {
    serde_json::to_value(k).unwrap_or_default()
}

/// A cluster-scoped object as JSON, None when absent.
async fn read_json<K>(client: &kube::Client, name: &str) -> Result<Option<serde_json::Value>, CertsError>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let found = Api::<K>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(api_err(format!("reading the {}", K::kind(&()))))?;
    Ok(found.as_ref().map(json_of))
}

fn describe(step: &Step) -> String {
    match step {
        Step::Keep => "keep".into(),
        Step::Bootstrap(why) => format!("new CA and serving certificate ({why})"),
        Step::IssueLeaf(why) => format!("new serving certificate ({why})"),
        Step::StageNextCa => "next CA staged; caBundle now trusts old and new CA".into(),
        Step::PromoteNextCa => "serving certificate now signed by the new CA".into(),
        Step::DropPreviousCa => "retired CA removed from the caBundle".into(),
    }
}

fn until_next_check(stored: &Stored, policy: &Policy) -> Duration {
    let due = rotation::next_check(stored, policy)
        .and_then(|t| t.duration_since(SystemTime::now()).ok())
        .unwrap_or(Duration::from_secs(5));
    // Re-check at least hourly (clock jumps, edits the watch missed); never spin.
    due.clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

fn backoff(failures: &mut u32, error: &CertsError) -> Duration {
    *failures = failures.saturating_add(1);
    let wait = Duration::from_millis(500).saturating_mul(2u32.saturating_pow((*failures).min(7)));
    tracing::warn!(error = %error, retry_in = ?wait, "webhook certificates not in step");
    wait.min(Duration::from_secs(60))
}

/// Server-side apply both webhook configurations (field manager `btp-manager`, force), each only when
/// what is stored differs from what we want.
pub async fn apply_configurations(client: &kube::Client, manifests: &WebhookManifests) -> Result<(), CertsError> {
    apply_if_changed(
        &Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        names::webhook::VALIDATING_CONFIGURATION,
        &manifests.validating(),
    )
    .await?;
    apply_if_changed(
        &Api::<MutatingWebhookConfiguration>::all(client.clone()),
        names::webhook::MUTATING_CONFIGURATION,
        &manifests.mutating(),
    )
    .await
}

async fn apply_if_changed<K>(api: &Api<K>, name: &str, desired: &K) -> Result<(), CertsError>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let kind = K::kind(&()).to_string();
    let current = api
        .get_opt(name)
        .await
        .map_err(api_err(format!("reading the {kind}")))?;
    let desired_json = serde_json::to_value(desired).unwrap_or_default();
    if let Some(current) = current {
        let current_json = serde_json::to_value(&current).unwrap_or_default();
        if contains(&current_json, &desired_json) {
            return Ok(());
        }
        if switches_endpoint(&current_json, &desired_json) {
            return replace_webhooks(api, name, &current_json, &desired_json).await;
        }
    }
    let params = PatchParams::apply(names::FIELD_MANAGER).force();
    api.patch(name, &params, &Patch::Apply(desired))
        .await
        .map_err(|source| {
            let mut action = format!("applying the {kind}");
            if source.to_string().contains("not declared in schema") {
                action.push_str(
                    " (the API server does not know a field the manager sets: BTP Manager supports Kubernetes 1.24 \
                 and later; check `kubectl version` and see the README's Kubernetes versions section)",
                );
            }
            CertsError::Api { action, source }
        })?;
    tracing::info!(%kind, %name, "webhook configuration applied");
    Ok(())
}

/// Whether going from `current` to `desired` moves a webhook's `clientConfig` between `service` and `url`
/// (a configuration installed from `deploy/webhooks.yaml` taken over by `btp-manager run` outside the
/// cluster, or the other way round). A server-side apply cannot do that: the other field stays owned by the
/// manager that set it (kubectl), the two merge, and the API server refuses the result ("exactly one of url
/// or service is required").
pub fn switches_endpoint(current: &serde_json::Value, desired: &serde_json::Value) -> bool {
    let endpoint = |hook: &serde_json::Value| {
        let config = &hook["clientConfig"];
        (!config["url"].is_null(), !config["service"].is_null())
    };
    let (Some(current), Some(desired)) = (current["webhooks"].as_array(), desired["webhooks"].as_array()) else {
        return false;
    };
    desired.iter().any(|d| {
        current
            .iter()
            .find(|c| c.get("name") == d.get("name"))
            .is_some_and(|c| endpoint(c) != endpoint(d))
    })
}

/// Replace the whole `webhooks` list with the wanted one in one JSON patch (authorized as `patch`), guarded by
/// the `resourceVersion` read, so a concurrent change makes it fail (409) and the next round decides again.
async fn replace_webhooks<K>(
    api: &Api<K>,
    name: &str,
    current: &serde_json::Value,
    desired: &serde_json::Value,
) -> Result<(), CertsError>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let kind = K::kind(&()).to_string();
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": current["metadata"]["resourceVersion"]},
        {"op": "replace", "path": "/webhooks", "value": desired["webhooks"]},
    ]))?;
    let params = PatchParams {
        field_manager: Some(names::FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::<()>::Json(patch))
        .await
        .map_err(api_err(format!("switching the {kind}'s webhook endpoints")))?;
    tracing::info!(%kind, %name, "webhook configuration taken over: endpoints switched between url and service");
    Ok(())
}

/// Whether `current` holds everything `desired` says: objects field by field (extra fields such as
/// server defaults are fine), the `webhooks` list matched by name, other lists element by element.
pub fn contains(current: &serde_json::Value, desired: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (current, desired) {
        (_, Value::Null) => true,
        (Value::Object(c), Value::Object(d)) => d.iter().all(|(k, dv)| match c.get(k) {
            Some(cv) if k == "webhooks" => named_lists_contain(cv, dv),
            Some(cv) => contains(cv, dv),
            None => dv.is_null() || dv.as_object().is_some_and(|o| o.is_empty()),
        }),
        (Value::Array(c), Value::Array(d)) => c.len() == d.len() && c.iter().zip(d).all(|(c, d)| contains(c, d)),
        (c, d) => c == d,
    }
}

fn named_lists_contain(current: &serde_json::Value, desired: &serde_json::Value) -> bool {
    let (Some(current), Some(desired)) = (current.as_array(), desired.as_array()) else {
        return contains(current, desired);
    };
    current.len() == desired.len()
        && desired.iter().all(|d| {
            current
                .iter()
                .find(|c| c.get("name") == d.get("name"))
                .is_some_and(|c| contains(c, d))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_unchanged_configuration_is_not_written_again() {
        let desired = json!({"metadata": {"name": "c", "labels": {"a": "b"}},
            "webhooks": [{"name": "x", "clientConfig": {"caBundle": "Q0E="}, "rules": [{"operations": ["CREATE"]}]},
                         {"name": "y", "clientConfig": {"caBundle": "Q0E="}}]});
        // What a server returns: defaults and metadata added, the webhooks in another order.
        let stored = json!({"metadata": {"name": "c", "labels": {"a": "b"}, "resourceVersion": "7"},
            "webhooks": [{"name": "y", "clientConfig": {"caBundle": "Q0E="}, "objectSelector": {}},
                         {"name": "x", "clientConfig": {"caBundle": "Q0E="}, "rules": [{"operations": ["CREATE"], "scope": "*"}]}]});
        assert!(contains(&stored, &desired));
    }

    #[test]
    fn a_wiped_or_foreign_ca_bundle_or_a_missing_webhook_is_a_change() {
        let desired = json!({"webhooks": [{"name": "x", "clientConfig": {"caBundle": "Q0E="}}]});
        assert!(!contains(
            &json!({"webhooks": [{"name": "x", "clientConfig": {}}]}),
            &desired
        ));
        assert!(!contains(
            &json!({"webhooks": [{"name": "x", "clientConfig": {"caBundle": "T1RIRVI="}}]}),
            &desired
        ));
        assert!(!contains(&json!({"webhooks": []}), &desired));
        assert!(!contains(
            &json!({"webhooks": [{"name": "x", "clientConfig": {"caBundle": "Q0E="}}, {"name": "z"}]}),
            &desired
        ));
        let rules = json!({"webhooks": [{"name": "x", "rules": [{"operations": ["CREATE", "DELETE"]}]}]});
        assert!(!contains(
            &rules,
            &json!({"webhooks": [{"name": "x", "rules": [{"operations": ["CREATE"]}]}]})
        ));
    }
}
