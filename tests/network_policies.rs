//! The NetworkPolicies we install (`manager-resources/network-policies`, applied by the reconciler) and
//! ship (`deploy/`) let the API server reach both admission webhooks: the manager's (port 9443 of the pod
//! of `deploy/deployment.yaml`) and the operand's (port 9443 of the pod of `module-resources/apply`).
//!
//! They also let both pods reach, on every cluster shape users run (kubeadm, kind, k3s, Gardener, EKS/GKE and
//! the v1.36 cluster the project is verified on), the API server and the cluster DNS, and the operand
//! reach SAP BTP on 443: egress is evaluated after the Service's translation, against the endpoint
//! (the `default/kubernetes` EndpointSlice's address and port, the `kube-dns` pod and its port), as Calico
//! and Cilium do, and an `ipBlock` never matches a pod (Cilium's rule).
//!
//! A small, pure NetworkPolicy evaluator (as the Kubernetes documentation defines it): a pod
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

// --- Egress -----------------------------------------------------------------------------------------

fn is_egress_policy(policy: &Value) -> bool {
    match policy["spec"]["policyTypes"].as_array() {
        Some(types) => types.iter().any(|t| t == "Egress"),
        None => policy["spec"].get("egress").is_some(),
    }
}

/// Where a connection goes after the Service's translation: the endpoint and its port.
#[derive(Clone, Debug)]
struct Destination {
    peer: Peer,
    port: u16,
    protocol: &'static str,
}

fn egress_port_matches(rule_port: &Value, dest: &Destination) -> bool {
    if rule_port["protocol"].as_str().unwrap_or("TCP") != dest.protocol {
        return false;
    }
    match &rule_port["port"] {
        Value::Null => true,
        Value::Number(n) => {
            let start = n.as_u64().unwrap_or(0);
            let end = rule_port["endPort"].as_u64().unwrap_or(start);
            (start..=end).contains(&u64::from(dest.port))
        }
        // A named port names the destination pod's container port; our policies use none.
        _ => false,
    }
}

/// Whether `pod` may open a connection to `dest` under `policies` (egress), and the isolating policies.
fn egress_admitted(policies: &[Value], pod: &Pod, dest: &Destination) -> (bool, Vec<String>) {
    let isolating: Vec<&Value> = policies
        .iter()
        .filter(|p| p["kind"] == "NetworkPolicy")
        .filter(|p| p["metadata"]["namespace"].as_str().unwrap_or("default") == pod.namespace)
        .filter(|p| is_egress_policy(p) && selects(&p["spec"]["podSelector"], &pod.labels))
        .collect();
    let names = isolating
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    if isolating.is_empty() {
        return (true, names);
    }
    let ok = isolating.iter().any(|p| {
        p["spec"]["egress"].as_array().into_iter().flatten().any(|rule| {
            let ports_ok = match rule["ports"].as_array() {
                None => true,
                Some(ports) => ports.is_empty() || ports.iter().any(|rp| egress_port_matches(rp, dest)),
            };
            let to_ok = match rule["to"].as_array() {
                None => true,
                Some(to) => to.is_empty() || to.iter().any(|t| peer_matches(t, &dest.peer, &pod.namespace)),
            };
            ports_ok && to_ok
        })
    });
    (ok, names)
}

/// A cluster as its distribution ships it: the `default/kubernetes` EndpointSlice and the DNS pods the
/// `kube-dns` Service translates to (namespace labels, pod labels, the port they listen on).
struct Shape {
    name: &'static str,
    api_slice: Value,
    dns: Vec<(Labels, Labels, u16)>,
}

fn slice(address: &str, port: u16) -> Value {
    serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "kubernetes",
                                "endpointslice.kubernetes.io/managed-by": "endpointslicemirroring-controller.k8s.io"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    })
}

