//! The admission decision and its text: the verdict from the policies'
//! responses (Enforce failures deny, Audit ones warn, errors follow the
//! failurePolicy), Kyverno's denial message (`resource Kind/ns/name was
//! blocked due to the following policies`, the rules written as Go's
//! yaml.Marshal writes them, with heads prerendered per snapshot), and the
//! encoded AdmissionReview answer.

use super::json_text::{self, JsonText, JsonWriter};
use super::yaml_text;
use crate::engine::{PolicyResponse, Request, RuleStatus, validate};
use crate::policy::cel_policy::{CompiledImageValidatingPolicy, CompiledValidatingPolicy};
use crate::policy::compile::FailurePolicy;
use crate::policy::{CompiledPolicy, CompiledRule, RuleBody};

/// The admission decision for one request.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    pub allowed: bool,
    /// Kyverno's denial text, when denied, escaped for the response.
    pub message: Option<JsonText>,
    pub warnings: Vec<String>,
    /// The JSONPatch (RFC 6902 operations, serialised) of a mutation.
    pub patch: Option<Vec<u8>>,
}

/// The indent of a denial message's folded lines, under `  <rule>: `.
const VALUE_INDENT: usize = 4;

/// A policy's part of a denial, rendered when the policy set is compiled:
/// its line, each rule's key, and the start of each rule's message (see
/// [`yaml_text::ValueHead`]) for a failing rule with a fixed
/// `validate.message`. Per request, only what varies is written.
#[derive(Debug, Default)]
pub struct DenialHeads {
    /// `<policy>:` and its line feed.
    policy_line: JsonText,
    /// By rule index.
    rules: Vec<RuleHeads>,
}

#[derive(Debug)]
struct RuleHeads {
    /// `  <rule>: `, and the column after it.
    line: JsonText,
    column: usize,
    /// Where the rule sorts among the rules of every policy of the set.
    rank: u32,
    heads: Vec<yaml_text::ValueHead>,
}

impl DenialHeads {
    /// The denial heads of `policies`, ranked among each other.
    pub fn of_set(policies: &[CompiledPolicy]) -> Vec<DenialHeads> {
        let mut all: Vec<DenialHeads> = policies.iter().map(DenialHeads::of).collect();
        let mut order: Vec<(&str, &str, usize, usize)> = policies
            .iter()
            .enumerate()
            .flat_map(|(p, policy)| {
                let name = policy.qualified_name();
                policy
                    .rules
                    .iter()
                    .enumerate()
                    .map(move |(r, rule)| (name, rule.name.as_str(), p, r))
            })
            .collect();
        order.sort();
        let mut rank = 0;
        for (i, &(policy, rule, p, r)) in order.iter().enumerate() {
            if i > 0 && (order[i - 1].0, order[i - 1].1) != (policy, rule) {
                rank += 1;
            }
            all[p].rules[r].rank = rank;
        }
        all
    }

    fn of(policy: &CompiledPolicy) -> DenialHeads {
        let mut policy_line = JsonWriter::default();
        yaml_text::push_key(&mut policy_line, policy.qualified_name(), 0);
        policy_line.verbatim(":");
        policy_line.line_feed();
        let rules = policy
            .rules
            .iter()
            .map(|rule| {
                let mut line = JsonWriter::default();
                line.verbatim("  ");
                let column = yaml_text::push_key(&mut line, &rule.name, 2) + 2;
                line.verbatim(": ");
                RuleHeads {
                    line: line.finish(),
                    column,
                    rank: 0,
                    heads: message_heads(rule, column),
                }
            })
            .collect();
        DenialHeads {
            policy_line: policy_line.finish(),
            rules,
        }
    }

    /// Whether a head of rule `index` starts `message`.
    #[cfg(test)]
    pub(super) fn started(&self, index: usize, message: &str) -> bool {
        self.rules[index].heads.iter().any(|h| h.starts(message))
    }
}

