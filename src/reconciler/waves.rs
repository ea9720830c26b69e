//! In which order the module's objects are applied (docs/behaviour.md#apply). Pure.
//!
//! The objects are grouped by kind, and a group is applied as soon as the groups of the kinds it needs
//! ([`needs`]) have been applied, its requests side by side; groups that need nothing of each other go
//! at the same time. On a real API server (a round trip of 15-20 ms, more for a CRD) this costs the longest
//! chain of needs, not one round trip per object, nor one per wave of a fixed order: the module's ~25
//! objects take two round trips (a CRD's one being the longest), where fixed waves took three.
//!
//! What waits for what:
//! - objects in a Namespace wait for the Namespace (when the apply creates it);
//! - a Deployment waits for what its pods run as and read (ServiceAccounts, ConfigMaps, Secrets,
//!   PriorityClasses): pods created before would fail admission or start without their configuration;
//! - the webhook configurations wait for the Secrets (the operand's certificate Secrets: they carry their
//!   CA), not for the Services they call: the API server looks a Service up at each call, and a call
//!   succeeds only once the Service has ready endpoints, which come from the operand's pods, not from the
//!   Service's write (on a real v1.36 API server a Service, whose write allocates its cluster IP, was among
//!   the last answers of a cold install, and the webhook configurations waited a round trip for it);
//! - a kind not named here (a custom resource, an instance of a CRD of the module) waits for every kind
//!   named here, the CRDs among them.
//!
//! Role bindings go with the roles. The API server checks a binding against the role it references (its
//! creator must hold what the role grants) unless the creator may `bind` that role, which the shipped RBAC
//! grants for the operand's roles; without that grant it refuses a binding whose role does not exist yet
//! (404). A binding refused so ([`refused_for_its_role`]) is sent once more as soon as the roles of the same
//! apply are ([`retry_after`]), so a chart whose roles the manager may not bind still installs, a round trip
//! later. On a real v1.36 API server a binding checked against its role took 100 ms, one the writer may bind
//! 4 ms.
//!
//! Groups ready at the same time are sent most urgent first ([`Group::urgency`]): those with the longest
//! chain of writes and waits behind them, the Deployment's (what its pods need, then the Deployment, then
//! the wait for its readiness) ahead of the rest. They take the connections the client holds open, and the
//! others the new ones: on a real API server short of CPU, a request that first has to open a connection
//! (a TLS handshake) was answered 40-50 ms after one sent on an open connection, and the Deployment waited
//! for them.
//!
//! A group whose needs failed is not sent; the first failure in [`Plan::order`] (not the first to answer)
//! is the one reported, so the message is stable.

use serde_json::Value;

/// Requests in flight at once in the apply, and for the reads before it: enough for the module's ~20 reads to
/// go in one round, below the burst of 30 a controller-runtime manager allows itself.
pub const CONCURRENCY: usize = 24;

/// Every kind [`needs`] names; a kind not among them is applied after all of them.
const KNOWN: &[&str] = &[
    "CustomResourceDefinition",
    "Namespace",
    "PriorityClass",
    "ServiceAccount",
    "ConfigMap",
    "Secret",
    "Service",
    "NetworkPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "Deployment",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// The kinds objects of `kind` wait for (when the same apply writes objects of them).
pub fn needs(kind: &str) -> Vec<&'static str> {
    match kind {
        "CustomResourceDefinition" | "Namespace" | "PriorityClass" | "ClusterRole" | "ClusterRoleBinding" => {
            vec![]
        }
        "ServiceAccount" | "ConfigMap" | "Secret" | "Service" | "NetworkPolicy" | "Role" | "RoleBinding" => {
            vec!["Namespace"]
        }
        "Deployment" => vec!["Namespace", "ServiceAccount", "ConfigMap", "Secret", "PriorityClass"],
        "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration" => vec!["Secret"],
        _ => KNOWN.to_vec(),
    }
}

