use crate::common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
}

#[tokio::test]
async fn crud_round_trip() {
    let srv = start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.is_some() && meta.creation_timestamp.is_some());
    assert_eq!(
        meta.generation, None,
        "ConfigMaps carry no generation (as on a real API server)"
    );
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    let got = api.get("a").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    let mut upd = api.get("a").await.unwrap();
    upd.data = Some([("k".to_string(), "w".to_string())].into());
    let replaced = api.replace("a", &PostParams::default(), &upd).await.unwrap();
    assert_ne!(replaced.metadata.resource_version, created.metadata.resource_version);
    assert_eq!(replaced.metadata.generation, None, "not even after a data change");
    let patched = api
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"x": "y"}})))
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["x"], "y");
    let list = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());
    let del = api.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(del.is_right(), "immediate deletion answers with a Status");
    let err = api.get("a").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404 && s.reason == "NotFound"),
        "{err:?}"
    );
    srv.shutdown().await;
}

#[tokio::test]
async fn builtin_namespaces_exist() {
    let srv = start().await;
    let api: Api<Namespace> = Api::all(srv.client().await);
    for n in ["default", "kube-system", "kube-public"] {
        let ns = api.get(n).await.unwrap();
        assert_eq!(ns.metadata.labels.unwrap()["kubernetes.io/metadata.name"], n);
    }
    let s: Api<Secret> = Api::namespaced(srv.client().await, "nope");
    let e = s
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 404), "{e:?}");
}

#[tokio::test]
async fn stale_resource_version_conflicts() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let c = api.create(&PostParams::default(), &cm("s")).await.unwrap();
    let mut a = c.clone();
    a.data = Some([("k".into(), "1".into())].into());
    api.replace("s", &PostParams::default(), &a).await.unwrap();
    // second writer with the old resourceVersion loses
    let mut b = c.clone();
    b.data = Some([("k".into(), "2".into())].into());
    let e = api.replace("s", &PostParams::default(), &b).await.unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"),
        "{e:?}"
    );
    // empty resourceVersion = unconditional
    b.metadata.resource_version = None;
    let r = api.replace("s", &PostParams::default(), &b).await.unwrap();
    assert_eq!(r.data.unwrap()["k"], "2");
    // PUT of a missing object is 404
    let mut m = cm("missing");
    m.metadata.resource_version = None;
    let e = api.replace("missing", &PostParams::default(), &m).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 404), "{e:?}");
    // merge patch carrying a stale resourceVersion conflicts
    let e = api
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"z": "z"}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 409), "{e:?}");
    // create twice: AlreadyExists
    let e = api.create(&PostParams::default(), &cm("s")).await.unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{e:?}"
    );
}

fn deployment(name: &str) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}
    }))
    .unwrap()
}

#[tokio::test]
async fn generation_and_status_subresource() {
    use k8s_openapi::api::apps::v1::Deployment;
    let srv = start().await;
    let api: Api<Deployment> = Api::namespaced(srv.client().await, "default");
    let mut d = deployment("web");
    d.status = Some(serde_json::from_value(json!({"replicas": 99})).unwrap());
    let d = api.create(&PostParams::default(), &d).await.unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    assert!(
        d.status.is_none() || d.status.as_ref().unwrap().replicas.is_none(),
        "status dropped on create"
    );
    // metadata-only change: generation unchanged
    let d2 = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(d2.metadata.generation, Some(1));
    // spec change: generation bumped
    let d3 = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(d3.metadata.generation, Some(2));
    // status write changes only status
    let s = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 7}, "status": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(s.status.as_ref().unwrap().replicas, Some(3));
    assert_eq!(s.spec.as_ref().unwrap().replicas, Some(3));
    assert_eq!(s.metadata.generation, Some(2));
    // main resource write ignores status
    let m = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 42}})),
        )
        .await
        .unwrap();
    assert_eq!(m.status.unwrap().replicas, Some(3));
    // the deployment helper marks it available
    btp_apiserver::testing::mark_deployment_available(&srv.client().await, "default", "web")
        .await
        .unwrap();
    let d = api.get("web").await.unwrap();
    let st = d.status.unwrap();
    assert_eq!(st.ready_replicas, Some(3));
    assert_eq!(st.observed_generation, Some(2));
    assert!(st
        .conditions
        .unwrap()
        .iter()
        .any(|c| c.type_ == "Available" && c.status == "True"));
}

