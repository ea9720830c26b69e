//! The admission webhook server as the manager runs it: where the API server reaches it, its serving
//! certificate (self-managed in a Secret, or from files), its configurations, and the Secret it guards.

use crate::config::Config;
use crate::first_writes::FirstWrites;
use crate::reconciler::{self, metrics::CertificateExpiry};
use crate::tasks::{stopped, until};
use crate::webhook_certs::WebhookCerts;
use anyhow::Context as _;
use btp_api::names;
use btp_webhooks::manifests::{Endpoint, WebhookManifests};
use btp_webhooks::metrics::WebhookMetrics;
use btp_webhooks::server::Limits;
use btp_webhooks::tls::{server_config, CertDir, SwappableCert};
use btp_webhooks::{KubeServiceCounter, RulesConfig, WebhookState};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How the webhook server is bound, reached and certified.
#[derive(Clone, Debug, PartialEq)]
pub struct WebhookOptions {
    /// Where to bind (`--webhook-bind-address`; port 0: a free port).
    pub bind: SocketAddr,
    /// How the API server reaches it (see [`endpoint`]).
    pub reach: Reach,
    /// More names and addresses for the serving certificate (`--webhook-dns-name`, `--webhook-ip`).
    pub dns_names: Vec<String>,
    pub ips: Vec<IpAddr>,
    /// Serve the certificate in this directory instead of managing one (`--webhook-cert-dir`).
    pub cert_dir: Option<PathBuf>,
    /// The Secret of the self-managed certificate, in the manager's namespace (`--webhook-cert-secret`).
    pub cert_secret: String,
    /// The key type of the self-managed certificate.
    pub key_algorithm: btp_certs::KeyAlgorithm,
    /// How long a request body may take (`--webhook-body-timeout`).
    pub body_timeout: Duration,
    /// Connection limits and timeouts.
    pub limits: Limits,
}

/// How the API server reaches the webhook server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reach {
    /// As `run` decides: `url` (`--webhook-url`) if given; else, in a cluster, the manager's webhook
    /// Service; else `https://<bound address>` (loopback for an unspecified one). The certificate names the
    /// Service and the URL's host.
    Run { url: Option<String>, in_cluster: bool },
    /// As `local` has it: `https://<bound address>` (loopback for an unspecified one), the certificate for
    /// that address and `localhost`.
    Bound,
}

impl Reach {
    /// `run`'s, with whether this process runs in a cluster (`KUBERNETES_SERVICE_HOST`).
    pub fn run(url: Option<String>) -> Self {
        Reach::Run {
            url,
            in_cluster: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some(),
        }
    }
}

/// Where a client reaches a server bound to `bound`: loopback instead of an unspecified address.
pub fn reachable(bound: SocketAddr) -> SocketAddr {
    match bound.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), bound.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), bound.port()),
        _ => bound,
    }
}

/// Where the API server reaches our webhooks (bound to `bound`) and which names and addresses the serving
/// certificate needs; `namespace` is the manager's.
pub fn endpoint(namespace: &str, options: &WebhookOptions, bound: SocketAddr) -> (Endpoint, Vec<String>, Vec<IpAddr>) {
    let (url, in_cluster) = match &options.reach {
        Reach::Bound => {
            let addr = reachable(bound);
            let mut dns = vec!["localhost".to_string()];
            dns.extend(options.dns_names.iter().cloned());
            let mut ips = vec![addr.ip()];
            ips.extend(options.ips.iter().copied());
            return (Endpoint::Url(format!("https://{addr}")), dns, ips);
        }
        Reach::Run { url, in_cluster } => (url, *in_cluster),
    };
    let svc = format!("{}.{}.svc", names::webhook::SERVICE_NAME, namespace);
    let mut dns = vec![svc.clone(), format!("{svc}.cluster.local")];
    let mut ips = options.ips.clone();
    dns.extend(options.dns_names.iter().cloned());
    let url = match (url, in_cluster) {
        (Some(url), _) => Some(url.clone()),
        (None, true) => None,
        (None, false) => Some(format!("https://{}", reachable(bound))),
    };
    let endpoint = match url {
        None => Endpoint::Service {
            namespace: namespace.to_string(),
        },
        Some(url) => {
            let host = url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(|h| h.trim_matches(['[', ']']).to_string()));
            match host.as_deref().map(str::parse::<IpAddr>) {
                Some(Ok(ip)) => ips.push(ip),
                Some(Err(_)) => dns.extend(host),
                None => {}
            }
            Endpoint::Url(url)
        }
    };
    dns.sort();
    dns.dedup();
    ips.sort();
    ips.dedup();
    (endpoint, dns, ips)
}

