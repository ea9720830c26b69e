use crate::common::*;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchParams};
use serde_json::json;
use std::time::Duration;

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
}

#[tokio::test]
async fn injected_errors_and_request_log() {
    let srv = start().await;
    // kube-rs retries 429/503/504 with backoff by default; see the real status codes instead
    let mut cfg = srv.kube_config();
    cfg.default_retry = false;
    let api: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(cfg).unwrap(), "default");
    srv.faults().fail(1.0, 500, Some("create"), Some("configmaps"));
    let e = api.create(&PostParams::default(), &cm("x")).await.unwrap_err();
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 500), "{e:?}");
    // other verbs unaffected
    api.list(&ListParams::default()).await.unwrap();
    srv.faults().clear();
    srv.faults().fail(1.0, 429, None, None);
    let e = api.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&e, kube::Error::Api(s) if s.code == 429 && s.reason == "TooManyRequests"),
        "{e:?}"
    );
    srv.faults().clear();
    srv.faults().fail(1.0, 409, Some("update"), None);
    let c = api.create(&PostParams::default(), &cm("y")).await.unwrap();
    let e = api.replace("y", &PostParams::default(), &c).await.unwrap_err();
    assert!(matches!(&e, kube::Error::Api(s) if s.code == 409), "{e:?}");
    srv.faults().clear();
    // fraction 0 never fails
    srv.faults().fail(0.0, 500, None, None);
    api.get("y").await.unwrap();
    srv.faults().clear();
    let log = srv.request_log().entries();
    let creates: Vec<_> = log
        .iter()
        .filter(|r| r.verb == "create" && r.resource == "configmaps")
        .collect();
    assert_eq!(creates.len(), 2);
    assert_eq!((creates[0].code, creates[0].changed), (500, false));
    assert_eq!((creates[1].code, creates[1].changed), (201, true));
    assert_eq!(creates[1].namespace, "default");
    assert_eq!(creates[1].path, "/api/v1/namespaces/default/configmaps");
    let get = log.iter().rev().find(|r| r.verb == "get").unwrap();
    assert_eq!((get.name.as_str(), get.code, get.changed), ("y", 200, false));
}

#[tokio::test]
async fn a_held_request_is_answered_only_once_released() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    let held = srv.faults().hold(Some("create"), Some("configmaps"));
    let create = tokio::spawn({
        let api = api.clone();
        async move { api.create(&PostParams::default(), &cm("held")).await }
    });
    assert!(
        wait_until(Duration::from_secs(10), || async { held.waiting() == 1 }).await,
        "the create reaches the server and waits"
    );
    // Held before it is handled: nothing stored, and the requests it does not match go on.
    assert!(api.get_opt("held").await.unwrap().is_none());
    assert!(!create.is_finished(), "answered only once released");
    held.release();
    create.await.unwrap().unwrap();
    assert!(api.get_opt("held").await.unwrap().is_some());
}

#[tokio::test]
async fn cut_watch_streams() {
    let srv = start().await;
    let api: Api<ConfigMap> = Api::namespaced(srv.client().await, "default");
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("c{i}"))).await.unwrap();
    }
    srv.faults().cut_watches_after(Some(2));
    let mut w = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let mut n = 0;
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = w.try_next().await.unwrap() {
            let _ = ev;
            n += 1;
        }
    })
    .await;
    assert!(ended.is_ok(), "stream ended");
    assert_eq!(n, 2);
}

#[tokio::test]
async fn deployment_controller_loop() {
    use k8s_openapi::api::apps::v1::Deployment;
    let srv = start().await;
    let client = srv.client().await;
    let task = btp_apiserver::testing::spawn_deployment_controller(client.clone());
    let api: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": {"replicas": 2,
        "selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})).unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let ok = wait_until(Duration::from_secs(10), || async {
        let d = api.get("d").await.unwrap();
        d.status.and_then(|s| s.available_replicas) == Some(2)
    })
    .await;
    task.abort();
    assert!(ok, "deployment marked available");
}

#[tokio::test]
async fn dropping_the_handle_stops_the_server() {
    let srv = start().await;
    let addr = srv.addr();
    tokio::net::TcpStream::connect(addr).await.unwrap();
    drop(srv);
    assert!(
        wait_until(Duration::from_secs(5), || async {
            tokio::net::TcpStream::connect(addr).await.is_err()
        })
        .await,
        "listener closed"
    );
}
