//! No import circle in the product's crates (`src/`, `webhooks/src/`, `apiserver/src/`, `api/src/`,
//! `certs/src/`): no two files of a crate that import each other, directly or around a loop.
//!
//! Every file under a crate's `src/` is a node (`lib.rs` the crate root, `x.rs` and `x/mod.rs` module `x`, `x/y.rs`
//! module `x::y`). A file imports another when its code (comments and string literals stripped; `use`
//! lines, `#[cfg(test)]` modules and paths in expressions alike) names a path into it: `crate::a::b::...`,
//! `super::...`, `self::...`, or a child module declared with `mod c;` (`c::...`). A path is resolved to the
//! deepest file whose module it enters; a path to an item of the crate root (`crate::Config`) imports
//! `lib.rs`, so modules name the module that defines an item, not the root's re-export. `mod` declarations
//! are not imports. The test fails naming each circle found.
//!
//! `BTP_IMPORTS=1 cargo test --test imports -- --nocapture` prints the graphs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path: `[]` for the crate root, `["handlers", "create"]` for `src/handlers/create.rs`.
type ModPath = Vec<String>;

fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    match last.as_str() {
        "lib.rs" | "main.rs" | "mod.rs" => {}
        other => parts.push(other.trim_end_matches(".rs").to_string()),
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a Rust file with comments removed and string and char literals emptied (their delimiters
/// kept), so that only real paths remain.
fn strip(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    while i < c.len() {
        let at = |k: usize| c.get(k).copied().unwrap_or('\0');
        if c[i] == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if (c[i] == 'r' || (c[i] == 'b' && at(i + 1) == 'r'))
            && (i == 0 || !ident(c[i - 1]))
            && matches!(at(i + if c[i] == 'b' { 2 } else { 1 }), '"' | '#')
        {
            // A raw string: r"..", r#".."#, br"..".
            let mut j = i + if c[i] == 'b' { 2 } else { 1 };
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            if at(j) != '"' {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|h| at(j + h) == '#') {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if at(i + 1) == '\\' {
                let mut j = i + 2;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if at(i + 2) == '\'' {
                i += 3;
                out.push_str("' '");
            } else {
                out.push('\'');
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other,
}

fn tokens(code: &str) -> Vec<Tok> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        if ch.is_alphabetic() || ch == '_' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(c[start..i].iter().collect()));
            continue;
        }
        if ch.is_whitespace() {
            i += 1;
            continue;
        }
        if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push(Tok::PathSep);
            i += 2;
            continue;
        }
        out.push(match ch {
            '{' => Tok::Open,
            '}' => Tok::Close,
            ',' => Tok::Comma,
            ';' => Tok::Semi,
            '*' => Tok::Star,
            _ => Tok::Other,
        });
        i += 1;
    }
    out
}

/// Parses a path (tree) starting at `toks[i]` (just after a `::`): `a::b`, `{a, b::{c, d}}`, `*`. Pushes
/// every leaf path (relative to the prefix) to `out` and returns the index after it.
fn path_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(i) {
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
                if toks.get(i) == Some(&Tok::PathSep) {
                    i += 1;
                    continue;
                }
                out.push(path);
                return i;
            }
            Some(Tok::Open) => {
                i += 1;
                loop {
                    match toks.get(i) {
                        Some(Tok::Close) => return i + 1,
                        Some(Tok::Comma) => i += 1,
                        None => return i,
                        _ => {
                            let before = i;
                            i = path_tree(toks, i, &path, out);
                            if i == before {
                                i += 1;
                            }
                        }
                    }
                }
            }
            _ => {
                // `*`, `<` of a turbofish, or anything else: the path so far.
                out.push(path);
                return i;
            }
        }
    }
}

