use crate::common::*;
use axum::http;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::{ApiResource, Discovery};
use serde_json::json;

#[tokio::test]
async fn discovery_documents() {
    let srv = start().await;
    let client = srv.client().await;
    let v = client.apiserver_version().await.unwrap();
    assert_eq!(v.major, "1");
    let d = Discovery::new(client.clone()).run().await.unwrap();
    let (ar, caps) = d
        .groups()
        .find(|g| g.name() == "apps")
        .unwrap()
        .recommended_resources()
        .into_iter()
        .find(|(r, _)| r.plural == "deployments")
        .unwrap();
    assert_eq!(ar.kind, "Deployment");
    assert!(caps.supports_operation(kube::discovery::verbs::WATCH));
    assert!(
        caps.subresources
            .iter()
            .any(|(s, _)| s.plural == "deployments/status" || s.plural == "status"),
        "{:?}",
        caps.subresources
    );
    let (code, _, body) = raw(&srv, "GET", "/api/v1", None, "", None).await;
    assert_eq!(code, 200);
    let res = body["resources"].as_array().unwrap();
    let ns = res.iter().find(|r| r["name"] == "namespaces").unwrap();
    assert_eq!(ns["namespaced"], false);
    assert_eq!(ns["shortNames"], json!(["ns"]));
    assert!(res.iter().any(|r| r["name"] == "namespaces/status"));
    let cm = res.iter().find(|r| r["name"] == "configmaps").unwrap();
    assert_eq!(cm["singularName"], "configmap");
    assert_eq!(cm["namespaced"], true);
    let (code, _, body) = raw(&srv, "GET", "/apis", None, "", None).await;
    assert_eq!(code, 200);
    for g in [
        "apps",
        "rbac.authorization.k8s.io",
        "admissionregistration.k8s.io",
        "apiextensions.k8s.io",
        "coordination.k8s.io",
        "networking.k8s.io",
        "events.k8s.io",
    ] {
        assert!(body["groups"].as_array().unwrap().iter().any(|x| x["name"] == g), "{g}");
    }
    let (code, _, body) = raw(&srv, "GET", "/apis/apps", None, "", None).await;
    assert_eq!(
        (code, body["preferredVersion"]["groupVersion"].as_str()),
        (200, Some("apps/v1"))
    );
}

pub fn widget_crd(status: bool) -> CustomResourceDefinition {
    let mut v = json!({"name": "v1", "served": true, "storage": true,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}});
    if status {
        v["subresources"] = json!({"status": {}});
    }
    serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
                 "versions": [v]}
    }))
    .unwrap()
}

/// Create `crd` and wait until it is established (its resource served), as a client of a real server must:
/// the established CRD.
pub async fn create_established(
    crds: &Api<CustomResourceDefinition>,
    crd: &CustomResourceDefinition,
) -> CustomResourceDefinition {
    let created = crds.create(&PostParams::default(), crd).await.unwrap();
    wait_established(crds, created.metadata.name.as_deref().unwrap()).await
}

/// Wait until CRD `name` is established: the established CRD.
pub async fn wait_established(crds: &Api<CustomResourceDefinition>, name: &str) -> CustomResourceDefinition {
    let established = std::sync::Mutex::new(None);
    let ok = wait_until(std::time::Duration::from_secs(10), || async {
        let crd = crds.get(name).await.unwrap();
        let yes = crd
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        if yes {
            *established.lock().unwrap() = Some(crd);
        }
        yes
    })
    .await;
    assert!(ok, "{name} established");
    established.into_inner().unwrap().unwrap()
}

