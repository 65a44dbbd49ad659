//! `validate.manifests`: the resource must match a manifest signed by the
//! rule's attestors, as Kyverno's validate-manifest handler checks it with
//! k8s-manifest-sigstore. The signed manifest (a message) and its
//! signatures travel in the resource's annotations
//! (`cosign.sigstore.dev/message`, `…/signature`, `…/signature_1`); each
//! attestor entry verifies a signature of the message with its key and
//! compares the resource with the manifest, ignoring the fields the API
//! server and controllers set. The words of every message are Kyverno's
//! and the library's, typos included, as users' tests match them.
//!
//! What needs more than the resource and a key is an error naming it: a
//! manifest in an OCI image (`repository`, the `resourceBundleRef`
//! annotation), keyless and certificate attestors, signatures carrying a
//! certificate or a Rekor bundle, and, at admission, the dry-run
//! comparison (`dryRun.enable`), which Kyverno's CLI does not make either.

mod diff;
mod message;
#[cfg(test)]
mod tests;

use self::diff::Difference;
use self::message::FetchError;
use super::{applicable_exceptions, prepare_rule};
use crate::engine::json_context::JsonContext;
use crate::engine::{EvalEnv, Request, RuleResponse, RuleStatus};
use crate::policy::manifests::{Attestor, AttestorSet, FieldPattern, ManifestsRule, Verifier};
use crate::policy::{CompiledPolicy, CompiledRule};
use serde_json::Value;
use std::cell::OnceCell;

/// Evaluates a rule whose validate body is `manifests`, in the steps of
/// Kyverno's handler: none on DELETE; the rule's context and
/// preconditions; a matching PolicyException skips it; then every
/// attestor set must verify.
pub(super) fn verify_rule<'p>(
    policy: &CompiledPolicy,
    rule: &'p CompiledRule,
    manifests: &ManifestsRule,
    req: &Request,
    ctx: &mut JsonContext,
    env: &EvalEnv,
) -> Option<RuleResponse<'p>> {
    if req.operation == "DELETE" {
        return None;
    }
    if let Some(stop) = prepare_rule(rule, ctx, &policy.exprs, env) {
        return Some(stop);
    }
    let name = rule.name.as_str();
    let exceptions = applicable_exceptions(policy, name, req, ctx, env);
    if !exceptions.is_empty() {
        let keys: Vec<String> = exceptions
            .iter()
            .map(|e| match e.namespace.as_str() {
                "" => e.name.clone(),
                ns => format!("{ns}/{}", e.name),
            })
            .collect();
        // kyverno-compat: no space before the keys.
        return Some(RuleResponse::new(
            name,
            RuleStatus::Skip,
            format!(
                "rule is skipped due to policy exceptions{}",
                keys.join(", ")
            ),
        ));
    }
    Some(match verify(manifests, req) {
        Ok((true, reason)) => RuleResponse::new(name, RuleStatus::Pass, reason),
        Ok((false, reason)) => RuleResponse::new(name, RuleStatus::Fail, reason),
        Err(e) => RuleResponse::new(
            name,
            RuleStatus::Error,
            format!("error occurred during manifest verification: {e}"),
        ),
    })
}

/// What verifying the request's object found: verified or not and why,
/// or an error.
type Verdict = Result<(bool, String), String>;

fn verify(manifests: &ManifestsRule, req: &Request) -> Verdict {
    if req.dry_run {
        return Ok((true, "allowed because of DryRun request".into()));
    }
    let object = Object::of(req.object.value(), manifests);
    let at_admission = req.from_review;
    let mut verified = Vec::new();
    for (i, set) in manifests.attestor_sets.iter().enumerate() {
        let path = format!(".attestors[{i}]");
        let (ok, reason) = verify_set(manifests, &object, set, &path, at_admission)?;
        if !ok {
            return Ok((false, reason));
        }
        verified.push(reason);
    }
    Ok((
        true,
        format!("verified manifest signatures; {}", verified.join(",")),
    ))
}

/// The object under verification, with what every entry reads of it.
/// The message, its manifests and the comparison with them, and the
/// signed bytes do not depend on the entry: each is worked out once per
/// request, when an entry first needs it.
struct Object<'a> {
    value: &'a Value,
    annotations: Option<&'a serde_json::Map<String, Value>>,
    ignored: Vec<&'a FieldPattern>,
    domain: &'a str,
    /// The `message` annotation.
    message: Option<&'a str>,
    /// The `resourceBundleRef` annotation, when set.
    bundle_ref: Option<&'a str>,
    compared: OnceCell<Result<Comparison, FetchError>>,
    signed: OnceCell<Vec<u8>>,
}

/// The resource against the manifests of its message: whether one
/// matched, else the differences with the first candidate.
struct Comparison {
    matched: bool,
    first_diff: Vec<Difference>,
}