#[tokio::test]
async fn finalizers_delay_deletion() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::WatchParams;
    use kube::core::WatchEvent;
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let mut c = cm("fin");
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let c = api.create(&PostParams::default(), &c).await.unwrap();
    let rv = c.metadata.resource_version.clone().unwrap();
    let mut w = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let del = api.delete("fin", &DeleteParams::default()).await.unwrap();
    assert!(del.is_left(), "deletion pending on finalizers answers with the object");
    let got = api.get("fin").await.unwrap();
    assert!(got.metadata.deletion_timestamp.is_some());
    assert_eq!(got.metadata.deletion_grace_period_seconds, Some(0));
    // deleting again keeps it
    api.delete("fin", &DeleteParams::default()).await.unwrap();
    assert!(api.get("fin").await.is_ok());
    api.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get("fin").await.is_err());
    let mut saw_deleted = false;
    while let Some(ev) = tokio::time::timeout(std::time::Duration::from_secs(5), w.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        if let WatchEvent::Deleted(o) = ev {
            assert_eq!(o.metadata.name.as_deref(), Some("fin"));
            saw_deleted = true;
            break;
        }
    }
    assert!(saw_deleted);
}

#[tokio::test]
async fn namespace_deletion_removes_contents() {
    let srv = start().await;
    let client = srv.client().await;
    let nsapi: Api<Namespace> = Api::all(client.clone());
    nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "doomed"}})).unwrap(),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    for i in 0..3 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"))).await.unwrap();
    }
    let mut held = cm("held");
    held.metadata.finalizers = Some(vec!["x/y".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    nsapi.delete("doomed", &DeleteParams::default()).await.unwrap();
    // As on a real cluster: Terminating first, new content refused, content deleted shortly after.
    let ns = nsapi.get("doomed").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    let e = cms.create(&PostParams::default(), &cm("late")).await.unwrap_err();
    let kube::Error::Api(status) = e else { panic!("{e:?}") };
    assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        status.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(
        causes.first().map(|c| c.reason.as_str()),
        Some("NamespaceTerminating"),
        "{causes:?}"
    );
    assert!(
        wait_until(std::time::Duration::from_secs(5), || async {
            cms.list(&ListParams::default()).await.unwrap().items.len() == 1
        })
        .await,
        "only the object with a finalizer remains"
    );
    assert!(
        nsapi.get_opt("doomed").await.unwrap().is_some(),
        "the namespace waits for it"
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(
        wait_until(std::time::Duration::from_secs(5), || async {
            nsapi.get_opt("doomed").await.unwrap().is_none()
        })
        .await,
        "namespace removed once empty"
    );
}

#[tokio::test]
async fn selector_matrix() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    for (n, labels) in [
        ("a", json!({"app": "web", "tier": "fe"})),
        ("b", json!({"app": "db", "tier": "be"})),
        ("c", json!({"app": "web"})),
        ("d", json!({})),
    ] {
        let c: ConfigMap = serde_json::from_value(json!({"metadata": {"name": n, "labels": labels}})).unwrap();
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let names = |lp: ListParams| {
        let api = api.clone();
        async move {
            let mut v: Vec<String> = api
                .list(&lp)
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|c| c.metadata.name.unwrap())
                .collect();
            v.sort();
            v.join(",")
        }
    };
    let cases = [
        ("app=web", "a,c"),
        ("app==web", "a,c"),
        ("app!=web", "b,d"),
        ("app in (web,db)", "a,b,c"),
        ("app notin (web)", "b,d"),
        ("tier", "a,b"),
        ("!tier", "c,d"),
        ("app=web,tier=fe", "a"),
    ];
    for (sel, want) in cases {
        assert_eq!(
            names(ListParams::default().labels(sel)).await,
            want,
            "labelSelector {sel}"
        );
    }
    for (sel, want) in [
        ("metadata.name=b", "b"),
        ("metadata.name==b", "b"),
        ("metadata.name!=b", "a,c,d"),
        ("metadata.namespace=default", "a,b,c,d"),
        ("metadata.namespace!=default", ""),
    ] {
        assert_eq!(
            names(ListParams::default().fields(sel)).await,
            want,
            "fieldSelector {sel}"
        );
    }
    let e = api
        .list(&ListParams::default().labels("app in (web"))
        .await
        .unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 400), "{e:?}");
    // delete collection with a selector
    api.delete_collection(&DeleteParams::default(), &ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(names(ListParams::default()).await, "b,d");
}

