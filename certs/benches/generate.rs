//! `cargo bench -p btp-certs`: time to generate a CA + leaf pair per key algorithm.
//!
//! Iterations: 20 for ECDSA, 3 for RSA-2048/3072, 2 for RSA-4096; `BTP_BENCH_ITERS=N` overrides
//! all of them. With `BTP_BENCH_SUMMARY` set, the medians are also appended to that file for
//! `scripts/bench`'s table.

#[path = "../../benches/support/summary.rs"]
mod summary;

use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use btp_certs::{generate_ca, generate_leaf, CaSpec, KeyAlgorithm, LeafSpec};

fn default_iters(alg: KeyAlgorithm) -> usize {
    match alg {
        KeyAlgorithm::EcdsaP256 => 20,
        KeyAlgorithm::Rsa2048 | KeyAlgorithm::Rsa3072 => 3,
        KeyAlgorithm::Rsa4096 => 2,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() -> ExitCode {
    let override_iters = match std::env::var("BTP_BENCH_ITERS") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                eprintln!("BTP_BENCH_ITERS must be a positive integer, got {v:?}");
                return ExitCode::FAILURE;
            }
        },
        Err(_) => None,
    };
    // `cargo bench -- <filter>` passes extra arguments; a non-flag argument filters algorithms.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut summary = summary::Summary::from_env("certificates");

    for alg in KeyAlgorithm::ALL {
        if filter.as_deref().is_some_and(|f| !alg.as_str().contains(f)) {
            continue;
        }
        let n = override_iters.unwrap_or_else(|| default_iters(alg));
        let ca_spec = CaSpec {
            common_name: Some("btp-manager-bench-ca".into()),
            validity: Duration::from_secs(10 * 365 * 24 * 3600),
            key: alg,
        };
        let leaf_spec = LeafSpec {
            common_name: Some("btp-manager-webhook-service.kyma-system.svc".into()),
            dns_names: vec![
                "btp-manager-webhook-service".into(),
                "btp-manager-webhook-service.kyma-system.svc".into(),
            ],
            ip_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            validity: Duration::from_secs(365 * 24 * 3600),
            key: alg,
        };
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let start = Instant::now();
            let now = SystemTime::now();
            let pair =
                generate_ca(&ca_spec, now).and_then(|ca| generate_leaf(&ca, &leaf_spec, now).map(|leaf| (ca, leaf)));
            let elapsed = start.elapsed();
            match pair {
                Ok(pair) => {
                    std::hint::black_box(pair);
                }
                Err(e) => {
                    eprintln!("certs/generate {alg}: generation failed: {e}");
                    return ExitCode::FAILURE;
                }
            }
            samples.push(elapsed);
        }
        samples.sort_unstable();
        let median = if n % 2 == 1 {
            samples[n / 2]
        } else {
            (samples[n / 2 - 1] + samples[n / 2]) / 2
        };
        println!(
            "certs/generate {alg}: median {:.2} ms, min {:.2} ms, max {:.2} ms (n={n}) for a CA + leaf pair",
            ms(median),
            ms(samples[0]),
            ms(samples[n - 1]),
        );
        summary.figure(
            &format!("CA + leaf pair, {alg} (median of {n})"),
            &format!("{:.2} ms", ms(median)),
        );
    }
    summary.exit_code()
}
