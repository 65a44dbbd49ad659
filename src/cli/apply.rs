//! `gavel apply`: policies against resource files, with `kyverno apply`'s
//! output and exit codes (docs/kyverno-test-semantics.md#kyverno-apply).

use super::ApplyArgs;
use super::resources::{load_objects_as_written, load_resources};
use super::values::{PolicyRuleValues, Values};
use crate::admission::evaluation::{self, Inputs, Mode};
use crate::admission::policies::Snapshot;
use crate::context::{Objects, Resolver};
use crate::engine::json_context::JsonContext;
use crate::engine::{PolicyResponse, RuleResponse, RuleStatus, RuleValues};
use crate::matching::types::LabelSelector;
use crate::policy::cel_policy::{
    CompiledGeneratingPolicy, CompiledImageValidatingPolicy, CompiledMutatingPolicy,
    CompiledValidatingPolicy, MatchConstraints,
};
use crate::policy::load::{parse_yaml_documents, read_file};
use crate::policy::set::{LoadOptions, Loader};
use crate::policy::{CompiledPolicy, ReportMeta};
use serde_json::{Map, Value, json};

/// What `kyverno apply` gives the evaluation: the values file (global
/// and rule values, namespace labels, the operation) and the parameter
/// resources as the only objects.
struct ApplyInputs<'a> {
    values: &'a Values,
    resolver: &'a dyn Resolver,
    operation: String,
}

impl Inputs for ApplyInputs<'_> {
    fn resolver(&self) -> &dyn Resolver {
        self.resolver
    }

    fn operation(&self) -> &str {
        &self.operation
    }

    fn namespace_labels(&self, namespace: &str) -> Option<Map<String, Value>> {
        self.values.namespace_labels.get(namespace).cloned()
    }

    fn fill_context(&self, ctx: &mut JsonContext, _: Option<&CompiledPolicy>, _: &Value) {
        for (k, v) in &self.values.global {
            ctx.set_path(k, v.clone());
        }
    }

    fn rule_values(&self, policy: &CompiledPolicy) -> Box<dyn RuleValues + '_> {
        Box::new(PolicyRuleValues(self.values.rules.get(&policy.name)))
    }
}

fn policy_files(paths: &[std::path::PathBuf]) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<_> = std::fs::read_dir(p)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect();
            entries.sort();
            out.extend(
                entries
                    .into_iter()
                    .filter(|e| e.extension().is_some_and(|x| x == "yaml" || x == "yml")),
            );
        } else {
            out.push(p.clone());
        }
    }
    out
}

