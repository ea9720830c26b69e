//! Whether a store's watch runs (docs/behaviour.md#the-read-path): a store answers only while it can know
//! what changed. A watch refused for good (403 after an RBAC change, 404 after its CRD went away), or one
//! that keeps failing for longer than the limit (one Lease duration), leaves its store answering from a copy
//! that nothing updates: such a store answers [`super::Read::NotKnown`] (reads go to the API server) until
//! it has listed again, and its watch is started anew so that it does ([`kept_watch`]).
//!
//! [`WatchHealth`] is the pure rule; [`kept_watch`] feeds a store and keeps its health.

use crate::watch_backoff::WatchBackoff;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt as _};
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::utils::Backoff as _;
use kube::runtime::{watcher, WatchStreamExt as _};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Failures no further apart than this are one run of failures: twice the longest pause of the watches'
/// backoff ([`WatchBackoff`], 5 s), so that a watch that keeps failing is seen as failing all along.
pub const FAILURE_RUN_GAP: Duration = Duration::from_secs(10);

/// What a store's watch has shown of itself. Pure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchHealth {
    /// Refused for good, or failing too long: the store does not answer until it has listed again.
    stale: bool,
    /// The first and the last failure of the current run of failures.
    failing: Option<(Instant, Instant)>,
}

impl WatchHealth {
    /// The watch failed at `now`, with the API server's `code` when it answered one. Returns whether the
    /// store has just gone stale (its watch should be started anew): a 403 or 404, or a run of failures
    /// that has lasted `limit`.
    pub fn failed(&mut self, code: Option<u16>, now: Instant, limit: Duration) -> bool {
        let first = match self.failing {
            Some((first, last)) if now.saturating_duration_since(last) <= FAILURE_RUN_GAP => first,
            _ => now,
        };
        self.failing = Some((first, now));
        let for_good = matches!(code, Some(403 | 404));
        let too_long = now.saturating_duration_since(first) >= limit;
        let went = !self.stale && (for_good || too_long);
        self.stale |= for_good || too_long;
        went
    }

    /// The watch delivered a change: it runs.
    pub fn delivered(&mut self) {
        self.failing = None;
    }

    /// A list has completed: the store holds what the API server holds, and answers again.
    pub fn listed(&mut self) {
        self.stale = false;
        self.failing = None;
    }

    /// Whether the store may answer at `now`: not stale, and not in a run of failures that has lasted
    /// `limit` and goes on.
    pub fn answers(&self, now: Instant, limit: Duration) -> bool {
        let failing_too_long = self.failing.is_some_and(|(first, last)| {
            now.saturating_duration_since(first) >= limit && now.saturating_duration_since(last) <= FAILURE_RUN_GAP
        });
        !self.stale && !failing_too_long
    }
}

/// A store's [`WatchHealth`], shared by its watch (which writes it) and its reads, with the limit of a run
/// of failures. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Health {
    state: Arc<Mutex<WatchHealth>>,
    limit: Duration,
}

impl Health {
    /// A store's health: a run of failures of `limit` makes it stale.
    pub fn new(limit: Duration) -> Self {
        Self {
            state: Arc::default(),
            limit,
        }
    }

    /// Whether the store may answer now.
    pub fn answers(&self) -> bool {
        crate::sync::lock(&self.state).answers(Instant::now(), self.limit)
    }

    pub(crate) fn failed(&self, code: Option<u16>) -> bool {
        crate::sync::lock(&self.state).failed(code, Instant::now(), self.limit)
    }

    fn delivered(&self) {
        crate::sync::lock(&self.state).delivered();
    }

    pub(crate) fn listed(&self) {
        crate::sync::lock(&self.state).listed();
    }
}

/// The HTTP status a watch failure carries, if the API server answered one.
pub fn failure_code(e: &watcher::Error) -> Option<u16> {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
        watcher::Error::WatchError(s) => Some(s.code),
        _ => None,
    }
}

/// What a stale store's watch does next.
struct Watching<K: kube::Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    events: BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>,
    health: Health,
    /// Pauses before a watch is started anew; reset by a change delivered (so that a list that succeeds
    /// and a watch that is refused again do not loop at the speed of the API server).
    restarts: WatchBackoff,
}

fn events<K>(api: &Api<K>, config: &watcher::Config) -> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    watcher::watcher(api.clone(), config.clone())
        .backoff(WatchBackoff::default())
        // Nothing reads an object's managedFields (the apply compares fields, the view resource versions), and
        // they are a large part of what server-side apply leaves on an object (an operand CRD's mirror its
        // whole schema): not kept, and not copied by every read of the store.
        .modify(|object| object.meta_mut().managed_fields = None)
        .boxed()
}

