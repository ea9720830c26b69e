//! The Lease elector (docs/behaviour.md#leader-election), with client-go's rules so that it takes turns with
//! the Go manager and with older versions of this one:
//!
//! - a Lease held by another identity is free once its record has not changed for its
//!   `leaseDurationSeconds`, measured on this process's monotonic clock from when the change was seen
//!   (never from the wall-clock `renewTime`, which another machine wrote);
//! - every acquire, renewal and release is a PATCH guarded by the `resourceVersion` just read, so of two
//!   replicas taking the same record only one wins;
//! - a leader renews every [`Timing::renew_every`], and holds the right to write ([`Fence`]) for
//!   [`Timing::valid_for`] after the instant a renewal that succeeded was *sent*: a leader paused past that
//!   finds the right gone when it resumes and sends nothing before it has read the Lease again.
//!
//! [`decide`] is the pure rule; [`elect`] runs it against the API server.

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

use crate::fence::Fence;

/// Lease name (docs/behaviour.md#leader-election), the Go manager's.
pub const LEADER_LEASE: &str = "ec023d38.kyma-project.io";

/// Who competes for [`LEADER_LEASE`], and where.
#[derive(Clone)]
pub struct LeaderElection {
    /// The client.
    pub client: kube::Client,
    /// Namespace of the Lease (the manager's).
    pub namespace: String,
    /// This replica's identity ([`super::leader::process_identity`]).
    pub identity: String,
    /// How long the Lease lasts without renewal (`--leader-election-lease-duration`).
    pub lease_duration: Duration,
    /// Opened by every acquire and renewal that succeeded, for [`Timing::valid_for`].
    pub fence: Fence,
}

impl LeaderElection {
    /// Make sure the Lease can be read, and exists (created without a holder when absent).
    pub async fn prepare(&self) -> Result<(), kube::Error> {
        read_or_create(&self.leases()).await.map(|_| ())
    }

    pub(super) fn leases(&self) -> kube::Api<k8s_openapi::api::coordination::v1::Lease> {
        kube::Api::namespaced(self.client.clone(), &self.namespace)
    }
}

/// The rhythm of one Lease duration, in client-go's proportions (15 s / 10 s renew deadline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// `leaseDurationSeconds` (whole seconds, at least 2).
    pub lease: Duration,
    /// How long a successful acquire or renewal lets this replica write, from when it was sent: two thirds
    /// of the Lease, so that a third of it (5 s of 15) separates the end of our right from the earliest
    /// moment another replica may take over.
    pub valid_for: Duration,
    /// How often the leader renews: a third of the Lease, so that one renewal may fail and the next still
    /// comes before the right ends.
    pub renew_every: Duration,
    /// The pause before the next try after a failed request.
    pub retry: Duration,
}

impl Timing {
    pub fn new(lease_duration: Duration) -> Self {
        let lease = Duration::from_secs(lease_duration.as_secs().max(2));
        Self {
            lease,
            valid_for: lease * 2 / 3,
            renew_every: lease / 3,
            retry: lease / 15,
        }
    }
}

/// What was last seen of the Lease, and when that version was first seen.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    pub version: String,
    pub spec: LeaseSpec,
    pub since: Instant,
}

impl Observed {
    /// Note `lease` as seen at `now`: the clock of a record restarts only when its version changed.
    pub fn note(previous: Option<&Observed>, lease: &Lease, now: Instant) -> Option<Observed> {
        let version = lease.metadata.resource_version.clone()?;
        let since = match previous {
            Some(p) if p.version == version => p.since,
            _ => now,
        };
        Some(Observed {
            version,
            spec: lease.spec.clone().unwrap_or_default(),
            since,
        })
    }

    fn holder(&self) -> Option<&str> {
        self.spec.holder_identity.as_deref().filter(|h| !h.is_empty())
    }
}

/// What to do about an observed Lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Take it (or renew it, when it is ours).
    Take,
    /// Another identity holds it: look again after this long (or when it changes).
    Wait(Duration),
}