/// The policy behind a response, for counting and the report.
#[derive(Clone, Copy)]
enum Source<'p> {
    Classic(&'p CompiledPolicy),
    Validating(&'p CompiledValidatingPolicy),
    Mutating(&'p CompiledMutatingPolicy),
    Generating(&'p CompiledGeneratingPolicy),
    ImageValidating(&'p CompiledImageValidatingPolicy),
}

impl<'p> Source<'p> {
    fn report_meta(self) -> &'p ReportMeta {
        match self {
            Source::Classic(p) => &p.report,
            Source::Validating(p) => &p.report,
            Source::Mutating(p) => &p.report,
            Source::Generating(p) => &p.report,
            Source::ImageValidating(p) => &p.report,
        }
    }

    /// The rule's name as Kyverno prints it.
    fn rule_name<'r>(self, rule: &'r RuleResponse) -> &'r str {
        match self {
            Source::Classic(_) => rule.name,
            // Kubernetes' admission policies report the policy's name.
            Source::Validating(p) if p.scope.kind == "ValidatingAdmissionPolicy" => rule.name,
            Source::Mutating(p) if p.admission_policy => rule.name,
            Source::Validating(p) => cel_rule_name(rule, &p.scope.name),
            Source::Mutating(p) => cel_rule_name(rule, &p.scope.name),
            Source::ImageValidating(p) => cel_rule_name(rule, &p.scope.name),
            // Kyverno's GeneratingPolicy engine names its result after
            // the policy.
            Source::Generating(_) => rule.name,
        }
    }

    /// (namespace, name) of a policy whose document wrote a namespace:
    /// Kyverno's CLI prints its results in a PolicyReport of their own,
    /// whatever the policy's kind.
    fn namespace(self) -> Option<(String, String)> {
        let meta = self.report_meta();
        let name = match self {
            Source::Classic(p) => &p.name,
            Source::Validating(p) => &p.scope.name,
            Source::Mutating(p) => &p.scope.name,
            Source::Generating(p) => &p.scope.name,
            Source::ImageValidating(p) => &p.scope.name,
        };
        meta.written_namespace
            .as_ref()
            .map(|ns| (ns.clone(), name.clone()))
    }

    /// Audit-only: a classic rule whose failure action is Audit, a
    /// ValidatingPolicy that does not deny.
    fn is_audit(self, rule: &str) -> bool {
        match self {
            Source::Classic(p) => p
                .rules
                .iter()
                .find(|cr| cr.name == rule)
                .is_some_and(|cr| cr.is_audit()),
            Source::Validating(p) => !p.deny,
            Source::ImageValidating(p) => !p.deny,
            Source::Mutating(_) | Source::Generating(_) => false,
        }
    }

    /// The report result of one rule, as Kyverno's CLI writes it
    /// (`ToPolicyReportResult` of v1.19): its `source` per policy kind, the
    /// policy as `namespace/name` when namespaced, no rule name for the CEL
    /// kinds (their responses are unnamed), `process` from the policy's
    /// background and admission settings, the policy's annotations.
    fn report_result(self, rule: &RuleResponse, status: RuleStatus, resource: &Value) -> Value {
        let (source, process) = match self {
            Source::Classic(p) => ("kyverno", process(p.background, p.admission)),
            Source::Validating(p) => (
                match p.scope.kind.as_str() {
                    "ValidatingAdmissionPolicy" => "ValidatingAdmissionPolicy",
                    _ => "KyvernoValidatingPolicy",
                },
                process(p.background, p.admission),
            ),
            Source::Mutating(p) => (
                if p.admission_policy {
                    "MutatingAdmissionPolicy"
                } else {
                    "KyvernoMutatingPolicy"
                },
                process(p.background, p.admission),
            ),
            Source::Generating(_) => ("KyvernoGeneratingPolicy", "admission review"),
            Source::ImageValidating(p) => (
                "KyvernoImageValidatingPolicy",
                process(p.background, p.admission),
            ),
        };
        let rule_name = self.rule_name(rule);
        let meta = self.report_meta();
        // Kyverno's MetaNamespaceKeyFunc of the policy as written.
        let policy = meta.written_key.as_str();
        let mut properties: serde_json::Map<String, Value> = rule
            .properties()
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        // Kyverno sets it even when empty.
        properties.insert("process".into(), process.into());
        let mut result = json!({
            "policy": policy,
            "result": status.as_str(),
            "scored": meta.scored,
            "source": source,
            "properties": properties,
            "resources": [subject(resource)],
            "timestamp": {"nanos": 0, "seconds": now_seconds()},
        });
        let mut optional = |key: &str, value: &str| {
            if !value.is_empty() {
                result[key] = Value::String(value.to_string());
            }
        };
        optional("rule", rule_name);
        optional("message", &rule.message);
        // Only the severities Kyverno knows (SeverityFromString).
        if ["critical", "high", "medium", "low", "info"].contains(&meta.severity.as_str()) {
            optional("severity", &meta.severity);
        }
        optional("category", &meta.category);
        if !meta.scored {
            result.as_object_mut().map(|r| r.remove("scored"));
        }
        result
    }
}

/// Kyverno's `hasSelector` (v1.19 CLI): matchConstraints of one resource
/// rule, without resourceNames, selectors or exclusions.
fn simple_match(m: &MatchConstraints) -> bool {
    let empty = |s: &Option<LabelSelector>| {
        s.as_ref()
            .is_none_or(|s| s.match_labels.is_empty() && s.match_expressions.is_empty())
    };
    empty(&m.namespace_selector)
        && empty(&m.object_selector)
        && m.exclude_resource_rules.is_empty()
        && m.resource_rules.len() == 1
        && m.resource_rules[0].resource_names.is_empty()
}

/// A CEL policy's rule as Kyverno names it: unnamed, except the named
/// outcomes (`exception`).
fn cel_rule_name<'r>(rule: &'r RuleResponse, policy: &str) -> &'r str {
    if rule.name == policy { "" } else { rule.name }
}