#[tokio::test]
async fn pagination_with_continue() {
    let srv = start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..25 {
        api.create(&PostParams::default(), &cm(&format!("p{i:02}")))
            .await
            .unwrap();
    }
    let mut seen = vec![];
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut lp = ListParams::default().limit(10);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 10);
        seen.extend(page.items.into_iter().map(|c| c.metadata.name.unwrap()));
        match page.metadata.continue_ {
            Some(t) if !t.is_empty() => token = Some(t),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    let want: Vec<String> = (0..25).map(|i| format!("p{i:02}")).collect();
    assert_eq!(seen, want);
    // across all namespaces
    let all: Api<ConfigMap> = Api::all(client);
    assert_eq!(all.list(&ListParams::default()).await.unwrap().items.len(), 25);
    let (code, _, body) = raw(
        &srv,
        "GET",
        "/api/v1/namespaces/default/configmaps?limit=5&continue=garbage",
        None,
        "",
        None,
    )
    .await;
    assert_eq!(code, 400, "{body}");
}

#[tokio::test]
async fn validation_and_errors() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let e = api.create(&PostParams::default(), &cm("Bad_Name")).await.unwrap_err();
    assert!(
        matches!(e, kube::Error::Api(ref s) if s.code == 422 && s.reason == "Invalid"),
        "{e:?}"
    );
    // generateName
    let g: ConfigMap = serde_json::from_value(json!({"metadata": {"generateName": "gen-"}})).unwrap();
    let g = api.create(&PostParams::default(), &g).await.unwrap();
    assert!(g.metadata.name.unwrap().starts_with("gen-"));
    // neither name nor generateName
    let (code, _, body) = raw(
        &srv,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}"#,
        None,
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (422, Some("Invalid")), "{body}");
    // unsupported media types and protobuf kinds are refused with 415
    let (code, _, _) = raw(
        &srv,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("text/plain"),
        "x",
        None,
    )
    .await;
    assert_eq!(code, 415);
    let (code, _, _) = raw(
        &srv,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/vnd.kubernetes.protobuf"),
        "k8s\0",
        None,
    )
    .await;
    assert_eq!(code, 415);
    // namespace mismatch
    let (code, _, body) = raw(
        &srv,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"other"}}"#,
        None,
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["reason"], "BadRequest");
    // name mismatch on PUT
    api.create(&PostParams::default(), &cm("n1")).await.unwrap();
    let (code, _, body) = raw(
        &srv,
        "PUT",
        "/api/v1/namespaces/default/configmaps/n1",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"n2"}}"#,
        None,
    )
    .await;
    assert_eq!(code, 400, "{body}");
    // bad JSON
    let (code, _, body) = raw(
        &srv,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        "{nope",
        None,
    )
    .await;
    assert_eq!(code, 400, "{body}");
    // bad json patch
    let (code, _, _) = raw(
        &srv,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/n1",
        Some("application/json-patch+json"),
        r#"[{"op":"bogus"}]"#,
        None,
    )
    .await;
    assert_eq!(code, 400);
    let (code, _, _) = raw(
        &srv,
        "PATCH",
        "/api/v1/namespaces/default/configmaps/n1",
        Some("application/json-patch+json"),
        r#"[{"op":"remove","path":"/nothing/here"}]"#,
        None,
    )
    .await;
    assert_eq!(code, 422);
    // unauthorized
    let (code, _, body) = raw(&srv, "GET", "/api/v1/namespaces", None, "", Some("wrong")).await;
    assert_eq!(code, 401);
    assert_eq!(body["reason"], "Unauthorized");
    // unknown resource
    let (code, _, _) = raw(&srv, "GET", "/api/v1/nothings", None, "", None).await;
    assert_eq!(code, 404);
    // dry run create is not stored
    let (code, _, body) = raw(
        &srv,
        "POST",
        "/api/v1/namespaces/default/configmaps?dryRun=All",
        Some("application/json"),
        r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dry"}}"#,
        None,
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert!(api.get_opt("dry").await.unwrap().is_none());
    // dry run delete keeps the object
    let dp = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    api.delete("n1", &dp).await.unwrap();
    assert!(api.get_opt("n1").await.unwrap().is_some());
    // delete preconditions
    let dp = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("nope".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = api.delete("n1", &dp).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 409), "{e:?}");
    // json patch and strategic merge patch
    let p = api
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "add", "path": "/data/j", "value": "p"}])).unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.data.unwrap()["j"], "p");
    let p = api
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"s": "m"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.data.unwrap()["s"], "m");
}

