//! WATCH: streamed JSON lines, resume from history, bookmarks, timeouts, selectors.
//!
//! A watch is a plain stream polled by the connection task (no spawned task), so it is
//! dropped as soon as the client goes away.

use crate::context::{Ctx, State, Target};
use crate::error::{ApiError, ApiResult};
use crate::render::{present, selectors, table, table_columns, wants_table};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::EventType;
use axum::body::Body;
use axum::http::{header, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

struct W {
    st: Arc<State>,
    t: Target,
    name: Option<String>,
    ls: LabelSelector,
    fs: FieldSelector,
    table: bool,
    pending: VecDeque<Bytes>,
    cursor: u64,
    rx: tokio::sync::watch::Receiver<u64>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    deadline: Instant,
    bookmarks: bool,
    next_bookmark: Instant,
    sent: usize,
    done_after_pending: bool,
}

impl Drop for W {
    fn drop(&mut self) {
        self.st.active_watches.fetch_sub(1, Ordering::SeqCst);
    }
}

impl W {
    fn matches(&self, obj: &Value) -> bool {
        if let Some(n) = &self.name {
            if crate::util::name_of(obj) != n {
                return false;
            }
        }
        self.ls.matches(obj) && self.fs.matches(obj)
    }

    fn line(&self, typ: &str, obj: &Value) -> Bytes {
        let o = if typ == "ERROR" || typ == "BOOKMARK" {
            obj.clone()
        } else if self.table {
            let cols = table_columns(&self.t);
            let mut t = table(&[present(&self.t, obj)], json!({}), &cols);
            t["metadata"] = json!({"resourceVersion": crate::util::rv_of(obj).to_string()});
            t
        } else {
            present(&self.t, obj)
        };
        let mut v = serde_json::to_vec(&json!({"type": typ, "object": o})).unwrap_or_default();
        v.push(b'\n');
        Bytes::from(v)
    }

    fn bookmark(&self, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": self.cursor.to_string()});
        if self.st.version == crate::config::KubeVersion::V1_24 {
            // 1.24 encoded the empty creationTimestamp of a bookmark's object as null
            meta["creationTimestamp"] = Value::Null;
        }
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let o = json!({
            "kind": self.t.def.kind, "apiVersion": self.t.def.api_version(&self.t.version),
            "metadata": meta,
        });
        self.line("BOOKMARK", &o)
    }

    fn gone(&mut self, oldest: u64) {
        let st = ApiError::gone(format!(
            "too old resource version: {} ({})",
            self.cursor,
            oldest.saturating_sub(1)
        ))
        .status();
        let l = self.line("ERROR", &st);
        self.pending.push_back(l);
        self.done_after_pending = true;
    }

    /// Moves history events after the cursor into `pending`, in batches, until one of them is for this watch
    /// or the history is read to its end: a batch of nothing but other resources' events must not leave the
    /// rest unread until the next change wakes the watch.
    fn pull(&mut self) {
        const BATCH: usize = 1024;
        loop {
            let read = self.pull_batch(BATCH);
            if read < BATCH || !self.pending.is_empty() || self.done_after_pending {
                return;
            }
        }
    }

    /// One batch of [`W::pull`]: how many history events it read.
    fn pull_batch(&mut self, max: usize) -> usize {
        match self.st.store.events_since(self.cursor, max) {
            Err(oldest) => {
                self.gone(oldest);
                0
            }
            Ok(evs) => {
                let read = evs.len();
                let gr = self.t.gr();
                for e in evs {
                    self.cursor = e.rv;
                    if e.gr != gr {
                        continue;
                    }
                    if let Some(ns) = &self.t.namespace {
                        if e.ns != *ns {
                            continue;
                        }
                    }
                    let now = self.matches(&e.object);
                    let typ = match e.typ {
                        EventType::Modified => {
                            let before = e.prev.as_ref().is_some_and(|p| self.matches(p));
                            match (before, now) {
                                (true, true) => "MODIFIED",
                                (false, true) => "ADDED",
                                (true, false) => "DELETED",
                                (false, false) => continue,
                            }
                        }
                        t => {
                            if !now {
                                continue;
                            }
                            t.as_str()
                        }
                    };
                    // An object that leaves the selector is sent as DELETED with its previous content (at the
                    // new resourceVersion), as kube-apiserver's watch cache does.
                    let l = match (typ, e.typ, &e.prev) {
                        ("DELETED", EventType::Modified, Some(prev)) => {
                            let mut old = (**prev).clone();
                            if let (Some(m), Some(rv)) = (
                                crate::util::meta_mut(&mut old),
                                e.object.pointer("/metadata/resourceVersion").cloned(),
                            ) {
                                m.insert("resourceVersion".into(), rv);
                            }
                            self.line(typ, &old)
                        }
                        _ => self.line(typ, &e.object),
                    };
                    self.pending.push_back(l);
                }
                read
            }
        }
    }
}

async fn step(mut w: W) -> Option<(Result<Bytes, Infallible>, W)> {
    loop {
        if let Some(b) = w.pending.pop_front() {
            // A cut watch (test support: `FaultInjector::cut_watches_after`).
            #[cfg(feature = "testing")]
            if w.st.faults.should_cut(w.sent) {
                return None;
            }
            w.sent += 1;
            return Some((Ok(b), w));
        }
        if w.done_after_pending {
            return None;
        }
        w.rx.borrow_and_update();
        w.pull();
        // The resource is no longer served (its CRD was deleted): the watch ends, as kube-apiserver's does
        // when it tears down a custom resource's storage; what was already pulled is still sent.
        let (group, plural) = w.t.gr();
        if !w.done_after_pending && w.st.registry.get(&group, &plural).is_none() {
            w.done_after_pending = true;
        }
        if !w.pending.is_empty() || w.done_after_pending {
            continue;
        }
        let bookmark_at = w.next_bookmark;
        let bookmarks = w.bookmarks;
        tokio::select! {
            r = w.rx.changed() => {
                if r.is_err() {
                    return None;
                }
            }
            _ = tokio::time::sleep_until(w.deadline) => return None,
            _ = tokio::time::sleep_until(bookmark_at), if bookmarks => {
                let b = w.bookmark(false);
                w.pending.push_back(b);
                w.next_bookmark = Instant::now() + w.st.bookmark_interval;
            }
            _ = w.shutdown.changed() => return None,
        }
    }
}

/// When the first BOOKMARK of a watch is due: like kube-apiserver's watch cache, 2 s before the watch's
/// deadline when that is still ahead (a client learns a fresh resourceVersion before it must reconnect), or
/// after the bookmark interval, whichever comes first.
fn first_bookmark(now: Instant, deadline: Instant, interval: Duration) -> Instant {
    let periodic = now + interval;
    match deadline.checked_sub(Duration::from_secs(2)) {
        Some(before_end) if before_end > now + Duration::from_millis(1500) => before_end.min(periodic),
        _ => periodic,
    }
}

pub(crate) fn watch(ctx: &mut Ctx) -> ApiResult<Response> {
    let (ls, fs) = selectors(&ctx.q)?;
    let timeout = match ctx.q.get("timeoutSeconds").filter(|s| !s.is_empty()) {
        Some(s) => Duration::from_secs(
            s.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {s:?}")))?,
        ),
        None => Duration::from_secs(1800),
    };
    let rv_param = ctx.q.get("resourceVersion").cloned().unwrap_or_default();
    let send_initial = crate::util::query_bool(&ctx.q, "sendInitialEvents");
    let bookmarks = crate::util::query_bool(&ctx.q, "allowWatchBookmarks");
    if ctx.st.version == crate::config::KubeVersion::V1_24
        && ctx.q.get("resourceVersionMatch").is_some_and(|m| !m.is_empty())
    {
        // 1.24 has no streaming lists: resourceVersionMatch is refused on a watch
        let mut causes = vec![crate::schema::Cause {
            field: "resourceVersionMatch".into(),
            reason: "FieldValueForbidden",
            message: "Forbidden: resourceVersionMatch is forbidden for watch".into(),
        }];
        if ctx.q.get("resourceVersion").is_none_or(|v| v.is_empty()) {
            causes.push(crate::schema::Cause {
                field: "resourceVersionMatch".into(),
                reason: "FieldValueForbidden",
                message: "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
            });
        }
        let parts: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let message = if parts.len() == 1 {
            format!("ListOptions.meta.k8s.io \"\" is invalid: {}", parts[0])
        } else {
            format!("ListOptions.meta.k8s.io \"\" is invalid: [{}]", parts.join(", "))
        };
        return Err(ApiError::new(422, "Invalid", message).with_details(json!({
            "group": "meta.k8s.io", "kind": "ListOptions",
            "causes": causes.iter().map(crate::schema::Cause::to_json).collect::<Vec<_>>(),
        })));
    }
    if send_initial && !bookmarks {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "ListOptions",
            "",
            "allowWatchBookmarks",
            "Required value: allowWatchBookmarks must be set to true when sendInitialEvents is set",
        ));
    }
    let rx = ctx.st.store.subscribe();
    ctx.st.active_watches.fetch_add(1, Ordering::SeqCst);
    let mut w = W {
        st: ctx.st.clone(),
        t: ctx.t.clone(),
        name: ctx.t.name.clone(),
        ls,
        fs,
        table: wants_table(&ctx.headers),
        pending: VecDeque::new(),
        cursor: 0,
        rx,
        shutdown: ctx.st.shutdown.clone(),
        deadline: Instant::now() + timeout,
        bookmarks,
        next_bookmark: first_bookmark(Instant::now(), Instant::now() + timeout, ctx.st.bookmark_interval),
        sent: 0,
        done_after_pending: false,
    };
    if rv_param.is_empty() || rv_param == "0" || send_initial {
        let (items, rv) = ctx.st.store.list(&ctx.t.gr(), ctx.t.namespace.as_deref());
        w.cursor = rv;
        let lines: Vec<Bytes> = items
            .iter()
            .filter(|o| w.matches(o))
            .map(|o| w.line("ADDED", o))
            .collect();
        w.pending.extend(lines);
        // Newer servers end the initial events of any watch that allows bookmarks with the
        // `k8s.io/initial-events-end` bookmark (1.24 only for streaming lists, which it does not have).
        if send_initial || (bookmarks && ctx.st.version != crate::config::KubeVersion::V1_24) {
            let b = w.bookmark(true);
            w.pending.push_back(b);
        }
    } else {
        w.cursor = rv_param
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv_param:?}")))?;
        if let Err(oldest) = ctx.st.store.events_since(w.cursor, 0) {
            w.gone(oldest);
        }
    }
    let stream = futures::stream::unfold(w, step);
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .map_err(|e| ApiError::internal(e.to_string()))
}
