//! In which order the module's objects are applied (docs/behaviour.md#apply): in waves by dependency, each
//! wave's requests sent side by side, a wave only once the one before it has been applied. Pure.
//!
//! 1. [`Wave::Foundation`]: what others are made of or run as: CustomResourceDefinitions (before any
//!    instance of them), Namespaces, ServiceAccounts, PriorityClasses.
//! 2. [`Wave::Configuration`]: Roles and ClusterRoles, ConfigMaps, Secrets (the operand's certificate Secrets
//!    among them), Services, NetworkPolicies.
//! 3. [`Wave::Workloads`]: RoleBindings and ClusterRoleBindings (the API server resolves the role a binding
//!    references to check that its creator holds what it grants, and refuses a binding whose role does not
//!    exist yet with 404), Deployments, the webhook configurations (which carry the CA of the certificate
//!    Secrets of wave 2), and every kind not named here (custom resources included, which come after the
//!    CRDs of wave 1).

use serde_json::Value;

/// Requests in flight at once within a wave, and for the reads before the writes: enough for the module's
/// ~20 reads to go in one round, below the burst of 30 a controller-runtime manager allows itself.
pub const CONCURRENCY: usize = 24;

/// One wave of the apply, in the order they are applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wave {
    /// CRDs, Namespaces, ServiceAccounts, PriorityClasses.
    Foundation,
    /// Roles, ClusterRoles, ConfigMaps, Secrets, Services, NetworkPolicies.
    Configuration,
    /// Role bindings, Deployments, webhook configurations and every kind not named in another wave.
    Workloads,
}

impl Wave {
    /// Every wave, in order.
    pub const ALL: [Wave; 3] = [Wave::Foundation, Wave::Configuration, Wave::Workloads];

    /// The wave objects of `kind` belong to.
    pub fn of(kind: &str) -> Wave {
        match kind {
            "CustomResourceDefinition" | "Namespace" | "ServiceAccount" | "PriorityClass" => Wave::Foundation,
            "ClusterRole" | "Role" | "ConfigMap" | "Secret" | "Service" | "NetworkPolicy" => Wave::Configuration,
            _ => Wave::Workloads,
        }
    }
}

/// `objects` grouped into their waves, in wave order; within a wave, in the order given. Empty waves are left
/// out.
pub fn in_waves<T, F>(objects: impl IntoIterator<Item = T>, kind: F) -> Vec<(Wave, Vec<T>)>
where
    F: Fn(&T) -> &str,
{
    let mut waves: Vec<(Wave, Vec<T>)> = Wave::ALL.iter().map(|w| (*w, Vec::new())).collect();
    for obj in objects {
        let wave = Wave::of(kind(&obj));
        if let Some((_, members)) = waves.iter_mut().find(|(w, _)| *w == wave) {
            members.push(obj);
        }
    }
    waves.retain(|(_, members)| !members.is_empty());
    waves
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

    fn names(waves: &[(Wave, Vec<Value>)]) -> Vec<(Wave, Vec<String>)> {
        waves
            .iter()
            .map(|(w, members)| {
                let names = members
                    .iter()
                    .map(|o| o["metadata"]["name"].as_str().unwrap_or_default().to_string())
                    .collect();
                (*w, names)
            })
            .collect()
    }

    #[test]
    fn objects_go_to_the_wave_of_their_kind_in_the_order_given() {
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
        let waves = in_waves(objects, |o| kind_of(o));
        let s = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(&waves),
            vec![
                (Wave::Foundation, s(&["crd", "sa"])),
                (Wave::Configuration, s(&["cm", "webhook-server-cert", "ca-server-cert"])),
                (Wave::Workloads, s(&["vwc", "deploy", "mwc"])),
            ]
        );
    }

    #[test]
    fn empty_waves_are_left_out() {
        let waves = in_waves(vec![obj("Deployment", "d")], |o| kind_of(o));
        assert_eq!(names(&waves), vec![(Wave::Workloads, vec!["d".to_string()])]);
        assert!(in_waves(Vec::<Value>::new(), |o| kind_of(o)).is_empty());
    }

    #[test]
    fn what_must_come_first_comes_in_an_earlier_wave() {
        // CRDs before their instances (any kind not named, such as a ServiceInstance).
        assert!(Wave::of("CustomResourceDefinition") < Wave::of("ServiceInstance"));
        // The certificate Secrets before the webhook configurations that carry their CA.
        assert!(Wave::of("Secret") < Wave::of("MutatingWebhookConfiguration"));
        assert!(Wave::of("Secret") < Wave::of("ValidatingWebhookConfiguration"));
        // What a Deployment's pods use before it.
        for used in [
            "ServiceAccount",
            "ConfigMap",
            "Secret",
            "Service",
            "PriorityClass",
            "Namespace",
        ] {
            assert!(Wave::of(used) < Wave::of("Deployment"), "{used}");
        }
        // Bindings after the ServiceAccounts they name and the roles they reference (the escalation check
        // resolves the role: a binding sent before it is refused with 404).
        assert!(Wave::of("ServiceAccount") < Wave::of("RoleBinding"));
        assert!(Wave::of("ServiceAccount") < Wave::of("ClusterRoleBinding"));
        assert!(Wave::of("Role") < Wave::of("RoleBinding"));
        assert!(Wave::of("ClusterRole") < Wave::of("ClusterRoleBinding"));
        assert!(Wave::of("ClusterRole") < Wave::of("RoleBinding"));
    }

    #[test]
    fn the_module_resources_need_three_waves_at_most() {
        let module = crate::embedded::module_resources().expect("the built-in module resources");
        let waves = in_waves(module.apply.iter(), |o| kind_of(o));
        assert!(waves.len() <= Wave::ALL.len());
        let count: usize = waves.iter().map(|(_, m)| m.len()).sum();
        assert_eq!(count, module.apply.len());
        assert!(waves.windows(2).all(|w| w[0].0 < w[1].0));
    }
}