/// The starts of the messages the engine writes for a failing `rule`
/// whose value begins at `column`.
fn message_heads(rule: &CompiledRule, column: usize) -> Vec<yaml_text::ValueHead> {
    let RuleBody::Validate(v) = &rule.body else {
        return Vec::new();
    };
    if v.message_has_variables {
        return Vec::new();
    }
    let message = v.message.as_deref().unwrap_or_default();
    // A failed pattern or anyPattern, as the engine words it.
    let failed = &*rule.failure_start;
    // The path's leading `/` ends the longest head: what follows it is
    // the rest of the path, which rarely holds a space to fold at.
    let at_path = [failed, validate::FAILED_AT_PATH, "/"].concat();
    let mut heads: Vec<_> = [at_path.as_str(), failed]
        .into_iter()
        .filter_map(|text| yaml_text::ValueHead::quoted_start(text, column, VALUE_INDENT))
        .collect();
    if !message.is_empty() {
        // A deny, and a deny in a foreach.
        heads.push(yaml_text::ValueHead::whole(message, column, VALUE_INDENT));
        heads.push(yaml_text::ValueHead::whole(
            &[validate::FOREACH_FAILURE, message].concat(),
            column,
            VALUE_INDENT,
        ));
    }
    heads
}

/// Decides from the policy responses (`responses[i]` belongs to
/// `policies[i]`, whose denial heads are beside it): an Enforce failure
/// denies; an evaluation error denies only under `failurePolicy: Fail`;
/// Audit failures are allowed, with a warning when the policy sets
/// `emitWarning`.
///
/// `cel` are the ValidatingPolicies' responses and `images` the
/// ImageValidatingPolicies': a failure denies under the Deny action and
/// warns under Warn; an error denies under failurePolicy Fail, their
/// default.
pub fn decide(
    policies: &[(&CompiledPolicy, &DenialHeads)],
    responses: &[PolicyResponse],
    cel: &[(&CompiledValidatingPolicy, PolicyResponse)],
    images: &[(usize, &CompiledImageValidatingPolicy, PolicyResponse)],
    req: &Request,
) -> Verdict {
    let mut blocked: Vec<Blocked> = Vec::new();
    let mut warnings = Vec::new();
    let cel_verdicts = cel
        .iter()
        .map(|(p, r)| ((p.deny, p.warn, p.scope.failure_policy_ignore), r))
        .chain(
            images
                .iter()
                .map(|(_, p, r)| ((p.deny, p.warn, p.scope.failure_policy_ignore), r)),
        );
    for ((deny, warn, ignore), resp) in cel_verdicts {
        for rule in &resp.rules {
            let blocks = match rule.status {
                RuleStatus::Fail => deny,
                RuleStatus::Error => !ignore,
                _ => false,
            };
            if blocks {
                blocked.push(Blocked {
                    policy: resp.policy,
                    rule: rule.name,
                    message: &rule.message,
                    rendered: None,
                });
            } else if rule.status == RuleStatus::Fail && warn {
                warnings.push(format!("policy {}: {}", resp.policy, rule.message));
            }
        }
    }
    for ((policy, heads), resp) in policies.iter().zip(responses) {
        for rule in &resp.rules {
            let index = policy.rules.iter().position(|r| r.name == rule.name);
            let enforce = index.is_none_or(|i| !policy.rules[i].is_audit());
            let blocks = match rule.status {
                RuleStatus::Fail => enforce,
                RuleStatus::Error => policy.failure_policy == FailurePolicy::Fail,
                _ => false,
            };
            if blocks {
                if blocked.capacity() == 0 {
                    // Sized once: a denial often names many rules.
                    blocked.reserve(responses.iter().map(|r| r.rules.len()).sum());
                }
                blocked.push(Blocked {
                    policy: resp.policy,
                    rule: rule.name,
                    message: &rule.message,
                    rendered: index
                        .and_then(|i| heads.rules.get(i))
                        .map(|r| (&heads.policy_line, r)),
                });
            } else if rule.status == RuleStatus::Fail && policy.emit_warning {
                warnings.push(format!(
                    "policy {}.{}: {}",
                    resp.policy, rule.name, rule.message
                ));
            }
        }
    }
    if blocked.is_empty() {
        return Verdict {
            allowed: true,
            message: None,
            warnings,
            patch: None,
        };
    }
    Verdict {
        allowed: false,
        message: Some(blocked_message(req, blocked)),
        warnings,
        patch: None,
    }
}

/// A failed rule in a denial, with its policy's line and its own key and
/// message heads when they were rendered ahead (not for ValidatingPolicies).
struct Blocked<'a> {
    policy: &'a str,
    rule: &'a str,
    message: &'a str,
    rendered: Option<(&'a JsonText, &'a RuleHeads)>,
}