/// Kyverno's `process` property: the background scan when the policy runs
/// there, else admission review.
fn process(background: bool, admission: bool) -> &'static str {
    match (background, admission) {
        (true, _) => "background scan",
        (false, true) => "admission review",
        (false, false) => "",
    }
}

/// The ObjectReference of a report result, with the fields Kyverno fills.
fn subject(resource: &Value) -> Value {
    let mut subject = serde_json::Map::new();
    for (key, pointer) in [
        ("apiVersion", "/apiVersion"),
        ("kind", "/kind"),
        ("name", "/metadata/name"),
        ("namespace", "/metadata/namespace"),
        ("uid", "/metadata/uid"),
        ("resourceVersion", "/metadata/resourceVersion"),
    ] {
        if let Some(v) = resource.pointer(pointer).and_then(Value::as_str)
            && !v.is_empty()
        {
            subject.insert(key.into(), v.into());
        }
    }
    Value::Object(subject)
}

/// A PolicyException of either API, as Kyverno's CLI picks them out of
/// the resources.
fn is_policy_exception(doc: &Value) -> bool {
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    doc["kind"] == "PolicyException"
        && (api.starts_with("kyverno.io/") || api.starts_with("policies.kyverno.io/"))
}

fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

pub fn run(args: &ApplyArgs) -> anyhow::Result<i32> {
    let (set, exception_count, resources) = load_inputs(args)?;
    let values = load_values(args)?;
    let mut params = Vec::new();
    for path in &args.parameter_resources {
        params.extend(load_objects_as_written(path)?);
    }
    // The params are the only objects offline; "not found" is an answer.
    let resolver = Objects(&params).resolver();
    let rule_count: usize = set.policies.iter().map(|p| p.rules.len()).sum::<usize>()
        + set.validating.len()
        + set.admission_mutating.len()
        + set.mutating.len()
        + set.generating.len()
        + set.image_validating.len();
    match exception_count {
        0 => eprintln!(
            "Applying {rule_count} policy rule(s) to {} resource(s)...",
            resources.len()
        ),
        n => eprintln!(
            "Applying {rule_count} policy rule(s) to {} resource(s) with {n} exception(s)...",
            resources.len()
        ),
    }
    let inputs = ApplyInputs {
        values: &values,
        resolver: &resolver,
        operation: values.operation(),
    };
    let mut tally = Tally::default();
    let mut outputs = Outputs::new(args.output.as_deref())?;
    for original in &resources {
        let ev = evaluation::evaluate(&set, original, Mode::Apply, &inputs);
        let (responses, resource) = responses_in_order(&set, ev, original, &mut outputs)?;
        for (policy, resp) in responses {
            tally.add(args, policy, &resp, &resource);
        }
    }
    outputs.write()?;
    let Tally {
        pass,
        fail,
        warn,
        error,
        skip,
        report_results,
    } = tally;
    if args.policy_report {
        print_reports(report_results)?;
    } else {
        println!("\npass: {pass}, fail: {fail}, warn: {warn}, error: {error}, skip: {skip} ");
    }

    Ok(if fail > 0 || error > 0 {
        1
    } else if warn > 0 {
        args.warn_exit_code.unwrap_or(0)
    } else {
        0
    })
}

