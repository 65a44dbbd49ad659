//! Command line: `gavel test` and `gavel apply`, offline front ends to the
//! engine, and `gavel serve`, the admission server. Raw flags become
//! validated settings here, once.

pub mod apply;
pub mod kyverno_test;
pub mod resources;
pub mod serve;
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
    /// Serve AdmissionReviews over HTTPS (standalone: policies from a directory).
    Serve(Box<ServeArgs>),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion { shell: clap_complete::Shell },
}

/// The name a kubectl plugin is installed under: kubectl runs
/// `kubectl-gavel` for `kubectl gavel ...`.
pub const KUBECTL_PLUGIN: &str = "kubectl-gavel";

/// The command line, named as the user typed it: `gavel`, or `kubectl
/// gavel` when run as the kubectl plugin (as Kyverno's CLI is `kubectl
/// kyverno`), so that help and errors show the command to type.
pub fn parse() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let invoked = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let mut command = Cli::command();
    if invoked.as_deref() == Some(KUBECTL_PLUGIN) {
        command = command.bin_name("kubectl gavel");
    }
    let matches = command.get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub listen: std::net::SocketAddr,
    /// Directory of ClusterPolicy, Policy and PolicyException YAML files, polled for changes.
    #[arg(long, default_value = "examples/policies")]
    pub policies: PathBuf,
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Subject alternative names of a generated certificate.
    #[arg(long = "tls-san", default_values = ["localhost", "127.0.0.1"])]
    pub tls_san: Vec<String>,
    /// Where a generated CA certificate is written.
    #[arg(long, default_value = "gavel-ca.pem")]
    pub ca_out: PathBuf,
    /// Seconds the server keeps serving after SIGTERM, with readiness
    /// false, while Kubernetes removes its endpoint (HTTP/1.1 answers
    /// carry `Connection: close` meanwhile).
    #[arg(long, default_value_t = 5)]
    pub shutdown_delay_seconds: u64,
    /// Seconds in-flight requests then get to finish, with no new
    /// connections accepted.
    #[arg(long, default_value_t = 15)]
    pub grace_seconds: u64,
    /// Seconds between scans of the policy directory and certificate files.
    #[arg(long, default_value_t = 2)]
    pub poll_seconds: u64,
    /// Connections served at once; at the cap, the longest idle are
    /// closed to make room.
    #[arg(long, default_value_t = 4096)]
    pub max_connections: usize,
    /// Seconds for a TLS handshake, for the first request of a connection
    /// and for each HTTP/1.1 request head (slow clients are cut off).
    #[arg(long, default_value_t = 10.0)]
    pub header_timeout_seconds: f64,
    /// Seconds a connection may stay idle; keep it over the clients' own
    /// idle timeout (90 s for Go's, the API server's), so that they close first.
    #[arg(long, default_value_t = 120.0)]
    pub idle_timeout_seconds: f64,
    /// Seconds a review may take before its failurePolicy decides it;
    /// keep it a little under the webhook's timeoutSeconds.
    #[arg(long, default_value_t = 10.0)]
    pub deadline_seconds: f64,
    /// Cluster mode with this kubeconfig. Without it, cluster mode uses the
    /// in-cluster service account when KUBERNETES_SERVICE_HOST is set.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Serve the policy directory even inside a cluster.
    #[arg(long, conflicts_with = "kubeconfig")]
    pub standalone: bool,
    /// Sustained API requests per second of the client feeding the stores.
    #[arg(long, alias = "clientRateLimitQPS", default_value_t = 50.0)]
    pub client_qps: f64,
    /// Requests the store client may make at once above its rate.
    #[arg(long, alias = "clientRateLimitBurst", default_value_t = 100)]
    pub client_burst: u32,
    /// Sustained API requests per second of the fallback client that serves store misses.
    #[arg(long, default_value_t = 20.0)]
    pub fallback_client_qps: f64,
    #[arg(long, default_value_t = 50)]
    pub fallback_client_burst: u32,
    /// Seconds an object fetched by the API fallback stays cached.
    #[arg(long, default_value_t = 30)]
    pub fallback_cache_ttl_seconds: u64,
    /// Objects the API fallback cache holds at most.
    #[arg(long, default_value_t = 10_000)]
    pub fallback_cache_capacity: u64,
    /// Largest apiCall response (bytes) accepted, for context entries and
    /// GlobalContextEntries alike.
    #[arg(long, alias = "maxAPICallResponseLength", default_value_t = 10_000_000)]
    pub max_api_call_response_length: usize,
    /// Namespace gavel runs in: its Leases live there, and its webhooks skip it.
    #[arg(long, env = "POD_NAMESPACE", default_value = "gavel")]
    pub namespace: String,
    /// This replica's identity in leader election.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    #[arg(long, default_value_t = 15.0)]
    pub lease_duration_seconds: f64,
    #[arg(long, default_value_t = 10.0)]
    pub renew_deadline_seconds: f64,
    #[arg(long, alias = "leaderElectionRetryPeriod", default_value_t = 2.0)]
    pub retry_period_seconds: f64,
    /// UpdateRequests the background controller works on at once (Kyverno's
    /// background controller flag of the same name).
    #[arg(long, alias = "genWorkers", default_value_t = 10)]
    pub gen_workers: usize,
    /// Tries of a failing UpdateRequest before it is left Failed.
    #[arg(long, default_value_t = 5)]
    pub update_request_retries: u64,
    /// Time between background scans that write PolicyReports (Kyverno's
    /// `--backgroundScanInterval`); 0 turns the scans off.
    #[arg(long, alias = "backgroundScanInterval", default_value = "1h", value_parser = parse_duration)]
    pub background_scan_interval: std::time::Duration,
    /// Time between discoveries of the API's kinds by the cleanup
    /// controller: new kinds get their TTL-label watch, and the kinds
    /// cleanup policies name are resolved (Kyverno's
    /// `--ttlReconciliationInterval`).
    #[arg(long, alias = "ttlReconciliationInterval", default_value = "1m", value_parser = parse_duration)]
    pub ttl_reconciliation_interval: std::time::Duration,
    /// Write the results of admitted reviews into the resources'
    /// PolicyReports (Kyverno's `--admissionReports`).
    #[arg(long, alias = "admissionReports", default_value_t = true, action = clap::ArgAction::Set)]
    pub admission_reports: bool,
    /// Write reports as openreports.io Report / ClusterReport instead of
    /// wgpolicyk8s.io PolicyReport / ClusterPolicyReport (Kyverno's
    /// `--openreportsEnabled`).
    #[arg(long, alias = "openreportsEnabled", default_value_t = false, action = clap::ArgAction::Set)]
    pub openreports_enabled: bool,
    /// Event reasons not written (Kyverno's `--omitEvents`; its chart's
    /// default omits successes): PolicyApplied, PolicyError, ...
    #[arg(
        long,
        alias = "omitEvents",
        value_delimiter = ',',
        default_value = "PolicyApplied,PolicySkipped"
    )]
    pub omit_events: Vec<String>,
    /// Events held for writing before new ones are dropped (Kyverno's
    /// `--maxQueuedEvents`).
    #[arg(long, alias = "maxQueuedEvents", default_value_t = 1000)]
    pub max_queued_events: usize,
    /// UpdateRequests a replica holds for writing before it drops new ones.
    #[arg(long, default_value_t = 10_000)]
    pub update_request_queue: usize,
    /// Name of the ValidatingWebhookConfiguration the leader maintains.
    #[arg(long, default_value = "gavel-resource-validating-webhook-cfg")]
    pub webhook_config_name: String,
    /// Name of the MutatingWebhookConfiguration the leader maintains.
    #[arg(long, default_value = "gavel-resource-mutating-webhook-cfg")]
    pub mutating_webhook_config_name: String,
    /// Name of the ValidatingWebhookConfiguration that checks policies
    /// and TTL labels as they are written (Kyverno's policy and TTL
    /// validating webhooks).
    #[arg(long, default_value = "gavel-policy-validating-webhook-cfg")]
    pub policy_webhook_config_name: String,
    /// The Service the API server calls (in gavel's namespace).
    #[arg(long, default_value = "gavel-svc")]
    pub service_name: String,
    #[arg(long, default_value_t = 443)]
    pub service_port: i32,
    /// Call gavel at this base URL (`https://host:port`) instead of the
    /// Service: gavel running outside the cluster.
    #[arg(long, alias = "serverIP")]
    pub webhook_url: Option<String>,
    /// timeoutSeconds of the webhooks (1 to 30).
    #[arg(long, alias = "webhookTimeout", default_value_t = 10)]
    pub webhook_timeout: i32,
    /// namespaceSelector of every webhook, as JSON (the chart's
    /// config.webhooks.namespaceSelector, Kyverno's name); gavel's own
    /// namespace is added to it unless --exclude-own-namespace=false.
    #[arg(
        long,
        default_value = r#"{"matchExpressions":[{"key":"kubernetes.io/metadata.name","operator":"NotIn","values":["kube-system"]}]}"#
    )]
    pub webhook_namespace_selector: String,
    /// objectSelector of the webhooks of policies, as JSON (the chart's
    /// config.webhooks.objectSelector).
    #[arg(long, default_value = "{}")]
    pub webhook_object_selector: String,
    /// Never send gavel requests about its own namespace (Kyverno's
    /// excludeKyvernoNamespace): a broken gavel cannot block its own
    /// recovery.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub exclude_own_namespace: bool,
    /// Register every webhook of policies with failurePolicy Ignore.
    #[arg(long, alias = "forceFailurePolicyIgnore")]
    pub force_failure_policy_ignore: bool,
    /// Annotations of the webhook configurations, as a JSON object
    /// (Kyverno's webhookAnnotations).
    #[arg(long, default_value = "{}")]
    pub webhook_annotations: String,
    /// Labels of the webhook configurations, as a JSON object (Kyverno's
    /// webhookLabels).
    #[arg(long, default_value = "{}")]
    pub webhook_labels: String,
    /// ClusterRole that owns the webhook configurations: deleting it (helm
    /// uninstall does) garbage-collects them. The chart passes its own.
    #[arg(long)]
    pub owner_cluster_role: Option<String>,
    /// Seconds between checks of the webhook configuration by the leader.
    #[arg(long, default_value_t = 10.0)]
    pub webhook_resync_seconds: f64,
    /// CA of operator-provided serving certificates, for the caBundle.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// Secret of the CA the leader maintains (default `<service>.<namespace>.svc.gavel-tls-ca`).
    #[arg(long, alias = "caSecretName")]
    pub ca_secret_name: Option<String>,
    /// Secret of the serving pair (default `<service>.<namespace>.svc.gavel-tls-pair`).
    #[arg(long, alias = "tlsSecretName")]
    pub tls_secret_name: Option<String>,
    /// Lifetime of a CA the leader creates (default one year).
    #[arg(long, default_value_t = 365.0 * 86400.0)]
    pub ca_validity_seconds: f64,
    /// Lifetime of a serving certificate the leader issues (default 150 days).
    #[arg(long, default_value_t = 150.0 * 86400.0)]
    pub cert_validity_seconds: f64,
    /// Renew certificates this long before they expire (default 15 days).
    #[arg(long, default_value_t = 15.0 * 86400.0)]
    pub renew_before_seconds: f64,
    /// Seconds between expiry checks by the leader (Secret changes also trigger one).
    #[arg(long, default_value_t = 12.0 * 3600.0)]
    pub cert_resync_seconds: f64,
    /// Cache every ConfigMap, not only those labelled cache.kyverno.io/enabled=true.
    #[arg(long)]
    pub cache_all_configmaps: bool,
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    pub log_level: tracing::Level,
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
    /// Write mutated and generated resources to this file, or into this
    /// directory (one file each).
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
    /// Params of parameterised CEL policies (validate.cel paramKind,
    /// ValidatingAdmissionPolicy and MutatingAdmissionPolicy bindings).
    #[arg(long = "parameter-resource")]
    pub parameter_resources: Vec<PathBuf>,
    /// PolicyException files (kyverno.io and policies.kyverno.io).
    #[arg(
        short = 'e',
        long = "exception",
        alias = "exceptions",
        value_delimiter = ','
    )]
    pub exceptions: Vec<PathBuf>,
    /// Take the PolicyExceptions among the resources instead (they are
    /// then no resources); `--exception` is not read.
    #[arg(
        long = "exceptions-within-resources",
        alias = "exceptions-with-resources"
    )]
    pub exceptions_within_resources: bool,
    /// Also take the PolicyExceptions in the policy files, which are
    /// otherwise not read (as `kyverno apply`).
    #[arg(long = "exceptions-within-policies")]
    pub exceptions_within_policies: bool,
}

