//! The rows of the one table `scripts/bench` prints. When `BTP_BENCH_SUMMARY` names a file, every figure a
//! benchmark measured is appended to it as one tab-separated line: benchmark, figure, measured value,
//! target (empty when the project sets none) and verdict (`met`, `MISSED`, or empty without a target).
//! Without the variable nothing is written. Shared by the benchmarks of every crate (`#[path]`).
#![allow(dead_code)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

pub struct Summary {
    benchmark: String,
    file: Option<PathBuf>,
    write_failed: bool,
}

impl Summary {
    /// Rows of `benchmark`, written to the file `BTP_BENCH_SUMMARY` names (if any).
    pub fn from_env(benchmark: impl Into<String>) -> Self {
        Summary {
            benchmark: benchmark.into(),
            file: std::env::var_os("BTP_BENCH_SUMMARY")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            write_failed: false,
        }
    }

    /// A figure without a target.
    pub fn figure(&mut self, figure: &str, value: &str) {
        self.append(figure, value, "", "");
    }

    /// A figure with its target and whether it was met.
    pub fn against(&mut self, figure: &str, value: &str, target: &str, met: bool) {
        self.append(figure, value, target, if met { "met" } else { "MISSED" });
    }

    /// `ExitCode::FAILURE` when a row could not be written (said on stderr), so the table never lacks a
    /// figure silently.
    pub fn exit_code(&self) -> ExitCode {
        if self.write_failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }

    fn append(&mut self, figure: &str, value: &str, target: &str, verdict: &str) {
        let Some(path) = &self.file else { return };
        let line = [self.benchmark.as_str(), figure, value, target, verdict]
            .map(|field| field.replace(['\t', '\n', '\r'], " "))
            .join("\t");
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            eprintln!(
                "{}: cannot append to the summary file {} (BTP_BENCH_SUMMARY): {e}",
                self.benchmark,
                path.display()
            );
            self.write_failed = true;
        }
    }
}
