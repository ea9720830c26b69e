//! The checks of `btp-manager doctor` as pure decisions over what was observed (`observe.rs` reads it). Each
//! returns a [`Check`] whose message names what was found and whose fix says what to do.

use super::report::Check;
use btp_api::{ConditionStatus, CredentialsReason, Reason, State};
use std::time::{Duration, SystemTime};

/// Certificates closer to expiry than this are a warning (the alerts' threshold, `deploy/monitoring/`).
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 24 * 3600);

/// The API server's version against the supported range (1.24 and later; full function from 1.28).
pub fn version(major: &str, minor: &str, git_version: &str) -> Check {
    let minor_number: Option<u32> = minor.trim_end_matches('+').parse().ok();
    match (major, minor_number) {
        ("1", Some(m)) if m >= 28 => Check::pass("version", format!("Kubernetes {git_version}: supported")),
        ("1", Some(m)) if m >= 24 => Check::warn(
            "version",
            format!(
                "Kubernetes {git_version}: supported without webhook matchConditions (from 1.28): every Secret \
                 write in kyma-system reaches the Secret webhooks, which let all but sap-btp-manager through"
            ),
            "nothing is needed; upgrade to Kubernetes 1.28 or later for full function",
        ),
        _ => Check::fail(
            "version",
            format!("Kubernetes {git_version}: not supported (1.24 or later is)"),
            "upgrade the cluster to Kubernetes 1.24 or later",
        ),
    }
}

/// The BtpOperator CRD: present, and with this binary's schema.
pub fn crd(found: Option<&serde_json::Value>, expected: &serde_json::Value) -> Check {
    const FIX: &str = "kubectl apply -k deploy/ (from this release)";
    let Some(found) = found else {
        return Check::fail(
            "crd",
            "CustomResourceDefinition btpoperators.operator.kyma-project.io is missing",
            FIX,
        );
    };
    let schemas = |crd: &serde_json::Value| -> Vec<(serde_json::Value, serde_json::Value)> {
        crd["spec"]["versions"]
            .as_array()
            .map(|vs| vs.iter().map(|v| (v["name"].clone(), v["schema"].clone())).collect())
            .unwrap_or_default()
    };
    if found["spec"]["group"] != expected["spec"]["group"]
        || found["spec"]["names"]["kind"] != expected["spec"]["names"]["kind"]
        || found["spec"]["scope"] != expected["spec"]["scope"]
        || schemas(found) != schemas(expected)
    {
        return Check::fail(
            "crd",
            "CustomResourceDefinition btpoperators.operator.kyma-project.io differs from this binary's",
            FIX,
        );
    }
    Check::pass(
        "crd",
        "btpoperators.operator.kyma-project.io matches this binary's schema",
    )
}

/// One permission the manager needs, as a SubjectAccessReview asks it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Permission {
    /// The verb.
    pub verb: String,
    /// The API group (empty: core).
    pub group: String,
    /// The resource (`res` or `res/sub`).
    pub resource: String,
    /// The namespace (empty: cluster-wide).
    pub namespace: String,
    /// The object's name, where the rule names them (`resourceNames`); empty: every object.
    pub name: String,
    /// Where `deploy/rbac.yaml` grants it (Role or ClusterRole).
    pub granted_by: String,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() { "\"\"" } else { &self.group };
        write!(f, "{} {} (group {group})", self.verb, self.resource)?;
        if !self.name.is_empty() {
            write!(f, " {}", self.name)?;
        }
        if !self.namespace.is_empty() {
            write!(f, " in {}", self.namespace)?;
        }
        Ok(())
    }
}

/// RBAC: every permission the manager needs (the rules of `deploy/rbac.yaml`) is granted to its ServiceAccount.
pub fn rbac(user: &str, checked: usize, denied: &[Permission]) -> Check {
    if denied.is_empty() {
        return Check::pass(
            "rbac",
            format!("{user} holds all {checked} permissions of deploy/rbac.yaml"),
        );
    }
    let list: Vec<String> = denied.iter().map(|p| format!("{p} [{}]", p.granted_by)).collect();
    Check::fail(
        "rbac",
        format!(
            "{user} lacks {} of {checked} permissions: {}",
            denied.len(),
            list.join("; ")
        ),
        format!(
            "add each verb to the rule named in brackets, as deploy/rbac.yaml has it: kubectl apply -k deploy/ \
             (from this release); check with kubectl auth can-i {} --as={user}",
            denied[0].verb_and_resource()
        ),
    )
}