/// The rule: a Lease without a holder or held by `me` is taken; one held by another identity is taken once
/// its record has stood unchanged for its own duration.
pub fn decide(observed: &Observed, me: &str, now: Instant) -> Next {
    match observed.holder() {
        None => Next::Take,
        Some(holder) if holder == me => Next::Take,
        Some(_) => {
            let seconds = observed.spec.lease_duration_seconds.unwrap_or(0).max(1);
            let expires = observed.since + Duration::from_secs(u64::try_from(seconds).unwrap_or(1));
            match expires.checked_duration_since(now) {
                Some(left) if !left.is_zero() => Next::Wait(left),
                _ => Next::Take,
            }
        }
    }
}

/// The record this replica writes when it takes or renews `observed` at wall-clock `now`.
pub fn claim(observed: &Observed, me: &str, timing: &Timing, now: jiff::Timestamp) -> LeaseSpec {
    let ours = observed.holder() == Some(me);
    let transitions = observed.spec.lease_transitions.unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(i32::try_from(timing.lease.as_secs()).unwrap_or(i32::MAX)),
        acquire_time: if ours {
            observed.spec.acquire_time.clone()
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if ours {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..LeaseSpec::default()
    }
}

/// Read the Lease, creating it without a holder when it does not exist.
pub async fn read_or_create(leases: &Api<Lease>) -> Result<Lease, kube::Error> {
    if let Some(lease) = leases.get_opt(LEADER_LEASE).await? {
        return Ok(lease);
    }
    let empty = Lease {
        metadata: kube::core::ObjectMeta {
            name: Some(LEADER_LEASE.into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    match leases.create(&PostParams::default(), &empty).await {
        Ok(lease) => Ok(lease),
        // Another replica created it first.
        Err(kube::Error::Api(s)) if s.code == 409 => leases.get(LEADER_LEASE).await,
        Err(e) => Err(e),
    }
}

/// Write `spec` over the version `observed`; fails (409 or 422) when the Lease changed since.
async fn write(leases: &Api<Lease>, observed: &Observed, spec: &LeaseSpec) -> Result<Lease, kube::Error> {
    let spec = serde_json::to_value(spec).map_err(kube::Error::SerdeError)?;
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": observed.version},
        {"op": "add", "path": "/spec", "value": spec},
    ]))
    .map_err(kube::Error::SerdeError)?;
    let params = PatchParams {
        field_manager: Some(btp_api::names::FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    leases.patch(LEADER_LEASE, &params, &Patch::<()>::Json(patch)).await
}

/// The Lease of a leader that stops: no holder, so that a follower takes it at once.
fn released() -> LeaseSpec {
    LeaseSpec::default()
}

/// Keep competing for the Lease, publishing whether this replica leads on `leading` and its right to write
/// on the election's fence, until `release`: then release the Lease if it is held and the right is still
/// valid (past it, another replica may hold it already).
pub async fn elect(election: LeaderElection, leading: watch::Sender<bool>, mut release: oneshot::Receiver<()>) {
    let me = election.identity.clone();
    let timing = Timing::new(election.lease_duration);
    let fence = election.fence.clone();
    let leases = election.leases();
    let by_name = watcher::Config::default().fields(&format!("metadata.name={LEADER_LEASE}"));
    let mut changes = watcher(leases.clone(), by_name)
        .backoff(crate::watch_backoff::WatchBackoff::default())
        .applied_objects()
        .boxed();
    // What we last saw of the Lease, and, while we lead, when the last renewal that succeeded was sent.
    let mut observed: Option<Observed> = None;
    let mut renewed: Option<Instant> = None;
    let lose = |why: &str, renewed: &mut Option<Instant>| {
        if renewed.take().is_some() {
            fence.shut_now();
            tracing::info!(
                leading = false,
                "leader election: this replica no longer holds the Lease ({why})"
            );
            let _ = leading.send(false);
        }
    };
    loop {
        // While leading: wait for the next renewal. Past the right's end nothing is sent on what we knew:
        // the Lease is read again first.
        if let Some(sent) = renewed {
            let due = tokio::time::Instant::from_std(sent + timing.renew_every);
            tokio::select! {
                biased;
                _ = &mut release => break,
                Some(Ok(lease)) = changes.next() => {
                    // A watch may still deliver a record older than our last write: only a fresh read
                    // showing another holder ends the term early.
                    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
                    if holder != Some(me.as_str()) {
                        if let Ok(fresh) = leases.get(LEADER_LEASE).await {
                            observed = Observed::note(observed.as_ref(), &fresh, Instant::now());
                            if observed.as_ref().and_then(Observed::holder) != Some(me.as_str()) {
                                lose("another identity took it", &mut renewed);
                            }
                        }
                    }
                    continue;
                }
                () = tokio::time::sleep_until(due) => {}
            }
            if sent.elapsed() >= timing.valid_for {
                lose("no renewal within its validity", &mut renewed);
                continue;
            }
        } else {
            // Not leading: read the Lease afresh and decide.
            let lease = match read_or_create(&leases).await {
                Ok(lease) => lease,
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: reading the Lease failed");
                    if wait_or_release(&mut release, timing.retry).await {
                        break;
                    }
                    continue;
                }
            };
            observed = Observed::note(observed.as_ref(), &lease, Instant::now());
            let Some(seen) = observed.clone() else {
                if wait_or_release(&mut release, timing.retry).await {
                    break;
                }
                continue;
            };
            if let Next::Wait(left) = decide(&seen, &me, Instant::now()) {
                // Held by another: wait for its term to run out, or for a change (a renewal restarts the clock,
                // a release frees it at once).
                let mut until = tokio::time::Instant::now() + left;
                let released = loop {
                    tokio::select! {
                        biased;
                        _ = &mut release => break true,
                        Some(Ok(lease)) = changes.next() => {
                            let now = Instant::now();
                            observed = Observed::note(observed.as_ref(), &lease, now);
                            match observed.as_ref().map(|o| decide(o, &me, now)) {
                                // A renewal seen: the holder's term runs from now (no read at the old end).
                                Some(Next::Wait(left)) => until = tokio::time::Instant::now() + left,
                                // Released (or ours): read it and take it.
                                _ => break false,
                            }
                        }
                        () = tokio::time::sleep_until(until) => break false,
                    }
                };
                if released {
                    break;
                }
                continue;
            }
        }
        // Take or renew what we observed.
        let seen = match observed.clone() {
            Some(seen) => seen,
            // Only a leader gets here without a version (a write of it conflicted): read it again.
            None => match leases.get(LEADER_LEASE).await {
                Ok(fresh) => {
                    observed = Observed::note(None, &fresh, Instant::now());
                    match observed.clone() {
                        Some(seen) if seen.holder() == Some(me.as_str()) => seen,
                        _ => {
                            lose("another identity took it", &mut renewed);
                            continue;
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "leader election: reading the Lease failed");
                    if wait_or_release(&mut release, timing.retry).await {
                        break;
                    }
                    continue;
                }
            },
        };
        let sent = Instant::now();
        let spec = claim(&seen, &me, &timing, jiff::Timestamp::now());
        match write(&leases, &seen, &spec).await {
            Ok(lease) => {
                observed = Observed::note(None, &lease, Instant::now());
                fence.renewed(sent, timing.valid_for);
                if renewed.replace(sent).is_none() {
                    tracing::info!(leading = true, identity = %me, "leader election: this replica holds the Lease");
                    let _ = leading.send(true);
                }
            }
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 422 => {
                // It changed since we read it: read it again before the next try (a leader keeps its term
                // only while the fresh record still names it).
                observed = None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "leader election: taking or renewing the Lease failed");
                if wait_or_release(&mut release, timing.retry).await {
                    break;
                }
                // A leader retries until its right ends (the loop's top checks it).
                if let Some(last) = renewed {
                    if last.elapsed() >= timing.valid_for {
                        lose("no renewal within its validity", &mut renewed);
                    }
                }
            }
        }
    }
    // Released while leading, with the right still valid: hand the Lease over.
    if let (Some(sent), Some(seen)) = (renewed, observed.as_ref()) {
        if sent.elapsed() < timing.valid_for {
            fence.shut_now();
            let free = released();
            let call = write(&leases, seen, &free);
            // One call, within the budget of one call: a shutdown must not wait on an API server that does
            // not answer (the Lease expires by itself).
            match tokio::time::timeout(crate::reconciler::cluster::CALL_BUDGET, call).await {
                Ok(Ok(_)) => tracing::info!("lease released"),
                Ok(Err(e)) => tracing::warn!(error = %e, "releasing the lease failed; it expires by itself"),
                Err(_) => tracing::warn!("releasing the lease took too long; it expires by itself"),
            }
        }
        let _ = leading.send(false);
    }
}

/// Wait `pause`, or until `release`: whether released.
async fn wait_or_release(release: &mut oneshot::Receiver<()>, pause: Duration) -> bool {
    tokio::select! {
        _ = release => true,
        () = tokio::time::sleep(pause) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(version: &str, holder: Option<&str>, seconds: i32) -> Lease {
        Lease {
            metadata: kube::core::ObjectMeta {
                name: Some(LEADER_LEASE.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                lease_duration_seconds: Some(seconds),
                lease_transitions: Some(3),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn the_timing_keeps_a_third_of_the_lease_between_our_right_and_a_takeover() {
        let t = Timing::new(Duration::from_secs(15));
        assert_eq!(
            (t.lease, t.valid_for, t.renew_every, t.retry),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(5),
                Duration::from_secs(1)
            )
        );
        let short = Timing::new(Duration::from_millis(500));
        assert_eq!(short.lease, Duration::from_secs(2), "at least two whole seconds");
        assert!(short.renew_every < short.valid_for && short.valid_for < short.lease);
    }

    #[test]
    fn a_free_or_own_lease_is_taken_another_holders_only_after_its_duration_unchanged() {
        let t0 = Instant::now();
        let free = Observed::note(None, &lease("1", None, 15), t0).unwrap();
        assert_eq!(decide(&free, "me", t0), Next::Take);
        let ours = Observed::note(None, &lease("1", Some("me"), 15), t0).unwrap();
        assert_eq!(decide(&ours, "me", t0), Next::Take);
        let theirs = Observed::note(None, &lease("1", Some("them"), 15), t0).unwrap();
        assert_eq!(decide(&theirs, "me", t0), Next::Wait(Duration::from_secs(15)));
        assert_eq!(
            decide(&theirs, "me", t0 + Duration::from_secs(10)),
            Next::Wait(Duration::from_secs(5))
        );
        assert_eq!(decide(&theirs, "me", t0 + Duration::from_secs(15)), Next::Take);
    }

    #[test]
    fn a_changed_record_restarts_the_clock_an_unchanged_one_does_not() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(12);
        let first = Observed::note(None, &lease("1", Some("them"), 15), t0).unwrap();
        let same = Observed::note(Some(&first), &lease("1", Some("them"), 15), later).unwrap();
        assert_eq!(same.since, t0);
        assert_eq!(decide(&same, "me", later), Next::Wait(Duration::from_secs(3)));
        let renewed = Observed::note(Some(&first), &lease("2", Some("them"), 15), later).unwrap();
        assert_eq!(renewed.since, later);
        assert_eq!(decide(&renewed, "me", later), Next::Wait(Duration::from_secs(15)));
    }

    #[test]
    fn a_claim_keeps_our_acquire_time_and_counts_a_change_of_holder() {
        let t = Timing::new(Duration::from_secs(15));
        let now = jiff::Timestamp::now();
        let theirs = Observed::note(None, &lease("1", Some("them"), 30), Instant::now()).unwrap();
        let taken = claim(&theirs, "me", &t, now);
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        assert_eq!(taken.lease_duration_seconds, Some(15), "our own duration");
        assert_eq!(taken.lease_transitions, Some(4));
        assert_eq!(taken.acquire_time, Some(MicroTime(now)));
        let mut ours = theirs.clone();
        ours.spec = taken.clone();
        let later = now + jiff::SignedDuration::from_secs(5);
        let renewed = claim(&ours, "me", &t, later);
        assert_eq!(
            renewed.acquire_time,
            Some(MicroTime(now)),
            "a renewal keeps the acquire time"
        );
        assert_eq!(renewed.renew_time, Some(MicroTime(later)));
        assert_eq!(renewed.lease_transitions, Some(4));
    }
}