/// The module paths a file names, resolved to absolute paths (before mapping them to files).
fn named_paths(module: &ModPath, code: &str) -> Vec<Vec<String>> {
    let toks = tokens(code);
    // Child modules declared by this file as files (`mod c;`), and inline modules (`mod c { .. }`) with the
    // brace depth at which each one ends.
    let mut children = BTreeSet::new();
    for w in toks.windows(3) {
        if let [Tok::Ident(m), Tok::Ident(name), Tok::Semi] = w {
            if m == "mod" {
                children.insert(name.clone());
            }
        }
    }
    let mut out = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Open => {
                depth += 1;
                i += 1;
                continue;
            }
            Tok::Close => {
                depth = depth.saturating_sub(1);
                while inline.last().is_some_and(|(_, d)| *d > depth) {
                    inline.pop();
                }
                i += 1;
                continue;
            }
            Tok::Ident(m) if m == "mod" => {
                if let (Some(Tok::Ident(name)), Some(Tok::Open)) = (toks.get(i + 1), toks.get(i + 2)) {
                    inline.push((name.clone(), depth + 1));
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        // A path starts at an identifier that is not itself after `::`.
        let after_sep = i > 0 && toks[i - 1] == Tok::PathSep;
        let Tok::Ident(first) = &toks[i] else {
            i += 1;
            continue;
        };
        if after_sep || toks.get(i + 1) != Some(&Tok::PathSep) {
            i += 1;
            continue;
        }
        // Where the code is: this file's module and the inline modules around it.
        let mut here: Vec<String> = module.clone();
        here.extend(inline.iter().map(|(n, _)| n.clone()));
        let mut j = i;
        let base: Vec<String> = match first.as_str() {
            "crate" => {
                j += 2;
                Vec::new()
            }
            "self" => {
                j += 2;
                here
            }
            "super" => {
                let mut base = here;
                while toks.get(j) == Some(&Tok::Ident("super".into())) && toks.get(j + 1) == Some(&Tok::PathSep) {
                    base.pop();
                    j += 2;
                }
                base
            }
            name if inline.is_empty() && children.contains(name) => here,
            _ => {
                i += 1;
                continue;
            }
        };
        let mut leaves = Vec::new();
        let next = path_tree(&toks, j, &base, &mut leaves);
        out.extend(leaves);
        i = next.max(i + 1);
    }
    out
}

/// The file (by module path) a resolved path enters: the longest prefix that is a file's module.
fn resolve<'a>(files: &'a BTreeSet<ModPath>, path: &[String]) -> Option<&'a ModPath> {
    (0..=path.len()).rev().find_map(|n| files.get(&path[..n].to_vec()))
}

fn display(m: &ModPath) -> String {
    if m.is_empty() {
        "lib".into()
    } else {
        m.join("::")
    }
}

/// The import graph of the crate under `src`: file module -> the file modules it imports.
fn graph(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    let files: BTreeSet<ModPath> = paths.iter().map(|p| module_of(src, p)).collect();
    let mut g = BTreeMap::new();
    for p in &paths {
        let module = module_of(src, p);
        let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
        let mut edges = BTreeSet::new();
        for path in named_paths(&module, &strip(&text)) {
            if let Some(target) = resolve(&files, &path) {
                if *target != module {
                    edges.insert(target.clone());
                }
            }
        }
        g.insert(module, edges);
    }
    g
}

