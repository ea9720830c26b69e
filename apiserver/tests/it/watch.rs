use crate::common::*;
use crate::discovery::{create_established, widget_ar, widget_crd};
use btp_apiserver::Config;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, WatchParams};
use kube::core::WatchEvent;
use serde_json::json;
use std::time::Duration;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "w"}}})).unwrap()
}

async fn next<S>(s: &mut S) -> WatchEvent<ConfigMap>
where
    S: futures::Stream<Item = Result<WatchEvent<ConfigMap>, kube::Error>> + Unpin,
{
    tokio::time::timeout(Duration::from_secs(5), s.try_next())
        .await
        .expect("event before deadline")
        .expect("no error")
        .expect("stream not ended")
}

fn name(e: &WatchEvent<ConfigMap>) -> String {
    match e {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o.metadata.name.clone().unwrap(),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn resume_from_resource_version() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let a = api.create(&PostParams::default(), &cm("a")).await.unwrap();
    let rv = a.metadata.resource_version.unwrap();
    api.create(&PostParams::default(), &cm("b")).await.unwrap();
    api.patch("a", &PatchParams::default(), &Patch::Merge(json!({"data": {"x": "1"}})))
        .await
        .unwrap();
    api.delete("b", &DeleteParams::default()).await.unwrap();
    let mut w = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let evs = [next(&mut w).await, next(&mut w).await, next(&mut w).await];
    assert!(
        matches!(evs[0], WatchEvent::Added(_)) && name(&evs[0]) == "b",
        "{:?}",
        evs[0]
    );
    assert!(matches!(evs[1], WatchEvent::Modified(_)) && name(&evs[1]) == "a");
    assert!(matches!(evs[2], WatchEvent::Deleted(_)) && name(&evs[2]) == "b");
    // then live events
    api.create(&PostParams::default(), &cm("c")).await.unwrap();
    let e = next(&mut w).await;
    assert!(matches!(e, WatchEvent::Added(_)) && name(&e) == "c");
    // rv=0 starts with synthetic ADDED for current objects
    let mut w0 = api
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    let mut got = vec![name(&next(&mut w0).await), name(&next(&mut w0).await)];
    got.sort();
    assert_eq!(got, ["a", "c"]);
}

/// A watch resumed from a resourceVersion behind more than a batch (1024) of other resources' events still
/// delivers its own events at once, without waiting for the next write to wake it (the manager's watches
/// resume that way after a cut stream; a busy cluster writes Leases, Events and Pods meanwhile).
#[tokio::test]
async fn a_resumed_watch_behind_a_long_history_of_other_resources_is_not_stalled() {
    let srv = start().await;
    let client = srv.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = cms.create(&PostParams::default(), &cm("first")).await.unwrap();
    let rv = first.metadata.resource_version.unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), "default");
    let patch = Patch::Merge(json!({"data": {"n": "0"}}));
    for i in 0..1100 {
        let p = Patch::Merge(json!({"data": {"n": i.to_string()}}));
        cms.patch("first", &PatchParams::default(), if i == 0 { &patch } else { &p })
            .await
            .unwrap();
    }
    let secret: k8s_openapi::api::core::v1::Secret =
        serde_json::from_value(json!({"metadata": {"name": "after-the-backlog"}})).unwrap();
    secrets.create(&PostParams::default(), &secret).await.unwrap();
    // Nothing is written from here on: the watch must find the Secret in the history by itself.
    let mut w = secrets
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let event = tokio::time::timeout(Duration::from_secs(3), w.try_next())
        .await
        .expect("the Secret's event arrives without another write")
        .expect("no error")
        .expect("stream not ended");
    match event {
        WatchEvent::Added(s) => assert_eq!(s.metadata.name.as_deref(), Some("after-the-backlog")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn watch_selectors_and_single_name() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let rv = api
        .create(&PostParams::default(), &cm("seed"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut byname = api
        .watch(&WatchParams::default().fields("metadata.name=target").timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    let mut bylabel = api
        .watch(&WatchParams::default().labels("sel=yes").timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    api.create(&PostParams::default(), &cm("other")).await.unwrap();
    api.create(&PostParams::default(), &cm("target")).await.unwrap();
    assert_eq!(name(&next(&mut byname).await), "target");
    // labelling an object into the selector yields ADDED, out of it DELETED
    api.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "yes"}}})),
    )
    .await
    .unwrap();
    let e = next(&mut bylabel).await;
    assert!(matches!(e, WatchEvent::Added(_)) && name(&e) == "other", "{e:?}");
    api.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"sel": "no"}}})),
    )
    .await
    .unwrap();
    let e = next(&mut bylabel).await;
    assert!(matches!(e, WatchEvent::Deleted(_)), "{e:?}");
}

