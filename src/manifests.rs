//! Loading the operand's manifests (docs/behaviour.md#module-resources): the module resources (`apply/`,
//! `delete/`, `chart-version`) and the network policies (`network-policies/`), each from the copy built
//! into the binary ([`crate::embedded`]) or from a directory. One loader reads both, from either source,
//! with the same rules: only top-level `*.yml`/`*.yaml` files, in lexical file-name order, each possibly
//! holding several documents (empty ones skipped), and every document checked before any is used.
//!
//! The empty path (no flag given, no ConfigMap key) selects the built-in copy ([`Source::of`]). Preparing
//! the objects to apply is [`crate::reconciler::resources`]'s; deciding about the policies is
//! [`crate::reconciler::network_policies`]'s.

use crate::embedded;
use serde_json::Value;
use std::borrow::Cow;
use std::path::{Path, PathBuf};

/// Loading failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file or directory could not be read.
    #[error("reading {path}: {source}")]
    Read {
        /// Which.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A document is not valid YAML or not a Kubernetes object.
    #[error("{path}: {reason}")]
    Invalid {
        /// Which file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// The operand's manifests as shipped with the manager.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModuleResources {
    /// Objects to apply, in file-name then document order.
    pub apply: Vec<Value>,
    /// Objects from older chart versions to delete.
    pub delete: Vec<Value>,
    /// The chart version (label `chart-version`).
    pub chart_version: String,
    /// `(apiVersion, kind)` → the file it first appears in, as `apply/<file>` or `delete/<file>` (for errors
    /// about the kind).
    pub sources: std::collections::BTreeMap<(String, String), String>,
}

/// Where manifests come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source<'a> {
    /// The copy built into the binary.
    BuiltIn,
    /// A directory.
    Directory(&'a Path),
}

impl<'a> Source<'a> {
    /// The source a configured path names: the empty path (no flag given, no ConfigMap key) selects the
    /// built-in copy.
    pub fn of(path: &'a Path) -> Self {
        if path.as_os_str().is_empty() {
            Self::BuiltIn
        } else {
            Self::Directory(path)
        }
    }

    /// For messages: the directory, or "the copy built into the binary".
    pub fn describe(&self) -> String {
        match self {
            Self::BuiltIn => "the copy built into the binary".into(),
            Self::Directory(path) => path.display().to_string(),
        }
    }
}

/// `path` for messages (see [`Source::describe`]).
pub fn describe(path: &Path) -> String {
    Source::of(path).describe()
}

/// One directory of YAML files: on disk, or given as `(file name, text)` pairs (the built-in copy) and
/// named for errors by a path.
enum Files<'a> {
    Disk(PathBuf),
    Given(PathBuf, &'a [(&'a str, &'a str)]),
}

/// What a directory that does not exist means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Nothing (`delete/` is often empty, and an empty directory is not in git).
    Empty,
    /// An error naming the directory (it ships with the manager).
    Error,
}

/// A check of one document: why it may not be loaded.
type Check = fn(&Value) -> Result<(), String>;

fn is_yaml(name: &Path) -> bool {
    name.extension().is_some_and(|e| e == "yml" || e == "yaml")
}

/// The YAML files of `files` with their text, in lexical file-name order.
fn yaml_files<'a>(files: &Files<'a>, missing: Missing) -> Result<Vec<(PathBuf, Cow<'a, str>)>, LoadError> {
    let read_error = |path: &Path| {
        let path = path.to_path_buf();
        move |source| LoadError::Read { path, source }
    };
    match files {
        Files::Disk(dir) => {
            let entries = match std::fs::read_dir(dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && missing == Missing::Empty => {
                    return Ok(Vec::new())
                }
                Err(e) => return Err(read_error(dir)(e)),
            };
            let mut paths: Vec<PathBuf> = entries
                .map(|entry| entry.map(|e| e.path()))
                .collect::<Result<_, _>>()
                .map_err(read_error(dir))?;
            paths.retain(|p| p.is_file() && is_yaml(p));
            paths.sort();
            paths
                .into_iter()
                .map(|path| {
                    let text = std::fs::read_to_string(&path).map_err(read_error(&path))?;
                    Ok((path, Cow::Owned(text)))
                })
                .collect()
        }
        Files::Given(dir, given) => {
            let mut given: Vec<&(&str, &str)> = given.iter().filter(|(name, _)| is_yaml(Path::new(name))).collect();
            given.sort_by_key(|(name, _)| *name);
            Ok(given
                .into_iter()
                .map(|(name, text)| (dir.join(name), Cow::Borrowed(*text)))
                .collect())
        }
    }
}