/// One item of [`kept_watch`]: the watcher's event or failure, and whether the store has just gone stale.
pub struct Watched<K> {
    pub event: Result<watcher::Event<K>, watcher::Error>,
    /// The store has just gone stale: what it missed may have to be read from the API server now.
    pub went_stale: bool,
}

/// The watch of `api` seen through `config`, feeding `writer` (as kube's `reflect` does) and keeping
/// `health`: when the store goes stale, the watch is started anew (after a pause), so that it lists again;
/// the store answers again after that list. Yields every event after its store took it.
pub fn kept_watch<K>(
    api: Api<K>,
    config: watcher::Config,
    writer: Writer<K>,
    health: Health,
) -> impl Stream<Item = Watched<K>> + Send + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let state = Watching {
        events: events(&api, &config),
        api,
        config,
        writer,
        health,
        restarts: WatchBackoff::default(),
    };
    futures::stream::unfold(state, |mut st| async move {
        let event = st.events.next().await?;
        let mut went_stale = false;
        match &event {
            Ok(e) => {
                st.writer.apply_watcher_event(e);
                match e {
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) => {
                        st.health.delivered();
                        st.restarts.reset();
                    }
                    watcher::Event::InitDone => st.health.listed(),
                    watcher::Event::Init | watcher::Event::InitApply(_) => {}
                }
            }
            Err(e) => {
                if st.health.failed(failure_code(e)) {
                    went_stale = true;
                    let pause = st.restarts.next().unwrap_or(Duration::from_secs(5));
                    tracing::info!(error = %e, restart_in = ?pause,
                        "a store's watch cannot run: reads go to the API server until it has listed again");
                    tokio::time::sleep(pause).await;
                    st.events = events(&st.api, &st.config);
                }
            }
        }
        Some((Watched { event, went_stale }, st))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(15);

    #[test]
    fn a_watch_refused_for_good_leaves_its_store_unanswering_until_it_has_listed_again() {
        let t0 = Instant::now();
        for code in [403, 404] {
            let mut h = WatchHealth::default();
            assert!(h.answers(t0, LIMIT));
            assert!(h.failed(Some(code), t0, LIMIT), "{code}: stale at once");
            assert!(!h.failed(Some(code), t0, LIMIT), "said once");
            assert!(!h.answers(t0 + Duration::from_secs(60), LIMIT));
            h.delivered();
            assert!(!h.answers(t0, LIMIT), "{code}: a change delivered is not a list");
            h.listed();
            assert!(h.answers(t0, LIMIT), "{code}: listed again");
        }
    }

    #[test]
    fn failures_that_last_the_limit_make_the_store_stale_brief_ones_do_not() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut h = WatchHealth::default();
        for s in [0, 1, 3, 8] {
            assert!(!h.failed(Some(500), at(s), LIMIT), "{s}");
            assert!(h.answers(at(s), LIMIT));
        }
        assert!(h.answers(at(14), LIMIT), "a run of 8 s, still under the limit");
        assert!(!h.answers(at(16), LIMIT), "the run goes on past the limit");
        assert!(h.failed(None, at(16), LIMIT), "the next failure makes it stale");
        assert!(!h.answers(at(100), LIMIT));
        h.listed();
        assert!(h.answers(at(100), LIMIT));

        // Failures far apart are separate runs; a change delivered ends a run.
        let mut h = WatchHealth::default();
        assert!(!h.failed(None, at(0), LIMIT));
        assert!(!h.failed(None, at(11), LIMIT), "11 s without a failure: a new run");
        assert!(h.answers(at(20), LIMIT), "that run started at 11 s");
        assert!(
            h.answers(at(40), LIMIT),
            "and has ended (no failure for longer than the gap)"
        );
        assert!(!h.failed(Some(410), at(40), LIMIT));
        h.delivered();
        assert!(!h.failed(None, at(50), LIMIT), "a new run after the delivery");
        assert!(h.answers(at(50), LIMIT));
    }

    #[test]
    fn the_code_of_a_failure_is_the_api_servers() {
        let status = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("refused", "Forbidden")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert_eq!(failure_code(&watcher::Error::WatchStartFailed(status(403))), Some(403));
        assert_eq!(failure_code(&watcher::Error::InitialListFailed(status(404))), Some(404));
        assert_eq!(failure_code(&watcher::Error::NoResourceVersion), None);
    }
}