/// Whether the API server takes `matchConditions` in webhook configurations, from `/version`.
pub async fn match_conditions_supported(client: &kube::Client) -> bool {
    match client.apiserver_version().await {
        Ok(v) => {
            let supported = btp_webhooks::manifests::supports_match_conditions(&v.major, &v.minor);
            if supported {
                tracing::info!(version = %v.git_version, "Kubernetes API server");
            } else {
                tracing::warn!(
                    version = %v.git_version,
                    "Kubernetes before 1.28: the webhook configurations are registered without matchConditions \
                     (every Secret CREATE/UPDATE in the chart namespace reaches the webhook, which ignores all but \
                     the required Secret); full function from 1.28 on"
                );
            }
            supported
        }
        Err(e) => {
            tracing::warn!(error = %e, "reading /version failed; assuming a current Kubernetes");
            true
        }
    }
}

/// The certificate to serve from the manager's own webhook certificate Secret, kept in step in the
/// background until `stop` (docs/behaviour.md#who-writes-what). A process that leads from its start (no
/// leader election) settles the Secret and publishes its CA bundle first; with leader election the server
/// starts with nothing to serve, and serves what the Secret holds as soon as it was issued, by the leader or
/// by a follower's first writes (not ready until then).
pub async fn managed_webhook_certificate(
    certs: WebhookCerts,
    leading: watch::Receiver<bool>,
    ready: crate::ops::Readiness,
    live: &crate::ops::Liveness,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Arc<SwappableCert>> {
    let cert = if *leading.borrow() {
        let stored = certs.settle().await.context("preparing the webhook certificates")?;
        let leaf = stored.leaf.as_ref().context("no serving certificate after settling")?;
        let cert = SwappableCert::from_pem(leaf.cert_pem.as_bytes(), leaf.key_pem.as_bytes())?;
        certs
            .publish(&stored, &cert)
            .await
            .context("publishing the webhook CA bundle")?;
        ready.set_admission(crate::webhook_certs::bundle_trusts(
            &stored.ca_bundle(),
            leaf.cert_pem.as_bytes(),
        ));
        cert
    } else {
        SwappableCert::pending()
    };
    let keeper = tokio::spawn(certs.run(cert.clone(), leading, ready, stopped(stop.clone()))).abort_handle();
    live.watch("the webhook certificate keeper", move || {
        !keeper.is_finished() || *stop.borrow()
    });
    Ok(cert)
}

/// What the webhook server needs from the rest of the manager.
pub struct Wiring<'a> {
    /// The manager's client.
    pub client: &'a kube::Client,
    /// The manager's namespace (its webhook Service and certificate Secret).
    pub namespace: &'a str,
    /// The reconciler's configuration from the flags (the Secret the webhooks guard; the runtime ConfigMap
    /// is read on top).
    pub flags: &'a Config,
    /// Whether the webhook configurations may carry `matchConditions`.
    pub match_conditions: bool,
    pub metrics: WebhookMetrics,
    /// The expiry gauge of the self-managed certificate.
    pub certificate_expiry: CertificateExpiry,
    /// Whether this replica leads (only the leader writes the certificate Secret and the configurations).
    pub leading: watch::Receiver<bool>,
    /// The first writes a follower may make, with leader election ([`crate::first_writes`]).
    pub first_writes: Option<FirstWrites>,
    /// Readiness: whether admission through this replica works.
    pub ready: crate::ops::Readiness,
    /// Liveness: the certificate keeper is watched.
    pub live: crate::ops::Liveness,
}

