//! The one policy set: every kind gavel evaluates, compiled through one
//! dispatch ([`Policy::compile`]) and gathered by one loader ([`Loader`]).
//! The server's snapshot (a directory or the cluster's policy objects),
//! the policy validation webhook, `gavel test` and `gavel apply` all build
//! their [`PolicySet`] here; what differs between them is written once in
//! [`LoadOptions`].
//!
//! Adding a kind: a variant of [`Policy`] and its arm in
//! [`Policy::compile`], a field of [`PolicySet`] and its arm in
//! [`PolicySet::add`]; the kind's document and compile step live in a
//! file of their own (`cel_policy/<kind>.rs`, `compile.rs`, `cleanup.rs`).

use super::cel_policy::{
    AdmissionDocs, CelCompileError, CompiledCelException, CompiledGeneratingPolicy,
    CompiledImageValidatingPolicy, CompiledMutatingPolicy, CompiledValidatingPolicy, PolicyScope,
    attach_exceptions_to,
};
use super::cleanup::CompiledCleanupPolicy;
use super::load::{LoadError, LoadedDocument, load_policy_text};
use super::{CompiledException, CompiledPolicy};
use std::sync::Arc;

/// What differs between the callers that load policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// PolicyExceptions (of either group) among the policy documents take
    /// effect. kyverno-compat: `kyverno apply` counts them only with
    /// `--exceptions-within-policies`; `kyverno test` and the server always.
    pub exceptions_within_policies: bool,
    /// ValidatingAdmissionPolicies, MutatingAdmissionPolicies and their
    /// bindings are evaluated (offline); the server refuses them, because
    /// the API server enforces admission policies itself.
    pub admission_policies: bool,
    /// DeletingPolicies are compiled into the set (`gavel test` reports
    /// whether a run would delete each resource); elsewhere they are an
    /// unsupported kind here (the server's cleanup controller reads them
    /// from its own store).
    pub deleting_policies: bool,
    /// The server's own limits apply (`CompiledPolicy::check_servable`:
    /// no params store in the server).
    pub server: bool,
}

impl LoadOptions {
    /// The server: a directory, the cluster's policy objects, the policy
    /// validation webhook.
    pub const SERVER: LoadOptions = LoadOptions {
        exceptions_within_policies: true,
        admission_policies: false,
        deleting_policies: false,
        server: true,
    };
    /// `gavel test`.
    pub const TEST: LoadOptions = LoadOptions {
        exceptions_within_policies: true,
        admission_policies: true,
        deleting_policies: true,
        server: false,
    };

    /// `gavel apply`.
    pub const fn apply(exceptions_within_policies: bool) -> LoadOptions {
        LoadOptions {
            exceptions_within_policies,
            admission_policies: true,
            deleting_policies: false,
            server: false,
        }
    }
}

/// One compiled policy document of any kind.
#[derive(Debug, Clone)]
pub enum Policy {
    /// kyverno.io ClusterPolicy / Policy.
    Classic(Box<CompiledPolicy>),
    /// kyverno.io PolicyException.
    Exception(Box<CompiledException>),
    /// ValidatingPolicy / NamespacedValidatingPolicy, and a
    /// ValidatingAdmissionPolicy compiled with its bindings.
    Validating(Box<CompiledValidatingPolicy>),
    /// MutatingPolicy / NamespacedMutatingPolicy.
    Mutating(Box<CompiledMutatingPolicy>),
    /// A MutatingAdmissionPolicy compiled with its bindings.
    AdmissionMutating(Box<CompiledMutatingPolicy>),
    /// GeneratingPolicy / NamespacedGeneratingPolicy.
    Generating(Box<CompiledGeneratingPolicy>),
    /// ImageValidatingPolicy / NamespacedImageValidatingPolicy.
    ImageValidating(Box<CompiledImageValidatingPolicy>),
    /// DeletingPolicy / NamespacedDeletingPolicy.
    Deleting(Box<CompiledCleanupPolicy>),
    /// policies.kyverno.io PolicyException.
    CelException(Arc<CompiledCelException>),
}

