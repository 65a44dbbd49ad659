//! Match and exclude (docs/kyverno-semantics.md#match-and-exclude): does a
//! rule, exception or filter apply to a request?
//!
//! Policy match blocks are compiled once (kind selectors pre-parsed); a
//! [`MatchInput`] describes the request side.

pub mod types;

use crate::json_doc::{JsonRef, View};
use crate::wildcard;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use types::{LabelSelector, MatchResources, ResourceDescription, ResourceFilter, Subject};

/// A parsed kind selector: `Kind`, `Version/Kind`, `Group/Version/Kind`, each
/// with an optional subresource. Every part is a wildcard pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct KindSelector {
    pub group: Part,
    pub version: Part,
    pub kind: Part,
    /// `None` when the selector names no subresource.
    pub subresource: Option<Part>,
}

/// One component of a kind selector, with its wildcard-ness decided once.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    text: String,
    wildcard: bool,
    /// The part is `*`: it matches anything, without a comparison.
    any: bool,
}

impl Part {
    fn new(text: String) -> Part {
        Part {
            wildcard: wildcard::has_wildcard(&text),
            any: text == "*",
            text,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    #[inline]
    pub fn matches(&self, value: &str) -> bool {
        if self.any {
            true
        } else if self.wildcard {
            wildcard::matches(&self.text, value)
        } else {
            crate::text::same(&self.text, value)
        }
    }
}

fn looks_like_version(s: &str) -> bool {
    if s == "*" {
        return true;
    }
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return false;
    }
    let tail = &rest[digits..];
    tail.is_empty()
        || ["alpha", "beta"].iter().any(|p| {
            tail.strip_prefix(p)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
}

fn split_subresource(kind: &str) -> (String, Option<String>) {
    match kind.split_once('.') {
        Some((k, s)) => (k.to_string(), Some(s.to_string())),
        None => (kind.to_string(), None),
    }
}

impl KindSelector {
    pub fn parse(input: &str) -> Result<KindSelector, String> {
        let parts: Vec<&str> = input.split('/').collect();
        let any = || "*".to_string();
        let (group, version, kind, subresource) = match parts.as_slice() {
            [k] => {
                let (k, s) = split_subresource(k);
                (any(), any(), k, s)
            }
            // kyverno-compat (ParseKindSelector): `*/*` is every resource
            // and subresource, `*/scale` a subresource of any kind.
            ["*", b] if *b == "*" || b.to_lowercase() == *b => {
                (any(), any(), any(), Some(b.to_string()))
            }
            [a, b] if looks_like_version(a) => {
                let (k, s) = split_subresource(b);
                (any(), a.to_string(), k, s)
            }
            [a, b] => (any(), any(), a.to_string(), Some(b.to_string())),
            [a, b, c] if looks_like_version(a) => {
                (any(), a.to_string(), b.to_string(), Some(c.to_string()))
            }
            [a, b, c] => {
                let (k, s) = split_subresource(c);
                (a.to_string(), b.to_string(), k, s)
            }
            [a, b, c, d] => (
                a.to_string(),
                b.to_string(),
                c.to_string(),
                Some(d.to_string()),
            ),
            _ => return Err(format!("invalid kind selector {input:?}")),
        };
        if kind.is_empty() {
            return Err(format!("invalid kind selector {input:?}"));
        }
        Ok(KindSelector {
            group: Part::new(group),
            version: Part::new(version),
            kind: Part::new(kind),
            subresource: subresource.map(Part::new),
        })
    }

    /// The kind this selector names when it matches exactly the requests
    /// of that kind without a subresource, whatever their group and
    /// version (`Pod`, not `apps/v1/Deployment`, `Pod/exec` or `*`).
    fn plain_kind(&self) -> Option<&str> {
        (self.group.any && self.version.any && !self.kind.wildcard && self.subresource.is_none())
            .then_some(self.kind.as_str())
    }

    pub fn matches(&self, group: &str, version: &str, kind: &str, subresource: &str) -> bool {
        // The kind is the most selective part: check it first.
        self.kind.matches(kind)
            && self.group.matches(group)
            && self.version.matches(version)
            && match &self.subresource {
                Some(s) => s.matches(subresource),
                // kyverno-compat: CheckKind(..., allowEphemeralContainers:
                // true): a selector without a subresource matches the
                // resource itself, and a core v1 Pod's ephemeral containers
                // (which carry the whole Pod); not `Pod/eviction`,
                // `Pod/exec` or `Deployment/scale`.
                None => {
                    subresource.is_empty()
                        || (subresource == "ephemeralcontainers"
                            && (group, version, kind) == ("", "v1", "Pod"))
                }
            }
    }
}

/// The operations of admission requests, in the order of the bits of
/// [`Operations`].
pub const ADMISSION_OPERATIONS: [&str; 4] = ["CREATE", "UPDATE", "DELETE", "CONNECT"];

/// The index of an admission operation in [`Operations`]' bits; `None` for
/// any other (a background scan's).
pub fn operation_index(operation: &str) -> Option<usize> {
    ADMISSION_OPERATIONS.iter().position(|o| *o == operation)
}

/// A set of admission operations, one bit each ([`operation_index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operations(u8);

impl Operations {
    pub const ALL: Operations = Operations(0b1111);

    /// The operations a `resources.operations` list accepts (all when it
    /// is empty). Names other than the four accept no admission request.
    fn of(list: &[String]) -> Operations {
        if list.is_empty() {
            return Operations::ALL;
        }
        Operations(
            list.iter()
                .filter_map(|o| operation_index(o))
                .fold(0, |bits, i| bits | 1 << i),
        )
    }

    pub fn contains(self, index: usize) -> bool {
        self.0 & (1 << index) != 0
    }
}

#[derive(Debug, Clone)]
struct CompiledDescription {
    kinds: Vec<KindSelector>,
    names: Vec<String>,
    namespaces: Vec<String>,
    annotations: BTreeMap<String, String>,
    selector: Option<LabelSelector>,
    namespace_selector: Option<LabelSelector>,
    operations: Vec<String>,
}

impl CompiledDescription {
    fn compile(d: &ResourceDescription) -> Result<CompiledDescription, String> {
        let mut names = d.names.clone();
        if let Some(n) = d.name.as_ref().filter(|n| !n.is_empty()) {
            if !names.is_empty() {
                return Err("name and names are mutually exclusive".into());
            }
            names.push(n.clone());
        }
        Ok(CompiledDescription {
            kinds: d
                .kinds
                .iter()
                .map(|k| KindSelector::parse(k))
                .collect::<Result<_, _>>()?,
            names,
            namespaces: d.namespaces.clone(),
            annotations: d.annotations.clone(),
            selector: d.selector.clone(),
            namespace_selector: d.namespace_selector.clone(),
            operations: d.operations.clone(),
        })
    }

    fn is_empty(&self) -> bool {
        self.kinds.is_empty() && self.checks_only_kinds()
    }

    /// Nothing but `kinds` (if anything) is set.
    fn checks_only_kinds(&self) -> bool {
        self.checks_only_kinds_and_operations() && self.operations.is_empty()
    }

    /// Nothing but `kinds` and `operations` (if anything) is set.
    fn checks_only_kinds_and_operations(&self) -> bool {
        self.names.is_empty()
            && self.namespaces.is_empty()
            && self.annotations.is_empty()
            && self.selector.is_none()
            && self.namespace_selector.is_none()
    }

    fn operation_matches(&self, input: &MatchInput) -> bool {
        self.operations.is_empty() || self.operations.iter().any(|o| o == input.operation)
    }

    fn kinds_match(&self, input: &MatchInput) -> bool {
        self.kinds
            .iter()
            .any(|k| k.matches(input.group, input.version, input.kind, input.subresource))
    }

    fn matches(&self, input: &MatchInput) -> bool {
        if !self.operation_matches(input) {
            return false;
        }
        if !self.kinds.is_empty() && !self.kinds_match(input) {
            return false;
        }
        if !self.names.is_empty() {
            let name = if input.name.is_empty() {
                input.generate_name
            } else {
                input.name
            };
            if !self.names.iter().any(|n| wildcard::matches(n, name)) {
                return false;
            }
        }
        if !self.namespaces.is_empty() {
            let ns = if input.kind == "Namespace" {
                input.name
            } else {
                input.namespace
            };
            if !self.namespaces.iter().any(|n| wildcard::matches(n, ns)) {
                return false;
            }
        }
        if !self.annotations.is_empty() {
            let all_found = self.annotations.iter().all(|(k, v)| {
                entries(input.annotations).any(|(ak, av)| {
                    wildcard::matches(k, ak)
                        && av.as_str().is_some_and(|av| wildcard::matches(v, av))
                })
            });
            if !all_found {
                return false;
            }
        }
        if let Some(sel) = &self.selector
            && !selector_matches_by(&expand_wildcards(sel, input.labels), |k| {
                input.labels?.get(k)?.as_str()
            })
        {
            return false;
        }
        if let Some(sel) = &self.namespace_selector {
            if input.kind == "Namespace" {
                return false;
            }
            if !selector_matches(sel, input.namespace_labels) {
                return false;
            }
        }
        true
    }
}

/// Kyverno expands wildcard keys and values of `matchLabels` against the
/// actual labels; a wildcard that matches nothing becomes `0` so it fails.
fn expand_wildcards(sel: &LabelSelector, labels: Option<JsonRef<'_>>) -> LabelSelector {
    if !sel
        .match_labels
        .iter()
        .any(|(k, v)| wildcard::has_wildcard(k) || wildcard::has_wildcard(v))
    {
        return sel.clone();
    }
    let mut out = sel.clone();
    out.match_labels = sel
        .match_labels
        .iter()
        .map(|(k, v)| {
            if !(wildcard::has_wildcard(k) || wildcard::has_wildcard(v)) {
                return (k.clone(), v.clone());
            }
            let found = entries(labels).find(|(ak, av)| {
                wildcard::matches(k, ak) && av.as_str().is_some_and(|av| wildcard::matches(v, av))
            });
            match found {
                Some((ak, av)) => (ak.to_string(), av.as_str().unwrap_or_default().to_string()),
                None => (k.replace(['*', '?'], "0"), v.replace(['*', '?'], "0")),
            }
        })
        .collect();
    out
}

/// The entries of a map that may be absent.
fn entries<'a>(map: Option<JsonRef<'a>>) -> impl Iterator<Item = (&'a str, JsonRef<'a>)> {
    map.into_iter().flat_map(View::entries)
}

/// Standard Kubernetes label selector semantics.
pub fn selector_matches(sel: &LabelSelector, labels: Option<&Map<String, Value>>) -> bool {
    selector_matches_by(sel, |k| labels?.get(k)?.as_str())
}

/// [`selector_matches`] on labels read through `get`.
pub fn selector_matches_by<'l>(sel: &LabelSelector, get: impl Fn(&str) -> Option<&'l str>) -> bool {
    sel.match_labels
        .iter()
        .all(|(k, v)| get(k) == Some(v.as_str()))
        && sel.match_expressions.iter().all(|e| {
            let actual = get(&e.key);
            match e.operator.as_str() {
                "In" => actual.is_some_and(|a| e.values.iter().any(|v| v == a)),
                "NotIn" => actual.is_none_or(|a| !e.values.iter().any(|v| v == a)),
                "Exists" => actual.is_some(),
                "DoesNotExist" => actual.is_none(),
                _ => false,
            }
        })
}

/// The admission user, as `request.userInfo` carries it.
#[derive(Debug, Clone, Default)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
    pub roles: Vec<String>,
    pub cluster_roles: Vec<String>,
}

