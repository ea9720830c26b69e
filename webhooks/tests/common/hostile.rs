//! Hostile clients of the webhook server, shared by `tests/hostile.rs` and `benches/webhook.rs`
//! (included there with `#[path]`). Every client is bounded in time and bytes.
#![allow(dead_code)]

use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::client::TlsStream;

/// A TLS ClientHello record offering `legacy_version` (0x0301 = TLS 1.0, 0x0302 = TLS 1.1, 0x0303 = TLS
/// 1.2) and, when given, a `supported_versions` extension with `versions`. The same cipher suites
/// (TLS 1.2 GCM and TLS 1.0 CBC ECDHE-ECDSA) and extensions in every case, so that only the version differs.
pub fn client_hello(legacy_version: u16, versions: Option<&[u16]>) -> Vec<u8> {
    fn ext(out: &mut Vec<u8>, kind: u16, data: &[u8]) {
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(data);
    }
    let mut body = Vec::new();
    body.extend_from_slice(&legacy_version.to_be_bytes());
    body.extend_from_slice(&[0x42; 32]); // random
    body.push(0); // no session id
    let suites: [u16; 4] = [0xc02b, 0xc02c, 0xc009, 0xc00a];
    body.extend_from_slice(&((suites.len() * 2) as u16).to_be_bytes());
    for s in suites {
        body.extend_from_slice(&s.to_be_bytes());
    }
    body.extend_from_slice(&[1, 0]); // compression: null
    let mut exts = Vec::new();
    ext(&mut exts, 0x000a, &[0, 4, 0x00, 0x1d, 0x00, 0x17]); // supported_groups: x25519, secp256r1
    ext(&mut exts, 0x000b, &[1, 0]); // ec_point_formats: uncompressed
    ext(&mut exts, 0x000d, &[0, 4, 0x04, 0x03, 0x08, 0x04]); // signature_algorithms
    if let Some(versions) = versions {
        let mut data = vec![(versions.len() * 2) as u8];
        for v in versions {
            data.extend_from_slice(&v.to_be_bytes());
        }
        ext(&mut exts, 0x002b, &data);
    }
    body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
    body.extend_from_slice(&exts);
    let mut handshake = vec![1u8]; // client_hello
    handshake.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    handshake.extend_from_slice(&body);
    let mut record = vec![0x16, 0x03, 0x01];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

/// What the server sent back to raw bytes, until it closed the connection or `deadline` passed.
#[derive(Debug)]
pub struct RawReply {
    /// Everything read.
    pub bytes: Vec<u8>,
    /// The server closed (EOF or reset) before the deadline.
    pub closed: bool,
}

impl RawReply {
    /// The first TLS record is an alert (content type 21) with this description.
    pub fn alert(&self) -> Option<u8> {
        (self.bytes.len() >= 7 && self.bytes[0] == 0x15).then(|| self.bytes[6])
    }
    /// The first TLS record is a handshake message (a ServerHello).
    pub fn server_hello(&self) -> bool {
        self.bytes.len() >= 6 && self.bytes[0] == 0x16 && self.bytes[5] == 2
    }
}

/// Send `bytes` on a fresh TCP connection and read the reply (at most 64 KiB) until the server closes.
pub async fn send_raw(addr: SocketAddr, bytes: &[u8], deadline: Duration) -> RawReply {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.write_all(bytes).await;
    read_until_closed(&mut tcp, deadline, 64 * 1024).await
}

/// Read until EOF/error (closed) or `deadline`, keeping at most `keep` bytes.
pub async fn read_until_closed<R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
    deadline: Duration,
    keep: usize,
) -> RawReply {
    let end = Instant::now() + deadline;
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match tokio::time::timeout_at(end, r.read(&mut buf)).await {
            Err(_) => return RawReply { bytes, closed: false },
            Ok(Ok(0)) | Ok(Err(_)) => return RawReply { bytes, closed: true },
            Ok(Ok(n)) => {
                let room = keep.saturating_sub(bytes.len());
                bytes.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// A TLS client configuration trusting `ca_pem`, offering `alpn`.
pub fn tls(ca_pem: &[u8], alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// A TLS connection with `alpn` negotiated, ready for raw HTTP bytes.
pub async fn tls_stream(addr: SocketAddr, ca_pem: &[u8], alpn: &[u8]) -> TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let stream = tokio_rustls::TlsConnector::from(tls(ca_pem, alpn))
        .connect(name, tcp)
        .await
        .expect("TLS handshake");
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(alpn), "ALPN");
    stream
}

/// `n` TCP connections that never send a byte.
pub async fn idle_tcp(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(TcpStream::connect(addr).await.expect("connect"));
    }
    out
}

/// Slowloris: sends an HTTP/1.1 request head one byte every `interval` (a head that would take minutes)
/// and returns how long the server let it go on before closing the connection, or `None` if the server
/// was still reading after `give_up`.
pub async fn slowloris(addr: SocketAddr, ca_pem: &[u8], interval: Duration, give_up: Duration) -> Option<Duration> {
    let mut stream = tls_stream(addr, ca_pem, b"http/1.1").await;
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Pad: {}\r\n",
        "a".repeat(4096)
    );
    let started = Instant::now();
    let mut probe = [0u8; 1024];
    for b in head.bytes().cycle() {
        if started.elapsed() > give_up {
            return None;
        }
        if stream.write_all(&[b]).await.is_err() || stream.flush().await.is_err() {
            return Some(started.elapsed());
        }
        // Anything the server sends (a 408, or EOF) ends the attack; wait one interval for it.
        match tokio::time::timeout(interval, stream.read(&mut probe)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
            Ok(Ok(_)) => {
                let rest = read_until_closed(&mut stream, Duration::from_secs(5), 0).await;
                return rest.closed.then(|| started.elapsed());
            }
            Err(_) => {}
        }
    }
    None
}

