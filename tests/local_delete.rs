//! `kubectl delete btpoperator` against `btp-manager local`, as a user does it: the command returns (the
//! manager deprovisions and removes its finalizer) and the operand is gone.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// Kills `local` when the test ends, passed or not.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn kubectl_delete_returns_once_the_manager_has_deprovisioned() {
    let dir = std::env::temp_dir().join(format!("btp-local-delete-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_btp-manager"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["local", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start btp-manager local");
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("local printed Ready within 60 s");
        if line.contains("Ready / ReconcileSucceeded") {
            break;
        }
    }
    let kubectl = |args: &[&str]| {
        Command::new(kubectl())
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("kubectl must be installed (scripts/test installs it): {e}"))
    };
    // kubectl waits until the object is gone, and gives up (non-zero) after --timeout.
    let delete = kubectl(&[
        "delete",
        "btpoperator",
        "btpoperator",
        "-n",
        "kyma-system",
        "--timeout=10s",
    ]);
    assert!(
        delete.status.success(),
        "kubectl delete did not finish within 10 s: {}{}",
        String::from_utf8_lossy(&delete.stdout),
        String::from_utf8_lossy(&delete.stderr)
    );
    let get = kubectl(&["get", "btpoperators", "-A", "-o", "name"]);
    assert_eq!(String::from_utf8_lossy(&get.stdout).trim(), "", "no BtpOperator left");
    let deploy = kubectl(&["get", "deployments", "-n", "kyma-system", "-o", "name"]);
    assert!(deploy.status.success(), "{}", String::from_utf8_lossy(&deploy.stderr));
    assert!(
        !String::from_utf8_lossy(&deploy.stdout).contains("sap-btp-operator-controller-manager"),
        "the operand Deployment is removed: {}",
        String::from_utf8_lossy(&deploy.stdout)
    );
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}
