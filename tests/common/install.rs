//! What `kubectl apply -k deploy/` installs for the manager's identity: its ServiceAccount and its RBAC, as
//! shipped. With them applied, an API server that enforces RBAC (the embedded one does for every user but its
//! admin) lets the manager do exactly what `deploy/` grants it.
#![allow(dead_code)]

/// The ServiceAccount of `deploy/service-account.yaml`.
pub const SERVICE_ACCOUNT: &str = "btp-manager-controller-manager";

/// The user a client of the shipped ServiceAccount authenticates as.
pub fn manager_user() -> String {
    format!(
        "system:serviceaccount:{}:{SERVICE_ACCOUNT}",
        btp_api::names::KYMA_SYSTEM
    )
}

/// Every object of the YAML file `deploy/<file>`.
pub fn deploy_objects(file: &str) -> Vec<serde_json::Value> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    btp_manager::shipped::objects(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Server-side apply `objects` as the client's user (field manager `kubectl`), as `kubectl apply
/// --server-side` would.
pub async fn apply(client: &kube::Client, objects: &[serde_json::Value]) {
    btp_manager::shipped::apply(client, objects, "kubectl")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

/// Install the manager's ServiceAccount and RBAC from `deploy/` (the namespace `kyma-system` must exist).
pub async fn manager_identity(client: &kube::Client) {
    let mut objects = deploy_objects("service-account.yaml");
    objects.extend(deploy_objects("rbac.yaml"));
    apply(client, &objects).await;
}

/// On a real cluster: what `deploy/` installs for the manager's identity (its PriorityClass, which the
/// operand's Pods name too, its ServiceAccount and RBAC), and a client configuration of that ServiceAccount
/// (a token from the TokenRequest API, as a Pod's projected token), for the cluster `admin` reaches.
pub async fn shipped_identity(client: &kube::Client, admin: &kube::Config) -> kube::Config {
    let token = shipped_identity_token(client).await;
    token_config(admin, &token).await
}

/// [`shipped_identity`]'s objects installed, and a token of its ServiceAccount.
pub async fn shipped_identity_token(client: &kube::Client) -> String {
    let mut objects = deploy_objects("priority-class.yaml");
    objects.extend(deploy_objects("service-account.yaml"));
    objects.extend(deploy_objects("rbac.yaml"));
    apply(client, &objects).await;
    service_account_token(client, btp_api::names::KYMA_SYSTEM, SERVICE_ACCOUNT).await
}

/// A token of the ServiceAccount `namespace/name` (TokenRequest), valid for an hour.
pub async fn service_account_token(client: &kube::Client, namespace: &str, name: &str) -> String {
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600},
    });
    let answer: serde_json::Value = kube::Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_subresource("token", name, &Default::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token of {namespace}/{name}: {e}"));
    answer["status"]["token"]
        .as_str()
        .expect("the TokenRequest's answer holds a token")
        .to_string()
}

/// The kubeconfig (YAML) of a bearer token for the cluster `admin` reaches.
pub fn token_kubeconfig(admin: &kube::Config, token: &str) -> String {
    use base64::Engine as _;
    let ca: Vec<u8> = admin
        .root_cert
        .as_ref()
        .map(|certs| {
            certs
                .iter()
                .map(|der| {
                    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
                    let lines: Vec<&str> = b64
                        .as_bytes()
                        .chunks(64)
                        .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
                        .collect();
                    format!(
                        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                        lines.join("\n")
                    )
                })
                .collect::<String>()
                .into_bytes()
        })
        .unwrap_or_default();
    let ca = base64::engine::general_purpose::STANDARD.encode(ca);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\n\
         users:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
         current-context: c\n",
        admin.cluster_url.to_string().trim_end_matches('/')
    )
}

/// A client configuration of a bearer token for the cluster `admin` reaches.
pub async fn token_config(admin: &kube::Config, token: &str) -> kube::Config {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&token_kubeconfig(admin, token)).expect("a kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a usable kubeconfig")
}
