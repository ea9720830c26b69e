//! The runtime configuration (docs/behaviour.md#runtime-configmap): the flags with the runtime ConfigMap's keys on top, and
//! the manifests that configuration names, as one [`Settings`] per change. What is decided here is pure
//! but for the loading of manifests and the logs; reading and watching the ConfigMap, and publishing the
//! settings, is the controller's (`reconciler::controller`).

use super::keys::{Config, ConfigProblem};
use super::settings::Settings;
use crate::manifests::{self, LoadError};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

/// Log a ConfigMap key that was not applied; keys that are accepted but unused only when `first_time`.
fn log_problem(problem: &ConfigProblem, first_time: bool) {
    if problem.not_used() {
        if first_time {
            tracing::info!(key = %problem.key, reason = %problem.reason, "runtime ConfigMap key accepted");
        }
    } else {
        tracing::warn!(key = %problem.key, reason = %problem.reason, "runtime ConfigMap value not applied; the previous value stays");
    }
}

/// `flags` (defaults and flags) with the runtime ConfigMap's `data` on top, as the manager reads it once at
/// its start; every key not applied is logged.
pub fn at_start(flags: &Config, data: &BTreeMap<String, String>) -> Config {
    let mut config = flags.clone();
    for problem in config.apply_configmap(data) {
        log_problem(&problem, true);
    }
    config
}

/// `running`'s manifests when `next` names the same directory as `current`, else those `next` names.
fn reload<T>(
    next: &Path,
    current: &Path,
    running: &Arc<T>,
    load: fn(&Path) -> Result<T, LoadError>,
) -> Result<Arc<T>, LoadError> {
    if next == current {
        Ok(running.clone())
    } else {
        load(next).map(Arc::new)
    }
}

/// The settings a term starts with: `config` (the flags and the runtime ConfigMap, [`at_start`]) with the
/// manifests it names. `base` holds the flags' configuration and manifests: a directory that does not load
/// leaves its manifests (and is logged).
pub fn start(base: &Settings, config: Config) -> Settings {
    let module = reload(
        &config.resources_path,
        &base.config.resources_path,
        &base.module,
        manifests::module_resources,
    )
    .unwrap_or_else(|e| {
        tracing::warn!(error = %e, "module resources from ResourcesPath not loaded; the built-in ones stay");
        base.module.clone()
    });
    let network_policies = reload(
        &config.manager_resources_path,
        &base.config.manager_resources_path,
        &base.network_policies,
        manifests::network_policies,
    )
    .unwrap_or_else(|e| {
        tracing::warn!(error = %e, "network policies from ManagerResourcesPath not loaded");
        base.network_policies.clone()
    });
    Settings {
        config,
        module,
        network_policies,
    }
}

/// Follows the runtime ConfigMap through one term: on every change, the flags with the ConfigMap's keys on
/// top become the configuration; when it is deleted, the flags again (deleting reverts to the defaults). An
/// invalid value keeps the one applied before; keys naming watched objects wait for a restart
/// ([`super::Applies::AtStart`]); a directory that does not load keeps the running manifests.
pub struct Follower {
    /// The configuration from defaults and flags.
    flags: Config,
    /// The keys whose problem was logged (a key accepted without use is logged once).
    logged: BTreeSet<String>,
    /// The last value of each key that applied, for a later invalid one.
    last_good: BTreeMap<String, String>,
}

impl Follower {
    /// A follower on top of `flags`.
    pub fn new(flags: Config) -> Self {
        Self {
            flags,
            logged: BTreeSet::new(),
            last_good: BTreeMap::new(),
        }
    }