#[derive(Debug, Clone)]
struct CompiledFilter {
    resources: Option<CompiledDescription>,
    subjects: Vec<Subject>,
    roles: Vec<String>,
    cluster_roles: Vec<String>,
    shape: FilterShape,
}

/// What a filter checks, decided when it is compiled: most rules match on
/// kinds alone, and their check need not visit the empty fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FilterShape {
    /// Nothing to match on: kyverno-compat "match cannot be empty" never matches.
    Never,
    /// Only `resources.kinds`.
    KindsOnly,
    /// Only `resources.kinds` and `resources.operations`.
    KindsAndOperations,
    General,
}

impl CompiledFilter {
    fn compile(f: &ResourceFilter) -> Result<CompiledFilter, String> {
        let mut filter = CompiledFilter {
            resources: f
                .resources
                .as_ref()
                .map(CompiledDescription::compile)
                .transpose()?,
            subjects: f.subjects.clone(),
            roles: f.roles.clone(),
            cluster_roles: f.cluster_roles.clone(),
            shape: FilterShape::General,
        };
        filter.shape = filter.shape();
        Ok(filter)
    }

    fn shape(&self) -> FilterShape {
        if self.has_user_info() {
            return FilterShape::General;
        }
        match &self.resources {
            None => FilterShape::Never,
            Some(d) if d.is_empty() => FilterShape::Never,
            Some(d) if d.checks_only_kinds() => FilterShape::KindsOnly,
            // Without kinds, operations alone decide: the general check.
            Some(d) if d.checks_only_kinds_and_operations() && !d.kinds.is_empty() => {
                FilterShape::KindsAndOperations
            }
            Some(_) => FilterShape::General,
        }
    }

