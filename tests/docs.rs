//! docs/ is written for users of the repository and must agree with the code: the status-reason table is
//! generated from `api/src/reason.rs`, every section of `behaviour.md` cited anywhere exists, every relative
//! link (file and `#section`) in the repository's markdown resolves, the README stays a front door, and nothing
//! points at files outside the repository.

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
                || matches!(name.as_str(), "Dockerfile" | "run" | "test" | "bench")
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

/// The lines of `markdown` outside fenced code blocks (a `#` comment in a shell block is no heading, a `](` in
/// an example no link).
fn prose_lines(markdown: &str) -> impl Iterator<Item = &str> {
    let mut fenced = false;
    markdown.lines().filter(move |l| {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            return false;
        }
        !fenced
    })
}

/// The anchors GitHub gives the headings of `markdown`: a repeated heading's anchor gets `-1`, `-2`, ...
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in prose_lines(markdown).filter(|l| l.starts_with('#')) {
        let base = slug(line.trim_start_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while !out.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
    }
    out
}

/// The targets of the inline links `[text](target)` of `markdown`, outside code blocks and code spans.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(markdown) {
        // Code spans are the odd-numbered pieces between backticks; their text is no link.
        let prose: String = line
            .split('`')
            .enumerate()
            .map(|(i, piece)| if i % 2 == 0 { piece } else { "" })
            .collect();
        for (at, _) in prose.match_indices("](") {
            let target: String = prose[at + 2..].chars().take_while(|c| *c != ')').collect();
            out.push(target);
        }
    }
    out
}

/// What is wrong with the relative links of the markdown file `file` (its text `text`): each a link to a file
/// that does not exist, or to a section (`#anchor`) its target, or `file` itself, does not have.
fn broken_links(file: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for target in link_targets(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
        let linked = file.parent().unwrap().join(path);
        if !path.is_empty() && !linked.exists() {
            broken.push(format!("{target}: no such file"));
        } else if !anchor.is_empty() {
            let sections = if path.is_empty() {
                anchors(text)
            } else if path.ends_with(".md") {
                anchors(&read(&linked))
            } else {
                continue;
            };
            if !sections.contains(anchor) {
                broken.push(format!("{target}: no such section"));
            }
        }
    }
    broken
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
fn every_relative_link_in_the_markdown_resolves() {
    let files: Vec<PathBuf> = repository_files()
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
        .collect();
    for required in [
        "README.md",
        "docs/architecture.md",
        "docs/testing.md",
        "docs/install.md",
    ] {
        assert!(files.contains(&root().join(required)), "{required} is checked");
    }
    let mut links = 0;
    let mut broken = Vec::new();
    for file in &files {
        let text = read(file);
        links += link_targets(&text).len();
        let relative = file.strip_prefix(root()).unwrap_or(file).display().to_string();
        broken.extend(
            broken_links(file, &text)
                .into_iter()
                .map(|b| format!("{relative}: {b}")),
        );
    }
    assert!(broken.is_empty(), "broken links: {broken:#?}");
    assert!(links >= 100, "the docs link to each other ({links} links found)");
}

#[test]
fn the_link_check_finds_a_missing_file_and_a_missing_section() {
    let file = root().join("docs/example.md");
    let text = "# Example\n\n## A section\n\n```sh\n# not a heading\n```\n\n\
                [ok](install.md) [ok](install.md#uninstalling) [ok](#a-section) [ok](../README.md)\n\
                [gone](nowhere.md) [gone](install.md#nowhere) [gone](#not-a-heading) \
                `[code](not-checked.md)` [web](https://example.com/x.md)\n";
    assert_eq!(
        broken_links(&file, text),
        [
            "nowhere.md: no such file",
            "install.md#nowhere: no such section",
            "#not-a-heading: no such section"
        ]
    );
}

#[test]
fn a_repeated_heading_gets_a_numbered_anchor() {
    let anchors = anchors("# Doc\n## Kubernetes versions\n## Kubernetes versions\n### `run` flags?\n");
    assert_eq!(
        anchors,
        BTreeSet::from(["doc", "kubernetes-versions", "kubernetes-versions-1", "run-flags"].map(String::from))
    );
}

/// The README is the front door: short, and the two commands a newcomer runs first, as `sh` blocks of their
/// own (`.ci/run` runs the second).
#[test]
fn the_readme_is_a_front_door() {
    let readme = read(&root().join("README.md"));
    let chars = readme.chars().count();
    assert!(
        chars <= 10_000,
        "README.md has {chars} characters; at most 10,000 (the rest belongs in docs/)"
    );
    for command in ["cargo run --release -- local", "scripts/test"] {
        assert!(
            readme.contains(&format!("```sh\n{command}\n```")),
            "README.md shows `{command}` in an sh block of its own"
        );
    }
    for linked in [
        "docs/install.md",
        "docs/architecture.md",
        "docs/testing.md",
        "docs/operations.md",
    ] {
        assert!(readme.contains(&format!("]({linked})")), "README.md links to {linked}");
    }
}

/// Nothing in the repository needs what lies beside it, with one exception: the real-server stage
/// (`scripts/e2e-real`, docs/testing.md) starts the real API servers of the sibling `realk8s` directory where
/// it exists (and says it did not run where it does not).
#[test]
fn nothing_refers_to_files_outside_the_repository() {
    // Built from parts so that this file does not match itself.
    let outside = [
        ["shared", "/spec"].concat(),
        ["shared", "/fixtures"].concat(),
        ["../", "shared"].concat(),
    ];
    let real_servers = ["../", "shared/realk8s"].concat();
    for file in repository_files() {
        let text = read(&file);
        for needle in &outside {
            let found = text
                .match_indices(needle.as_str())
                .any(|(at, _)| !text[at..].starts_with(real_servers.as_str()));
            assert!(!found, "{} refers to {needle}, outside the repository", file.display());
        }
    }
}

/// The rows of the markdown tables in the section that starts with `heading` (up to the next `## `), as
/// their cells.
fn table_rows<'a>(markdown: &'a str, heading: &str) -> Vec<Vec<&'a str>> {
    let start = markdown
        .find(heading)
        .unwrap_or_else(|| panic!("docs/configuration.md has a section {heading:?}"));
    let section = &markdown[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
        .collect()
}