impl Permission {
    fn verb_and_resource(&self) -> String {
        let resource = if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        };
        let ns = if self.namespace.is_empty() {
            String::new()
        } else {
            format!(" -n {}", self.namespace)
        };
        format!("{} {resource}{ns}", self.verb)
    }
}

/// The manager's Deployment: every replica ready.
pub fn deployment(name: &str, found: bool, desired: i32, ready: i32) -> Check {
    if !found {
        return Check::fail(
            "deployment",
            format!("Deployment {name} is missing"),
            "kubectl apply -k deploy/",
        );
    }
    if ready == 0 {
        return Check::fail(
            "deployment",
            format!("Deployment {name}: no replica ready (of {desired})"),
            format!("kubectl describe deployment {name} -n kyma-system; kubectl logs deployment/{name} -n kyma-system"),
        );
    }
    if ready < desired {
        return Check::warn(
            "deployment",
            format!("Deployment {name}: {ready} of {desired} replicas ready"),
            format!("kubectl describe deployment {name} -n kyma-system"),
        );
    }
    Check::pass(
        "deployment",
        format!("Deployment {name}: {ready}/{desired} replicas ready"),
    )
}

/// The leader-election Lease: held, and renewed within its duration.
pub fn lease(holder: Option<&str>, renewed: Option<SystemTime>, duration: Duration, now: SystemTime) -> Check {
    const FIX: &str = "look at the manager's pods and logs; a leader that died is replaced once its Lease expires";
    let Some(holder) = holder.filter(|h| !h.is_empty()) else {
        return Check::fail("leader", "no replica holds the Lease: nothing reconciles", FIX);
    };
    let age = renewed.and_then(|r| now.duration_since(r).ok()).unwrap_or_default();
    if renewed.is_none() || age > duration {
        return Check::fail(
            "leader",
            format!(
                "{holder} holds the Lease but last renewed it {}s ago (it lasts {}s)",
                age.as_secs(),
                duration.as_secs()
            ),
            FIX,
        );
    }
    Check::pass("leader", format!("{holder} leads (renewed {}s ago)", age.as_secs()))
}

/// A certificate's expiry: expired is a failure, within [`EXPIRY_WARNING`] a warning.
pub fn expiry(name: &str, what: &str, not_after: Option<SystemTime>, now: SystemTime, fix: &str) -> Check {
    let Some(not_after) = not_after else {
        return Check::fail(name, format!("{what}: none, or not a certificate"), fix);
    };
    match not_after.duration_since(now) {
        Err(_) => Check::fail(name, format!("{what} has expired"), fix),
        Ok(left) if left < EXPIRY_WARNING => {
            Check::warn(name, format!("{what} expires in {} days", left.as_secs() / 86_400), fix)
        }
        Ok(left) => Check::pass(name, format!("{what} valid for {} more days", left.as_secs() / 86_400)),
    }
}

/// The caBundles of webhook configurations against the serving certificate: each must hold a CA that signed it
/// (what the API server checks when it calls the webhook).
pub fn ca_bundles(name: &str, what: &str, bundles: &[(String, Vec<u8>)], leaf_pem: Option<&[u8]>, fix: &str) -> Check {
    let Some(leaf_pem) = leaf_pem else {
        return Check::fail(name, format!("{what}: the serving certificate is missing"), fix);
    };
    if bundles.is_empty() {
        return Check::fail(name, format!("{what}: no webhook configuration found"), fix);
    }
    let bad: Vec<&str> = bundles
        .iter()
        .filter(|(_, bundle)| !trusts(bundle, leaf_pem))
        .map(|(webhook, _)| webhook.as_str())
        .collect();
    if bad.is_empty() {
        Check::pass(
            name,
            format!(
                "{what}: every caBundle trusts the serving certificate ({} webhooks)",
                bundles.len()
            ),
        )
    } else {
        Check::fail(
            name,
            format!(
                "{what}: caBundle empty, unparsable or not trusting the serving certificate in {}",
                bad.join(", ")
            ),
            fix,
        )
    }
}

