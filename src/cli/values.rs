//! The CLI's Values (`cli.kyverno.io/v1alpha1`, kind `Values`) and UserInfo
//! files: variables injected per policy, rule and resource, namespace labels,
//! and the admission user.

use crate::cli::kyverno_test::file::{field, lower_keys, string_list};
use crate::engine::RuleValues;
use serde_json::{Map, Value};
use std::collections::HashMap;

#[derive(Debug, Clone, Default)]
pub struct Values {
    pub global: Map<String, Value>,
    /// policy name -> rule name -> values
    pub rules: HashMap<String, HashMap<String, Map<String, Value>>>,
    /// policy name -> resource name -> values
    pub resources: HashMap<String, HashMap<String, Map<String, Value>>>,
    /// namespace name -> labels
    pub namespace_labels: HashMap<String, Map<String, Value>>,
    /// Full Namespace objects of `namespaces[]`: CEL's `namespaceObject`.
    pub namespace_objects: HashMap<String, Value>,
}

fn object(v: Option<&Value>) -> Map<String, Value> {
    v.and_then(Value::as_object).cloned().unwrap_or_default()
}

impl Values {
    pub fn parse(doc: &Value, require_kind: bool) -> Result<Values, String> {
        let doc = lower_keys(
            doc,
            &[
                "apiversion",
                "kind",
                "metadata",
                "policies",
                "globalvalues",
                "namespaceselector",
                "namespaces",
                "subresources",
            ],
        )?;
        if require_kind && (doc.get("apiversion").is_none() || doc.get("kind").is_none()) {
            return Err("values file uses a deprecated schema (no apiVersion/kind)".into());
        }
        let mut out = Values {
            global: object(doc.get("globalvalues")),
            ..Default::default()
        };
        for p in doc
            .get("policies")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let p = lower_keys(p, &["name", "rules", "resources"])?;
            let pname = field(&p, "name").to_string();
            for r in p
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let r = lower_keys(r, &["name", "values", "foreachvalues"])?;
                let mut values = object(r.get("values"));
                // kyverno-compat: Kyverno's CLI adds each `foreachValues`
                // list's item at its store's foreach element index, which
                // nothing sets: the first item, for every element.
                for (key, list) in object(r.get("foreachvalues")) {
                    let first = match list {
                        Value::Array(items) => items.into_iter().next(),
                        _ => None,
                    };
                    values.insert(key, first.unwrap_or(Value::Null));
                }
                out.rules
                    .entry(pname.clone())
                    .or_default()
                    .insert(field(&r, "name").to_string(), values);
            }
            for r in p
                .get("resources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let r = lower_keys(r, &["name", "values"])?;
                out.resources
                    .entry(pname.clone())
                    .or_default()
                    .insert(field(&r, "name").to_string(), object(r.get("values")));
            }
        }
        for ns in doc
            .get("namespaceselector")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let ns = lower_keys(ns, &["name", "labels"])?;
            out.namespace_labels
                .insert(field(&ns, "name").to_string(), object(ns.get("labels")));
        }
        // Full Namespace objects take priority over namespaceSelector entries.
        for ns in doc
            .get("namespaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(name) = ns.pointer("/metadata/name").and_then(Value::as_str) {
                out.namespace_labels
                    .insert(name.to_string(), object(ns.pointer("/metadata/labels")));
                out.namespace_objects.insert(name.to_string(), ns.clone());
            }
        }
        Ok(out)
    }

    /// The operation from `globalValues["request.operation"]`, default CREATE.
    pub fn operation(&self) -> String {
        self.global
            .get("request.operation")
            .and_then(Value::as_str)
            .unwrap_or("CREATE")
            .to_string()
    }
}

/// Rule values of one policy, looked up as `R`, `autogen-R` or `autogen-cronjob-R`.
pub struct PolicyRuleValues<'a>(pub Option<&'a HashMap<String, Map<String, Value>>>);

impl RuleValues for PolicyRuleValues<'_> {
    fn for_rule(&self, rule: &str) -> Option<&Map<String, Value>> {
        let rules = self.0?;
        let base = rule
            .strip_prefix("autogen-cronjob-")
            .or_else(|| rule.strip_prefix("autogen-"))
            .unwrap_or(rule);
        rules.get(rule).or_else(|| rules.get(base))
    }
}

#[derive(Debug, Clone, Default)]
pub struct UserInfoFile {
    pub user: crate::matching::UserInfo,
}

impl UserInfoFile {
    pub fn parse(doc: &Value) -> Result<UserInfoFile, String> {
        let doc = lower_keys(
            doc,
            &[
                "apiversion",
                "kind",
                "metadata",
                "roles",
                "clusterroles",
                "userinfo",
            ],
        )?;
        if doc.get("apiversion").is_none() || doc.get("kind").is_none() {
            return Err("user info file uses a deprecated schema (no apiVersion/kind)".into());
        }
        let info = doc.get("userinfo").cloned().unwrap_or(Value::Null);
        Ok(UserInfoFile {
            user: crate::matching::UserInfo {
                username: info
                    .get("username")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                groups: string_list(info.get("groups")),
                roles: string_list(doc.get("roles")),
                cluster_roles: string_list(doc.get("clusterroles")),
            },
        })
    }
}
