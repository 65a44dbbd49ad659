//! The rule-kind index of a compiled policy: which of its rules can match
//! a kind, so that a request walks only its candidate rules.

use super::CompiledRule;
use crate::kinds::kind_hash;

/// The rules that can match a kind, as bit masks over the first 64 rules
/// kept apart from the (large) rules: a request skips the rules of other
/// kinds, typically the autogen rules of a Pod policy, without reading
/// them. A hash match is only a candidate; the rule's kinds still decide.
#[derive(Debug, Clone, Default)]
pub struct RuleKinds {
    /// Rules without a kinds list (any kind).
    any: u64,
    by_kind: Box<[(u64, u64)]>,
    /// More than 64 rules: no index, every rule is a candidate.
    unindexed: bool,
}

impl RuleKinds {
    pub(super) fn of(rules: &[CompiledRule]) -> RuleKinds {
        if rules.len() > 64 {
            return RuleKinds {
                unindexed: true,
                ..RuleKinds::default()
            };
        }
        let mut any = 0;
        let mut by_kind: Vec<(u64, u64)> = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            let bit = 1u64 << i;
            match &rule.kinds {
                None => any |= bit,
                Some(kinds) => {
                    for k in kinds {
                        let h = kind_hash(k);
                        match by_kind.iter_mut().find(|(x, _)| *x == h) {
                            Some((_, mask)) => *mask |= bit,
                            None => by_kind.push((h, bit)),
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

    /// The candidate rules for a kind with hash `hash`, in order.
    pub fn candidates(&self, hash: u64, rule_count: usize) -> Candidates {
        if self.unindexed {
            return Candidates {
                mask: 0,
                unindexed: 0..rule_count,
            };
        }
        let mask = self
            .by_kind
            .iter()
            .filter(|(h, _)| *h == hash)
            .fold(self.any, |m, (_, mask)| m | mask);
        Candidates {
            mask,
            unindexed: 0..0,
        }
    }
}

/// Indexes of candidate rules, in order; its exact length lets a policy's
/// response be allocated once.
#[derive(Debug, Clone)]
pub struct Candidates {
    mask: u64,
    /// Every rule, when the policy has too many to index.
    unindexed: std::ops::Range<usize>,
}

impl Iterator for Candidates {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.mask == 0 {
            return self.unindexed.next();
        }
        let i = self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(i)
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
    /// without kinds is a candidate for every kind; order is kept.
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
        let names = |kind: &str| -> Vec<&str> {
            p.rule_kinds
                .candidates(kind_hash(kind), p.rules.len())
                .map(|i| p.rules[i].name.as_str())
                .collect()
        };
        assert_eq!(names("Pod"), ["pods", "anything", "services"]);
        assert_eq!(names("Service"), ["anything", "services"]);
        assert_eq!(names("ConfigMap"), ["anything"]);
        // Every rule is a candidate for some kind.
        let all: std::collections::BTreeSet<&str> = ["Pod", "Service", "ConfigMap"]
            .iter()
            .flat_map(|k| names(k))
            .collect();
        assert_eq!(all.len(), p.rules.len());
    }
}
