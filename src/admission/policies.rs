//! The policy set compiled for evaluation: a [`PolicySet`] (loaded by
//! `policy::set`, from a directory, the cluster or the CLI's files) made
//! into one immutable [`Snapshot`] with its plan and per-route indexes, and
//! for the server published through arc-swap. A request loads the snapshot once and keeps
//! it to the end, so it sees exactly one policy set.
//!
//! The directory is polled: a file whose modification time or size changed
//! is loaded and compiled again. A file that fails keeps its last good
//! version in force (or none, if it never loaded) and the failure is logged
//! and counted.

use super::rule_table::{RuleMetrics, RuleTable};
use super::verdict::DenialHeads;
use crate::engine::json_context::Builtins;
use crate::engine::plan::Plan;
use crate::policy::cel_policy::{
    CompiledGeneratingPolicy, CompiledImageValidatingPolicy, CompiledMutatingPolicy,
    CompiledValidatingPolicy, PolicyScope,
};
use crate::policy::compile::FailurePolicy;
pub use crate::policy::set::{PolicySet, load_text};
use crate::policy::{CompiledException, CompiledPolicy};
use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

/// One compiled policy set.
#[derive(Default)]
pub struct Snapshot {
    pub policies: Vec<CompiledPolicy>,
    pub exceptions: Vec<CompiledException>,
    /// ValidatingPolicies, evaluated on the validate routes after the
    /// classic policies.
    pub validating: Vec<CompiledValidatingPolicy>,
    /// MutatingPolicies, applied on the mutate routes after the classic
    /// policies, each on the previous one's output.
    pub mutating: Vec<CompiledMutatingPolicy>,
    /// GeneratingPolicies: their admitted triggers leave UpdateRequests on
    /// the validating route of failurePolicy Ignore (Kyverno registers
    /// them so), and the background controller generates.
    pub generating: Vec<CompiledGeneratingPolicy>,
    /// ImageValidatingPolicies, evaluated on the validate routes after the
    /// ValidatingPolicies.
    pub image_validating: Vec<CompiledImageValidatingPolicy>,
    /// MutatingAdmissionPolicies: evaluated offline only (the API server
    /// enforces them in a cluster), after the classic mutate policies.
    pub admission_mutating: Vec<CompiledMutatingPolicy>,
    /// DeletingPolicies: `gavel test` reports whether a run would delete
    /// each resource (the cleanup controller runs them in a cluster).
    pub deleting: Vec<crate::policy::cleanup::CompiledCleanupPolicy>,
    /// Indexes into `policies` of the admission validate policies, per
    /// route: all, failurePolicy Fail, failurePolicy Ignore. Chosen once
    /// here rather than on every request.
    pub validate: [Vec<usize>; 3],
    /// What the request contexts of each validate route make up front
    /// (images, CEL variables), from the route's policies; found here
    /// rather than on every request.
    validate_builtins: [Builtins; 3],
    /// The same for the admission mutate policies, in load order (each
    /// sees the previous one's output).
    pub mutate: [Vec<usize>; 3],
    /// The same for the policies that leave background work (generate,
    /// mutate existing), whose triggers the validating webhook of their
    /// failurePolicy sees.
    pub background: [Vec<usize>; 3],
    /// Increases by one with every published snapshot.
    pub generation: u64,
    /// Per-rule result counters of this snapshot's policies.
    pub rule_table: Arc<RuleTable>,
    /// The start of each policy's denial messages, by policy index.
    pub denial_heads: Vec<DenialHeads>,
    /// Some policy or exception matches on namespaceSelector, so requests
    /// need their namespace's labels; looked up only then.
    pub needs_namespace_labels: bool,
    /// The validate routes decode a review's objects into documents: every
    /// policy they evaluate reads them so (`CompiledPolicy::reads_documents`;
    /// ValidatingPolicies do, CEL reading the document in place), and none
    /// leaves background work. Otherwise a `serde_json::Value`, which
    /// podSecurity, manifests, image verification and mutation read, is
    /// decoded directly rather than made from a document.
    pub validate_reads_documents: bool,
    /// What the classic policies and ValidatingPolicies share per request
    /// (`engine::plan`).
    pub plan: Plan,
}

