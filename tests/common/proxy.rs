//! kube-proxy's part on a real API server without one: a listener on a Service's ClusterIP (a loopback
//! address in the clusters of `../shared/realk8s`: 127.96.0.0/16 for 1.36, 127.97.0.0/16 for 1.24) that sends
//! each connection to a ready endpoint of the Service's EndpointSlices (written by kube-controller-manager from
//! the Pods' `Ready`), at the address where the kubelet stand-in runs that Pod's container port. A connection
//! with no ready endpoint is closed at once, as a Service without endpoints refuses it. Connections are plain
//! TCP: TLS is between the client (the API server, calling a webhook) and the container.
#![allow(dead_code)]

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Where a container port of a Pod listens: (namespace, pod, container port) → address.
pub type Lookup = Arc<dyn Fn(&str, &str, i32) -> Option<SocketAddr> + Send + Sync>;

/// A running proxy; its listeners and connections end when dropped.
pub struct ServiceProxy {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for ServiceProxy {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Bind `addr`, retrying while an earlier listener of a test that just ended still holds it.
async fn bind(addr: SocketAddr) -> TcpListener {
    let mut last = None;
    for _ in 0..50 {
        match TcpListener::bind(addr).await {
            Ok(l) => return l,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("binding {addr}: {last:?}");
}

/// Accept on `listener`; each connection goes where `pick` says (closed when it says nowhere).
fn accept_loop<F>(listener: TcpListener, pick: F) -> JoinHandle<()>
where
    F: Fn() -> Option<SocketAddr> + Send + 'static,
{
    tokio::spawn(async move {
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            while connections.try_join_next().is_some() {}
            let Some(target) = pick() else {
                drop(inbound);
                continue;
            };
            connections.spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(target).await {
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

/// Forward every connection to `listen` to `target` (the `kubernetes` Service: its endpoint is the API
/// server, which publishes none in these clusters).
pub async fn forward(listen: SocketAddr, target: SocketAddr) -> ServiceProxy {
    let listener = bind(listen).await;
    ServiceProxy {
        tasks: vec![accept_loop(listener, move || Some(target))],
    }
}

/// Serve every port of the Service `namespace/name` on its ClusterIP.
pub async fn serve_service(client: &kube::Client, lookup: Lookup, namespace: &str, name: &str) -> ServiceProxy {
    let service = Api::<Service>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("the Service {namespace}/{name}: {e}"));
    let spec = service.spec.unwrap_or_default();
    let cluster_ip = spec
        .cluster_ip
        .unwrap_or_else(|| panic!("the Service {namespace}/{name} has a ClusterIP"));
    let (store, writer) = reflector::store::<EndpointSlice>();
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    let config = watcher::Config::default().labels(&format!("kubernetes.io/service-name={name}"));
    let mut tasks = vec![tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(slices, config).default_backoff().reflect(writer));
        while events.next().await.is_some() {}
    })];
    for port in spec.ports.unwrap_or_default() {
        let listen: SocketAddr = format!("{cluster_ip}:{}", port.port)
            .parse()
            .unwrap_or_else(|e| panic!("{cluster_ip}:{}: {e}", port.port));
        let listener = bind(listen).await;
        let (store, lookup, namespace) = (store.clone(), lookup.clone(), namespace.to_string());
        let port_name = port.name.clone();
        tasks.push(accept_loop(listener, move || {
            ready_endpoint(&store, &lookup, &namespace, port_name.as_deref())
        }));
    }
    ServiceProxy { tasks }
}

/// A ready endpoint of the slices, on the slice port named like the Service port, where it runs here.
fn ready_endpoint(
    store: &Store<EndpointSlice>,
    lookup: &Lookup,
    namespace: &str,
    port_name: Option<&str>,
) -> Option<SocketAddr> {
    let mut candidates = Vec::new();
    for slice in store.state() {
        let Some(port) = slice
            .ports
            .as_ref()
            .and_then(|ports| ports.iter().find(|p| p.name.as_deref() == port_name))
            .and_then(|p| p.port)
        else {
            continue;
        };
        for endpoint in &slice.endpoints {
            let conditions = endpoint.conditions.clone().unwrap_or_default();
            // An unset `ready` means ready (the API's documented reading); terminating endpoints are not.
            if conditions.ready == Some(false) || conditions.terminating == Some(true) {
                continue;
            }
            let Some(target) = endpoint
                .target_ref
                .as_ref()
                .filter(|t| t.kind.as_deref() == Some("Pod"))
            else {
                continue;
            };
            let pod = target.name.as_deref().unwrap_or_default();
            if let Some(addr) = lookup(namespace, pod, port) {
                candidates.push(addr);
            }
        }
    }
    if candidates.is_empty() {
        return None;
    }
    Some(candidates[fastrand::usize(..candidates.len())])
}
