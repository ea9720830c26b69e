//! `btp-manager local`, as a user runs it: the binary, its output, and kubectl against it.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn binary() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_btp-manager"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
    cmd
}

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

#[test]
fn local_once_reaches_ready_and_shows_the_webhook_refusal() {
    let dir = std::env::temp_dir().join(format!("btp-local-once-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = binary()
        .args(["local", "--once", "--timeout", "60s", "--kubeconfig"])
        .arg(dir.join("kubeconfig"))
        .output()
        .expect("run btp-manager local --once");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("refused as expected: kyma-system/btpoperator-test"),
        "{stdout}"
    );
    assert!(
        stdout.contains("denied the request: BtpOperator must be named \"btpoperator\""),
        "{stdout}"
    );
    assert!(stdout.contains("Processing / Initialized"), "{stdout}");
    assert!(
        stdout.contains("Ready / ReconcileSucceeded — Module provisioning succeeded"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn kubectl_against_local_sees_ready_and_a_refused_apply() {
    let dir = std::env::temp_dir().join(format!("btp-local-kubectl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = binary()
        .args(["local", "--kubeconfig"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start btp-manager local");
    let stdout = child.stdout.take().unwrap();
    let running = Running(child);
    // Wait (with a deadline) for the Ready line.
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
    let get = kubectl(&[
        "get",
        "btpoperators",
        "-n",
        "kyma-system",
        "-o",
        "jsonpath={.items[0].status.state}",
    ]);
    assert!(get.status.success(), "{}", String::from_utf8_lossy(&get.stderr));
    assert_eq!(String::from_utf8_lossy(&get.stdout), "Ready");

    let manifest = dir.join("misnamed.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: operator.kyma-project.io/v1alpha1\nkind: BtpOperator\nmetadata:\n  name: btpoperator\n  namespace: default\n",
    )
    .unwrap();
    let apply = kubectl(&["apply", "-f", manifest.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&apply.stderr);
    assert!(!apply.status.success(), "a misnamed BtpOperator must be refused");
    assert!(stderr.contains("denied the request"), "{stderr}");
    assert!(
        stderr.contains("namespace \"default\"") && stderr.contains("kyma-system/btpoperator"),
        "{stderr}"
    );
    drop(running);
    let _ = std::fs::remove_dir_all(&dir);
}
