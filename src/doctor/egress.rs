//! Whether the NetworkPolicies of a namespace let a pod reach the API server, pure: the `doctor` check
//! `apiserver-egress` (docs/behaviour.md#network-policies). Egress is judged as a policy-enforcing CNI does,
//! after the `kubernetes` Service's translation: against each endpoint address and port of the
//! `default/kubernetes` EndpointSlices. The API server is outside the pod network, so only a rule without
//! `to`, or an `ipBlock` covering the endpoint's address, admits it; pod and namespace selectors never do.

use serde_json::Value;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// An endpoint of the API server: its address (None when the slice names none) and port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The endpoint address, if known.
    pub address: Option<IpAddr>,
    /// The TCP port.
    pub port: u16,
}

/// The endpoints the `default/kubernetes` EndpointSlices name (every address with every TCP port). Without
/// a port, the Service's 443.
pub fn endpoints(slices: &[Value]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for slice in slices {
        let ports: Vec<u16> = slice["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["protocol"].as_str().unwrap_or("TCP") == "TCP")
            .filter_map(|p| p["port"].as_u64().and_then(|n| u16::try_from(n).ok()))
            .collect();
        let addresses: Vec<Option<IpAddr>> = slice["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
            .map(|a| a.as_str().and_then(|a| a.parse().ok()))
            .collect();
        let addresses = if addresses.is_empty() { vec![None] } else { addresses };
        for port in &ports {
            for address in &addresses {
                out.push(Endpoint {
                    address: *address,
                    port: *port,
                });
            }
        }
    }
    if out.is_empty() {
        out.push(Endpoint {
            address: None,
            port: 443,
        });
    }
    out.dedup();
    out
}

fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let by_labels = selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str());
    let by_expressions = selector["matchExpressions"].as_array().into_iter().flatten().all(|e| {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match e["operator"].as_str().unwrap_or("") {
            "In" => labels.get(key).is_some_and(|v| values.contains(&v.as_str())),
            "NotIn" => labels.get(key).is_none_or(|v| !values.contains(&v.as_str())),
            "Exists" => labels.contains_key(key),
            "DoesNotExist" => !labels.contains_key(key),
            _ => false,
        }
    });
    by_labels && by_expressions
}

fn isolates_egress(policy: &Value) -> bool {
    match policy["spec"]["policyTypes"].as_array() {
        Some(types) => types.iter().any(|t| t == "Egress"),
        None => policy["spec"].get("egress").is_some(),
    }
}

fn in_block(block: &Value, address: Option<IpAddr>) -> bool {
    let Some(address) = address else {
        // Unknown address: only a block covering everything is sure to admit it.
        return matches!(block["cidr"].as_str(), Some("0.0.0.0/0" | "::/0"))
            && block["except"].as_array().is_none_or(Vec::is_empty);
    };
    let covers = |cidr: &str| -> bool {
        let Some((net, bits)) = cidr.split_once('/') else {
            return false;
        };
        let (Ok(net), Ok(bits)) = (net.parse::<IpAddr>(), bits.parse::<u32>()) else {
            return false;
        };
        match (net, address) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - bits.min(32)).unwrap_or(0);
                (u32::from(n) & mask) == (u32::from(a) & mask)
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX.checked_shl(128 - bits.min(128)).unwrap_or(0);
                (u128::from(n) & mask) == (u128::from(a) & mask)
            }
            _ => false,
        }
    };
    covers(block["cidr"].as_str().unwrap_or(""))
        && !block["except"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .any(covers)
}

fn port_admits(rule_port: &Value, port: u16) -> bool {
    if rule_port["protocol"].as_str().unwrap_or("TCP") != "TCP" {
        return false;
    }
    match &rule_port["port"] {
        Value::Null => true,
        Value::Number(n) => {
            let start = n.as_u64().unwrap_or(0);
            let end = rule_port["endPort"].as_u64().unwrap_or(start);
            (start..=end).contains(&u64::from(port))
        }
        _ => false,
    }
}

