//! Kyverno's `x509_decode(pem)`: a PEM certificate or certificate request
//! read into the object Go's `encoding/json` makes of `x509.Certificate`
//! (or `x509.CertificateRequest`) and Kyverno reads back into a map: Go's
//! field names, byte strings in base64, times in RFC 3339, object
//! identifiers as lists of numbers, nil slices as null, numbers as
//! doubles. Kyverno accepts RSA keys only and replaces `PublicKey` with
//! `{N: <modulus in decimal>, E: <exponent>}`.

use super::{Args, R, want_str};
use crate::jmespath::JmesError;
use base64::Engine as _;
use serde_json::{Map, Value, json};
use x509_parser::certificate::X509Certificate;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::der_parser::oid::Oid;
use x509_parser::extensions::{GeneralName, ParsedExtension, X509Extension};
use x509_parser::num_bigint::BigUint;
use x509_parser::prelude::FromDer;
use x509_parser::public_key::PublicKey;
use x509_parser::x509::{SubjectPublicKeyInfo, X509Name};

fn fail<T>(message: impl Into<String>) -> Result<T, JmesError> {
    Err(JmesError::Runtime(message.into()))
}

pub(super) fn x509_decode(args: &Args) -> R {
    args.check(1)?;
    let text = want_str(args.name, args.v(0))?;
    let Ok((_, pem)) = x509_parser::pem::parse_x509_pem(text.as_bytes()) else {
        return fail("failed to decode PEM block");
    };
    match pem.label.as_str() {
        "CERTIFICATE" => match X509Certificate::from_der(&pem.contents) {
            Ok((_, cert)) => certificate(&cert, &pem.contents),
            Err(e) => fail(format!("x509: malformed certificate: {e}")),
        },
        "CERTIFICATE REQUEST" => match X509CertificationRequest::from_der(&pem.contents) {
            Ok((_, csr)) => request(&csr, &pem.contents),
            Err(e) => fail(format!("x509: malformed certificate request: {e}")),
        },
        _ => fail("PEM block neither contains a CERTIFICATE or CERTIFICATE REQUEST"),
    }
}