    /// The kinds of a filter that checks only plain kinds
    /// ([`KindSelector::plain_kind`]) and operations, with the operations
    /// it accepts.
    fn plain_kinds(&self) -> Option<(Vec<&str>, Operations)> {
        if !matches!(
            self.shape,
            FilterShape::KindsOnly | FilterShape::KindsAndOperations
        ) {
            return None;
        }
        let resources = self.resources.as_ref()?;
        let kinds = resources
            .kinds
            .iter()
            .map(KindSelector::plain_kind)
            .collect::<Option<_>>()?;
        Some((kinds, Operations::of(&resources.operations)))
    }

    fn has_user_info(&self) -> bool {
        !(self.subjects.is_empty() && self.roles.is_empty() && self.cluster_roles.is_empty())
    }

    fn matches(&self, input: &MatchInput) -> bool {
        match self.shape {
            FilterShape::Never => return false,
            FilterShape::KindsOnly => {
                return self
                    .resources
                    .as_ref()
                    .is_some_and(|r| r.kinds_match(input));
            }
            FilterShape::KindsAndOperations => {
                return self
                    .resources
                    .as_ref()
                    .is_some_and(|r| r.operation_matches(input) && r.kinds_match(input));
            }
            FilterShape::General => {}
        }
        if let Some(r) = &self.resources
            && !r.matches(input)
        {
            return false;
        }
        let user = input.user;
        if !self.roles.is_empty() && !self.roles.iter().any(|r| user.roles.contains(r)) {
            return false;
        }
        if !self.cluster_roles.is_empty()
            && !self
                .cluster_roles
                .iter()
                .any(|r| user.cluster_roles.contains(r))
        {
            return false;
        }
        if !self.subjects.is_empty() && !self.subjects.iter().any(|s| subject_matches(s, user)) {
            return false;
        }
        true
    }
}

