//! The NetworkPolicies we install (`manager-resources/network-policies`, applied by the reconciler) and
//! ship (`deploy/`) let the API server reach both admission webhooks: the manager's (port 9443 of the pod
//! of `deploy/deployment.yaml`) and the operand's (port 9443 of the pod of `module-resources/apply`).
//!
//! A small, pure NetworkPolicy evaluator (ingress only, as the Kubernetes documentation defines it): a pod
//! is isolated for ingress once any policy in its namespace selects it with policy type Ingress; then a
//! connection is admitted only if some such policy has an ingress rule whose `ports` (none = all; numbers
//! or named container ports) and `from` (none = everyone) match. The API server is a peer outside the
//! cluster's pod network: only `ipBlock`s covering its address (or a rule without `from`) admit it, never a
//! `podSelector`/`namespaceSelector`. A pod inside the cluster is matched by those selectors.

use serde_json::Value;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::Path;

type Labels = BTreeMap<String, String>;

fn read_all(path: &str) -> Vec<Value> {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    let files: Vec<std::path::PathBuf> = if full.is_dir() {
        let mut f: Vec<_> = std::fs::read_dir(&full)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
            .collect();
        f.sort();
        f
    } else {
        vec![full]
    };
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            serde_saphyr::from_multiple::<Value>(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn labels(v: &Value) -> Labels {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// `matchLabels` and `matchExpressions` (In, NotIn, Exists, DoesNotExist); an empty selector matches all.
fn selects(selector: &Value, l: &Labels) -> bool {
    let by_labels = labels(&selector["matchLabels"])
        .iter()
        .all(|(k, v)| l.get(k) == Some(v));
    let by_expressions = selector["matchExpressions"].as_array().into_iter().flatten().all(|e| {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match e["operator"].as_str().unwrap_or("") {
            "In" => l.get(key).is_some_and(|v| values.contains(&v.as_str())),
            "NotIn" => l.get(key).is_none_or(|v| !values.contains(&v.as_str())),
            "Exists" => l.contains_key(key),
            "DoesNotExist" => !l.contains_key(key),
            _ => false,
        }
    });
    by_labels && by_expressions
}

/// A pod: namespace, labels, container ports (name, number, protocol).
#[derive(Clone, Debug)]
struct Pod {
    namespace: String,
    labels: Labels,
    ports: Vec<(String, u16, String)>,
}

impl Pod {
    fn from_deployment(d: &Value) -> Self {
        let template = &d["spec"]["template"];
        let ports = template["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
            .map(|p| {
                (
                    p["name"].as_str().unwrap_or("").to_string(),
                    u16::try_from(p["containerPort"].as_u64().unwrap_or(0)).unwrap_or(0),
                    p["protocol"].as_str().unwrap_or("TCP").to_string(),
                )
            })
            .collect();
        Self {
            namespace: d["metadata"]["namespace"].as_str().unwrap_or("default").to_string(),
            labels: labels(&template["metadata"]["labels"]),
            ports,
        }
    }

    fn port_named(&self, name: &str) -> u16 {
        self.ports
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, p, _)| *p)
            .unwrap_or_else(|| panic!("no container port named {name}"))
    }
}

/// Who connects.
#[derive(Clone, Debug)]
enum Peer {
    /// Outside the pod network (the API server, a node): only ipBlocks can admit it.
    External(Ipv4Addr),
    /// A pod in a namespace with these labels.
    Pod { namespace_labels: Labels, labels: Labels },
}

fn cidr_contains(cidr: &str, ip: Ipv4Addr) -> bool {
    let Some((net, bits)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(net), Ok(bits)) = (net.parse::<Ipv4Addr>(), bits.parse::<u32>()) else {
        return false; // IPv6 blocks never cover an IPv4 peer
    };
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - bits.min(32)) };
    (u32::from(net) & mask) == (u32::from(ip) & mask)
}

