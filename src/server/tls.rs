//! Serving certificates: either the operator's files (reloaded when both
//! change) or, without them, a CA and a serving certificate generated at
//! start. The certificate sits behind arc-swap in a rustls resolver, so a
//! reload affects new handshakes only and never drops a connection.

use anyhow::{Context, Result};
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
use std::time::SystemTime;

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
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// A certificate chain and key in PEM, turned into what rustls serves.
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .context("reading certificate PEM")?;
    anyhow::ensure!(!chain.is_empty(), "no certificate in the PEM data");
    let key = PrivateKeyDer::from_pem_slice(key_pem).context("reading private key PEM")?;
    let signing_key = any_supported_type(&key).context("unsupported private key type")?;
    Ok(CertifiedKey::new(chain, signing_key))
}

/// A generated CA and a serving certificate it signed.
pub struct Generated {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Generates a CA and a serving certificate for `sans` (DNS names or IPs).
pub fn generate(sans: &[String]) -> Result<Generated> {
    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "gavel self-signed CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key).context("signing the CA")?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);

    let key = KeyPair::generate().context("generating the serving key")?;
    let mut params = CertificateParams::new(sans.to_vec()).context("certificate SANs")?;
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
    let cert = params
        .signed_by(&key, &issuer)
        .context("signing the serving certificate")?;
    Ok(Generated {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
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
        let cert = std::fs::read(&self.cert).with_context(|| self.cert.display().to_string())?;
        let key = std::fs::read(&self.key).with_context(|| self.key.display().to_string())?;
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
}