/// The kinds whose objects an object of `kind` refused for want of them ([`refused_for_its_role`]) waits for
/// before it is sent once more: a binding, the roles it may reference.
pub fn retry_after(kind: &str) -> Vec<&'static str> {
    match kind {
        "RoleBinding" => vec!["Role", "ClusterRole"],
        "ClusterRoleBinding" => vec!["ClusterRole"],
        _ => vec![],
    }
}

/// Whether the API server's answer `code` to the apply of an object of `kind` says that the role it
/// references does not exist (yet): 404 for a binding, whose apply creates it when it is absent.
pub fn refused_for_its_role(kind: &str, code: Option<u16>) -> bool {
    !retry_after(kind).is_empty() && code == Some(404)
}

/// How far down the chain of [`needs`] and [`retry_after`] `kind` is: 0 for a kind that waits for nothing,
/// else one more than the deepest kind it may wait for. Orders the report of failures (a binding's after its
/// role's: when the role fails, that is the cause).
pub fn depth(kind: &str) -> usize {
    // Neither has a cycle (a kind waits only for kinds of a smaller depth, see the tests), and the longest
    // chain is shorter than KNOWN: the bound only guards the recursion.
    fn go(kind: &str, bound: usize) -> usize {
        if bound == 0 {
            return 0;
        }
        needs(kind)
            .into_iter()
            .chain(retry_after(kind))
            .map(|k| go(k, bound - 1) + 1)
            .max()
            .unwrap_or(0)
    }
    go(kind, KNOWN.len() + 1)
}

/// The objects of one kind: applied together, once the groups in `after` are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Their kind.
    pub kind: String,
    /// Their indexes in the objects given to [`plan`], in the order given.
    pub members: Vec<usize>,
    /// The groups (indexes into [`Plan::groups`]) to apply first.
    pub after: Vec<usize>,
    /// The groups a member refused for want of one of their objects waits for before it is sent once more
    /// ([`retry_after`]).
    pub retry_after: Vec<usize>,
    /// How long the chain behind it is: 0 when nothing of the apply waits for it, else one more than the
    /// most urgent group that does; a Deployment counts one more for the wait for its readiness after its
    /// apply. Of the groups ready at once, the more urgent are sent first.
    pub urgency: usize,
}

/// The apply's order of `objects` (see the module documentation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// One group per kind, by [`depth`] and then by first appearance.
    pub groups: Vec<Group>,
    /// Every object's index, by its group's depth and then in the order given: the order in which
    /// failures are reported.
    pub order: Vec<usize>,
}

/// Plan the apply of `objects`, whose kinds `kind` tells.
pub fn plan<T>(objects: &[T], kind: impl Fn(&T) -> &str) -> Plan {
    let mut groups: Vec<Group> = Vec::new();
    for (i, obj) in objects.iter().enumerate() {
        let k = kind(obj);
        match groups.iter_mut().find(|g| g.kind == k) {
            Some(g) => g.members.push(i),
            None => groups.push(Group {
                kind: k.to_string(),
                members: vec![i],
                after: Vec::new(),
                retry_after: Vec::new(),
                urgency: 0,
            }),
        }
    }
    // Stable: kinds of one depth keep the order they first appear in.
    groups.sort_by_key(|g| depth(&g.kind));
    let kinds: Vec<String> = groups.iter().map(|g| g.kind.clone()).collect();
    let indexes = |g: &Group, wanted: Vec<&str>| -> Vec<usize> {
        kinds
            .iter()
            .enumerate()
            .filter(|(_, k)| *k != &g.kind && wanted.contains(&k.as_str()))
            .map(|(j, _)| j)
            .collect()
    };
    for g in &mut groups {
        g.after = indexes(g, needs(&g.kind));
        g.retry_after = indexes(g, retry_after(&g.kind));
    }
    // A group waits only for groups before it (of a smaller depth): from the last to the first, every group
    // that waits for one is settled before it.
    for g in (0..groups.len()).rev() {
        let waited_for = usize::from(groups[g].kind == "Deployment");
        let behind = groups[g + 1..]
            .iter()
            .filter(|h| h.after.contains(&g))
            .map(|h| h.urgency + 1)
            .max()
            .unwrap_or(0);
        groups[g].urgency = waited_for.max(behind);
    }
    let order = groups.iter().flat_map(|g| g.members.iter().copied()).collect();
    Plan { groups, order }
}

