//! deploy/ holds what installs the manager. Generated files must match the Rust types they come from,
//! and the hand-written ones must agree with the code (names, ports, flags).

use btp_manager::app::{crd_yaml, webhook_manifests_yaml};
use btp_manager::cli::{Cli, Command};
use clap::Parser as _;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

fn read(name: &str) -> String {
    std::fs::read_to_string(deploy().join(name)).unwrap_or_else(|e| panic!("deploy/{name}: {e}"))
}

fn documents(name: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(&read(name))
        .unwrap_or_else(|e| panic!("deploy/{name}: {e}"))
        .into_iter()
        .filter(|v| !v.is_null())
        .collect()
}

fn regenerate_hint(file: &str, command: &str) -> String {
    format!("deploy/{file} is out of date with the Rust types: run `cargo run -q -- {command} > deploy/{file}`")
}

#[test]
fn crd_yaml_matches_the_rust_types() {
    assert!(
        read("crd.yaml") == crd_yaml().unwrap(),
        "{}",
        regenerate_hint("crd.yaml", "crd")
    );
}

#[test]
fn webhook_yaml_matches_the_rust_definition() {
    assert!(
        read("webhooks.yaml") == webhook_manifests_yaml("kyma-system").unwrap(),
        "{}",
        regenerate_hint("webhooks.yaml", "webhook-manifests")
    );
}

#[test]
fn every_manifest_parses_and_the_kustomization_lists_them_all() {
    let kustomization = documents("kustomization.yaml").remove(0);
    let listed: Vec<&str> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let mut on_disk: Vec<String> = std::fs::read_dir(deploy())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    on_disk.sort();
    let mut listed_sorted: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
    listed_sorted.sort();
    assert_eq!(
        listed_sorted, on_disk,
        "kustomization.yaml resources vs files in deploy/"
    );
    for file in listed {
        for doc in documents(file) {
            assert!(
                doc["apiVersion"].is_string() && doc["kind"].is_string(),
                "deploy/{file}: {doc}"
            );
            assert!(doc["metadata"]["name"].is_string(), "deploy/{file}: unnamed object");
        }
    }
}

#[test]
fn deployment_args_services_and_webhooks_agree() {
    let deployment = documents("deployment.yaml").remove(0);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut argv = vec!["btp-manager".to_string()];
    argv.extend(
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string()),
    );
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("deployment args {argv:?} do not parse: {e}"));
    let Command::Run(args) = cli.command else {
        panic!("the deployment must run `run`")
    };

    let ports: Vec<(String, u16)> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["containerPort"].as_u64().unwrap() as u16,
            )
        })
        .collect();
    let port = |name: &str| {
        ports
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| *p)
            .unwrap_or_else(|| panic!("port {name}"))
    };
    assert_eq!(port("webhook"), args.webhook_bind_address.port());
    assert_eq!(port("metrics"), args.metrics_bind_address.port());
    assert_eq!(port("health"), args.health_probe_bind_address.port());

    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    for service in documents("services.yaml") {
        for (k, v) in service["spec"]["selector"].as_object().unwrap() {
            assert_eq!(
                &pod_labels[k], v,
                "service {} selects pods the deployment does not label",
                service["metadata"]["name"]
            );
        }
        for p in service["spec"]["ports"].as_array().unwrap() {
            port(p["targetPort"].as_str().unwrap());
        }
    }
    let webhook_service = documents("services.yaml")
        .into_iter()
        .find(|s| s["metadata"]["name"] == btp_api::names::webhook::SERVICE_NAME)
        .expect("the webhook Service");
    assert_eq!(webhook_service["spec"]["ports"][0]["port"], 443);
    for config in documents("webhooks.yaml") {
        for hook in config["webhooks"].as_array().unwrap() {
            assert_eq!(
                hook["clientConfig"]["service"]["name"],
                btp_api::names::webhook::SERVICE_NAME
            );
            assert_eq!(hook["clientConfig"]["service"]["port"], 443);
        }
    }
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        documents("service-account.yaml")[0]["metadata"]["name"]
    );
}

#[test]
fn the_manager_may_do_what_it_does() {
    let rules: Vec<Value> = documents("rbac.yaml")
        .into_iter()
        .find(|d| d["metadata"]["name"] == "btp-manager-manager-role")
        .unwrap()["rules"]
        .as_array()
        .unwrap()
        .clone();
    let allows = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            r["apiGroups"].as_array().is_some_and(|g| g.iter().any(|g| g == group))
                && r["resources"]
                    .as_array()
                    .is_some_and(|rs| rs.iter().any(|x| x == resource))
                && r["verbs"].as_array().is_some_and(|vs| vs.iter().any(|x| x == verb))
        })
    };
    // What the webhook server and its certificate manager call.
    for verb in ["get", "create", "update", "watch", "list"] {
        assert!(allows("", "secrets", verb), "secrets {verb}");
    }
    for kind in ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"] {
        assert!(allows("admissionregistration.k8s.io", kind, "patch"), "{kind} patch");
    }
    for kind in ["serviceinstances", "servicebindings"] {
        assert!(allows("services.cloud.sap.com", kind, "list"), "{kind} list");
    }
}

