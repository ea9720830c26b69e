//! Test support (the `testing` feature): fault injection and the request log.

use crate::error::ApiError;
use crate::request::RequestRecord;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One injected-failure rule.
#[derive(Debug, Clone)]
pub struct FaultRule {
    /// Fraction of matching requests to fail (0.0..=1.0).
    pub fraction: f64,
    /// HTTP code: 500 (InternalError), 409 (Conflict), 429 (TooManyRequests) or any other.
    pub code: u16,
    /// Only requests with this verb (`get`, `list`, `watch`, `create`, `update`, `patch`,
    /// `delete`, `deletecollection`); None = all.
    pub verb: Option<String>,
    /// Only requests for this resource plural (e.g. `configmaps`); None = all.
    pub resource: Option<String>,
    /// Only requests of this user (as the request log names them, e.g. the name given to
    /// `RunningApiServer::client_as`); None = everyone's.
    pub user: Option<String>,
}

/// A simulated round trip: matching requests wait `latency` before they are handled, as on a real API server
/// (network, authentication, admission, etcd). The first matching rule applies; requests no rule matches are
/// answered at once.
#[derive(Debug, Clone)]
pub struct LatencyRule {
    /// How long a matching request waits before it is handled.
    pub latency: Duration,
    /// Only requests with this verb (as in [`FaultRule::verb`]); None = all.
    pub verb: Option<String>,
    /// Only requests for this resource plural (e.g. `customresourcedefinitions`); None = all.
    pub resource: Option<String>,
}

/// Requests held until the test releases them ([`FaultInjector::hold`]).
struct HoldRule {
    verb: Option<String>,
    resource: Option<String>,
    released: tokio::sync::watch::Receiver<bool>,
    waiting: Arc<AtomicUsize>,
}

/// Matching requests wait, unanswered, until this is released or dropped ([`FaultInjector::hold`]).
#[must_use = "dropping the hold releases its requests at once"]
pub struct Held {
    release: tokio::sync::watch::Sender<bool>,
    waiting: Arc<AtomicUsize>,
}

impl Held {
    /// How many requests wait for this hold now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Let the held requests (and later matching ones) through.
    pub fn release(self) {}
}

impl Drop for Held {
    fn drop(&mut self) {
        self.release.send_replace(true);
    }
}