/// Whether one of the certificates of the PEM `bundle` signed `leaf_pem`.
pub fn trusts(bundle: &[u8], leaf_pem: &[u8]) -> bool {
    const END: &str = "-----END CERTIFICATE-----";
    let text = String::from_utf8_lossy(bundle);
    text.split_inclusive(END)
        .filter(|block| block.contains("-----BEGIN CERTIFICATE-----"))
        .any(|block| btp_certs::verify_signed_by(leaf_pem, block.as_bytes()).is_ok())
}

/// The probe of admission end to end: a BtpOperator named so that the manager's validating webhook refuses it,
/// created as a server-side dry run (`dryRun=All`: the API server runs admission and stores nothing). `doctor`'s
/// `admission` line and `check admission --wait` send it.
pub const ADMISSION_PROBE_NAMESPACE: &str = "default";
/// See [`ADMISSION_PROBE_NAMESPACE`].
pub const ADMISSION_PROBE_NAME: &str = "btp-manager-admission-probe";

/// What the API server answered to the dry-run create of the probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DryRun {
    /// Created (nothing refused it).
    Allowed,
    /// Refused, with the API server's code and message.
    Refused(u16, String),
    /// No answer from the API server (connecting, TLS, a timeout), with the error.
    NoAnswer(String),
}

/// What a [`DryRun`] says about admission: [`classify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admission {
    /// The manager's validating webhook refused the probe, through the API server: admission works. With the
    /// API server's message.
    RefusedByUs(String),
    /// The API server would have stored the probe: the validating webhook is not registered, or not called.
    Admitted,
    /// Not the refusal of our webhook, yet: why, with the message.
    NotYet(NotYet, String),
}

/// Why admission does not work (yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotYet {
    /// The API server could not call the manager's webhooks: no endpoints, connection refused, EOF, TLS.
    WebhookUnreachable,
    /// 404: BtpOperators are not served (the CRD is not installed or not established yet).
    NotServed,
    /// Another answer of the API server (RBAC of the user, another webhook or policy, 429, 503), with its
    /// code.
    Other(u16),
    /// The API server did not answer.
    NoAnswer,
}

/// Classify the API server's answer to the probe. Only our validating webhook's refusal counts: the API
/// server's message for a webhook's denial starts `admission webhook "<name>" denied the request`; every other
/// answer, "failed calling webhook" included, is not admission working.
pub fn classify(answer: &DryRun) -> Admission {
    let ours = format!(
        "admission webhook \"{}\" denied the request",
        btp_webhooks::manifests::VALIDATING_BTP_OPERATOR
    );
    match answer {
        DryRun::Refused(_, message) if message.starts_with(&ours) => Admission::RefusedByUs(message.clone()),
        DryRun::Refused(_, message) if message.contains("failed calling webhook") => {
            Admission::NotYet(NotYet::WebhookUnreachable, message.clone())
        }
        DryRun::Refused(404, message) => Admission::NotYet(NotYet::NotServed, message.clone()),
        DryRun::Refused(code, message) => Admission::NotYet(NotYet::Other(*code), message.clone()),
        DryRun::NoAnswer(message) => Admission::NotYet(NotYet::NoAnswer, message.clone()),
        DryRun::Allowed => Admission::Admitted,
    }
}

impl Admission {
    /// Whether admission works.
    pub fn works(&self) -> bool {
        matches!(self, Admission::RefusedByUs(_))
    }
}

impl std::fmt::Display for Admission {
    /// One line: the state and the API server's message.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Admission::RefusedByUs(message) => write!(
                f,
                "admission works: the validating webhook refused a misnamed BtpOperator (dry run): {message}"
            ),
            Admission::Admitted => f.write_str(
                "a misnamed BtpOperator would be accepted: the validating webhook is not registered or not called",
            ),
            Admission::NotYet(NotYet::WebhookUnreachable, message) => {
                write!(f, "the API server cannot call the webhooks: {message}")
            }
            Admission::NotYet(NotYet::NotServed, message) => {
                write!(f, "BtpOperators are not served (is the CRD installed?): {message}")
            }
            Admission::NotYet(NotYet::Other(code), message) => {
                write!(
                    f,
                    "the dry-run create was refused by something else ({code}): {message}"
                )
            }
            Admission::NotYet(NotYet::NoAnswer, message) => write!(f, "no answer from the API server: {message}"),
        }
    }
}

