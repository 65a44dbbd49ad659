//! The schema table of the built-in kinds: each type's fields, which lists
//! merge by a key, and each value's atom (an object, a free-form value or
//! a scalar type), as structured-merge-diff sees them. Generated from the
//! Kubernetes OpenAPI schema by `.ci/gen-merge-keys.py` into
//! `merge_keys.rs`; this module reads it. Strategic merge and server-side
//! apply ([`crate::patch`]) and the mutating policies' apply
//! configurations walk documents with it.

#[rustfmt::skip]
mod merge_keys;

use merge_keys::{KINDS, TYPES};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Object,
    List,
    Map,
}

/// What a type is, as structured-merge-diff converts OpenAPI
/// (kube-openapi's `schemaconv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atom {
    /// An object with declared fields; `atomic` (`x-kubernetes-map-type:
    /// atomic`) is replaced whole by apply.
    Struct {
        atomic: bool,
    },
    /// Free-form: any value (`RawExtension`, `JSON`, `FieldsV1`).
    Deduced,
    String,
    /// `integer` or `number`.
    Numeric,
    Boolean,
    /// Any scalar: int-or-string, quantities, times.
    Untyped,
}

/// How server-side apply merges a list (`x-kubernetes-list-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// Replaced whole.
    Atomic,
    /// A set of scalars: union.
    Set,
    /// Items identified by these keys, merged item by item.
    Map(&'static [&'static str]),
}

/// One field of a type.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
    /// The type of the value, the list's elements or the map's values.
    pub elem: Option<u16>,
    /// `x-kubernetes-patch-strategy`: `merge`, `replace`, `retainKeys`, ...
    pub strategy: &'static str,
    /// `x-kubernetes-patch-merge-key`; empty for none.
    pub key: &'static str,
    /// `x-kubernetes-list-type`: `atomic`, `set`, `map`; empty for none.
    pub list_type: &'static str,
    /// `x-kubernetes-list-map-keys` of a `map` list.
    pub list_keys: &'static [&'static str],
    /// `x-kubernetes-map-type: atomic` on the field (a map of strings
    /// such as `nodeSelector`).
    pub atomic: bool,
}

/// What the schema says about one position in a document.
#[derive(Debug, Clone, Copy)]
pub enum Schema {
    /// An object of a known type.
    Type(u16),
    /// A list field: its strategy, key and element type.
    List(&'static Field),
    /// A map field whose values all have one type.
    MapOf(&'static Field),
    /// A field the schema does not declare (or of a type it does not
    /// have): nothing is known about it.
    Opaque,
}

impl Schema {
    /// The schema of a top-level object, from its `apiVersion` and `kind`.
    pub fn for_kind(api_version: &str, kind: &str) -> Option<Schema> {
        KINDS
            .binary_search_by(|(a, k, _)| (*a, *k).cmp(&(api_version, kind)))
            .ok()
            .map(|i| Schema::Type(KINDS[i].2))
    }

    /// The schema of `field` inside an object at this position.
    pub fn field(self, field: &str) -> Option<Schema> {
        match self {
            Schema::Type(t) => {
                let fields = TYPES[t as usize].2;
                match fields.binary_search_by(|f| f.name.cmp(field)) {
                    Ok(i) => {
                        let f = &fields[i];
                        Some(match f.shape {
                            Shape::Object => f.elem.map_or(Schema::Opaque, Schema::Type),
                            Shape::List => Schema::List(f),
                            Shape::Map => Schema::MapOf(f),
                        })
                    }
                    // Undeclared: a field of a newer Kubernetes than the
                    // schema's, or a mistake; it is not checked.
                    Err(_) => Some(Schema::Opaque),
                }
            }
            Schema::MapOf(f) => Some(f.elem.map_or(Schema::Opaque, Schema::Type)),
            Schema::List(_) | Schema::Opaque => None,
        }
    }

    /// The schema of `field` of an object of a known type, `None` when
    /// the type does not declare it (a map field's keys are all declared).
    /// Unlike [`Schema::field`], which walks documents and lets an
    /// undeclared field through, this is for telling a mistake
    /// ([`crate::cel::type_check`]).
    pub fn declared(self, field: &str) -> Option<Schema> {
        match self {
            Schema::Type(t) => TYPES[t as usize]
                .2
                .binary_search_by(|f| f.name.cmp(field))
                .ok()
                .and_then(|_| self.field(field)),
            Schema::MapOf(_) => self.field(field),
            Schema::List(_) | Schema::Opaque => None,
        }
    }

    /// Whether the type at this position declares fields (an object that
    /// declares none is free-form as far as anything can tell).
    pub fn declares_fields(self) -> bool {
        matches!(self, Schema::Type(t) if !TYPES[t as usize].2.is_empty())
    }

    /// The schema of the elements of a list at this position.
    pub fn elements(self) -> Option<Schema> {
        match self {
            Schema::List(f) => Some(f.elem.map_or(Schema::Opaque, Schema::Type)),
            _ => None,
        }
    }

    /// For a list: whether its strategy merges, and by which key (empty:
    /// a list of scalars merged as a set).
    pub fn list_merge_key(self) -> Option<&'static str> {
        match self {
            Schema::List(f) if f.strategy.split(',').any(|s| s == "merge") => Some(f.key),
            _ => None,
        }
    }

    /// For a list: how server-side apply merges it. Lists the schema says
    /// nothing about are atomic, as apply treats them.
    pub fn list_kind(self) -> ListKind {
        match self {
            Schema::List(f) => match f.list_type {
                "map" if !f.list_keys.is_empty() => ListKind::Map(f.list_keys),
                "set" => ListKind::Set,
                _ => ListKind::Atomic,
            },
            _ => ListKind::Atomic,
        }
    }

    /// The OpenAPI name of the type at this position.
    pub fn type_name(self) -> Option<&'static str> {
        match self {
            Schema::Type(t) => Some(TYPES[t as usize].0),
            _ => None,
        }
    }