#[tokio::test]
async fn secrets_string_data_and_http2() {
    let srv = start().await;
    let api: Api<Secret> = Api::namespaced(srv.client().await, "default");
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"pw": "hunter2"}})).unwrap();
    let s = api.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(s.data.unwrap()["pw"].0, b"hunter2");
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    let (code, _, body) = raw_alpn(
        &srv,
        "GET",
        "/api/v1/namespaces/default/secrets/s",
        None,
        "",
        None,
        true,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(body["kind"], "Secret");
}

#[tokio::test]
async fn dry_run_writes_are_not_stored() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let c = api.create(&PostParams::default(), &cm("d")).await.unwrap();
    let dry = PatchParams {
        dry_run: true,
        ..Default::default()
    };
    let p = api
        .patch("d", &dry, &Patch::Merge(json!({"data": {"k": "dry"}})))
        .await
        .unwrap();
    assert_eq!(p.data.unwrap()["k"], "dry");
    let mut u = c.clone();
    u.data = Some([("k".to_string(), "dry2".to_string())].into());
    let r = api
        .replace(
            "d",
            &PostParams {
                dry_run: true,
                field_manager: None,
            },
            &u,
        )
        .await
        .unwrap();
    assert_eq!(r.data.unwrap()["k"], "dry2");
    let now = api.get("d").await.unwrap();
    assert_eq!(now.data.unwrap()["k"], "v");
    assert_eq!(now.metadata.resource_version, c.metadata.resource_version);
    let log = srv.request_log().entries();
    assert!(log
        .iter()
        .filter(|r| r.verb == "patch" || r.verb == "update")
        .all(|r| !r.changed));
}

#[tokio::test]
async fn owner_references_are_garbage_collected() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let owner = api.create(&PostParams::default(), &cm("owner")).await.unwrap();
    let other = api.create(&PostParams::default(), &cm("other-owner")).await.unwrap();
    let oref = |o: &ConfigMap| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.metadata.name, "uid": o.metadata.uid});
    for (name, refs) in [
        ("dep", json!([oref(&owner)])),
        ("shared", json!([oref(&owner), oref(&other)])),
    ] {
        let c: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "ownerReferences": refs}})).unwrap();
        api.create(&PostParams::default(), &c).await.unwrap();
    }
    let grand: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "grand", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "dep", "uid": api.get("dep").await.unwrap().metadata.uid}]}})).unwrap();
    api.create(&PostParams::default(), &grand).await.unwrap();
    api.delete("owner", &DeleteParams::background()).await.unwrap();
    assert!(api.get_opt("dep").await.unwrap().is_none(), "dependent deleted");
    assert!(api.get_opt("grand").await.unwrap().is_none(), "cascade");
    let shared = api.get("shared").await.unwrap();
    assert_eq!(
        shared.metadata.owner_references.unwrap().len(),
        1,
        "other owner keeps it alive"
    );
    // orphan keeps dependents and strips the reference
    let o2 = api.create(&PostParams::default(), &cm("o2")).await.unwrap();
    let c: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "orphan", "ownerReferences": [oref(&o2)]}})).unwrap();
    api.create(&PostParams::default(), &c).await.unwrap();
    api.delete("o2", &DeleteParams::orphan()).await.unwrap();
    assert!(api.get("orphan").await.unwrap().metadata.owner_references.is_none());
}

#[tokio::test]
async fn deployment_scale_subresource() {
    use k8s_openapi::api::apps::v1::Deployment;
    let srv = start().await;
    let api: Api<Deployment> = Api::namespaced(srv.client().await, "default");
    api.create(&PostParams::default(), &deployment("sc")).await.unwrap();
    let s = api.get_scale("sc").await.unwrap();
    assert_eq!(s.spec.unwrap().replicas, Some(2));
    assert_eq!(s.status.unwrap().selector.as_deref(), Some("app=sc"));
    let s = api
        .patch_scale(
            "sc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(s.spec.unwrap().replicas, Some(5));
    let d = api.get("sc").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(5));
    assert_eq!(d.metadata.generation, Some(2));
}