fn subject_matches(s: &Subject, user: &UserInfo) -> bool {
    match s.kind.as_str() {
        "User" => wildcard::matches(&s.name, &user.username),
        "Group" => user.groups.iter().any(|g| wildcard::matches(&s.name, g)),
        "ServiceAccount" => {
            let full = format!(
                "system:serviceaccount:{}:{}",
                s.namespace.as_deref().unwrap_or_default(),
                s.name
            );
            wildcard::matches(&full, &user.username)
        }
        _ => false,
    }
}

/// A compiled `match` or `exclude` block.
#[derive(Debug, Clone)]
pub struct CompiledMatch {
    any: Vec<CompiledFilter>,
    all: Vec<CompiledFilter>,
    legacy: Option<CompiledFilter>,
}

impl CompiledMatch {
    pub fn compile(m: &MatchResources) -> Result<CompiledMatch, String> {
        if !m.any.is_empty() && !m.all.is_empty() {
            return Err("any and all are mutually exclusive".into());
        }
        let legacy = ResourceFilter {
            resources: m.resources.clone(),
            subjects: m.subjects.clone(),
            roles: m.roles.clone(),
            cluster_roles: m.cluster_roles.clone(),
        };
        let has_legacy = legacy.resources.is_some()
            || !legacy.subjects.is_empty()
            || !legacy.roles.is_empty()
            || !legacy.cluster_roles.is_empty();
        Ok(CompiledMatch {
            any: m
                .any
                .iter()
                .map(CompiledFilter::compile)
                .collect::<Result<_, _>>()?,
            all: m
                .all
                .iter()
                .map(CompiledFilter::compile)
                .collect::<Result<_, _>>()?,
            legacy: has_legacy
                .then(|| CompiledFilter::compile(&legacy))
                .transpose()?,
        })
    }

    /// An empty block: as `exclude`, it excludes nothing.
    pub fn is_empty(&self) -> bool {
        self.any.is_empty() && self.all.is_empty() && self.legacy.is_none()
    }

    /// The kinds this block matches when it checks nothing but plain kinds
    /// (`kinds: [Pod]`) and operations, each with the operations it
    /// accepts for it: of the requests without a subresource, it matches
    /// exactly those of these kinds and operations, so the kind and the
    /// operation alone decide. `None` for any other block.
    pub fn plain_kinds(&self) -> Option<Vec<(&str, Operations)>> {
        fn each((kinds, ops): (Vec<&str>, Operations)) -> impl Iterator<Item = (&str, Operations)> {
            kinds.into_iter().map(move |k| (k, ops))
        }
        if !self.any.is_empty() {
            let mut kinds = Vec::new();
            for f in &self.any {
                kinds.extend(each(f.plain_kinds()?));
            }
            return Some(kinds);
        }
        match self.all.as_slice() {
            [only] => Some(each(only.plain_kinds()?).collect()),
            [] => Some(each(self.legacy.as_ref()?.plain_kinds()?).collect()),
            _ => None,
        }
    }