impl<'a> Object<'a> {
    fn of(value: &'a Value, manifests: &'a ManifestsRule) -> Object<'a> {
        let str_at = |pointer: &str| {
            value
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let annotations = value
            .pointer("/metadata/annotations")
            .and_then(Value::as_object);
        let domain = manifests.annotation_domain.as_str();
        let annotation = |name: &str| annotations?.get(&format!("{domain}/{name}"))?.as_str();
        Object {
            value,
            annotations,
            ignored: manifests.ignored_for(
                str_at("/apiVersion"),
                str_at("/kind"),
                str_at("/metadata/name"),
                str_at("/metadata/namespace"),
            ),
            domain,
            message: annotation("message"),
            bundle_ref: annotation("resourceBundleRef").filter(|r| !r.is_empty()),
            compared: OnceCell::new(),
            signed: OnceCell::new(),
        }
    }

    fn annotation(&self, key: &str) -> Option<&'a str> {
        self.annotations?.get(key)?.as_str()
    }

    /// `BlobManifestFetcher.Fetch` and `matchResourceWithManifest`'s
    /// direct match over its candidates.
    fn comparison(&self) -> &Result<Comparison, FetchError> {
        self.compared.get_or_init(|| {
            let message = self
                .message
                .ok_or_else(|| FetchError::NotFound("message not found".into()))?;
            let found = message::manifests_in_message(message)?;
            let mut first_diff = None;
            for candidate in message::candidates(&found, self.value, &self.ignored)? {
                let differences = compare(candidate, self);
                if differences.is_empty() {
                    return Ok(Comparison {
                        matched: true,
                        first_diff: Vec::new(),
                    });
                }
                first_diff.get_or_insert(differences);
            }
            Ok(Comparison {
                matched: false,
                first_diff: first_diff.unwrap_or_default(),
            })
        })
    }

    /// The bytes the signatures sign: the message with its gzip undone
    /// once (nothing when it does not decode, as the library's `_`).
    fn signed(&self) -> &[u8] {
        self.signed.get_or_init(|| {
            self.message
                .and_then(|m| message::base64_decode(m).ok())
                .and_then(|gz| message::gunzip_or_same(&gz).ok())
                .unwrap_or_default()
        })
    }
}

/// `verifyManifestAttestorSet`: entries in order until `count` verified;
/// when they do not, any entry's error is the set's error.
fn verify_set(
    manifests: &ManifestsRule,
    object: &Object,
    set: &AttestorSet,
    path: &str,
    at_admission: bool,
) -> Verdict {
    let required = set.required_count();
    let mut verified = 0;
    let mut errors = Vec::new();
    let mut passed = Vec::new();
    let mut failed = Vec::new();
    for (i, entry) in set.entries.iter().enumerate() {
        let entry_path = format!("{path}.entries[{i}]");
        let outcome = match &entry.verifier {
            Verifier::Nested(Err(e)) => Err(format!(
                "failed to unmarshal nested attestor {entry_path}: {e}"
            )),
            Verifier::Nested(Ok(nested)) => {
                let nested_path = format!("{entry_path}.attestor");
                verify_set(manifests, object, nested, &nested_path, at_admission)
                    .map_err(|e| format!("failed to verify signature; {nested_path}: {e}"))
            }
            _ => verify_entry(manifests, object, entry, &entry_path, at_admission),
        };
        match outcome {
            Err(e) => errors.push(e),
            Ok((true, reason)) => {
                verified += 1;
                passed.push(reason);
            }
            Ok((false, reason)) => failed.push(reason),
        }
        if verified >= required {
            return Ok((
                true,
                format!(
                    "manifest verification succeeded; verifiedCount {verified}; requiredCount \
                     {required}; message {}",
                    passed.join(",")
                ),
            ));
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("; "));
    }
    Ok((
        false,
        format!(
            "manifest verification failed; verifiedCount {verified}; requiredCount {required}; \
             message {}",
            failed.join(",")
        ),
    ))
}

