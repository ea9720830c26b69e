//! Leader election (docs/behaviour.md#leader-election): compete for the Go manager's Lease, reconcile
//! while holding it, release it at shutdown.

use super::lease::{self, LeaderElection};
use crate::reconciler::{self, Context};
use crate::tasks::AbortOnDrop;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

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

/// This process's identity in the Lease: the pod name (`HOSTNAME`, else a name from the process id) and a
/// random suffix, as controller-runtime does, so that a restarted container does not take the Lease of the
/// process it replaces for its own before that Lease expires.
pub fn process_identity() -> String {
    let pod = std::env::var("HOSTNAME").unwrap_or_else(|_| format!("btp-manager-{}", std::process::id()));
    identity(&pod, random_u64())
}

/// Reconcile while holding the lease; stop reconciling when it is lost, resume when regained; publish
/// whether this replica leads on `leading` (the webhook certificate keeper follows it). When `stop` is set:
/// let the in-flight reconcile finish, then release the Lease, then return.
///
/// A term that ends because the Lease was lost (its right to write ended) ends at once: the in-flight
/// pass is dropped (its writes are refused by the fence anyway) and `btpmanager_leader` turns 0 then, not
/// once a pass stuck on an unanswered request gives up.
pub async fn lead_and_reconcile(
    election: LeaderElection,
    ctx: Arc<Context>,
    leading: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut leader = leading.subscribe();
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    // Aborted with this task: a killed manager must not keep renewing the Lease.
    let elect = AbortOnDrop::new(tokio::spawn(lease::elect(election, leading, release_rx)));
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
        let mut stopping = stop.clone();
        let term = reconciler::run(ctx.clone(), async move {
            let _ = stopping.wait_for(|s| *s).await;
        });
        tokio::select! {
            // Ended by the shutdown (the in-flight pass finished, or was given up), or by itself.
            () = term => {}
            // Lost: nothing of this term may go on.
            _ = leader.wait_for(|l| !*l) => {}
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reconcilers_default_watch_limit_is_the_default_lease() {
        assert_eq!(
            crate::reconciler::context::DEFAULT_WATCH_FAILING_LIMIT,
            DEFAULT_LEASE_DURATION
        );
    }

    #[test]
    fn the_identity_is_the_pod_name_and_sixteen_hex_digits() {
        assert_eq!(identity("btp-manager-abc", 0xbeef), "btp-manager-abc_000000000000beef");
        assert_eq!(identity("p", u64::MAX), "p_ffffffffffffffff");
        assert_ne!(random_u64(), random_u64(), "two replicas of one pod name differ");
    }
}