/// Runs the command line; returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Command::Test(args) => kyverno_test::run(&args),
        Command::Apply(args) => apply::run(&args),
        Command::Completion { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "gavel", &mut std::io::stdout());
            Ok(0)
        }
        Command::Serve(args) => {
            let logs = tracing_subscriber::fmt()
                .with_max_level(args.log_level)
                .with_writer(std::io::stderr);
            match args.log_format {
                LogFormat::Json => logs.json().init(),
                LogFormat::Text => logs.init(),
            }
            let cluster = cluster_options(&args)?;
            serve::serve(serve::ServeOptions {
                listen: args.listen,
                policies: args.policies,
                tls_cert: args.tls_cert,
                tls_key: args.tls_key,
                tls_san: args.tls_san,
                ca_out: args.ca_out,
                drain: crate::server::Drain {
                    delay: std::time::Duration::from_secs(args.shutdown_delay_seconds),
                    grace: std::time::Duration::from_secs(args.grace_seconds),
                },
                poll: std::time::Duration::from_secs(args.poll_seconds.max(1)),
                connections: crate::server::ConnectionLimits {
                    max_connections: args.max_connections.max(1),
                    header_timeout: positive_seconds(
                        args.header_timeout_seconds,
                        "--header-timeout-seconds",
                    )?,
                    idle_timeout: positive_seconds(
                        args.idle_timeout_seconds,
                        "--idle-timeout-seconds",
                    )?,
                },
                deadline: positive_seconds(args.deadline_seconds, "--deadline-seconds")?,
                cluster,
            })?;
            Ok(0)
        }
    }
}

