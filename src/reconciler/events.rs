//! Publishing the manager's Events without holding up a pass.
//!
//! An Event is a record for people (`kubectl describe`), not a step of the pass, so a pass never waits for
//! one. Events are handed to one background task that publishes them one after another, in the order they
//! were given, each within one call's budget ([`super::cluster::retry::CALL_BUDGET`]); a failure is logged
//! and never fails the pass.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder, Reporter};
use std::sync::OnceLock;
use tokio::sync::mpsc;

/// Events waiting to be published at most; past that, new ones are dropped (and logged): a stuck API server
/// must not make the manager hold an unbounded queue. Passes publish at most a few Events each.
pub const QUEUE: usize = 256;

/// The manager's Event publisher (see the module documentation).
pub struct Events {
    recorder: Recorder,
    /// Started with the first Event (inside the runtime that publishes); ends once this publisher is dropped
    /// and the queue is drained.
    queue: OnceLock<mpsc::Sender<(Event, ObjectReference)>>,
}

impl Events {
    /// A publisher reporting as `btp-manager`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "btp-manager".into(),
                    instance: None,
                },
            ),
            queue: OnceLock::new(),
        }
    }

    /// Queue `event` on `reference`; it is published in the background, after the Events queued before it.
    /// Must be called within a Tokio runtime.
    pub fn publish(&self, event: Event, reference: ObjectReference) {
        let queue = self.queue.get_or_init(|| {
            let (tx, rx) = mpsc::channel(QUEUE);
            tokio::spawn(publish_in_order(self.recorder.clone(), rx));
            tx
        });
        if let Err(e) = queue.try_send((event, reference)) {
            let (event, _) = e.into_inner();
            tracing::warn!(reason = %event.reason, "the Event queue is full; an Event was dropped");
        }
    }
}

async fn publish_in_order(recorder: Recorder, mut queue: mpsc::Receiver<(Event, ObjectReference)>) {
    while let Some((event, reference)) = queue.recv().await {
        match tokio::time::timeout(super::cluster::retry::CALL_BUDGET, recorder.publish(&event, &reference)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, reason = %event.reason, "publishing an Event"),
            Err(_) => tracing::warn!(reason = %event.reason, "publishing an Event took too long; it was dropped"),
        }
    }
}