/// Every document of every YAML file of `files`, each passing `check`.
fn documents(files: Files<'_>, missing: Missing, check: Check) -> Result<Vec<Value>, LoadError> {
    Ok(documents_from(files, missing, check)?
        .into_iter()
        .map(|(_, doc)| doc)
        .collect())
}

/// Each kind of `objects` with the file it first appears in.
fn sources_of(sets: &[&[(PathBuf, Value)]]) -> std::collections::BTreeMap<(String, String), String> {
    let mut sources = std::collections::BTreeMap::new();
    for (path, doc) in sets.iter().flat_map(|set| set.iter()) {
        let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_string();
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        // Relative to the resources directory (`apply/x.yml`), the same for the built-in copy and a directory.
        let dir = path
            .parent()
            .and_then(Path::file_name)
            .map(|d| d.to_string_lossy().into_owned());
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let relative = dir.map_or_else(|| file.clone(), |d| format!("{d}/{file}"));
        sources.entry((api_version, kind)).or_insert(relative);
    }
    sources
}

/// The documents of `files`, each with the file it is in.
fn documents_from(files: Files<'_>, missing: Missing, check: Check) -> Result<Vec<(PathBuf, Value)>, LoadError> {
    let mut objects = Vec::new();
    for (path, text) in yaml_files(&files, missing)? {
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| LoadError::Invalid {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            if let Err(reason) = check(&doc) {
                return Err(LoadError::Invalid { path, reason });
            }
            objects.push((path.clone(), doc));
        }
    }
    Ok(objects)
}

/// A module resource must name itself.
fn named_object(doc: &Value) -> Result<(), String> {
    let named = doc["apiVersion"].is_string() && doc["kind"].is_string() && doc["metadata"]["name"].is_string();
    if named {
        Ok(())
    } else {
        Err("a document lacks apiVersion, kind or metadata.name".into())
    }
}

/// Load the module resources from `path` (`<path>/apply`, `<path>/delete`, `<path>/chart-version`); the
/// empty path loads the copy built into the binary. A missing `apply/` or `delete/` holds nothing; a
/// missing `chart-version` is an error.
pub fn module_resources(path: &Path) -> Result<ModuleResources, LoadError> {
    let dir = match Source::of(path) {
        Source::BuiltIn => {
            return module_resources_from_files(
                embedded::MODULE_APPLY,
                embedded::MODULE_DELETE,
                embedded::CHART_VERSION,
            )
        }
        Source::Directory(dir) => dir,
    };
    let version_path = dir.join("chart-version");
    let chart_version = std::fs::read_to_string(&version_path)
        .map_err(|source| LoadError::Read {
            path: version_path,
            source,
        })?
        .trim()
        .to_string();
    let apply = documents_from(Files::Disk(dir.join("apply")), Missing::Empty, named_object)?;
    let delete = documents_from(Files::Disk(dir.join("delete")), Missing::Empty, named_object)?;
    Ok(module(apply, delete, chart_version))
}

/// What [`module_resources`] returns for a directory holding these `apply/` and `delete/` files and this
/// `chart-version` text (the copy built into the binary is such files); errors name the files as in the
/// built-in copy.
pub fn module_resources_from_files(
    apply: &[(&str, &str)],
    delete: &[(&str, &str)],
    chart_version: &str,
) -> Result<ModuleResources, LoadError> {
    let dir = Path::new(embedded::MODULE_RESOURCES);
    let apply = documents_from(Files::Given(dir.join("apply"), apply), Missing::Empty, named_object)?;
    let delete = documents_from(Files::Given(dir.join("delete"), delete), Missing::Empty, named_object)?;
    Ok(module(apply, delete, chart_version.trim().to_string()))
}

fn module(apply: Vec<(PathBuf, Value)>, delete: Vec<(PathBuf, Value)>, chart_version: String) -> ModuleResources {
    ModuleResources {
        sources: sources_of(&[&apply, &delete]),
        apply: apply.into_iter().map(|(_, doc)| doc).collect(),
        delete: delete.into_iter().map(|(_, doc)| doc).collect(),
        chart_version,
    }
}

/// Subdirectory of `ManagerResourcesPath` holding the network policies.
pub const NETWORK_POLICIES_DIRECTORY: &str = "network-policies";