/// A document that could not be compiled, with the reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{reason}")]
pub struct Rejection {
    pub kind: String,
    pub name: String,
    /// The whole message, naming the kind and the policy.
    pub reason: String,
    /// A kind or field gavel does not evaluate (as opposed to an invalid
    /// document): its reason starts `unsupported:` or names the policy's
    /// `unsupported:` field.
    pub unsupported: bool,
}

impl Rejection {
    fn new(doc: &LoadedDocument, reason: String, unsupported: bool) -> Rejection {
        let (kind, name) = doc.kind_and_name();
        Rejection {
            kind: kind.to_string(),
            name: name.to_string(),
            reason,
            unsupported,
        }
    }

    /// A CEL kind's error, named as the server and `gavel apply` show it.
    fn cel(doc: &LoadedDocument, e: CelCompileError) -> Rejection {
        let (kind, name) = doc.kind_and_name();
        Rejection::named(kind, name, e)
    }

    fn named(kind: &str, name: &str, e: CelCompileError) -> Rejection {
        Rejection {
            kind: kind.to_string(),
            name: name.to_string(),
            unsupported: matches!(e, CelCompileError::Unsupported(_)),
            reason: format!("{kind} {name}: {e}"),
        }
    }

    /// Whether the rejected document is a PolicyException of either group.
    pub fn is_exception(&self) -> bool {
        self.kind == "PolicyException"
    }
}

impl Policy {
    /// Compiles one document. `Ok(None)` for what is gathered by the
    /// [`Loader`] rather than compiled alone (admission policies and their
    /// bindings) and for exceptions the options leave out.
    pub fn compile(
        doc: LoadedDocument,
        options: &LoadOptions,
    ) -> Result<Option<Policy>, Rejection> {
        let cel = |e| Rejection::cel(&doc, e);
        let policy = match &doc {
            LoadedDocument::Policy(p) => {
                let policy = CompiledPolicy::compile(p)
                    .map_err(|e| Rejection::new(&doc, e.to_string(), false))?;
                if options.server {
                    policy
                        .check_servable()
                        .map_err(|e| Rejection::new(&doc, e, true))?;
                }
                Policy::Classic(Box::new(policy))
            }
            LoadedDocument::Exception(_) | LoadedDocument::CelException(_)
                if !options.exceptions_within_policies =>
            {
                return Ok(None);
            }
            LoadedDocument::Exception(e) => Policy::Exception(Box::new(
                CompiledException::compile(e)
                    .map_err(|e| Rejection::new(&doc, e.to_string(), false))?,
            )),
            LoadedDocument::CelException(e) => {
                Policy::CelException(Arc::new(CompiledCelException::compile(e).map_err(cel)?))
            }
            LoadedDocument::ValidatingPolicy(p) => {
                Policy::Validating(Box::new(CompiledValidatingPolicy::compile(p).map_err(cel)?))
            }
            LoadedDocument::MutatingPolicy(p) => {
                Policy::Mutating(Box::new(CompiledMutatingPolicy::compile(p).map_err(cel)?))
            }
            LoadedDocument::GeneratingPolicy(p) => {
                Policy::Generating(Box::new(CompiledGeneratingPolicy::compile(p).map_err(cel)?))
            }
            LoadedDocument::ImageValidatingPolicy(p) => Policy::ImageValidating(Box::new(
                CompiledImageValidatingPolicy::compile(p).map_err(cel)?,
            )),
            LoadedDocument::ValidatingAdmissionPolicy(_)
            | LoadedDocument::MutatingAdmissionPolicy(_)
            | LoadedDocument::AdmissionPolicyBinding(_) => {
                if options.admission_policies {
                    return Ok(None);
                }
                let (kind, name) = doc.kind_and_name();
                return Err(Rejection::new(
                    &doc,
                    format!(
                        "unsupported: policy kind {kind} ({name}) in the server: the API server \
                         enforces admission policies itself (gavel test and apply evaluate them)"
                    ),
                    true,
                ));
            }
            LoadedDocument::Unsupported {
                api_version,
                kind,
                document,
                ..
            } if options.deleting_policies
                && api_version.starts_with("policies.kyverno.io/")
                && matches!(kind.as_str(), "DeletingPolicy" | "NamespacedDeletingPolicy") =>
            {
                Policy::Deleting(Box::new(
                    CompiledCleanupPolicy::compile(document)
                        .map_err(|e| Rejection::new(&doc, e, false))?,
                ))
            }
            LoadedDocument::Unsupported { kind, name, .. } => {
                return Err(Rejection::new(
                    &doc,
                    format!("unsupported: policy kind {kind} ({name})"),
                    true,
                ));
            }
        };
        Ok(Some(policy))
    }
}

