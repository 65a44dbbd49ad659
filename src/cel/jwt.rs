//! JSON Web Tokens for kyverno-authz's `jwt.Decode(token, key)`: the
//! compact form is split, its signature verified with a shared secret, and
//! its claims read; `valid` says whether the time claims hold now, as
//! jwx's `jwt.Validate` with no skew checks them.
//!
//! The claims are a `google.protobuf.Struct` in cel-go, where every number
//! is a double (`structpb`), so numbers here are floats too.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

/// A verified token.
#[derive(Debug, PartialEq)]
pub struct Decoded {
    /// The claims; null when the token has none (jwx's nil Struct).
    pub claims: Value,
    /// `exp`, `nbf` and `iat` hold at the time given.
    pub valid: bool,
}

/// Verifies and reads `token` with the shared secret `key` at `now`
/// (seconds since the epoch). A token that is malformed or whose signature
/// does not verify is an error.
pub fn decode(token: &str, key: &[u8], now: i64) -> Result<Decoded, String> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, payload, signature] = parts.as_slice() else {
        return Err(format!(
            "failed to parse token: invalid number of segments ({}; a JWS has 3)",
            parts.len()
        ));
    };
    let segment = |name: &str, text: &str| {
        URL_SAFE_NO_PAD
            .decode(text.trim_end_matches('='))
            .map_err(|e| format!("failed to parse token: {name} is not base64url: {e}"))
    };
    let header: Value = serde_json::from_slice(&segment("header", header)?)
        .map_err(|e| format!("failed to parse token: header is not JSON: {e}"))?;
    let algorithm = match header.get("alg").and_then(Value::as_str) {
        Some("HS256") => ring::hmac::HMAC_SHA256,
        Some("HS384") => ring::hmac::HMAC_SHA384,
        Some("HS512") => ring::hmac::HMAC_SHA512,
        other => {
            return Err(format!(
                "failed to verify token: algorithm {} does not verify with a symmetric key \
                 (HS256, HS384 or HS512)",
                other.unwrap_or("(none)")
            ));
        }
    };
    let signed = &token[..header_and_payload_len(token)];
    let verified = ring::hmac::verify(
        &ring::hmac::Key::new(algorithm, key),
        signed.as_bytes(),
        &segment("signature", signature)?,
    );
    if verified.is_err() {
        return Err(
            "failed to verify token: could not verify message using any of the signatures or keys"
                .into(),
        );
    }
    let claims: Map<String, Value> = serde_json::from_slice(&segment("payload", payload)?)
        .map_err(|e| format!("failed to parse token: claims are not a JSON object: {e}"))?;
    let time = |name: &str| claims.get(name).and_then(Value::as_f64).map(|t| t as i64);
    let valid = time("exp").is_none_or(|exp| now < exp)
        && time("nbf").is_none_or(|nbf| now >= nbf)
        && time("iat").is_none_or(|iat| now >= iat);
    let claims = if claims.is_empty() {
        Value::Null
    } else {
        Value::Object(
            claims
                .into_iter()
                .map(|(k, v)| {
                    // jwx reads the audience as a list, one string or many.
                    let v = match (k.as_str(), v) {
                        ("aud", Value::String(s)) => Value::Array(vec![Value::String(s)]),
                        (_, v) => v,
                    };
                    (k, numbers_as_doubles(v))
                })
                .collect(),
        )
    };
    Ok(Decoded { claims, valid })
}

/// The length of `header.payload`, the signed part of a compact JWS.
fn header_and_payload_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(token.len())
}

fn numbers_as_doubles(v: Value) -> Value {
    match v {
        Value::Number(n) => n
            .as_f64()
            .and_then(serde_json::Number::from_f64)
            .map_or(Value::Null, Value::Number),
        Value::Array(items) => Value::Array(items.into_iter().map(numbers_as_doubles).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, numbers_as_doubles(v)))
                .collect(),
        ),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From Kyverno's `test/cli/test-validating-policy/envoy-jwt` (signed
    /// with the secret `secret`; role admin, exp 2241081539, nbf
    /// 1514851139).
    const ADMIN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjIyNDEwODE1MzksIm5iZiI6MTUxNDg1MTEzOSwicm9sZSI6ImFkbWluIiwic3ViIjoiWVd4cFkyVT0ifQ.veMeVDYlulTdieeX-jxFZ_tCmqQ_K8rwx2OktUHv5Z0";

    #[test]
    fn a_token_signed_with_the_key_is_read() {
        let d = decode(ADMIN, b"secret", 1_700_000_000).unwrap();
        assert!(d.valid);
        assert_eq!(d.claims["role"], "admin");
        assert!(d.claims["exp"].is_f64(), "{}", d.claims["exp"]);
        assert_eq!(d.claims["exp"].as_f64(), Some(2241081539.0));
    }

    #[test]
    fn time_claims_decide_validity() {
        // Before nbf, and after exp.
        assert!(!decode(ADMIN, b"secret", 1_514_851_138).unwrap().valid);
        assert!(decode(ADMIN, b"secret", 1_514_851_139).unwrap().valid);
        assert!(!decode(ADMIN, b"secret", 2_241_081_539).unwrap().valid);
    }

    #[test]
    fn bad_tokens_are_errors() {
        for (token, key, want) in [
            (ADMIN, &b"other"[..], "could not verify"),
            ("a.b", b"secret", "invalid number of segments"),
            ("e30.e30.", b"secret", "algorithm (none)"),
            ("!!.e30.x", b"secret", "header is not base64url"),
        ] {
            let e = decode(token, key, 0).unwrap_err();
            assert!(e.contains(want), "{token}: {e}");
        }
    }
}