/// Every strongly connected component with more than one file (Tarjan).
fn circles(g: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct T<'a> {
        g: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'a ModPath, usize>,
        low: BTreeMap<&'a ModPath, usize>,
        stack: Vec<&'a ModPath>,
        on: BTreeSet<&'a ModPath>,
        out: Vec<Vec<ModPath>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a ModPath) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        let g = t.g;
        for w in g.get(v).into_iter().flatten() {
            let Some((w, _)) = g.get_key_value(w) else { continue };
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.clone());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// One loop through `scc` (for the message): from its first file back to it.
fn a_loop(g: &BTreeMap<ModPath, BTreeSet<ModPath>>, scc: &[ModPath]) -> Vec<ModPath> {
    let inside: BTreeSet<&ModPath> = scc.iter().collect();
    let start = &scc[0];
    // Breadth-first from start's successors back to start, within the component.
    let mut prev: BTreeMap<&ModPath, &ModPath> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in g.get(v).into_iter().flatten() {
            if !inside.contains(w) || prev.contains_key(w) {
                continue;
            }
            prev.insert(w, v);
            if w == start {
                let mut path = vec![start.clone()];
                let mut at = v;
                while at != start {
                    path.push(at.clone());
                    at = prev[at];
                }
                path.push(start.clone());
                path.reverse();
                return path;
            }
            queue.push_back(w);
        }
    }
    scc.to_vec()
}

fn report(g: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<String> {
    circles(g)
        .iter()
        .map(|scc| {
            let files: Vec<String> = scc.iter().map(display).collect();
            let lp: Vec<String> = a_loop(g, scc).iter().map(display).collect();
            format!("circle among {{{}}}: {}", files.join(", "), lp.join(" -> "))
        })
        .collect()
}

/// The source directories of the crates checked.
const CRATES: [&str; 5] = ["src", "webhooks/src", "apiserver/src", "api/src", "certs/src"];

#[test]
fn no_import_circle_in_any_crate() {
    let mut found = Vec::new();
    for krate in CRATES {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(krate);
        let g = graph(&src);
        if std::env::var_os("BTP_IMPORTS").is_some() {
            println!("== {krate}");
            for (m, edges) in &g {
                let e: Vec<String> = edges.iter().map(display).collect();
                println!("{} -> {}", display(m), e.join(", "));
            }
        }
        assert!(g.len() > 4, "found only {} files under {}", g.len(), src.display());
        found.extend(report(&g).into_iter().map(|circle| format!("{krate}: {circle}")));
    }
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

/// The checker itself: it sees the forms of import the crate uses, and it finds circles.
#[test]
fn the_checker_sees_imports_and_circles() {
    let m = |s: &str| -> ModPath { s.split("::").filter(|p| !p.is_empty()).map(str::to_string).collect() };
    let code = strip(
        r#"
        //! crate::doc_comment::Ignored
        use crate::{events::{Event, Kind}, store::{self, Store}};
        use super::sibling::Thing;
        mod child;
        mod tests { use super::*; fn f() { child2::x(); } }
        fn g() { let s = "crate::in_string::Ignored"; let c = '"'; crate::util::now(); child::run(); }
        /* crate::block::Ignored */
        fn h<'a>(x: &'a str) -> crate::error::ApiResult<()> { self::local::f() }
    "#,
    );
    let mut found: Vec<String> = named_paths(&m("handlers::x"), &code)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    found.sort();
    assert_eq!(
        found,
        [
            "error::ApiResult",
            "events::Event",
            "events::Kind",
            "handlers::sibling::Thing",
            "handlers::x",
            "handlers::x::child::run",
            "handlers::x::local::f",
            "store::Store",
            "store::self",
            "util::now",
        ]
    );
    let g: BTreeMap<ModPath, BTreeSet<ModPath>> = [
        (m("a"), BTreeSet::from([m("b")])),
        (m("b"), BTreeSet::from([m("c")])),
        (m("c"), BTreeSet::from([m("a")])),
        (m("d"), BTreeSet::from([m("a")])),
    ]
    .into_iter()
    .collect();
    assert_eq!(report(&g), ["circle among {a, b, c}: a -> b -> c -> a"]);
    let files: BTreeSet<ModPath> = [m(""), m("store"), m("handlers"), m("handlers::create")].into();
    assert_eq!(resolve(&files, &m("store::Store")), Some(&m("store")));
    assert_eq!(resolve(&files, &m("handlers::create::f")), Some(&m("handlers::create")));
    assert_eq!(resolve(&files, &m("Config")), Some(&m("")));
}
