//! The HTTPS server: TLS handshake with rustls, then HTTP/1.1 or HTTP/2 (by ALPN) into an axum router.
//! Graceful shutdown: stop accepting, let in-flight requests finish, close idle connections.
//!
//! Before it, a drain ([`serve_draining`]): the server goes on accepting and answering, but moves its clients
//! elsewhere as soon as it starts: every HTTP/2 connection, open or opened during the drain, gets a GOAWAY at
//! once (the requests the client sent before it saw the GOAWAY are still answered, and the client opens its
//! next connection, through the Service, to another replica), and every HTTP/1.1 response carries
//! `Connection: close`. An API server's pooled connection therefore leaves a terminating replica at the start
//! of its drain, not when the connection is closed under it at the end (admission calls are not retried).
//!
//! Hostile clients cost bounded resources ([`Limits`]): a TLS handshake timeout, an HTTP/1.1 header read
//! timeout, an idle timeout (no byte moved in either direction), a cap on open connections, HTTP/2
//! stream, header-list and frame limits; request bodies are limited by the handlers (3 MiB, refused
//! from `Content-Length` before reading). TLS below 1.2 and plain HTTP never reach HTTP (see [`crate::tls`]).

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;

/// How long shutdown waits for in-flight requests.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(20);
/// After the idle timeout, how long a connection gets to finish a graceful close (HTTP/2 GOAWAY)
/// before it is dropped.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// What one client may cost the server. Every limit closes or refuses only the offending connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a client may take for the TLS handshake (a TCP connection that sends nothing is closed
    /// after this). Default 10 s.
    pub handshake_timeout: Duration,
    /// HTTP/1.1: how long a client may take to send a request's headers, counted from when the server
    /// starts waiting for them (so it also ends idle keep-alive connections). Default 10 s.
    pub header_read_timeout: Duration,
    /// A connection on which no byte is read or written for this long is closed (gracefully for HTTP/2,
    /// with a GOAWAY, then dropped after a second). Covers idle HTTP/2 connections and clients that
    /// stop reading their responses. Default 60 s.
    pub idle_timeout: Duration,
    /// Open connections at most (including those still in the TLS handshake); a connection accepted
    /// beyond it is closed at once. Default 4096.
    pub max_connections: usize,
    /// HTTP/1.1 read/write buffer limit, which also bounds the request head (a larger head gets 431).
    /// Default 64 KiB (hyper's minimum is 8 KiB).
    pub h1_max_buf_size: usize,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`. Default 100.
    pub h2_max_concurrent_streams: u32,
    /// HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`. Default 64 KiB.
    pub h2_max_header_list_size: u32,
    /// HTTP/2 `SETTINGS_MAX_FRAME_SIZE`. Default 16 KiB (the protocol's minimum).
    pub h2_max_frame_size: u32,
    /// HTTP/2 send buffer per stream. Default 64 KiB.
    pub h2_max_send_buf_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 4096,
            h1_max_buf_size: 64 * 1024,
            h2_max_concurrent_streams: 100,
            h2_max_header_list_size: 64 * 1024,
            h2_max_frame_size: 16 * 1024,
            h2_max_send_buf_size: 64 * 1024,
        }
    }
}

/// Connection counters of a running server (for tests, benchmarks and diagnostics).
#[derive(Debug, Default)]
pub struct Stats {
    open: AtomicUsize,
    accepted: AtomicU64,
    refused: AtomicU64,
    handshake_failed: AtomicU64,
    idle_closed: AtomicU64,
}

impl Stats {
    /// Connections open now (accepted and not yet closed).
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
    /// Connections accepted under the cap, in total.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
    /// Connections closed at once because [`Limits::max_connections`] were open.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
    /// TLS handshakes that failed or timed out.
    pub fn handshake_failed(&self) -> u64 {
        self.handshake_failed.load(Ordering::Relaxed)
    }
    /// Connections closed by [`Limits::idle_timeout`].
    pub fn idle_closed(&self) -> u64 {
        self.idle_closed.load(Ordering::Relaxed)
    }
}

/// Serve `app` over TLS on `listener` with the default [`Limits`] until `shutdown` resolves, then drain
/// connections.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_with(listener, tls, app, Limits::default(), Arc::default(), shutdown).await
}

/// [`serve`] with explicit limits, counting connections in `stats`.
pub async fn serve_with(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    limits: Limits,
    stats: Arc<Stats>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    serve_draining(listener, tls, app, (limits, stats), std::future::pending(), shutdown).await
}

