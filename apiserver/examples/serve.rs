//! Runs the embedded API server and writes a kubeconfig:
//! `cargo run -p btp-apiserver --example serve -- /tmp/kubeconfig [--as USER=PATH]... [--audit-log PATH]
//! [--version 1.24|1.36]`
//!
//! - `--version` chooses the Kubernetes version the server presents and behaves as (default: the newest
//!   modelled, 1.36; `1.24`: no webhook `matchConditions`, and the other recorded 1.24 differences).
//! - `--as USER=PATH` also writes a kubeconfig at PATH whose token authenticates as USER (the request log
//!   records that user's requests under its name, as a real API server's audit log would).
//! - `--audit-log PATH` appends every request the server answers to PATH, one JSON object per line
//!   (method, verb, path, query, group, resource, namespace, name, user, code, changed).
use btp_apiserver::{ApiServer, Config, KubeVersion};
use std::io::Write as _;

struct Args {
    kubeconfig: String,
    users: Vec<(String, String)>,
    audit_log: Option<String>,
    version: KubeVersion,
}

fn parse_args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let mut parsed = Args {
        kubeconfig: "kubeconfig".into(),
        users: Vec::new(),
        audit_log: None,
        version: KubeVersion::default(),
    };
    let mut positional = false;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--as" => {
                let value = args.next().ok_or("--as needs USER=PATH")?;
                let (user, path) = value.split_once('=').ok_or("--as needs USER=PATH")?;
                parsed.users.push((user.to_string(), path.to_string()));
            }
            "--audit-log" => parsed.audit_log = Some(args.next().ok_or("--audit-log needs a PATH")?),
            "--version" => {
                let v = args.next().ok_or("--version needs 1.24 or 1.36")?;
                parsed.version = KubeVersion::parse(&v).ok_or(format!("unsupported --version {v} (1.24 or 1.36)"))?;
            }
            flag if flag.starts_with("--") => return Err(format!("unknown flag {flag}")),
            path if !positional => {
                parsed.kubeconfig = path.to_string();
                positional = true;
            }
            extra => return Err(format!("unexpected argument {extra}")),
        }
    }
    Ok(parsed)
}

/// Append the request log to `path` as it grows, every 50 ms, until the process ends.
fn follow_request_log(log: btp_apiserver::testing::RequestLog, path: String) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("opening the audit log {path}: {e}"))?;
    tokio::spawn(async move {
        let mut written = 0;
        loop {
            let records = log.since(written);
            written += records.len();
            let mut lines = Vec::new();
            for record in &records {
                if serde_json::to_writer(&mut lines, record).is_ok() {
                    lines.push(b'\n');
                }
            }
            if !lines.is_empty() && file.write_all(&lines).and_then(|()| file.flush()).is_err() {
                eprintln!("writing the audit log {path} failed; no more records are written");
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
    Ok(())
}

#[tokio::main]
async fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!(
                "serve: {e}\nusage: serve [KUBECONFIG] [--as USER=PATH]... [--audit-log PATH] [--version 1.24|1.36]"
            );
            std::process::exit(2);
        }
    };
    let config = Config {
        version: args.version,
        ..Config::default()
    };
    let srv = ApiServer::start(config).await.expect("start");
    std::fs::write(&args.kubeconfig, srv.kubeconfig_yaml()).expect("write kubeconfig");
    for (user, path) in &args.users {
        std::fs::write(path, srv.kubeconfig_yaml_as(user)).expect("write the user's kubeconfig");
    }
    if let Some(path) = args.audit_log {
        if let Err(e) = follow_request_log(srv.request_log(), path) {
            eprintln!("serve: {e}");
            std::process::exit(1);
        }
    }
    // no pods run: keep Deployments marked available so `kubectl rollout status` completes
    // (BTP_SERVE_NO_DEPLOYMENT_CONTROLLER=1 leaves them unavailable, like a cluster that cannot pull the image)
    let ctl = match std::env::var("BTP_SERVE_NO_DEPLOYMENT_CONTROLLER").as_deref() {
        Ok("1") => tokio::spawn(async {}),
        _ => btp_apiserver::testing::spawn_deployment_controller(srv.client().await),
    };
    println!("serving on {} (kubeconfig: {})", srv.url(), args.kubeconfig);
    let _ = tokio::signal::ctrl_c().await;
    ctl.abort();
    srv.shutdown().await;
}
