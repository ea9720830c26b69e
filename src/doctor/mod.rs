//! `btp-manager doctor`: is BTP Manager healthy in this cluster? One read-only pass over the current
//! kubeconfig's cluster (it writes nothing: its only non-read requests are SubjectAccessReviews and a
//! server-side dry-run create), one line per check with its verdict and what to do. The decisions are in
//! [`checks`], the reads in [`observe`], the output in [`report`], where to look in [`target`]. `btp-manager
//! check admission --wait` ([`wait`]) repeats the `admission` check alone until it passes, for install scripts.

pub mod checks;
pub mod egress;
pub mod observe;
pub mod report;
pub mod target;
pub mod wait;

pub use report::{Check, Report, Verdict};
pub use target::Target;

/// Every check against the cluster of `client`.
pub async fn diagnose(client: &kube::Client, target: &Target) -> Report {
    observe::all(client, target).await
}

/// `btp-manager doctor`: print the report; healthy (exit code 0) when nothing failed.
pub async fn run(args: crate::cli::DoctorArgs) -> anyhow::Result<bool> {
    let client = crate::manager::kubeconfig_client(args.kubeconfig.as_deref(), "doctor").await?;
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
