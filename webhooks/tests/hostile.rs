//! Hostile clients of the webhook server (issue 12, part 4): old TLS and plain HTTP, a 100 MiB body,
//! 1,000 idle connections, the connection cap, slowloris (head and body), a client that never reads,
//! malformed HTTP/2.
//!
//! Each attack runs while good clients keep sending admission requests; the tests assert functional
//! properties with generous deadlines (good requests keep succeeding, the attacker is cut off within its
//! timeout, connection counts return to normal). The latency of good requests during each attack
//! (p50/p99) is measured by `BTP_BENCH_MODE=hostile cargo bench -p btp-webhooks --bench webhook`.

mod common;

use btp_webhooks::client::{Connection, Protocol};
use btp_webhooks::server::Limits;
use common::hostile::*;
use common::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Short timeouts so that the tests see them fire; the defaults are in `Limits::default()`.
fn test_limits() -> Limits {
    Limits {
        handshake_timeout: Duration::from_secs(1),
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(1),
        max_connections: 2000,
        ..Limits::default()
    }
}

async fn start(limits: Limits) -> TestServer {
    TestServer::start_with_limits(TestServer::default_state(), limits).await
}

/// Good clients: two HTTP/2 and two HTTP/1.1 keep-alive connections sending allowed reviews in a loop.
struct Load {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicUsize>,
    failures: Arc<Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

const LOAD_CONNECTIONS: usize = 4;

impl Load {
    async fn start(server: &TestServer) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicUsize::new(0));
        let failures = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..LOAD_CONNECTIONS {
            let protocol = if i % 2 == 0 { Protocol::Http2 } else { Protocol::Http1 };
            let mut conn = server.connect(protocol).await;
            let (stop, ok, failures) = (stop.clone(), ok.clone(), failures.clone());
            tasks.push(tokio::spawn(async move {
                let body = btp_review("CREATE", "kyma-system", "btpoperator", "uid-good").to_string();
                while !stop.load(Ordering::Relaxed) {
                    match conn.post_json("/validate", body.clone()).await {
                        Ok(r) if r.status == 200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(r) => failures.lock().unwrap().push(format!("status {}", r.status)),
                        Err(e) => {
                            failures.lock().unwrap().push(format!("{protocol:?}: {e}"));
                            return;
                        }
                    }
                }
            }));
        }
        let load = Self {
            stop,
            ok,
            failures,
            tasks,
        };
        load.progress(50).await;
        load
    }

    /// Wait until `n` more good requests succeeded.
    async fn progress(&self, n: usize) {
        let target = self.ok.load(Ordering::Relaxed) + n;
        let ok = self.ok.clone();
        wait_until(Duration::from_secs(20), "good requests progress", || {
            let ok = ok.clone();
            async move { ok.load(Ordering::Relaxed) >= target }
        })
        .await;
    }

    async fn finish(self) {
        self.progress(50).await;
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let failures = self.failures.lock().unwrap();
        assert!(failures.is_empty(), "good requests failed: {failures:?}");
    }
}

/// TLS alert `protocol_version`.
const PROTOCOL_VERSION: u8 = 70;