/// Kyverno's denial text: a header naming the resource, then the failed
/// rules as the YAML map policy -> rule -> message that Go's yaml.Marshal
/// writes (keys sorted, long messages folded).
fn blocked_message(req: &Request, mut blocked: Vec<Blocked>) -> JsonText {
    // Sorted by policy and rule: by their ranks when every rule has one,
    // which compares numbers instead of names.
    let ranked = blocked.iter().all(|b| b.rendered.is_some());
    let rank = |b: &Blocked| b.rendered.map(|(_, r)| r.rank);
    if ranked {
        blocked.sort_by_key(rank);
    } else {
        blocked.sort_by(|a, b| (a.policy, a.rule).cmp(&(b.policy, b.rule)));
    }
    // A map keeps the last message of a repeated policy and rule (the
    // same rank, when ranked).
    blocked.reverse();
    if ranked {
        blocked.dedup_by_key(|b| rank(b));
    } else {
        blocked.dedup_by(|a, b| (a.policy, a.rule) == (b.policy, b.rule));
    }
    blocked.reverse();
    let text_len: usize = blocked
        .iter()
        .map(|b| b.policy.len() + b.rule.len() + b.message.len())
        .sum();
    // Written escaped for the response as it is built: the text is
    // kilobytes, and a second pass to escape it cost half as much again as
    // writing it.
    let mut message = JsonWriter::with_capacity(96 + text_len + text_len / 8);
    message.line_feed();
    message.line_feed();
    message.verbatim("resource ");
    // kyverno-compat: the kind of the object sent (`Scale` for a
    // Deployment's scale), as Kyverno's engine response carries it.
    message.text(&req.object_kind.kind);
    message.verbatim("/");
    let ns = req.namespace();
    if !ns.is_empty() {
        message.text(ns);
        message.verbatim("/");
    }
    message.text(req.name());
    message.verbatim(" was blocked due to the following policies ");
    message.line_feed();
    message.line_feed();
    let mut previous_policy = None;
    for b in blocked {
        if previous_policy != Some(b.policy) {
            match b.rendered {
                Some((policy_line, _)) => message.escaped(policy_line),
                None => {
                    yaml_text::push_key(&mut message, b.policy, 0);
                    message.verbatim(":");
                    message.line_feed();
                }
            }
            previous_policy = Some(b.policy);
        }
        let (column, heads) = match b.rendered {
            Some((_, rule)) => {
                message.escaped(&rule.line);
                (rule.column, &rule.heads[..])
            }
            None => {
                message.verbatim("  ");
                let column = yaml_text::push_key(&mut message, b.rule, 2);
                message.verbatim(": ");
                (column + 2, &[][..])
            }
        };
        yaml_text::push_value_headed(&mut message, b.message, column, VALUE_INDENT, heads);
        message.line_feed();
    }
    message.finish()
}

/// The response review for `uid`, written directly: it is on every
/// request's path and a `serde_json::Value` tree costs more than the text.
pub fn encode(uid: &str, verdict: &Verdict) -> Vec<u8> {
    let extra = verdict
        .message
        .as_ref()
        .map_or(0, |m| m.as_escaped().len() + 64)
        + verdict.patch.as_ref().map_or(0, |p| p.len() * 4 / 3 + 48)
        + verdict.warnings.iter().map(|w| w.len() + 8).sum::<usize>();
    let mut out = Vec::with_capacity(128 + uid.len() + extra);
    out.extend_from_slice(
        br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#,
    );
    push_json_str(&mut out, uid);
    out.extend_from_slice(if verdict.allowed {
        br#","allowed":true"#
    } else {
        br#","allowed":false"#
    });
    if let Some(message) = &verdict.message {
        out.extend_from_slice(br#","status":{"status":"Failure","code":400,"message":""#);
        out.extend_from_slice(message.as_escaped().as_bytes());
        out.extend_from_slice(b"\"}");
    }
    if let Some(patch) = &verdict.patch {
        out.extend_from_slice(br#","patchType":"JSONPatch","patch":""#);
        out.extend_from_slice(
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, patch).as_bytes(),
        );
        out.push(b'"');
    }
    if !verdict.warnings.is_empty() {
        out.extend_from_slice(br#","warnings":["#);
        for (i, w) in verdict.warnings.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            push_json_str(&mut out, w);
        }
        out.push(b']');
    }
    out.extend_from_slice(b"}}");
    out
}

/// Appends `s` as a JSON string.
fn push_json_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    json_text::escape_into(s, |part| out.extend_from_slice(part.as_bytes()));
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_quoted_and_escaped() {
        // The escaping itself is tested in json_text.
        let s = "a \"quote\" and a\nline";
        let mut ours = Vec::new();
        push_json_str(&mut ours, s);
        assert_eq!(ours, serde_json::to_vec(s).unwrap());
    }
}
