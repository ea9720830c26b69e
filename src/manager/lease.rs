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
//!   finds the right gone when it resumes and sends nothing before it has read the Lease again;
//! - every request about the Lease has a deadline ([`call_deadline`]): a third of the Lease, and for a
//!   leader never past its right, so that a leader whose renewal hangs (a silent partition) stops leading
//!   when its right ends, and a follower whose read hangs tries again;
//! - a write that loses a race (409 or 422) is read again and retried at once the first time, then after
//!   pauses that grow, with jitter ([`conflict_pause`]), and is counted
//!   (`btpmanager_leader_election_conflicts_total`);
//! - a leader that stops shuts the fence, waits for its writes in flight, and releases the Lease as
//!   client-go does ([`released`]), within what is left of its right.
//!
//! [`decide`], [`claim`], [`released`], [`call_deadline`] and [`conflict_pause`] are the pure rules;
//! [`elect`] runs them against the API server.

use futures::StreamExt as _;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt as _};
use prometheus_client::metrics::counter::Counter;
use std::future::Future;
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
    /// Counts the writes of the Lease that lost a race (`btpmanager_leader_election_conflicts_total`).
    pub conflicts: Counter,
}

/// Register the elector's metrics in `registry`: the counter of Lease writes that lost a race.
pub fn register_conflicts(registry: &mut prometheus_client::registry::Registry) -> Counter {
    let conflicts = Counter::default();
    registry.register(
        "btpmanager_leader_election_conflicts",
        "Writes of the leader Lease refused because it changed since it was read (409 or 422)",
        conflicts.clone(),
    );
    conflicts
}

/// Why a request about the Lease did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The API server answered with an error.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// No answer before the request's deadline ([`call_deadline`]).
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

