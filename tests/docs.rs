//! docs/ is written for users of the repository and must agree with the code: the status-reason table is
//! generated from `api/src/reason.rs`, every section of `behaviour.md` cited anywhere exists, links
//! between the docs resolve, and nothing points at files outside the repository.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Text files of the repository (sources, docs, manifests), without build output and git data.
fn repository_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                if !matches!(name.as_str(), "target" | ".git") {
                    walk(&path, out);
                }
            } else if path
                .extension()
                .is_some_and(|e| ["rs", "md", "yaml", "yml", "toml", "sh"].iter().any(|x| e == *x))
                || matches!(name.as_str(), "Dockerfile" | "run" | "test")
            {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(markdown: &str) -> BTreeSet<String> {
    markdown
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| slug(l.trim_start_matches('#')))
        .collect()
}

#[test]
fn status_reasons_doc_matches_the_reason_table() {
    assert!(
        read(&root().join("docs/status-reasons.md")) == btp_api::reason::status_reasons_markdown(),
        "docs/status-reasons.md is out of date with api/src/reason.rs: run \
         `cargo run -q -- status-reasons > docs/status-reasons.md`"
    );
}

#[test]
fn every_cited_behaviour_section_exists() {
    let sections = anchors(&read(&root().join("docs/behaviour.md")));
    assert!(sections.contains("deprovisioning"), "{sections:?}");
    // Built from parts so that this file does not match itself.
    let needle = ["behaviour.md", "#"].concat();
    let mut cited = 0;
    for file in repository_files() {
        let text = read(&file);
        for (at, _) in text.match_indices(needle.as_str()) {
            let anchor: String = text[at + needle.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            assert!(
                sections.contains(&anchor),
                "{} cites the section {anchor:?} of docs/behaviour.md, which does not exist",
                file.display()
            );
            cited += 1;
        }
    }
    assert!(
        cited >= 20,
        "the code cites docs/behaviour.md ({cited} citations found)"
    );
}

#[test]
fn links_between_the_docs_resolve() {
    let docs = root().join("docs");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&docs).unwrap().map(|e| e.unwrap().path()).collect();
    files.push(root().join("README.md"));
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "md")) {
        let text = read(file);
        for (at, _) in text.match_indices("](") {
            let target: String = text[at + 2..].chars().take_while(|c| *c != ')').collect();
            if target.starts_with("http") || target.starts_with('#') {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let linked = file.parent().unwrap().join(path);
            assert!(
                linked.exists(),
                "{} links to {target}, which does not exist",
                file.display()
            );
            if !anchor.is_empty() && path.ends_with(".md") {
                assert!(
                    anchors(&read(&linked)).contains(anchor),
                    "{} links to {target}: no such section",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn nothing_refers_to_files_outside_the_repository() {
    // Built from parts so that this file does not match itself.
    let outside = [
        ["shared", "/spec"].concat(),
        ["shared", "/fixtures"].concat(),
        ["../", "shared"].concat(),
    ];
    for file in repository_files() {
        let text = read(&file);
        for needle in &outside {
            assert!(
                !text.contains(needle.as_str()),
                "{} refers to {needle}, outside the repository",
                file.display()
            );
        }
    }
}
