//! When to check, as a pure decision: a new input (another Secret version, another CA bundle) is checked at
//! once; the same input again after `CredentialsCheckInterval`, and never twice within [`MIN_SPACING`]; an
//! interval of zero or a Secret that cannot be checked gives a verdict without a request.

use super::{Input, Verdict};
use std::time::{Duration, Instant};

/// The shortest time between two checks of the same input.
pub const MIN_SPACING: Duration = Duration::from_secs(60);

/// What the checker does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Nothing to do until the input changes (no input yet).
    Idle,
    /// Report this verdict without a request, then wait for the input to change.
    Report(Verdict),
    /// Ask the token endpoint now.
    CheckNow,
    /// Ask it at this instant, unless the input changes first.
    At(Instant),
}

/// The next step for `input`, given the input the last check was made for and when.
pub fn next(input: Option<&Input>, last: Option<&(Input, Instant)>, now: Instant) -> Next {
    let Some(input) = input else {
        return Next::Idle;
    };
    if input.interval.is_zero() {
        return Next::Report(Verdict::disabled());
    }
    if let Err(verdict) = &input.target {
        return Next::Report(verdict.clone());
    }
    match last {
        Some((checked, at)) if checked.same_check(input) => {
            let due = *at + input.interval.max(MIN_SPACING);
            if now >= due {
                Next::CheckNow
            } else {
                Next::At(due)
            }
        }
        _ => Next::CheckNow,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials_check::Target;

    fn input(secret: &str, interval: Duration) -> Input {
        Input {
            target: Ok(Target {
                token_url: "https://auth.example.test/oauth/token".into(),
                client_id: "id".into(),
                client_secret: secret.into(),
            }),
            interval,
            ca_bundle: String::new(),
        }
    }

    #[test]
    fn a_new_input_is_checked_at_once_and_the_same_one_after_the_interval() {
        let now = Instant::now();
        let hour = Duration::from_secs(3600);
        let a = input("a", hour);
        assert_eq!(next(None, None, now), Next::Idle);
        assert_eq!(next(Some(&a), None, now), Next::CheckNow);
        let last = (a.clone(), now);
        assert_eq!(next(Some(&a), Some(&last), now), Next::At(now + hour));
        assert_eq!(next(Some(&a), Some(&last), now + hour), Next::CheckNow);
        assert_eq!(
            next(Some(&input("b", hour)), Some(&last), now),
            Next::CheckNow,
            "a Secret change"
        );
        let bundle = Input {
            ca_bundle: "PEM".into(),
            ..a.clone()
        };
        assert_eq!(
            next(Some(&bundle), Some(&last), now),
            Next::CheckNow,
            "a CA bundle change"
        );
    }

    #[test]
    fn the_same_input_is_never_checked_twice_within_a_minute() {
        let now = Instant::now();
        let a = input("a", Duration::from_secs(1));
        let last = (a.clone(), now);
        assert_eq!(next(Some(&a), Some(&last), now), Next::At(now + MIN_SPACING));
        // Another interval is not another check.
        let b = input("a", Duration::from_secs(2));
        assert_eq!(next(Some(&b), Some(&last), now), Next::At(now + MIN_SPACING));
    }

    #[test]
    fn zero_disables_and_an_unusable_secret_is_not_checked() {
        let now = Instant::now();
        assert_eq!(
            next(Some(&input("a", Duration::ZERO)), None, now),
            Next::Report(Verdict::disabled())
        );
        let none = Input {
            target: Err(Verdict::no_secret()),
            ..input("a", Duration::from_secs(3600))
        };
        assert_eq!(next(Some(&none), None, now), Next::Report(Verdict::no_secret()));
    }
}
