//! `verifyImages` rules of ClusterPolicies and Policies, in Kyverno's two
//! phases:
//!
//! - [`verify_policy`], the image verification phase (Kyverno's mutate
//!   image handler): signatures and attestations, and `mutateDigest`.
//!   Both need each image's registry: gavel answers them with an error
//!   starting `unsupported offline`. An entry without attestors or
//!   attestations, on images that carry a digest, gives no result, as in
//!   Kyverno.
//! - [`validate_images`], the validation phase (Kyverno's validate image
//!   handler): `verifyDigest` and `required`, from the resource alone.
//!
//! Both look only at the images the rule extracts (its `imageExtractors`
//! for the resource's kind, else the Pod template's containers) that one
//! of its `imageReferences` matches; a rule with none gives no result.

use super::{applicable_exceptions, prepare_rule};
use crate::engine::json_context::JsonContext;
use crate::engine::{EvalEnv, PolicyResponse, Request, RuleResponse, RuleStatus, RuleType};
use crate::image_reference::ImageInfo;
use crate::matching::MatchInput;
use crate::policy::verify_images::{ImageExtractor, VerifyImagesRule};
use crate::policy::{CompiledPolicy, CompiledRule, RuleBody};
use serde_json::{Map, Value};

/// An image a rule found in a resource.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundImage {
    /// Kyverno's `ImageInfo.String()`: `registry/path:tag`, or
    /// `registry/path@digest` (what `imageReferences` match).
    pub reference: String,
    pub has_digest: bool,
}

/// The Pod spec of each kind Kyverno extracts images from by default.
fn pod_spec_path(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "Pod" => &["spec"],
        "DaemonSet"
        | "Deployment"
        | "ReplicaSet"
        | "ReplicationController"
        | "StatefulSet"
        | "Job" => &["spec", "template", "spec"],
        "CronJob" => &["spec", "jobTemplate", "spec", "template", "spec"],
        _ => return None,
    })
}

/// The images of `resource` as the rule extracts them: by its
/// `imageExtractors` for the resource's kind, else from the containers,
/// initContainers and ephemeralContainers of a Pod or Pod controller.
pub fn extract_images(
    resource: &Value,
    rule: &VerifyImagesRule,
) -> Result<Vec<FoundImage>, String> {
    let kind = resource
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let standard;
    let extractors: &[ImageExtractor] = match rule
        .extractors
        .as_ref()
        .and_then(|list| list.iter().find(|(k, _)| k == kind))
    {
        Some((_, list)) if list.is_empty() => {
            return Err(format!("no extractors found for {kind}"));
        }
        Some((_, list)) => list,
        None => match pod_spec_path(kind) {
            Some(path) => {
                standard = ["containers", "initContainers", "ephemeralContainers"].map(|c| {
                    ImageExtractor {
                        name: c.to_string(),
                        fields: path
                            .iter()
                            .map(|p| p.to_string())
                            .chain([c.to_string(), "*".to_string()])
                            .collect(),
                        value: "image".into(),
                        key: "name".into(),
                        jmes_path: None,
                    }
                });
                &standard
            }
            None => return Ok(Vec::new()),
        },
    };
    let mut found: Vec<(String, String, FoundImage)> = Vec::new();
    for extractor in extractors {
        let mut path = Vec::new();
        extract(
            resource,
            &mut path,
            &extractor.fields,
            extractor,
            &mut |key, image| {
                let entry = (extractor.name.clone(), key, image);
                // A key found again replaces the image (Kyverno's map).
                match found
                    .iter_mut()
                    .find(|(n, k, _)| *n == entry.0 && *k == entry.1)
                {
                    Some(slot) => *slot = entry,
                    None => found.push(entry),
                }
            },
        )?;
    }
    Ok(found.into_iter().map(|(_, _, image)| image).collect())
}

