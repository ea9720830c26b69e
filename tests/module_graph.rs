//! No import circle between the modules of the product's crates: a module (a file) that uses another never
//! sits on a circle of uses that leads back to it. A circle means neither file can be read, changed or
//! tested without the other.
//!
//! The graph is made from the source text (no compiler): every path that starts at `crate::`, `super::`,
//! `self::` or a child module, in `use` declarations and in code, is resolved to the file that defines what
//! it names, following `pub use` re-exports (so `super::cluster::retrying` is a use of `cluster/retry.rs`,
//! not of `cluster/mod.rs`). Declaring a module (`mod x;`) is not a use. `#[cfg(test)]` modules inside a
//! file are left out: a test may use anything of its parent.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// A module: its path below the crate root (`["reconciler", "view", "kept"]`; the root is empty).
type Module = Vec<String>;

/// The crates checked, by their source directories.
const CRATES: [&str; 5] = ["src", "webhooks/src", "apiserver/src", "api/src", "certs/src"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file below `root` is.
fn module_of(root: &Path, file: &Path) -> Module {
    let relative = file.strip_prefix(root).unwrap_or(file).with_extension("");
    let mut parts: Module = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    if parts == ["lib"] || parts == ["main"] {
        parts.clear();
    }
    parts
}

/// The source without comments, string and char literals (so that a path in a doc comment or a message is
/// not taken for a use).
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                i += 1;
            }
            i += 2;
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && (i == 0 || !ident(chars[i - 1])) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            // An escaped char literal.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` modules.
fn without_test_modules(code: &str) -> String {
    let mut out = code.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let rest = &out[at + "#[cfg(test)]".len()..];
        let trimmed = rest.trim_start();
        let skipped = rest.len() - trimmed.len();
        let start_of_item = at + "#[cfg(test)]".len() + skipped;
        if !trimmed.starts_with("mod ") {
            // Some other item under cfg(test): drop only the attribute.
            out.replace_range(at..start_of_item, "");
            continue;
        }
        let Some(open_or_semi) = out[start_of_item..].find(['{', ';']) else {
            break;
        };
        let brace = start_of_item + open_or_semi;
        if out.as_bytes()[brace] == b';' {
            out.replace_range(at..=brace, "");
            continue;
        }
        let mut depth = 0usize;
        let mut end = out.len();
        for (k, ch) in out[brace..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = brace + k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.replace_range(at..end, "");
    }
    out
}

/// The paths of a use tree (`a::{b, c::{d, e as f}}` → `a::b`, `a::c::d`, `a::c::e`).
fn expand(prefix: &[String], tree: &str) -> Vec<Vec<String>> {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let mut base = prefix.to_vec();
        base.extend(head);
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let mut items = Vec::new();
        let (mut depth, mut current) = (0, String::new());
        for ch in inner.chars() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    items.push(std::mem::take(&mut current));
                    continue;
                }
                _ => {}
            }
            current.push(ch);
        }
        items.push(current);
        return items
            .iter()
            .filter(|i| !i.trim().is_empty())
            .flat_map(|i| expand(&base, i))
            .collect();
    }
    let path = tree.split(" as ").next().unwrap_or(tree);
    let mut full = prefix.to_vec();
    full.extend(
        path.split("::")
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    );
    vec![full]
}

/// Every `use` tree of `code`, with whether it is a `pub use` (a re-export).
fn use_trees(code: &str) -> Vec<(bool, String)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(found) = code[from..].find("use ") {
        let at = from + found;
        from = at + 4;
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        let before = code[..at].trim_end();
        let public = before.ends_with("pub") || before.ends_with(')') && before.contains("pub(");
        out.push((public, code[at + 4..at + end].to_string()));
        from = at + end;
    }
    out
}

/// Paths in code (outside `use`) that start at `crate::`, `super::` or `self::`.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(found) = code[from..].find(start) {
            let at = from + found;
            from = at + start.len();
            if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':') {
                continue;
            }
            let mut end = at;
            while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_' || bytes[end] == b':')
            {
                end += 1;
            }
            let path: Vec<String> = code[at..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            // `crate::{...}` is a use tree, read by `use_trees`.
            if path.len() > 1 {
                out.push(path);
            }
        }
    }
    out
}

struct Crate {
    modules: BTreeSet<Module>,
    /// (module, name) → the path a `pub use` in that module gives `name`.
    reexports: HashMap<(Module, String), Vec<String>>,
}