/// Malformed input never panics the server nor yields a 5xx.
#[tokio::test]
async fn malformed_requests_are_client_errors() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    api.create(&PostParams::default(), &cm("t")).await.unwrap();
    let base = "/api/v1/namespaces/default/configmaps";
    let cases: Vec<(&str, String, Option<&str>, &str)> = vec![
        ("POST", base.into(), Some("application/json"), "[]"),
        ("POST", base.into(), Some("application/json"), "null"),
        ("POST", base.into(), Some("application/json"), r#"{"metadata": 5}"#),
        (
            "POST",
            base.into(),
            Some("application/json"),
            r#"{"metadata": {"name": 5}}"#,
        ),
        (
            "POST",
            base.into(),
            Some("application/json"),
            r#"{"apiVersion":"apps/v1","kind":"ConfigMap","metadata":{"name":"x"}}"#,
        ),
        ("POST", base.into(), Some("application/yaml"), "a: [unclosed"),
        ("POST", format!("{base}/t"), Some("application/json"), "{}"),
        ("PUT", base.into(), Some("application/json"), "{}"),
        (
            "PUT",
            format!("{base}/t"),
            Some("application/json"),
            r#"{"metadata":{"resourceVersion":"zzz"}}"#,
        ),
        (
            "PATCH",
            format!("{base}/t"),
            Some("application/merge-patch+json"),
            "[1]",
        ),
        (
            "PATCH",
            format!("{base}/t"),
            Some("application/json-patch+json"),
            r#"[{"op":"replace","path":"","value":7}]"#,
        ),
        (
            "PATCH",
            format!("{base}/t"),
            Some("application/strategic-merge-patch+json"),
            "7",
        ),
        (
            "PATCH",
            format!("{base}/t?fieldManager=m"),
            Some("application/apply-patch+yaml"),
            "- a\n- b\n",
        ),
        (
            "PATCH",
            format!("{base}/t?fieldManager=m"),
            Some("application/apply-patch+yaml"),
            "kind: ConfigMap\n",
        ),
        ("PATCH", format!("{base}/t"), Some("application/whatever"), "{}"),
        ("DELETE", format!("{base}/t"), Some("application/json"), "{not json"),
        (
            "DELETE",
            format!("{base}/t"),
            Some("application/json"),
            r#"{"propagationPolicy":"Sideways"}"#,
        ),
        ("GET", format!("{base}?labelSelector=a%20in%20(b"), None, ""),
        ("GET", format!("{base}?fieldSelector=nonsense"), None, ""),
        ("GET", format!("{base}?limit=-1"), None, ""),
        ("GET", format!("{base}?watch=true&timeoutSeconds=x"), None, ""),
        ("GET", format!("{base}?watch=true&sendInitialEvents=true"), None, ""),
        ("GET", "/api/v1/namespaces/default/configmaps/t/status".into(), None, ""),
        ("GET", "/apis/nope.example.com/v1/things".into(), None, ""),
        ("POST", "/api".into(), Some("application/json"), "{}"),
        ("GET", "/api/v1/configmaps/t".into(), None, ""),
        (
            "POST",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions".into(),
            Some("application/json"),
            r#"{"metadata":{"name":"a.b"},"spec":{"group":"b","names":{"plural":"a","kind":"A"},"scope":"Weird","versions":[]}}"#,
        ),
    ];
    for (method, path, ct, body) in cases {
        let (code, _, resp) = raw(&srv, method, &path, ct, body, None).await;
        assert!((400..500).contains(&code), "{method} {path} {body:?} -> {code} {resp}");
        if path.starts_with("/apis/nope.example.com/") {
            // an unserved group/version: the real server's plain-text 404
            assert_eq!(resp, "404 page not found\n", "{method} {path}");
            continue;
        }
        assert_eq!(resp["kind"], "Status", "{method} {path} -> {resp}");
    }
    // the object is untouched
    assert_eq!(api.get("t").await.unwrap().data.unwrap()["k"], "v");
}