/// Compiled policies of every kind, in load order within each kind.
#[derive(Debug, Clone, Default)]
pub struct PolicySet {
    pub policies: Vec<CompiledPolicy>,
    pub exceptions: Vec<CompiledException>,
    pub validating: Vec<CompiledValidatingPolicy>,
    pub mutating: Vec<CompiledMutatingPolicy>,
    /// MutatingAdmissionPolicies (offline only): evaluated after the
    /// classic mutate policies and before the MutatingPolicies.
    pub admission_mutating: Vec<CompiledMutatingPolicy>,
    pub generating: Vec<CompiledGeneratingPolicy>,
    pub image_validating: Vec<CompiledImageValidatingPolicy>,
    /// DeletingPolicies (`gavel test` only).
    pub deleting: Vec<CompiledCleanupPolicy>,
    /// PolicyExceptions (policies.kyverno.io) of the CEL kinds: attached to
    /// the policies they name when the set is complete
    /// ([`PolicySet::attach_cel_exceptions`]).
    pub cel_exceptions: Vec<Arc<CompiledCelException>>,
}

impl PolicySet {
    /// Files a compiled policy with its kind.
    pub fn add(&mut self, policy: Policy) {
        match policy {
            Policy::Classic(p) => self.policies.push(*p),
            Policy::Exception(e) => self.exceptions.push(*e),
            Policy::Validating(p) => self.validating.push(*p),
            Policy::Mutating(p) => self.mutating.push(*p),
            Policy::AdmissionMutating(p) => self.admission_mutating.push(*p),
            Policy::Generating(p) => self.generating.push(*p),
            Policy::ImageValidating(p) => self.image_validating.push(*p),
            Policy::Deleting(p) => self.deleting.push(*p),
            Policy::CelException(e) => self.cel_exceptions.push(e),
        }
    }

    /// The scopes of every CEL policy, which exceptions attach to.
    fn cel_scopes(&mut self) -> impl Iterator<Item = &mut PolicyScope> {
        self.validating
            .iter_mut()
            .map(|p| &mut p.scope)
            .chain(self.mutating.iter_mut().map(|p| &mut p.scope))
            .chain(self.admission_mutating.iter_mut().map(|p| &mut p.scope))
            .chain(self.generating.iter_mut().map(|p| &mut p.scope))
            .chain(self.image_validating.iter_mut().map(|p| &mut p.scope))
    }

    /// Gives each CEL policy the PolicyExceptions that name it.
    pub fn attach_cel_exceptions(&mut self) {
        let exceptions = std::mem::take(&mut self.cel_exceptions);
        attach_exceptions_to(self.cel_scopes(), &exceptions);
        self.cel_exceptions = exceptions;
    }

    /// Adds another set's policies after this one's.
    pub fn extend(&mut self, other: &PolicySet) {
        self.policies.extend(other.policies.iter().cloned());
        self.exceptions.extend(other.exceptions.iter().cloned());
        self.validating.extend(other.validating.iter().cloned());
        self.mutating.extend(other.mutating.iter().cloned());
        self.admission_mutating
            .extend(other.admission_mutating.iter().cloned());
        self.generating.extend(other.generating.iter().cloned());
        self.image_validating
            .extend(other.image_validating.iter().cloned());
        self.deleting.extend(other.deleting.iter().cloned());
        self.cel_exceptions
            .extend(other.cel_exceptions.iter().cloned());
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
}

/// Gathers documents into a [`PolicySet`]: each compiled as it comes,
/// admission policies once their bindings are all read (a binding may come
/// after its policy), CEL exceptions attached at the end.
#[derive(Debug)]
pub struct Loader {
    options: LoadOptions,
    set: PolicySet,
    admission: AdmissionDocs,
    rejected: Vec<Rejection>,
}

impl Loader {
    pub fn new(options: LoadOptions) -> Loader {
        Loader {
            options,
            set: PolicySet::default(),
            admission: AdmissionDocs::default(),
            rejected: Vec::new(),
        }
    }

