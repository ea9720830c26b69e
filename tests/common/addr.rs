//! Loopback addresses for the servers a test or benchmark starts (shared by `tests/` and `benches/`).

#![allow(dead_code)]

/// A loopback address with a port that was free a moment ago.
pub fn free_addr() -> std::net::SocketAddr {
    free_addr_on(std::net::Ipv4Addr::LOCALHOST)
}

/// `ip` with a port that was free on it a moment ago.
fn free_addr_on(ip: std::net::Ipv4Addr) -> std::net::SocketAddr {
    std::net::TcpListener::bind((ip, 0))
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("a free port on {ip}: {e}"))
}

/// A loopback address of its own for a process the test starts, as a Pod has an IP of its own: an IP of
/// `127.128.0.0/10` that no other call of this process returned (its second byte from the process id, so two
/// test processes side by side rarely share one either), with a port that was free on it a moment ago.
///
/// Not [`free_addr`] for a process that binds later, or binds again when restarted: in between, that port of
/// 127.0.0.1 can be taken by the source port of any outgoing connection of the machine (the kernel draws both
/// from the same range). Once it was: a restarted manager container's webhook port was held by a long-lived
/// connection, and every restart failed to bind it. Nothing connects from these IPs.
pub fn own_addr() -> std::net::SocketAddr {
    static CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let [_, _, hi, lo] = n.to_be_bytes();
    let process = u8::try_from(128 + std::process::id() % 64).expect("below 192");
    free_addr_on(std::net::Ipv4Addr::new(127, process, hi, lo))
}

/// A port that was free a moment ago on the one loopback IP this test process gives the webhook servers of
/// its replicas (`common::replica::Replica`), `127.192.0.0/10` (apart from [`own_addr`]'s; its second byte from
/// the process id). Outside a cluster a replica registers its webhooks at the address it is bound to, and the
/// webhook certificate its replicas share names that IP: replicas on IPs of their own would each want a
/// certificate of their own (the leader rewrote the shared one on taking over). No outgoing connection takes
/// a port of it between the moment it was free and the replica's bind, as one may of 127.0.0.1.
pub fn replica_webhook_addr() -> std::net::SocketAddr {
    let process = u8::try_from(192 + std::process::id() % 64).expect("below 256");
    free_addr_on(std::net::Ipv4Addr::new(127, process, 0, 1))
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    free_addr().port()
}
