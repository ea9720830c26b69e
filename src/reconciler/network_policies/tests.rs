use super::*;
use crate::reconciler::credentials::{validate, Credentials, Observed};
use crate::reconciler::resources::{prepare, Inputs, ModuleResources};
use serde_json::json;
use std::path::{Path, PathBuf};

const NAMES: [&str; 4] = [
    "kyma-project.io--btp-operator-allow-to-apiserver",
    "kyma-project.io--btp-operator-to-dns",
    "kyma-project.io--allow-btp-operator-metrics",
    "kyma-project.io--allow-btp-operator-webhook",
];

fn shipped() -> Vec<Value> {
    load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("manager-resources")).unwrap()
}

fn by_name<'a>(policies: &'a [Value], name: &str) -> &'a Value {
    policies.iter().find(|p| p["metadata"]["name"] == name).unwrap()
}

/// A fresh, empty `<tmp>/<unique>` directory; the caller removes it.
fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("btp-netpol-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join(DIRECTORY)).unwrap();
    dir
}

#[test]
fn shipped_file_has_the_four_policies() {
    let policies = shipped();
    let names: Vec<&str> = policies
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES);
    let module = json!({"kyma-project.io/module": "btp-operator"});
    for p in &policies {
        assert_eq!(p["kind"], "NetworkPolicy");
        assert_eq!(p["apiVersion"], "networking.k8s.io/v1");
        assert_eq!(p["metadata"]["namespace"], "kyma-system");
        let labels = &p["metadata"]["labels"];
        for key in [names::MANAGED_BY_LABEL, names::MODULE_LABEL, names::CHART_VERSION_LABEL] {
            assert!(labels.get(key).is_none(), "{key} is added by preparation, not shipped");
        }
        if p["metadata"]["name"] != NAMES[3] {
            assert_eq!(p["spec"]["podSelector"]["matchLabels"], module);
        }
    }
    assert_eq!(
        by_name(&policies, NAMES[3])["spec"]["podSelector"]["matchLabels"],
        json!({"kyma-project.io/module": "btp-operator", "app.kubernetes.io/instance": "sap-btp-operator"})
    );
    assert_eq!(
        by_name(&policies, NAMES[1])["metadata"]["labels"],
        json!({"purpose": "dns"})
    );
    for name in [NAMES[0], NAMES[2], NAMES[3]] {
        assert!(by_name(&policies, name)["metadata"].get("labels").is_none(), "{name}");
    }
}