/// Loads the policies, the resources and the exceptions (those of
/// `--exception`, or those taken out of the resources); returns the
/// policies and exceptions as a snapshot, the number of exceptions and the
/// resources. The first policy that does not load is the error.
fn load_inputs(args: &ApplyArgs) -> anyhow::Result<(Snapshot, usize, Vec<Value>)> {
    let mut loader = Loader::new(LoadOptions::apply(args.exceptions_within_policies));
    let rejected = |loader: &Loader, file: &dyn std::fmt::Display| match loader.rejected() {
        [] => Ok(()),
        [first, ..] => Err(anyhow::anyhow!("{file}: {}", first.reason)),
    };
    for path in policy_files(&args.policies) {
        let text = read_file(&path)?;
        loader.add_text(&path.display().to_string(), &text)?;
        rejected(&loader, &path.display())?;
    }
    let mut resources = Vec::new();
    for path in &args.resources {
        resources.extend(load_resources(path)?);
    }
    // The PolicyExceptions of --exception, or those among the resources.
    if args.exceptions_within_resources {
        let (found, rest): (Vec<Value>, Vec<Value>) =
            resources.into_iter().partition(is_policy_exception);
        resources = rest;
        for doc in found {
            loader.add_exceptions_text("resources", &doc.to_string())?;
            rejected(&loader, &"resources")?;
        }
    } else {
        for path in &args.exceptions {
            let text = read_file(path)?;
            loader.add_exceptions_text(&path.display().to_string(), &text)?;
            rejected(&loader, &path.display())?;
        }
    }
    // Admission policies are compiled once every file is read: bindings
    // may come later.
    let (set, rejections) = loader.finish();
    if let Some(first) = rejections.first() {
        anyhow::bail!("{}", first.reason);
    }
    let exception_count = set.exceptions.len() + set.cel_exceptions.len();
    let set = Snapshot::new(set, 1);
    Ok((set, exception_count, resources))
}

/// The values file and `--set`'s values.
fn load_values(args: &ApplyArgs) -> anyhow::Result<Values> {
    let mut values = Values::default();
    if let Some(path) = &args.values_file {
        let text = read_file(path)?;
        if let Some(d) = parse_yaml_documents(&path.display().to_string(), &text)?.first() {
            values =
                Values::parse(d, false).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        }
    }
    for kv in &args.set {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--set expects key=value, got {kv:?}"))?;
        values
            .global
            .insert(k.trim().to_string(), Value::String(v.trim().to_string()));
    }
    Ok(values)
}

/// Responses in printing order, and the resource they are reported on.
type Ordered<'s> = (Vec<(Source<'s>, PolicyResponse<'s>)>, Value);

/// An evaluation's responses in the order `kyverno apply` prints them,
/// the mutated and generated resources emitted on the way: classic
/// mutate, the admission policies and MutatingPolicies, each classic
/// policy's verification, validation and generation, then the
/// ValidatingPolicies, GeneratingPolicies and ImageValidatingPolicies;
/// with the mutated resource they are reported on.
fn responses_in_order<'s>(
    set: &'s Snapshot,
    ev: evaluation::Evaluation<'s>,
    original: &Value,
    outputs: &mut Outputs,
) -> anyhow::Result<Ordered<'s>> {
    let resource = &ev.mutated;
    let mut responses: Vec<(Source, PolicyResponse)> = Vec::new();
    let mut validation = Vec::new();
    for (policy, classic) in set.policies.iter().zip(ev.classic) {
        if let (Some(response), Some(patched)) = (classic.mutate, &classic.patched) {
            // Kyverno emits every mutate policy's response, changed or not.
            outputs.mutated(response.policy, original, patched)?;
            responses.push((Source::Classic(policy), response));
        }
        // The verification phase of verifyImages rules comes first.
        let phases = [
            (classic.verify, false),
            (classic.validate, false),
            (classic.generate, true),
        ];
        for (response, generated) in phases {
            if let Some(response) = response {
                validation.push((policy, response, generated));
            }
        }
    }
    for (phase, result, policies) in [
        (
            ev.admission_mutating,
            &ev.after_admission_mutating,
            &set.admission_mutating,
        ),
        (ev.mutating, &ev.mutated, &set.mutating),
    ] {
        let mut emitted = Vec::new();
        for (i, response) in phase {
            let policy = &policies[i];
            // Kyverno's CLI emits a MutatingPolicy's response even
            // when it did not apply, unless the policy matches in the
            // simple way (its `hasSelector`).
            let applied = !response.rules.is_empty();
            if applied
                || (!policy.admission_policy && !simple_match(&policy.scope.match_constraints))
            {
                emitted.push(policy.key.as_str());
            }
            if applied {
                responses.push((Source::Mutating(policy), response));
            }
        }
        // Each response carries the phase's result, as Kyverno's (the
        // engine's patched resource).
        for policy in emitted {
            outputs.mutated(policy, original, result)?;
        }
    }
    for (policy, response, generated) in validation {
        if generated {
            outputs.generated(&response, resource)?;
        }
        responses.push((Source::Classic(policy), response));
    }
    let applied = |r: &PolicyResponse| !r.rules.is_empty();
    for (i, response) in ev.validating.into_iter().filter(|(_, r)| applied(r)) {
        responses.push((Source::Validating(&set.validating[i]), response));
    }
    for (i, generated) in ev.generating {
        outputs.generated(&generated, resource)?;
        if applied(&generated) {
            responses.push((Source::Generating(&set.generating[i]), generated));
        }
    }
    for (i, response) in ev.image_validating.into_iter().filter(|(_, r)| applied(r)) {
        responses.push((Source::ImageValidating(&set.image_validating[i]), response));
    }
    Ok((responses, ev.mutated))
}

