//! The rule-kind index of a compiled policy: which of its rules can match
//! a kind, so that a request walks only its candidate rules, and which of
//! those the kind alone matches, so that their match is not checked.

use super::CompiledRule;
use crate::matching::MatchInput;
use crate::text;

/// The rules that can match a kind, as bit masks over the first 64 rules
/// kept apart from the (large) rules: a request skips the rules of other
/// kinds, typically the autogen rules of a Pod policy, without reading
/// them. A candidate's match still decides, unless the rule is one the
/// kind alone matches.
#[derive(Debug, Clone, Default)]
pub struct RuleKinds {
    /// Rules without a kinds list (any kind).
    any: u64,
    by_kind: Box<[KindRules]>,
    /// More than 64 rules: no index, every rule is a candidate.
    unindexed: bool,
}

/// The rules of one kind name.
#[derive(Debug, Clone)]
struct KindRules {
    hash: u64,
    kind: Box<str>,
    /// The rules whose kinds list names the kind.
    rules: u64,
    /// Per admission operation ([`crate::matching::operation_index`]),
    /// those whose `match` checks only plain kinds and operations
    /// ([`crate::matching::CompiledMatch::plain_kinds`]), this one and the
    /// operation among them, and that exclude nothing: a request of the
    /// kind and operation without a subresource is matched by them, with
    /// nothing else to check.
    matched: KindMatched,
}

/// Per admission operation, a mask of the rules a kind matches by itself.
pub type KindMatched = [u64; 4];

/// A kind's candidate rules and, per admission operation, those the kind
/// alone matches ([`RuleKinds::for_kind`]).
pub type KindMasks = (u64, KindMatched);

impl RuleKinds {
    pub(super) fn of(rules: &[CompiledRule]) -> RuleKinds {
        if rules.len() > 64 {
            return RuleKinds {
                unindexed: true,
                ..RuleKinds::default()
            };
        }
        let mut any = 0;
        let mut by_kind: Vec<KindRules> = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let bit = 1u64 << i;
            let Some(kinds) = &rule.kinds else {
                any |= bit;
                continue;
            };
            let excludes_nothing = rule.exclude.as_ref().is_none_or(|e| e.is_empty());
            let plain = rule
                .match_resources
                .plain_kinds()
                .filter(|_| excludes_nothing)
                .unwrap_or_default();
            for k in kinds {
                let entry = match by_kind.iter().position(|e| *e.kind == **k) {
                    Some(at) => &mut by_kind[at],
                    None => {
                        by_kind.push(KindRules {
                            hash: crate::kinds::kind_hash(k),
                            kind: k.as_str().into(),
                            rules: 0,
                            matched: [0; 4],
                        });
                        by_kind.last_mut().expect("just pushed")
                    }
                };
                entry.rules |= bit;
                for (_, ops) in plain.iter().filter(|(kind, _)| *kind == k.as_str()) {
                    for (op, matched) in entry.matched.iter_mut().enumerate() {
                        if ops.contains(op) {
                            *matched |= bit;
                        }
                    }
                }
            }
        }
        RuleKinds {
            any,
            by_kind: by_kind.into_boxed_slice(),
            unindexed: false,
        }
    }

    /// The candidate rules for requests of kind `kind` and, per admission
    /// operation, those of them the kind alone matches (for a request
    /// without a subresource), as masks; `None` when the policy has too
    /// many rules to index. A policy set's plan holds these per kind.
    pub fn for_kind(&self, kind: &str) -> Option<KindMasks> {
        if self.unindexed {
            return None;
        }
        let mut masks = (self.any, [0; 4]);
        for k in self.of_kind(kind, crate::kinds::kind_hash(kind)) {
            masks.0 |= k.rules;
            for (all, these) in masks.1.iter_mut().zip(k.matched) {
                *all |= these;
            }
        }
        Some(masks)
    }

    /// The kind names the rules list.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.by_kind.iter().map(|k| &*k.kind)
    }

    /// The candidate rules for the request `input`, in order.
    pub fn candidates(&self, input: &MatchInput, rule_count: usize) -> Candidates {
        if self.unindexed {
            return Candidates {
                mask: 0,
                matched: 0,
                unindexed: 0..rule_count,
            };
        }
        let operation = crate::matching::operation_index(input.operation);
        let (mut mask, mut matched) = (self.any, 0);
        for k in self.of_kind(input.kind, input.kind_hash) {
            mask |= k.rules;
            matched |= operation.map_or(0, |op| k.matched[op]);
        }
        Candidates::of_masks(mask, matched, !input.subresource.is_empty())
    }

    /// The entries of a kind, found by its hash, which rules out most
    /// entries before their names are compared.
    fn of_kind<'k>(&'k self, kind: &'k str, hash: u64) -> impl Iterator<Item = &'k KindRules> {
        self.by_kind
            .iter()
            .filter(move |k| k.hash == hash && text::same(&k.kind, kind))
    }
}

/// Indexes of candidate rules, in order, each told whether the kind alone
/// matched it; its exact length lets a policy's response be allocated once.
#[derive(Debug, Clone)]
pub struct Candidates {
    mask: u64,
    matched: u64,
    /// Every rule, when the policy has too many to index.
    unindexed: std::ops::Range<usize>,
}