fn positive_seconds(seconds: f64, flag: &str) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| anyhow::anyhow!("{flag} must be a positive number"))
}

/// Cluster mode when a kubeconfig is given, or inside a cluster unless
/// `--standalone`; standalone otherwise.
/// The webhooks' selectors and marks from their JSON flags; a value that is
/// not the JSON of its type stops the server with the reason.
fn webhook_selection(
    args: &ServeArgs,
) -> anyhow::Result<crate::controllers::webhooks::WebhookSelection> {
    use anyhow::Context;
    fn parse<T: serde::de::DeserializeOwned>(flag: &str, text: &str) -> anyhow::Result<T> {
        serde_json::from_str(text).with_context(|| format!("--{flag}: not valid: {text}"))
    }
    let namespaces: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector = parse(
        "webhook-namespace-selector",
        &args.webhook_namespace_selector,
    )?;
    let own = match args.exclude_own_namespace {
        true => vec![args.namespace.clone()],
        false => Vec::new(),
    };
    Ok(crate::controllers::webhooks::WebhookSelection {
        namespace_selector: crate::controllers::webhooks::WebhookSelection::excluding(
            namespaces, &own,
        ),
        object_selector: parse("webhook-object-selector", &args.webhook_object_selector)?,
        force_failure_policy_ignore: args.force_failure_policy_ignore,
        annotations: parse("webhook-annotations", &args.webhook_annotations)?,
        labels: parse("webhook-labels", &args.webhook_labels)?,
    })
}