fn b64(bytes: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// A Go slice: null when empty (nil).
fn slice(items: Vec<Value>) -> Value {
    if items.is_empty() {
        Value::Null
    } else {
        Value::Array(items)
    }
}

fn oid(o: &Oid) -> Value {
    match o.iter() {
        Some(arcs) => Value::Array(arcs.map(|a| json!(a as f64)).collect()),
        None => Value::Null,
    }
}

/// `{N, E}` of an RSA key; Kyverno refuses any other.
fn rsa_key(spki: &SubjectPublicKeyInfo) -> R {
    match spki.parsed() {
        Ok(PublicKey::RSA(key)) => Ok(json!({
            "N": BigUint::from_bytes_be(key.modulus).to_string(),
            "E": BigUint::from_bytes_be(key.exponent)
                .to_string()
                .parse::<f64>()
                .unwrap_or(f64::NAN),
        })),
        Ok(_) => fail("certificate should use rsa algorithm"),
        Err(_) => fail("failed to parse subject public key info"),
    }
}

/// Go's `x509.SignatureAlgorithm` for a signature's OID.
fn signature_algorithm(o: &Oid) -> f64 {
    match o.to_id_string().as_str() {
        "1.2.840.113549.1.1.2" => 1.0,
        "1.2.840.113549.1.1.4" => 2.0,
        "1.2.840.113549.1.1.5" => 3.0,
        "1.2.840.113549.1.1.11" => 4.0,
        "1.2.840.113549.1.1.12" => 5.0,
        "1.2.840.113549.1.1.13" => 6.0,
        "1.2.840.10040.4.3" => 7.0,
        "2.16.840.1.101.3.4.3.2" => 8.0,
        "1.2.840.10045.4.1" => 9.0,
        "1.2.840.10045.4.3.2" => 10.0,
        "1.2.840.10045.4.3.3" => 11.0,
        "1.2.840.10045.4.3.4" => 12.0,
        // RSASSA-PSS; Go tells the hash apart by the parameters, SHA-256
        // being the common one.
        "1.2.840.113549.1.1.10" => 13.0,
        "1.3.101.112" => 16.0,
        _ => 0.0,
    }
}

/// Go's `x509.ExtKeyUsage` for a key purpose's OID.
fn ext_key_usage(o: &Oid) -> Option<f64> {
    let n = match o.to_id_string().as_str() {
        "2.5.29.37.0" => 0,
        "1.3.6.1.5.5.7.3.1" => 1,
        "1.3.6.1.5.5.7.3.2" => 2,
        "1.3.6.1.5.5.7.3.3" => 3,
        "1.3.6.1.5.5.7.3.4" => 4,
        "1.3.6.1.5.5.7.3.5" => 5,
        "1.3.6.1.5.5.7.3.6" => 6,
        "1.3.6.1.5.5.7.3.7" => 7,
        "1.3.6.1.5.5.7.3.8" => 8,
        "1.3.6.1.5.5.7.3.9" => 9,
        "1.3.6.1.4.1.311.10.3.3" => 10,
        "2.16.840.1.113730.4.1" => 11,
        "1.3.6.1.4.1.311.2.1.22" => 12,
        "1.3.6.1.4.1.311.61.1.1" => 13,
        _ => return None,
    };
    Some(f64::from(n))
}

/// Go's `pkix.Name`: the attributes it knows, and all of them in order
/// as `Names`.
fn name(n: &X509Name) -> Value {
    let mut lists: Map<String, Value> = Map::new();
    let mut serial = String::new();
    let mut common = String::new();
    let mut names = Vec::new();
    for attr in n.iter_attributes() {
        let value = attr.as_str().map(str::to_string).unwrap_or_default();
        names.push(json!({"Type": oid(attr.attr_type()), "Value": value}));
        let field = match attr.attr_type().to_id_string().as_str() {
            "2.5.4.6" => "Country",
            "2.5.4.10" => "Organization",
            "2.5.4.11" => "OrganizationalUnit",
            "2.5.4.7" => "Locality",
            "2.5.4.8" => "Province",
            "2.5.4.9" => "StreetAddress",
            "2.5.4.17" => "PostalCode",
            "2.5.4.5" => {
                serial = value;
                continue;
            }
            "2.5.4.3" => {
                common = value;
                continue;
            }
            _ => continue,
        };
        match lists.get_mut(field) {
            Some(Value::Array(items)) => items.push(Value::String(value)),
            _ => {
                lists.insert(field.into(), json!([value]));
            }
        }
    }
    let list = |field: &str| lists.get(field).cloned().unwrap_or(Value::Null);
    json!({
        "Country": list("Country"),
        "Organization": list("Organization"),
        "OrganizationalUnit": list("OrganizationalUnit"),
        "Locality": list("Locality"),
        "Province": list("Province"),
        "StreetAddress": list("StreetAddress"),
        "PostalCode": list("PostalCode"),
        "SerialNumber": serial,
        "CommonName": common,
        "Names": slice(names),
        "ExtraNames": null,
    })
}

fn rfc3339(t: x509_parser::time::ASN1Time) -> Value {
    let t = t.to_datetime();
    match chrono::DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond()) {
        Some(t) => Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
        None => Value::Null,
    }
}

/// The subject alternative names Go splits by kind: DNS names, email
/// addresses, IP addresses and URIs (`url.URL` objects).
#[derive(Default)]
struct AltNames {
    dns: Vec<Value>,
    email: Vec<Value>,
    ip: Vec<Value>,
    uri: Vec<Value>,
}

impl AltNames {
    fn add(&mut self, names: &[GeneralName]) {
        for n in names {
            match n {
                GeneralName::DNSName(d) => self.dns.push(json!(d)),
                GeneralName::RFC822Name(e) => self.email.push(json!(e)),
                GeneralName::IPAddress(bytes) => self.ip.push(ip_text(bytes)),
                GeneralName::URI(u) => self.uri.push(url_object(u)),
                _ => {}
            }
        }
    }
}

fn ip_text(bytes: &[u8]) -> Value {
    match bytes.len() {
        4 => json!(std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).to_string()),
        16 => {
            let octets: [u8; 16] = bytes.try_into().unwrap_or([0; 16]);
            json!(std::net::Ipv6Addr::from(octets).to_string())
        }
        _ => b64(bytes),
    }
}