/// Kyverno's `extract`: walks `fields` (`*` is every element of a list or
/// map), then reads the image from the object reached.
fn extract(
    value: &Value,
    path: &mut Vec<String>,
    fields: &[String],
    extractor: &ImageExtractor,
    found: &mut dyn FnMut(String, FoundImage),
) -> Result<(), String> {
    if value.is_null() {
        return Ok(());
    }
    if fields.first().is_some_and(|f| f == "*") {
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let rest = match item {
                        Value::Object(_) => &fields[1..],
                        // A list in a list keeps the star for its elements.
                        Value::Array(_) => fields,
                        _ => continue,
                    };
                    path.push(i.to_string());
                    extract(item, path, rest, extractor, found)?;
                    path.pop();
                }
                return Ok(());
            }
            Value::Object(m) => {
                for (k, item) in m {
                    if matches!(item, Value::Object(_) | Value::Array(_)) {
                        path.push(k.clone());
                        extract(item, path, &fields[1..], extractor, found)?;
                        path.pop();
                    }
                }
                return Ok(());
            }
            _ => {}
        }
    }
    let Value::Object(object) = value else {
        return Err("invalid image config".into());
    };
    let Some((field, rest)) = fields.split_first() else {
        return read_image(object, path, extractor, found);
    };
    path.push(field.clone());
    let next = object.get(field).unwrap_or(&Value::Null);
    let result = extract(next, path, rest, extractor, found);
    path.pop();
    result
}

fn read_image(
    object: &Map<String, Value>,
    path: &[String],
    extractor: &ImageExtractor,
    found: &mut dyn FnMut(String, FoundImage),
) -> Result<(), String> {
    let pointer = format!("/{}/{}", path.join("/"), extractor.value);
    let key = if extractor.key.is_empty() {
        pointer
    } else {
        match object.get(&extractor.key) {
            Some(Value::String(k)) => k.clone(),
            _ => return Err("invalid key".into()),
        }
    };
    let Some(Value::String(raw)) = object.get(&extractor.value) else {
        // The image may not be there.
        return Ok(());
    };
    if raw.trim().is_empty() {
        return Ok(());
    }
    let image = match &extractor.jmes_path {
        None => raw.clone(),
        Some(query) => {
            let expression = crate::jmespath::Expression::parse(query)
                .map_err(|e| format!("invalid jmespath {query}: {e}"))?;
            let input = Value::String(raw.clone());
            match expression
                .search(&input)
                .map_err(|e| format!("failed to apply jmespath {query}: {e}"))?
                .as_ref()
            {
                Value::String(s) => s.clone(),
                other => {
                    return Err(format!(
                        "jmespath {query} must produce a string, but produced {other}"
                    ));
                }
            }
        }
    };
    let info = ImageInfo::parse(&image).map_err(|e| format!("invalid image '{image}' ({e})"))?;
    found(
        key,
        FoundImage {
            reference: info.reference(),
            has_digest: !info.digest.is_empty(),
        },
    );
    Ok(())
}

fn matches_any(patterns: &[String], image: &str) -> bool {
    patterns.iter().any(|p| crate::wildcard::matches(p, image))
}

/// The rule's images that one of its `imageReferences` matches (each once
/// per matching entry, as Kyverno lists them), or why extraction failed.
fn matching_images(resource: &Value, rule: &VerifyImagesRule) -> Result<Vec<FoundImage>, String> {
    let images = extract_images(resource, rule)?;
    let mut out = Vec::new();
    for image in images {
        for entry in &rule.entries {
            if matches_any(&entry.image_references, &image.reference) {
                out.push(image.clone());
            }
        }
    }
    Ok(out)
}

/// Kyverno's skip of a verifyImages rule for its PolicyExceptions (no
/// space between the words and the keys, as Kyverno writes it).
fn exempted<'p>(
    policy: &CompiledPolicy,
    rule: &'p CompiledRule,
    req: &Request,
    ctx: &JsonContext,
    env: &EvalEnv,
) -> Option<RuleResponse<'p>> {
    let keys: Vec<String> = applicable_exceptions(policy, &rule.name, req, ctx, env)
        .iter()
        .map(|ex| match ex.namespace.as_str() {
            "" => ex.name.clone(),
            ns => format!("{ns}/{}", ex.name),
        })
        .collect();
    (!keys.is_empty()).then(|| {
        RuleResponse::new(
            &rule.name,
            RuleStatus::Skip,
            format!(
                "rule is skipped due to policy exceptions{}",
                keys.join(", ")
            ),
        )
    })
}