/// Admission end to end: the misnamed BtpOperator is refused by our validating webhook, not by anything else.
pub fn admission(answer: &DryRun) -> Check {
    let admission = classify(answer);
    let fix = match &admission {
        Admission::RefusedByUs(_) => {
            return Check::pass("admission", "a misnamed BtpOperator is refused by the validating webhook (dry run)")
        }
        Admission::Admitted => "kubectl apply -k deploy/; the manager registers its caBundle at start",
        Admission::NotYet(NotYet::WebhookUnreachable, _) => {
            "check the manager's pods and the Service btp-manager-webhook-service; see docs/troubleshooting.md#the-webhook-is-unreachable"
        }
        Admission::NotYet(NotYet::NotServed, _) => "kubectl apply -k deploy/ (from this release)",
        Admission::NotYet(NotYet::Other(_), _) => {
            "read the message: RBAC of the user running doctor, or another admission webhook or policy"
        }
        Admission::NotYet(NotYet::NoAnswer, _) => "check the kubeconfig's server and the network to it",
    };
    Check::fail("admission", admission.to_string(), fix)
}

/// The BtpOperator's state and reason, with what the status-reasons table says to do.
pub fn cr(found: Option<(Option<State>, Option<&str>, Option<&str>)>) -> Check {
    let Some((state, reason, message)) = found else {
        return Check::warn(
            "btpoperator",
            "kyma-system/btpoperator does not exist: nothing is installed",
            "create it once the credentials Secret exists (docs/install.md)",
        );
    };
    let reason_text = reason.unwrap_or("no reason yet");
    let message = message.unwrap_or("");
    let todo = Reason::ALL
        .into_iter()
        .find(|r| Some(r.as_str()) == reason)
        .map(|r| r.what_to_do().to_string())
        .unwrap_or_else(|| "see docs/status-reasons.md".into());
    let summary = match state {
        Some(s) => format!("{} / {reason_text}: {message}", s.as_str()),
        None => format!("no state yet / {reason_text}"),
    };
    match state {
        Some(State::Ready) => Check::pass("btpoperator", summary),
        Some(State::Error) => Check::fail("btpoperator", summary, todo),
        _ => Check::warn("btpoperator", summary, todo),
    }
}

/// The `CredentialsValid` condition (status, reason, message): whether the Secret's token endpoint issued a
/// token for its credentials, with what the reason table says to do.
pub fn credentials(found: Option<(ConditionStatus, &str, &str)>) -> Check {
    const NAME: &str = "credentials";
    let Some((status, reason, message)) = found else {
        return Check::warn(
            NAME,
            "no CredentialsValid condition: the credentials have not been checked yet",
            "wait for the leading manager's first check (it follows the first reconcile); see docs/behaviour.md#credentials-check",
        );
    };
    let known = CredentialsReason::ALL.into_iter().find(|r| r.as_str() == reason);
    let todo = known.map_or("see docs/status-reasons.md#credentialsvalid", |r| r.what_to_do());
    let summary = format!("CredentialsValid {status:?} / {reason}: {message}");
    match (status, known) {
        (ConditionStatus::True, _) | (_, Some(CredentialsReason::Disabled)) => Check::pass(NAME, summary),
        (ConditionStatus::False, _) => Check::fail(NAME, summary, todo),
        (ConditionStatus::Unknown, _) => Check::warn(NAME, summary, todo),
    }
}