impl Snapshot {
    pub fn new(mut set: PolicySet, generation: u64) -> Snapshot {
        set.attach_cel_exceptions();
        let PolicySet {
            mut policies,
            exceptions,
            mut validating,
            mutating,
            admission_mutating,
            generating,
            image_validating,
            deleting,
            cel_exceptions: _,
        } = set;
        let select = |f: Option<FailurePolicy>, has: fn(&CompiledPolicy) -> bool| -> Vec<usize> {
            policies
                .iter()
                .enumerate()
                .filter(|(_, p)| p.admission && has(p))
                .filter(|(_, p)| f.is_none_or(|f| p.failure_policy == f))
                .map(|(i, _)| i)
                .collect()
        };
        let per_route = |has: fn(&CompiledPolicy) -> bool| {
            [
                select(None, has),
                select(Some(FailurePolicy::Fail), has),
                select(Some(FailurePolicy::Ignore), has),
            ]
        };
        // verifyImages rules have both their phases on the validate routes.
        let validate = per_route(|p| p.has_validation_phase() || p.has_verify_images());
        let mutate = per_route(CompiledPolicy::has_mutate);
        let background = per_route(CompiledPolicy::has_background_work);
        let needs_namespace_labels = policies
            .iter()
            .flat_map(|p| &p.rules)
            .flat_map(|r| std::iter::once(&r.match_resources).chain(r.exclude.as_ref()))
            .chain(exceptions.iter().map(|e| &e.match_resources))
            .any(|m| m.uses_namespace_selector())
            || validating
                .iter()
                .map(|p| &p.scope)
                .chain(mutating.iter().map(|p| &p.scope))
                .chain(generating.iter().map(|p| &p.scope))
                .chain(image_validating.iter().map(|p| &p.scope))
                .any(|s| s.match_constraints.namespace_selector.is_some());
        let validate_reads_documents = generating.is_empty()
            && image_validating.is_empty()
            && background[0].is_empty()
            && validate[0].iter().all(|&i| policies[i].reads_documents());
        // One plan for all the classic policies and ValidatingPolicies: a
        // route's request also walks the patterns (and evaluates the CEL
        // checks) of policies on other routes that share a group with its
        // own (sets seen so far use one route).
        let plan = crate::engine::plan_policies(&mut policies, &mut validating);
        let validate_builtins = std::array::from_fn(|route| {
            Builtins::of(validate[route].iter().map(|&i| &policies[i]))
        });
        Snapshot {
            plan,
            validate_builtins,
            needs_namespace_labels,
            validate_reads_documents,
            rule_table: Arc::new(
                RuleTable::new(&policies, &validating, &mutating).of_generation(generation),
            ),
            denial_heads: DenialHeads::of_set(&policies),
            policies,
            exceptions,
            validating,
            mutating,
            generating,
            image_validating,
            admission_mutating,
            deleting,
            validate,
            mutate,
            background,
            generation,
        }
    }

    /// The rule-table index of ValidatingPolicy `i` (see [`RuleTable::new`]).
    pub fn validating_index(&self, i: usize) -> usize {
        self.policies.len() + i
    }

    /// The rule-table index of MutatingPolicy `i`.
    pub fn mutating_index(&self, i: usize) -> usize {
        self.policies.len() + self.validating.len() + i
    }

    /// The names report results carry for the loaded policies (classic,
    /// ValidatingPolicies and ImageValidatingPolicies): results of any
    /// other policy are dropped.
    pub fn report_policy_names(&self) -> std::collections::BTreeSet<String> {
        self.policies
            .iter()
            .map(|p| p.qualified_name().to_string())
            .chain(self.validating.iter().map(|p| p.key.clone()))
            .chain(self.image_validating.iter().map(|p| p.key.clone()))
            .collect()
    }

    /// Policies of every kind (not exceptions).
    pub fn policy_count(&self) -> usize {
        self.policies.len()
            + self.validating.len()
            + self.mutating.len()
            + self.admission_mutating.len()
            + self.generating.len()
            + self.image_validating.len()
            + self.deleting.len()
    }

    /// The GeneratingPolicies whose triggers a validating route sees: all
    /// of them on the route of every policy and on the Ignore route (their
    /// failure policy), none on the Fail route.
    pub fn generating_on(&self, f: Option<FailurePolicy>) -> &[CompiledGeneratingPolicy] {
        match f {
            Some(FailurePolicy::Fail) => &[],
            _ => &self.generating,
        }
    }

    /// Whether a validate route has CEL policies to evaluate at admission
    /// (ValidatingPolicies, ImageValidatingPolicies): the request's CEL
    /// variables are made only then.
    pub fn cel_validation_on(&self, f: Option<FailurePolicy>) -> bool {
        self.validating
            .iter()
            .map(|p| (p.admission, &p.scope))
            .chain(
                self.image_validating
                    .iter()
                    .map(|p| (p.admission, &p.scope)),
            )
            .any(|(admission, scope)| admission && Snapshot::cel_selected(scope, f))
    }

