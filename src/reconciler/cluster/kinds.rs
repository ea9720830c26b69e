//! Resolving the kinds of the module resources for this term ([`crate::reconciler::kinds`]): discovery once
//! per apiVersion not yet known, nothing at all in a steady state.

use super::api::Cluster;
use crate::reconciler::kinds::{self, Kinds, KindsError};
use crate::reconciler::resources::{self, ModuleResources};
use serde_json::Value;
use std::sync::Arc;

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
        let known = self.ctx.kinds();
        let mut wanted: Vec<(String, String, String)> = module
            .sources
            .iter()
            .map(|((api_version, kind), file)| (api_version.clone(), kind.clone(), file.clone()))
            .collect();
        let named =
            |wanted: &[(String, String, String)], v: &str, k: &str| wanted.iter().any(|(wv, wk, _)| wv == v && wk == k);
        for (objects, source) in [
            (&module.apply, "the module resources"),
            (&module.delete, "the module resources"),
            (&extra.to_vec(), "the manager's network policies"),
        ] {
            for obj in objects {
                let (api_version, kind, _, _) = resources::identity(obj);
                if !named(&wanted, &api_version, &kind) {
                    wanted.push((api_version, kind, source.to_string()));
                }
            }
        }
        if wanted.iter().all(|(v, k, _)| known.get(v, k).is_some()) {
            return Ok(known);
        }
        let resolved =
            Arc::new(kinds::resolve(&self.client(), &known, &wanted, &module.apply, tolerate_unknown).await?);
        self.ctx.set_kinds(resolved.clone());
        Ok(resolved)
    }
}