/// Bind, certify and register the webhook server, and serve it in the background until `stop`, draining
/// from `drain` on (the shutdown requested: every HTTP/2 connection told to go away at once, every HTTP/1.1
/// response closing its connection, docs/behaviour.md#shutdown); returns the bound address and the server's
/// task.
pub async fn start(
    options: &WebhookOptions,
    wiring: Wiring<'_>,
    (drain, stop): (&watch::Receiver<bool>, &watch::Receiver<bool>),
) -> anyhow::Result<(SocketAddr, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let Wiring {
        client,
        namespace,
        flags,
        match_conditions,
        metrics,
        certificate_expiry,
        leading,
        first_writes,
        ready,
        live,
    } = wiring;
    // Bound before the certificate is made, so that the endpoint names the port actually bound.
    let listener = tokio::net::TcpListener::bind(options.bind)
        .await
        .with_context(|| format!("binding the webhook server to {}", options.bind))?;
    let webhook_addr = listener
        .local_addr()
        .with_context(|| format!("binding the webhook server to {}", options.bind))?;
    let (endpoint, dns_names, ip_addresses) = endpoint(namespace, options, webhook_addr);
    let manifests = WebhookManifests {
        endpoint,
        secret_namespace: flags.chart_namespace.clone(),
        secret_name: flags.secret_name.clone(),
        ca_bundle: Vec::new(),
        match_conditions,
    };
    let cert: Arc<SwappableCert> = match &options.cert_dir {
        Some(dir) => {
            let files = CertDir::new(dir);
            let cert = files
                .load()
                .await
                .with_context(|| format!("loading webhook certificates from {}", dir.display()))?;
            let watch = files.watch(cert.clone(), Duration::from_secs(10));
            tokio::spawn(until(stopped(stop.clone()), watch));
            tracing::info!(dir = %dir.display(), "serving webhook certificates from files; caBundle is not managed");
            // The caBundle is someone else's: admission works as far as this replica can tell.
            ready.set_admission(true);
            cert
        }
        None => {
            let mut policy = btp_certs::rotation::Policy::new(dns_names, ip_addresses);
            policy.key = options.key_algorithm;
            let mut certs = WebhookCerts::new(client.clone(), namespace, &options.cert_secret, policy, manifests)
                .with_expiry_metrics(certificate_expiry);
            if let Some(first_writes) = first_writes {
                certs = certs.with_first_writes(first_writes);
            }
            managed_webhook_certificate(certs, leading, ready, &live, stop.clone()).await?
        }
    };

    // The Secret the webhook guards is the one the reconciler reads: flags, then the runtime ConfigMap.
    let effective = reconciler::controller::startup_config(client, flags).await;
    let rules = RulesConfig {
        secret_namespace: effective.chart_namespace,
        secret_name: effective.secret_name,
    };
    let state = WebhookState::new(rules, Arc::new(KubeServiceCounter::new(client.clone())))
        .with_metrics(metrics)
        .with_body_timeout(options.body_timeout);
    tracing::info!(address = %webhook_addr, "webhook server listening");
    let server = tokio::spawn(btp_webhooks::server::serve_draining(
        listener,
        server_config(cert)?,
        btp_webhooks::router(state),
        (options.limits.clone(), Arc::default()),
        stopped(drain.clone()),
        stopped(stop.clone()),
    ));
    Ok((webhook_addr, server))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(reach: Reach) -> WebhookOptions {
        WebhookOptions {
            bind: "0.0.0.0:9443".parse().unwrap(),
            reach,
            dns_names: Vec::new(),
            ips: Vec::new(),
            cert_dir: None,
            cert_secret: names::webhook::CERT_SECRET_NAME.into(),
            key_algorithm: btp_certs::KeyAlgorithm::default(),
            body_timeout: btp_webhooks::handlers::DEFAULT_BODY_TIMEOUT,
            limits: Limits::default(),
        }
    }

    fn svc_names(ns: &str) -> Vec<String> {
        let svc = format!("{}.{ns}.svc", names::webhook::SERVICE_NAME);
        vec![svc.clone(), format!("{svc}.cluster.local")]
    }

    #[test]
    fn in_a_cluster_run_is_reached_through_its_service() {
        let reach = Reach::Run {
            url: None,
            in_cluster: true,
        };
        let (at, dns, ips) = endpoint("team", &options(reach), "0.0.0.0:9443".parse().unwrap());
        assert_eq!(
            at,
            Endpoint::Service {
                namespace: "team".into()
            }
        );
        assert_eq!(dns, svc_names("team"));
        assert!(ips.is_empty());
    }

    #[test]
    fn outside_a_cluster_run_is_reached_at_the_bound_address() {
        let reach = Reach::Run {
            url: None,
            in_cluster: false,
        };
        let (at, dns, ips) = endpoint("kyma-system", &options(reach.clone()), "0.0.0.0:41234".parse().unwrap());
        assert_eq!(at, Endpoint::Url("https://127.0.0.1:41234".into()));
        assert_eq!(dns, svc_names("kyma-system"));
        assert_eq!(ips, vec![IpAddr::from(Ipv4Addr::LOCALHOST)]);
        // Bound to one address: reached there (127.0.0.1 would reach nothing).
        let (at, _, ips) = endpoint("kyma-system", &options(reach), "127.130.0.7:41234".parse().unwrap());
        assert_eq!(at, Endpoint::Url("https://127.130.0.7:41234".into()));
        assert_eq!(ips, vec![IpAddr::from([127, 130, 0, 7])]);
    }

    #[test]
    fn a_webhook_url_wins_and_its_host_is_certified() {
        for (url, host) in [
            ("https://webhooks.example.com:9443", "webhooks.example.com"),
            ("https://[fd00::1]:9443", "fd00::1"),
        ] {
            let mut opts = options(Reach::Run {
                url: Some(url.into()),
                in_cluster: true,
            });
            opts.dns_names = vec!["extra.example.com".into(), "webhooks.example.com".into()];
            opts.ips = vec!["10.0.0.1".parse().unwrap()];
            let (at, dns, ips) = endpoint("kyma-system", &opts, "0.0.0.0:9443".parse().unwrap());
            assert_eq!(at, Endpoint::Url(url.into()));
            assert!(dns.contains(&"extra.example.com".to_string()), "{dns:?}");
            assert!(dns.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates: {dns:?}");
            match host.parse::<IpAddr>() {
                Ok(ip) => assert_eq!(ips, vec!["10.0.0.1".parse().unwrap(), ip]),
                Err(_) => assert!(dns.contains(&host.to_string()), "{dns:?}"),
            }
        }
    }

    #[test]
    fn local_is_reached_at_the_address_it_bound() {
        let (at, dns, ips) = endpoint(
            "kyma-system",
            &options(Reach::Bound),
            "127.0.0.1:40001".parse().unwrap(),
        );
        assert_eq!(at, Endpoint::Url("https://127.0.0.1:40001".into()));
        assert_eq!(dns, vec!["localhost".to_string()]);
        assert_eq!(ips, vec![IpAddr::from(Ipv4Addr::LOCALHOST)]);
        let (at, _, ips) = endpoint("kyma-system", &options(Reach::Bound), "[::]:40002".parse().unwrap());
        assert_eq!(at, Endpoint::Url("https://[::1]:40002".into()));
        assert_eq!(ips, vec![IpAddr::from(Ipv6Addr::LOCALHOST)]);
    }

    #[test]
    fn an_unspecified_address_is_reached_on_loopback() {
        assert_eq!(reachable("0.0.0.0:1".parse().unwrap()), "127.0.0.1:1".parse().unwrap());
        assert_eq!(reachable("[::]:2".parse().unwrap()), "[::1]:2".parse().unwrap());
        assert_eq!(reachable("10.1.2.3:3".parse().unwrap()), "10.1.2.3:3".parse().unwrap());
    }
}
