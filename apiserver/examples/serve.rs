//! Runs the embedded API server and writes a kubeconfig: `cargo run -p btp-apiserver --example serve -- /tmp/kubeconfig`
use btp_apiserver::{ApiServer, Config};

#[tokio::main]
async fn main() {
    let path = std::env::args().nth(1).unwrap_or_else(|| "kubeconfig".into());
    let srv = ApiServer::start(Config::default()).await.expect("start");
    std::fs::write(&path, srv.kubeconfig_yaml()).expect("write kubeconfig");
    // no pods run: keep Deployments marked available so `kubectl rollout status` completes
    // (BTP_SERVE_NO_DEPLOYMENT_CONTROLLER=1 leaves them unavailable, like a cluster that cannot pull the image)
    let ctl = match std::env::var("BTP_SERVE_NO_DEPLOYMENT_CONTROLLER").as_deref() {
        Ok("1") => tokio::spawn(async {}),
        _ => btp_apiserver::spawn_deployment_controller(srv.client().await),
    };
    println!("serving on {} (kubeconfig: {path})", srv.url());
    let _ = tokio::signal::ctrl_c().await;
    ctl.abort();
    srv.shutdown().await;
}
