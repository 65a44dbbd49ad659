//! Serving certificates: either the operator's files (reloaded when both
//! change) or, without them, a CA and a serving certificate generated at
//! start. The certificate sits behind arc-swap in a rustls resolver, so a
//! reload affects new handshakes only and never drops a connection.

use arc_swap::ArcSwap;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// What went wrong with a certificate or key: the step, and its cause.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{step}: {source}")]
    Step {
        step: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("no certificate in the PEM data")]
    NoCertificate,
}

type Result<T, E = TlsError> = std::result::Result<T, E>;

/// Names the step a fallible call is: `.step("reading the CA key")?`.
trait Step<T> {
    fn step(self, step: &'static str) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Step<T> for std::result::Result<T, E> {
    fn step(self, step: &'static str) -> Result<T> {
        self.map_err(|e| TlsError::Step {
            step,
            source: Box::new(e),
        })
    }
}

/// Hands rustls whatever certificate is current.
#[derive(Debug)]
pub struct SwappableCert(pub ArcSwap<CertifiedKey>);

impl ResolvesServerCert for SwappableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// TLS 1.2 and 1.3 with the ring provider, HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(cert: Arc<SwappableCert>) -> Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .step("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A certificate chain and key in PEM, turned into what rustls serves.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey> {
    let chain = certificates(std::str::from_utf8(cert_pem).step("certificate PEM")?)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem).step("reading private key PEM")?;
    let signing_key = any_supported_type(&key).step("unsupported private key type")?;
    Ok(CertifiedKey::new(chain, signing_key))
}

/// A generated CA and a serving certificate it signed.
pub struct Generated {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A certificate and its private key, in PEM.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyedCert {
    pub cert_pem: String,
    pub key_pem: String,
}

const CA_NAME: &str = "gavel self-signed CA";

/// Backdated a little, so replicas whose clocks lag still accept it.
fn validity(params: &mut CertificateParams, valid_for: Duration) {
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + valid_for;
}

/// A self-signed CA valid for `valid_for`.
pub fn generate_ca(valid_for: Duration) -> Result<KeyedCert> {
    let key = KeyPair::generate().step("generating the CA key")?;
    let mut params = CertificateParams::new(Vec::<String>::new()).step("CA parameters")?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, CA_NAME);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut params, valid_for);
    let cert = params.self_signed(&key).step("signing the CA")?;
    Ok(KeyedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A serving certificate for `sans` (DNS names or IPs), signed by `ca` (the
/// first certificate of its PEM is the signer).
pub fn issue(ca: &KeyedCert, sans: &[String], valid_for: Duration) -> Result<KeyedCert> {
    let ca_key = KeyPair::from_pem(&ca.key_pem).step("reading the CA key")?;
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).step("reading the CA")?;
    let key = KeyPair::generate().step("generating the serving key")?;
    let mut params = CertificateParams::new(sans.to_vec()).step("certificate SANs")?;
    params.distinguished_name.push(
        DnType::CommonName,
        sans.first().map(String::as_str).unwrap_or("gavel"),
    );
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    validity(&mut params, valid_for);
    let cert = params
        .signed_by(&key, &issuer)
        .step("signing the serving certificate")?;
    Ok(KeyedCert {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Generates a CA and a serving certificate for `sans` (DNS names or IPs),
/// valid for ten years: standalone mode has nobody to renew them.
pub fn generate(sans: &[String]) -> Result<Generated> {
    let ten_years = Duration::from_secs(10 * 365 * 24 * 3600);
    let ca = generate_ca(ten_years)?;
    let pair = issue(&ca, sans, ten_years)?;
    Ok(Generated {
        ca_pem: ca.cert_pem,
        cert_pem: pair.cert_pem,
        key_pem: pair.key_pem,
    })
}

/// The DER certificates of a PEM bundle, in order.
pub fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>> {
    let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .step("reading certificate PEM")?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    Ok(chain)
}

/// When a DER certificate stops being valid.
pub fn not_after(der: &[u8]) -> Result<SystemTime> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).step("parsing a certificate")?;
    let secs = cert.validity().not_after.timestamp();
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(secs.max(0) as u64))
}

/// Whether DER certificate `cert` carries a signature by `ca`'s key.
pub fn signed_by(cert: &[u8], ca: &[u8]) -> bool {
    let (Ok((_, cert)), Ok((_, ca))) = (
        x509_parser::parse_x509_certificate(cert),
        x509_parser::parse_x509_certificate(ca),
    ) else {
        return false;
    };
    cert.verify_signature(Some(ca.public_key())).is_ok()
}

/// Certificate and key files given by the operator, with the modification
/// times they were last loaded at.
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    stamps: (Option<SystemTime>, Option<SystemTime>),
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

impl CertFiles {
    pub fn new(cert: PathBuf, key: PathBuf) -> CertFiles {
        CertFiles {
            cert,
            key,
            stamps: (None, None),
        }
    }

    pub fn load(&mut self) -> Result<CertifiedKey> {
        let stamps = (modified(&self.cert), modified(&self.key));
        let cert = std::fs::read(&self.cert).map_err(|source| TlsError::Read {
            path: self.cert.display().to_string(),
            source,
        })?;
        let key = std::fs::read(&self.key).map_err(|source| TlsError::Read {
            path: self.key.display().to_string(),
            source,
        })?;
        let loaded = certified_key(&cert, &key)?;
        self.stamps = stamps;
        Ok(loaded)
    }

    /// A new key when both files changed since the last load (a rotation
    /// writes both; reloading after only one would pair a new certificate
    /// with an old key).
    pub fn reload_if_changed(&mut self) -> Option<Result<CertifiedKey>> {
        let (cert, key) = (modified(&self.cert), modified(&self.key));
        (cert != self.stamps.0 && key != self.stamps.1).then(|| self.load())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificate_is_served() {
        let g = generate(&["localhost".into(), "127.0.0.1".into()]).unwrap();
        assert!(g.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let key = certified_key(g.cert_pem.as_bytes(), g.key_pem.as_bytes()).unwrap();
        assert_eq!(key.cert.len(), 1);
        assert!(certified_key(b"not pem", g.key_pem.as_bytes()).is_err());
    }

    #[test]
    fn issued_certificates_expire_and_chain_to_their_ca() {
        let day = Duration::from_secs(24 * 3600);
        let ca = generate_ca(365 * day).unwrap();
        let other = generate_ca(365 * day).unwrap();
        let pair = issue(&ca, &["gavel-svc.gavel.svc".into()], 10 * day).unwrap();
        let cert = &certificates(&pair.cert_pem).unwrap()[0];
        let ca_der = &certificates(&ca.cert_pem).unwrap()[0];
        let other_der = &certificates(&other.cert_pem).unwrap()[0];
        assert!(signed_by(cert, ca_der));
        assert!(!signed_by(cert, other_der));
        let left = not_after(cert)
            .unwrap()
            .duration_since(SystemTime::now())
            .unwrap();
        assert!(left > 9 * day && left <= 10 * day, "{left:?}");
        let ca_left = not_after(ca_der)
            .unwrap()
            .duration_since(SystemTime::now())
            .unwrap();
        assert!(ca_left > 364 * day, "{ca_left:?}");
    }
}