fn cluster_options(args: &ServeArgs) -> anyhow::Result<Option<serve::ClusterOptions>> {
    let in_cluster = std::env::var_os("KUBERNETES_SERVICE_HOST").is_some();
    if args.standalone || (args.kubeconfig.is_none() && !in_cluster) {
        return Ok(None);
    }
    let (renew_before, ca_validity, cert_validity) = (
        seconds(args.renew_before_seconds),
        seconds(args.ca_validity_seconds),
        seconds(args.cert_validity_seconds),
    );
    anyhow::ensure!(
        renew_before < ca_validity && renew_before < cert_validity,
        "--renew-before-seconds must be shorter than both validities"
    );
    let (ca_secret, pair_secret) = crate::controllers::certificates::CertOptions::secret_names(
        &args.service_name,
        &args.namespace,
    );
    let svc = &args.service_name;
    let ns = &args.namespace;
    let mut sans = vec![
        svc.clone(),
        format!("{svc}.{ns}"),
        format!("{svc}.{ns}.svc"),
    ];
    if let Some(host) = args.webhook_url.as_deref().and_then(url_host) {
        sans.push(host);
    }
    for san in &args.tls_san {
        if !sans.contains(san) {
            sans.push(san.clone());
        }
    }
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let report_api = if args.openreports_enabled {
        crate::admission::reports::ReportApi::OpenReports
    } else {
        crate::admission::reports::ReportApi::PolicyReport
    };
    Ok(Some(serve::ClusterOptions {
        client: crate::cluster::client::ClientOptions {
            kubeconfig: args.kubeconfig.clone(),
            qps: args.client_qps,
            burst: args.client_burst,
            fallback_qps: args.fallback_client_qps,
            fallback_burst: args.fallback_client_burst,
        },
        stores: crate::cluster::stores::StoreOptions {
            cache_all_config_maps: args.cache_all_configmaps,
        },
        debounce: std::time::Duration::from_millis(200),
        lease: crate::controllers::leader::LeaseOptions {
            namespace: args.namespace.clone(),
            identity: identity.clone(),
            lease_duration: seconds(args.lease_duration_seconds),
            renew_deadline: seconds(args.renew_deadline_seconds),
            retry_period: seconds(args.retry_period_seconds),
            leading: Default::default(),
            owner_cluster_role: args.owner_cluster_role.clone(),
        },
        webhook: serve::WebhookSettings {
            validating_name: args.webhook_config_name.clone(),
            mutating_name: args.mutating_webhook_config_name.clone(),
            policy_validating_name: args.policy_webhook_config_name.clone(),
            target: match &args.webhook_url {
                Some(url) => crate::controllers::webhooks::WebhookTarget::Url(
                    url.trim_end_matches('/').to_string(),
                ),
                None => crate::controllers::webhooks::WebhookTarget::Service {
                    namespace: args.namespace.clone(),
                    name: args.service_name.clone(),
                    port: args.service_port,
                },
            },
            timeout_seconds: args.webhook_timeout,
            selection: webhook_selection(args)?,
            resync: seconds(args.webhook_resync_seconds),
            ca_file: args.tls_ca.clone(),
            owner_cluster_role: args.owner_cluster_role.clone(),
        },
        fallback_cache: crate::cluster::api::CacheOptions {
            ttl: std::time::Duration::from_secs(args.fallback_cache_ttl_seconds.max(1)),
            capacity: args.fallback_cache_capacity,
            max_response_bytes: args.max_api_call_response_length,
        },
        update_requests: crate::cluster::update_requests::WriterOptions {
            namespace: args.namespace.clone(),
            queue: args.update_request_queue,
            workers: 4,
        },
        background: crate::controllers::background::BackgroundOptions {
            namespace: args.namespace.clone(),
            workers: args.gen_workers,
            max_retries: args.update_request_retries.max(1),
            policy_poll: std::time::Duration::from_secs(1),
        },
        admission_reports: args.admission_reports.then(|| {
            crate::cluster::policy_reports::AdmissionReportOptions {
                queue: 10_000,
                workers: 2,
                delay: std::time::Duration::from_secs(3),
                api: report_api,
            }
        }),
        cleanup: crate::controllers::cleanup::CleanupOptions {
            interval: args
                .ttl_reconciliation_interval
                .max(std::time::Duration::from_secs(1)),
            page_size: 500,
            workers: 3,
            max_tries: 3,
        },
        events: crate::cluster::events::EventOptions {
            max_queued: args.max_queued_events,
            omit: args
                .omit_events
                .iter()
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .collect(),
            instance: identity.clone(),
        },
        reports: crate::controllers::reports::ReportOptions {
            interval: args.background_scan_interval,
            page_size: 500,
            debounce: std::time::Duration::from_secs(5),
            api: report_api,
        },
        certificates: crate::controllers::certificates::CertOptions {
            namespace: args.namespace.clone(),
            ca_secret: args.ca_secret_name.clone().unwrap_or(ca_secret),
            pair_secret: args.tls_secret_name.clone().unwrap_or(pair_secret),
            sans,
            ca_validity,
            cert_validity,
            renew_before,
            resync: seconds(args.cert_resync_seconds),
            owner_cluster_role: args.owner_cluster_role.clone(),
        },
    }))
}

/// The host of `https://host:port/...` (brackets of an IPv6 literal removed).
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next()?;
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_string())
}

fn seconds(s: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(s.max(0.1)).unwrap_or(std::time::Duration::from_secs(1))
}

/// The host name, or a random suffix: identities must differ between replicas.
fn default_identity() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| format!("gavel-{}", std::process::id()))
}

/// A Go duration (`1h`, `90s`, `1h30m`) as the flags Kyverno takes it.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let d = crate::units::Duration::parse(text)
        .ok_or_else(|| format!("{text:?} is not a duration (e.g. 1h, 30m, 90s)"))?;
    if d.seconds() < 0.0 {
        return Err(format!("{text:?} is negative"));
    }
    Ok(std::time::Duration::from_secs_f64(d.seconds()))
}