/// A complete HTTP/1.1 head declaring a `len`-byte body, then the body one byte every `interval`.
/// Returns the response status and when it arrived, or `None` if none came within `give_up`.
pub async fn slow_body(
    addr: SocketAddr,
    ca_pem: &[u8],
    len: usize,
    interval: Duration,
    give_up: Duration,
) -> Option<(u16, Duration)> {
    let mut stream = tls_stream(addr, ca_pem, b"http/1.1").await;
    let head = format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    let started = Instant::now();
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    for _ in 0..len {
        if started.elapsed() > give_up {
            return None;
        }
        let _ = stream.write_all(b" ").await;
        let _ = stream.flush().await;
        match tokio::time::timeout(interval, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => {
                reply.extend_from_slice(&buf[..n]);
                if reply.len() >= 12 {
                    break;
                }
            }
            Err(_) => {}
        }
    }
    let status = std::str::from_utf8(reply.get(9..12)?).ok()?.parse().ok()?;
    Some((status, started.elapsed()))
}

/// The outcome of sending a large body.
#[derive(Debug)]
pub struct BigBody {
    /// The response status, if one arrived.
    pub status: Option<u16>,
    /// Body bytes the client managed to write before the server stopped it.
    pub written: u64,
}

/// POST a `total`-byte body to /validate over HTTP/1.1, streamed in 64 KiB chunks while reading the
/// response; with `declare_length` the head carries `Content-Length`, else the body is chunked.
pub async fn big_body(addr: SocketAddr, ca_pem: &[u8], total: u64, declare_length: bool) -> BigBody {
    let stream = tls_stream(addr, ca_pem, b"http/1.1").await;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let head = if declare_length {
        format!(
            "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {total}\r\n\r\n"
        )
    } else {
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_string()
    };
    let writer = tokio::spawn(async move {
        let mut written = 0u64;
        if wr.write_all(head.as_bytes()).await.is_err() {
            return written;
        }
        let chunk = vec![b' '; 64 * 1024];
        while written < total {
            let n = (total - written).min(chunk.len() as u64) as usize;
            let write = async {
                if declare_length {
                    wr.write_all(&chunk[..n]).await
                } else {
                    let mut c = format!("{n:x}\r\n").into_bytes();
                    c.extend_from_slice(&chunk[..n]);
                    c.extend_from_slice(b"\r\n");
                    wr.write_all(&c).await
                }
            };
            // A write that cannot proceed for 5 s means the server stopped reading: stop too.
            match tokio::time::timeout(Duration::from_secs(5), write).await {
                Ok(Ok(())) => written += n as u64,
                _ => break,
            }
        }
        written
    });
    let reply = read_until_closed(&mut rd, Duration::from_secs(20), 4096).await;
    let written = tokio::time::timeout(Duration::from_secs(20), writer)
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or(total);
    let status = std::str::from_utf8(reply.bytes.get(9..12).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|_| reply.bytes.starts_with(b"HTTP/1.1 "));
    BigBody { status, written }
}