impl Crate {
    /// The file that defines what `path`, written in `module`, names (None: outside the crate).
    fn resolve(&self, module: &Module, path: &[String], depth: usize) -> Option<Module> {
        let first = path.first()?;
        let (mut current, rest): (Module, &[String]) = match first.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (module.clone(), &path[1..]),
            "super" => {
                let mut base = module.clone();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                (base, rest)
            }
            child => {
                let mut candidate = module.clone();
                candidate.push(child.to_string());
                if !self.modules.contains(&candidate) {
                    return None;
                }
                (module.clone(), path)
            }
        };
        for segment in rest {
            let mut next = current.clone();
            next.push(segment.clone());
            if self.modules.contains(&next) {
                current = next;
                continue;
            }
            if depth < 8 {
                if let Some(target) = self.reexports.get(&(current.clone(), segment.clone())) {
                    if let Some(resolved) = self.resolve(&current, target, depth + 1) {
                        return Some(resolved);
                    }
                }
            }
            break;
        }
        Some(current)
    }
}

/// Each module's uses of other modules of the crate under `root`.
fn graph(root: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    let sources: BTreeMap<Module, String> = files
        .iter()
        .map(|f| {
            let source = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
            (module_of(root, f), without_test_modules(&code_only(&source)))
        })
        .collect();
    let mut krate = Crate {
        modules: sources.keys().cloned().collect(),
        reexports: HashMap::new(),
    };
    for (module, code) in &sources {
        for (public, tree) in use_trees(code) {
            if public {
                for path in expand(&[], &tree) {
                    if let Some(name) = path.last() {
                        krate.reexports.insert((module.clone(), name.clone()), path.clone());
                    }
                }
            }
        }
    }
    let mut edges = BTreeMap::new();
    for (module, code) in &sources {
        let mut paths: Vec<Vec<String>> = use_trees(code).iter().flat_map(|(_, t)| expand(&[], t)).collect();
        paths.extend(inline_paths(code));
        let uses: BTreeSet<Module> = paths
            .iter()
            .filter_map(|p| krate.resolve(module, p, 0))
            .filter(|target| target != module)
            .collect();
        edges.insert(module.clone(), uses);
    }
    edges
}

/// The circles of `edges`: strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Search<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: HashMap<&'a Module, usize>,
        low: HashMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        found: Vec<Vec<Module>>,
    }
    impl<'a> Search<'a> {
        fn visit(&mut self, v: &'a Module) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let Some((w, _)) = self.edges.get_key_value(w) else {
                    continue;
                };
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.clone());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut search = Search {
        edges,
        index: HashMap::new(),
        low: HashMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !search.index.contains_key(v) {
            search.visit(v);
        }
    }
    search.found
}

fn describe(component: &[Module], edges: &BTreeMap<Module, BTreeSet<Module>>) -> String {
    let name = |m: &Module| {
        if m.is_empty() {
            "<root>".to_string()
        } else {
            m.join("/")
        }
    };
    let mut lines = Vec::new();
    for a in component {
        for b in edges.get(a).into_iter().flatten().filter(|b| component.contains(b)) {
            lines.push(format!("  {} uses {}", name(a), name(b)));
        }
    }
    lines.join("\n")
}

#[test]
fn no_module_of_the_products_crates_sits_on_an_import_circle() {
    let repository = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut report = Vec::new();
    for krate in CRATES {
        let root = repository.join(krate);
        let edges = graph(&root);
        assert!(edges.len() > 4, "{krate}: no modules found under {}", root.display());
        for component in circles(&edges) {
            report.push(format!("{krate}:\n{}", describe(&component, &edges)));
        }
    }
    assert!(report.is_empty(), "import circles:\n{}", report.join("\n"));
}

#[test]
fn the_check_finds_a_circle_through_a_re_export_and_ignores_comments_strings_and_tests() {
    let dir = std::env::temp_dir().join(format!("btp-module-graph-{}", std::process::id()));
    let write = |file: &str, text: &str| {
        let path = dir.join(file);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create the directory");
        std::fs::write(path, text).expect("write a source file");
    };
    let _ = std::fs::remove_dir_all(&dir);
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write("a/mod.rs", "mod inner;\npub use inner::Thing;\n");
    // `b` uses `a`'s re-export of `inner`, and `inner` uses `b`: a circle of `b` and `a/inner`.
    write("a/inner.rs", "pub struct Thing;\nfn f() { crate::b::g(); }\n");
    write(
        "b.rs",
        "use crate::a::Thing;\npub fn g() {}\n// crate::c::h in a comment\nfn s() -> &'static str { \"crate::c::h\" }\n#[cfg(test)]\nmod tests { use crate::c::h; }\n",
    );
    write("c.rs", "pub fn h() { let _ = r#\"crate::b::g\"#; crate::b::g(); }\n");
    let edges = graph(&dir);
    let module = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Module>();
    let found = circles(&edges);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(found.len(), 1, "one circle: {found:?}");
    let members: BTreeSet<Module> = found[0].iter().cloned().collect();
    assert_eq!(members, BTreeSet::from([module(&["a", "inner"]), module(&["b"])]));
    assert!(
        !edges[&module(&["b"])].contains(&module(&["c"])),
        "a comment, a string and a test module are not uses"
    );
    assert!(edges[&module(&["c"])].contains(&module(&["b"])));
}
