//! Runs the embedded API server and writes a kubeconfig: `cargo run -p btp-apiserver --example serve -- /tmp/kubeconfig`
use btp_apiserver::{ApiServer, Config};

#[tokio::main]
async fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| "kubeconfig".into());
    let srv = ApiServer::start(Config::default()).await.expect("start");
    std::fs::write(&path, srv.kubeconfig_yaml()).expect("write kubeconfig");
    // no pods run: keep Deployments marked available so `kubectl rollout status` completes
    let ctl = btp_apiserver::spawn_deployment_controller(srv.client().await);
    println!("serving on {} (kubeconfig: {path})", srv.url());
    let _ = tokio::signal::ctrl_c().await;
    ctl.abort();
    srv.shutdown().await;
}