    /// The CEL policies of a route: all, or those of one failurePolicy
    /// (their default is Fail).
    pub fn cel_selected(scope: &PolicyScope, f: Option<FailurePolicy>) -> bool {
        match f {
            None => true,
            Some(FailurePolicy::Ignore) => scope.failure_policy_ignore,
            Some(FailurePolicy::Fail) => !scope.failure_policy_ignore,
        }
    }

    /// Indexes into `policies` of the validate policies a route evaluates.
    pub fn validate_indexes(&self, f: Option<FailurePolicy>) -> &[usize] {
        &self.validate[route_slot(f)]
    }

    /// What a validate route's request contexts make up front
    /// ([`Builtins::of`] its policies).
    pub fn validate_builtins(&self, f: Option<FailurePolicy>) -> Builtins {
        self.validate_builtins[route_slot(f)]
    }

    /// Indexes into `policies` of the policies whose background work a
    /// validating route finds.
    pub fn background_indexes(&self, f: Option<FailurePolicy>) -> &[usize] {
        &self.background[route_slot(f)]
    }

    /// Indexes into `policies` of the mutate policies a route evaluates.
    pub fn mutate_indexes(&self, f: Option<FailurePolicy>) -> &[usize] {
        &self.mutate[route_slot(f)]
    }
}

fn route_slot(f: Option<FailurePolicy>) -> usize {
    match f {
        None => 0,
        Some(FailurePolicy::Fail) => 1,
        Some(FailurePolicy::Ignore) => 2,
    }
}

/// Publishes snapshots: numbers them and registers each one's rule table
/// with the metrics. Shared by the directory store and the cluster's
/// policy sync.
pub struct Publisher {
    current: Arc<ArcSwap<Snapshot>>,
    /// Policies (files or objects) rejected since start.
    pub rejected: Counter,
    /// Told about every published snapshot's rule table.
    rule_metrics: Option<Arc<RuleMetrics>>,
}

impl Default for Publisher {
    fn default() -> Publisher {
        Publisher {
            current: Arc::new(ArcSwap::from_pointee(Snapshot::default())),
            rejected: Counter::default(),
            rule_metrics: None,
        }
    }
}

impl Publisher {
    /// Counts rejections in `rejected` and hands every published
    /// snapshot's rule table to `rules`.
    pub fn report_to(&mut self, rejected: Counter, rules: Arc<RuleMetrics>) {
        self.rejected = rejected;
        rules.track(self.current.load().rule_table.clone());
        self.rule_metrics = Some(rules);
    }

    /// The handle requests read snapshots from.
    pub fn handle(&self) -> Arc<ArcSwap<Snapshot>> {
        self.current.clone()
    }

    pub fn generation(&self) -> u64 {
        self.current.load().generation
    }

    pub fn publish(&self, set: PolicySet) {
        let snapshot = Snapshot::new(set, self.generation() + 1);
        if let Some(metrics) = &self.rule_metrics {
            metrics.track(snapshot.rule_table.clone());
        }
        self.current.store(Arc::new(snapshot));
    }
}

/// What one file contributed, and the stamp it was loaded at.
struct FileEntry {
    stamp: (Option<SystemTime>, u64),
    set: PolicySet,
}

/// The directory, its last good per-file results and the published snapshot.
pub struct PolicyStore {
    dir: PathBuf,
    files: BTreeMap<PathBuf, FileEntry>,
    pub publisher: Publisher,
}

/// A file that could not be used, with the reason.
#[derive(Debug)]
pub struct Rejected {
    pub path: PathBuf,
    pub reason: String,
}

impl PolicyStore {
    pub fn new(dir: &Path) -> PolicyStore {
        PolicyStore {
            dir: dir.to_path_buf(),
            files: BTreeMap::new(),
            publisher: Publisher::default(),
        }
    }