/// Go's `url.URL` as JSON, for the simple `scheme://host/path?query#fragment`.
fn url_object(u: &str) -> Value {
    let (scheme, rest) = u.split_once(':').unwrap_or(("", u));
    let (rest, fragment) = rest.split_once('#').unwrap_or((rest, ""));
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (host, path, opaque) = match rest.strip_prefix("//") {
        Some(authority) => match authority.find('/') {
            Some(i) => (&authority[..i], &authority[i..], ""),
            None => (authority, "", ""),
        },
        None => ("", "", rest),
    };
    json!({
        "Scheme": scheme, "Opaque": opaque, "User": null, "Host": host, "Path": path,
        "RawPath": "", "OmitHost": false, "ForceQuery": false, "RawQuery": query,
        "Fragment": fragment, "RawFragment": "",
    })
}

fn extension_list(extensions: &[X509Extension]) -> Value {
    slice(
        extensions
            .iter()
            .map(|e| json!({"Id": oid(&e.oid), "Critical": e.critical, "Value": b64(e.value)}))
            .collect(),
    )
}

/// What a certificate's extensions say, in the fields of Go's
/// `x509.Certificate` that Kyverno's `x509_decode` returns.
#[derive(Default)]
struct ExtensionFields {
    alt: AltNames,
    key_usage: f64,
    ext_usage: Vec<Value>,
    unknown_usage: Vec<Value>,
    constraints_valid: bool,
    is_ca: bool,
    max_path_len: f64,
    subject_key_id: Value,
    authority_key_id: Value,
    ocsp: Vec<Value>,
    issuers: Vec<Value>,
    crl: Vec<Value>,
    policies: Vec<Value>,
}

impl ExtensionFields {
    fn read(extensions: &[X509Extension]) -> ExtensionFields {
        let mut out = ExtensionFields::default();
        for e in extensions {
            match e.parsed_extension() {
                ParsedExtension::SubjectAlternativeName(san) => out.alt.add(&san.general_names),
                ParsedExtension::KeyUsage(k) => out.key_usage = f64::from(k.flags),
                ParsedExtension::ExtendedKeyUsage(eku) => {
                    let mut known = Vec::new();
                    for (flag, value) in [
                        (eku.any, 0.0),
                        (eku.server_auth, 1.0),
                        (eku.client_auth, 2.0),
                        (eku.code_signing, 3.0),
                        (eku.email_protection, 4.0),
                        (eku.time_stamping, 8.0),
                        (eku.ocsp_signing, 9.0),
                    ] {
                        if flag {
                            known.push(value);
                        }
                    }
                    for o in &eku.other {
                        match ext_key_usage(o) {
                            Some(v) => known.push(v),
                            None => out.unknown_usage.push(oid(o)),
                        }
                    }
                    out.ext_usage.extend(known.into_iter().map(|v| json!(v)));
                }
                ParsedExtension::BasicConstraints(bc) => {
                    out.constraints_valid = true;
                    out.is_ca = bc.ca;
                    out.max_path_len = bc.path_len_constraint.map_or(-1.0, f64::from);
                }
                ParsedExtension::SubjectKeyIdentifier(id) => out.subject_key_id = b64(id.0),
                ParsedExtension::AuthorityKeyIdentifier(aki) => {
                    if let Some(id) = &aki.key_identifier {
                        out.authority_key_id = b64(id.0);
                    }
                }
                ParsedExtension::AuthorityInfoAccess(aia) => {
                    for d in &aia.accessdescs {
                        if let GeneralName::URI(u) = &d.access_location {
                            match d.access_method.to_id_string().as_str() {
                                "1.3.6.1.5.5.7.48.1" => out.ocsp.push(json!(u)),
                                "1.3.6.1.5.5.7.48.2" => out.issuers.push(json!(u)),
                                _ => {}
                            }
                        }
                    }
                }
                ParsedExtension::CRLDistributionPoints(points) => {
                    for p in points.iter() {
                        if let Some(x509_parser::extensions::DistributionPointName::FullName(
                            names,
                        )) = &p.distribution_point
                        {
                            for n in names {
                                if let GeneralName::URI(u) = n {
                                    out.crl.push(json!(u));
                                }
                            }
                        }
                    }
                }
                ParsedExtension::CertificatePolicies(list) => {
                    out.policies.extend(list.iter().map(|p| oid(&p.policy_id)));
                }
                _ => {}
            }
        }
        out
    }
}