#[tokio::test]
async fn expired_resource_version_is_gone() {
    let srv = start_with(Config {
        history: 5,
        ..Default::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let first = api
        .create(&PostParams::default(), &cm("x0"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    for i in 1..10 {
        api.create(&PostParams::default(), &cm(&format!("x{i}"))).await.unwrap();
    }
    let mut w = api.watch(&WatchParams::default(), &first).await.unwrap().boxed();
    match next(&mut w).await {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410 ERROR event, got {other:?}"),
    }
    assert!(w.try_next().await.unwrap().is_none(), "stream ends after the error");
}

#[tokio::test]
async fn bookmarks_and_timeout() {
    let srv = start_with(Config {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    })
    .await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let mut w = api
        .watch(&WatchParams::default().timeout(2), "0")
        .await
        .unwrap()
        .boxed();
    match next(&mut w).await {
        WatchEvent::Bookmark(b) => assert!(!b.metadata.resource_version.is_empty()),
        other => panic!("expected bookmark, got {other:?}"),
    }
    // timeoutSeconds ends the stream
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(r) = w.next().await {
            r.unwrap();
        }
    })
    .await;
    assert!(ended.is_ok(), "stream ended by timeoutSeconds");
}

#[tokio::test]
async fn streaming_list_initial_events() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    api.create(&PostParams::default(), &cm("pre")).await.unwrap();
    let mut w = api
        .watch(&WatchParams::streaming_lists().timeout(5), "")
        .await
        .unwrap()
        .boxed();
    assert_eq!(name(&next(&mut w).await), "pre");
    match next(&mut w).await {
        WatchEvent::Bookmark(b) => assert_eq!(
            b.metadata
                .annotations
                .get("k8s.io/initial-events-end")
                .map(String::as_str),
            Some("true")
        ),
        other => panic!("expected initial-events-end bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn watches_do_not_leak() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let mut w = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    api.create(&PostParams::default(), &cm("a")).await.unwrap();
    next(&mut w).await;
    assert_eq!(srv.active_watches(), 1);
    drop(w);
    assert!(
        wait_until(Duration::from_secs(5), || async { srv.active_watches() == 0 }).await,
        "watch stream dropped"
    );
}

#[tokio::test]
async fn runtime_watcher_sees_custom_resources() {
    use kube::runtime::watcher;
    let srv = start().await;
    let client = srv.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    create_established(&crds, &widget_crd(true)).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &widget_ar());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stream = watcher::watcher(api.clone(), watcher::Config::default());
    let task = tokio::spawn(async move {
        let mut s = std::pin::pin!(stream);
        while let Some(ev) = s.next().await {
            let ev = ev.expect("watcher error");
            let _ = tx.send(match ev {
                watcher::Event::Apply(o) => format!("apply:{}:{}", o.metadata.name.unwrap(), o.data["spec"]["size"]),
                watcher::Event::Delete(o) => format!("delete:{}", o.metadata.name.unwrap()),
                watcher::Event::InitDone => "initdone".into(),
                _ => continue,
            });
        }
    });
    async fn expect(rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>, want: &str) {
        let got = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect(want)
            .unwrap();
        assert_eq!(got, want);
    }
    expect(&mut rx, "initdone").await;
    let w: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1}}),
    )
    .unwrap();
    api.create(&PostParams::default(), &w).await.unwrap();
    expect(&mut rx, "apply:w:1").await;
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 2}})),
    )
    .await
    .unwrap();
    expect(&mut rx, "apply:w:2").await;
    api.delete("w", &DeleteParams::default()).await.unwrap();
    expect(&mut rx, "delete:w").await;
    task.abort();
}