/// The counts, and the report results, of `kyverno apply`'s summary.
#[derive(Default)]
struct Tally {
    pass: usize,
    fail: usize,
    warn: usize,
    error: usize,
    skip: usize,
    report_results: Vec<(Option<(String, String)>, Value)>,
}

impl Tally {
    /// Counts (and prints, as asked) one response's rules.
    fn add(&mut self, args: &ApplyArgs, policy: Source, resp: &PolicyResponse, resource: &Value) {
        let mut failures = Vec::new();
        for r in &resp.rules {
            let audit = policy.is_audit(r.name);
            let mut status = r.status;
            if status == RuleStatus::Fail
                && (!policy.report_meta().scored || (args.audit_warn && audit))
            {
                status = RuleStatus::Warn;
            }
            match status {
                RuleStatus::Pass => self.pass += 1,
                RuleStatus::Fail => {
                    self.fail += 1;
                    failures.push(r);
                }
                RuleStatus::Warn => self.warn += 1,
                RuleStatus::Error => {
                    self.error += 1;
                    failures.push(r);
                }
                RuleStatus::Skip => self.skip += 1,
            }
            if args.detailed_results {
                println!(
                    "policy {} -> resource {}: rule {} {}: {}",
                    resp.policy,
                    describe(resource),
                    r.name,
                    status.as_str(),
                    r.message
                );
            }
            // Every rule's result, of every type, as Kyverno's CLI reports them.
            self.report_results.push((
                policy.namespace(),
                policy.report_result(r, status, resource),
            ));
        }
        if !failures.is_empty() && !args.policy_report {
            // Kyverno lists the failed rules (not the errors) of each response.
            let audit = args.audit_warn && failures.iter().any(|r| policy.is_audit(r.name));
            println!(
                "policy {} -> resource {} failed{}:",
                resp.policy,
                describe(resource),
                if audit { " as audit warning" } else { "" }
            );
            for (i, r) in failures.iter().enumerate() {
                let message = if r.message.is_empty() {
                    "validation failed"
                } else {
                    &r.message
                };
                println!("{} - {} {}", i + 1, policy.rule_name(r), message);
            }
        }
    }
}

/// `-p`: the results as Kyverno's CLI prints them (openreports.io): the
/// cluster-wide policies' results merged into one ClusterReport, then a
/// PolicyReport per namespaced policy; each policy's results together.
fn print_reports(results: Vec<(Option<(String, String)>, Value)>) -> anyhow::Result<()> {
    let mut clustered: Vec<Value> = Vec::new();
    let mut namespaced: Vec<((String, String), Vec<Value>)> = Vec::new();
    let mut policies: Vec<&str> = Vec::new();
    for (owner, result) in &results {
        match owner {
            None => {
                let policy = result["policy"].as_str().unwrap_or_default();
                if !policies.contains(&policy) {
                    policies.push(policy);
                }
            }
            Some(key) => match namespaced.iter_mut().find(|(k, _)| k == key) {
                Some((_, list)) => list.push(result.clone()),
                None => namespaced.push((key.clone(), vec![result.clone()])),
            },
        }
    }
    for policy in policies {
        clustered.extend(
            results
                .iter()
                .filter(|(owner, r)| owner.is_none() && r["policy"] == policy)
                .map(|(_, r)| r.clone()),
        );
    }
    let report = |kind: &str, metadata: Value, results: Vec<Value>| {
        let count = |what: &str| results.iter().filter(|r| r["result"] == what).count();
        json!({
            "apiVersion": "openreports.io/v1alpha1",
            "kind": kind,
            "metadata": metadata,
            "source": "",
            "summary": {
                "pass": count("pass"),
                "fail": count("fail"),
                "warn": count("warn"),
                "error": count("error"),
                "skip": count("skip"),
            },
            "results": results,
        })
    };
    if !clustered.is_empty() {
        let merged = report("ClusterReport", json!({"name": "merged"}), clustered);
        println!("{}", serde_saphyr::to_string(&merged)?);
    }
    for ((namespace, name), list) in namespaced {
        let metadata = json!({"name": name, "namespace": namespace});
        println!(
            "---\n{}",
            serde_saphyr::to_string(&report("PolicyReport", metadata, list))?
        );
    }
    Ok(())
}