#[test]
fn shipped_rules() {
    let policies = shipped();
    let tcp = |port: u16| json!({"protocol": "TCP", "port": port});
    let both = |port: u16| json!([{"protocol": "UDP", "port": port}, tcp(port)]);

    let api = &by_name(&policies, NAMES[0])["spec"];
    assert_eq!(api["policyTypes"], json!(["Egress"]));
    assert_eq!(api["egress"], json!([{"ports": [tcp(443)]}]));

    let dns = &by_name(&policies, NAMES[1])["spec"];
    assert_eq!(dns["policyTypes"], json!(["Egress"]));
    let kube_system = json!({"matchLabels": {"gardener.cloud/purpose": "kube-system"}});
    assert_eq!(
        dns["egress"],
        json!([
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": both(53)},
            {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                     "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
             "ports": both(53)},
            {"to": [{"namespaceSelector": kube_system, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
             "ports": both(8053)},
            {"to": [{"namespaceSelector": kube_system, "podSelector": {"matchLabels": {"k8s-app": "node-local-dns"}}}],
             "ports": both(53)},
        ])
    );

    let metrics = &by_name(&policies, NAMES[2])["spec"];
    assert_eq!(metrics["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        metrics["ingress"],
        json!([{
            "from": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kyma-system"}},
                "podSelector": {"matchLabels": {"networking.kyma-project.io/metrics-scraping": "allowed"}},
            }],
            "ports": [tcp(8080)],
        }])
    );

    let webhook = &by_name(&policies, NAMES[3])["spec"];
    assert_eq!(webhook["policyTypes"], json!(["Ingress"]));
    assert_eq!(webhook["ingress"], json!([{"ports": [tcp(9443)]}]));
}

fn credentials() -> Credentials {
    let data: BTreeMap<String, Vec<u8>> = [
        ("clientid", "id"),
        ("clientsecret", "pw"),
        ("sm_url", "https://sm"),
        ("tokenurl", "https://t"),
        ("cluster_id", "c-1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
    .collect();
    validate(Observed::Present(&data), "sap-btp-manager", "btp-ns").unwrap()
}

#[test]
fn prepared_policies_carry_standard_labels_and_chart_namespace() {
    let manifests = json!([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "sap-btp-operator-config", "namespace": "kyma-system"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sap-btp-service-operator", "namespace": "kyma-system"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "sap-btp-operator-controller-manager", "namespace": "kyma-system"},
         "spec": {"template": {"spec": {"containers": [{"name": "manager", "image": ""}]}}}}
    ]);
    let resources = ModuleResources {
        apply: manifests.as_array().unwrap().clone(),
        delete: vec![],
        chart_version: "v0.11.10".into(),
        sources: Default::default(),
    };
    let Plan::Apply(policies) = plan(&shipped(), true) else {
        panic!("enabled must apply");
    };
    let c = credentials();
    let inputs = Inputs {
        chart_namespace: "btp-ns",
        deployment_name: "sap-btp-operator-controller-manager",
        credentials: &c,
        enable_limited_cache: "false",
        image: "registry/operator:v1",
        rbac_proxy_image: None,
        ca_bundle: None,
        extra: &policies,
        unversioned: &[],
        kinds: None,
    };
    let objs = prepare(&resources, &inputs).unwrap();
    let prepared: Vec<&Value> = objs.iter().filter(|o| o["kind"] == "NetworkPolicy").collect();
    let names: Vec<&str> = prepared
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, NAMES, "policies follow the manifests, in file order");
    assert_eq!(objs.len(), 3 + NAMES.len());
    for p in prepared {
        let labels = &p["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/managed-by"], "btp-manager");
        assert_eq!(labels["chart-version"], "v0.11.10");
        assert_eq!(labels["kyma-project.io/module"], "btp-operator");
        assert_eq!(p["metadata"]["namespace"], "btp-ns");
        if p["metadata"]["name"] == NAMES[1] {
            assert_eq!(labels["purpose"], "dns", "shipped labels are kept");
        }
    }
}

#[test]
fn enabled_truth_table() {
    let with = |v: Option<&str>| {
        let mut a = BTreeMap::from([("other".to_string(), "true".to_string())]);
        if let Some(v) = v {
            a.insert(names::DISABLE_NETWORK_POLICIES_ANNOTATION.into(), v.into());
        }
        enabled(&a)
    };
    assert!(with(None));
    assert!(!with(Some("true")));
    assert!(!with(Some("TRUE")));
    assert!(!with(Some("True")));
    assert!(with(Some("false")));
    assert!(with(Some("random")));
    assert!(with(Some("")));
    assert!(with(Some(" true")), "no trimming");
    assert!(enabled(&BTreeMap::new()));
}

#[test]
fn plan_both_ways() {
    let policies = shipped();
    assert_eq!(plan(&policies, true), Plan::Apply(policies.clone()));
    assert_eq!(plan(&policies, false), Plan::Remove);
    assert_eq!(plan(&[], true), Plan::Apply(vec![]));
}

#[test]
fn selector_and_legacy_name() {
    assert_eq!(
        managed_selector(),
        "app.kubernetes.io/managed-by=btp-manager,kyma-project.io/module=btp-operator"
    );
    assert_eq!(LEGACY_POLICY, "kyma-project.io--btp-operator-allow-to-webhook");
    assert!(!NAMES.contains(&LEGACY_POLICY));
}

