//! How the manager's watches retry after a failed request or a broken stream.
//!
//! kube's default (client-go's convention: 800 ms doubling to 30 s, reset only after 120 s without a
//! failure) suits clients that watch large collections by the thousand. The manager's watches are few and
//! small (single objects by name, label-selected objects in one namespace, metadata only), and what they
//! bring is the CR's truth: under an API server that fails now and then, the 120 s reset let every failure
//! lengthen the next pause until changes waited up to 30 s to be seen. Here a pause starts at 250 ms,
//! doubles to at most 5 s, and starts over with the first event that arrives.

use kube::runtime::utils::Backoff;
use std::time::Duration;

/// See the module documentation.
#[derive(Debug, Default, Clone)]
pub struct WatchBackoff {
    failures: u32,
}

/// The first pause.
const FIRST: Duration = Duration::from_millis(250);
/// The longest pause.
const MAX: Duration = Duration::from_secs(5);

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let delay = FIRST.saturating_mul(1 << self.failures.min(5));
        self.failures = self.failures.saturating_add(1);
        Some(delay.min(MAX))
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_from_250_ms_to_5_s_and_start_over_after_a_reset() {
        let mut b = WatchBackoff::default();
        let pauses: Vec<u64> = b.by_ref().take(8).map(|d| d.as_millis() as u64).collect();
        assert_eq!(pauses, [250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
        b.reset();
        assert_eq!(b.next(), Some(FIRST));
    }
}