fn l(pairs: &[(&str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// `kube-system` as every distribution labels it (the automatic name label), and CoreDNS/kube-dns pods
/// labelled `k8s-app: kube-dns` listening on 53.
fn kube_dns() -> (Labels, Labels, u16) {
    (
        l(&[("kubernetes.io/metadata.name", "kube-system")]),
        l(&[("k8s-app", "kube-dns")]),
        53,
    )
}

fn shapes() -> Vec<Shape> {
    let gardener_ns = l(&[
        ("kubernetes.io/metadata.name", "kube-system"),
        ("gardener.cloud/purpose", "kube-system"),
    ]);
    vec![
        Shape {
            name: "kubeadm",
            api_slice: slice("192.168.56.10", 6443),
            dns: vec![kube_dns()],
        },
        Shape {
            name: "kind",
            api_slice: slice("172.18.0.2", 6443),
            dns: vec![kube_dns()],
        },
        Shape {
            name: "k3s",
            api_slice: slice("10.0.2.15", 6443),
            dns: vec![kube_dns()],
        },
        Shape {
            // CoreDNS on 8053 behind the kube-dns Service, and the node-local DNS cache on 53.
            name: "Gardener",
            api_slice: slice("10.243.0.1", 443),
            dns: vec![
                (gardener_ns.clone(), l(&[("k8s-app", "kube-dns")]), 8053),
                (gardener_ns, l(&[("k8s-app", "node-local-dns")]), 53),
            ],
        },
        Shape {
            name: "EKS/GKE",
            api_slice: slice("172.16.0.2", 443),
            dns: vec![kube_dns()],
        },
        Shape {
            // The control plane this project is verified on listens on 7443.
            name: "v1.36 (7443)",
            api_slice: slice("10.96.0.1", 7443),
            dns: vec![kube_dns()],
        },
    ]
}

/// The policies as the reconciler renders them for `shape` (its `render`, fed its EndpointSlice), plus the
/// manager's shipped policy.
fn rendered_for(shape: &Shape) -> Vec<Value> {
    use btp_manager::reconciler::network_policies as np;
    let loaded = np::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("manager-resources")).unwrap();
    let slice: k8s_openapi::api::discovery::v1::EndpointSlice =
        serde_json::from_value(shape.api_slice.clone()).unwrap();
    let mut all = np::render(&loaded, &np::api_server_ports([&slice]));
    all.extend(read_all("deploy").into_iter().filter(|o| o["kind"] == "NetworkPolicy"));
    all
}

fn both_pods() -> Vec<(String, Pod)> {
    let mut pods = vec![("the manager".to_string(), manager_pod())];
    pods.extend(
        operand_pods()
            .into_iter()
            .map(|(what, pod)| (format!("the operand {what}"), pod)),
    );
    pods
}

fn api_destination(shape: &Shape) -> Destination {
    let address = shape.api_slice["endpoints"][0]["addresses"][0]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let port = u16::try_from(shape.api_slice["ports"][0]["port"].as_u64().unwrap()).unwrap();
    Destination {
        peer: Peer::External(address),
        port,
        protocol: "TCP",
    }
}

#[test]
fn on_every_cluster_shape_both_pods_reach_the_api_server_and_dns() {
    for shape in shapes() {
        let policies = rendered_for(&shape);
        for (who, pod) in both_pods() {
            let api = api_destination(&shape);
            let (ok, isolating) = egress_admitted(&policies, &pod, &api);
            assert!(
                ok,
                "{}: {who} cannot reach the API server at its endpoint port {}; isolated by {isolating:?}",
                shape.name, api.port
            );
            if who.contains("installed") || who == "the manager" {
                assert!(
                    !isolating.is_empty(),
                    "{}: {who} is isolated for egress: a real check",
                    shape.name
                );
            }
            for (namespace_labels, labels, port) in &shape.dns {
                for protocol in ["UDP", "TCP"] {
                    let dns = Destination {
                        peer: Peer::Pod {
                            namespace_labels: namespace_labels.clone(),
                            labels: labels.clone(),
                        },
                        port: *port,
                        protocol,
                    };
                    assert!(
                        egress_admitted(&policies, &pod, &dns).0,
                        "{}: {who} cannot reach DNS {labels:?} on {protocol} {port}",
                        shape.name
                    );
                }
            }
        }
    }
}

#[test]
fn on_every_cluster_shape_the_operand_reaches_sap_btp_and_the_webhooks_stay_reachable() {
    for shape in shapes() {
        let policies = rendered_for(&shape);
        for (what, pod) in operand_pods() {
            // Service Manager and the token endpoint: public addresses on 443.
            for ip in [Ipv4Addr::new(52, 28, 1, 10), Ipv4Addr::new(18, 196, 2, 20)] {
                let out = Destination {
                    peer: Peer::External(ip),
                    port: 443,
                    protocol: "TCP",
                };
                assert!(
                    egress_admitted(&policies, &pod, &out).0,
                    "{}: the operand {what} cannot reach {ip}:443",
                    shape.name
                );
            }
            let port = pod.port_named("webhook-server");
            assert!(
                admitted(&policies, &pod, port, &api_server()).0,
                "{}: operand webhook",
                shape.name
            );
        }
        let manager = manager_pod();
        let port = manager.port_named("webhook");
        assert!(
            admitted(&policies, &manager, port, &api_server()).0,
            "{}: manager webhook",
            shape.name
        );
    }
}

#[test]
fn without_rendering_a_6443_cluster_is_cut_off_and_7443_is_allowed_once_rendered() {
    let shape = &shapes()[0];
    let mut shipped = read_all("manager-resources/network-policies");
    shipped.extend(read_all("deploy").into_iter().filter(|o| o["kind"] == "NetworkPolicy"));
    assert!(
        !egress_admitted(&shipped, &manager_pod(), &api_destination(shape)).0,
        "the shipped policies alone allow only 443: the evaluator sees the cut that rendering prevents"
    );
    let v136 = shapes().into_iter().find(|s| s.name.starts_with("v1.36")).unwrap();
    let rendered = rendered_for(&v136);
    let api = rendered
        .iter()
        .find(|p| p["metadata"]["name"] == "kyma-project.io--btp-operator-allow-to-apiserver")
        .unwrap();
    assert!(
        api["spec"]["egress"].to_string().contains("7443"),
        "the rendered policy allows 7443: {api}"
    );
}

#[test]
fn the_egress_evaluator_follows_the_rules() {
    let pod = Pod {
        namespace: "ns".into(),
        labels: Labels::from([("app".into(), "a".into())]),
        ports: vec![],
    };
    let policy = |spec: Value| serde_json::json!({"kind": "NetworkPolicy", "metadata": {"name": "p", "namespace": "ns"}, "spec": spec});
    let ext = |port| Destination {
        peer: Peer::External(Ipv4Addr::new(10, 0, 0, 1)),
        port,
        protocol: "TCP",
    };
    let dns_pod = Destination {
        peer: Peer::Pod {
            namespace_labels: l(&[("kubernetes.io/metadata.name", "kube-system")]),
            labels: l(&[("k8s-app", "kube-dns")]),
        },
        port: 53,
        protocol: "UDP",
    };
    assert!(egress_admitted(&[], &pod, &ext(443)).0, "no policy: open");
    let ingress_only = policy(serde_json::json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
    assert!(
        egress_admitted(&[ingress_only], &pod, &ext(443)).0,
        "an ingress policy does not isolate egress"
    );
    let closed = policy(serde_json::json!({"podSelector": {}, "policyTypes": ["Egress"]}));
    assert!(!egress_admitted(&[closed], &pod, &ext(443)).0);
    let only_443 = policy(
        serde_json::json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": 443}]}]}),
    );
    assert!(egress_admitted(std::slice::from_ref(&only_443), &pod, &ext(443)).0);
    assert!(
        !egress_admitted(std::slice::from_ref(&only_443), &pod, &ext(6443)).0,
        "after translation"
    );
    let udp = Destination {
        protocol: "UDP",
        ..ext(443)
    };
    assert!(!egress_admitted(&[only_443], &pod, &udp).0, "protocol counts");
    let block = policy(serde_json::json!({"podSelector": {}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "UDP", "port": 53}]}]}));
    assert!(
        !egress_admitted(&[block], &pod, &dns_pod).0,
        "an ipBlock never matches a pod"
    );
    let selector = policy(serde_json::json!({"podSelector": {}, "policyTypes": ["Egress"],
        "egress": [{"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                    "ports": [{"protocol": "UDP", "port": 53}]}]}));
    assert!(egress_admitted(std::slice::from_ref(&selector), &pod, &dns_pod).0);
    assert!(
        !egress_admitted(&[selector], &pod, &ext(53)).0,
        "a selector never matches an external peer"
    );
}