/// A client that pipelines HTTP/1.1 requests and never reads a response: writes until the server stops
/// reading (a write stalls for `stall`) or `max_requests` are sent, then keeps the connection open.
/// Returns the stream (still unread) and the number of requests written.
pub async fn never_reads(
    addr: SocketAddr,
    ca_pem: &[u8],
    body: &str,
    max_requests: usize,
    stall: Duration,
) -> (TlsStream<TcpStream>, usize) {
    let mut stream = tls_stream(addr, ca_pem, b"http/1.1").await;
    let request = format!(
        "POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut sent = 0;
    while sent < max_requests {
        match tokio::time::timeout(stall, stream.write_all(request.as_bytes())).await {
            Ok(Ok(())) => sent += 1,
            _ => break,
        }
    }
    (stream, sent)
}

/// The HTTP/2 connection preface and an empty SETTINGS frame.
pub const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// One HTTP/2 frame.
pub fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The frame types in `bytes` (a server's HTTP/2 output), as far as complete frames go.
pub fn h2_frame_types(bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    let mut rest = bytes;
    while rest.len() >= 9 {
        let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
        types.push(rest[3]);
        if rest.len() < 9 + len {
            break;
        }
        rest = &rest[9 + len..];
    }
    types
}

/// A SETTINGS frame of 5 bytes (not a multiple of 6): a connection error (FRAME_SIZE_ERROR).
pub fn h2_bad_settings() -> Vec<u8> {
    h2_frame(0x4, 0, 0, &[0, 1, 2, 3, 4])
}

/// A request whose header block (HEADERS without END_HEADERS, then CONTINUATION frames of 16,000
/// bytes) adds up to `total` bytes of `x-pad` headers: far over the server's header list limit.
pub fn h2_huge_header_block(total: usize) -> Vec<u8> {
    // :method POST, :scheme https, :path /validate (literal, indexed name 4), :authority (literal, name 1).
    let mut first = vec![0x83, 0x87, 0x04, 9];
    first.extend_from_slice(b"/validate");
    first.extend_from_slice(&[0x01, 9]);
    first.extend_from_slice(b"127.0.0.1");
    let mut entry = vec![0x00, 5];
    entry.extend_from_slice(b"x-pad");
    entry.push(100);
    entry.extend_from_slice(&[b'a'; 100]);
    let mut out = h2_frame(0x1, 0x1, 1, &first); // END_STREAM, not END_HEADERS
    let per_frame = 16_000 / entry.len();
    let frames = total / (per_frame * entry.len()) + 1;
    for i in 0..frames {
        let payload: Vec<u8> = entry.iter().copied().cycle().take(per_frame * entry.len()).collect();
        let flags = if i + 1 == frames { 0x4 } else { 0 };
        out.extend_from_slice(&h2_frame(0x9, flags, 1, &payload));
    }
    out
}