/// [`serve_with`], and from when `drain` resolves until `shutdown` does, a drain (see the module
/// documentation): still accepting and answering, every HTTP/2 connection told to go away (GOAWAY) at once,
/// every HTTP/1.1 response with `Connection: close`.
pub async fn serve_draining(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    (limits, stats): (Limits, Arc<Stats>),
    drain: impl Future<Output = ()>,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let acceptor = TlsAcceptor::from(tls);
    let limits = Arc::new(limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let (drain_tx, drain_rx) = watch::channel(false);
    let app = close_http1_while(app, drain_rx.clone());
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    tokio::pin!(drain);
    let mut draining = false;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        // Typically EMFILE: back off briefly instead of spinning.
                        tracing::warn!(error = %e, "accepting a webhook connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                // Over the cap: close the new connection at once rather than stop accepting, so that the
                // kernel backlog does not fill with connections nobody answers.
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    stats.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%peer, limit = limits.max_connections, "connection limit reached; closing");
                    drop(tcp);
                    continue;
                };
                stats.accepted.fetch_add(1, Ordering::Relaxed);
                stats.open.fetch_add(1, Ordering::Relaxed);
                let open = Open { _slot: slot, stats: stats.clone() };
                let _ = tcp.set_nodelay(true);
                connections.spawn(connection(
                    acceptor.clone(),
                    (tcp, peer),
                    app.clone(),
                    limits.clone(),
                    open,
                    (drain_rx.clone(), stop_rx.clone()),
                ));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut drain, if !draining => {
                draining = true;
                tracing::info!(open = connections.len(), "draining: HTTP/2 connections told to go away, HTTP/1.1 responses close");
                let _ = drain_tx.send(true);
            }
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    let _ = drain_tx.send(true);
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(DRAIN_TIMEOUT, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "webhook connections still open after the drain timeout; closing them"
        );
        connections.abort_all();
    }
    Ok(())
}

/// `app`, whose HTTP/1.x responses carry `Connection: close` once `drain` says so (hyper then closes the
/// connection after the response).
fn close_http1_while(app: Router, drain: watch::Receiver<bool>) -> Router {
    app.layer(axum::middleware::from_fn(
        move |request: axum::extract::Request, next: axum::middleware::Next| {
            let drain = drain.clone();
            async move {
                let http1 = request.version() < http::Version::HTTP_2;
                let mut response = next.run(request).await;
                if http1 && *drain.borrow() {
                    response
                        .headers_mut()
                        .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
                }
                response
            }
        },
    ))
}

/// One open connection: holds its slot under [`Limits::max_connections`] and counts itself in [`Stats`].
struct Open {
    _slot: OwnedSemaphorePermit,
    stats: Arc<Stats>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.stats.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection, served until it ends or `stop` says so; an HTTP/2 one is told to go away when `drain`
/// says so. A boxed future, so that the connection's code (TLS, HTTP/1.1 and HTTP/2, the router) is compiled
/// once, in this crate: spawned from [`serve_draining`] as an `async fn`, it would be compiled again into
/// every binary, test and benchmark that serves.
fn connection(
    acceptor: TlsAcceptor,
    (tcp, peer): (tokio::net::TcpStream, SocketAddr),
    app: Router,
    limits: Arc<Limits>,
    open: Open,
    (drain, stop): (watch::Receiver<bool>, watch::Receiver<bool>),
) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
    Box::pin(run_connection(acceptor, tcp, peer, app, limits, open, (drain, stop)))
}

async fn run_connection(
    acceptor: TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Arc<Limits>,
    open: Open,
    (mut drain, mut stop): (watch::Receiver<bool>, watch::Receiver<bool>),
) {
    let tls = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            open.stats.handshake_failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            open.stats.handshake_failed.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.h1_max_buf_size.max(8192));
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.h2_max_concurrent_streams)
        .max_header_list_size(limits.h2_max_header_list_size)
        .max_frame_size(limits.h2_max_frame_size)
        .max_send_buf_size(limits.h2_max_send_buf_size);
    // ALPN decides the protocol; only a client that negotiated none is sniffed.
    let http2 = alpn.as_deref() == Some(b"h2");
    let builder = match alpn.as_deref() {
        Some(b"h2") => builder.http2_only(),
        Some(_) => builder.http1_only(),
        None => builder,
    };
    let activity = Activity::new();
    let io = TokioIo::new(Watched {
        inner: tls,
        activity: activity.clone(),
    });
    let conn = builder.serve_connection(io, TowerToHyperService::new(app));
    tokio::pin!(conn);
    // Only an HTTP/2 connection (by ALPN) is told to go away when the drain starts: hyper sends the GOAWAY
    // once its handshake is done, and answers every request the client sent before it saw it. An HTTP/1.1
    // connection closes after its next response (`Connection: close`); one whose protocol is still being
    // sniffed would be dropped by a graceful shutdown, so it is left to the end.
    let mut going_away = !http2;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, error = %e, "webhook connection ended with an error");
                }
                break;
            }
            _ = stopped(&mut drain), if !going_away => {
                going_away = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = stopped(&mut stop) => {
                if !going_away || !http2 {
                    conn.as_mut().graceful_shutdown();
                }
                let _ = conn.await;
                break;
            }
            () = activity.idle_for(limits.idle_timeout) => {
                open.stats.idle_closed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(%peer, timeout = ?limits.idle_timeout, "closing an idle webhook connection");
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(IDLE_CLOSE_GRACE, conn.as_mut()).await;
                break;
            }
        }
    }
    drop(open);
}

/// When a connection last moved a byte, in milliseconds since it was accepted.
#[derive(Clone)]
struct Activity {
    start: Instant,
    last_ms: Arc<AtomicU64>,
}

impl Activity {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            last_ms: Arc::new(AtomicU64::new(0)),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// Resolves once no byte has moved for `timeout`.
    async fn idle_for(&self, timeout: Duration) {
        loop {
            let last = self.start + Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
            let deadline = last + timeout;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    }
}

/// A stream that records in [`Activity`] every read or write that moved at least one byte.
struct Watched<S> {
    inner: S,
    activity: Activity,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the sender is gone, which also means stop.
    let _ = stop.wait_for(|stopped| *stopped).await;
}