#[tokio::test]
async fn raw_watch_protocol() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    api.create(&PostParams::default(), &cm("r1")).await.unwrap();
    // watch=1 with timeoutSeconds: the body is newline-delimited JSON events and then ends
    for (h2, path) in [
        (false, "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1"),
        (true, "/api/v1/watch/namespaces/default/configmaps?timeoutSeconds=1"),
    ] {
        let (code, headers, body) = raw_alpn(&srv, "GET", path, None, "", None, h2).await;
        assert_eq!(code, 200, "{path}");
        if !h2 {
            assert_eq!(
                headers.get("transfer-encoding").map(|v| v.to_str().unwrap()),
                Some("chunked")
            );
        }
        let text = body.as_str().map(str::to_string).unwrap_or_else(|| body.to_string());
        let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 1, "{text}");
        assert_eq!(lines[0]["type"], "ADDED");
        assert_eq!(lines[0]["object"]["metadata"]["name"], "r1");
        assert_eq!(lines[0]["object"]["kind"], "ConfigMap");
    }
    let (code, _, body) = raw(
        &srv,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=abc",
        None,
        "",
        None,
    )
    .await;
    assert_eq!(code, 400, "{body}");
    // single object watch by name
    let (code, _, body) = raw(
        &srv,
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1&fieldSelector=metadata.name%3Dnope",
        None,
        "",
        None,
    )
    .await;
    assert_eq!((code, body.as_str()), (200, Some("")));
}

#[tokio::test]
async fn runtime_controller_reconciles() {
    use kube::runtime::controller::{Action, Controller};
    use std::sync::Arc;
    let srv = start().await;
    let client = srv.client().await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    async fn reconcile(cm: Arc<ConfigMap>, api: Arc<Api<ConfigMap>>) -> Result<Action, kube::Error> {
        if cm.metadata.annotations.as_ref().and_then(|a| a.get("seen")).is_none() {
            let name = cm.metadata.name.clone().unwrap_or_default();
            let p = json!({"metadata": {"annotations": {"seen": "yes"}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&p)).await?;
        }
        Ok(Action::await_change())
    }
    let ctl = Controller::new(api.clone(), kube::runtime::watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_secs(1)),
            Arc::new(api.clone()),
        )
        .for_each(|_| async {});
    let task = tokio::spawn(ctl);
    api.create(&PostParams::default(), &cm("reconcile-me")).await.unwrap();
    let ok = wait_until(Duration::from_secs(10), || async {
        api.get("reconcile-me")
            .await
            .unwrap()
            .metadata
            .annotations
            .is_some_and(|a| a.contains_key("seen"))
    })
    .await;
    task.abort();
    assert!(ok, "controller reconciled the object");
}

#[tokio::test]
async fn kubeconfig_yaml_is_usable() {
    let srv = start().await;
    let kc = kube::config::Kubeconfig::from_yaml(&srv.kubeconfig_yaml()).unwrap();
    let cfg = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap();
    assert_eq!(cfg.default_namespace, "default");
    let client = kube::Client::try_from(cfg).unwrap();
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &cm("via-kubeconfig")).await.unwrap();
}

/// Deleting a CRD ends the watches of its custom resources (kube-apiserver tears down the resource's
/// storage); a client that watches again gets 404, so a watcher that keeps retrying shows in the log.
#[tokio::test]
async fn deleting_a_crd_ends_the_watches_of_its_resources() {
    let srv = start().await;
    let client = srv.client().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = create_established(&crds, &widget_crd(true)).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &widget_ar());
    let mut stream = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    assert_eq!(srv.active_watches(), 1);
    crds.delete(&crd.metadata.name.unwrap(), &DeleteParams::default())
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(event) = stream.next().await {
            assert!(event.is_ok(), "no error event before the end: {event:?}");
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch ends with its CRD");
    match api.watch(&WatchParams::default(), "0").await {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 404),
        other => panic!(
            "a new watch of a deleted CRD's resource is 404: {:?}",
            other.map(|_| ())
        ),
    }
}