/// `--flag` of a first cell such as "`--resources-path DIR`" or "`--webhook-ip IP` (repeatable)".
fn flag_name(cell: &str) -> String {
    cell.trim_start_matches('`')
        .split(['`', ' '])
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_configuration_doc_lists_every_flag_and_key_with_its_default() {
    use clap::CommandFactory as _;
    let doc = read(&root().join("docs/configuration.md"));
    let cli = btp_manager::cli::Cli::command();
    for (command, sections) in [
        (
            "run",
            &["## `run`", "## Reconciler flags", "## Flags of the Go BTP Manager"][..],
        ),
        ("local", &["## `local`", "## Reconciler flags"][..]),
    ] {
        let sub = cli.find_subcommand(command).expect("subcommand");
        let code: BTreeSet<String> = sub
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .filter(|f| f != "--help")
            .collect();
        let rows: Vec<Vec<&str>> = sections.iter().flat_map(|h| table_rows(&doc, h)).collect();
        let documented: BTreeSet<String> = rows.iter().map(|r| flag_name(r[0])).collect();
        assert_eq!(
            documented, code,
            "docs/configuration.md and `btp-manager {command}` list different flags"
        );
        for arg in sub.get_arguments() {
            let (Some(long), [default]) = (arg.get_long(), arg.get_default_values()) else {
                continue;
            };
            let default = default.to_string_lossy();
            if default == "false" {
                continue;
            }
            let flag = format!("--{long}");
            let row = rows.iter().find(|r| flag_name(r[0]) == flag).expect("documented");
            let cell = row[row.len() - 2];
            assert!(
                cell.contains(&format!("`{default}`")),
                "{command} {flag}: the code's default is {default:?}, the doc says {cell:?}"
            );
        }
    }
    let keys: BTreeSet<&str> = table_rows(&doc, "## Runtime ConfigMap keys")
        .iter()
        .map(|r| r[0].trim_matches('`'))
        .collect();
    let code: BTreeSet<&str> = btp_manager::config::configmap_keys().map(|k| k.name).collect();
    assert_eq!(keys, code, "docs/configuration.md and config::KEYS list different keys");
    for row in table_rows(&doc, "## Runtime ConfigMap keys") {
        let key = row[0].trim_matches('`');
        let applies = btp_manager::config::configmap_key(key).expect("a key").applies.as_str();
        assert_eq!(row[2], applies, "{key}: when it applies");
    }
    let defaults = btp_manager::config::Config::default();
    let duration_keys = [
        (
            "ProcessingStateRequeueInterval",
            defaults.processing_state_requeue_interval,
        ),
        ("ReadyStateRequeueInterval", defaults.ready_state_requeue_interval),
        ("ReadyTimeout", defaults.ready_timeout),
        ("HardDeleteTimeout", defaults.hard_delete_timeout),
        ("HardDeleteCheckInterval", defaults.hard_delete_check_interval),
        ("DeleteRequestTimeout", defaults.delete_request_timeout),
        ("CaCertificateExpiration", defaults.ca_certificate_expiration),
        ("WebhookCertificateExpiration", defaults.webhook_certificate_expiration),
        ("ExpirationBoundary", defaults.expiration_boundary),
    ];
    for (key, value) in duration_keys {
        let row = table_rows(&doc, "## Runtime ConfigMap keys")
            .into_iter()
            .find(|r| r[0].trim_matches('`') == key)
            .expect("documented");
        let documented = row[1].split('`').nth(1).unwrap_or_default();
        assert_eq!(
            btp_manager::config::parse_go_duration(documented),
            Some(value),
            "{key}: the doc's default {documented:?}"
        );
    }
}

/// The first markdown table (its consecutive lines starting with `|`) of the section that starts with
/// `heading`, as written.
fn first_table(markdown: &str, heading: &str) -> String {
    let start = markdown
        .find(heading)
        .unwrap_or_else(|| panic!("docs/configuration.md has a section {heading:?}"));
    markdown[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_configuration_doc_tables_are_the_key_table() {
    let doc = read(&root().join("docs/configuration.md"));
    for (heading, generated) in [
        (
            "## Reconciler flags",
            btp_manager::config::doc::reconciler_flags_table(),
        ),
        ("## Runtime ConfigMap keys", btp_manager::config::doc::configmap_table()),
    ] {
        assert!(
            first_table(&doc, heading) == generated,
            "the table of docs/configuration.md's section {heading:?} is out of date with src/config/keys.rs; \
             replace it with:\n\n{generated}"
        );
    }
}