/// `k8sVerifyResource` for one entry: its annotations, then the library's
/// `VerifyResource` (find the manifest, compare, verify a signature).
fn verify_entry(
    manifests: &ManifestsRule,
    object: &Object,
    entry: &Attestor,
    path: &str,
    at_admission: bool,
) -> Verdict {
    for (key, want) in &entry.annotations {
        let got = object.annotation(key).unwrap_or_default();
        if got != want {
            return Err(format!(
                "annotations mismatch: {got} does not match expected value {want} for key {key}"
            ));
        }
    }
    let at = format!("{path}{}", entry.sub_path());
    // The manifest's source: the object's resourceBundleRef annotation,
    // else the entry's repository, else the rule's.
    let bundle = object
        .bundle_ref
        .or(entry.repository.as_deref())
        .or(manifests.repository.as_deref());
    if let Some(image) = bundle {
        return Err(format!(
            "{at}: unsupported offline: the signed manifest is in the OCI image {image:?}, \
             which needs its registry"
        ));
    }
    let comparison = match object.comparison() {
        Ok(c) => c,
        Err(FetchError::NotFound(why)) => {
            return Ok((
                false,
                format!("{at}: YAML manifest not found for this resource: {why}"),
            ));
        }
        Err(FetchError::Failed(e)) => {
            return Err(format!(
                "{at}: YAML manifest not found for this resource: {e}"
            ));
        }
    };
    if !comparison.matched && manifests.dry_run && at_admission {
        return Err(format!(
            "{at}: unsupported: validate.manifests.dryRun: the resource differs from its signed \
             manifest, and comparing it with a dry-run create of the manifest needs the API server"
        ));
    }
    match verify_signature(entry, object).map_err(|e| format!("{at}: {e}"))? {
        Signature::NotFound => Ok((
            false,
            format!("{at}: failed to verify signature: signature not found"),
        )),
        Signature::Verified if comparison.matched => {
            Ok((true, "singed by a valid signer: ".into()))
        }
        Signature::Verified if comparison.first_diff.is_empty() => {
            Ok((false, format!("{at}: failed to verify signature.")))
        }
        Signature::Verified => Ok((
            false,
            format!(
                "{at}: failed to verify signature. diff found; {}",
                diff::to_json(&comparison.first_diff)
            ),
        )),
    }
}

/// `matchResourceWithManifest`'s direct match: the differences between
/// the manifest and the object that no ignored field filters out, but for
/// a namespace the manifest leaves out.
fn compare(manifest: &Value, object: &Object) -> Vec<Difference> {
    let mut differences = diff::diff(manifest, object.value);
    diff::remove_canonical_images(&mut differences);
    let mut differences = diff::unfiltered(differences, &object.ignored);
    differences.retain(|d| !(d.key == "metadata.namespace" && d.before.is_none()));
    differences
}

enum Signature {
    NotFound,
    Verified,
}

/// `BlobSignatureVerifier.Verify` with the entry's key: the signature sets
/// of the annotations (`signature`, `signature_1`, … with the message);
/// the first that verifies is enough.
fn verify_signature(entry: &Attestor, object: &Object) -> Result<Signature, String> {
    let domain = object.domain;
    let indexed = |name: &str, i: usize| match i {
        0 => format!("{domain}/{name}"),
        i => format!("{domain}/{name}_{i}"),
    };
    let mut sets = Vec::new();
    if object.message.is_some() {
        let annotation_count = object.annotations.map_or(0, |a| a.len());
        for i in 0.. {
            let Some(signature) = object.annotation(&indexed("signature", i)) else {
                break;
            };
            let extra = object.annotation(&indexed("certificate", i)).is_some()
                || object.annotation(&indexed("bundle", i)).is_some();
            sets.push((signature, extra));
            if i > annotation_count {
                break;
            }
        }
    }
    if sets.is_empty() {
        return Ok(Signature::NotFound);
    }
    let key = match &entry.verifier {
        Verifier::Key(key) => key,
        Verifier::UnknownKey => {
            return Err(
                "failed to verify signature: failed to judge signature type from public key \
                 configuration"
                    .into(),
            );
        }
        Verifier::Unsupported { reason, .. } => return Err(reason.clone()),
        // `verify_set` verifies a nested set as a set, never as an entry.
        Verifier::Nested(_) => return Err("a nested attestor set is no signature check".into()),
    };
    let mut trials = Vec::new();
    let total = sets.len();
    for (j, (signature, extra)) in sets.into_iter().enumerate() {
        let outcome: Result<(), String> = if extra {
            Err(
                "unsupported offline: a signature with a certificate or a Rekor bundle needs \
                 the transparency log"
                    .to_string(),
            )
        } else {
            match message::base64_decode(signature) {
                Err(e) => Err(format!(
                    "cosign.VerifyBlobCmd.Exec() returned an error: decoding signature: {e}"
                )),
                Ok(sig) if key.verifies(object.signed(), &sig) => return Ok(Signature::Verified),
                Ok(_) => Err(format!(
                    "cosign.VerifyBlobCmd.Exec() returned an error: {}",
                    key.mismatch
                )),
            }
        };
        if let Err(e) = outcome {
            trials.push(Value::String(format!(
                "[publickey 1/1] [signature {}/{total}] error: {e}",
                j + 1
            )));
        }
    }
    Err(format!(
        "failed to verify signature: verification failed for {total} signature. all trials: {}",
        diff::go_json(&Value::Array(trials))
    ))
}