fn peer_matches(from: &Value, peer: &Peer, target_namespace: &str) -> bool {
    if let Some(block) = from.get("ipBlock") {
        let Peer::External(ip) = peer else {
            // Pod IPs may fall in a block too, but our policies never rely on that.
            return false;
        };
        let cidr = block["cidr"].as_str().unwrap_or("");
        let excepted = block["except"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(|e| cidr_contains(e, *ip));
        return cidr_contains(cidr, *ip) && !excepted;
    }
    let Peer::Pod {
        namespace_labels,
        labels,
    } = peer
    else {
        return false;
    };
    let namespace_ok = match from.get("namespaceSelector") {
        Some(sel) => selects(sel, namespace_labels),
        // Without namespaceSelector: pods of the policy's own namespace only.
        None => namespace_labels.get("kubernetes.io/metadata.name").map(String::as_str) == Some(target_namespace),
    };
    let pod_ok = from.get("podSelector").is_none_or(|sel| selects(sel, labels));
    namespace_ok && pod_ok
}

fn port_matches(rule_port: &Value, pod: &Pod, port: u16) -> bool {
    let protocol = rule_port["protocol"].as_str().unwrap_or("TCP");
    let (_, _, pod_protocol) = pod
        .ports
        .iter()
        .find(|(_, p, _)| *p == port)
        .cloned()
        .unwrap_or_default();
    if protocol != pod_protocol && !pod_protocol.is_empty() {
        return false;
    }
    match &rule_port["port"] {
        Value::Null => true,
        Value::Number(n) => {
            let start = n.as_u64().unwrap_or(0);
            let end = rule_port["endPort"].as_u64().unwrap_or(start);
            (start..=end).contains(&u64::from(port))
        }
        Value::String(name) => pod.ports.iter().any(|(n, p, _)| n == name && *p == port),
        _ => false,
    }
}

fn is_ingress_policy(policy: &Value) -> bool {
    match policy["spec"]["policyTypes"].as_array() {
        Some(types) => types.iter().any(|t| t == "Ingress"),
        None => true, // default: Ingress (plus Egress when egress rules exist)
    }
}

/// Whether `peer` may open a connection to `pod` on `port` under `policies`; the policies that isolate
/// the pod are returned for the message.
fn admitted(policies: &[Value], pod: &Pod, port: u16, peer: &Peer) -> (bool, Vec<String>) {
    let isolating: Vec<&Value> = policies
        .iter()
        .filter(|p| p["kind"] == "NetworkPolicy")
        .filter(|p| p["metadata"]["namespace"].as_str().unwrap_or("default") == pod.namespace)
        .filter(|p| is_ingress_policy(p) && selects(&p["spec"]["podSelector"], &pod.labels))
        .collect();
    let names = isolating
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    if isolating.is_empty() {
        return (true, names);
    }
    let ok = isolating.iter().any(|p| {
        p["spec"]["ingress"].as_array().into_iter().flatten().any(|rule| {
            let ports_ok = match rule["ports"].as_array() {
                None => true,
                Some(ports) => ports.is_empty() || ports.iter().any(|rp| port_matches(rp, pod, port)),
            };
            let from_ok = match rule["from"].as_array() {
                None => true,
                Some(from) => from.is_empty() || from.iter().any(|f| peer_matches(f, peer, &pod.namespace)),
            };
            ports_ok && from_ok
        })
    });
    (ok, names)
}

/// What the cluster runs: the policies we install (in the chart namespace, as the reconciler applies
/// them) and the ones `deploy/` ships.
fn policies() -> Vec<Value> {
    let mut all = read_all("manager-resources/network-policies");
    all.extend(read_all("deploy").into_iter().filter(|o| o["kind"] == "NetworkPolicy"));
    assert!(all.len() >= 4, "the operand's policies are loaded");
    all
}

fn manager_pod() -> Pod {
    let d = read_all("deploy/deployment.yaml")
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("deploy/deployment.yaml has the manager's Deployment");
    Pod::from_deployment(&d)
}

/// The operand's pod as installed: the manifest's template plus the module label the reconciler adds
/// (`src/reconciler/resources.rs`, "kyma-project.io/module" on the pod template).
fn operand_pods() -> Vec<(&'static str, Pod)> {
    let d = read_all("module-resources/apply/deployment.yml")
        .into_iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("the operand Deployment");
    let shipped = Pod::from_deployment(&d);
    let mut installed = shipped.clone();
    installed
        .labels
        .insert("kyma-project.io/module".into(), "btp-operator".into());
    vec![("as in the manifest", shipped), ("as installed", installed)]
}

/// Somewhere outside the pod network, e.g. a control plane on another network.
fn api_server() -> Peer {
    Peer::External(Ipv4Addr::new(10, 250, 0, 1))
}

#[test]
fn the_api_server_reaches_the_managers_webhook() {
    let pod = manager_pod();
    let port = pod.port_named("webhook");
    assert_eq!(port, 9443);
    let (ok, isolating) = admitted(&policies(), &pod, port, &api_server());
    assert!(
        ok,
        "the API server cannot reach the manager's webhook port {port}; pod labels {:?}, isolated by {isolating:?}",
        pod.labels
    );
    assert!(
        !isolating.is_empty(),
        "the operand's policies do select the manager's pod (it carries the module label), so this is a real check"
    );
}

#[test]
fn the_api_server_reaches_the_operands_webhook() {
    for (what, pod) in operand_pods() {
        let port = pod.port_named("webhook-server");
        let (ok, isolating) = admitted(&policies(), &pod, port, &api_server());
        assert!(
            ok,
            "{what}: the API server cannot reach the operand's webhook port {port}; isolated by {isolating:?}"
        );
    }
}

#[test]
fn metrics_stay_open_to_scrapers_only() {
    let pod = manager_pod();
    let port = pod.port_named("metrics");
    let scraper = |allowed: bool| Peer::Pod {
        namespace_labels: Labels::from([("kubernetes.io/metadata.name".into(), "kyma-system".into())]),
        labels: if allowed {
            Labels::from([("networking.kyma-project.io/metrics-scraping".into(), "allowed".into())])
        } else {
            Labels::new()
        },
    };
    assert!(admitted(&policies(), &pod, port, &scraper(true)).0);
    assert!(
        !admitted(&policies(), &pod, port, &scraper(false)).0,
        "metrics are not open to every pod"
    );
    assert!(!admitted(&policies(), &pod, port, &api_server()).0);
}

/// The manager's own policy must survive the reconciler: disabling the operand's policies deletes those
/// labelled managed-by=btp-manager in the chart namespace, and deprovisioning removes what carries both
/// managed-by=btp-manager and the module label.
#[test]
fn the_shipped_policy_is_not_one_the_reconciler_removes() {
    let shipped: Vec<Value> = read_all("deploy")
        .into_iter()
        .filter(|o| o["kind"] == "NetworkPolicy")
        .collect();
    assert!(!shipped.is_empty(), "deploy/ ships the manager's NetworkPolicy");
    for policy in shipped {
        let l = labels(&policy["metadata"]["labels"]);
        assert_ne!(
            l.get("app.kubernetes.io/managed-by").map(String::as_str),
            Some("btp-manager"),
            "{}: the reconciler would delete it",
            policy["metadata"]["name"]
        );
    }
}

#[test]
fn the_evaluator_follows_the_rules() {
    let pod = Pod {
        namespace: "ns".into(),
        labels: Labels::from([("app".into(), "a".into())]),
        ports: vec![("web".into(), 8443, "TCP".into()), ("dns".into(), 53, "UDP".into())],
    };
    let policy = |spec: Value| serde_json::json!({"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec});
    let ext = api_server();
    // No policy: open.
    assert!(admitted(&[], &pod, 8443, &ext).0);
    // Selected, no rules: closed. Egress-only: not isolated for ingress.
    assert!(
        !admitted(
            &[policy(
                serde_json::json!({"podSelector": {}, "policyTypes": ["Ingress"]})
            )],
            &pod,
            8443,
            &ext
        )
        .0
    );
    assert!(
        admitted(
            &[policy(
                serde_json::json!({"podSelector": {}, "policyTypes": ["Egress"]})
            )],
            &pod,
            8443,
            &ext
        )
        .0
    );
    // Another namespace's policy does not apply.
    let mut other = policy(serde_json::json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
    other["metadata"]["namespace"] = "other".into();
    assert!(admitted(&[other], &pod, 8443, &ext).0);
    // Ports by number and name; from anywhere.
    let by_name = policy(
        serde_json::json!({"podSelector": {"matchLabels": {"app": "a"}}, "ingress": [{"ports": [{"port": "web"}]}]}),
    );
    assert!(admitted(std::slice::from_ref(&by_name), &pod, 8443, &ext).0);
    assert!(!admitted(&[by_name], &pod, 53, &ext).0);
    // A pod selector never admits an external peer; an ipBlock does unless excepted.
    let pods_only = policy(serde_json::json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {}}]}]}));
    assert!(!admitted(&[pods_only], &pod, 8443, &ext).0);
    let block = policy(
        serde_json::json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.250.0.0/16"]}}]}]}),
    );
    assert!(!admitted(std::slice::from_ref(&block), &pod, 8443, &ext).0);
    assert!(admitted(&[block], &pod, 8443, &Peer::External(Ipv4Addr::new(10, 1, 2, 3))).0);
    // matchExpressions.
    let expr = serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["a", "b"]}]});
    assert!(selects(&expr, &pod.labels));
    assert!(!selects(
        &serde_json::json!({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}),
        &pod.labels
    ));
}
