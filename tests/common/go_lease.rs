//! The Go BTP Manager's Pod as the tests play it: its leader election, as controller-runtime runs client-go's
//! LeaseLock for it (`--leader-elect`, Lease `ec023d38.kyma-project.io`, the defaults: LeaseDuration 15 s,
//! RenewDeadline 10 s, RetryPeriod 2 s; no release on shutdown). Every RetryPeriod it GETs the Lease and, when
//! the Lease is its own, free, or unchanged for its `leaseDurationSeconds` since it last saw the record change
//! (measured on its own clock), PUTs the whole Lease back with itself as holder (POST when there is none). A
//! leader whose renewals fail for RenewDeadline gives up (the Go process exits). Its identity is the Pod's
//! name, `_` and a random suffix, as `os.Hostname()` plus a UUID; its requests say the `User-Agent` of
//! controller-runtime's leader-election client.
//!
//! It runs with the client it is given: the Go install's ServiceAccount (the embedded server's user of that
//! name, or a token of it), so the Go install's RBAC decides whether it may. It stops, without releasing the
//! Lease, when its Pod would be deleted ([`GoLeader::stop`], or the kubelet stand-in's SIGTERM).
#![allow(dead_code)]

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The Lease both managers compete for.
pub const LEASE: &str = "ec023d38.kyma-project.io";
/// client-go's defaults as controller-runtime sets them.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// The `User-Agent` of the Go manager's leader-election requests (client-go's default for a binary named
/// `manager`, with controller-runtime's suffix).
pub const USER_AGENT: &str = "manager/v0.0.0 (linux/amd64) kubernetes/$Format/leader-election";

/// What the played Go manager has done.
#[derive(Clone, Debug, Default)]
pub struct GoRecord {
    /// Renewals (and the acquire) that succeeded, with when they were sent.
    pub renewed: Vec<Instant>,
    /// Lease writes the API server refused: (code, message).
    pub refused: Vec<(u16, String)>,
    /// Whether it gave up leading (renewals failed for RenewDeadline).
    pub lost: bool,
    /// When it stopped (its Pod deleted).
    pub stopped: Option<Instant>,
}

/// The played Go manager; stops (without releasing the Lease) when dropped.
pub struct GoLeader {
    pub identity: String,
    record: Arc<Mutex<GoRecord>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl GoLeader {
    /// Start it for the Pod `pod` in `namespace`, with `client` (the Go install's ServiceAccount).
    pub fn start(client: kube::Client, namespace: &str, pod: &str) -> Self {
        let identity = format!("{pod}_{}", uuid_like());
        let record = Arc::new(Mutex::new(GoRecord::default()));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let leases: Api<Lease> = Api::namespaced(client, namespace);
        let task = tokio::spawn(run(leases, identity.clone(), record.clone(), stopped));
        Self {
            identity,
            record,
            stop,
            task,
        }
    }

    /// What it did so far.
    pub fn record(&self) -> GoRecord {
        super::sync_lock(&self.record).clone()
    }

    /// Its Pod is deleted: the process ends (SIGTERM) without releasing the Lease.
    pub async fn stop(&mut self) {
        self.stop.send_replace(true);
        let _ = (&mut self.task).await;
    }
}

impl Drop for GoLeader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A client of `config` whose requests carry the Go manager's leader-election `User-Agent`.
pub fn go_client(mut config: kube::Config) -> kube::Client {
    config
        .headers
        .push((http::header::USER_AGENT, http::HeaderValue::from_static(USER_AGENT)));
    kube::Client::try_from(config).expect("the Go manager's client")
}

fn uuid_like() -> String {
    let n: u128 = fastrand::u128(..);
    let h = format!("{n:032x}");
    format!("{}-{}-{}-{}-{}", &h[..8], &h[8..12], &h[12..16], &h[16..20], &h[20..])
}

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

async fn run(
    leases: Api<Lease>,
    me: String,
    record: Arc<Mutex<GoRecord>>,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) {
    // client-go's observed record and when it was first seen (its own clock).
    let mut observed: Option<(LeaseSpec, Instant)> = None;
    let mut leading_since_renewal: Option<Instant> = None;
    loop {
        if *stopped.borrow() {
            break;
        }
        let sent = Instant::now();
        let outcome = try_acquire_or_renew(&leases, &me, &mut observed, sent).await;
        {
            let mut r = super::sync_lock(&record);
            match outcome {
                Ok(true) => {
                    r.renewed.push(sent);
                    leading_since_renewal = Some(sent);
                }
                Ok(false) => {}
                Err(refused) => r.refused.push(refused),
            }
            if let Some(last) = leading_since_renewal {
                if last.elapsed() > RENEW_DEADLINE {
                    // controller-runtime: "leader election lost", and the process exits.
                    r.lost = true;
                    r.stopped = Some(Instant::now());
                    return;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RETRY_PERIOD) => {}
            _ = stopped.changed() => {}
        }
    }
    super::sync_lock(&record).stopped = Some(Instant::now());
}

/// One round of client-go's `tryAcquireOrRenew`: whether this identity holds the Lease afterwards. A write
/// the API server refused is returned as (code, message).
async fn try_acquire_or_renew(
    leases: &Api<Lease>,
    me: &str,
    observed: &mut Option<(LeaseSpec, Instant)>,
    now: Instant,
) -> Result<bool, (u16, String)> {
    let fresh = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
        acquire_time: acquired.or_else(|| Some(now_micro())),
        renew_time: Some(now_micro()),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let current = match leases.get_opt(LEASE).await {
        Ok(current) => current,
        Err(e) => return Err(refusal(&e)),
    };
    let Some(mut lease) = current else {
        let lease = Lease {
            metadata: kube::core::ObjectMeta {
                name: Some(LEASE.into()),
                ..Default::default()
            },
            spec: Some(fresh(0, None)),
        };
        return match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(e) => Err(refusal(&e)),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    if observed.as_ref().map(|(s, _)| s) != Some(&spec) {
        *observed = Some((spec.clone(), now));
    }
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let duration = Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
    let since = observed.as_ref().map_or(now, |(_, t)| *t);
    if !holder.is_empty() && holder != me && since + duration > now {
        return Ok(false);
    }
    let transitions = spec.lease_transitions.unwrap_or(0);
    lease.spec = Some(if holder == me {
        fresh(transitions, spec.acquire_time.clone())
    } else {
        fresh(transitions + 1, None)
    });
    match leases.replace(LEASE, &PostParams::default(), &lease).await {
        Ok(stored) => {
            *observed = Some((stored.spec.unwrap_or_default(), now));
            Ok(true)
        }
        Err(e) => Err(refusal(&e)),
    }
}

fn refusal(e: &kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.message.clone()),
        other => (0, other.to_string()),
    }
}