/// Kind of every object in [`NETWORK_POLICIES_DIRECTORY`].
pub const NETWORK_POLICY_KIND: &str = "NetworkPolicy";

/// API version of [`NETWORK_POLICY_KIND`].
pub const NETWORK_POLICY_API_VERSION: &str = "networking.k8s.io/v1";

/// A network policy file may hold only named `networking.k8s.io/v1` `NetworkPolicy` documents.
fn network_policy(doc: &Value) -> Result<(), String> {
    if doc["kind"] != NETWORK_POLICY_KIND || doc["apiVersion"] != NETWORK_POLICY_API_VERSION {
        return Err(format!(
            "expected only {NETWORK_POLICY_API_VERSION} {NETWORK_POLICY_KIND} documents, found {} {}",
            doc["apiVersion"], doc["kind"]
        ));
    }
    match doc["metadata"]["name"].as_str() {
        Some(name) if !name.is_empty() => Ok(()),
        _ => Err(format!("a {NETWORK_POLICY_KIND} document lacks metadata.name")),
    }
}

/// Load every NetworkPolicy from `<path>/network-policies/`; the empty path loads the copy built into the
/// binary.
///
/// Every document must be a `networking.k8s.io/v1` `NetworkPolicy` with a `metadata.name`, otherwise the
/// whole load fails with [`LoadError::Invalid`]. The directory ships with the manager, so a missing (or
/// unreadable) directory is an error ([`LoadError::Read`] naming the directory), not an empty list. A
/// directory without YAML files yields an empty list.
pub fn network_policies(path: &Path) -> Result<Vec<Value>, LoadError> {
    match Source::of(path) {
        Source::BuiltIn => network_policies_from_files(embedded::NETWORK_POLICIES),
        Source::Directory(dir) => documents(
            Files::Disk(dir.join(NETWORK_POLICIES_DIRECTORY)),
            Missing::Error,
            network_policy,
        ),
    }
}

/// What [`network_policies`] returns for a `network-policies/` directory holding these `(file name, text)`
/// files (the copy built into the binary is such files).
pub fn network_policies_from_files(files: &[(&str, &str)]) -> Result<Vec<Value>, LoadError> {
    let dir = Path::new(embedded::MANAGER_RESOURCES).join(NETWORK_POLICIES_DIRECTORY);
    documents(Files::Given(dir, files), Missing::Error, network_policy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }

    #[test]
    fn loading_the_built_in_copy_gives_what_loading_the_directories_gives() {
        let from_disk = module_resources(&root().join("module-resources")).unwrap();
        let built_in = module_resources(Path::new("")).unwrap();
        assert_eq!(built_in, from_disk);
        assert!(!built_in.apply.is_empty());
        assert_eq!(built_in.chart_version, "v0.11.10");
        let from_disk = network_policies(&root().join("manager-resources")).unwrap();
        let built_in = network_policies(Path::new("")).unwrap();
        assert_eq!(built_in, from_disk);
        assert_eq!(built_in.len(), 4);
    }

    #[test]
    fn built_in_files_follow_the_directory_rules() {
        // Same filter and order as a directory: non-YAML names are skipped, files are read by name.
        let module = module_resources_from_files(
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
        let err = module_resources_from_files(&[("x.yaml", "kind: ConfigMap\n")], &[], "v1").unwrap_err();
        assert!(err.to_string().contains("built-in"), "{err}");
        let err = network_policies_from_files(&[("p.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")])
            .unwrap_err();
        assert!(err.to_string().contains("NetworkPolicy"), "{err}");
    }

    #[test]
    fn a_missing_directory_is_empty_for_the_module_and_an_error_for_the_policies() {
        let dir = std::env::temp_dir().join(format!("btp-manifests-missing-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("chart-version"), "v1\n").unwrap();
        let module = module_resources(&dir);
        let policies = network_policies(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let module = module.unwrap();
        assert!(module.apply.is_empty() && module.delete.is_empty());
        assert!(
            matches!(policies, Err(LoadError::Read { ref path, .. }) if *path == dir.join(NETWORK_POLICIES_DIRECTORY)),
            "{policies:?}"
        );
    }

    #[test]
    fn the_empty_path_means_built_in() {
        assert_eq!(Source::of(Path::new("")), Source::BuiltIn);
        assert_eq!(
            Source::of(Path::new("./module-resources")),
            Source::Directory(Path::new("./module-resources"))
        );
        assert_eq!(describe(Path::new("")), "the copy built into the binary");
        assert_eq!(describe(Path::new("/x")), "/x");
    }
}
