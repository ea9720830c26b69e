//! Leader election (docs/behaviour.md#leader-election): compete for the Go manager's Lease, reconcile
//! while holding it, release it at shutdown.

use crate::reconciler::{self, Context};
use crate::tasks::AbortOnDrop;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Lease name (docs/behaviour.md#leader-election), the Go manager's.
pub const LEADER_LEASE: &str = "ec023d38.kyma-project.io";

/// The Lease duration when none is given (`--leader-election-lease-duration`).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// 64 random bits from the standard library's per-instance hash keys (no random-number crate needed for an
/// identity suffix).
fn random_u64() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// This replica's identity: the pod name and a random suffix, as controller-runtime makes it.
fn identity(pod: &str, suffix: u64) -> String {
    format!("{pod}_{suffix:016x}")
}

/// The Lease's duration and grace in whole seconds, as kube-lease-manager takes them: at least 2 s, and a
/// grace of a third of it, at most 5 s.
fn lease_timing(lease_duration: Duration) -> (u64, u64) {
    let duration = lease_duration.as_secs().max(2);
    (duration, 5.min(duration / 3))
}

/// Who competes for [`LEADER_LEASE`], and where.
#[derive(Clone)]
pub struct LeaderElection {
    /// The client.
    pub client: kube::Client,
    /// Namespace of the Lease (the manager's).
    pub namespace: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// How long the Lease lasts without renewal (`--leader-election-lease-duration`).
    pub lease_duration: Duration,
}

impl LeaderElection {
    /// Compete in `namespace` as this instance: the pod name (`HOSTNAME`, else a name from the process id)
    /// and a random suffix, as controller-runtime does, so that a restarted container does not take the
    /// Lease of the process it replaces for its own before that Lease expires.
    pub fn new(client: kube::Client, namespace: &str, lease_duration: Duration) -> Self {
        let pod = std::env::var("HOSTNAME").unwrap_or_else(|_| format!("btp-manager-{}", std::process::id()));
        Self {
            client,
            namespace: namespace.to_string(),
            identity: identity(&pod, random_u64()),
            lease_duration,
        }
    }

    /// A fresh lease manager (it reads the Lease, creating it when absent).
    pub async fn manager(&self) -> Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError> {
        let (duration, grace) = lease_timing(self.lease_duration);
        kube_lease_manager::LeaseManagerBuilder::new(self.client.clone(), LEADER_LEASE)
            .with_namespace(self.namespace.clone())
            .with_identity(self.identity.clone())
            .with_duration(duration)
            .with_grace(grace)
            .build()
            .await
    }
}

/// Reconcile while holding the lease; stop reconciling when it is lost, resume when regained. When `stop`
/// is set: let the in-flight reconcile finish, then release the Lease, then return.
pub async fn lead_and_reconcile(election: LeaderElection, ctx: Arc<Context>, mut stop: watch::Receiver<bool>) {
    let (leader_tx, mut leader) = watch::channel(false);
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    // Aborted with this task: a killed manager must not keep renewing the Lease.
    let elect = AbortOnDrop::new(tokio::spawn(elect(election, leader_tx, release_rx)));
    loop {
        let won = tokio::select! {
            won = leader.wait_for(|l| *l) => won.is_ok(),
            _ = stop.wait_for(|s| *s) => break,
        };
        if !won {
            // The election task ended (it only does when told to): wait for the stop.
            let _ = stop.wait_for(|s| *s).await;
            break;
        }
        if *stop.borrow() {
            // Won just as the shutdown came: there is nothing to start.
            break;
        }
        tracing::info!("leading: reconciling");
        ctx.metrics.set_leading(true);
        let (mut lost, mut stopping) = (leader.clone(), stop.clone());
        reconciler::run(ctx.clone(), async move {
            tokio::select! {
                _ = lost.wait_for(|l| !*l) => {}
                _ = stopping.wait_for(|s| *s) => {}
            }
        })
        .await;
        ctx.metrics.set_leading(false);
        if *stop.borrow() {
            break;
        }
        if *leader.borrow() {
            // The controller ended while we lead (stuck at its start): a new term begins at once.
            tracing::info!("the controller's term ended while leading: a new one begins");
            continue;
        }
        tracing::info!("lost the lease: not reconciling");
    }
    // The reconciler has stopped: hand the Lease over.
    let _ = release_tx.send(());
    let _ = elect.disarm().await;
}

/// Keep competing for the Lease, publishing whether we lead, until `release`: then release it if held.
///
/// kube-lease-manager sleeps until the holder's lease would expire; a Lease released early (a leader
/// shutting down) is seen through a watch instead, and a fresh manager takes it at once.
async fn elect(
    election: LeaderElection,
    leader_tx: watch::Sender<bool>,
    mut release: tokio::sync::oneshot::Receiver<()>,
) {
    use futures::StreamExt as _;
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::runtime::{watcher, WatchStreamExt as _};
    let leases: kube::Api<Lease> = kube::Api::namespaced(election.client.clone(), &election.namespace);
    let by_name = watcher::Config::default().fields(&format!("metadata.name={LEADER_LEASE}"));
    let mut released = watcher(leases, by_name)
        .backoff(crate::watch_backoff::WatchBackoff::default())
        .applied_objects()
        .filter_map(|lease| async move {
            let lease = lease.ok()?;
            let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
            holder.is_empty().then_some(())
        })
        .boxed();
    let mut manager: Option<kube_lease_manager::LeaseManager> = None;
    let mut leading = false;
    loop {
        let Some(current) = manager.as_ref() else {
            match election.manager().await {
                Ok(m) => manager = Some(m),
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: reading the Lease failed");
                    tokio::select! {
                        _ = &mut release => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            }
            continue;
        };
        tokio::select! {
            biased;
            _ = &mut release => break,
            changed = current.changed() => match changed {
                Ok(now) => {
                    leading = now;
                    tracing::info!(
                        leading = now,
                        "leader election: this replica {} the Lease",
                        if now { "holds" } else { "no longer holds" }
                    );
                    let _ = leader_tx.send(now);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: renewing or taking the Lease failed");
                    tokio::select! {
                        _ = &mut release => break,
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                }
            },
            Some(()) = released.next(), if !leading => {
                // Released by its holder: look again now rather than at its old expiry.
                manager = None;
            }
        }
    }
    if leading {
        if let Some(manager) = &manager {
            // One call, within the budget of one call: a shutdown must not wait on an API server that
            // does not answer (the Lease expires by itself).
            match tokio::time::timeout(reconciler::cluster::CALL_BUDGET, manager.release()).await {
                Ok(Ok(())) => tracing::info!("lease released"),
                Ok(Err(e)) => tracing::warn!(error = %e, "releasing the lease failed; it expires by itself"),
                Err(_) => tracing::warn!("releasing the lease took too long; it expires by itself"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_the_pod_name_and_sixteen_hex_digits() {
        assert_eq!(identity("btp-manager-abc", 0xbeef), "btp-manager-abc_000000000000beef");
        assert_eq!(identity("p", u64::MAX), "p_ffffffffffffffff");
        assert_ne!(random_u64(), random_u64(), "two replicas of one pod name differ");
    }

    #[test]
    fn the_lease_lasts_at_least_two_seconds_with_a_grace_of_a_third_up_to_five() {
        assert_eq!(lease_timing(DEFAULT_LEASE_DURATION), (15, 5));
        assert_eq!(lease_timing(Duration::from_secs(3)), (3, 1));
        assert_eq!(lease_timing(Duration::from_millis(500)), (2, 0));
        assert_eq!(lease_timing(Duration::from_secs(60)), (60, 5));
    }
}
