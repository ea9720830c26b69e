use crate::common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

fn cm(data: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": data})
}

#[tokio::test]
async fn apply_create_conflict_force_and_removal() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let pa = PatchParams::apply("alice");
    // create via apply
    let c = api
        .patch("cfg", &pa, &Patch::Apply(cm(json!({"a": "1", "b": "2"}))))
        .await
        .unwrap();
    assert!(c.metadata.uid.is_some());
    let mf = c.metadata.managed_fields.unwrap();
    assert_eq!(mf.len(), 1);
    assert_eq!(mf[0].manager.as_deref(), Some("alice"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    assert_eq!(mf[0].fields_type.as_deref(), Some("FieldsV1"));
    assert_eq!(
        mf[0].fields_v1.as_ref().unwrap().0,
        json!({"f:data": {"f:a": {}, "f:b": {}}})
    );
    // conflict: bob sets a field alice owns to a different value
    let pb = PatchParams::apply("bob");
    let e = api
        .patch("cfg", &pb, &Patch::Apply(cm(json!({"a": "9"}))))
        .await
        .unwrap_err();
    match e {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
            assert!(
                s.message.contains("conflict with \"alice\"") && s.message.contains(".data.a"),
                "{}",
                s.message
            );
        }
        other => panic!("{other:?}"),
    }
    // same value is shared ownership, not a conflict
    api.patch("cfg", &pb, &Patch::Apply(cm(json!({"b": "2"}))))
        .await
        .unwrap();
    // force takes ownership
    let f = api
        .patch(
            "cfg",
            &pb.clone().force(),
            &Patch::Apply(cm(json!({"a": "9", "b": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(f.data.as_ref().unwrap()["a"], "9");
    let owners = f.metadata.managed_fields.unwrap();
    let alice = owners.iter().find(|m| m.manager.as_deref() == Some("alice")).unwrap();
    assert_eq!(alice.fields_v1.as_ref().unwrap().0, json!({"f:data": {"f:b": {}}}));
    // alice omits b: still owned by bob, kept. alice omits c she added: removed
    api.patch("cfg", &pa, &Patch::Apply(cm(json!({"b": "2", "c": "3"}))))
        .await
        .unwrap();
    let r = api
        .patch("cfg", &pa, &Patch::Apply(cm(json!({"b": "2"}))))
        .await
        .unwrap();
    let data = r.data.unwrap();
    assert!(!data.contains_key("c"), "omitted field removed: {data:?}");
    assert_eq!(data["a"], "9");
    // bob stops applying b; alice still owns it -> kept; then alice drops it -> removed
    api.patch("cfg", &pb, &Patch::Apply(cm(json!({"a": "9"}))))
        .await
        .unwrap();
    let r = api.patch("cfg", &pa, &Patch::Apply(cm(json!({})))).await.unwrap();
    assert_eq!(r.data.unwrap().keys().cloned().collect::<Vec<_>>(), ["a"]);
    // fieldManager is required
    let (code, _, body) = raw(
        &srv,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/cfg",
        Some("application/apply-patch+yaml"),
        "apiVersion: v1\nkind: ConfigMap\n",
        None,
    )
    .await;
    // as kube-apiserver: 422 PatchOptions "fieldManager: Required value"
    assert_eq!(code, 422, "{body}");
    // YAML body
    let (code, _, body) = raw(
        &srv,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/cfg?fieldManager=yaml",
        Some("application/apply-patch+yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  y: \"1\"\n",
        None,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["data"]["y"], "1");
    // non-apply writes record an Update entry
    let u = api
        .patch(
            "cfg",
            &PatchParams {
                field_manager: Some("updater".into()),
                ..Default::default()
            },
            &Patch::Merge(json!({"data": {"u": "1"}})),
        )
        .await
        .unwrap();
    let upd = u
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("updater"))
        .unwrap();
    assert_eq!(upd.operation.as_deref(), Some("Update"));
    assert_eq!(upd.fields_v1.unwrap().0, json!({"f:data": {"f:u": {}}}));
}

#[tokio::test]
async fn apply_merges_keyed_lists() {
    let srv = start().await;
    let api: Api<Deployment> = Api::namespaced(srv.client().await, "default");
    let dep = |containers: serde_json::Value| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
                "spec": {"containers": containers}}}
        })
    };
    api.patch(
        "d",
        &PatchParams::apply("one"),
        &Patch::Apply(dep(json!([{"name": "main", "image": "a:1"}]))),
    )
    .await
    .unwrap();
    // a second manager adds a sidecar: both containers survive
    let d = api
        .patch(
            "d",
            &PatchParams::apply("two"),
            &Patch::Apply(dep(json!([{"name": "side", "image": "s:1"}]))),
        )
        .await
        .unwrap();
    let names: Vec<String> = d
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["main", "side"]);
    let mf = d.metadata.managed_fields.unwrap();
    let two = mf.iter().find(|m| m.manager.as_deref() == Some("two")).unwrap();
    let f = &two.fields_v1.as_ref().unwrap().0;
    assert!(
        f["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"side\"}"]["."].is_object(),
        "{f}"
    );
    // a conflicting image on the keyed item
    let e = api
        .patch(
            "d",
            &PatchParams::apply("two"),
            &Patch::Apply(dep(
                json!([{"name": "side", "image": "s:1"}, {"name": "main", "image": "a:2"}]),
            )),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 409 && s.message.contains("containers[name=\"main\"].image")),
        "{e:?}"
    );
    // manager one drops its container: removed
    let d = api
        .patch("d", &PatchParams::apply("one"), &Patch::Apply(dep(json!([]))))
        .await
        .unwrap();
    let names: Vec<String> = d
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, ["side"]);
}
