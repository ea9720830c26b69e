//! The `run` command (its wiring is [`crate::manager`]), signals, and the generated artifacts (CRD,
//! webhook manifests).

use crate::cli::RunArgs;
/// The manager's client (built in [`crate::manager`]); here too, where callers have always found it.
pub use crate::manager::manager_client;
use crate::manager::{ManagerBuilder, Options};
use crate::BoxedFuture;
use anyhow::Context as _;
use btp_webhooks::manifests::WebhookManifests;
use tokio::sync::watch;

/// The CRD as YAML (what `deploy/crd.yaml` holds).
pub fn crd_yaml() -> anyhow::Result<String> {
    let crd = btp_api::BtpOperator::crd().context("building the CRD")?;
    Ok(serde_saphyr::to_string(&crd)?)
}

/// `btp-manager crd`.
pub fn print_crd() -> anyhow::Result<()> {
    print!("{}", crd_yaml()?);
    Ok(())
}

/// The webhook configurations as YAML (what `deploy/webhooks.yaml` holds): without `matchConditions`, so
/// that every supported Kubernetes version accepts the install (1.24–1.27 reject the field); the manager
/// adds them at start where the API server has them (`match_conditions_supported`).
pub fn webhook_manifests_yaml(namespace: &str) -> anyhow::Result<String> {
    let manifests = WebhookManifests {
        match_conditions: false,
        ..WebhookManifests::in_cluster(namespace)
    };
    Ok(manifests.to_yaml()?)
}

/// `btp-manager webhook-manifests`.
pub fn print_webhook_manifests(namespace: &str) -> anyhow::Result<()> {
    print!("{}", webhook_manifests_yaml(namespace)?);
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// `btp-manager run`: webhook server with self-managed certificates, metrics and health endpoints.
///
/// Shutdown (SIGTERM or Ctrl-C): `/readyz` turns false at once and reconciling stops (the in-flight
/// reconcile finishes, then the Lease is released); the webhooks keep answering for
/// `--shutdown-drain-delay` so that the endpoints controller can take the pod out of the Service, then
/// they stop accepting and finish what is in flight; the process exits 0.
///
/// A boxed future: see [`BoxedFuture`].
pub fn run(args: RunArgs) -> BoxedFuture<anyhow::Result<()>> {
    Box::pin(run_manager(args))
}

async fn run_manager(args: RunArgs) -> anyhow::Result<()> {
    for (flag, why) in args.go_manager.ignored() {
        tracing::info!(flag, why, "flag of the Go BTP Manager accepted; it has no effect here");
    }
    let config = kube::Config::infer()
        .await
        .context("connecting to the Kubernetes API (KUBECONFIG, ~/.kube/config or in-cluster)")?;
    let client = manager_client(config)?;
    let (term_tx, term_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        let _ = term_tx.send(true);
    });
    ManagerBuilder::new(client, Options::run(&args))?
        .start(term_rx)
        .await?
        .shut_down()
        .await
}