    /// The settings once the runtime ConfigMap holds `data` (None: it was deleted), `running` being the
    /// settings in use.
    pub fn next(&mut self, data: Option<&BTreeMap<String, String>>, running: &Settings) -> Settings {
        let mut next = self.flags.clone();
        if let Some(data) = data {
            let problems = next.clone().apply_configmap(data);
            let mut effective = data.clone();
            for problem in &problems {
                log_problem(problem, self.logged.insert(problem.key.clone()));
                if problem.not_used() {
                    continue;
                }
                match self.last_good.get(&problem.key) {
                    Some(previous) => effective.insert(problem.key.clone(), previous.clone()),
                    None => effective.remove(&problem.key),
                };
            }
            next.apply_configmap(&effective);
            self.last_good = effective;
        } else {
            self.last_good.clear();
        }
        for key in next.keep_restart_only(&running.config) {
            tracing::warn!(
                key,
                "runtime ConfigMap: this key names watched objects and takes effect at the next start"
            );
        }
        let current = &running.config;
        let module = match reload(
            &next.resources_path,
            &current.resources_path,
            &running.module,
            manifests::module_resources,
        ) {
            Ok(module) => module,
            Err(e) => {
                tracing::warn!(error = %e, "module resources from the new ResourcesPath not loaded; the previous stay");
                next.resources_path = current.resources_path.clone();
                running.module.clone()
            }
        };
        let network_policies = match reload(
            &next.manager_resources_path,
            &current.manager_resources_path,
            &running.network_policies,
            manifests::network_policies,
        ) {
            Ok(policies) => policies,
            Err(e) => {
                tracing::warn!(error = %e, "network policies from the new ManagerResourcesPath not loaded; the previous stay");
                next.manager_resources_path = current.manager_resources_path.clone();
                running.network_policies.clone()
            }
        };
        Settings {
            config: next,
            module,
            network_policies,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn built_in() -> Settings {
        Settings::load(Config::default()).unwrap()
    }

    #[test]
    fn an_invalid_value_keeps_the_last_good_one_and_deleting_reverts_to_the_flags() {
        let mut follower = Follower::new(Config::default());
        let running = built_in();
        let first = follower.next(Some(&data(&[("ReadyTimeout", "10s")])), &running);
        assert_eq!(first.config.ready_timeout, Duration::from_secs(10));
        let second = follower.next(
            Some(&data(&[
                ("ReadyTimeout", "soon"),
                ("EnableLimitedCache", "false"),
                ("DeploymentName", "elsewhere"),
                ("ProbeInterval", "1h"),
            ])),
            &first,
        );
        assert_eq!(
            second.config.ready_timeout,
            Duration::from_secs(10),
            "the last good value"
        );
        assert_eq!(second.config.enable_limited_cache, "false");
        assert_eq!(
            second.config.deployment_name,
            Config::default().deployment_name,
            "waits for a restart"
        );
        assert!(
            Arc::ptr_eq(&second.module, &running.module),
            "same directory: not reloaded"
        );
        let deleted = follower.next(None, &second);
        assert_eq!(deleted.config, Config::default());
        // After a deletion, an invalid value has no good one to keep: the flag's applies.
        let after = follower.next(Some(&data(&[("ReadyTimeout", "soon")])), &deleted);
        assert_eq!(after.config.ready_timeout, Config::default().ready_timeout);
    }

    #[test]
    fn a_directory_that_does_not_load_keeps_the_running_manifests() {
        let mut follower = Follower::new(Config::default());
        let running = built_in();
        let missing = std::env::temp_dir().join(format!("btp-runtime-missing-{}", std::process::id()));
        let missing = missing.display().to_string();
        let next = follower.next(
            Some(&data(&[
                ("ResourcesPath", &missing),
                ("ManagerResourcesPath", &missing),
            ])),
            &running,
        );
        assert_eq!(next, running, "paths and manifests stay as they were");
        // At start the path stays as configured (the flags' manifests are used).
        let config = Config {
            resources_path: missing.clone().into(),
            ..Config::default()
        };
        let started = start(&running, config.clone());
        assert_eq!(started.config, config);
        assert!(Arc::ptr_eq(&started.module, &running.module));
    }
}
