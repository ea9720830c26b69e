use crate::common::*;
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
    crds.create(&PostParams::default(), &widget_crd(true)).await.unwrap();
    let crd = crds.get("widgets.example.com").await.unwrap();
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
    crds.create(&PostParams::default(), &c2).await.unwrap();
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
    crds.create(&PostParams::default(), &widget_crd(true)).await.unwrap();
    assert!(api.list(&ListParams::default()).await.unwrap().items.is_empty());
}
