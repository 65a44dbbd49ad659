//! Kyverno's CEL functions: lookups answered through [`Lookups`]
//! (`resource.Get`, `globalContext.Get`, `image.GetMetadata`, `http.Get`,
//! image verification), image references, and `json`/`yaml` parsing.

use super::*;
use crate::cel::values::json_to_cel;
use kube_cel::cel::extractors::Arguments;
use kube_cel::cel::objects::Key;
use kube_cel::cel::{ExecutionError, FunctionContext, ResolveResult, Value};
use std::sync::Arc;

pub(super) fn string_arg(
    ftx: &FunctionContext,
    args: &[Value],
    i: usize,
) -> Result<String, ExecutionError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s.to_string()),
        Some(other) => Err(ftx.error(format!(
            "argument {} must be a string, got {}",
            i + 1,
            other.type_of()
        ))),
        None => Err(ftx.error(format!("missing argument {}", i + 1))),
    }
}

pub(super) fn resource_get(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::Resource {
        api_version: string_arg(ftx, &args, 0)?,
        resource: string_arg(ftx, &args, 1)?,
        namespace: string_arg(ftx, &args, 2)?,
        name: string_arg(ftx, &args, 3)?,
    })
}

pub(super) fn resource_list(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::ResourceList {
        api_version: string_arg(ftx, &args, 0)?,
        resource: string_arg(ftx, &args, 1)?,
        namespace: string_arg(ftx, &args, 2)?,
    })
}

pub(super) fn global_context_get(
    ftx: &FunctionContext,
    Arguments(args): Arguments,
) -> ResolveResult {
    answer(Lookup::GlobalContext {
        name: string_arg(ftx, &args, 0)?,
        projection: if args.len() > 1 {
            string_arg(ftx, &args, 1)?
        } else {
            String::new()
        },
    })
}

pub(super) fn image_metadata(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::ImageMetadata(string_arg(ftx, &args, 0)?))
}

/// The attestor list argument of the verification functions.
pub(super) fn list_arg(
    ftx: &FunctionContext,
    args: &[Value],
    i: usize,
) -> Result<(), ExecutionError> {
    match args.get(i) {
        Some(Value::List(_)) => Ok(()),
        Some(other) => Err(ftx.error(format!(
            "argument {} must be a list of attestors, got {}",
            i + 1,
            other.type_of()
        ))),
        None => Err(ftx.error(format!("missing argument {}", i + 1))),
    }
}

/// `verifyImageSignatures(image, [attestors])`: how many attestors
/// verified the image's signature.
pub(super) fn verify_image_signatures(
    ftx: &FunctionContext,
    Arguments(args): Arguments,
) -> ResolveResult {
    let image = string_arg(ftx, &args, 0)?;
    list_arg(ftx, &args, 1)?;
    answer(Lookup::ImageVerification {
        function: "verifyImageSignatures",
        image,
        attestation: None,
    })
}

/// `verifyAttestationSignatures(image, attestation, [attestors])`.
pub(super) fn verify_attestation_signatures(
    ftx: &FunctionContext,
    Arguments(args): Arguments,
) -> ResolveResult {
    let image = string_arg(ftx, &args, 0)?;
    let attestation = string_arg(ftx, &args, 1)?;
    list_arg(ftx, &args, 2)?;
    answer(Lookup::ImageVerification {
        function: "verifyAttestationSignatures",
        image,
        attestation: Some(attestation),
    })
}

/// `getImageData(image)`: the image's manifest and config.
pub(super) fn get_image_data(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::ImageVerification {
        function: "getImageData",
        image: string_arg(ftx, &args, 0)?,
        attestation: None,
    })
}

/// `extractPayload(image, attestation)`: a verified attestation's payload.
pub(super) fn extract_payload(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::ImageVerification {
        function: "extractPayload",
        image: string_arg(ftx, &args, 0)?,
        attestation: Some(string_arg(ftx, &args, 1)?),
    })
}

pub(super) fn http_get(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    answer(Lookup::Http {
        method: "GET".into(),
        url: string_arg(ftx, &args, 0)?,
        body: None,
    })
}

pub(super) fn http_post(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    let body = args
        .get(1)
        .map(|v| super::super::values::cel_to_json(v).map_err(|e| ftx.error(e)))
        .transpose()?;
    answer(Lookup::Http {
        method: "POST".into(),
        url: string_arg(ftx, &args, 0)?,
        body,
    })
}

/// `parseServiceAccount("system:serviceaccount:ns:name")` gives
/// `{Namespace, Name}`; anything else gives empty fields.
pub(super) fn parse_service_account(user: Arc<String>) -> ResolveResult {
    let parts: Vec<&str> = user.split(':').collect();
    let (ns, name) = match parts.as_slice() {
        ["system", "serviceaccount", ns, name] => (*ns, *name),
        _ => ("", ""),
    };
    Ok(json_to_cel(
        &serde_json::json!({"Namespace": ns, "Name": name}),
    ))
}

/// The methods of an image value, each reading its field.
pub(super) const IMAGE_FIELDS: [&str; 5] =
    ["registry", "repository", "identifier", "tag", "digest"];

/// `image(ref)`: an image value is a map of its parts.
pub(super) fn image_of(ftx: &FunctionContext, reference: Arc<String>) -> ResolveResult {
    let r = super::super::image_ref::parse(&reference).map_err(|e| ftx.error(e))?;
    Ok(json_to_cel(&serde_json::json!({
        "image": r.image,
        "registry": r.registry,
        "repository": r.repository,
        "identifier": r.identifier(),
        "tag": r.tag,
        "digest": r.digest,
    })))
}

pub(super) fn is_image(reference: Arc<String>) -> ResolveResult {
    Ok(Value::Bool(
        super::super::image_ref::parse(&reference).is_ok(),
    ))
}

pub(super) fn image_field(ftx: &FunctionContext, this: &Value, field: &str) -> ResolveResult {
    match this {
        Value::Map(m) => m
            .map
            .get(&Key::String(Arc::new(field.to_string())))
            .cloned()
            .ok_or_else(|| ftx.error(format!("{field}() needs an image (from image())"))),
        _ => Err(ftx.error(format!("{field}() needs an image (from image())"))),
    }
}

pub(super) fn time_now() -> ResolveResult {
    Ok(Value::Timestamp(chrono::Utc::now().fixed_offset()))
}

pub(super) fn json_unmarshal(ftx: &FunctionContext, text: Arc<String>) -> ResolveResult {
    serde_json::from_str::<serde_json::Value>(&text)
        .map(|v| json_to_cel(&v))
        .map_err(|e| ftx.error(e.to_string()))
}

pub(super) fn yaml_parse(ftx: &FunctionContext, text: Arc<String>) -> ResolveResult {
    serde_saphyr::from_str::<serde_json::Value>(&text)
        .map(|v| json_to_cel(&v))
        .map_err(|e| ftx.error(e.to_string()))
}
