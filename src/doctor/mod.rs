//! `btp-manager doctor`: is BTP Manager healthy in this cluster? One read-only pass over the current
//! kubeconfig's cluster (it writes nothing: its only non-read requests are SubjectAccessReviews and a
//! server-side dry-run create), one line per check with its verdict and what to do. The decisions are in
//! [`checks`], the reads in [`observe`], the output in [`report`], where to look in [`target`].

pub mod checks;
pub mod egress;
pub mod observe;
pub mod report;
pub mod target;

pub use report::{Check, Report, Verdict};
pub use target::Target;

use anyhow::Context as _;

/// Every check against the cluster of `client`.
pub async fn diagnose(client: &kube::Client, target: &Target) -> Report {
    observe::all(client, target).await
}

/// `btp-manager doctor`: print the report; healthy (exit code 0) when nothing failed.
pub async fn run(args: crate::cli::DoctorArgs) -> anyhow::Result<bool> {
    let client = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("using the kubeconfig {}", path.display()))?;
            kube::Client::try_from(config).context("building the API client")?
        }
        None => kube::Client::try_default()
            .await
            .context("connecting with the current kubeconfig (or in-cluster configuration)")?,
    };
    let target = Target {
        namespace: args.namespace,
        service_account: args.service_account,
    };
    let report = diagnose(&client, &target).await;
    match args.output {
        crate::cli::DoctorOutput::Text => print!("{}", report.to_text()),
        crate::cli::DoctorOutput::Json => println!("{}", report.to_json()),
    }
    Ok(report.healthy())
}
