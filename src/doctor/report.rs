//! What `btp-manager doctor` prints: one line per check with its verdict and, when it is not a pass, what to
//! do; or the same as JSON. Nothing here talks to the API.

use serde::Serialize;

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// As it should be.
    Pass,
    /// Works, with a limitation or a risk worth knowing.
    Warn,
    /// Broken: something a user relies on does not work.
    Fail,
}

/// One check's outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Check {
    /// What was checked, e.g. `rbac`.
    pub name: String,
    /// The verdict.
    pub verdict: Verdict,
    /// What was found (never a secret value).
    pub message: String,
    /// What to do when it is not a pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// A pass.
    pub fn pass(name: &str, message: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            verdict: Verdict::Pass,
            message: message.into(),
            fix: None,
        }
    }
    /// A warning with what to do.
    pub fn warn(name: &str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            verdict: Verdict::Warn,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }
    /// A failure with what to do.
    pub fn fail(name: &str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            verdict: Verdict::Fail,
            message: message.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Every check's outcome, in the order they ran.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The checks.
    pub checks: Vec<Check>,
}

impl Report {
    /// Add checks.
    pub fn extend(&mut self, checks: impl IntoIterator<Item = Check>) {
        self.checks.extend(checks);
    }

    /// Whether nothing failed (warnings are allowed): the exit code is 0 exactly then.
    pub fn healthy(&self) -> bool {
        self.checks.iter().all(|c| c.verdict != Verdict::Fail)
    }

    /// The report for a terminal: a line per check, its fix indented below, a summary line last.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        // One column for the names, as wide as the widest.
        let width = self.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
        for c in &self.checks {
            let mark = match c.verdict {
                Verdict::Pass => "ok  ",
                Verdict::Warn => "WARN",
                Verdict::Fail => "FAIL",
            };
            out.push_str(&format!("{mark} {:<width$} {}\n", c.name, c.message));
            if let Some(fix) = &c.fix {
                out.push_str(&format!("     {:<width$} fix: {fix}\n", ""));
            }
        }
        let count = |v: Verdict| self.checks.iter().filter(|c| c.verdict == v).count();
        out.push_str(&format!(
            "{} passed, {} warnings, {} failed\n",
            count(Verdict::Pass),
            count(Verdict::Warn),
            count(Verdict::Fail)
        ));
        out
    }

    /// The report as JSON (`-o json`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_are_healthy_failures_are_not_and_fixes_are_printed() {
        let mut r = Report::default();
        r.extend([Check::pass("version", "v1.36"), Check::warn("x", "old", "upgrade")]);
        assert!(r.healthy());
        r.extend([Check::fail("rbac", "cannot create pods", "kubectl apply -k deploy/")]);
        assert!(!r.healthy());
        let text = r.to_text();
        assert!(text.contains("FAIL rbac"), "{text}");
        assert!(text.contains("fix: kubectl apply -k deploy/"), "{text}");
        assert!(text.ends_with("1 passed, 1 warnings, 1 failed\n"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["checks"][2]["verdict"], "fail");
        assert!(json["checks"][0].get("fix").is_none());
    }

    #[test]
    fn every_message_starts_in_one_column_however_long_a_name_is() {
        let mut r = Report::default();
        r.extend([
            Check::pass("crd", "matches"),
            Check::pass("apiserver-egress", "reachable"),
            Check::fail("rbac", "lacks", "apply"),
        ]);
        let text = r.to_text();
        let columns: Vec<usize> = ["matches", "reachable", "lacks", "fix: apply"]
            .iter()
            .map(|m| {
                let line = text.lines().find(|l| l.ends_with(m)).expect("a line per message");
                line.len() - m.len()
            })
            .collect();
        assert!(columns.iter().all(|c| *c == columns[0]), "{text}");
    }
}