#[test]
fn load_reads_yaml_files_in_lexical_order() {
    let dir = temp_dir("order");
    let policy =
        |name: &str| format!("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: {name}\n");
    let sub = dir.join(DIRECTORY);
    std::fs::write(sub.join("b.yml"), format!("---\n{}---\n{}", policy("b1"), policy("b2"))).unwrap();
    std::fs::write(sub.join("a.yaml"), policy("a")).unwrap();
    std::fs::write(sub.join("empty.yaml"), "").unwrap();
    std::fs::write(sub.join("ignored.txt"), "kind: Secret\n").unwrap();
    std::fs::create_dir(sub.join("nested.yaml")).unwrap();
    let loaded = load(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    let names: Vec<String> = loaded
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["a", "b1", "b2"]);
}

#[test]
fn load_rejects_other_kinds_and_nameless_policies() {
    for (tag, doc) in [
        ("kind", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n"),
        (
            "noname",
            "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {}\n",
        ),
        ("scalar", "just text\n"),
    ] {
        let dir = temp_dir(tag);
        let file = dir.join(DIRECTORY).join("p.yaml");
        std::fs::write(&file, doc).unwrap();
        let result = load(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        match result {
            Err(LoadError::Invalid { path, .. }) => assert_eq!(path, file, "{tag}"),
            other => panic!("{tag}: {other:?}"),
        }
    }
}

#[test]
fn load_rejects_invalid_yaml() {
    let dir = temp_dir("yaml");
    std::fs::write(dir.join(DIRECTORY).join("p.yaml"), "kind: [unclosed\n").unwrap();
    let result = load(&dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(result, Err(LoadError::Invalid { .. })), "{result:?}");
}

#[test]
fn missing_directory_is_an_error_naming_it() {
    let dir = std::env::temp_dir().join(format!("btp-netpol-missing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let err = load(&dir).unwrap_err();
    assert!(err.to_string().contains(DIRECTORY), "{err}");
    match err {
        LoadError::Read { path, source } => {
            assert_eq!(path, dir.join(DIRECTORY));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
}

fn slice(ports: Value) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    serde_json::from_value(json!({
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": "IPv4", "endpoints": [], "ports": ports,
    }))
    .unwrap()
}

#[test]
fn api_server_ports_are_the_slices_tcp_ports_but_443() {
    let kubeadm = slice(json!([{"name": "https", "port": 6443, "protocol": "TCP"}]));
    let gardener = slice(json!([{"name": "https", "port": 443, "protocol": "TCP"}]));
    let odd = slice(json!([{"port": 7443}, {"port": 53, "protocol": "UDP"}, {"name": "none"}]));
    assert_eq!(api_server_ports([&kubeadm]), [6443].into());
    assert!(api_server_ports([&gardener]).is_empty());
    assert_eq!(
        api_server_ports([&odd, &kubeadm]),
        [6443, 7443].into(),
        "TCP by default; UDP and unset ignored"
    );
    assert!(api_server_ports([]).is_empty());
}

#[test]
fn render_adds_the_endpoint_ports_to_the_api_server_policy_only() {
    let policies = shipped();
    assert_eq!(render(&policies, &Default::default()), policies, "no ports: as shipped");
    let rendered = render(&policies, &[6443, 7443].into());
    let egress = by_name(&rendered, NAMES[0])["spec"]["egress"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(egress.len(), 2);
    assert_eq!(
        egress[0],
        by_name(&policies, NAMES[0])["spec"]["egress"][0],
        "443 stays"
    );
    assert_eq!(
        egress[1],
        json!({"ports": [{"protocol": "TCP", "port": 6443}, {"protocol": "TCP", "port": 7443}]})
    );
    for name in &NAMES[1..] {
        assert_eq!(by_name(&rendered, name), by_name(&policies, name), "{name} untouched");
    }
}

#[test]
fn dns_is_allowed_to_kube_dns_in_kube_system() {
    let dns = by_name(&shipped(), NAMES[1]).clone();
    let rule = dns["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["to"][0]["podSelector"]["matchLabels"]["k8s-app"] == "kube-dns"
                && r["to"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == "kube-system"
        })
        .expect("a rule for kube-dns in kube-system");
    assert_eq!(
        rule["ports"],
        json!([{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}])
    );
}
