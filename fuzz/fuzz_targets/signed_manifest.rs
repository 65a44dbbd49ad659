//! validate.manifests on a resource whose signed message is the input: the
//! head (before the first NUL) is the message before its gzip, read as
//! YAML or as a gzipped tar of YAML files; the tail, when it is a JSON
//! object, is the resource compared with the manifests found. The rules of
//! `examples/tests/manifest-signatures` verify it, as at admission: the
//! message and its signatures are anyone's to write.
#![no_main]

use base64::Engine as _;
use gavel::context::NoResolver;
use gavel::engine::json_context::Builtins;
use gavel::engine::validate::evaluate_policy;
use gavel::engine::{EvalEnv, Request};
use gavel::policy::CompiledPolicy;
use gavel::policy::load::{LoadedDocument, load_policy_text};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::LazyLock;

static POLICIES: LazyLock<Vec<CompiledPolicy>> = LazyLock::new(|| {
    let file = gavel_fuzz::repo().join("examples/tests/manifest-signatures/policies.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    load_policy_text("policies.yaml", &text)
        .unwrap()
        .into_iter()
        .filter_map(|d| match d {
            LoadedDocument::Policy(p) => Some(CompiledPolicy::compile(&p).unwrap()),
            _ => None,
        })
        .collect()
});

fuzz_target!(init: gavel_fuzz::guard_panics(), |data: &[u8]| {
    let (message, object) = gavel_fuzz::split(data);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(message).unwrap();
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let mut resource = match serde_json::from_slice::<Value>(object) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({"data": {"level": "info"}}),
    };
    // Named so that every rule matches it.
    resource["apiVersion"] = json!("v1");
    resource["kind"] = json!("ConfigMap");
    if !resource["metadata"].is_object() {
        resource["metadata"] = json!({});
    }
    resource["metadata"]["name"] = json!("cm-signed");
    resource["metadata"]["namespace"] = json!("apps");
    resource["metadata"]["annotations"] = json!({
        "cosign.sigstore.dev/message": b64(&gz.finish().unwrap()),
        "cosign.sigstore.dev/signature": b64(&message[..message.len().min(72)]),
    });
    let req = Request::offline(&resource, "CREATE", Default::default(), None);
    let ctx = req.json_context(Builtins::default());
    let env = EvalEnv {
        resolver: &NoResolver,
        exceptions: &[],
        rule_values: &(),
    };
    for policy in POLICIES.iter() {
        let _ = evaluate_policy(policy, &req, &ctx, &env);
    }
});
