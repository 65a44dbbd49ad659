//! The cleanup controller's counters, under Kyverno's names: deletions and
//! errors per cleanup policy, per deleting policy, and of the TTL label.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyDeletionLabels {
    pub policy_type: String,
    pub policy_namespace: String,
    pub policy_name: String,
    pub resource_kind: String,
    pub resource_namespace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TtlLabels {
    pub resource_group: String,
    pub resource_version: String,
    pub resource_resource: String,
    pub resource_namespace: String,
}

#[derive(Clone, Default)]
pub struct CleanupMetrics {
    pub cleanup_deleted: Family<PolicyDeletionLabels, Counter>,
    pub cleanup_errors: Family<PolicyDeletionLabels, Counter>,
    pub deleting_deleted: Family<PolicyDeletionLabels, Counter>,
    pub deleting_errors: Family<PolicyDeletionLabels, Counter>,
    pub ttl_deleted: Family<TtlLabels, Counter>,
    pub ttl_errors: Family<TtlLabels, Counter>,
    /// Objects carrying the TTL label, as the watches hold them.
    pub ttl_objects: Gauge,
    /// Cleanup and deleting policies that do not compile.
    pub invalid_policies: Gauge,
}

impl CleanupMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kyverno_cleanup_controller_deletedobjects",
            "Objects deleted by CleanupPolicies and ClusterCleanupPolicies",
            self.cleanup_deleted.clone(),
        );
        registry.register(
            "kyverno_cleanup_controller_errors",
            "Failed deletions and lists of CleanupPolicies and ClusterCleanupPolicies",
            self.cleanup_errors.clone(),
        );
        registry.register(
            "kyverno_deleting_controller_deletedobjects",
            "Objects deleted by DeletingPolicies",
            self.deleting_deleted.clone(),
        );
        registry.register(
            "kyverno_deleting_controller_errors",
            "Failed deletions and lists of DeletingPolicies",
            self.deleting_errors.clone(),
        );
        registry.register(
            "kyverno_ttl_controller_deletedobjects",
            "Objects deleted when their cleanup.kyverno.io/ttl expired",
            self.ttl_deleted.clone(),
        );
        registry.register(
            "kyverno_ttl_controller_errors",
            "Failed deletions of objects whose cleanup.kyverno.io/ttl expired",
            self.ttl_errors.clone(),
        );
        registry.register(
            "gavel_cleanup_ttl_objects",
            "Objects carrying the cleanup.kyverno.io/ttl label, on the cleanup leader",
            self.ttl_objects.clone(),
        );
        registry.register(
            "gavel_cleanup_invalid_policies",
            "Cleanup and deleting policies that do not compile, on the cleanup leader",
            self.invalid_policies.clone(),
        );
    }
}
