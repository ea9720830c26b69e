//! The operand's manifests built into the binary (by `build.rs`): `module-resources/` (`apply/`, `delete/`,
//! `chart-version`) and `manager-resources/network-policies/`.
//!
//! They are the default for `run` and `local`, so `btp-manager` works from any working directory.
//! `--resources-path` / `--manager-resources-path` (or the runtime ConfigMap keys `ResourcesPath` /
//! `ManagerResourcesPath`) name a directory to read instead; the empty path selects the built-in copy
//! (see docs/behaviour.md#module-resources).

use crate::reconciler::network_policies;
use crate::reconciler::resources::{self, LoadError, ModuleResources};
use serde_json::Value;
use std::path::Path;

mod generated {
    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
}

pub use generated::{CHART_VERSION, MODULE_APPLY, MODULE_DELETE, NETWORK_POLICIES};

/// How errors name the built-in module resources.
pub const MODULE_RESOURCES: &str = "(built-in) module-resources";
/// How errors name the built-in manager resources.
pub const MANAGER_RESOURCES: &str = "(built-in) manager-resources";

/// Whether `path` selects the built-in copy: the empty path (no flag given, no ConfigMap key).
pub fn is_builtin(path: &Path) -> bool {
    path.as_os_str().is_empty()
}

/// `path` for messages: its display, or "the copy built into the binary".
pub fn describe(path: &Path) -> String {
    if is_builtin(path) {
        "the copy built into the binary".into()
    } else {
        path.display().to_string()
    }
}

/// The built-in `module-resources/`.
pub fn module_resources() -> Result<ModuleResources, LoadError> {
    resources::from_files(MODULE_APPLY, MODULE_DELETE, CHART_VERSION)
}

/// The built-in `manager-resources/network-policies/`.
pub fn network_policies() -> Result<Vec<Value>, LoadError> {
    network_policies::from_files(NETWORK_POLICIES)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;

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

    #[test]
    fn loading_the_built_in_copy_gives_what_loading_the_directories_gives() {
        let from_disk = resources::load(&root().join("module-resources")).unwrap();
        let built_in = resources::load(Path::new("")).unwrap();
        assert_eq!(built_in, from_disk);
        assert!(!built_in.apply.is_empty());
        assert_eq!(built_in.chart_version, "v0.11.10");
        let from_disk = network_policies::load(&root().join("manager-resources")).unwrap();
        let built_in = network_policies::load(Path::new("")).unwrap();
        assert_eq!(built_in, from_disk);
        assert_eq!(built_in.len(), 4);
    }

    #[test]
    fn built_in_files_follow_the_directory_rules() {
        // Same filter and order as a directory: non-YAML names are skipped, files are read by name.
        let module = resources::from_files(
            &[
                ("b.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: second\n"),
                ("README.md", "not yaml: ["),
                (
                    "a.yml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: first\n---\n",
                ),
            ],
            &[],
            " v1 \n",
        )
        .unwrap();
        let names: Vec<_> = module
            .apply
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["first", "second"]);
        assert_eq!(module.chart_version, "v1");
        let err = resources::from_files(&[("x.yaml", "kind: ConfigMap\n")], &[], "v1").unwrap_err();
        assert!(err.to_string().contains("built-in"), "{err}");
        let err =
            network_policies::from_files(&[("p.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")])
                .unwrap_err();
        assert!(err.to_string().contains("NetworkPolicy"), "{err}");
    }

    #[test]
    fn the_empty_path_means_built_in() {
        assert!(is_builtin(Path::new("")));
        assert!(!is_builtin(Path::new("./module-resources")));
        assert_eq!(describe(Path::new("")), "the copy built into the binary");
        assert_eq!(describe(Path::new("/x")), "/x");
    }
}