fn certificate(cert: &X509Certificate, raw: &[u8]) -> R {
    let tbs = &cert.tbs_certificate;
    let ExtensionFields {
        alt,
        key_usage,
        ext_usage,
        unknown_usage,
        constraints_valid,
        is_ca,
        max_path_len,
        subject_key_id,
        authority_key_id,
        ocsp,
        issuers,
        crl,
        policies,
    } = ExtensionFields::read(tbs.extensions());
    let spki = &tbs.subject_pki;
    let serial = tbs.serial.to_string().parse::<f64>().unwrap_or(f64::NAN);
    let policy_text: Vec<Value> = policies
        .iter()
        .map(|p| {
            let arcs: Vec<String> = p
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| a.as_f64().unwrap_or_default().to_string())
                .collect();
            json!(arcs.join("."))
        })
        .collect();
    let fields: Vec<(&str, Value)> = vec![
        ("Raw", b64(raw)),
        ("RawTBSCertificate", b64(tbs.as_ref())),
        ("RawSubjectPublicKeyInfo", b64(spki.raw)),
        ("RawSubject", b64(tbs.subject.as_raw())),
        ("RawIssuer", b64(tbs.issuer.as_raw())),
        ("Signature", b64(&cert.signature_value.data)),
        (
            "SignatureAlgorithm",
            json!(signature_algorithm(&cert.signature_algorithm.algorithm)),
        ),
        ("PublicKeyAlgorithm", json!(1.0)),
        ("PublicKey", rsa_key(spki)?),
        ("Version", json!(f64::from(tbs.version.0 + 1))),
        ("SerialNumber", json!(serial)),
        ("Issuer", name(&tbs.issuer)),
        ("Subject", name(&tbs.subject)),
        ("NotBefore", rfc3339(tbs.validity.not_before)),
        ("NotAfter", rfc3339(tbs.validity.not_after)),
        ("KeyUsage", json!(key_usage)),
        ("Extensions", extension_list(tbs.extensions())),
        ("ExtraExtensions", Value::Null),
        ("UnhandledCriticalExtensions", Value::Null),
        ("ExtKeyUsage", slice(ext_usage)),
        ("UnknownExtKeyUsage", slice(unknown_usage)),
        ("BasicConstraintsValid", json!(constraints_valid)),
        ("IsCA", json!(is_ca)),
        ("MaxPathLen", json!(max_path_len)),
        (
            "MaxPathLenZero",
            json!(constraints_valid && max_path_len == 0.0),
        ),
        ("SubjectKeyId", subject_key_id),
        ("AuthorityKeyId", authority_key_id),
        ("OCSPServer", slice(ocsp)),
        ("IssuingCertificateURL", slice(issuers)),
        ("DNSNames", slice(alt.dns)),
        ("EmailAddresses", slice(alt.email)),
        ("IPAddresses", slice(alt.ip)),
        ("URIs", slice(alt.uri)),
        ("PermittedDNSDomainsCritical", Value::Bool(false)),
        ("PermittedDNSDomains", Value::Null),
        ("ExcludedDNSDomains", Value::Null),
        ("PermittedIPRanges", Value::Null),
        ("ExcludedIPRanges", Value::Null),
        ("PermittedEmailAddresses", Value::Null),
        ("ExcludedEmailAddresses", Value::Null),
        ("PermittedURIDomains", Value::Null),
        ("ExcludedURIDomains", Value::Null),
        ("CRLDistributionPoints", slice(crl)),
        ("PolicyIdentifiers", slice(policies)),
        ("Policies", slice(policy_text)),
        ("InhibitAnyPolicy", json!(0.0)),
        ("InhibitAnyPolicyZero", Value::Bool(false)),
        ("InhibitPolicyMapping", json!(0.0)),
        ("InhibitPolicyMappingZero", Value::Bool(false)),
        ("RequireExplicitPolicy", json!(0.0)),
        ("RequireExplicitPolicyZero", Value::Bool(false)),
        ("PolicyMappings", Value::Null),
    ];
    Ok(Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    ))
}

