//! A silent partition between one replica and the API server: a TCP forwarder that passes bytes both ways
//! until it is cut, and then passes nothing, closes nothing and refuses nothing. A request sent meanwhile
//! hangs, as on a network that drops packets without a reset (a partition, a dead NAT entry, a node that lost
//! its route): the client's TCP connection stays open, a new connection is accepted (its TLS handshake then
//! hangs), and nothing comes back. When healed, what was held goes on (as TCP delivers what it retransmits
//! once the route is back), so a request sent into the partition may still reach the API server afterwards.
//!
//! Point a replica's kubeconfig at it with [`Partition::kubeconfig`].
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A forwarder to the API server; it and its connections end when dropped.
pub struct Partition {
    /// Where it listens.
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Partition {
    /// Forward every connection to `target` (the API server), connected.
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("the forwarder's port");
        let addr = listener.local_addr().expect("the forwarder's address");
        let (cut, cuts) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    continue;
                };
                while connections.try_join_next().is_some() {}
                connections.spawn(forward(inbound, target, cuts.clone()));
            }
        });
        Self { addr, cut, task }
    }

    /// The forwarder for the API server `kubeconfig` names, and a copy of that kubeconfig (written next to it)
    /// that goes through it.
    pub async fn for_kubeconfig(kubeconfig: &Path) -> (Self, PathBuf) {
        let text = std::fs::read_to_string(kubeconfig).expect("the kubeconfig");
        let target = server_of(&text).unwrap_or_else(|| panic!("no https server with an address in {text}"));
        let partition = Self::start(target).await;
        let through = kubeconfig.with_extension("through-partition");
        std::fs::write(&through, partition.kubeconfig(&text)).expect("writing the kubeconfig");
        (partition, through)
    }

    /// The forwarder for the API server the kubeconfig `text` names.
    pub async fn for_kubeconfig_text(text: &str) -> Self {
        let target = server_of(text).unwrap_or_else(|| panic!("no https server with an address in {text}"));
        Self::start(target).await
    }

    /// `kubeconfig` with its server's address replaced by the forwarder's (the host stays a loopback
    /// address, so the API server's certificate still names it).
    pub fn kubeconfig(&self, kubeconfig: &str) -> String {
        let Some(target) = server_of(kubeconfig) else {
            return kubeconfig.to_string();
        };
        kubeconfig.replace(&format!("https://{target}"), &format!("https://{}", self.addr))
    }

    /// Stop passing bytes, in both directions, on every connection, open or new; close nothing.
    pub fn cut(&self) {
        let _ = self.cut.send(true);
    }

    /// Pass bytes again (what was held first).
    pub fn heal(&self) {
        let _ = self.cut.send(false);
    }
}

/// The `https://<ip>:<port>` server a kubeconfig names.
fn server_of(kubeconfig: &str) -> Option<SocketAddr> {
    kubeconfig.lines().find_map(|line| {
        let rest = line.trim().strip_prefix("server:")?.trim().trim_matches(['"', '\'']);
        let host_port = rest.strip_prefix("https://")?.trim_end_matches('/');
        host_port.parse().ok()
    })
}

/// Wait while the partition is cut.
async fn passing(cut: &mut watch::Receiver<bool>) {
    // The sender lives as long as the forwarder: an error means it is gone, and so is everything else.
    let _ = cut.wait_for(|cut| !*cut).await;
}

/// One connection: connected to `target` once the partition lets it through, then bytes both ways, each
/// held while the partition is cut.
async fn forward(inbound: TcpStream, target: SocketAddr, mut cut: watch::Receiver<bool>) {
    // A new connection is accepted even during the partition (nothing is refused); it reaches the API server
    // only once healed.
    passing(&mut cut).await;
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (from_client, to_client) = inbound.into_split();
    let (from_server, to_server) = outbound.into_split();
    tokio::join!(
        pipe(from_client, to_server, cut.clone()),
        pipe(from_server, to_client, cut)
    );
}

/// Copy `from` to `to`, holding whatever was read while the partition is cut (and reading nothing then);
/// an end of stream is passed on, once healed.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut cut: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        passing(&mut cut).await;
        // An error ends the stream as an end of stream does.
        let n: usize = from.read(&mut buf).await.unwrap_or_default();
        // Read just as the partition began: held until it ends.
        passing(&mut cut).await;
        if n == 0 {
            let _ = to.shutdown().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_server_of_a_kubeconfig() {
        let config = "clusters:\n- cluster:\n    server: https://127.0.0.1:6443\n  name: c\n";
        assert_eq!(super::server_of(config), Some("127.0.0.1:6443".parse().unwrap()));
    }
}