    /// Match semantics: any = one filter matches, all = every filter matches.
    pub fn matches(&self, input: &MatchInput) -> bool {
        if !self.any.is_empty() {
            return self.any.iter().any(|f| f.matches(input));
        }
        if !self.all.is_empty() {
            return self.all.iter().all(|f| f.matches(input));
        }
        self.legacy.as_ref().is_some_and(|f| f.matches(input))
    }

    /// Exclude semantics: same as match, but an empty block never excludes.
    pub fn excludes(&self, input: &MatchInput) -> bool {
        !self.is_empty() && self.matches(input)
    }

    /// The kinds a request must have to possibly match, when every filter
    /// names exact kinds; `None` when any filter could match any kind.
    pub fn uses_namespace_selector(&self) -> bool {
        self.any
            .iter()
            .chain(self.all.iter())
            .chain(self.legacy.iter())
            .any(|f| {
                f.resources
                    .as_ref()
                    .is_some_and(|d| d.namespace_selector.is_some())
            })
    }

    /// Whether a filter names subjects, roles or clusterRoles: what only an
    /// admission request can answer (cleanup policies reject them).
    pub fn has_user_info(&self) -> bool {
        self.filters().any(CompiledFilter::has_user_info)
    }

    fn filters(&self) -> impl Iterator<Item = &CompiledFilter> {
        self.any
            .iter()
            .chain(self.all.iter())
            .chain(self.legacy.iter())
    }

    /// The operations the match can accept at all; `None` for any. A
    /// superset for `all` (an intersection would be tighter; more is safe
    /// where it decides which requests reach gavel).
    pub fn possible_operations(&self) -> Option<Vec<String>> {
        let mut out = Vec::new();
        let mut filters = self.filters().peekable();
        filters.peek()?;
        for f in filters {
            let d = f.resources.as_ref()?;
            if d.operations.is_empty() {
                return None;
            }
            out.extend(d.operations.iter().cloned());
        }
        out.sort();
        out.dedup();
        Some(out)
    }

    /// The kind selectors the match can accept; `None` when it accepts any
    /// kind (a filter without kinds, or a wildcard kind).
    pub fn kind_selectors(&self) -> Option<Vec<KindSelector>> {
        let mut out = Vec::new();
        for f in self.filters() {
            let d = f.resources.as_ref()?;
            if d.kinds.is_empty() || d.kinds.iter().any(|k| k.kind.wildcard) {
                return None;
            }
            out.extend(d.kinds.iter().cloned());
        }
        (!out.is_empty()).then_some(out)
    }

    /// The kind names of [`CompiledMatch::kind_selectors`], sorted.
    pub fn possible_kinds(&self) -> Option<Vec<String>> {
        let mut out: Vec<String> = self
            .kind_selectors()?
            .into_iter()
            .map(|k| k.kind.text)
            .collect();
        out.sort();
        out.dedup();
        Some(out)
    }
}

/// The request side of matching.
#[derive(Debug, Clone, Copy)]
pub struct MatchInput<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
    /// [`crate::kinds::kind_hash`] of `kind`.
    pub kind_hash: u64,
    pub subresource: &'a str,
    pub operation: &'a str,
    pub name: &'a str,
    pub generate_name: &'a str,
    pub namespace: &'a str,
    /// The object's `metadata.labels` and `metadata.annotations`, when
    /// they are objects.
    pub labels: Option<JsonRef<'a>>,
    pub annotations: Option<JsonRef<'a>>,
    /// Labels of the object's namespace, when known.
    pub namespace_labels: Option<&'a Map<String, Value>>,
    pub user: &'a UserInfo,
}

impl<'a> MatchInput<'a> {
    /// This input with an object's own fields (name, generateName, labels,
    /// annotations) read from its `metadata`; the rest is the request's.
    pub fn with_object_metadata(self, metadata: Option<JsonRef<'a>>) -> MatchInput<'a> {
        let field = |name: &str| metadata.and_then(|m| m.get(name));
        let text = |name: &str| field(name).and_then(View::as_str).unwrap_or_default();
        let map = |name: &str| field(name).filter(|m| m.is_object());
        MatchInput {
            name: text("name"),
            generate_name: text("generateName"),
            labels: map("labels"),
            annotations: map("annotations"),
            ..self
        }
    }
}

#[cfg(test)]
mod tests;
