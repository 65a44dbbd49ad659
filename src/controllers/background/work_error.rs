//! Why the background work of one UpdateRequest (or one policy change)
//! failed. The message goes into the request's `status.message` and the
//! `PolicyError` Event, in Kyverno's words where it has them; the reason
//! labels `gavel_background_failures`, so that an operator sees at a
//! glance whether the API server refuses gavel's writes, the policies
//! fail, or a replica is behind on the policy set.

use crate::cluster::client::ApiFailure;

/// One failure of background work.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkError {
    /// Written by a replica that serves a policy this one has not loaded
    /// yet: tried again shortly, not dropped.
    #[error("policy {0} is not loaded here yet")]
    NotLoadedYet(String),
    /// The trigger is gone, or was never stored (a later admission step
    /// rejected it).
    #[error("{0}")]
    TriggerGone(String),
    /// The rule or policy failed on the trigger: its message.
    #[error("{0}")]
    Evaluation(String),
    /// The evaluation thread panicked (a bug; the request is retried).
    #[error("evaluation panicked: {0}")]
    Panicked(String),
    /// What the work would write cannot be written as it is (no kind or
    /// name, not an object, not a valid object of its kind, a namespaced
    /// policy reaching outside its namespace).
    #[error("{0}")]
    Invalid(String),
    /// The API server refused or failed a read or a write.
    #[error(transparent)]
    Api(#[from] ApiFailure),
    /// One part of the work (a rule, a target, a policy) failed.
    #[error("{part}: {cause}")]
    In { part: String, cause: Box<WorkError> },
    /// Several parts failed, each said in turn.
    #[error("{}", join(.0))]
    Several(Vec<WorkError>),
}

fn join(errors: &[WorkError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl WorkError {
    /// A failed API call on `what`.
    pub fn api(what: impl Into<String>, e: &kube::Error) -> WorkError {
        WorkError::Api(ApiFailure::new(what, e))
    }

    /// This failure as part of the work on `part`.
    pub fn within(self, part: impl Into<String>) -> WorkError {
        WorkError::In {
            part: part.into(),
            cause: Box::new(self),
        }
    }

    /// Done when nothing failed; the one failure, or all of them.
    pub fn all(mut errors: Vec<WorkError>) -> Result<(), WorkError> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(WorkError::Several(errors)),
        }
    }

    /// The `reason` label of `gavel_background_failures`: for several
    /// failures, the first one's.
    pub fn metric_label(&self) -> &'static str {
        match self {
            WorkError::NotLoadedYet(_) => "not_loaded",
            WorkError::TriggerGone(_) => "trigger_gone",
            WorkError::Evaluation(_) => "evaluation",
            WorkError::Panicked(_) => "panicked",
            WorkError::Invalid(_) => "invalid",
            WorkError::Api(failure) => failure.metric_label(),
            WorkError::In { cause, .. } => cause.metric_label(),
            WorkError::Several(errors) => errors.first().map_or("failed", Self::metric_label),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_nest_as_kyverno_words_them_and_labels_follow_the_cause() {
        let refused = WorkError::Api(ApiFailure {
            what: "downstream v1/ConfigMap a/b".into(),
            reason: "403 forbidden".into(),
            code: Some(403),
        });
        let failed = WorkError::Evaluation("variable not found".into()).within("rule clone");
        let both = WorkError::all(vec![refused.clone().within("rule copy"), failed]).unwrap_err();
        assert_eq!(
            both.to_string(),
            "rule copy: downstream v1/ConfigMap a/b: 403 forbidden; rule clone: variable not found"
        );
        assert_eq!(both.metric_label(), "forbidden");
        assert_eq!(WorkError::all(vec![]), Ok(()));
        assert_eq!(WorkError::all(vec![refused.clone()]), Err(refused));
        assert_eq!(
            WorkError::NotLoadedYet("p".into()).to_string(),
            "policy p is not loaded here yet"
        );
    }
}
