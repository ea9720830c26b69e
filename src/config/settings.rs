//! [`Settings`]: one immutable snapshot of what configuration gives a pass.

use super::keys::Config;
use crate::manifests::{self, ModuleResources};
use anyhow::Context as _;
use serde_json::Value;
use std::sync::Arc;

/// Everything a pass reads from configuration, as one immutable snapshot: the configuration (the flags
/// with the runtime ConfigMap on top) and the manifests it names. The runtime follower publishes a new
/// one on every change ([`super::runtime`]); a pass takes one at its start and uses it throughout, so a
/// change in the middle of a pass applies to the next pass, never to half of this one.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// The configuration.
    pub config: Config,
    /// The operand's manifests (`ResourcesPath`).
    pub module: Arc<ModuleResources>,
    /// The operand's network policies (`ManagerResourcesPath`).
    pub network_policies: Arc<Vec<Value>>,
}

impl Settings {
    /// `config` with the manifests it names (built in, or from its directories); an error when they do
    /// not load.
    pub fn load(config: Config) -> anyhow::Result<Self> {
        let module = manifests::module_resources(&config.resources_path).with_context(|| {
            format!(
                "loading module resources from {}",
                manifests::describe(&config.resources_path)
            )
        })?;
        let policies = manifests::network_policies(&config.manager_resources_path).with_context(|| {
            format!(
                "loading network policies from {}",
                manifests::describe(&config.manager_resources_path)
            )
        })?;
        Ok(Self {
            config,
            module: Arc::new(module),
            network_policies: Arc::new(policies),
        })
    }
}