/// Mutated and generated resources as `kyverno apply` emits them: each
/// mutate policy's response (the resource after it, changed or not) and
/// each generated resource. Printed without `-o`; with `-o` a path ending
/// in .yaml/.yml is one file holding them all, any other path a directory
/// of `<resource>-mutated.yaml` and `<policy>-generated.yaml` files.
struct Outputs {
    target: Option<(std::path::PathBuf, bool)>,
    /// (file name, text) in emission order; a file name repeats.
    files: Vec<(String, String)>,
}

impl Outputs {
    fn new(output: Option<&std::path::Path>) -> anyhow::Result<Outputs> {
        let target = output.map(|path| {
            let is_file = path.extension().is_some_and(|e| e == "yaml" || e == "yml");
            (path.to_path_buf(), !is_file)
        });
        Ok(Outputs {
            target,
            files: Vec::new(),
        })
    }

    fn mutated(&mut self, policy: &str, trigger: &Value, after: &Value) -> anyhow::Result<()> {
        let name = field(trigger, "/metadata/name");
        self.emit(policy, trigger, after, format!("{name}-mutated.yaml"))
    }

    fn generated(&mut self, generated: &PolicyResponse, trigger: &Value) -> anyhow::Result<()> {
        for g in generated.rules.iter().flat_map(|r| r.resources()) {
            let file = format!("{}-generated.yaml", generated.policy);
            self.emit(generated.policy, trigger, g, file)?;
        }
        Ok(())
    }

    fn emit(
        &mut self,
        policy: &str,
        trigger: &Value,
        doc: &Value,
        file: String,
    ) -> anyhow::Result<()> {
        let text = serde_saphyr::to_string(doc)?;
        if self.target.is_none() {
            println!(
                "\npolicy {policy} applied to {}:\n{text}\n---\n",
                describe(trigger)
            );
        } else {
            self.files.push((file, format!("{text}\n---\n\n")));
        }
        Ok(())
    }

    /// Writes what was emitted (nothing without `-o`), creating the
    /// directory or the file as Kyverno does.
    fn write(self) -> anyhow::Result<()> {
        let Some((path, is_dir)) = self.target else {
            return Ok(());
        };
        let mut texts: Vec<(std::path::PathBuf, String)> = Vec::new();
        if is_dir {
            std::fs::create_dir_all(&path)?;
            for (file, text) in self.files {
                let file = path.join(file);
                match texts.iter_mut().find(|(f, _)| *f == file) {
                    Some((_, all)) => all.push_str(&text),
                    None => texts.push((file, text)),
                }
            }
        } else {
            texts.push((path, self.files.into_iter().map(|(_, t)| t).collect()));
        }
        for (file, text) in texts {
            std::fs::write(&file, text)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", file.display()))?;
        }
        Ok(())
    }
}

fn field<'v>(r: &'v Value, pointer: &str) -> &'v str {
    r.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `namespace/Kind/name`, as Kyverno's CLI names a resource.
fn describe(r: &Value) -> String {
    format!(
        "{}/{}/{}",
        field(r, "/metadata/namespace"),
        field(r, "/kind"),
        field(r, "/metadata/name")
    )
}
