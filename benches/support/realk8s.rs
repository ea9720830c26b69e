//! Real Kubernetes API servers for a benchmark, from `../shared/realk8s` (real etcd, kube-apiserver and
//! kube-controller-manager on loopback, about 15 s to start; its README says what it is). One [`RealK8s::fresh`]
//! server per round: whatever ran in the benchmark's home is stopped and its etcd wiped (`down.sh`), then a
//! new control plane starts (`up.sh`) without the Deployment and ReplicaSet controllers, so that the benchmark
//! plays a fast Deployment controller itself.
//!
//! What it reads from the environment:
//! - `BTP_BENCH_REALK8S`: the realk8s directory (default `../shared/realk8s` beside the repository); where it
//!   holds no `up.sh`, [`RealK8s::from_env`] says why and the real mode does not run;
//! - `BTP_BENCH_REALK8S_VERSION` (default `1.36`) and `BTP_BENCH_REALK8S_HOME` (default `/tmp/realk8s-bench`:
//!   binaries, PKI, etcd's data and the servers' logs in `<home>/logs/`);
//! - `REALK8S_API_PORT`, `REALK8S_ETCD_PORT`, `REALK8S_ETCD_PEER_PORT`, `REALK8S_KCM_PORT` and
//!   `REALK8S_SERVICE_CIDR`, passed to `up.sh` (defaults 9443, 5379, 5380, 13257 and `127.99.0.0/16`, so that the
//!   benchmark's server runs beside the real-server test stage's, which uses realk8s' own defaults).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The ports and Service range of the benchmark's server, where the environment names none.
const DEFAULTS: [(&str, &str); 5] = [
    ("REALK8S_API_PORT", "9443"),
    ("REALK8S_ETCD_PORT", "5379"),
    ("REALK8S_ETCD_PEER_PORT", "5380"),
    ("REALK8S_KCM_PORT", "13257"),
    ("REALK8S_SERVICE_CIDR", "127.99.0.0/16"),
];

/// Where the control planes come from and where they run.
#[derive(Clone, Debug)]
pub struct RealK8s {
    /// The realk8s directory (`up.sh`, `down.sh`).
    pub scripts: PathBuf,
    /// `1.36` or `1.24`.
    pub version: String,
    /// The home of the benchmark's server.
    pub home: PathBuf,
}

impl RealK8s {
    /// The realk8s of the environment; where there is none, None after saying so: a line for `what` (the
    /// benchmark's name) and a row `figure` in `summary` that it did not run, and why.
    pub fn from_env_or_report(summary: &mut crate::summary::Summary, what: &str, figure: &str) -> Option<Self> {
        match Self::from_env() {
            Ok(k8s) => Some(k8s),
            Err(why) => {
                println!("{what}: not run: {why}");
                summary.figure(figure, &format!("not run: {why}"));
                None
            }
        }
    }

    /// The realk8s of the environment, or why there is none here.
    pub fn from_env() -> Result<Self, String> {
        let scripts = std::env::var_os("BTP_BENCH_REALK8S")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/realk8s"));
        if !scripts.join("up.sh").is_file() {
            return Err(format!(
                "no {} here (BTP_BENCH_REALK8S names the realk8s directory)",
                scripts.join("up.sh").display()
            ));
        }
        let var = |name: &str, default: &str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        Ok(RealK8s {
            scripts: scripts.canonicalize().unwrap_or(scripts),
            version: var("BTP_BENCH_REALK8S_VERSION", "1.36"),
            home: PathBuf::from(var("BTP_BENCH_REALK8S_HOME", "/tmp/realk8s-bench")),
        })
    }

    /// The API server's port (what `up.sh` is given).
    pub fn api_port(&self) -> String {
        env_or_default("REALK8S_API_PORT")
    }

    /// A fresh control plane: what ran in the home stopped and etcd wiped, then started anew without the
    /// Deployment and ReplicaSet controllers. Returns the admin kubeconfig; the server runs until
    /// [`Up`] is dropped.
    pub fn fresh(&self) -> Result<Up, String> {
        self.down()?;
        std::fs::create_dir_all(&self.home).map_err(|e| format!("{}: {e}", self.home.display()))?;
        let mut up = Command::new(self.scripts.join("up.sh"));
        up.arg(&self.version)
            .arg(&self.home)
            .env("REALK8S_KCM_CONTROLLERS", "*,-deployment,-replicaset")
            .stdin(Stdio::null());
        for (name, _) in DEFAULTS {
            up.env(name, env_or_default(name));
        }
        let out = up.output().map_err(|e| format!("running up.sh: {e}"))?;
        // Stopped again when anything below fails.
        let mut running = Up {
            k8s: self.clone(),
            kubeconfig: PathBuf::new(),
        };
        if !out.status.success() {
            return Err(format!(
                "up.sh {} {} failed ({}): {}",
                self.version,
                self.home.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let kubeconfig = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(PathBuf::from)
            .ok_or_else(|| "up.sh printed no kubeconfig".to_string())?;
        running.kubeconfig = kubeconfig;
        Ok(running)
    }

    /// Stop what runs in the home and wipe etcd (`down.sh`).
    pub fn down(&self) -> Result<(), String> {
        let out = Command::new(self.scripts.join("down.sh"))
            .arg(&self.version)
            .arg(&self.home)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running down.sh: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "down.sh {} {} failed ({}): {}",
                self.version,
                self.home.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// CPU time (user and system) a process has used so far, in seconds (clock ticks of 1/100 s), from
/// `/proc/<pid>/stat`; None when it cannot be read.
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name (in parentheses, may hold spaces): utime and stime are the 12th and
    // 13th of them.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// How many TCP connections to the API server's port on loopback are established (the clients' ends: those
/// of this process and of the control plane's own clients), from `/proc/net/tcp`.
pub fn connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address rem_address st ...: the remote end is the API server's port, established (01).
            fields.get(2).and_then(|r| r.rsplit_once(':')).map(|(_, p)| p) == Some(&format!("{port:04X}")[..])
                && fields.get(3) == Some(&"01")
        })
        .count()
}

fn env_or_default(name: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| DEFAULTS.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string()))
        .unwrap_or_default()
}

/// A running control plane; stopped (and its etcd wiped) when dropped, whatever happened.
pub struct Up {
    k8s: RealK8s,
    /// The admin kubeconfig.
    pub kubeconfig: PathBuf,
}

impl Up {
    /// The CPU time each component of the control plane has used so far (etcd, kube-apiserver,
    /// kube-controller-manager, by their pid files), in seconds.
    pub fn cpu(&self) -> Vec<(&'static str, f64)> {
        ["etcd", "kube-apiserver", "kube-controller-manager"]
            .into_iter()
            .filter_map(|name| {
                let pid = std::fs::read_to_string(self.k8s.home.join("run").join(format!("{name}.pid"))).ok()?;
                Some((name, cpu_seconds(pid.trim())?))
            })
            .collect()
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Err(e) = self.k8s.down() {
            eprintln!("realk8s: {e}");
        }
    }
}
