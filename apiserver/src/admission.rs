//! Admission webhooks: mutating (in configuration name order, JSONPatch responses applied)
//! then validating, with rules / namespaceSelector / objectSelector matching, `failurePolicy`,
//! `timeoutSeconds`, `caBundle` verification and warnings. `matchConditions` are evaluated with CEL
//! (`object`, `oldObject`, `request`; no `authorizer`): a webhook is called only when all are true, skipped
//! when one is false, and an evaluation error counts as a failed call (`failurePolicy`).
//! `reinvocationPolicy` is ignored.

use crate::context::{ns_gr, Ctx};
use crate::error::{ApiError, ApiResult};
use crate::selectors::LabelSelector;
use crate::util::{labels_of, name_of, new_uid};
use crate::webhook_client::target_url;
use base64::Engine;
use serde_json::{json, Value};
use std::time::Duration;

struct Input<'a> {
    op: &'a str,
    group: &'a str,
    version: &'a str,
    resource: &'a str,
    sub: &'a str,
    namespaced: bool,
    ns_labels: Option<serde_json::Map<String, Value>>,
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn rule_matches(rule: &Value, i: &Input) -> bool {
    let has = |k: &str, val: &str| str_list(rule.get(k)).iter().any(|x| x == "*" || x == val);
    if !has("operations", i.op) || !has("apiGroups", i.group) || !has("apiVersions", i.version) {
        return false;
    }
    let res_ok = str_list(rule.get("resources")).iter().any(|r| {
        if r == "*/*" {
            return true;
        }
        match r.split_once('/') {
            None => i.sub.is_empty() && (r == "*" || r == i.resource),
            Some((res, sub)) => !i.sub.is_empty() && (res == "*" || res == i.resource) && (sub == "*" || sub == i.sub),
        }
    });
    if !res_ok {
        return false;
    }
    match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" => !i.namespaced,
        "Namespaced" => i.namespaced,
        _ => true,
    }
}

fn selector_matches(sel: Option<&Value>, labels: &serde_json::Map<String, Value>) -> bool {
    match sel {
        None | Some(Value::Null) => true,
        Some(s) => LabelSelector::from_object(s)
            .map(|ls| ls.matches_labels(labels))
            .unwrap_or(false),
    }
}

fn webhook_matches(wh: &Value, i: &Input, obj: Option<&Value>, old: Option<&Value>) -> bool {
    let rules = wh.get("rules").and_then(Value::as_array).cloned().unwrap_or_default();
    if !rules.iter().any(|r| rule_matches(r, i)) {
        return false;
    }
    if let Some(nl) = &i.ns_labels {
        if !selector_matches(wh.get("namespaceSelector"), nl) {
            return false;
        }
    }
    let os = wh.get("objectSelector");
    let candidates: Vec<&Value> = [obj, old].into_iter().flatten().collect();
    candidates.is_empty() || candidates.iter().any(|o| selector_matches(os, &labels_of(o)))
}

/// A webhook's `matchConditions` for this request: Ok(true) when all hold (or there are none), Ok(false)
/// when one is false (even if another failed, as kube-apiserver decides), Err when one could not be
/// evaluated to a bool.
pub fn match_conditions(wh: &Value, request: &Value) -> Result<bool, String> {
    let Some(conditions) = wh.get("matchConditions").and_then(Value::as_array) else {
        return Ok(true);
    };
    let mut error = None;
    for condition in conditions {
        let name = condition.get("name").and_then(Value::as_str).unwrap_or("");
        let expression = condition.get("expression").and_then(Value::as_str).unwrap_or("");
        let outcome = cel::Program::compile(expression)
            .map_err(|e| format!("compiling: {e}"))
            .and_then(|program| {
                let mut context = cel::Context::default();
                for (var, value) in [
                    ("object", &request["object"]),
                    ("oldObject", &request["oldObject"]),
                    ("request", request),
                ] {
                    context
                        .add_variable(var, value.clone())
                        .map_err(|e| format!("binding {var}: {e}"))?;
                }
                program.execute(&context).map_err(|e| e.to_string())
            });
        match outcome {
            Ok(cel::Value::Bool(true)) => {}
            Ok(cel::Value::Bool(false)) => return Ok(false),
            Ok(other) => {
                error.get_or_insert(format!("matchCondition {name:?} evaluated to {other:?}, not a bool"));
            }
            Err(e) => {
                error.get_or_insert(format!("matchCondition {name:?}: {e}"));
            }
        }
    }
    error.map_or(Ok(true), Err)
}

