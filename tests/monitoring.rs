//! The alert rules of `deploy/monitoring/prometheusrule.yaml`, unit-tested with Prometheus's own `promtool test
//! rules` (`tests/alerts/btp-manager.test.yaml`: each alert firing and not firing), each with a runbook in
//! `docs/troubleshooting.md`. `promtool` comes from `PROMTOOL` or the PATH (`scripts/test` installs it from
//! Debian's `prometheus` package). That the rules name only metrics the manager exports is checked against
//! `local`'s `/metrics` in `tests/local.rs`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn rule() -> Value {
    let text = std::fs::read_to_string(repo("deploy/monitoring/prometheusrule.yaml")).unwrap();
    serde_saphyr::from_str(&text).expect("the PrometheusRule is YAML")
}

fn alerts() -> Vec<Value> {
    rule()["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| r["alert"].is_string())
        .collect()
}

fn promtool() -> String {
    std::env::var("PROMTOOL").unwrap_or_else(|_| "promtool".into())
}

#[test]
fn promtool_unit_tests_of_every_alert_pass() {
    let dir = std::env::temp_dir().join(format!("btp-alerts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // promtool reads rule groups; the PrometheusRule carries them under spec (JSON is YAML).
    let groups = serde_json::json!({"groups": rule()["spec"]["groups"]});
    std::fs::write(dir.join("rules.yaml"), serde_json::to_string_pretty(&groups).unwrap()).unwrap();
    std::fs::copy(
        repo("tests/alerts/btp-manager.test.yaml"),
        dir.join("btp-manager.test.yaml"),
    )
    .unwrap();
    let check = Command::new(promtool())
        .args(["check", "rules", "rules.yaml"])
        .current_dir(&dir)
        .output()
        .unwrap_or_else(|e| panic!("promtool must be installed (scripts/test installs it, or set PROMTOOL): {e}"));
    assert!(
        check.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = Command::new(promtool())
        .args(["test", "rules", "btp-manager.test.yaml"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
    println!("{output}");
    assert!(test.status.success(), "promtool test rules:\n{output}");
    assert!(output.contains("SUCCESS"), "{output}");
}

#[test]
fn every_alert_has_a_severity_a_runbook_and_a_firing_and_a_quiet_test() {
    let tests: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo("tests/alerts/btp-manager.test.yaml")).unwrap())
            .expect("the promtool tests are YAML");
    let troubleshooting = std::fs::read_to_string(repo("docs/troubleshooting.md")).unwrap();
    let alerts = alerts();
    assert!(alerts.len() >= 7, "the alerts the issue asks for: {}", alerts.len());
    for alert in alerts {
        let name = alert["alert"].as_str().unwrap();
        assert!(
            matches!(alert["labels"]["severity"].as_str(), Some("warning" | "critical")),
            "{name}: severity"
        );
        let runbook = alert["annotations"]["runbook_url"].as_str().unwrap_or_default();
        let anchor = format!("alert-{}", name.to_lowercase());
        assert_eq!(
            runbook,
            format!("docs/troubleshooting.md#{anchor}"),
            "{name}: runbook_url"
        );
        assert!(
            troubleshooting.contains(&format!("### Alert: {name}\n")),
            "{name}: docs/troubleshooting.md has a runbook section `### Alert: {name}` (anchor #{anchor})"
        );
        let cases: Vec<&Value> = tests["tests"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|t| t["alert_rule_test"].as_array().unwrap().iter())
            .filter(|c| c["alertname"] == name)
            .collect();
        assert!(
            cases
                .iter()
                .any(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty())),
            "{name}: a promtool case where it fires"
        );
        assert!(
            cases
                .iter()
                .any(|c| c["exp_alerts"].as_array().is_some_and(Vec::is_empty)),
            "{name}: a promtool case where it does not"
        );
    }
}
