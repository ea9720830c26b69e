//! The operand's manifests built into the binary (by `build.rs`): `module-resources/` (`apply/`, `delete/`,
//! `chart-version`) and `manager-resources/network-policies/`.
//!
//! They are the default for `run` and `local`, so `btp-manager` works from any working directory.
//! `--resources-path` / `--manager-resources-path` (or the runtime ConfigMap keys `ResourcesPath` /
//! `ManagerResourcesPath`) name a directory to read instead; the empty path selects the built-in copy
//! (see docs/behaviour.md#module-resources). Only the files are here: [`crate::manifests`] loads them.

mod generated {
    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
}

pub use generated::{CHART_VERSION, MODULE_APPLY, MODULE_DELETE, NETWORK_POLICIES};

/// How errors name the built-in module resources.
pub const MODULE_RESOURCES: &str = "(built-in) module-resources";
/// How errors name the built-in manager resources.
pub const MANAGER_RESOURCES: &str = "(built-in) manager-resources";

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    /// Every top-level YAML file of `dir` on disk: name -> text.
    fn on_disk(dir: &Path) -> BTreeMap<String, String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return BTreeMap::new();
        };
        entries
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect()
    }

    fn table(files: &[(&str, &str)]) -> BTreeMap<String, String> {
        files.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect()
    }

    #[test]
    fn the_built_in_copy_equals_the_files_in_the_checkout() {
        let module = root().join("module-resources");
        assert_eq!(table(MODULE_APPLY), on_disk(&module.join("apply")));
        assert_eq!(table(MODULE_DELETE), on_disk(&module.join("delete")));
        assert_eq!(
            CHART_VERSION,
            std::fs::read_to_string(module.join("chart-version")).unwrap()
        );
        let policies = root().join("manager-resources");
        assert_eq!(table(NETWORK_POLICIES), on_disk(&policies.join("network-policies")));
        assert!(MODULE_APPLY.len() >= 8, "the operand chart is built in");
        assert!(!NETWORK_POLICIES.is_empty(), "the network policies are built in");
    }
}