/// The kind of a manifest object (empty when it has none).
pub fn kind_of(obj: &Value) -> &str {
    obj["kind"].as_str().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(kind: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name}})
    }

    fn name(o: &Value) -> &str {
        o["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// Whether `first`'s group is applied before `then`'s in `plan` (directly or through others).
    fn comes_before(plan: &Plan, first: &str, then: &str) -> bool {
        let index = |k: &str| {
            plan.groups
                .iter()
                .position(|g| g.kind == k)
                .expect("a group of the kind")
        };
        let (first, then) = (index(first), index(then));
        let mut stack = vec![then];
        while let Some(g) = stack.pop() {
            for &a in &plan.groups[g].after {
                if a == first {
                    return true;
                }
                stack.push(a);
            }
        }
        false
    }

    /// Whether a refused member of `then`'s group is sent again after `first`'s group in `plan`.
    fn retried_after(plan: &Plan, first: &str, then: &str) -> bool {
        let index = |k: &str| plan.groups.iter().position(|g| g.kind == k);
        match (index(first), index(then)) {
            (Some(first), Some(then)) => plan.groups[then].retry_after.contains(&first),
            _ => false,
        }
    }

    #[test]
    fn what_must_come_first_comes_first() {
        let kinds = [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
            "Deployment",
            "RoleBinding",
            "ClusterRoleBinding",
            "Widget",
            "Secret",
            "ConfigMap",
            "Service",
            "ServiceAccount",
            "Role",
            "ClusterRole",
            "PriorityClass",
            "Namespace",
            "CustomResourceDefinition",
            "NetworkPolicy",
        ];
        let objects: Vec<Value> = kinds.iter().map(|k| obj(k, k)).collect();
        let plan = plan(&objects, kind_of);
        // The certificate Secrets before the webhook configurations that carry their CA; the Services they
        // call beside them.
        for webhook in ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"] {
            assert!(comes_before(&plan, "Secret", webhook));
            assert!(!comes_before(&plan, "Service", webhook));
        }
        // What a Deployment's pods run as and read before it.
        for used in ["ServiceAccount", "ConfigMap", "Secret", "PriorityClass", "Namespace"] {
            assert!(comes_before(&plan, used, "Deployment"), "{used}");
        }
        // Bindings go with the roles they reference (the manager may bind them), and one refused for want
        // of its role is sent again once the roles are applied.
        for (role, binding) in [
            ("Role", "RoleBinding"),
            ("ClusterRole", "RoleBinding"),
            ("ClusterRole", "ClusterRoleBinding"),
        ] {
            assert!(!comes_before(&plan, role, binding), "{binding} waits for {role}");
            assert!(retried_after(&plan, role, binding), "{binding} retried after {role}");
        }
        assert!(!comes_before(&plan, "ServiceAccount", "RoleBinding"));
        assert!(!comes_before(&plan, "ServiceAccount", "ClusterRoleBinding"));
        assert!(comes_before(&plan, "Namespace", "RoleBinding"));
        // CRDs before their instances (a kind not named), which come after everything named.
        assert!(comes_before(&plan, "CustomResourceDefinition", "Widget"));
        for k in KNOWN {
            assert!(comes_before(&plan, k, "Widget"), "{k}");
        }
        // Objects in a Namespace after it.
        for k in [
            "ServiceAccount",
            "ConfigMap",
            "Secret",
            "Service",
            "NetworkPolicy",
            "Role",
        ] {
            assert!(comes_before(&plan, "Namespace", k), "{k}");
        }
    }

    #[test]
    fn what_needs_nothing_of_each_other_goes_together() {
        // The CRDs (the slowest writes) hold up nothing of the module but instances of them.
        let objects: Vec<Value> = [
            "CustomResourceDefinition",
            "ServiceAccount",
            "Secret",
            "Deployment",
            "ClusterRole",
        ]
        .iter()
        .map(|k| obj(k, k))
        .collect();
        let plan = plan(&objects, kind_of);
        for k in ["ServiceAccount", "Secret", "Deployment", "ClusterRole"] {
            assert!(!comes_before(&plan, "CustomResourceDefinition", k), "{k}");
        }
        assert!(!comes_before(&plan, "Secret", "ServiceAccount"));
        assert!(!comes_before(&plan, "ServiceAccount", "Secret"));
    }

    #[test]
    fn a_kind_needs_only_kinds_of_a_smaller_depth() {
        for k in KNOWN.iter().copied().chain(["Widget"]) {
            for n in needs(k) {
                assert!(depth(n) < depth(k), "{k} needs {n}");
            }
            for r in retry_after(k) {
                assert!(depth(r) < depth(k), "{k} is retried after {r}");
            }
        }
        assert_eq!(depth("CustomResourceDefinition"), 0);
        assert!(depth("Widget") > depth("Deployment"));
    }

    #[test]
    fn groups_keep_the_order_given_and_failures_are_ordered_by_depth() {
        let objects = vec![
            obj("ValidatingWebhookConfiguration", "vwc"),
            obj("ConfigMap", "cm"),
            obj("Deployment", "deploy"),
            obj("Secret", "webhook-server-cert"),
            obj("CustomResourceDefinition", "crd"),
            obj("ServiceAccount", "sa"),
            obj("MutatingWebhookConfiguration", "mwc"),
            obj("Secret", "ca-server-cert"),
        ];
        let plan = plan(&objects, kind_of);
        let order: Vec<&str> = plan.order.iter().map(|&i| name(&objects[i])).collect();
        assert_eq!(
            order,
            [
                "crd",
                "cm",
                "webhook-server-cert",
                "ca-server-cert",
                "sa",
                "vwc",
                "deploy",
                "mwc"
            ]
        );
        let secrets = plan.groups.iter().find(|g| g.kind == "Secret").expect("Secrets");
        assert_eq!(secrets.members, vec![3, 7]);
        assert!(
            secrets.after.is_empty(),
            "no Namespace in the apply: the Secrets wait for nothing"
        );
        assert!(plan.order.len() == objects.len());
    }

    #[test]
    fn only_a_binding_is_refused_for_its_role_and_only_by_a_404() {
        assert!(refused_for_its_role("RoleBinding", Some(404)));
        assert!(refused_for_its_role("ClusterRoleBinding", Some(404)));
        for code in [None, Some(403), Some(409), Some(422), Some(500)] {
            assert!(!refused_for_its_role("RoleBinding", code), "{code:?}");
        }
        for kind in ["Role", "ClusterRole", "Deployment", "Widget"] {
            assert!(!refused_for_its_role(kind, Some(404)), "{kind}");
        }
    }

    #[test]
    fn a_binding_is_reported_after_its_role_and_waits_for_nothing_else() {
        let objects = vec![
            obj("RoleBinding", "rb"),
            obj("ClusterRoleBinding", "crb"),
            obj("Role", "r"),
            obj("ServiceAccount", "sa"),
            obj("ClusterRole", "cr"),
        ];
        let plan = plan(&objects, kind_of);
        let order: Vec<&str> = plan.order.iter().map(|&i| name(&objects[i])).collect();
        let at = |n: &str| order.iter().position(|o| *o == n).expect("in the order");
        assert!(
            at("r") < at("rb") && at("cr") < at("rb") && at("cr") < at("crb"),
            "{order:?}"
        );
        for binding in ["RoleBinding", "ClusterRoleBinding"] {
            let group = plan.groups.iter().find(|g| g.kind == binding).expect("a group");
            assert!(group.after.is_empty(), "{binding} waits for {:?}", group.after);
        }
        let rb = plan
            .groups
            .iter()
            .find(|g| g.kind == "RoleBinding")
            .expect("RoleBindings");
        let kinds: Vec<&str> = rb.retry_after.iter().map(|&g| plan.groups[g].kind.as_str()).collect();
        assert_eq!(kinds, ["ClusterRole", "Role"]);
    }

    #[test]
    fn the_deployments_chain_is_the_most_urgent() {
        let objects = vec![
            obj("CustomResourceDefinition", "crd"),
            obj("NetworkPolicy", "np"),
            obj("ValidatingWebhookConfiguration", "vwc"),
            obj("Service", "svc"),
            obj("Deployment", "deploy"),
            obj("ConfigMap", "cm"),
            obj("Secret", "s"),
            obj("Namespace", "ns"),
        ];
        let urgency = |objects: &[Value], kind: &str| {
            plan(objects, kind_of)
                .groups
                .iter()
                .find(|g| g.kind == kind)
                .map(|g| g.urgency)
                .expect("a group of the kind")
        };
        // What the Deployment's pods need, then the Deployment (its readiness is waited for after it);
        // nothing waits for the rest.
        assert_eq!(urgency(&objects, "ConfigMap"), 2);
        assert_eq!(urgency(&objects, "Secret"), 2);
        assert_eq!(urgency(&objects, "Deployment"), 1);
        for kind in [
            "CustomResourceDefinition",
            "NetworkPolicy",
            "Service",
            "ValidatingWebhookConfiguration",
        ] {
            assert_eq!(urgency(&objects, kind), 0, "{kind}");
        }
        assert_eq!(urgency(&objects, "Namespace"), 3, "everything in it waits for it");
        // A custom resource waits for every kind named, the CRDs among them.
        let mut with_widget = objects.clone();
        with_widget.push(obj("Widget", "w"));
        assert_eq!(urgency(&with_widget, "Widget"), 0);
        assert_eq!(urgency(&with_widget, "CustomResourceDefinition"), 1);
        assert_eq!(
            urgency(&with_widget, "ValidatingWebhookConfiguration"),
            1,
            "the Widget waits for the webhook configurations"
        );

        // Without custom resources, nothing waits for the CRDs.
        let module =
            crate::manifests::module_resources(std::path::Path::new("")).expect("the built-in module resources");
        let plan = super::plan(&module.apply, kind_of);
        let mut first: Vec<&Group> = plan.groups.iter().filter(|g| g.after.is_empty()).collect();
        first.sort_by_key(|g| std::cmp::Reverse(g.urgency));
        let kinds: Vec<&str> = first.iter().map(|g| g.kind.as_str()).collect();
        let at = |k: &str| kinds.iter().position(|x| *x == k).expect("sent first");
        for needed in ["ServiceAccount", "ConfigMap", "Secret"] {
            for other in ["CustomResourceDefinition", "ClusterRole", "Role", "Service"] {
                assert!(at(needed) < at(other), "{needed} after {other}: {kinds:?}");
            }
        }
    }

    #[test]
    fn nothing_to_apply_is_an_empty_plan() {
        let plan = plan(&Vec::<Value>::new(), kind_of);
        assert!(plan.groups.is_empty() && plan.order.is_empty());
    }

    #[test]
    fn the_module_resources_take_two_steps() {
        let module =
            crate::manifests::module_resources(std::path::Path::new("")).expect("the built-in module resources");
        let plan = plan(&module.apply, kind_of);
        assert_eq!(plan.order.len(), module.apply.len());
        // The longest chain of groups: one group after another at most once.
        fn chain(plan: &Plan, g: usize) -> usize {
            1 + plan.groups[g].after.iter().map(|&a| chain(plan, a)).max().unwrap_or(0)
        }
        let longest = (0..plan.groups.len()).map(|g| chain(&plan, g)).max().unwrap_or(0);
        assert_eq!(longest, 2, "{:#?}", plan.groups);
    }
}