impl Candidates {
    /// The rules of `mask`, those of `matched` matched by the kind and
    /// operation alone ([`RuleKinds::for_kind`]) unless the request names
    /// a subresource, which a plain kind does not match.
    pub fn of_masks(mask: u64, matched: u64, subresource: bool) -> Candidates {
        Candidates {
            mask,
            matched: if subresource { 0 } else { matched },
            unindexed: 0..0,
        }
    }
}

/// A candidate rule: its index, and whether the request matched it by its
/// kind alone (its `match` and `exclude` need no check).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub index: usize,
    pub matched: bool,
}

impl Iterator for Candidates {
    type Item = Candidate;

    fn next(&mut self) -> Option<Candidate> {
        if self.mask == 0 {
            return self.unindexed.next().map(|index| Candidate {
                index,
                matched: false,
            });
        }
        let index = self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(Candidate {
            index,
            matched: self.matched & (1 << index) != 0,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.mask.count_ones() as usize + self.unindexed.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Candidates {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::CompiledPolicy;
    use crate::policy::load::{LoadedDocument, load_policy_text};

    /// A Pod rule's autogen rules are not candidates for a Pod; a rule
    /// without kinds is a candidate for every kind; order is kept. The
    /// rules matched by the kind alone are those that check only plain
    /// kinds and exclude nothing, for a request without a subresource;
    /// each of them matches such a request of its kinds.
    #[test]
    fn candidates_by_kind() {
        let yaml = "apiVersion: kyverno.io/v1
kind: ClusterPolicy
metadata: {name: p}
spec:
  rules:
  - name: pods
    match: {any: [{resources: {kinds: [Pod]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: anything
    match: {any: [{resources: {names: [web]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: services
    match: {any: [{resources: {kinds: [Service, Pod]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: pods-in-one-namespace
    match: {any: [{resources: {kinds: [Pod], namespaces: [web]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: pods-but-some
    match: {all: [{resources: {kinds: [Pod]}}]}
    exclude: {any: [{resources: {names: [web]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: versioned-pods
    match: {resources: {kinds: [v1/Pod]}}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: legacy-pods
    match: {resources: {kinds: [Pod]}}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: written-pods
    match: {any: [{resources: {kinds: [Pod], operations: [CREATE, UPDATE]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: deleted-pods-or-services
    match: {any: [{resources: {kinds: [Pod], operations: [DELETE]}}, {resources: {kinds: [Service]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
  - name: misspelt-operation
    match: {any: [{resources: {kinds: [Pod], operations: [create]}}]}
    validate: {pattern: {metadata: {name: '?*'}}}
";
        let LoadedDocument::Policy(doc) = load_policy_text("p.yaml", yaml)
            .unwrap()
            .into_iter()
            .next()
            .unwrap()
        else {
            panic!("not a policy");
        };
        let p = CompiledPolicy::compile(&doc).unwrap();
        let user = Default::default();
        let input = |kind: &'static str, subresource: &'static str, operation| MatchInput {
            group: "",
            version: "v1",
            kind,
            kind_hash: crate::kinds::kind_hash(kind),
            subresource,
            operation,
            name: "web",
            generate_name: "",
            namespace: "default",
            labels: None,
            annotations: None,
            namespace_labels: None,
            user: &user,
        };
        // (rule, matched by kind) of each candidate.
        let names_on = |kind: &'static str,
                        subresource: &'static str,
                        operation: &'static str|
         -> Vec<(&str, bool)> {
            let input = input(kind, subresource, operation);
            p.rule_kinds
                .candidates(&input, p.rules.len())
                .map(|c| {
                    let rule = &p.rules[c.index];
                    if c.matched {
                        assert!(rule.selects(&input), "{} selects {kind}", rule.name);
                    }
                    (rule.name.as_str(), c.matched)
                })
                .collect()
        };
        let names = |kind, subresource| names_on(kind, subresource, "CREATE");
        assert_eq!(
            names("Pod", ""),
            [
                ("pods", true),
                ("anything", false),
                ("services", true),
                ("pods-in-one-namespace", false),
                ("pods-but-some", false),
                ("versioned-pods", false),
                ("legacy-pods", true),
                ("written-pods", true),
                ("deleted-pods-or-services", false),
                ("misspelt-operation", false),
            ]
        );
        // The operation decides the rules that list operations; one that
        // is no admission operation's is matched by none.
        let matched = |operation| -> Vec<&str> {
            names_on("Pod", "", operation)
                .into_iter()
                .filter(|(_, matched)| *matched)
                .map(|(name, _)| name)
                .collect()
        };
        assert_eq!(
            matched("DELETE"),
            [
                "pods",
                "services",
                "legacy-pods",
                "deleted-pods-or-services"
            ]
        );
        assert_eq!(
            matched("UPDATE"),
            ["pods", "services", "legacy-pods", "written-pods"]
        );
        assert!(matched("BACKGROUND").is_empty());
        let on_pods = names("Pod", "exec");
        assert_eq!(on_pods.len(), 10);
        assert!(on_pods.iter().all(|(_, matched)| !matched), "{on_pods:?}");
        assert_eq!(
            names("Service", ""),
            [
                ("anything", false),
                ("services", true),
                ("deleted-pods-or-services", true)
            ]
        );
        assert_eq!(names("ConfigMap", ""), [("anything", false)]);
        // Every rule is a candidate for some kind.
        let all: std::collections::BTreeSet<&str> = ["Pod", "Service", "ConfigMap"]
            .iter()
            .flat_map(|k| names(k, ""))
            .map(|(name, _)| name)
            .collect();
        assert_eq!(all.len(), p.rules.len());
    }
}
