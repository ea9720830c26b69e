//! When each request of a client started and ended, for counting sequential round trips: a tower layer on
//! the manager's `kube::Client` records every request but watches (a watch's answer streams for as long
//! as it lasts; only that it began is recorded). The end is when the answer's headers arrived, which is when the caller sees its result
//! for everything this project sends.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

/// One request: when it was sent, when its answer came, and `METHOD path`.
#[derive(Clone, Debug)]
pub struct Span {
    pub start: Instant,
    pub end: Instant,
    pub what: String,
}

/// The recorded requests. Cheap to clone; also the layer that records them.
#[derive(Clone, Default)]
pub struct Timeline {
    spans: Arc<Mutex<Vec<Span>>>,
    /// Watches whose answer has begun (`METHOD path`).
    watches: Arc<Mutex<Vec<String>>>,
    /// When each request still waiting for its answer was sent (by a number of its own).
    in_flight: Arc<Mutex<std::collections::BTreeMap<u64, Instant>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

impl Timeline {
    /// The requests that started at or after `from` and ended by `to`.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<Span> {
        let spans = self.spans.lock().map(|s| s.clone()).unwrap_or_default();
        spans.into_iter().filter(|s| s.start >= from && s.end <= to).collect()
    }

    /// Whether every request sent before `t` has been answered (watches aside).
    pub fn answered_before(&self, t: Instant) -> bool {
        self.in_flight.lock().is_ok_and(|f| f.values().all(|&start| start >= t))
    }

    /// Whether a watch whose path contains `fragment` has been answered (is established).
    pub fn watching(&self, fragment: &str) -> bool {
        self.watches
            .lock()
            .is_ok_and(|w| w.iter().any(|what| what.contains(fragment)))
    }

    /// A client of `config` whose requests are recorded here.
    pub fn client(&self, config: kube::Config) -> kube::Client {
        kube::client::ClientBuilder::try_from(config)
            .expect("a client stack")
            .with_layer(self)
            .build()
    }
}

/// The longest chain of requests in which each one started after the one before it had ended: how many
/// round trips one after another `spans` took, however many ran side by side.
pub fn sequential_round_trips(spans: &[Span]) -> usize {
    let mut spans: Vec<&Span> = spans.iter().collect();
    spans.sort_by_key(|s| s.start);
    let mut depth: Vec<usize> = Vec::with_capacity(spans.len());
    for (i, s) in spans.iter().enumerate() {
        let before = (0..i).filter(|&j| spans[j].end <= s.start).map(|j| depth[j]).max();
        depth.push(before.unwrap_or(0) + 1);
    }
    depth.into_iter().max().unwrap_or(0)
}

impl<S> tower::Layer<S> for Timeline {
    type Service = Timed<S>;
    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            inner,
            timeline: self.clone(),
        }
    }
}

/// The service [`Timeline`] wraps around the client's stack.
#[derive(Clone)]
pub struct Timed<S> {
    inner: S,
    timeline: Timeline,
}

impl<S, B> tower::Service<http::Request<B>> for Timed<S>
where
    S: tower::Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let query = req.uri().query().unwrap_or_default();
        let watch = query.split('&').any(|p| p == "watch=true" || p == "watch=1");
        let what = format!("{} {}", req.method(), req.uri().path());
        let start = Instant::now();
        let id = self.timeline.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !watch {
            if let Ok(mut f) = self.timeline.in_flight.lock() {
                f.insert(id, start);
            }
        }
        let answer = self.inner.call(req);
        let timeline = self.timeline.clone();
        Box::pin(async move {
            let result = answer.await;
            if let Ok(mut f) = timeline.in_flight.lock() {
                f.remove(&id);
            }
            if watch {
                if let Ok(mut watches) = timeline.watches.lock() {
                    watches.push(what);
                }
            } else {
                let span = Span {
                    start,
                    end: Instant::now(),
                    what,
                };
                if let Ok(mut spans) = timeline.spans.lock() {
                    spans.push(span);
                }
            }
            result
        })
    }
}