/// The credentials Secret: present, labelled, with every key (its values are never read into the report).
pub fn secret(found: bool, labelled: bool, missing_keys: &[&str]) -> Check {
    if !found {
        return Check::fail(
            "secret",
            "Secret kyma-system/sap-btp-manager is missing",
            "create it with clientid, clientsecret, sm_url, tokenurl and cluster_id (docs/install.md)",
        );
    }
    if !missing_keys.is_empty() {
        return Check::fail(
            "secret",
            format!(
                "Secret kyma-system/sap-btp-manager lacks or has empty: {}",
                missing_keys.join(", ")
            ),
            "add the keys (values are not shown here)",
        );
    }
    if !labelled {
        return Check::fail(
            "secret",
            "Secret kyma-system/sap-btp-manager has no label app.kubernetes.io/managed-by=kcp-kyma-environment-broker: the manager ignores it",
            "kubectl label secret sap-btp-manager -n kyma-system app.kubernetes.io/managed-by=kcp-kyma-environment-broker",
        );
    }
    Check::pass(
        "secret",
        "Secret kyma-system/sap-btp-manager is labelled and has every key",
    )
}

/// The operand's Deployment (only once the BtpOperator asked for it).
pub fn operand(found: bool, available: bool) -> Check {
    match (found, available) {
        (true, true) => Check::pass("operand", "Deployment sap-btp-operator-controller-manager is available"),
        (true, false) => Check::warn(
            "operand",
            "Deployment sap-btp-operator-controller-manager is not available",
            "kubectl describe deployment sap-btp-operator-controller-manager -n kyma-system",
        ),
        (false, _) => Check::fail(
            "operand",
            "Deployment sap-btp-operator-controller-manager is missing",
            "the manager installs it while kyma-system/btpoperator exists: see the btpoperator check",
        ),
    }
}

/// The operand's network policies: present, or disabled by the CR's annotation.
pub fn network_policies(found: usize, expected: usize, disabled: bool) -> Check {
    match (disabled, found >= expected) {
        (true, _) => Check::pass("netpol", "network policies disabled by the BtpOperator's annotation"),
        (false, true) => Check::pass("netpol", format!("{found} network policies present")),
        (false, false) => Check::warn(
            "netpol",
            format!("{found} of {expected} network policies present"),
            "kubectl annotate btpoperator btpoperator -n kyma-system operator.kyma-project.io/operation=reconcile",
        ),
    }
}

/// Egress from the manager's pod to the API server under the chart namespace's NetworkPolicies: `blocked`
/// is what [`super::egress::blocked`] found.
pub fn api_server_egress(blocked: &[(super::egress::Endpoint, Vec<String>)], endpoints: usize) -> Check {
    if blocked.is_empty() {
        return Check::pass(
            "apiserver-egress",
            format!("the network policies let the manager reach the API server ({endpoints} endpoint(s))"),
        );
    }
    let ports: std::collections::BTreeSet<u16> = blocked.iter().map(|(e, _)| e.port).collect();
    let policies: std::collections::BTreeSet<&str> = blocked
        .iter()
        .flat_map(|(_, names)| names.iter().map(String::as_str))
        .collect();
    Check::fail(
        "apiserver-egress",
        format!(
            "the network policies {} cut the manager off the API server's endpoint port(s) {} (the \
             default/kubernetes EndpointSlices): a CNI that enforces NetworkPolicies drops its requests",
            policies.into_iter().collect::<Vec<_>>().join(", "),
            ports.iter().map(u16::to_string).collect::<Vec<_>>().join(", "),
        ),
        "allow egress to those ports (the policies the manager installs do: a reconcile re-applies them), or \
         remove the policy that isolates the manager's pod",
    )
}

#[cfg(test)]
mod tests {
    use super::super::report::Verdict;
    use super::*;

    #[test]
    fn versions() {
        assert_eq!(version("1", "36", "v1.36.2").verdict, Verdict::Pass);
        assert_eq!(version("1", "28+", "v1.28.3").verdict, Verdict::Pass);
        let old = version("1", "24", "v1.24.0");
        assert_eq!(old.verdict, Verdict::Warn);
        assert!(old.message.contains("matchConditions"));
        assert_eq!(version("1", "23", "v1.23.0").verdict, Verdict::Fail);
        assert_eq!(version("2", "x", "?").verdict, Verdict::Fail);
    }