/// The endpoints a pod labelled `labels` cannot reach under `policies` (those of its namespace), each with
/// the names of the policies that isolate it. Empty: it reaches every one.
pub fn blocked(policies: &[Value], labels: &BTreeMap<String, String>, to: &[Endpoint]) -> Vec<(Endpoint, Vec<String>)> {
    let isolating: Vec<&Value> = policies
        .iter()
        .filter(|p| isolates_egress(p) && selects(&p["spec"]["podSelector"], labels))
        .collect();
    if isolating.is_empty() {
        return Vec::new();
    }
    let names: Vec<String> = isolating
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    to.iter()
        .filter(|endpoint| {
            !isolating.iter().any(|p| {
                p["spec"]["egress"].as_array().into_iter().flatten().any(|rule| {
                    let ports_ok = rule["ports"]
                        .as_array()
                        .is_none_or(|ports| ports.is_empty() || ports.iter().any(|rp| port_admits(rp, endpoint.port)));
                    let to_ok = rule["to"].as_array().is_none_or(|to| {
                        to.is_empty()
                            || to
                                .iter()
                                .any(|t| t.get("ipBlock").is_some_and(|b| in_block(b, endpoint.address)))
                    });
                    ports_ok && to_ok
                })
            })
        })
        .map(|e| (e.clone(), names.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(name: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": spec})
    }

    fn manager() -> BTreeMap<String, String> {
        [("kyma-project.io/module".to_string(), "btp-operator".to_string())].into()
    }

    #[test]
    fn endpoints_come_from_the_slices_or_default_to_443() {
        let slice = json!({"endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 6443, "protocol": "TCP"}]});
        assert_eq!(
            endpoints(&[slice]),
            vec![Endpoint {
                address: Some("10.0.0.1".parse().unwrap()),
                port: 6443
            }]
        );
        assert_eq!(
            endpoints(&[]),
            vec![Endpoint {
                address: None,
                port: 443
            }]
        );
    }

    #[test]
    fn a_policy_allowing_only_443_cuts_a_6443_endpoint_off() {
        let to = [Endpoint {
            address: Some("10.0.0.1".parse().unwrap()),
            port: 6443,
        }];
        let only_443 = policy(
            "only-443",
            json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"protocol": "TCP", "port": 443}]}]}),
        );
        let blocked_by = blocked(std::slice::from_ref(&only_443), &manager(), &to);
        assert_eq!(blocked_by.len(), 1);
        assert_eq!(blocked_by[0].1, vec!["only-443".to_string()]);
        let with_6443 = policy(
            "api",
            json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"ports": [{"port": 6443}]}]}),
        );
        assert!(
            blocked(&[only_443, with_6443], &manager(), &to).is_empty(),
            "policies add up"
        );
    }

    #[test]
    fn selectors_never_admit_the_api_server_and_ip_blocks_do() {
        let to = [Endpoint {
            address: Some("10.0.0.1".parse().unwrap()),
            port: 443,
        }];
        let pods = policy(
            "pods",
            json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"namespaceSelector": {}}]}]}),
        );
        assert_eq!(blocked(&[pods], &manager(), &to).len(), 1);
        let block = policy(
            "block",
            json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}),
        );
        assert!(blocked(std::slice::from_ref(&block), &manager(), &to).is_empty());
        let other = [Endpoint {
            address: Some("192.168.0.1".parse().unwrap()),
            port: 443,
        }];
        assert_eq!(blocked(&[block], &manager(), &other).len(), 1);
    }

    #[test]
    fn policies_selecting_other_pods_or_only_ingress_do_not_isolate() {
        let to = [Endpoint {
            address: None,
            port: 6443,
        }];
        let others = policy(
            "others",
            json!({"podSelector": {"matchLabels": {"app": "x"}}, "policyTypes": ["Egress"]}),
        );
        let ingress = policy("ingress", json!({"podSelector": {}, "policyTypes": ["Ingress"]}));
        assert!(blocked(&[others, ingress], &manager(), &to).is_empty());
    }

    #[test]
    fn the_shipped_policies_rendered_for_the_cluster_let_the_manager_through() {
        use crate::reconciler::network_policies as np;
        let slice: k8s_openapi::api::discovery::v1::EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "kubernetes"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 6443, "protocol": "TCP"}]
        }))
        .unwrap();
        let shipped = np::load(std::path::Path::new("")).unwrap();
        let to = endpoints(&[serde_json::to_value(&slice).unwrap()]);
        assert_eq!(blocked(&shipped, &manager(), &to).len(), 1, "unrendered: 443 only");
        let rendered = np::render(&shipped, &np::api_server_ports([&slice]));
        assert!(blocked(&rendered, &manager(), &to).is_empty());
    }
}
