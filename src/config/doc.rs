//! The tables of docs/configuration.md that [`super::keys::KEYS`] gives: the reconciler's flags and the
//! runtime ConfigMap keys. A test (tests/docs.rs) fails when the doc's tables differ from these; it prints
//! the tables to paste.

use super::keys::{Applies, Field, Key, KEYS};

/// One table row (an empty cell as `| |`).
fn row(cells: &[String]) -> String {
    let cells: Vec<String> = cells
        .iter()
        .map(|c| if c.is_empty() { " ".into() } else { format!(" {c} ") })
        .collect();
    format!("|{}|\n", cells.join("|"))
}

/// The default as the docs say it.
fn default(key: &Key, otherwise: &str) -> String {
    match (key.documented_default, key.default) {
        ("", "") => otherwise.into(),
        ("", value) => format!("`{value}`"),
        (documented, _) => documented.into(),
    }
}

/// The table of section "Reconciler flags (`run` and `local`)": every flag of the reconciler (not those of
/// the Go manager that have no effect), with its environment variable, default and ConfigMap key.
pub fn reconciler_flags_table() -> String {
    let mut out = row(&[
        "flag".into(),
        "environment".into(),
        "default".into(),
        "meaning (runtime ConfigMap key)".into(),
    ]);
    out.push_str("|---|---|---|---|\n");
    for key in KEYS
        .iter()
        .filter(|k| !k.flag.is_empty() && k.applies != Applies::NotUsed)
    {
        let flag = match key.field {
            Field::Path(_) => format!("`{} DIR`", key.flag),
            _ => format!("`{}`", key.flag),
        };
        let env = if key.env.is_empty() {
            String::new()
        } else {
            format!("`{}`", key.env)
        };
        let meaning = if key.name.is_empty() {
            key.meaning.to_string()
        } else {
            format!("{} (`{}`)", key.meaning, key.name)
        };
        out.push_str(&row(&[flag, env, default(key, "none"), meaning]));
    }
    out
}

/// The table of section "Runtime ConfigMap keys": every key with its default, when it applies and what it
/// sets (for a key that is not used, why).
pub fn configmap_table() -> String {
    let mut out = row(&["key".into(), "default".into(), "applies".into(), "meaning".into()]);
    out.push_str("|---|---|---|---|\n");
    for key in KEYS.iter().filter(|k| !k.name.is_empty()) {
        let (default, meaning) = match key.applies {
            Applies::NotUsed => (String::new(), key.meaning.to_string()),
            _ => {
                let meaning = if key.flag.is_empty() {
                    key.meaning.to_string()
                } else {
                    format!("as `{}`", key.flag)
                };
                let meaning = match key.runtime_note {
                    "" => meaning,
                    note => format!("{meaning}; {note}"),
                };
                (default(key, "(unset)"), meaning)
            }
        };
        out.push_str(&row(&[
            format!("`{}`", key.name),
            default,
            key.applies.as_str().into(),
            meaning,
        ]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_have_a_row_per_key() {
        let flags = reconciler_flags_table();
        assert_eq!(flags.lines().count(), 2 + 17, "{flags}");
        assert!(
            flags.contains("| `--resources-path DIR` | | built in | the operand's manifests"),
            "{flags}"
        );
        assert!(
            flags.contains("| `--operand-image` | `SAP_BTP_SERVICE_OPERATOR` |"),
            "{flags}"
        );
        assert!(flags.contains("| `--ready-timeout` | | `5m` |"), "{flags}");
        let keys = configmap_table();
        assert_eq!(keys.lines().count(), 2 + 25, "{keys}");
        assert!(keys.contains("| `ChartNamespace` | `kyma-system` | at start | as `--chart-namespace` |"));
        assert!(
            keys.contains("| `ChartPath` | | not used | the chart version ships"),
            "{keys}"
        );
        assert!(keys.contains("| `RsaKeyBits` | (unset) | at runtime |"), "{keys}");
    }
}
