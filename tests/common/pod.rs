//! The manager's container run as a process, the way a kubelet runs it: the container's `command` (the image's
//! `/btp-manager` is this build's binary), `args` and `env` as the Pod says, in a mount namespace where the root
//! filesystem is read-only and `/var/run/secrets/kubernetes.io/serviceaccount/` holds the Pod's ServiceAccount
//! token, the cluster's CA and the namespace (kube's in-cluster configuration, found through
//! `KUBERNETES_SERVICE_HOST`/`_PORT`), as the Pod's user and group. Only the listen addresses differ from a Pod
//! (processes share one network here): loopback ports, appended as the last flags.
//!
//! It needs root (a mount namespace, a user switch): [`can_run`] says whether this process has it.
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Container;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// What the kubelet puts into the ServiceAccount volume.
pub struct ServiceAccountFiles {
    pub token: String,
    pub ca_pem: String,
    pub namespace: String,
}

/// How the container is started.
pub struct Launch<'a> {
    pub container: &'a Container,
    /// `runAsUser`, `runAsGroup` of the Pod's security context.
    pub user: (i64, i64),
    pub service_account: &'a ServiceAccountFiles,
    /// Values of the container's `valueFrom.fieldRef` env (`metadata.namespace`, `metadata.name`, ...).
    pub field: &'a dyn Fn(&str) -> Option<String>,
    /// `KUBERNETES_SERVICE_HOST` and `_PORT`.
    pub kubernetes_service: (String, u16),
    /// The Pod's name (the container's hostname).
    pub hostname: &'a str,
    /// Flags appended after the container's `args` (the listen addresses).
    pub extra_args: Vec<String>,
    /// `RUST_LOG` of the process.
    pub rust_log: &'a str,
    /// A directory of its own (the ServiceAccount files are staged there) and where its log goes.
    pub dir: &'a Path,
}

/// Whether this process can start containers (it is root).
pub fn can_run() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// One running container; killed when dropped.
pub struct PodProcess {
    child: Child,
    pub log: PathBuf,
}

impl PodProcess {
    /// Start the container. Errors say what in the Pod cannot be played here.
    pub fn start(launch: Launch<'_>) -> Result<Self, String> {
        let c = launch.container;
        let mut command: Vec<String> = c.command.clone().unwrap_or_default();
        command.extend(c.args.clone().unwrap_or_default());
        if command.first().map(String::as_str) != Some("/btp-manager") {
            return Err(format!(
                "container {}: runs {command:?}, not the image's /btp-manager",
                c.name
            ));
        }
        command[0] = env!("CARGO_BIN_EXE_btp-manager").to_string();
        command.extend(launch.extra_args.iter().cloned());
        let sa = launch.dir.join("serviceaccount");
        std::fs::create_dir_all(&sa).map_err(|e| format!("{}: {e}", sa.display()))?;
        for (file, content) in [
            ("token", &launch.service_account.token),
            ("ca.crt", &launch.service_account.ca_pem),
            ("namespace", &launch.service_account.namespace),
        ] {
            std::fs::write(sa.join(file), content).map_err(|e| format!("{file}: {e}"))?;
        }
        // The mount namespace: a read-only root, the ServiceAccount volume on a fresh /run; then the user.
        let script = format!(
            "set -e; mount --bind / /; mount -o remount,bind,ro /; mount -t tmpfs tmpfs /run; \
             mkdir -p /run/secrets/kubernetes.io/serviceaccount; \
             cp {sa}/token {sa}/ca.crt {sa}/namespace /run/secrets/kubernetes.io/serviceaccount/; \
             chmod 0444 /run/secrets/kubernetes.io/serviceaccount/*; \
             exec setpriv --reuid {uid} --regid {gid} --clear-groups \"$@\"",
            sa = sa.display(),
            uid = launch.user.0,
            gid = launch.user.1,
        );
        let log = launch.dir.join("container.log");
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", &script, "pod"])
            .args(&command)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOSTNAME", launch.hostname)
            .env("KUBERNETES_SERVICE_HOST", &launch.kubernetes_service.0)
            .env("KUBERNETES_SERVICE_PORT", launch.kubernetes_service.1.to_string())
            .env("RUST_LOG", launch.rust_log)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for e in c.env.clone().unwrap_or_default() {
            let value = match (&e.value, e.value_from.as_ref().and_then(|v| v.field_ref.as_ref())) {
                (Some(v), _) => v.clone(),
                (None, Some(field)) => (launch.field)(&field.field_path)
                    .ok_or_else(|| format!("env {}: fieldRef {} is not played here", e.name, field.field_path))?,
                (None, None) => return Err(format!("env {}: only value and fieldRef are played here", e.name)),
            };
            cmd.env(&e.name, value);
        }
        let child = cmd.spawn().map_err(|e| format!("starting the container: {e}"))?;
        Ok(Self { child, log })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `kill -<signal>` the container's process (the `unshare` has exec'd into it).
    pub fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status();
    }

    /// The exit status, once it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// What it logged so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PodProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            // A stopped process dies of SIGKILL too; continue it anyway so nothing is left stopped.
            self.signal("CONT");
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