    #[test]
    fn a_missing_permission_is_named_with_its_rule() {
        let p = Permission {
            verb: "create".into(),
            group: "apiextensions.k8s.io".into(),
            resource: "customresourcedefinitions".into(),
            namespace: String::new(),
            name: String::new(),
            granted_by: "ClusterRole btp-manager-manager-role".into(),
        };
        let c = rbac("system:serviceaccount:kyma-system:sa", 80, &[p]);
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(
            c.message.contains(
                "create customresourcedefinitions (group apiextensions.k8s.io) [ClusterRole btp-manager-manager-role]"
            ),
            "{}",
            c.message
        );
        assert!(c
            .fix
            .unwrap()
            .contains("kubectl auth can-i create customresourcedefinitions.apiextensions.k8s.io"));
        assert_eq!(rbac("u", 80, &[]).verdict, Verdict::Pass);
    }

    #[test]
    fn leases_and_expiry() {
        let now = SystemTime::now();
        let d = Duration::from_secs(15);
        assert_eq!(
            lease(Some("a"), Some(now - Duration::from_secs(3)), d, now).verdict,
            Verdict::Pass
        );
        assert_eq!(
            lease(Some("a"), Some(now - Duration::from_secs(60)), d, now).verdict,
            Verdict::Fail
        );
        assert_eq!(lease(None, None, d, now).verdict, Verdict::Fail);
        assert_eq!(lease(Some(""), Some(now), d, now).verdict, Verdict::Fail);
        let day = Duration::from_secs(86_400);
        assert_eq!(expiry("c", "x", Some(now + 100 * day), now, "f").verdict, Verdict::Pass);
        assert_eq!(expiry("c", "x", Some(now + 3 * day), now, "f").verdict, Verdict::Warn);
        let expired = expiry("c", "x", Some(now - day), now, "f");
        assert_eq!(expired.verdict, Verdict::Fail);
        assert!(expired.message.contains("expired"));
        assert_eq!(expiry("c", "x", None, now, "f").verdict, Verdict::Fail);
    }

    /// What real API servers answer on the way to a working admission (v1.36.2, the manager installed from
    /// `deploy/`), and what it means.
    #[test]
    fn only_our_webhooks_refusal_is_admission_working() {
        let ours = "admission webhook \"vbtpoperator.operator.kyma-project.io\" denied the request: BtpOperator \
                    must be named \"btpoperator\" in namespace \"kyma-system\", but this one is named \
                    \"btp-manager-admission-probe\" in namespace \"default\".";
        let refused = classify(&DryRun::Refused(403, ours.into()));
        assert_eq!(refused, Admission::RefusedByUs(ours.into()));
        assert!(refused.works());
        assert_eq!(admission(&DryRun::Refused(403, ours.into())).verdict, Verdict::Pass);

        let unreachable = [
            // The Service's endpoints not there yet, the replica not serving yet, a terminating replica.
            "Internal error occurred: failed calling webhook \"mbtpoperator.operator.kyma-project.io\": failed to \
             call webhook: Post \"https://btp-manager-webhook-service.kyma-system.svc:443/mutate?timeout=5s\": \
             no endpoints available for service \"btp-manager-webhook-service\"",
            "Internal error occurred: failed calling webhook \"mbtpoperator.operator.kyma-project.io\": failed to \
             call webhook: Post \"https://btp-manager-webhook-service.kyma-system.svc:443/mutate?timeout=5s\": EOF",
            "Internal error occurred: failed calling webhook \"vbtpoperator.operator.kyma-project.io\": failed to \
             call webhook: Post \"https://btp-manager-webhook-service.kyma-system.svc:443/validate?timeout=5s\": \
             dial tcp 10.96.0.12:443: connect: connection refused",
            // Before the manager wrote its CA into the configurations.
            "Internal error occurred: failed calling webhook \"vbtpoperator.operator.kyma-project.io\": failed to \
             call webhook: Post \"https://btp-manager-webhook-service.kyma-system.svc:443/validate?timeout=5s\": \
             tls: failed to verify certificate: x509: certificate signed by unknown authority",
        ];
        for message in unreachable {
            let answer = DryRun::Refused(500, message.into());
            assert_eq!(
                classify(&answer),
                Admission::NotYet(NotYet::WebhookUnreachable, message.into()),
                "{message}"
            );
            let check = admission(&answer);
            assert_eq!(check.verdict, Verdict::Fail);
            assert!(check.message.contains("cannot call") && check.message.contains(message));
        }
        // No CRD (yet): 404, whatever the message says.
        let crd_missing = DryRun::Refused(404, "the server could not find the requested resource".into());
        assert_eq!(
            classify(&crd_missing),
            Admission::NotYet(
                NotYet::NotServed,
                "the server could not find the requested resource".into()
            )
        );
        assert!(classify(&crd_missing).to_string().contains("the CRD"));
        // Someone else's refusal, even one that mentions a BtpOperator or "denied".
        for (code, message) in [
            (
                403,
                "btpoperators.operator.kyma-project.io is forbidden: User \"ci\" cannot create resource",
            ),
            (
                400,
                "admission webhook \"policy.example.com\" denied the request: BtpOperator must be named in a team",
            ),
            (429, "storage is (re)initializing"),
        ] {
            assert_eq!(
                classify(&DryRun::Refused(code, message.into())),
                Admission::NotYet(NotYet::Other(code), message.into())
            );
        }
        // Our webhook's name in a failed call, or our refusal quoted in someone else's, is not our refusal.
        for message in [
            "failed calling webhook \"vbtpoperator.operator.kyma-project.io\": denied the request",
            "admission webhook \"policy.example.com\" denied the request: admission webhook \
             \"vbtpoperator.operator.kyma-project.io\" denied the request",
        ] {
            assert!(!classify(&DryRun::Refused(403, message.into())).works(), "{message}");
        }
        assert_eq!(classify(&DryRun::Allowed), Admission::Admitted);
        assert_eq!(admission(&DryRun::Allowed).verdict, Verdict::Fail);
        let no_answer = DryRun::NoAnswer("error trying to connect: tcp connect error: Connection refused".into());
        assert_eq!(
            classify(&no_answer),
            Admission::NotYet(
                NotYet::NoAnswer,
                "error trying to connect: tcp connect error: Connection refused".into()
            )
        );
        for answer in [DryRun::Allowed, crd_missing, no_answer] {
            assert_eq!(admission(&answer).verdict, Verdict::Fail, "{answer:?}");
        }
    }

