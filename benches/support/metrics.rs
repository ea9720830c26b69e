//! Reading a manager's `/metrics` over plain HTTP, for the benchmarks (in-process or as its own process).

/// What a manager serves at `http://<addr>/metrics` (plain HTTP/1.0 GET, the answer with its headers; empty
/// when it cannot be read).
pub async fn text(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return String::new();
    };
    if stream.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.is_err() {
        return String::new();
    }
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body).await;
    body
}