/// A created CRD is not served at once: its create answers with no conditions and no accepted names (as a
/// real server's does, tests/corpus: crd-served-once-established); the resource is 404 until the server's
/// controllers establish it, which a watch of the CRD sees as one more version.
#[tokio::test]
async fn a_created_crd_is_served_once_established() {
    // A delay long enough that the request right after the create is certainly inside it.
    let srv = start_with(btp_apiserver::Config {
        crd_establish_delay: std::time::Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let client = srv.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds.create(&PostParams::default(), &widget_crd(true)).await.unwrap();
    let status = created.status.clone().unwrap();
    assert_eq!(status.conditions, None);
    assert_eq!(status.accepted_names.unwrap().plural, "");
    let path = "/apis/example.com/v1/namespaces/default/widgets";
    let (code, _, body) = raw(&srv, "GET", path, None, "", None).await;
    assert_eq!(
        (code, body),
        (404, json!("404 page not found\n")),
        "not served before it is established"
    );
    let established = wait_established(&crds, "widgets.example.com").await;
    let status = established.status.unwrap();
    assert_eq!(status.accepted_names.unwrap().plural, "widgets");
    assert_ne!(established.metadata.resource_version, created.metadata.resource_version);
    let (code, _, body) = raw(&srv, "GET", path, None, "", None).await;
    assert_eq!(code, 200, "served once established: {body}");
}

pub fn widget_ar() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

#[tokio::test]
async fn crd_lifecycle() {
    let srv = start().await;
    let client = srv.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = create_established(&crds, &widget_crd(true)).await;
    let st = crd.status.unwrap();
    let conds = st.conditions.unwrap();
    for t in ["Established", "NamesAccepted"] {
        assert!(conds.iter().any(|c| c.type_ == t && c.status == "True"), "{t}");
    }
    assert_eq!(st.accepted_names.unwrap().plural, "widgets");
    let (code, _, body) = raw(&srv, "GET", "/apis/example.com/v1", None, "", None).await;
    assert_eq!(code, 200, "{body}");
    let names: Vec<&str> = body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["widgets", "widgets/status"]);
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &widget_ar());
    let w: DynamicObject = serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1"}, "spec": {"size": 1}, "status": {"ok": true}}))
    .unwrap();
    let w = api.create(&PostParams::default(), &w).await.unwrap();
    assert!(
        w.data.get("status").is_none(),
        "status ignored on create with status subresource"
    );
    let s = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ok": true}, "spec": {"size": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(s.data["status"]["ok"], true);
    assert_eq!(s.data["spec"]["size"], 1);
    assert_eq!(s.metadata.generation, Some(1));
    let s = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(2));
    // cluster-scoped CRD without status
    let mut c2 = widget_crd(false);
    c2.metadata.name = Some("gadgets.example.com".into());
    c2.spec.names.plural = "gadgets".into();
    c2.spec.names.kind = "Gadget".into();
    c2.spec.names.singular = Some("gadget".into());
    c2.spec.names.short_names = None;
    c2.spec.scope = "Cluster".into();
    create_established(&crds, &c2).await;
    let (code, _, body) = raw(
        &srv,
        "POST",
        "/apis/example.com/v1/gadgets",
        Some("application/json"),
        r#"{"apiVersion":"example.com/v1","kind":"Gadget","metadata":{"name":"g"},"status":{"kept":1}}"#,
        None,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["status"]["kept"], 1);
    assert!(body["metadata"].get("namespace").is_none());
    // invalid CRD name
    let mut bad = widget_crd(false);
    bad.metadata.name = Some("wrong.example.com".into());
    let e = crds.create(&PostParams::default(), &bad).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 422), "{e:?}");
    // re-applying an unchanged CRD is a no-op (stable status)
    let before = crds.get("widgets.example.com").await.unwrap();
    let mut again = widget_crd(true);
    again.metadata.resource_version = None;
    let after = crds
        .replace("widgets.example.com", &PostParams::default(), &{
            let mut c = again;
            c.metadata.resource_version = before.metadata.resource_version.clone();
            c
        })
        .await
        .unwrap();
    assert_eq!(after.metadata.resource_version, before.metadata.resource_version);
    // deleting the CRD removes the resource and its objects
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let (code, _, _) = raw(
        &srv,
        "GET",
        "/apis/example.com/v1/namespaces/default/widgets",
        None,
        "",
        None,
    )
    .await;
    assert_eq!(code, 404);
    create_established(&crds, &widget_crd(true)).await;
    assert!(api.list(&ListParams::default()).await.unwrap().items.is_empty());
}

#[tokio::test]
async fn multi_version_crd() {
    let srv = start().await;
    let client = srv.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = widget_crd(false);
    let mut beta = crd.spec.versions[0].clone();
    beta.name = "v1beta1".into();
    beta.storage = false;
    crd.spec.versions.push(beta);
    create_established(&crds, &crd).await;
    let (code, _, body) = raw(&srv, "GET", "/apis/example.com", None, "", None).await;
    assert_eq!(code, 200);
    assert_eq!(body["preferredVersion"]["version"], "v1");
    assert_eq!(body["versions"].as_array().unwrap().len(), 2);
    let (code, _, body) = raw(
        &srv,
        "POST",
        "/apis/example.com/v1beta1/namespaces/default/widgets",
        Some("application/json"),
        r#"{"apiVersion":"example.com/v1beta1","kind":"Widget","metadata":{"name":"b"}}"#,
        None,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &widget_ar());
    let w = api.get("b").await.unwrap();
    assert_eq!(w.types.unwrap().api_version, "example.com/v1");
    // stop serving v1beta1
    let mut c = crds.get("widgets.example.com").await.unwrap();
    c.spec.versions[1].served = false;
    crds.replace("widgets.example.com", &PostParams::default(), &c)
        .await
        .unwrap();
    let (code, _, _) = raw(
        &srv,
        "GET",
        "/apis/example.com/v1beta1/namespaces/default/widgets",
        None,
        "",
        None,
    )
    .await;
    assert_eq!(code, 404);
    assert!(api.get("b").await.is_ok());
}

#[tokio::test]
async fn tables_with_printer_columns() {
    let srv = start().await;
    let client = srv.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = widget_crd(true);
    crd.spec.versions[0].additional_printer_columns = Some(vec![
        serde_json::from_value(json!({"name": "State", "type": "string", "jsonPath": ".status.state"})).unwrap(),
        serde_json::from_value(json!({"name": "Size", "type": "integer", "jsonPath": ".spec.size"})).unwrap(),
    ]);
    create_established(&crds, &crd).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &widget_ar());
    let w: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "t"}, "spec": {"size": 3}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &w).await.unwrap();
    api.patch_status(
        "t",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"state": "Ready"}})),
    )
    .await
    .unwrap();
    let get_table = |path: &'static str| {
        let client = client.clone();
        async move {
            let req = http::Request::get(path)
                .header(
                    "accept",
                    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
                )
                .body(Vec::new())
                .unwrap();
            client.request::<serde_json::Value>(req).await.unwrap()
        }
    };
    let t = get_table("/apis/example.com/v1/namespaces/default/widgets").await;
    assert_eq!(t["kind"], "Table");
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "State", "Size"]);
    assert_eq!(t["rows"][0]["cells"], json!(["t", "Ready", 3]));
    assert_eq!(t["rows"][0]["object"]["metadata"]["name"], "t");
    let t = get_table("/api/v1/namespaces").await;
    let cols: Vec<&str> = t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, ["Name", "Age"]);
    assert_eq!(t["rows"].as_array().unwrap().len(), 3);
}
