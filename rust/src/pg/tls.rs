//! TLS for the connection: rustls with the *ring* provider, configured the way libpq's
//! `sslmode` and `sslrootcert` ask (libpq chapter, "SSL Support", table "SSL Mode
//! Descriptions").
//!
//! * verify-full: the chain must end in a root of `sslrootcert` and the certificate must
//!   name the host (DNS name or IP address).
//! * verify-ca: the chain is checked, the name is not.
//! * require / prefer / allow: no check unless the root certificate file exists, in which
//!   case the chain is checked as for verify-ca (libpq's rule, so that dropping a root
//!   certificate into `~/.postgresql/root.crt` protects every connection).
//!
//! Even unchecked certificates must sign the handshake: that proves the server holds the
//! certificate's key, which channel binding relies on.
//!
//! Channel binding `tls-server-end-point` (RFC 5929) is the hash of the server's
//! certificate with the hash function of the certificate's signature algorithm (SHA-256
//! for MD5 and SHA-1), which is what the server computes on its side.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use sha2::Digest;

use super::config::Settings;
use super::dsn::SslMode;
use super::error::PgError;

/// How much of the server certificate is checked.
enum Check {
    Nothing,
    Chain(Arc<RootCertStore>),
    ChainAndName(Arc<RootCertStore>),
}

/// Builds the rustls configuration for `settings`, or a configuration error (a missing
/// root certificate for verify-ca / verify-full, an unreadable certificate file).
pub(crate) fn client_config(settings: &Settings) -> Result<Arc<ClientConfig>, PgError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let root_file = settings.sslrootcert.as_deref().filter(|p| p.exists());
    let verify = matches!(settings.sslmode, SslMode::VerifyCa | SslMode::VerifyFull);
    let check = match root_file {
        Some(path) => {
            let roots = Arc::new(load_roots(path)?);
            if settings.sslmode == SslMode::VerifyFull {
                Check::ChainAndName(roots)
            } else {
                Check::Chain(roots)
            }
        }
        None if verify => {
            let shown = settings.sslrootcert.as_deref().map_or_else(
                || "~/.postgresql/root.crt".into(),
                |p| p.display().to_string(),
            );
            return Err(PgError::config(format!(
                "root certificate file \"{shown}\" does not exist; either provide it \
                 (sslrootcert) or change sslmode to disable server certificate verification"
            )));
        }
        None => Check::Nothing,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match check {
        Check::Nothing => Arc::new(AnyCertificate(provider.clone())),
        Check::Chain(roots) => Arc::new(ChainOnly(webpki(roots, &provider)?)),
        Check::ChainAndName(roots) => webpki(roots, &provider)?,
    };
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| PgError::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    // PostgreSQL 17+ expects this ALPN name (required for direct TLS, accepted after an
    // SSLRequest); older servers ignore it.
    config.alpn_protocols = vec![b"postgresql".to_vec()];
    Ok(Arc::new(config))
}

/// The name rustls checks the certificate against and sends as SNI: the host when it is
/// a DNS name or an address, else the address connected to (no SNI is sent for
/// addresses).
pub(crate) fn server_name(
    host: &str,
    peer: Option<IpAddr>,
) -> Result<ServerName<'static>, PgError> {
    if let Ok(name) = ServerName::try_from(host.to_owned()) {
        return Ok(name);
    }
    peer.map(ServerName::from)
        .ok_or_else(|| PgError::Tls(format!("\"{host}\" is not a valid host name for TLS")))
}

fn load_roots(path: &Path) -> Result<RootCertStore, PgError> {
    let shown = path.display();
    let mut roots = RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
        PgError::config(format!(
            "could not read root certificate file \"{shown}\": {e}"
        ))
    })?;
    for cert in certs {
        let cert = cert.map_err(|e| {
            PgError::config(format!(
                "could not read root certificate file \"{shown}\": {e}"
            ))
        })?;
        roots
            .add(cert)
            .map_err(|e| PgError::config(format!("invalid certificate in \"{shown}\": {e}")))?;
    }
    if roots.is_empty() {
        return Err(PgError::config(format!(
            "root certificate file \"{shown}\" holds no certificate"
        )));
    }
    Ok(roots)
}

fn webpki(
    roots: Arc<RootCertStore>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, PgError> {
    WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| PgError::Tls(format!("cannot use the root certificates: {e}")))
}