    /// Compiles one document into the set, or records why not.
    pub fn add(&mut self, doc: LoadedDocument) {
        match doc {
            LoadedDocument::ValidatingAdmissionPolicy(p) if self.options.admission_policies => {
                self.admission.validating.push(*p)
            }
            LoadedDocument::MutatingAdmissionPolicy(p) if self.options.admission_policies => {
                self.admission.mutating.push(*p)
            }
            LoadedDocument::AdmissionPolicyBinding(b) if self.options.admission_policies => {
                self.admission.bindings.push(*b)
            }
            doc => self.compile(doc, self.options),
        }
    }

    /// Compiles `doc` with `options` into the set, or records why not.
    fn compile(&mut self, doc: LoadedDocument, options: LoadOptions) {
        match Policy::compile(doc, &options) {
            Ok(Some(policy)) => self.set.add(policy),
            Ok(None) => {}
            Err(rejection) => self.rejected.push(rejection),
        }
    }

    /// Reads the documents of one file's text (`file` names it in errors)
    /// into the set; a document that does not parse stops the file.
    pub fn add_text(&mut self, file: &str, text: &str) -> Result<(), LoadError> {
        for doc in load_policy_text(file, text)? {
            self.add(doc);
        }
        Ok(())
    }

    /// Reads the PolicyExceptions among the documents of `text` (given
    /// apart from the policies, as `kyverno apply --exception` takes them),
    /// whatever the options say of exceptions within policies; the other
    /// documents are left out.
    pub fn add_exceptions_text(&mut self, file: &str, text: &str) -> Result<(), LoadError> {
        let options = LoadOptions {
            exceptions_within_policies: true,
            ..self.options
        };
        for doc in load_policy_text(file, text)? {
            if matches!(
                doc,
                LoadedDocument::Exception(_) | LoadedDocument::CelException(_)
            ) {
                self.compile(doc, options);
            }
        }
        Ok(())
    }

    /// What was rejected so far.
    pub fn rejected(&self) -> &[Rejection] {
        &self.rejected
    }

    /// The set, with the admission policies compiled against their
    /// bindings and the CEL exceptions attached, and what was rejected.
    pub fn finish(mut self) -> (PolicySet, Vec<Rejection>) {
        let admission = std::mem::take(&mut self.admission);
        for p in &admission.validating {
            match CompiledValidatingPolicy::compile_admission(p, &admission.bindings) {
                Ok(c) => self.set.validating.push(c),
                Err(e) => self
                    .rejected
                    .push(Rejection::named(&p.kind, &p.metadata.name, e)),
            }
        }
        for p in &admission.mutating {
            match CompiledMutatingPolicy::compile_admission(p, &admission.bindings) {
                Ok(c) => self.set.admission_mutating.push(c),
                Err(e) => self
                    .rejected
                    .push(Rejection::named(&p.kind, &p.metadata.name, e)),
            }
        }
        self.set.attach_cel_exceptions();
        (self.set, self.rejected)
    }
}

/// Loads and compiles the documents of one policy file's text for the
/// server: any rejected document rejects the whole text, so that a
/// half-edited file never replaces its last good version.
pub fn load_text(file: &str, text: &str) -> Result<PolicySet, String> {
    let mut loader = Loader::new(LoadOptions::SERVER);
    loader.add_text(file, text).map_err(|e| e.to_string())?;
    if let Some(first) = loader.rejected().first() {
        return Err(first.reason.clone());
    }
    // The snapshot attaches the exceptions of the whole set.
    Ok(loader.set)
}