/// Runs admission for a write. Returns the (possibly mutated) object.
pub(crate) async fn admit(
    ctx: &mut Ctx,
    op: &str,
    obj: Option<Value>,
    old: Option<&Value>,
) -> ApiResult<Option<Value>> {
    let def = ctx.t.def.clone();
    if def.group == "admissionregistration.k8s.io" {
        return Ok(obj);
    }
    let mgr: (String, String) = (
        "admissionregistration.k8s.io".into(),
        "mutatingwebhookconfigurations".into(),
    );
    let vgr: (String, String) = (
        "admissionregistration.k8s.io".into(),
        "validatingwebhookconfigurations".into(),
    );
    let (mutating, _) = ctx.st.store.list(&mgr, None);
    let (validating, _) = ctx.st.store.list(&vgr, None);
    if mutating.is_empty() && validating.is_empty() {
        return Ok(obj);
    }
    let ns = ctx.t.ns().to_string();
    let ns_labels = if def.namespaced {
        ctx.st
            .store
            .get(&ns_gr(), "", &ns)
            .map(|n| labels_of(&n))
            .or_else(|| Some(Default::default()))
    } else if def.plural == "namespaces" && def.group.is_empty() {
        Some(labels_of(obj.as_ref().or(old).unwrap_or(&Value::Null)))
    } else {
        None
    };
    let version = ctx.t.version.clone();
    let sub = ctx.t.sub.clone().unwrap_or_default();
    let input = Input {
        op,
        group: &def.group,
        version: &version,
        resource: &def.plural,
        sub: &sub,
        namespaced: def.namespaced,
        ns_labels,
    };
    let mut obj = obj;
    for (configs, is_mutating) in [(mutating, true), (validating, false)] {
        for cfg in configs {
            let hooks = cfg
                .get("webhooks")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for wh in hooks {
                if !webhook_matches(&wh, &input, obj.as_ref(), old) {
                    continue;
                }
                let wname = wh.get("name").and_then(Value::as_str).unwrap_or("").to_string();
                let mut review = review(ctx, &input, &def.kind, obj.as_ref(), old);
                let review_version = review_version(&wh);
                review["apiVersion"] = json!(format!("admission.k8s.io/{review_version}"));
                let ignore = wh.get("failurePolicy").and_then(Value::as_str) == Some("Ignore");
                match match_conditions(&wh, &review["request"]) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(msg) if ignore => {
                        tracing::warn!(webhook = %wname, error = %msg, "matchConditions failed, ignoring (failurePolicy=Ignore)");
                        continue;
                    }
                    Err(msg) => return Err(ApiError::internal(format!("failed calling webhook \"{wname}\": {msg}"))),
                }
                let timeout = wh
                    .get("timeoutSeconds")
                    .and_then(Value::as_u64)
                    .unwrap_or(10)
                    .clamp(1, 30);
                let uid = review["request"]["uid"].as_str().unwrap_or("").to_string();
                let res = match tokio::time::timeout(Duration::from_secs(timeout), ctx.st.webhooks.call(&wh, &review))
                    .await
                {
                    Ok(r) => r,
                    Err(_) => Err(format!(
                        "failed to call webhook: Post {:?}: context deadline exceeded",
                        target_url(&wh)
                    )),
                };
                let res = res
                    .and_then(|resp| same_version(review_version, resp))
                    .and_then(|resp| handle_response(&wname, &uid, resp, is_mutating, obj.as_mut()));
                match res {
                    Ok(Outcome::Allowed(warnings)) => ctx.warnings.extend(warnings),
                    Ok(Outcome::Denied(e)) => return Err(e),
                    Err(msg) => {
                        if ignore {
                            tracing::warn!(webhook = %wname, error = %msg, "webhook failed, ignoring (failurePolicy=Ignore)");
                            continue;
                        }
                        return Err(ApiError::internal(format!("failed calling webhook \"{wname}\": {msg}")));
                    }
                }
            }
        }
    }
    Ok(obj)
}

