//! Kubernetes Events (events.k8s.io/v1) as Kyverno's event generator
//! writes them: `PolicyViolation` (Warning) for the webhook's failed rules
//! ([`crate::admission::events`], reporting controller
//! `kyverno-admission`); for its background controllers `PolicyError` (Warning) on
//! the policy when generation, mutation of existing resources or a
//! cleanup fails, with the resource concerned as `related`; `PolicyApplied`
//! (Normal) on success, only when `PolicyApplied` is not in
//! `--omit-events` (Kyverno's chart omits it, and `PolicySkipped`, by
//! default). Reporting controller `kyverno-generate`, `kyverno-mutate` or
//! `kyverno-cleanup`, as Kyverno's, so `kubectl events` and dashboards
//! that filter on them see gavel's.
//!
//! Events are written by one task from a bounded queue
//! (`--max-queued-events`, Kyverno's flag): a full queue drops and counts,
//! never blocks a controller. kube's `Recorder` (a well-kept crate) turns
//! repeats into a series instead of new objects.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use prometheus_client::metrics::counter::Counter;
use std::collections::{BTreeSet, HashMap};
use tokio::sync::mpsc;

/// Which controller an event comes from (its reporting controller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// The webhook's validation: `PolicyViolation`.
    Admission,
    Generate,
    MutateExisting,
    Cleanup,
}

impl Source {
    fn controller(self) -> &'static str {
        match self {
            Source::Admission => "kyverno-admission",
            Source::Generate => "kyverno-generate",
            Source::MutateExisting => "kyverno-mutate",
            Source::Cleanup => "kyverno-cleanup",
        }
    }
}

/// Settings of the event writer.
#[derive(Debug, Clone)]
pub struct EventOptions {
    /// Events held for writing before new ones are dropped.
    pub max_queued: usize,
    /// Reasons not written (`PolicyApplied`, `PolicyError`, ...).
    pub omit: BTreeSet<String>,
    /// This replica's name, for the reporting instance.
    pub instance: String,
}

struct Pending {
    source: Source,
    event: Event,
    regarding: ObjectReference,
}

/// Where controllers send their events.
#[derive(Clone)]
pub struct Events {
    queue: Option<mpsc::Sender<Pending>>,
    omit: BTreeSet<String>,
    dropped: Counter,
}

impl Events {
    /// Starts the writer on the current runtime.
    pub fn start(client: Client, opts: &EventOptions, dropped: Counter) -> Events {
        let (tx, mut rx) = mpsc::channel::<Pending>(opts.max_queued.max(1));
        let instance = opts.instance.clone();
        tokio::spawn(async move {
            let mut recorders: HashMap<Source, Recorder> = HashMap::new();
            while let Some(p) = rx.recv().await {
                let recorder = recorders.entry(p.source).or_insert_with(|| {
                    let reporter = Reporter {
                        controller: p.source.controller().into(),
                        instance: Some(format!("{}-{instance}", p.source.controller())),
                    };
                    Recorder::new(client.clone(), reporter)
                });
                if let Err(e) = recorder.publish(&p.event, &p.regarding).await {
                    tracing::debug!(error = %e, reason = p.event.reason, "event not written");
                }
            }
        });
        Events {
            queue: Some(tx),
            omit: opts.omit.clone(),
            dropped,
        }
    }

    /// Writes nothing (standalone, tests).
    pub fn none() -> Events {
        Events {
            queue: None,
            omit: BTreeSet::new(),
            dropped: Counter::default(),
        }
    }

    /// A failure of `policy` on `related`.
    pub fn policy_error(
        &self,
        source: Source,
        policy: ObjectReference,
        related: Option<ObjectReference>,
        note: String,
    ) {
        self.send(
            source,
            "PolicyError",
            EventType::Warning,
            "None",
            policy,
            related,
            note,
        );
    }

    /// A success of `policy` on `related` (`action`: Kyverno's
    /// `ResourceGenerated`, `ResourceMutated`, `ResourceCleanedUp`).
    pub fn policy_applied(
        &self,
        source: Source,
        action: &str,
        policy: ObjectReference,
        related: Option<ObjectReference>,
        note: String,
    ) {
        self.send(
            source,
            "PolicyApplied",
            EventType::Normal,
            action,
            policy,
            related,
            note,
        );
    }

    /// An event of an admission review (the webhook's, by Kyverno's
    /// admission controller's name).
    pub fn admission(&self, event: crate::admission::events::AdmissionEvent) {
        let to_reference =
            |o: std::sync::Arc<crate::admission::events::EventObject>| ObjectReference {
                uid: (!o.uid.is_empty()).then(|| o.uid.clone()),
                ..reference(&o.api_version, &o.kind, &o.namespace, &o.name)
            };
        self.send(
            Source::Admission,
            event.reason,
            EventType::Warning,
            event.action,
            to_reference(event.regarding),
            event.related.map(to_reference),
            event.note,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn send(
        &self,
        source: Source,
        reason: &str,
        type_: EventType,
        action: &str,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
        note: String,
    ) {
        let Some(queue) = &self.queue else { return };
        if self.omit.contains(reason) || regarding.name.as_deref().unwrap_or_default().is_empty() {
            return;
        }
        // The API's limit on a note.
        let note = if note.len() > 1024 {
            let mut cut = 1021;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{}...", &note[..cut])
        } else {
            note
        };
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: related,
        };
        if queue
            .try_send(Pending {
                source,
                event,
                regarding,
            })
            .is_err()
        {
            self.dropped.inc();
        }
    }
}

/// A reference to an object by apiVersion, kind, namespace and name.
pub fn reference(api_version: &str, kind: &str, namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
        name: Some(name.into()),
        ..ObjectReference::default()
    }
}