fn request(csr: &X509CertificationRequest, raw: &[u8]) -> R {
    let info = &csr.certification_request_info;
    let mut alt = AltNames::default();
    let mut extensions = Vec::new();
    if let Some(requested) = csr.requested_extensions() {
        for e in requested {
            if let ParsedExtension::SubjectAlternativeName(san) = e {
                alt.add(&san.general_names);
            }
        }
    }
    // Go's deprecated `Attributes`: the attributes it can read as sets of
    // type and value, the extension request's being its extensions.
    let mut attributes = Vec::new();
    for attr in info.iter_attributes() {
        if let x509_parser::cri_attributes::ParsedCriAttribute::ExtensionRequest(req) =
            attr.parsed_attribute()
        {
            let values: Vec<Value> = req
                .extensions
                .iter()
                .map(|e| json!({"Type": oid(&e.oid), "Value": b64(e.value)}))
                .collect();
            attributes.push(json!({"Type": oid(&attr.oid), "Value": [values]}));
            extensions.extend(req.extensions.iter().cloned());
        }
    }
    let spki = &info.subject_pki;
    Ok(json!({
        "Raw": b64(raw),
        "RawTBSCertificateRequest": b64(info.raw),
        "RawSubjectPublicKeyInfo": b64(spki.raw),
        "RawSubject": b64(info.subject.as_raw()),
        "Version": f64::from(info.version.0),
        "Signature": b64(&csr.signature_value.data),
        "SignatureAlgorithm": signature_algorithm(&csr.signature_algorithm.algorithm),
        "PublicKeyAlgorithm": 1.0,
        "PublicKey": rsa_key(spki)?,
        "Subject": name(&info.subject),
        "Attributes": slice(attributes),
        "Extensions": extension_list(&extensions),
        "ExtraExtensions": null,
        "DNSNames": slice(alt.dns),
        "EmailAddresses": slice(alt.email),
        "IPAddresses": slice(alt.ip),
        "URIs": slice(alt.uri),
    }))
}

#[cfg(test)]
mod tests {
    use crate::jmespath::Expression;
    use serde_json::{Value, json};

    fn decode(pem: &str) -> Result<Value, String> {
        Expression::parse("x509_decode(pem)")
            .unwrap()
            .resolve(&json!({ "pem": pem }))
            .map(|v| v.into_owned())
            .map_err(|e| e.to_string())
    }

    /// A certificate and a request made with openssl (every extension Go
    /// reads into a field), and what Kyverno v1.19.1's `x509_decode` gave
    /// for them (`kubectl-kyverno jp query`, recorded).
    #[test]
    fn as_kyverno_decodes_them() {
        for name in ["leaf", "csr"] {
            let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/x509/");
            let pem = std::fs::read_to_string(format!("{dir}{name}.pem")).unwrap();
            let want: Value = serde_json::from_str(
                &std::fs::read_to_string(format!("{dir}{name}.kyverno.json")).unwrap(),
            )
            .unwrap();
            let got = decode(&pem).unwrap();
            // Go's JSON has one number type: compare numbers as doubles.
            fn doubles(v: &Value) -> Value {
                match v {
                    Value::Number(n) => json!(n.as_f64()),
                    Value::Array(a) => Value::Array(a.iter().map(doubles).collect()),
                    Value::Object(m) => {
                        Value::Object(m.iter().map(|(k, v)| (k.clone(), doubles(v))).collect())
                    }
                    other => other.clone(),
                }
            }
            for (field, value) in want.as_object().unwrap() {
                assert_eq!(doubles(&got[field]), doubles(value), "{name}: {field}");
            }
            assert_eq!(
                got.as_object().unwrap().len(),
                want.as_object().unwrap().len()
            );
        }
    }

    #[test]
    fn what_it_refuses() {
        for (pem, want) in [
            ("not a pem", "failed to decode PEM block"),
            (
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                "neither contains a CERTIFICATE or CERTIFICATE REQUEST",
            ),
            (
                "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                "malformed certificate",
            ),
        ] {
            let e = decode(pem).unwrap_err();
            assert!(e.contains(want), "{pem}: {e}");
        }
    }
}