fn review(ctx: &Ctx, i: &Input, kind: &str, obj: Option<&Value>, old: Option<&Value>) -> Value {
    let name = obj.or(old).map(name_of).unwrap_or("");
    let gvk = json!({"group": i.group, "version": i.version, "kind": kind});
    let gvr = json!({"group": i.group, "version": i.version, "resource": i.resource});
    let opts_kind = match i.op {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut options = json!({"apiVersion": "meta.k8s.io/v1", "kind": opts_kind});
    if i.op != "DELETE" {
        options["fieldManager"] = json!(ctx.manager());
    }
    let mut req = json!({
        "uid": new_uid(),
        "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
        "name": name, "operation": i.op,
        "userInfo": {"username": "system:admin", "groups": ["system:masters", "system:authenticated"]},
        "object": obj.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": ctx.dry_run(),
        "options": options,
    });
    if !i.sub.is_empty() {
        req["subResource"] = json!(i.sub);
        req["requestSubResource"] = json!(i.sub);
    }
    if i.namespaced {
        req["namespace"] = json!(ctx.t.ns());
    } else if i.resource == "namespaces" && i.group.is_empty() {
        req["namespace"] = json!(name);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req})
}

/// The AdmissionReview version sent to a webhook: the first of its `admissionReviewVersions` the API server
/// speaks (`v1`, `v1beta1`), as kube-apiserver picks it; `v1` when none is listed.
fn review_version(wh: &Value) -> &'static str {
    wh.get("admissionReviewVersions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(|v| match v {
            "v1" => Some("v1"),
            "v1beta1" => Some("v1beta1"),
            _ => None,
        })
        .unwrap_or("v1")
}

/// A webhook must answer in the AdmissionReview version it was sent: kube-apiserver refuses any other one
/// with the conversion error it meets (seen on 1.36 and 1.24 with a `v1` answer to a `v1beta1` review).
fn same_version(sent: &str, review: Value) -> Result<Value, String> {
    let answered = review.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let answered = answered.strip_prefix("admission.k8s.io/").unwrap_or(answered);
    if answered == sent {
        return Ok(review);
    }
    Err(format!(
        "failed to call webhook: converting ({answered}.AdmissionReview) to ({sent}.AdmissionReview): unknown conversion"
    ))
}

enum Outcome {
    Allowed(Vec<String>),
    Denied(ApiError),
}

fn handle_response(
    wname: &str,
    uid: &str,
    review: Value,
    is_mutating: bool,
    obj: Option<&mut Value>,
) -> Result<Outcome, String> {
    let resp = review
        .get("response")
        .ok_or("received invalid webhook response: response is missing")?;
    let ruid = resp.get("uid").and_then(Value::as_str).unwrap_or("");
    if ruid != uid {
        return Err(format!(
            "received invalid webhook response: expected response.uid=\"{uid}\", got \"{ruid}\""
        ));
    }
    let warnings = str_list(resp.get("warnings"));
    if resp.get("allowed").and_then(Value::as_bool) != Some(true) {
        let st = resp.get("status").cloned().unwrap_or(json!({}));
        let code = st
            .get("code")
            .and_then(Value::as_u64)
            .filter(|c| *c >= 400)
            .unwrap_or(400) as u16;
        let msg = st.get("message").and_then(Value::as_str).unwrap_or("");
        let reason = st.get("reason").and_then(Value::as_str).unwrap_or("");
        let denied = format!("admission webhook \"{wname}\" denied the request");
        let message = if !msg.is_empty() {
            format!("{denied}: {msg}")
        } else if !reason.is_empty() {
            format!("{denied}: {reason}")
        } else {
            format!("{denied} without explanation")
        };
        let reason = if !reason.is_empty() {
            reason.to_string()
        } else {
            match code {
                403 => "Forbidden",
                409 => "Conflict",
                422 => "Invalid",
                _ => "BadRequest",
            }
            .to_string()
        };
        return Ok(Outcome::Denied(ApiError::new(code, &reason, message)));
    }
    if is_mutating {
        if let Some(p) = resp.get("patch").and_then(Value::as_str) {
            let pt = resp.get("patchType").and_then(Value::as_str).unwrap_or("");
            if pt != "JSONPatch" {
                return Err(format!("unsupported patch type {pt:?}"));
            }
            let raw = base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| format!("invalid patch encoding: {e}"))?;
            let patch: json_patch::Patch =
                serde_json::from_slice(&raw).map_err(|e| format!("invalid JSON patch: {e}"))?;
            if let Some(o) = obj {
                let mut copy = o.clone();
                json_patch::patch(&mut copy, &patch).map_err(|e| format!("JSON patch could not be applied: {e}"))?;
                *o = copy;
            }
        }
    }
    Ok(Outcome::Allowed(warnings))
}
