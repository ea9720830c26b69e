//! The one retry layer of the reconciler's API calls: a budget per call, transient failures retried
//! (docs/behaviour.md#retries-and-budgets). Below everything that calls the API, and imports none of it.

use std::time::Duration;

/// Whether a failure is worth retrying at once: the server was busy or failed internally, or the
/// connection broke. Conflicts, refusals and invalid requests are not.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// How long one API call of a pass may take, its retries and their pauses included
/// (docs/behaviour.md#retries-and-budgets). The manager's client does not retry by itself ([`client_config`]):
/// this is the one retry layer.
pub const CALL_BUDGET: Duration = Duration::from_secs(10);
/// How many times a transient failure is retried within one call.
pub const CALL_RETRIES: u32 = 3;
/// The first pause before a retry (then doubling: 50, 100, 200 ms).
pub const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(50);

/// The manager's client configuration: `config` without kube's own retry layer (which would retry a 429,
/// 503 or 504 up to 15 times, waiting out any `Retry-After`: minutes for one call). [`retrying`] is the
/// one retry layer, with one budget per call.
pub fn client_config(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

/// The pause before the next try of a call whose `attempt`th retry (0 for the first) is due, after a
/// transient failure that asked to wait `retry_after` (a `Retry-After`), with `remaining` of the call's
/// budget left; None to give up now (retries used up, or the wait would outlast the budget: the pass then
/// fails and is retried with its own backoff).
pub fn retry_pause(attempt: u32, retry_after: Option<Duration>, remaining: Duration) -> Option<Duration> {
    if attempt >= CALL_RETRIES {
        return None;
    }
    let pause = FIRST_RETRY_PAUSE.saturating_mul(1 << attempt.min(16));
    let pause = retry_after.map_or(pause, |wait| wait.max(pause));
    (pause < remaining).then_some(pause)
}

/// The wait a failure asks for (`retryAfterSeconds` in the API server's Status, as it sends with a 429).
fn retry_after(e: &kube::Error) -> Option<Duration> {
    match e {
        kube::Error::Api(s) => s
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(u64::from(s))),
        _ => None,
    }
}

/// A call that ran out of [`CALL_BUDGET`].
#[derive(Debug, thiserror::Error)]
#[error("no answer within the call's budget of {0:?}")]
pub struct OutOfTime(pub Duration);

/// Run an API call within [`CALL_BUDGET`], retrying transient failures ([`is_transient`]) as
/// [`retry_pause`] decides: a pass that removes dozens of objects must not fail, and start over, for one
/// blip, and no call may hang a pass (an attempt that does not answer within the budget is abandoned).
pub async fn retrying<T, F, Fut>(call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    retrying_within(CALL_BUDGET, call).await
}

/// [`retrying`] with another budget.
pub async fn retrying_within<T, F, Fut>(budget: Duration, mut call: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    let deadline = tokio::time::Instant::now() + budget;
    let mut attempt = 0;
    loop {
        let result = match tokio::time::timeout_at(deadline, call()).await {
            Ok(result) => result,
            Err(_) => return Err(kube::Error::Service(Box::new(OutOfTime(budget)))),
        };
        match result {
            Err(e) if is_transient(&e) => {
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                match retry_pause(attempt, retry_after(&e), remaining) {
                    Some(pause) => {
                        attempt += 1;
                        tokio::time::sleep(pause).await;
                    }
                    None => return Err(e),
                }
            }
            result => return result,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_pause_50_100_200_ms_then_give_up() {
        let plenty = CALL_BUDGET;
        assert_eq!(retry_pause(0, None, plenty), Some(Duration::from_millis(50)));
        assert_eq!(retry_pause(1, None, plenty), Some(Duration::from_millis(100)));
        assert_eq!(retry_pause(2, None, plenty), Some(Duration::from_millis(200)));
        assert_eq!(retry_pause(3, None, plenty), None);
        assert_eq!(retry_pause(u32::MAX, None, plenty), None);
    }

    #[test]
    fn retry_after_is_honoured_only_within_the_budget() {
        let s = Duration::from_secs;
        assert_eq!(retry_pause(0, Some(s(1)), s(10)), Some(s(1)));
        assert_eq!(
            retry_pause(0, Some(s(30)), s(10)),
            None,
            "waiting 30 s would outlast the call"
        );
        assert_eq!(retry_pause(0, Some(s(30)), s(60)), Some(s(30)));
        assert_eq!(
            retry_pause(0, None, Duration::from_millis(40)),
            None,
            "not even the first pause fits"
        );
        assert_eq!(
            retry_pause(2, Some(Duration::from_millis(10)), s(10)),
            Some(Duration::from_millis(200)),
            "a shorter Retry-After does not shorten our pause"
        );
    }

    #[test]
    fn the_manager_client_does_not_retry_by_itself() {
        let config = client_config(kube::Config::new(http::Uri::from_static("https://127.0.0.1")));
        assert!(!config.default_retry);
    }
}