impl LeaderElection {
    /// Make sure the Lease can be read, and exists (created without a holder when absent), within one
    /// request's budget ([`Timing::call`]).
    pub async fn prepare(&self) -> Result<(), LeaseError> {
        let budget = Timing::new(self.lease_duration).call;
        match tokio::time::timeout(budget, read_or_create(&self.leases())).await {
            Ok(read) => read.map(|_| ()).map_err(LeaseError::Api),
            Err(_) => Err(LeaseError::TimedOut(budget)),
        }
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
    /// The longest a request about the Lease may take (a third of the Lease, 5 s of 15; a leader's also
    /// ends with its right): controller-runtime bounds its election client the same way.
    pub call: Duration,
}

impl Timing {
    pub fn new(lease_duration: Duration) -> Self {
        let lease = Duration::from_secs(lease_duration.as_secs().max(2));
        Self {
            lease,
            valid_for: lease * 2 / 3,
            renew_every: lease / 3,
            retry: lease / 15,
            call: lease / 3,
        }
    }
}

/// When a request about the Lease sent at `now` is abandoned: after [`Timing::call`], and for a leader
/// (`right`: when its right to write ends) at the end of its right at the latest. Pure.
pub fn call_deadline(now: Instant, timing: &Timing, right: Option<Instant>) -> Instant {
    let deadline = now + timing.call;
    right.map_or(deadline, |right| deadline.min(right))
}

/// The pause before the next try after the `conflicts`th write in a row that lost a race (409 or 422):
/// none after the first (the record changed: read it again and decide at once), then [`Timing::retry`]
/// doubling up to [`Timing::renew_every`], stretched by `jitter` (in [0, 1)) by up to as much again, so
/// that replicas do not retry in step. Under a conflict that lasts (an admission policy refusing the
/// write) this is at most one read and one write per `renew_every`. Pure.
pub fn conflict_pause(conflicts: u32, timing: &Timing, jitter: f64) -> Duration {
    if conflicts <= 1 {
        return Duration::ZERO;
    }
    let base = timing
        .retry
        .saturating_mul(1 << (conflicts - 2).min(16))
        .min(timing.renew_every);
    base.mul_f64(1.0 + jitter.clamp(0.0, 1.0))
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

/// The Lease of a leader that stops, as client-go's `release` writes it: no holder, a duration of one
/// second, the acquire and renew times `now`, the transitions counted so far kept, so that a follower
/// takes it at once and the count of handovers goes on. Pure.
pub fn released(observed: &Observed, now: jiff::Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(String::new()),
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: observed.spec.lease_transitions,
        ..LeaseSpec::default()
    }
}

/// How a request about the Lease ended.
enum Called<T> {
    /// The API server answered (or failed) within the deadline.
    Answered(Result<T, kube::Error>),
    /// No answer by the deadline: the request is abandoned.
    TimedOut,
    /// Told to release while it was in flight: the request is abandoned.
    Released,
}

/// `call`, abandoned at `deadline` or when `release` comes first.
async fn bounded<T>(
    call: impl Future<Output = Result<T, kube::Error>>,
    deadline: Instant,
    release: &mut oneshot::Receiver<()>,
) -> Called<T> {
    tokio::select! {
        biased;
        _ = release => Called::Released,
        answer = tokio::time::timeout_at(deadline.into(), call) => match answer {
            Ok(answer) => Called::Answered(answer),
            Err(_) => Called::TimedOut,
        },
    }
}

/// Keep competing for the Lease, publishing whether this replica leads on `leading` and its right to write
/// on the election's fence, until `release`: then stop leading, wait for the writes in flight, and release
/// the Lease if it is held and the right is still valid (past it, another replica may hold it already).
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
    // Writes in a row that lost a race, and the pause they asked for before the next request.
    let mut conflicts = 0u32;
    let mut pause = Duration::ZERO;
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
    // A request that did not answer: say so (the next try comes after the usual pause).
    let unanswered = |what: &str| {
        tracing::warn!(
            budget = ?timing.call,
            "leader election: {what} the Lease got no answer in time; abandoned"
        );
    };
    'elect: loop {
        // A pause asked for by the last failure, cut short by the end of a leader's right (the check below
        // ends the term then).
        if !pause.is_zero() {
            let mut until = Instant::now() + pause;
            if let Some(sent) = renewed {
                until = until.min(sent + timing.valid_for);
            }
            pause = Duration::ZERO;
            if wait_or_release_until(&mut release, until).await {
                break;
            }
        }
        // While leading: wait for the next renewal. Past the right's end nothing is sent on what we knew:
        // the Lease is read again first.
        if let Some(sent) = renewed {
            let right = sent + timing.valid_for;
            let due = tokio::time::Instant::from_std(sent + timing.renew_every);
            let due = if observed.is_none() {
                // A write conflicted: read and retry now (after the pause above).
                tokio::time::Instant::now()
            } else {
                due
            };
            tokio::select! {
                biased;
                _ = &mut release => break,
                Some(Ok(lease)) = changes.next() => {
                    // A watch may still deliver a record older than our last write: only a fresh read
                    // showing another holder ends the term early.
                    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
                    if holder != Some(me.as_str()) {
                        let deadline = call_deadline(Instant::now(), &timing, Some(right));
                        match bounded(leases.get(LEADER_LEASE), deadline, &mut release).await {
                            Called::Released => break,
                            Called::Answered(Ok(fresh)) => {
                                observed = Observed::note(observed.as_ref(), &fresh, Instant::now());
                                if observed.as_ref().and_then(Observed::holder) != Some(me.as_str()) {
                                    lose("another identity took it", &mut renewed);
                                }
                            }
                            Called::Answered(Err(_)) | Called::TimedOut => {}
                        }
                    }
                    if Instant::now() < right {
                        continue;
                    }
                }
                () = tokio::time::sleep_until(due) => {}
            }
            if Instant::now() >= right {
                lose("no renewal within its validity", &mut renewed);
                continue;
            }
        } else {
            // Not leading: read the Lease afresh and decide.
            let deadline = call_deadline(Instant::now(), &timing, None);
            let lease = match bounded(read_or_create(&leases), deadline, &mut release).await {
                Called::Released => break,
                Called::Answered(Ok(lease)) => lease,
                Called::Answered(Err(e)) => {
                    tracing::warn!(error = %e, "leader election: reading the Lease failed");
                    pause = timing.retry;
                    continue;
                }
                Called::TimedOut => {
                    unanswered("reading");
                    pause = timing.retry;
                    continue;
                }
            };
            observed = Observed::note(observed.as_ref(), &lease, Instant::now());
            let Some(seen) = observed.clone() else {
                pause = timing.retry;
                continue;
            };
            if let Next::Wait(left) = decide(&seen, &me, Instant::now()) {
                // Another holds it, which is not a conflict of ours.
                conflicts = 0;
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
        let right = renewed.map(|sent| sent + timing.valid_for);
        let seen = match observed.clone() {
            Some(seen) => seen,
            // Only a leader gets here without a version (a write of it conflicted): read it again.
            None => {
                let deadline = call_deadline(Instant::now(), &timing, right);
                match bounded(leases.get(LEADER_LEASE), deadline, &mut release).await {
                    Called::Released => break,
                    Called::Answered(Ok(fresh)) => {
                        observed = Observed::note(None, &fresh, Instant::now());
                        match observed.clone() {
                            Some(seen) if seen.holder() == Some(me.as_str()) => seen,
                            _ => {
                                lose("another identity took it", &mut renewed);
                                continue;
                            }
                        }
                    }
                    Called::Answered(Err(e)) => {
                        tracing::warn!(error = %e, "leader election: reading the Lease failed");
                        pause = timing.retry;
                        continue;
                    }
                    Called::TimedOut => {
                        unanswered("reading");
                        pause = timing.retry;
                        continue;
                    }
                }
            }
        };
        let sent = Instant::now();
        let spec = claim(&seen, &me, &timing, jiff::Timestamp::now());
        let deadline = call_deadline(sent, &timing, right);
        match bounded(write(&leases, &seen, &spec), deadline, &mut release).await {
            Called::Released => break 'elect,
            Called::Answered(Ok(lease)) => {
                conflicts = 0;
                observed = Observed::note(None, &lease, Instant::now());
                fence.renewed(sent, timing.valid_for);
                if renewed.replace(sent).is_none() {
                    tracing::info!(leading = true, identity = %me, "leader election: this replica holds the Lease");
                    let _ = leading.send(true);
                }
            }
            Called::Answered(Err(kube::Error::Api(s))) if s.code == 409 || s.code == 422 => {
                // It changed since we read it: read it again before the next try (a leader keeps its term
                // only while the fresh record still names it), at once the first time, then after a pause.
                conflicts = conflicts.saturating_add(1);
                election.conflicts.inc();
                pause = conflict_pause(conflicts, &timing, crate::reconciler::requeue::jitter());
                if conflicts > 1 {
                    tracing::warn!(code = s.code, conflicts, retry_in = ?pause, reason = %s.message,
                        "leader election: the Lease write was refused again as a conflict; backing off");
                } else {
                    tracing::info!(code = s.code, reason = %s.message,
                        "leader election: the Lease changed since it was read; reading it again");
                }
                observed = None;
            }
            Called::Answered(Err(e)) => {
                tracing::warn!(error = %e, "leader election: taking or renewing the Lease failed");
                pause = timing.retry;
            }
            Called::TimedOut => {
                // A leader's request ends with its right at the latest: the check at the top ends the term.
                unanswered("taking or renewing");
                pause = timing.retry;
            }
        }
    }
    // Told to stop. While leading with the right still valid: stop writing, wait for the writes in flight
    // (they end with the right at the latest), then hand the Lease over within what is left of the right.
    if let Some(sent) = renewed {
        let right = sent + timing.valid_for;
        fence.shut_now();
        let _ = leading.send(false);
        let waited = tokio::time::timeout_at(right.into(), fence.writes_done()).await;
        match (observed.as_ref(), waited) {
            (Some(seen), Ok(())) if Instant::now() < right => {
                let free = released(seen, jiff::Timestamp::now());
                let deadline = call_deadline(Instant::now(), &timing, Some(right));
                // One request: a shutdown must not wait on an API server that does not answer (the Lease
                // expires by itself).
                match tokio::time::timeout_at(deadline.into(), write(&leases, seen, &free)).await {
                    Ok(Ok(_)) => tracing::info!("lease released"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "releasing the lease failed; it expires by itself"),
                    Err(_) => tracing::warn!("releasing the lease took too long; it expires by itself"),
                }
            }
            _ => tracing::info!("the right to write ended before the release; the lease expires by itself"),
        }
    }
}

/// Wait until `until`, or until `release`: whether released.
async fn wait_or_release_until(release: &mut oneshot::Receiver<()>, until: Instant) -> bool {
    tokio::select! {
        _ = release => true,
        () = tokio::time::sleep_until(until.into()) => false,
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
            (t.lease, t.valid_for, t.renew_every, t.retry, t.call),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(5),
                Duration::from_secs(1),
                Duration::from_secs(5)
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

    #[test]
    fn a_request_gets_a_third_of_the_lease_and_a_leaders_never_outlasts_its_right() {
        let t = Timing::new(Duration::from_secs(15));
        let now = Instant::now();
        assert_eq!(
            call_deadline(now, &t, None),
            now + Duration::from_secs(5),
            "a follower's"
        );
        let far = now + Duration::from_secs(9);
        assert_eq!(
            call_deadline(now, &t, Some(far)),
            now + Duration::from_secs(5),
            "a leader's, with its right ending later"
        );
        let near = now + Duration::from_millis(1_200);
        assert_eq!(
            call_deadline(now, &t, Some(near)),
            near,
            "no later than the right's end"
        );
        let past = now - Duration::from_millis(1);
        assert_eq!(
            call_deadline(now, &t, Some(past)),
            past,
            "a right already over: at once"
        );
    }

    #[test]
    fn conflicts_are_retried_at_once_then_after_growing_jittered_pauses() {
        let t = Timing::new(Duration::from_secs(15));
        assert_eq!(
            conflict_pause(1, &t, 0.9),
            Duration::ZERO,
            "the first: read again at once"
        );
        let pauses: Vec<Duration> = (2..=7).map(|n| conflict_pause(n, &t, 0.0)).collect();
        assert_eq!(
            pauses,
            [1, 2, 4, 5, 5, 5].map(Duration::from_secs),
            "doubling from the retry pause up to a third of the Lease"
        );
        assert_eq!(
            conflict_pause(3, &t, 0.5),
            Duration::from_secs(3),
            "stretched by the jitter"
        );
        assert_eq!(
            conflict_pause(u32::MAX, &t, 0.999_999).as_secs(),
            9,
            "never more than twice the cap"
        );
        // Under a conflict that lasts, at most one read and one write per pause: with a 4 s Lease (as the
        // tests run) that is under two requests a second.
        let short = Timing::new(Duration::from_secs(4));
        let lasting = conflict_pause(10, &short, 0.0);
        assert!(lasting >= Duration::from_millis(1_333), "{lasting:?}");
        assert!(2.0 / lasting.as_secs_f64() < 2.0);
    }

    #[test]
    fn a_release_is_client_gos_it_keeps_the_count_of_transitions() {
        let mut held = Observed::note(None, &lease("7", Some("me"), 15), Instant::now()).unwrap();
        held.spec.acquire_time = Some(MicroTime(jiff::Timestamp::UNIX_EPOCH));
        let now = jiff::Timestamp::now();
        let free = released(&held, now);
        assert_eq!(free.holder_identity.as_deref(), Some(""), "no holder");
        assert_eq!(free.lease_duration_seconds, Some(1));
        assert_eq!(free.lease_transitions, Some(3), "kept");
        assert_eq!(free.acquire_time, Some(MicroTime(now)));
        assert_eq!(free.renew_time, Some(MicroTime(now)));
        let seen = Observed::note(
            None,
            &Lease {
                spec: Some(free),
                ..lease("8", None, 1)
            },
            Instant::now(),
        )
        .unwrap();
        assert_eq!(
            decide(&seen, "them", Instant::now()),
            Next::Take,
            "taken at once by anyone"
        );
        let taken = claim(&seen, "them", &Timing::new(Duration::from_secs(15)), now);
        assert_eq!(taken.lease_transitions, Some(4), "the next holder counts on from it");
    }
}