/// The image verification phase of `policy`'s verifyImages rules on
/// `req`: one response, with the results of every rule that has work to
/// do (none when no rule matches an image; see the module's text).
pub fn verify_policy<'p>(
    policy: &'p CompiledPolicy,
    req: &Request,
    ctx: &JsonContext,
    env: &EvalEnv,
) -> PolicyResponse<'p> {
    verify_policy_with(policy, req, &req.match_input(), ctx, env)
}

/// [`verify_policy`] with the request's match input computed by the
/// caller (the server's, once for its whole policy set).
pub fn verify_policy_with<'p>(
    policy: &'p CompiledPolicy,
    req: &Request,
    input: &MatchInput,
    ctx: &JsonContext,
    env: &EvalEnv,
) -> PolicyResponse<'p> {
    let mut rules = Vec::new();
    for rule in &policy.rules {
        let RuleBody::VerifyImages(v) = &rule.body else {
            continue;
        };
        if !rule.match_resources.matches(input)
            || rule.exclude.as_ref().is_some_and(|e| e.excludes(input))
        {
            continue;
        }
        let typed = |r: RuleResponse<'p>| r.of_type(RuleType::ImageVerify);
        let images = match matching_images(req.resource().value(), v) {
            Ok(images) if images.is_empty() => continue,
            Ok(images) => images,
            Err(e) => {
                rules.push(typed(RuleResponse::new(
                    &rule.name,
                    RuleStatus::Error,
                    format!("failed to instantiate handler: {e}"),
                )));
                continue;
            }
        };
        let mut ctx = ctx.child();
        if let Some(stop) = prepare_rule(rule, &mut ctx, &policy.exprs, env) {
            rules.push(typed(stop));
            continue;
        }
        if let Some(skip) = exempted(policy, rule, req, &ctx, env) {
            rules.push(skip.of_type(RuleType::Mutation));
            continue;
        }
        for entry in &v.entries {
            for image in &images {
                let reference = &image.reference;
                let checked = entry.registry_checks.then(|| {
                    if !matches_any(&entry.image_references, reference)
                        || matches_any(&entry.skip_image_references, reference)
                    {
                        RuleResponse::new(
                            &rule.name,
                            RuleStatus::Skip,
                            format!(
                                "skipping image reference image {reference}, policy {} ruleName {}",
                                policy.name, rule.name
                            ),
                        )
                    } else {
                        RuleResponse::new(
                            &rule.name,
                            RuleStatus::Error,
                            format!(
                                "unsupported offline: verifying the signatures and attestations \
                                 of image {reference} needs its registry, which gavel does not reach"
                            ),
                        )
                    }
                });
                if entry.mutate_digest && !image.has_digest {
                    rules.push(typed(RuleResponse::new(
                        &rule.name,
                        RuleStatus::Error,
                        format!(
                            "failed to update digest: unsupported offline: the digest of image \
                             {reference} is in its registry, which gavel does not reach"
                        ),
                    )));
                }
                rules.extend(checked.map(typed));
            }
        }
    }
    PolicyResponse {
        policy: policy.qualified_name(),
        rules: rules.into(),
    }
}

