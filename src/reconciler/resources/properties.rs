//! Property tests (issue 12, part 2) of module-resource YAML loading: random and mutated YAML never
//! panics, and every error names the file. `PROPTEST_CASES` sets the number of cases (default here: 128).
//! And the comparison of a CRD (issue 35): text anywhere in its schemas does not make it differ, behaviour does.

use super::*;
use proptest::prelude::*;

/// YAML-ish text: random characters, or a soup of YAML tokens (anchors, aliases, tags, flow and block
/// collections, document markers, scalars).
fn arb_yamlish() -> impl Strategy<Value = String> {
    const TOKENS: &[&str] = &[
        "a: ",
        "- ",
        "\n",
        "  ",
        "{",
        "}",
        "[",
        "]",
        ", ",
        "---\n",
        "...\n",
        "apiVersion: v1\n",
        "kind: X\n",
        "metadata:\n  name: n\n",
        "&a ",
        "*a ",
        "!!str ",
        "!!map ",
        "!x ",
        "? ",
        "|\n",
        ">-\n",
        "'",
        "\"",
        ":",
        "#c\n",
        "0x1F",
        "~",
        "null",
        "<<: *a\n",
        "\t",
        "1e999",
        "-.inf",
        "\\u0000",
        "%YAML 1.2\n",
        "ü",
    ];
    prop_oneof![
        ".{0,300}",
        prop::collection::vec(prop::sample::select(TOKENS), 0..60).prop_map(|t| t.concat()),
    ]
}

/// One edit of a text, on character boundaries.
#[derive(Clone, Debug)]
enum Edit {
    Delete { at: usize, len: usize },
    Insert { at: usize, text: String },
    DuplicateLine { at: usize },
    Truncate { at: usize },
}

fn arb_edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(at, len)| Edit::Delete { at, len }),
        (any::<usize>(), prop_oneof![".{1,8}", "[-:{}\\[\\]&*!|>'\" \n\t]{1,4}"])
            .prop_map(|(at, text)| Edit::Insert { at, text }),
        any::<usize>().prop_map(|at| Edit::DuplicateLine { at }),
        any::<usize>().prop_map(|at| Edit::Truncate { at }),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for edit in edits {
        let n = chars.len().max(1);
        match edit {
            Edit::Delete { at, len } => {
                let start = at % n;
                let end = (start + len).min(chars.len());
                if start < end {
                    chars.drain(start..end);
                }
            }
            Edit::Insert { at, text } => {
                let at = (at % n).min(chars.len());
                chars.splice(at..at, text.chars());
            }
            Edit::DuplicateLine { at } => {
                let s: String = chars.iter().collect();
                let lines: Vec<&str> = s.split('\n').collect();
                let i = at % lines.len();
                let mut out = lines.clone();
                out.insert(i, lines[i]);
                chars = out.join("\n").chars().collect();
            }
            Edit::Truncate { at } => chars.truncate(at % n),
        }
    }
    chars.into_iter().collect()
}

fn check(name: &str, result: Result<ModuleResources, LoadError>) -> Result<(), TestCaseError> {
    match result {
        Ok(resources) => {
            for obj in resources.apply.iter().chain(&resources.delete) {
                prop_assert!(obj["apiVersion"].is_string() && obj["kind"].is_string());
                prop_assert!(obj["metadata"]["name"].is_string());
            }
        }
        Err(e) => {
            let message = e.to_string();
            prop_assert!(message.contains(name), "error does not name {name}: {message}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::proptest_config(128))]

    #[test]
    fn random_yaml_never_panics_and_errors_name_the_file(
        name in "[a-z]{1,8}\\.(yaml|yml)",
        text in arb_yamlish(),
        in_delete in any::<bool>(),
    ) {
        let files = [(name.as_str(), text.as_str())];
        let result = if in_delete { from_files(&[], &files, "v1") } else { from_files(&files, &[], "v1") };
        check(&name, result)?;
    }

    #[test]
    fn mutated_module_resources_never_panic_and_errors_name_the_file(
        file in 0..crate::embedded::MODULE_APPLY.len(),
        edits in prop::collection::vec(arb_edit(), 1..6),
    ) {
        let (name, text) = crate::embedded::MODULE_APPLY[file];
        let mutated = apply(text, &edits);
        // The mutated file among the real ones: an error must name it, not a neighbour.
        let mut files: Vec<(&str, &str)> = crate::embedded::MODULE_APPLY.to_vec();
        files[file] = (name, mutated.as_str());
        let result = from_files(&files, crate::embedded::MODULE_DELETE, crate::embedded::CHART_VERSION);
        check(name, result)?;
    }
}

/// The operand's CRDs as the manager applies them (the built-in manifests).
fn operand_crds() -> Vec<Value> {
    from_files(
        crate::embedded::MODULE_APPLY,
        crate::embedded::MODULE_DELETE,
        crate::embedded::CHART_VERSION,
    )
    .expect("the built-in manifests")
    .apply
    .into_iter()
    .filter(|o| o["kind"] == "CustomResourceDefinition")
    .collect()
}

/// Every schema node of `node` (below a `properties` entry, `items` or `additionalProperties`), as JSON pointers.
fn schema_nodes(node: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    for (name, child) in node["properties"].as_object().into_iter().flatten() {
        schema_nodes(child, format!("{at}/properties/{name}"), out);
    }
    for key in ["items", "additionalProperties"] {
        if node[key].is_object() {
            schema_nodes(&node[key], format!("{at}/{key}"), out);
        }
    }
}

proptest! {
    #![proptest_config(crate::proptest_config(64))]

    /// A stored CRD whose schemas say anything at all in their text keywords, at any node, is already applied;
    /// one whose schema differs in a single type is not, whatever its text (docs/behaviour.md#apply).
    #[test]
    fn a_crd_in_other_words_is_applied_and_one_that_behaves_otherwise_is_not(
        crd in 0usize..2,
        words in prop::collection::vec(("[a-zA-Z .,:]{0,40}", prop::sample::select(&crate::reconciler::resources::crd_schema::TEXT[..])), 1..20),
        picks in prop::collection::vec(any::<prop::sample::Index>(), 20),
        flip in any::<prop::sample::Index>(),
    ) {
        let desired = operand_crds().remove(crd);
        let mut nodes = Vec::new();
        for (v, _) in desired["spec"]["versions"].as_array().unwrap().iter().enumerate() {
            schema_nodes(&desired["spec"]["versions"][v]["schema"]["openAPIV3Schema"], format!("/spec/versions/{v}/schema/openAPIV3Schema"), &mut nodes);
        }
        let mut live = desired.clone();
        for ((text, keyword), pick) in words.iter().zip(&picks) {
            let node = live.pointer_mut(pick.get(nodes.as_slice()).as_str()).unwrap();
            node[*keyword] = json!(text);
        }
        prop_assert!(already_applied(&live, &desired), "other words only");
        let node = live.pointer_mut(flip.get(nodes.as_slice()).as_str()).unwrap();
        let other = if node["type"] == "string" { "integer" } else { "string" };
        node["type"] = json!(other);
        prop_assert!(!already_applied(&live, &desired), "a type changed");
    }
}