    /// The atom of the type at this position (`None` for a list, a map
    /// field or an unknown position).
    pub fn atom(self) -> Option<Atom> {
        match self {
            Schema::Type(t) => Some(TYPES[t as usize].1),
            _ => None,
        }
    }

    /// Whether apply replaces the value at this position whole: an
    /// atomic list, struct or map (`validatePatch` of the API server's
    /// mutating admission refuses to set one).
    pub fn is_atomic(self) -> bool {
        match self {
            Schema::Type(_) => self.atom() == Some(Atom::Struct { atomic: true }),
            Schema::List(_) => self.list_kind() == ListKind::Atomic,
            Schema::MapOf(f) => f.atomic,
            Schema::Opaque => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_for_binary_search() {
        assert!(
            KINDS
                .windows(2)
                .all(|w| (w[0].0, w[0].1) < (w[1].0, w[1].1))
        );
        assert!(TYPES.windows(2).all(|w| w[0].0 < w[1].0));
        for (name, _, fields) in TYPES {
            assert!(fields.windows(2).all(|w| w[0].name < w[1].name), "{name}");
        }
    }

    #[test]
    fn pod_containers_merge_by_name() {
        let pod = Schema::for_kind("v1", "Pod").unwrap();
        assert_eq!(pod.type_name(), Some("io.k8s.api.core.v1.Pod"));
        let containers = pod.field("spec").unwrap().field("containers").unwrap();
        assert_eq!(containers.list_merge_key(), Some("name"));
        let ports = containers.elements().unwrap().field("ports").unwrap();
        assert_eq!(ports.list_merge_key(), Some("containerPort"));
        let args = containers.elements().unwrap().field("args").unwrap();
        assert_eq!(args.list_merge_key(), None);
        let tolerations = pod.field("spec").unwrap().field("tolerations").unwrap();
        assert_eq!(tolerations.list_merge_key(), None);
        let finalizers = pod.field("metadata").unwrap().field("finalizers").unwrap();
        assert_eq!(finalizers.list_merge_key(), Some(""));
        let deploy = Schema::for_kind("apps/v1", "Deployment").unwrap();
        let volumes = ["spec", "template", "spec", "volumes"]
            .iter()
            .try_fold(deploy, |s, f| s.field(f))
            .unwrap();
        assert_eq!(volumes.list_merge_key(), Some("name"));
        assert_eq!(
            ports.list_kind(),
            ListKind::Map(&["containerPort", "protocol"])
        );
        assert_eq!(tolerations.list_kind(), ListKind::Atomic);
        assert_eq!(finalizers.list_kind(), ListKind::Set);
        assert!(Schema::for_kind("example.com/v1", "Widget").is_none());
    }
}