/// The validation phase of one verifyImages rule (after match and
/// exclude): `verifyDigest`, then `required`, for every image an entry
/// matches. `None` when the rule checks nothing, on DELETE, or when no
/// image matches.
pub(super) fn validate_images<'p>(
    policy: &CompiledPolicy,
    rule: &'p CompiledRule,
    v: &VerifyImagesRule,
    req: &Request,
    ctx: &mut JsonContext,
    env: &EvalEnv,
) -> Option<RuleResponse<'p>> {
    if !v.has_checks() || req.operation == "DELETE" {
        return None;
    }
    let typed = |r: RuleResponse<'p>| r.of_type(RuleType::ImageVerify);
    let respond = |status, message: String| typed(RuleResponse::new(&rule.name, status, message));
    let images = match extract_images(req.resource().value(), v) {
        Err(e) => {
            return Some(respond(
                RuleStatus::Error,
                format!("failed to instantiate handler: {e}"),
            ));
        }
        Ok(images) => images,
    };
    if !images.iter().any(|i| {
        v.references()
            .any(|p| crate::wildcard::matches(p, &i.reference))
    }) {
        return None;
    }
    if let Some(stop) = prepare_rule(rule, ctx, &policy.exprs, env) {
        return Some(typed(stop));
    }
    if let Some(skip) = exempted(policy, rule, req, ctx, env) {
        return Some(skip);
    }
    let annotation = req
        .object
        .value()
        .pointer("/metadata/annotations")
        .and_then(|a| a.get("kyverno.io/verify-images-scoped"))
        .and_then(Value::as_str);
    // Read once for every image; an unreadable record fails the first
    // image `required` asks it about.
    let record = verification_record(annotation, policy, &rule.name);
    let (mut passed, mut skipped) = (0usize, Vec::new());
    for entry in &v.entries {
        for image in &images {
            let reference = &image.reference;
            if !matches_any(&entry.image_references, reference) {
                continue;
            }
            if entry.verify_digest && !image.has_digest {
                return Some(respond(
                    RuleStatus::Fail,
                    format!("missing digest for {reference}"),
                ));
            }
            if !entry.required || req.object.is_null() {
                continue;
            }
            let rule_record = match &record {
                Err(e) => return Some(respond(RuleStatus::Fail, e.clone())),
                Ok(rule_record) => rule_record.as_ref(),
            };
            match verification_status(rule_record, reference) {
                "pass" => passed += 1,
                "skip" => skipped.push(reference.as_str()),
                _ => {
                    return Some(respond(
                        RuleStatus::Fail,
                        format!("unverified image {reference}"),
                    ));
                }
            }
        }
    }
    Some(if passed > 0 || skipped.is_empty() {
        match skipped.is_empty() {
            true => respond(RuleStatus::Pass, "image verified".into()),
            false => respond(
                RuleStatus::Pass,
                format!("image verified, skipped images: {}", skipped.join(" ")),
            ),
        }
    } else {
        respond(
            RuleStatus::Skip,
            format!("image skipped, skipped images: {}", skipped.join(" ")),
        )
    })
}

/// What the resource's `kyverno.io/verify-images-scoped` annotation (the
/// verification phase's record) holds for this policy and rule: its map of
/// image to status; `None` when it has none (or is not the versioned
/// form, which records no policy).
fn verification_record(
    annotation: Option<&str>,
    policy: &CompiledPolicy,
    rule: &str,
) -> Result<Option<Value>, String> {
    let Some(text) = annotation else {
        return Ok(None);
    };
    let data: Value = serde_json::from_str(text)
        .map_err(|e| format!("failed to parse scoped image metadata: {e}"))?;
    if data.get("version").and_then(Value::as_i64) != Some(1) {
        return Ok(None);
    }
    let key = format!(
        "{}/{}",
        policy.namespace.as_deref().unwrap_or(""),
        policy.name
    );
    Ok(data
        .get("policies")
        .and_then(|p| p.get(&key))
        .and_then(|r| r.get(rule))
        .cloned())
}

/// The status the rule's record gives `image`: `pass`, `skip`, or `fail`
/// (also when it says nothing).
fn verification_status(record: Option<&Value>, image: &str) -> &'static str {
    match record.and_then(|r| r.get(image)).and_then(Value::as_str) {
        Some("pass") => "pass",
        Some("skip") => "skip",
        _ => "fail",
    }
}

#[cfg(test)]
mod tests;