#[tokio::test]
async fn tls_below_1_2_and_plain_http_never_reach_http() {
    let server = start(test_limits()).await;
    let deadline = Duration::from_secs(5);
    // Control: the same hello with TLS 1.2 gets a ServerHello, so the refusals below are about the version.
    let control = send_raw(server.addr, &client_hello(0x0303, None), deadline).await;
    assert!(control.server_hello(), "TLS 1.2 hello not answered: {:?}", control);

    for (what, hello) in [
        ("TLS 1.1", client_hello(0x0302, None)),
        ("TLS 1.0", client_hello(0x0301, None)),
        (
            "supported_versions 1.1, 1.0",
            client_hello(0x0303, Some(&[0x0302, 0x0301])),
        ),
    ] {
        let reply = send_raw(server.addr, &hello, deadline).await;
        assert!(!reply.server_hello(), "{what}: got a ServerHello");
        assert_eq!(reply.alert(), Some(PROTOCOL_VERSION), "{what}: {:?}", reply);
        assert!(reply.closed, "{what}: connection left open");
    }

    let plain = send_raw(
        server.addr,
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        deadline,
    )
    .await;
    assert!(plain.closed, "plain HTTP: connection left open");
    assert!(
        !plain.bytes.windows(5).any(|w| w == b"HTTP/"),
        "plain HTTP was answered with HTTP: {:?}",
        String::from_utf8_lossy(&plain.bytes)
    );
    assert!(server.stats.handshake_failed() >= 4, "{:?}", server.stats);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mib_body_is_refused_with_413_before_it_is_read() {
    let server = start(test_limits()).await;
    let load = Load::start(&server).await;
    const TOTAL: u64 = 100 * 1024 * 1024;
    // Far below 100 MiB: the 3 MiB limit plus what loopback socket and TLS buffers hold.
    const READ_AT_MOST: u64 = 24 * 1024 * 1024;
    for declare_length in [true, false] {
        let result = big_body(server.addr, server.ca.cert_pem.as_bytes(), TOTAL, declare_length).await;
        assert_eq!(result.status, Some(413), "Content-Length declared: {declare_length}");
        assert!(
            result.written < READ_AT_MOST,
            "the server took {} bytes of the body (Content-Length declared: {declare_length})",
            result.written
        );
        load.progress(20).await;
    }
    load.finish().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_are_closed_and_good_requests_go_on() {
    let limits = test_limits();
    let server = start(limits.clone()).await;
    let load = Load::start(&server).await;
    let mut idle = idle_tcp(server.addr, 1000).await;
    let stats = server.stats.clone();
    wait_until(Duration::from_secs(10), "all idle connections accepted", || {
        let stats = stats.clone();
        async move { stats.accepted() >= 1000 + LOAD_CONNECTIONS as u64 }
    })
    .await;
    assert!(stats.open() <= 1000 + LOAD_CONNECTIONS, "open: {}", stats.open());
    load.progress(100).await;
    // The handshake timeout closes them all.
    wait_until(
        limits.handshake_timeout + Duration::from_secs(10),
        "idle connections closed",
        || {
            let stats = stats.clone();
            async move { stats.open() <= LOAD_CONNECTIONS }
        },
    )
    .await;
    for tcp in idle.iter_mut().take(10) {
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut buf)).await;
        assert!(matches!(n, Ok(Ok(0)) | Ok(Err(_))), "idle connection still open: {n:?}");
    }

    // An idle connection after the handshake (HTTP/2, one request, then silence) is closed too.
    let mut conn = server.connect(Protocol::Http2).await;
    let body = btp_review("CREATE", "kyma-system", "btpoperator", "uid-idle").to_string();
    assert_eq!(conn.post_json("/validate", body.clone()).await.unwrap().status, 200);
    wait_until(
        limits.idle_timeout + Duration::from_secs(10),
        "idle HTTP/2 connection closed",
        || {
            let stats = stats.clone();
            async move { stats.idle_closed() >= 1 }
        },
    )
    .await;
    wait_until(Duration::from_secs(5), "idle HTTP/2 connection gone", || {
        let stats = stats.clone();
        async move { stats.open() <= LOAD_CONNECTIONS }
    })
    .await;
    assert!(
        conn.post_json("/validate", body).await.is_err(),
        "closed connection still served"
    );
    load.finish().await;
    server.shutdown().await;
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_at_once_and_slots_come_back() {
    let limits = Limits {
        max_connections: 8,
        handshake_timeout: Duration::from_secs(30),
        ..test_limits()
    };
    let server = start(limits).await;
    let idle = idle_tcp(server.addr, 8).await;
    let stats = server.stats.clone();
    wait_until(Duration::from_secs(5), "8 connections open", || {
        let stats = stats.clone();
        async move { stats.open() == 8 }
    })
    .await;
    let ca = server.ca.cert_pem.clone();
    let refused = server.connect_trusting(ca.as_bytes(), Protocol::Http1).await;
    assert!(refused.is_err(), "a 9th connection was served");
    assert!(stats.refused() >= 1);
    assert_eq!(stats.open(), 8);
    drop(idle);
    wait_until(Duration::from_secs(5), "slots freed", || {
        let stats = stats.clone();
        async move { stats.open() == 0 }
    })
    .await;
    let mut conn = server.connect(Protocol::Http1).await;
    let body = btp_review("CREATE", "kyma-system", "btpoperator", "uid-cap").to_string();
    assert_eq!(conn.post_json("/validate", body).await.unwrap().status, 200);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_client_is_cut_off_by_the_header_read_timeout() {
    let limits = test_limits();
    let server = start(limits.clone()).await;
    let load = Load::start(&server).await;
    // The head is over 4 KiB: at one byte per 50 ms it would take minutes.
    let lasted = slowloris(
        server.addr,
        server.ca.cert_pem.as_bytes(),
        Duration::from_millis(50),
        Duration::from_secs(30),
    )
    .await
    .expect("the server kept reading a slowloris head for 30 s");
    assert!(
        lasted < limits.header_read_timeout + Duration::from_secs(10),
        "cut off after {lasted:?}"
    );
    load.finish().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_trickling_its_body_gets_408_after_the_body_timeout() {
    let body_timeout = Duration::from_secs(1);
    let server = TestServer::start_with_limits(
        TestServer::default_state().with_body_timeout(body_timeout),
        test_limits(),
    )
    .await;
    let load = Load::start(&server).await;
    // 4 KiB at one byte per 50 ms would take over three minutes.
    let (status, after) = slow_body(
        server.addr,
        server.ca.cert_pem.as_bytes(),
        4096,
        Duration::from_millis(50),
        Duration::from_secs(30),
    )
    .await
    .expect("no answer to a trickled body within 30 s");
    assert_eq!(status, 408);
    assert!(
        after < body_timeout + Duration::from_secs(10),
        "answered after {after:?}"
    );
    load.finish().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_closed_by_the_idle_timeout() {
    let limits = test_limits();
    let server = start(limits.clone()).await;
    let load = Load::start(&server).await;
    let max_requests = 200_000;
    let (stream, sent) = never_reads(
        server.addr,
        server.ca.cert_pem.as_bytes(),
        "{}",
        max_requests,
        Duration::from_secs(1),
    )
    .await;
    assert!(
        sent < max_requests,
        "the server kept reading without anyone reading its answers"
    );
    load.progress(50).await;
    let stats = server.stats.clone();
    wait_until(
        limits.idle_timeout + Duration::from_secs(15),
        "stalled connection closed",
        || {
            let stats = stats.clone();
            async move { stats.idle_closed() >= 1 && stats.open() <= LOAD_CONNECTIONS }
        },
    )
    .await;
    drop(stream);
    load.finish().await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_http2_closes_that_connection_only() {
    // The bystander connection waits idle while the attacks run.
    let server = start(Limits {
        idle_timeout: Duration::from_secs(60),
        ..test_limits()
    })
    .await;
    let load = Load::start(&server).await;
    let ca = server.ca.cert_pem.clone();
    // A connection opened before the attacks, used after them.
    let mut bystander = server.connect(Protocol::Http2).await;

    // A SETTINGS frame of the wrong size: GOAWAY and close.
    let mut bad = tls_stream(server.addr, ca.as_bytes(), b"h2").await;
    bad.write_all(H2_PREFACE).await.unwrap();
    bad.write_all(&h2_bad_settings()).await.unwrap();
    let reply = read_until_closed(&mut bad, Duration::from_secs(10), 64 * 1024).await;
    assert!(reply.closed, "connection with a malformed frame left open");
    assert!(
        h2_frame_types(&reply.bytes).contains(&0x7),
        "no GOAWAY: {:?}",
        h2_frame_types(&reply.bytes)
    );

    // A 1 MiB header block (limit 64 KiB) in CONTINUATION frames: never served, connection closed.
    let mut huge = tls_stream(server.addr, ca.as_bytes(), b"h2").await;
    huge.write_all(H2_PREFACE).await.unwrap();
    let _ = huge.write_all(&h2_huge_header_block(1024 * 1024)).await;
    let reply = read_until_closed(&mut huge, Duration::from_secs(10), 64 * 1024).await;
    let types = h2_frame_types(&reply.bytes);
    assert!(
        reply.closed,
        "connection with a huge header list left open: frames {types:?}"
    );
    assert!(!types.contains(&0x1), "a response (HEADERS) was sent: frames {types:?}");

    let body = btp_review("CREATE", "kyma-system", "btpoperator", "uid-bystander").to_string();
    assert_eq!(
        bystander.post_json("/validate", body.clone()).await.unwrap().status,
        200
    );
    let mut fresh = Connection::open(server.addr, "127.0.0.1", hostile_tls(&ca), Protocol::Http2)
        .await
        .unwrap();
    assert_eq!(fresh.post_json("/validate", body).await.unwrap().status, 200);
    load.finish().await;
    server.shutdown().await;
}

fn hostile_tls(ca: &str) -> Arc<rustls::ClientConfig> {
    tls(ca.as_bytes(), b"h2")
}