/// verify-ca: the full WebPKI check, minus the host name. webpki checks the chain before
/// the name, so a name mismatch is only ever reported for a chain that was accepted.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// require / prefer without a root certificate: any certificate, but the handshake
/// signature must still be valid for it.
#[derive(Debug)]
struct AnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The hash function of `tls-server-end-point` for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndPointHash {
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

/// `tls-server-end-point` channel-binding data for the server's DER certificate, or
/// `None` when its signature algorithm has no single hash function (Ed25519, RSA-PSS):
/// PostgreSQL cannot bind to those either.
pub(crate) fn server_end_point(cert: &[u8]) -> Option<Vec<u8>> {
    Some(match signature_hash(cert)? {
        EndPointHash::Sha224 => sha2::Sha224::digest(cert).to_vec(),
        EndPointHash::Sha256 => sha2::Sha256::digest(cert).to_vec(),
        EndPointHash::Sha384 => sha2::Sha384::digest(cert).to_vec(),
        EndPointHash::Sha512 => sha2::Sha512::digest(cert).to_vec(),
    })
}

/// Reads `Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm
/// AlgorithmIdentifier, signature }` far enough to get the algorithm's OID.
fn signature_hash(cert: &[u8]) -> Option<EndPointHash> {
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA_SHA2: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03];
    const ECDSA_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
    let (tag, body, _) = der_tlv(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (_, _, rest) = der_tlv(body)?; // tbsCertificate
    let (tag, algorithm, _) = der_tlv(rest)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, oid, _) = der_tlv(algorithm)?;
    if tag != 0x06 {
        return None;
    }
    if oid == ECDSA_SHA1 {
        return Some(EndPointHash::Sha256);
    }
    let (prefix, last) = oid.split_last().map(|(last, prefix)| (prefix, *last))?;
    match (prefix, last) {
        // md5WithRSA (4), sha1WithRSA (5): RFC 5929 says SHA-256.
        (RSA, 4 | 5 | 11) | (ECDSA_SHA2, 2) => Some(EndPointHash::Sha256),
        (RSA, 12) | (ECDSA_SHA2, 3) => Some(EndPointHash::Sha384),
        (RSA, 13) | (ECDSA_SHA2, 4) => Some(EndPointHash::Sha512),
        (RSA, 14) | (ECDSA_SHA2, 1) => Some(EndPointHash::Sha224),
        _ => None,
    }
}

/// One DER tag-length-value: (tag, contents, the bytes after it).
fn der_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 {
            return None;
        }
        let (bytes, after) = rest.split_at_checked(count)?;
        rest = after;
        bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
    };
    let (body, after) = rest.split_at_checked(len)?;
    Some((tag, body, after))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
    use super::*;

    /// A certificate skeleton: SEQUENCE { SEQUENCE {}, SEQUENCE { OID }, BIT STRING }.
    fn cert_with_oid(oid: &[u8]) -> Vec<u8> {
        let mut alg = vec![0x06, oid.len() as u8];
        alg.extend_from_slice(oid);
        let mut inner = vec![0x30, 0x00, 0x30, alg.len() as u8];
        inner.extend_from_slice(&alg);
        inner.extend_from_slice(&[0x03, 0x01, 0x00]);
        let mut out = vec![0x30, 0x81, inner.len() as u8];
        out.extend_from_slice(&inner);
        out
    }

    #[test]
    fn signature_hash_follows_rfc_5929() {
        let rsa = |n: u8| cert_with_oid(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, n]);
        let ec = |n: u8| cert_with_oid(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, n]);
        assert_eq!(signature_hash(&rsa(11)), Some(EndPointHash::Sha256));
        assert_eq!(signature_hash(&rsa(5)), Some(EndPointHash::Sha256));
        assert_eq!(signature_hash(&rsa(12)), Some(EndPointHash::Sha384));
        assert_eq!(signature_hash(&rsa(13)), Some(EndPointHash::Sha512));
        assert_eq!(signature_hash(&ec(2)), Some(EndPointHash::Sha256));
        assert_eq!(signature_hash(&ec(3)), Some(EndPointHash::Sha384));
        // RSA-PSS (1.2.840.113549.1.1.10) and Ed25519 (1.3.101.112) have no fixed hash.
        assert_eq!(signature_hash(&rsa(10)), None);
        assert_eq!(signature_hash(&cert_with_oid(&[0x2b, 0x65, 0x70])), None);
        let cert = rsa(11);
        assert_eq!(
            server_end_point(&cert),
            Some(sha2::Sha256::digest(&cert).to_vec())
        );
    }

    #[test]
    fn truncated_der_is_rejected() {
        let cert = cert_with_oid(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 11]);
        for cut in 0..cert.len() {
            assert_eq!(
                signature_hash(cert.get(..cut).unwrap_or_default()),
                None,
                "cut {cut}"
            );
        }
    }
}
