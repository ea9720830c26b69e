//! `btp-manager`: the operator binary.

use btp_manager::{app, cli::Cli, cli::Command, telemetry};
use clap::Parser as _;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crd => app::print_crd(),
        Command::StatusReasons => {
            print!("{}", btp_api::reason::status_reasons_markdown());
            Ok(())
        }
        Command::WebhookManifests { namespace } => app::print_webhook_manifests(&namespace),
        Command::Doctor(args) => {
            telemetry::init(telemetry::Audience::Console);
            match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => match rt.block_on(btp_manager::doctor::run(args)) {
                    Ok(true) => Ok(()),
                    // The report says what failed; the exit code says that something did.
                    Ok(false) => return std::process::ExitCode::FAILURE,
                    Err(e) => Err(e),
                },
                Err(e) => Err(anyhow::Error::new(e).context("starting the async runtime")),
            }
        }
        Command::Check(btp_manager::cli::CheckCommand::Admission(args)) => {
            telemetry::init(telemetry::Audience::Script);
            match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt.block_on(btp_manager::doctor::wait::run(args)),
                Err(e) => Err(anyhow::Error::new(e).context("starting the async runtime")),
            }
        }
        Command::Uninstall(args) => {
            telemetry::init(telemetry::Audience::Console);
            match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt.block_on(btp_manager::uninstall::run(args)),
                Err(e) => Err(anyhow::Error::new(e).context("starting the async runtime")),
            }
        }
        Command::Local(args) => {
            telemetry::init(telemetry::Audience::Console);
            match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt.block_on(btp_manager::local::run(*args)),
                Err(e) => Err(anyhow::Error::new(e).context("starting the async runtime")),
            }
        }
        Command::Run(args) => {
            telemetry::init(telemetry::Audience::Service);
            match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                Ok(rt) => rt.block_on(app::run(*args)),
                Err(e) => Err(anyhow::Error::new(e).context("starting the async runtime")),
            }
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("btp-manager: {}", telemetry::one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}
