//! Resolving the kinds of the module resources for this term ([`crate::reconciler::kinds`]): discovery once
//! per apiVersion not yet known, nothing at all in a steady state.

use super::api::Cluster;
use crate::reconciler::kinds::{self, Kinds, KindsError};
use crate::reconciler::resources::{self, ModuleResources};
use serde_json::Value;
use std::sync::Arc;

/// Every `(apiVersion, kind, where it comes from)` of `module` and `extra` (the network policies), each once:
/// the kinds a pass may apply or delete. Pure.
pub fn wanted(module: &ModuleResources, extra: &[Value]) -> Vec<(String, String, String)> {
    let mut wanted: Vec<(String, String, String)> = module
        .sources
        .iter()
        .map(|((api_version, kind), file)| (api_version.clone(), kind.clone(), file.clone()))
        .collect();
    for (objects, source) in [
        (&module.apply[..], "the module resources"),
        (&module.delete[..], "the module resources"),
        (extra, "the manager's network policies"),
    ] {
        for obj in objects {
            let (api_version, kind, _, _) = resources::identity(obj);
            if !wanted.iter().any(|(v, k, _)| *v == api_version && *k == kind) {
                wanted.push((api_version, kind, source.to_string()));
            }
        }
    }
    wanted
}

impl Cluster<'_> {
    /// The kinds of `module` and of `extra` (the network policies), as the API server serves them, kept
    /// for the term. `tolerate_unknown`: a kind nobody knows is left out (a removal has nothing of it to
    /// delete) instead of failing.
    pub async fn resolve_kinds(
        &self,
        module: &ModuleResources,
        extra: &[Value],
        tolerate_unknown: bool,
    ) -> Result<Arc<Kinds>, KindsError> {
        let wanted = wanted(module, extra);
        let all_known = |known: &Kinds| wanted.iter().all(|(v, k, _)| known.get(v, k).is_some());
        let known = self.ctx.kinds();
        if all_known(&known) {
            return Ok(known);
        }
        // One discovery at a time in a term: the one the term began with may be under way, and its answer
        // may be all this pass needs.
        let _resolving = self.ctx.resolving_kinds().await;
        let known = self.ctx.kinds();
        if all_known(&known) {
            return Ok(known);
        }
        let resolved =
            Arc::new(kinds::resolve(&self.client(), &known, &wanted, &module.apply, tolerate_unknown).await?);
        self.ctx.set_kinds(resolved.clone());
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(api_version: &str, kind: &str, name: &str) -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}})
    }

    #[test]
    fn every_kind_is_wanted_once_with_where_it_comes_from() {
        let module = ModuleResources {
            apply: vec![
                obj("v1", "ConfigMap", "a"),
                obj("v1", "ConfigMap", "b"),
                obj("apps/v1", "Deployment", "d"),
            ],
            delete: vec![obj("policy/v1", "PodDisruptionBudget", "old")],
            chart_version: "v1".into(),
            sources: [
                (("v1".to_string(), "ConfigMap".to_string()), "apply/a.yml".to_string()),
                (
                    ("apps/v1".to_string(), "Deployment".to_string()),
                    "apply/d.yml".to_string(),
                ),
            ]
            .into(),
        };
        let policies = [
            obj("networking.k8s.io/v1", "NetworkPolicy", "p1"),
            obj("networking.k8s.io/v1", "NetworkPolicy", "p2"),
        ];
        let wanted = wanted(&module, &policies);
        let row = |v: &str, k: &str, s: &str| (v.to_string(), k.to_string(), s.to_string());
        assert_eq!(
            wanted,
            vec![
                row("apps/v1", "Deployment", "apply/d.yml"),
                row("v1", "ConfigMap", "apply/a.yml"),
                row("policy/v1", "PodDisruptionBudget", "the module resources"),
                row(
                    "networking.k8s.io/v1",
                    "NetworkPolicy",
                    "the manager's network policies"
                ),
            ]
        );
    }
}