    /// Rescans the directory; publishes a new snapshot when anything changed.
    /// Returns the files rejected in this scan.
    pub fn refresh(&mut self) -> std::io::Result<Vec<Rejected>> {
        let mut seen = Vec::new();
        collect_yaml(&self.dir, &mut seen)?;
        let mut changed = false;
        let mut rejected = Vec::new();
        let before = self.files.len();
        self.files.retain(|p, _| seen.contains(p));
        changed |= self.files.len() != before;
        for path in seen {
            let stamp = match std::fs::metadata(&path) {
                Ok(m) => (m.modified().ok(), m.len()),
                Err(_) => continue,
            };
            if self.files.get(&path).is_some_and(|f| f.stamp == stamp) {
                continue;
            }
            match load_file(&path) {
                Ok(set) => {
                    self.files.insert(path, FileEntry { stamp, set });
                    changed = true;
                }
                Err(reason) => {
                    self.publisher.rejected.inc();
                    // Keep the last good version, but do not retry this
                    // content on every scan.
                    if let Some(f) = self.files.get_mut(&path) {
                        f.stamp = stamp;
                    } else {
                        self.files.insert(
                            path.clone(),
                            FileEntry {
                                stamp,
                                set: PolicySet::default(),
                            },
                        );
                    }
                    rejected.push(Rejected { path, reason });
                }
            }
        }
        if changed || self.publisher.generation() == 0 {
            let mut set = PolicySet::default();
            for f in self.files.values() {
                set.extend(&f.set);
            }
            self.publisher.publish(set);
        }
        Ok(rejected)
    }
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_yaml(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

/// Loads and compiles one file; any bad document rejects the whole file, so
/// a half-edited file never replaces its last good version.
pub(super) fn load_file(path: &Path) -> Result<PolicySet, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    load_text(&path.display().to_string(), &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata:\n  name: p\nspec:\n  rules:\n  - name: r\n    match:\n      any:\n      - resources:\n          kinds: [Pod]\n    validate:\n      pattern:\n        metadata:\n          name: \"?*\"\n";

    /// The validate routes decode documents only when every policy they
    /// evaluate reads them: a pattern policy does, a validate.cel or
    /// podSecurity rule (which read a `serde_json::Value`) does not.
    #[test]
    fn validate_routes_decode_documents_only_for_policies_that_read_them() {
        let snapshot_of = |texts: &[&str]| {
            let policies = texts
                .iter()
                .flat_map(|t| crate::policy::load::load_policy_text("p.yaml", t).unwrap())
                .map(|d| match d {
                    crate::policy::load::LoadedDocument::Policy(p) => {
                        CompiledPolicy::compile(&p).unwrap()
                    }
                    _ => panic!("not a classic policy"),
                })
                .collect();
            Snapshot::new(
                PolicySet {
                    policies,
                    ..PolicySet::default()
                },
                1,
            )
        };
        let cel = GOOD.replace(
            "pattern:\n        metadata:\n          name: \"?*\"\n",
            "cel:\n        expressions:\n        - expression: \"true\"\n",
        );
        let pss = GOOD.replace(
            "pattern:\n        metadata:\n          name: \"?*\"\n",
            "podSecurity:\n        level: baseline\n",
        );
        assert_ne!(cel, GOOD);
        assert_ne!(pss, GOOD);
        assert!(snapshot_of(&[]).validate_reads_documents);
        assert!(snapshot_of(&[GOOD]).validate_reads_documents);
        // CEL reads the document in place; podSecurity reads a `Value`.
        assert!(snapshot_of(&[GOOD, &cel]).validate_reads_documents);
        assert!(!snapshot_of(&[&pss]).validate_reads_documents);
        assert!(!snapshot_of(&[GOOD, &cel, &pss]).validate_reads_documents);
    }

    #[test]
    fn bad_file_keeps_last_good_version() {
        let dir = std::env::temp_dir().join(format!("gavel-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.yaml");
        std::fs::write(&file, GOOD).unwrap();
        let mut store = PolicyStore::new(&dir);
        let handle = store.publisher.handle();
        assert!(store.refresh().unwrap().is_empty());
        assert_eq!(handle.load().policies.len(), 1);
        let generation = handle.load().generation;

        // A broken edit (different size, so the stamp changes) is rejected.
        std::fs::write(
            &file,
            "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nspec: {bogus: 1}\n",
        )
        .unwrap();
        let rejected = store.refresh().unwrap();
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert_eq!(handle.load().policies.len(), 1);
        assert_eq!(handle.load().generation, generation);
        assert_eq!(store.publisher.rejected.get(), 1);

        std::fs::remove_file(&file).unwrap();
        store.refresh().unwrap();
        assert_eq!(handle.load().policies.len(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The server has no store of params: a parameterised validate.cel
    /// rule is rejected with the reason rather than failing every request.
    #[test]
    fn parameterised_rules_are_rejected_with_a_reason() {
        let dir = std::env::temp_dir().join(format!("gavel-store-params-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.yaml");
        std::fs::write(
            &file,
            "apiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: p}\nspec:\n  rules:\n  - name: r\n    match: {any: [{resources: {kinds: [Pod]}}]}\n    validate:\n      cel:\n        paramKind: {apiVersion: v1, kind: ConfigMap}\n        paramRef: {name: limits}\n        expressions: [{expression: 'true'}]\n",
        )
        .unwrap();
        let mut store = PolicyStore::new(&dir);
        let rejected = store.refresh().unwrap();
        assert_eq!(rejected.len(), 1, "{rejected:?}");
        assert!(
            rejected[0]
                .reason
                .contains("unsupported: validate.cel.paramKind in the server"),
            "{}",
            rejected[0].reason
        );
        assert_eq!(store.publisher.handle().load().policies.len(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