/// A rolling update or a node drain never leaves admission without a serving replica: the rollout adds a
/// ready replica before it removes one, a PodDisruptionBudget keeps one, and the replicas spread over nodes
/// where there are several (docs/behaviour.md#health-and-readiness).
#[test]
fn rollouts_and_drains_keep_a_serving_replica() {
    let deployment = documents("deployment.yaml").remove(0);
    let spec = &deployment["spec"];
    assert!(spec["replicas"].as_u64().unwrap() >= 2, "two replicas");
    assert_eq!(spec["strategy"]["type"], "RollingUpdate");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    assert!(spec["strategy"]["rollingUpdate"]["maxSurge"].as_u64().unwrap() >= 1);
    let pod_labels = spec["template"]["metadata"]["labels"].as_object().unwrap().clone();
    let selects_the_pods = |selector: &serde_json::Value| {
        let labels = selector["matchLabels"].as_object().expect("matchLabels");
        !labels.is_empty() && labels.iter().all(|(k, v)| pod_labels.get(k) == Some(v))
    };
    let pdb = documents("pdb.yaml").remove(0);
    assert_eq!(pdb["apiVersion"], "policy/v1");
    assert_eq!(pdb["kind"], "PodDisruptionBudget");
    assert_eq!(pdb["metadata"]["namespace"], deployment["metadata"]["namespace"]);
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(
        selects_the_pods(&pdb["spec"]["selector"]),
        "the PDB selects the manager's pods"
    );
    let spread = spec["template"]["spec"]["topologySpreadConstraints"]
        .as_array()
        .expect("a topology spread");
    assert!(
        spread.iter().any(|c| c["topologyKey"] == "kubernetes.io/hostname"
            && c["whenUnsatisfiable"] == "ScheduleAnyway"
            && selects_the_pods(&c["labelSelector"])),
        "spread over nodes, still schedulable on one: {spread:?}"
    );
}

/// `kubectl delete -k deploy/` is the uninstall: the base must hold no Namespace (deleting `kyma-system` would
/// delete every other module's objects in it); the namespace is a prerequisite of its own, `deploy/namespace/`.
#[test]
fn the_base_kustomization_holds_no_namespace() {
    let kustomization = documents("kustomization.yaml").remove(0);
    for file in kustomization["resources"].as_array().unwrap() {
        let file = file.as_str().unwrap();
        for doc in documents(file) {
            assert_ne!(doc["kind"], "Namespace", "deploy/{file} holds a Namespace");
        }
    }
    let prerequisite = documents("namespace/namespace.yaml").remove(0);
    assert_eq!(prerequisite["kind"], "Namespace");
    assert_eq!(prerequisite["metadata"]["name"], btp_api::names::KYMA_SYSTEM);
}

/// The image a user builds is the image that runs: `deploy/deployment.yaml` names `btp-manager:<version>`, the
/// version the binary reports (`btp-manager --version`, the crate's version), pulled only where the node lacks
/// it; and every command of the README, docs/ and the Dockerfile that builds, loads or names the image
/// (`docker build`, `kind load`, `k3d image import`, `minikube image load`, `kustomize edit set image`) names that
/// tag. No `btp-manager:<tag>` with another tag anywhere there.
#[test]
fn the_image_built_loaded_and_deployed_is_the_binarys_version() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_btp-manager"))
        .arg("--version")
        .output()
        .expect("run btp-manager --version");
    let reported = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        reported,
        format!("btp-manager {version}"),
        "the version the binary reports"
    );
    let image = format!("btp-manager:{version}");

    let deployment = documents("deployment.yaml").remove(0);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], image.as_str(), "deploy/deployment.yaml's image");
    assert_eq!(
        container["imagePullPolicy"], "IfNotPresent",
        "a loaded image runs as is"
    );

    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md"), deploy().join("Dockerfile")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    for file in std::fs::read_dir(deploy()).unwrap().map(|e| e.unwrap().path()) {
        if file.extension().is_some_and(|e| e == "yaml") {
            files.push(file);
        }
    }
    let commands = [
        "docker build ",
        "kind load docker-image",
        "k3d image import",
        "minikube image load",
        "kustomize edit set image btp-manager=",
    ];
    let mut builds = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let name = file.strip_prefix(root).unwrap_or(file).display().to_string();
        // Every image reference `btp-manager:<tag>` (a registry's `.../btp-manager:<tag>` too).
        for (at, _) in text.match_indices("btp-manager:") {
            let tag: String = text[at + "btp-manager:".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .collect();
            if !tag.is_empty() {
                assert_eq!(tag, version, "{name}: btp-manager:{tag} is not the crate's version");
            }
        }
        // Every command that builds, loads or names the image names this one (inline code in prose too).
        for line in text.lines() {
            for command in commands {
                if let Some(at) = line.find(command) {
                    let rest = &line[at..];
                    assert!(
                        rest.contains(&image) || rest.contains(&format!("/btp-manager:{version}")),
                        "{name}: `{}` does not name {image} (keep a command on one line)",
                        rest.trim_end()
                    );
                    if command == "docker build " {
                        builds.push(name.clone());
                    }
                }
            }
        }
    }
    for documented in ["README.md", "docs/install.md", "deploy/Dockerfile"] {
        assert!(
            builds.iter().any(|b| b == documented),
            "{documented} shows the build command ({builds:?})"
        );
    }
}
