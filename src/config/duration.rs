//! Go durations (`1h30m`, `10s`, `500ms`), as the Go manager's flags and ConfigMap keys write them.

use std::time::Duration;

/// Parse a Go duration (`1h30m`, `10s`, `500ms`, `0`). Negative values are refused.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    if s.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return None;
        }
        let number: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * factor;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_go_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("87600h"), Some(Duration::from_secs(87600 * 3600)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "5x", "h", "-5s", "1.2.3s"] {
            assert_eq!(parse_go_duration(bad), None, "{bad}");
        }
    }
}

/// Property tests (issue 12, part 2): generated Go durations round-trip, and no text makes the parser
/// panic. `PROPTEST_CASES` sets the number of cases (default here: 256).
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(crate::proptest_config(256))]

        #[test]
        fn go_durations_round_trip(
            hours in prop::option::of(0u64..200_000),
            minutes in prop::option::of(0u64..600),
            seconds in prop::option::of(0u64..6000),
            millis in prop::option::of(0u64..100_000),
        ) {
            let mut text = String::new();
            let mut expected = Duration::ZERO;
            for (n, unit, scale) in [(hours, "h", 3_600_000_u64), (minutes, "m", 60_000), (seconds, "s", 1000), (millis, "ms", 1)] {
                if let Some(n) = n {
                    text.push_str(&format!("{n}{unit}"));
                    expected += Duration::from_millis(n * scale);
                }
            }
            prop_assume!(!text.is_empty());
            let parsed = parse_go_duration(&text).expect("a valid Go duration parses");
            if millis.is_none() {
                prop_assert_eq!(parsed, expected, "{}", text);
            } else {
                // Sub-second units go through f64: exact to well under a microsecond.
                let error = parsed.abs_diff(expected);
                prop_assert!(error < Duration::from_micros(1), "{text}: {parsed:?} vs {expected:?}");
            }
            // Surrounding whitespace is ignored, a sign is refused.
            prop_assert_eq!(parse_go_duration(&format!(" {text}\n")), Some(parsed));
            prop_assert_eq!(parse_go_duration(&format!("-{text}")), None);
        }

        #[test]
        fn parse_go_duration_never_panics(text in ".{0,32}") {
            let _ = parse_go_duration(&text);
        }
    }
}
