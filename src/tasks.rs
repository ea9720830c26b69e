//! Task plumbing shared by the reconciler and the manager's wiring: a spawned task that ends with its
//! owner ([`AbortOnDrop`]), the `stop` sender of a start in progress ([`StopOnError`]), futures that resolve
//! on a stop signal, and the boxed future the long-running entry points return ([`BoxedFuture`]). It imports
//! nothing of this crate, so that both can use it.

use std::future::Future;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A boxed `Send` future. The long-running entry points (`app::run`, `local::run`, `reconciler::run`)
/// return one so that their code is compiled once, in this library: an `async fn` is compiled again into
/// every binary, test and benchmark that awaits it.
pub type BoxedFuture<O> = std::pin::Pin<Box<dyn std::future::Future<Output = O> + Send>>;

/// A spawned task aborted when this guard is dropped (a dropped `JoinHandle` would leave it running).
pub struct AbortOnDrop<T>(Option<JoinHandle<T>>);

impl<T> AbortOnDrop<T> {
    pub fn new(task: JoinHandle<T>) -> Self {
        Self(Some(task))
    }

    /// The handle, to await (still aborted when the guard is dropped).
    pub fn handle(&mut self) -> &mut JoinHandle<T> {
        self.0
            .as_mut()
            .expect("the handle is only taken by disarm, which consumes the guard")
    }

    /// The handle, no longer aborted on drop.
    pub fn disarm(mut self) -> JoinHandle<T> {
        self.0
            .take()
            .expect("the handle is only taken here, which consumes the guard")
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Spawn `task`, aborted when the returned guard is dropped.
pub fn spawn_guarded<T: Send + 'static>(task: impl Future<Output = T> + Send + 'static) -> AbortOnDrop<T> {
    AbortOnDrop::new(tokio::spawn(task))
}

/// The `stop` sender of a start in progress: set if the start fails half-way (what was started ends).
pub struct StopOnError(Option<watch::Sender<bool>>);

impl StopOnError {
    pub fn new(stop: watch::Sender<bool>) -> Self {
        Self(Some(stop))
    }

    /// The start succeeded: the sender, no longer set on drop.
    pub fn disarm(mut self) -> watch::Sender<bool> {
        match self.0.take() {
            Some(stop) => stop,
            None => watch::channel(false).0,
        }
    }
}

impl Drop for StopOnError {
    fn drop(&mut self) {
        if let Some(stop) = &self.0 {
            let _ = stop.send(true);
        }
    }
}

/// A future that resolves once `rx` turns true (or its sender is gone).
pub async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Run `task` until `stop` resolves.
pub async fn until(stop: impl Future<Output = ()>, task: impl Future<Output = ()>) {
    tokio::select! {
        () = stop => {}
        () = task => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task that holds `held` until it ends (or is aborted) and otherwise never ends.
    async fn holding(held: tokio::sync::oneshot::Sender<()>) {
        let _held = held;
        std::future::pending::<()>().await;
    }

    #[tokio::test]
    async fn a_dropped_guard_aborts_its_task_and_a_disarmed_one_does_not() {
        let (held, released) = tokio::sync::oneshot::channel();
        drop(spawn_guarded(holding(held)));
        assert!(released.await.is_err(), "the aborted task dropped what it held");

        let (held, released) = tokio::sync::oneshot::channel();
        let mut guard = AbortOnDrop::new(tokio::spawn(holding(held)));
        assert!(!guard.handle().is_finished());
        drop(guard);
        assert!(released.await.is_err(), "aborted even after its handle was borrowed");

        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let kept = AbortOnDrop::new(tokio::spawn(async move { rx.await.unwrap_or(0) })).disarm();
        tx.send(7).unwrap();
        assert_eq!(kept.await.unwrap(), 7, "a disarmed task runs to its end");
    }

    #[tokio::test]
    async fn a_failed_start_sets_stop_and_a_successful_one_hands_the_sender_over() {
        let (tx, rx) = watch::channel(false);
        drop(StopOnError::new(tx));
        assert!(*rx.borrow(), "dropped before disarm: stop is set");

        let (tx, rx) = watch::channel(false);
        let stop = StopOnError::new(tx).disarm();
        assert!(!*rx.borrow(), "disarmed: stop is not set");
        stop.send(true).unwrap();
        stopped(rx).await;
    }

    #[tokio::test]
    async fn until_ends_with_the_first_of_stop_and_task() {
        let (tx, rx) = watch::channel(false);
        tx.send(true).unwrap();
        until(stopped(rx), std::future::pending()).await;
        until(std::future::pending(), async {}).await;
    }
}
