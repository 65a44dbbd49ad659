//! `gavel apply`: policies against resource files, with `kyverno apply`'s
//! output and exit codes (§16.1).

use super::ApplyArgs;
use super::resources::{load_objects_as_written, load_resources};
use super::values::{PolicyRuleValues, Values};
use crate::admission::phases::{self, Chaining, MutatingPhase, Visit};
use crate::context::Objects;
use crate::engine::cel::{CelRequest, evaluate_generating_policy, evaluate_validating_policy};
use crate::engine::generate::generate_policy;
use crate::engine::mutate::mutate_policy;
use crate::engine::validate::evaluate_policy;
use crate::engine::{EvalEnv, PolicyResponse, Request, RuleStatus, RuleType};
use crate::policy::cel_policy::{
    AdmissionDocs, CelCompileError, CompiledCelException, CompiledGeneratingPolicy,
    CompiledMutatingPolicy, CompiledValidatingPolicy, attach_exceptions_to,
};
use crate::policy::load::{LoadedDocument, load_policy_text, parse_yaml_documents, read_file};
use crate::policy::{CompiledException, CompiledPolicy};
use serde_json::{Value, json};

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
    /// ValidatingPolicy, MutatingPolicy, GeneratingPolicy: scored, and
    /// audit-only when a ValidatingPolicy does not deny.
    Cel {
        audit: bool,
    },
}

impl<'p> Source<'p> {
    fn scored(self) -> bool {
        match self {
            Source::Classic(p) => p.report.scored,
            Source::Cel { .. } => true,
        }
    }

    fn is_audit(self, rule: &str) -> bool {
        match self {
            Source::Classic(p) => p
                .rules
                .iter()
                .find(|cr| cr.name == rule)
                .is_some_and(|cr| cr.is_audit()),
            Source::Cel { audit } => audit,
        }
    }

    fn annotation(self, key: &str) -> Option<&'p str> {
        match self {
            Source::Classic(p) => p.annotations.get(key).map(String::as_str),
            Source::Cel { .. } => None,
        }
    }
}

fn cel_error(doc: &LoadedDocument, e: CelCompileError) -> anyhow::Error {
    let (kind, name) = doc.kind_and_name();
    anyhow::anyhow!("{kind} {name}: {e}")
}

