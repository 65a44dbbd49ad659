//! Command line: `gavel test` and `gavel apply`, offline front ends to the
//! engine. Raw flags become validated settings here, once.

pub mod apply;
pub mod resources;
pub mod test;
pub mod test_file;
pub mod values;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(
    name = "gavel",
    version,
    about = "Kyverno-compatible policy engine and admission service"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run kyverno-test.yaml files and compare the results they expect.
    Test(TestArgs),
    /// Apply policies to resource files and report the results.
    Apply(ApplyArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// Folders (searched recursively) or test files.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Name of the test files to look for.
    #[arg(short = 'f', long = "file-name", default_value = "kyverno-test.yaml")]
    pub file_name: String,
    /// Filter results: `policy=<p>,rule=<r>,resource=<n>` (wildcards allowed).
    #[arg(
        short = 't',
        long = "test-case-selector",
        default_value = "policy=*,rule=*,resource=*"
    )]
    pub test_case_selector: String,
    /// Print only failed rows.
    #[arg(long)]
    pub fail_only: bool,
    /// Add the rule message to each row.
    #[arg(long)]
    pub detailed_results: bool,
    /// No ANSI colours.
    #[arg(long)]
    pub remove_color: bool,
    #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
    pub output: OutputFormat,
}

#[derive(Debug, clap::Args)]
pub struct ApplyArgs {
    /// Policy files or folders.
    #[arg(required = true)]
    pub policies: Vec<PathBuf>,
    /// Resource files.
    #[arg(short = 'r', long = "resource", required = true, num_args = 1..)]
    pub resources: Vec<PathBuf>,
    /// A Values file (cli.kyverno.io/v1alpha1).
    #[arg(short = 'f', long = "values-file")]
    pub values_file: Option<PathBuf>,
    /// Variables as `key=value`, comma separated.
    #[arg(short = 's', long = "set", value_delimiter = ',')]
    pub set: Vec<String>,
    /// Print a ClusterPolicyReport.
    #[arg(short = 'p', long = "policy-report")]
    pub policy_report: bool,
    /// Print every rule result with its message.
    #[arg(long)]
    pub detailed_results: bool,
    /// Report failures of Audit policies as warnings.
    #[arg(long)]
    pub audit_warn: bool,
    /// Exit code when there are warnings but no failures.
    #[arg(long)]
    pub warn_exit_code: Option<i32>,
}

/// Runs the command line; returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Test(args) => test::run(&args),
        Command::Apply(args) => apply::run(&args),
    }
}
