//! Kyverno's encoding functions: base64 both ways, parsing JSON and YAML
//! text into values, and hex digests (md5, sha1, sha256).

use super::{Args, R, want_str};
use crate::jmespath::JmesError;
use base64::Engine as _;
use serde_json::Value;
use sha2::Digest as _;

pub(super) fn base64_decode(args: &Args) -> R {
    args.check(1)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(want_str(args.name, args.v(0))?)
        .map_err(|e| JmesError::Runtime(format!("base64_decode(): {e}")))?;
    Ok(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
}

pub(super) fn base64_encode(args: &Args) -> R {
    args.check(1)?;
    Ok(Value::String(
        base64::engine::general_purpose::STANDARD.encode(want_str(args.name, args.v(0))?),
    ))
}

pub(super) fn parse_json(args: &Args) -> R {
    args.check(1)?;
    serde_json::from_str(want_str(args.name, args.v(0))?)
        .map_err(|e| JmesError::Runtime(format!("parse_json(): {e}")))
}

pub(super) fn parse_yaml(args: &Args) -> R {
    args.check(1)?;
    serde_saphyr::from_str::<Value>(want_str(args.name, args.v(0))?)
        .map_err(|e| JmesError::Runtime(format!("parse_yaml(): {e}")))
}

pub(super) fn digest(args: &Args) -> R {
    args.check(1)?;
    let input = want_str(args.name, args.v(0))?.as_bytes();
    let digest: Vec<u8> = match args.name {
        "md5" => md5::Md5::digest(input).to_vec(),
        "sha1" => sha1::Sha1::digest(input).to_vec(),
        _ => sha2::Sha256::digest(input).to_vec(),
    };
    Ok(Value::String(
        digest.iter().map(|b| format!("{b:02x}")).collect(),
    ))
}