pub fn run(args: &ApplyArgs) -> anyhow::Result<i32> {
    let mut policies = Vec::new();
    let mut exceptions = Vec::new();
    let mut validating = Vec::new();
    let mut mutating = Vec::new();
    let mut generating = Vec::new();
    let mut cel_exceptions = Vec::new();
    let mut admission = AdmissionDocs::default();
    for path in policy_files(&args.policies) {
        let text = read_file(&path)?;
        for doc in load_policy_text(&path.display().to_string(), &text)? {
            match doc {
                LoadedDocument::Policy(p) => policies.push(CompiledPolicy::compile(&p)?),
                LoadedDocument::Exception(e) => exceptions.push(CompiledException::compile(&e)?),
                LoadedDocument::ValidatingPolicy(ref p) => validating
                    .push(CompiledValidatingPolicy::compile(p).map_err(|e| cel_error(&doc, e))?),
                LoadedDocument::MutatingPolicy(ref p) => mutating
                    .push(CompiledMutatingPolicy::compile(p).map_err(|e| cel_error(&doc, e))?),
                LoadedDocument::GeneratingPolicy(ref p) => generating
                    .push(CompiledGeneratingPolicy::compile(p).map_err(|e| cel_error(&doc, e))?),
                LoadedDocument::ValidatingAdmissionPolicy(p) => admission.validating.push(*p),
                LoadedDocument::MutatingAdmissionPolicy(p) => admission.mutating.push(*p),
                LoadedDocument::AdmissionPolicyBinding(b) => admission.bindings.push(*b),
                LoadedDocument::CelException(ref e) => cel_exceptions.push(std::sync::Arc::new(
                    CompiledCelException::compile(e).map_err(|e| cel_error(&doc, e))?,
                )),
                LoadedDocument::Unsupported { kind, name, .. } => {
                    anyhow::bail!(
                        "{}: unsupported: policy kind {kind} ({name})",
                        path.display()
                    )
                }
            }
        }
    }
    // Admission policies once every file is read: bindings may come later.
    let admission_error =
        |kind: &str, name: &str, e: CelCompileError| anyhow::anyhow!("{kind} {name}: {e}");
    for p in &admission.validating {
        validating.push(
            CompiledValidatingPolicy::compile_admission(p, &admission.bindings)
                .map_err(|e| admission_error(&p.kind, &p.metadata.name, e))?,
        );
    }
    let mut admission_mutating = Vec::new();
    for p in &admission.mutating {
        admission_mutating.push(
            CompiledMutatingPolicy::compile_admission(p, &admission.bindings)
                .map_err(|e| admission_error(&p.kind, &p.metadata.name, e))?,
        );
    }
    let scopes = validating
        .iter_mut()
        .map(|p: &mut CompiledValidatingPolicy| &mut p.scope)
        .chain(
            mutating
                .iter_mut()
                .map(|p: &mut CompiledMutatingPolicy| &mut p.scope),
        )
        .chain(admission_mutating.iter_mut().map(|p| &mut p.scope))
        .chain(
            generating
                .iter_mut()
                .map(|p: &mut CompiledGeneratingPolicy| &mut p.scope),
        );
    attach_exceptions_to(scopes, &cel_exceptions);
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
    let mut resources = Vec::new();
    for path in &args.resources {
        resources.extend(load_resources(path)?);
    }
    let mut params = Vec::new();
    for path in &args.parameter_resources {
        params.extend(load_objects_as_written(path)?);
    }
    // The params are the only objects offline; "not found" is an answer.
    let resolver = Objects(&params);
    let rule_count: usize = policies.iter().map(|p| p.rules.len()).sum::<usize>()
        + validating.len()
        + admission_mutating.len()
        + mutating.len()
        + generating.len();
    eprintln!(
        "Applying {rule_count} policy rule(s) to {} resource(s)...",
        resources.len()
    );
    let operation = values.operation();
    let (mut pass, mut fail, mut warn, mut error, mut skip) = (0, 0, 0, 0, 0);
    let mut report_results = Vec::new();
    // Mutated and generated resources, for `-o`.
    let mut written: Vec<Value> = Vec::new();
    for original in &resources {
        let namespace = original
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let labels = values.namespace_labels.get(namespace).cloned();
        // Mutate policies first, in order, each on the previous output; the
        // other phases see the mutated resource (as `kyverno apply`).
        let mut resource = original.clone();
        let mut responses: Vec<(Source, PolicyResponse)> = Vec::new();
        for policy in policies.iter().filter(|p| p.has_mutate()) {
            let req = Request::offline(&resource, &operation, Default::default(), labels.clone());
            let mut ctx = req.json_context(policy.uses_images);
            for (k, v) in &values.global {
                ctx.set_path(k, v.clone());
            }
            let rule_values = PolicyRuleValues(values.rules.get(&policy.name));
            let env = EvalEnv {
                resolver: &resolver,
                exceptions: &exceptions,
                rule_values: &rule_values,
            };
            let outcome = mutate_policy(policy, &req, &ctx, &env);
            if let Some(patched) = outcome.patched {
                print_mutated(outcome.response.policy, &resource, &patched)?;
                resource = patched;
            }
            responses.push((Source::Classic(policy), outcome.response));
        }
        let offline = |object: &Value| {
            Request::offline(object, &operation, Default::default(), labels.clone())
        };
        let next_request = |_: &Request, object: Value| offline(&object);
        // MutatingAdmissionPolicies, each on the previous output; then
        // kyverno-compat: every MutatingPolicy sees the same resource and
        // the last one that applied gives the result (as `kyverno apply`).
        let mut printed: anyhow::Result<()> = Ok(());
        for (policies, chaining) in [
            (&admission_mutating, Chaining::Chained),
            (&mutating, Chaining::SameInput),
        ] {
            if policies.is_empty() {
                continue;
            }
            let phase = MutatingPhase {
                policies,
                chaining,
                resolver: &resolver,
            };
            let mutated = phases::mutating_policies(
                phase,
                &offline(&resource),
                next_request,
                CelRequest::owned,
                |_, _| Visit::Evaluate,
                |m| {
                    if let Some(patched) = m.patched
                        && patched != m.input
                        && printed.is_ok()
                    {
                        printed = print_mutated(m.response.policy, m.input, patched);
                    }
                    if !m.response.rules.is_empty() {
                        responses.push((Source::Cel { audit: false }, m.response));
                    }
                },
            );
            if let Some(req) = mutated {
                resource = req.object;
            }
        }
        printed?;
        if resource != *original {
            written.push(resource.clone());
        }
        let resource = &resource;
        let req = Request::offline(resource, &operation, Default::default(), labels);
        let mut ctx = req.json_context(policies.iter().any(|p| p.uses_images));
        for (k, v) in &values.global {
            ctx.set_path(k, v.clone());
        }
        for policy in &policies {
            let rule_values = PolicyRuleValues(values.rules.get(&policy.name));
            let env = EvalEnv {
                resolver: &resolver,
                exceptions: &exceptions,
                rule_values: &rule_values,
            };
            responses.push((
                Source::Classic(policy),
                evaluate_policy(policy, &req, &ctx, &env),
            ));
            if policy.has_generate() {
                let generated = generate_policy(policy, &req, &ctx, &env);
                print_generated(&generated, resource, &mut written)?;
                responses.push((Source::Classic(policy), generated));
            }
        }
        if !validating.is_empty() || !generating.is_empty() {
            let input = CelRequest::of(&req);
            for policy in &validating {
                let response = evaluate_validating_policy(policy, &req, &input, &resolver);
                if !response.rules.is_empty() {
                    let audit = !policy.deny;
                    responses.push((Source::Cel { audit }, response));
                }
            }
            for policy in &generating {
                let generated = evaluate_generating_policy(policy, &req, &input, &resolver);
                print_generated(&generated, resource, &mut written)?;
                if !generated.rules.is_empty() {
                    responses.push((Source::Cel { audit: false }, generated));
                }
            }
        }
        for (policy, resp) in responses {
            let mut failures = Vec::new();
            for r in &resp.rules {
                let audit = policy.is_audit(r.name);
                let mut status = r.status;
                if status == RuleStatus::Fail && (!policy.scored() || (args.audit_warn && audit)) {
                    status = RuleStatus::Warn;
                }
                match status {
                    RuleStatus::Pass => pass += 1,
                    RuleStatus::Fail => {
                        fail += 1;
                        failures.push(r);
                    }
                    RuleStatus::Warn => warn += 1,
                    RuleStatus::Error => {
                        error += 1;
                        failures.push(r);
                    }
                    RuleStatus::Skip => skip += 1,
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
                // The report holds validation results only, as Kyverno's.
                if r.rule_type != RuleType::Validation {
                    continue;
                }
                let mut result = json!({
                    "policy": resp.policy,
                    "rule": r.name,
                    "result": status.as_str(),
                    "message": r.message,
                    "scored": policy.scored(),
                    "source": "kyverno",
                    "severity": policy.annotation("policies.kyverno.io/severity"),
                    "category": policy.annotation("policies.kyverno.io/category"),
                    "resources": [{
                        "apiVersion": resource.get("apiVersion"),
                        "kind": resource.get("kind"),
                        "namespace": resource.pointer("/metadata/namespace"),
                        "name": resource.pointer("/metadata/name"),
                    }],
                });
                // A CEL policy's auditAnnotations.
                if !r.properties().is_empty() {
                    result["properties"] = r
                        .properties()
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                        .collect::<serde_json::Map<_, _>>()
                        .into();
                }
                report_results.push(result);
            }
            if !failures.is_empty() && !args.policy_report {
                println!(
                    "\npolicy {} -> resource {} failed:",
                    resp.policy,
                    describe(resource)
                );
                for (i, r) in failures.iter().enumerate() {
                    println!("{}. {}: {}", i + 1, r.name, r.message);
                }
            }
        }
    }
    if let Some(out) = &args.output {
        write_resources(out, &written)?;
    }
    if args.policy_report {
        // The report's summary counts its own (validation) results.
        let count = |what: &str| {
            report_results
                .iter()
                .filter(|r| r["result"] == what)
                .count()
        };
        let report = json!({
            "apiVersion": "wgpolicyk8s.io/v1alpha2",
            "kind": "ClusterPolicyReport",
            "metadata": {"name": "merged"},
            "summary": {
                "pass": count("pass"),
                "fail": count("fail"),
                "warn": count("warn"),
                "error": count("error"),
                "skip": count("skip"),
            },
            "results": report_results,
        });
        println!("{}", serde_saphyr::to_string(&report)?);
    }
    println!("\npass: {pass}, fail: {fail}, warn: {warn}, error: {error}, skip: {skip} ");
    Ok(if fail > 0 || error > 0 {
        1
    } else if warn > 0 {
        args.warn_exit_code.unwrap_or(0)
    } else {
        0
    })
}

fn print_mutated(policy: &str, before: &Value, after: &Value) -> anyhow::Result<()> {
    println!(
        "\nmutate policy {policy} applied to {}:\n{}---",
        describe(before),
        serde_saphyr::to_string(after)?
    );
    Ok(())
}

/// Prints a generate response's downstream resources and keeps them for `-o`.
fn print_generated(
    generated: &PolicyResponse,
    trigger: &Value,
    written: &mut Vec<Value>,
) -> anyhow::Result<()> {
    for g in generated.rules.iter().flat_map(|r| r.resources()) {
        println!(
            "\ngenerate policy {} applied to {}:\n{}---",
            generated.policy,
            describe(trigger),
            serde_saphyr::to_string(g)?
        );
        written.push(g.clone());
    }
    Ok(())
}

/// `-o`: one file per resource into a directory, else all into one file.
fn write_resources(out: &std::path::Path, resources: &[Value]) -> anyhow::Result<()> {
    if out.is_dir() {
        for r in resources {
            let field = |p: &str| r.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let name = [
                field("/kind"),
                field("/metadata/namespace"),
                field("/metadata/name"),
            ]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join("-");
            std::fs::write(
                out.join(format!("{name}.yaml")),
                serde_saphyr::to_string(r)?,
            )?;
        }
    } else {
        let mut text = String::new();
        for r in resources {
            text.push_str("---\n");
            text.push_str(&serde_saphyr::to_string(r)?);
        }
        std::fs::write(out, text)?;
    }
    Ok(())
}

fn describe(r: &Value) -> String {
    let s = |p: &str| {
        r.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let ns = s("/metadata/namespace");
    if ns.is_empty() {
        format!("{}/{}", s("/kind"), s("/metadata/name"))
    } else {
        format!("{ns}/{}/{}", s("/kind"), s("/metadata/name"))
    }
}