/// One request counted as waiting for a hold while this lives (also when its connection goes away).
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn new(count: Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(count)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

struct FaultState {
    rules: Vec<FaultRule>,
    /// Requests held until released.
    holds: Vec<HoldRule>,
    /// Simulated round trips (see [`FaultInjector::add_latency`]).
    latency: Vec<LatencyRule>,
    /// Draws which requests fail and which watch events cut (seedable: see [`FaultInjector::seed`]).
    rng: fastrand::Rng,
    /// Cut every watch stream after this many events.
    cut_after: Option<usize>,
    /// Probability per event of cutting a watch stream.
    cut_probability: f64,
    /// The `Retry-After` (seconds) of injected 429s and 503s (None: 1 s for a 429, none for a 503).
    retry_after: Option<u64>,
}

impl Default for FaultState {
    fn default() -> Self {
        Self {
            rules: Vec::new(),
            holds: Vec::new(),
            latency: Vec::new(),
            rng: fastrand::Rng::new(),
            cut_after: None,
            cut_probability: 0.0,
            retry_after: None,
        }
    }
}

/// Handle for injecting faults into a running server. Cheap to clone.
#[derive(Clone, Default)]
pub struct FaultInjector {
    state: Arc<Mutex<FaultState>>,
}

impl FaultInjector {
    fn with<R>(&self, f: impl FnOnce(&mut FaultState) -> R) -> R {
        match self.state.lock() {
            Ok(mut g) => f(&mut g),
            Err(p) => f(&mut p.into_inner()),
        }
    }
    /// Adds a failure rule.
    pub fn add(&self, rule: FaultRule) {
        self.with(|s| s.rules.push(rule));
    }
    /// Fails `fraction` of requests with `code`, optionally only for one verb / resource.
    pub fn fail(&self, fraction: f64, code: u16, verb: Option<&str>, resource: Option<&str>) {
        self.add(FaultRule {
            fraction,
            code,
            verb: verb.map(str::to_string),
            resource: resource.map(str::to_string),
            user: None,
        });
    }
    /// Draw the faults from a generator seeded with `seed` (a replayable sequence of draws; which request
    /// meets which draw still depends on the order requests arrive in).
    pub fn seed(&self, seed: u64) {
        self.with(|s| s.rng = fastrand::Rng::with_seed(seed));
    }
    /// Ends every watch stream after `n` delivered events (None disables).
    pub fn cut_watches_after(&self, n: Option<usize>) {
        self.with(|s| s.cut_after = n);
    }
    /// Cuts watch streams at random with this per-event probability.
    pub fn cut_watches_randomly(&self, probability: f64) {
        self.with(|s| s.cut_probability = probability);
    }
    /// Injected 429s and 503s ask the client to wait `seconds` (`Retry-After`, and `retryAfterSeconds` in
    /// the Status details, as a real API server sends them); None: 1 s for a 429, nothing for a 503.
    pub fn set_retry_after(&self, seconds: Option<u64>) {
        self.with(|s| s.retry_after = seconds);
    }
    /// Adds a simulated round trip (see [`LatencyRule`]); rules added earlier take precedence. Kept by
    /// [`FaultInjector::clear`]; [`FaultInjector::clear_latency`] removes them.
    pub fn add_latency(&self, rule: LatencyRule) {
        self.with(|s| s.latency.push(rule));
    }
    /// Every request waits `latency`, except those an earlier rule gives another (a shorthand for
    /// [`FaultInjector::add_latency`] without a verb or resource).
    pub fn latency(&self, latency: Duration) {
        self.add_latency(LatencyRule {
            latency,
            verb: None,
            resource: None,
        });
    }
    /// Requests with `verb` for `resource` (None: any) wait, unanswered, until the returned [`Held`] is
    /// released: a write held in flight for as long as a test needs, rather than for a guessed time.
    pub fn hold(&self, verb: Option<&str>, resource: Option<&str>) -> Held {
        let (release, released) = tokio::sync::watch::channel(false);
        let waiting = Arc::new(AtomicUsize::new(0));
        self.with(|s| {
            s.holds.retain(|h| !*h.released.borrow());
            s.holds.push(HoldRule {
                verb: verb.map(str::to_string),
                resource: resource.map(str::to_string),
                released,
                waiting: waiting.clone(),
            });
        });
        Held { release, waiting }
    }

    /// Removes every latency rule: requests are answered at once again.
    pub fn clear_latency(&self) {
        self.with(|s| s.latency.clear());
    }
    /// Removes all rules, watch cutting and the `Retry-After` (the generator keeps its state; latency rules
    /// stay).
    pub fn clear(&self) {
        self.with(|s| {
            s.rules.clear();
            s.cut_after = None;
            s.cut_probability = 0.0;
            s.retry_after = None;
        });
    }

    /// The `Retry-After` (seconds) of an injected failure with `code`, if any.
    pub(crate) fn retry_after(&self, code: u16) -> Option<u64> {
        self.with(|s| match code {
            429 => Some(s.retry_after.unwrap_or(1)),
            503 => s.retry_after,
            _ => None,
        })
    }

    /// Code to fail this request with, if any.
    pub(crate) fn check(&self, verb: &str, resource: &str, user: &str) -> Option<u16> {
        self.with(|s| {
            let FaultState { rules, rng, .. } = s;
            for r in rules.iter() {
                if r.verb.as_deref().is_some_and(|v| v != verb)
                    || r.resource.as_deref().is_some_and(|x| x != resource)
                    || r.user.as_deref().is_some_and(|u| u != user)
                {
                    continue;
                }
                if r.fraction >= 1.0 || rng.f64() < r.fraction {
                    return Some(r.code);
                }
            }
            None
        })
    }

    /// How long this request waits before it is handled (zero when no latency rule matches).
    pub(crate) fn delay(&self, verb: &str, resource: &str) -> Duration {
        self.with(|s| {
            s.latency
                .iter()
                .find(|r| {
                    r.verb.as_deref().is_none_or(|v| v == verb) && r.resource.as_deref().is_none_or(|x| x == resource)
                })
                .map_or(Duration::ZERO, |r| r.latency)
        })
    }

    /// Before a request is handled: waits its simulated round trip, then answers it with an injected failure
    /// if a rule says so (with `Retry-After` for 429s and 503s as configured).
    pub(crate) async fn intercept(&self, verb: &str, resource: &str, user: &str) -> Option<Response> {
        let holds: Vec<_> = self.with(|s| {
            s.holds
                .iter()
                .filter(|h| {
                    h.verb.as_deref().is_none_or(|v| v == verb) && h.resource.as_deref().is_none_or(|x| x == resource)
                })
                .map(|h| (h.released.clone(), h.waiting.clone()))
                .collect()
        });
        for (mut released, waiting) in holds {
            let _waiting = Waiting::new(waiting);
            // Released, or its sender gone (released too).
            let _ = released.wait_for(|r| *r).await;
        }
        let delay = self.delay(verb, resource);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let code = self.check(verb, resource, user)?;
        let retry_after = self.retry_after(code);
        let mut error = fault_error(code);
        if let Some(secs) = retry_after {
            error = error.with_details(json!({ "retryAfterSeconds": secs }));
        }
        let mut r = error.into_response();
        if let Some(secs) = retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        Some(r)
    }

    /// Whether a watch that has sent `sent` events should be cut now.
    pub(crate) fn should_cut(&self, sent: usize) -> bool {
        self.with(|s| {
            s.cut_after.is_some_and(|n| sent >= n) || (s.cut_probability > 0.0 && s.rng.f64() < s.cut_probability)
        })
    }
}

fn fault_error(code: u16) -> ApiError {
    match code {
        409 => ApiError::new(409, "Conflict", "injected fault: conflict"),
        429 => ApiError::new(429, "TooManyRequests", "injected fault: too many requests"),
        503 => ApiError::new(503, "ServiceUnavailable", "injected fault: service unavailable"),
        504 => ApiError::new(504, "Timeout", "injected fault: timeout"),
        500 => ApiError::internal("injected fault"),
        c => ApiError::new(c, "InternalError", "injected fault"),
    }
}

/// The log of every request the server answered. Cheap to clone.
#[derive(Clone, Default)]
pub struct RequestLog {
    entries: Arc<Mutex<Vec<RequestRecord>>>,
}

impl RequestLog {
    pub(crate) fn push(&self, r: RequestRecord) {
        if let Ok(mut g) = self.entries.lock() {
            g.push(r);
        }
    }
    /// All records so far.
    pub fn entries(&self) -> Vec<RequestRecord> {
        self.entries.lock().map(|g| g.clone()).unwrap_or_default()
    }
    /// How many records there are.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|g| g.len()).unwrap_or_default()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The records after the first `skip` (for following the log as it grows).
    pub fn since(&self, skip: usize) -> Vec<RequestRecord> {
        self.entries
            .lock()
            .map(|g| g.get(skip..).map(<[RequestRecord]>::to_vec).unwrap_or_default())
            .unwrap_or_default()
    }
    /// Records matching a predicate.
    pub fn filter(&self, f: impl Fn(&RequestRecord) -> bool) -> Vec<RequestRecord> {
        self.entries().into_iter().filter(|r| f(r)).collect()
    }
    pub fn clear(&self) {
        if let Ok(mut g) = self.entries.lock() {
            g.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_matching_latency_rule_applies() {
        let faults = FaultInjector::default();
        assert_eq!(faults.delay("get", "configmaps"), Duration::ZERO);
        faults.add_latency(LatencyRule {
            latency: Duration::from_millis(40),
            verb: Some("patch".into()),
            resource: Some("customresourcedefinitions".into()),
        });
        faults.latency(Duration::from_millis(15));
        faults.latency(Duration::from_millis(99));
        assert_eq!(
            faults.delay("patch", "customresourcedefinitions"),
            Duration::from_millis(40)
        );
        assert_eq!(
            faults.delay("get", "customresourcedefinitions"),
            Duration::from_millis(15)
        );
        assert_eq!(faults.delay("get", "configmaps"), Duration::from_millis(15));
        faults.clear();
        assert_eq!(faults.delay("get", "configmaps"), Duration::from_millis(15));
        faults.clear_latency();
        assert_eq!(faults.delay("patch", "customresourcedefinitions"), Duration::ZERO);
    }
}