    #[test]
    fn the_cr_state_maps_to_a_verdict_with_the_reason_table_action() {
        assert_eq!(
            cr(Some((Some(State::Ready), Some("ReconcileSucceeded"), Some("ok")))).verdict,
            Verdict::Pass
        );
        let error = cr(Some((
            Some(State::Error),
            Some("InvalidSecret"),
            Some("missing keys: clientid"),
        )));
        assert_eq!(error.verdict, Verdict::Fail);
        assert_eq!(error.fix.as_deref(), Some(Reason::InvalidSecret.what_to_do()));
        assert_eq!(cr(None).verdict, Verdict::Warn);
    }

    #[test]
    fn the_credentials_condition_maps_to_a_verdict_with_what_to_do() {
        let issued = credentials(Some((ConditionStatus::True, "TokenIssued", "ok")));
        assert_eq!(issued.verdict, Verdict::Pass);
        let refused = credentials(Some((ConditionStatus::False, "Unauthorized", "refused")));
        assert_eq!(refused.verdict, Verdict::Fail);
        assert_eq!(
            refused.fix.as_deref(),
            Some(CredentialsReason::Unauthorized.what_to_do())
        );
        assert_eq!(
            credentials(Some((ConditionStatus::Unknown, "Disabled", "off"))).verdict,
            Verdict::Pass
        );
        assert_eq!(
            credentials(Some((ConditionStatus::Unknown, "NotChecked", "no Secret"))).verdict,
            Verdict::Warn
        );
        assert_eq!(credentials(None).verdict, Verdict::Warn);
    }

    #[test]
    fn the_secret_is_judged_without_its_values() {
        assert_eq!(secret(true, true, &[]).verdict, Verdict::Pass);
        let unlabelled = secret(true, false, &[]);
        assert_eq!(unlabelled.verdict, Verdict::Fail);
        assert!(unlabelled.fix.unwrap().starts_with("kubectl label secret"));
        assert!(secret(true, true, &["clientid"]).message.contains("clientid"));
        assert_eq!(secret(false, false, &[]).verdict, Verdict::Fail);
    }
}
