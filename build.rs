//! Builds the operand's manifests into the binary: `module-resources/apply/`, `module-resources/delete/`,
//! `module-resources/chart-version` and `manager-resources/network-policies/` become tables of
//! `(file name, text)` in `$OUT_DIR/embedded.rs` (read by `src/embedded.rs`), so that `btp-manager` works
//! from any directory. Only top-level `*.yml`/`*.yaml` files are taken, as the loaders do. Cargo re-runs this
//! whenever a file in those directories changes, so the built-in copy cannot drift from the checkout.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed=build.rs");
    let mut out = String::new();
    table(&mut out, "MODULE_APPLY", &root, "module-resources/apply");
    table(&mut out, "MODULE_DELETE", &root, "module-resources/delete");
    table(
        &mut out,
        "NETWORK_POLICIES",
        &root,
        "manager-resources/network-policies",
    );
    let chart_version = root.join("module-resources/chart-version");
    println!("cargo:rerun-if-changed={}", chart_version.display());
    let _ = writeln!(
        out,
        "/// `module-resources/chart-version`.\npub static CHART_VERSION: &str = include_str!({:?});",
        utf8(&chart_version)
    );
    std::fs::write(out_dir.join("embedded.rs"), out).expect("writing $OUT_DIR/embedded.rs");
}

fn utf8(path: &Path) -> &str {
    path.to_str()
        .unwrap_or_else(|| panic!("{} is not a UTF-8 path", path.display()))
}

/// `pub static NAME: &[(&str, &str)]` with every top-level YAML file of `root/relative`, sorted by file name.
fn table(out: &mut String, name: &str, root: &Path, relative: &str) {
    let dir = &root.join(relative);
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<(String, PathBuf)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())).path())
            .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
            .map(|p| (utf8(Path::new(p.file_name().unwrap_or_default())).to_string(), p))
            .collect(),
        // An empty directory is not in git (`delete/` holds only `.gitkeep`); no directory, no files.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("reading {}: {e}", dir.display()),
    };
    files.sort();
    let _ = writeln!(out, "/// Top-level YAML files of `{relative}`.");
    let _ = writeln!(out, "pub static {name}: &[(&str, &str)] = &[");
    for (file, path) in &files {
        let _ = writeln!(out, "    ({file:?}, include_str!({:?})),", utf8(path));
    }
    let _ = writeln!(out, "];");
}
