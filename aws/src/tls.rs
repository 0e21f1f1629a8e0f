//! Extra certificates to trust: `AWS_CA_BUNDLE` / `--ca-bundle`, the AWS
//! tools' way to reach an endpoint behind a corporate proxy or, here, the
//! TLS port of a local emulator (kinesis-local serves SubscribeToShard only
//! over HTTP/2 with TLS). The platform's roots stay trusted as well.
//!
//! The SDK's HTTP client panics on a certificate it cannot parse when it
//! first connects, so a bundle is checked whole when it is read.

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use std::path::Path;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum CaBundleError {
    #[error("reading the CA bundle {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("the CA bundle {path} is not PEM certificates: {message}")]
    NotPem { path: String, message: String },
    #[error("the CA bundle {path} holds no certificate (expected -----BEGIN CERTIFICATE----- blocks)")]
    Empty { path: String },
    #[error("certificate {index} of the CA bundle {path} cannot be a trust anchor: {message}")]
    BadAnchor { path: String, index: usize, message: String },
}

/// PEM certificates, each checked to be a usable trust anchor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaBundle {
    pem: Vec<u8>,
    count: usize,
}

impl CaBundle {
    pub fn read(path: &Path) -> Result<Self, CaBundleError> {
        let shown = path.display().to_string();
        let pem = std::fs::read(path).map_err(|source| CaBundleError::Read { path: shown.clone(), source })?;
        Self::from_pem(pem, &shown)
    }

    /// `pem`'s certificates; `path` names it in errors.
    pub fn from_pem(pem: Vec<u8>, path: &str) -> Result<Self, CaBundleError> {
        let certs = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| CaBundleError::NotPem { path: path.to_string(), message: e.to_string() })?;
        if certs.is_empty() {
            return Err(CaBundleError::Empty { path: path.to_string() });
        }
        for (i, cert) in certs.iter().enumerate() {
            webpki::anchor_from_trusted_cert(cert).map_err(|e| CaBundleError::BadAnchor {
                path: path.to_string(),
                index: i + 1,
                message: e.to_string(),
            })?;
        }
        Ok(CaBundle { count: certs.len(), pem })
    }

    /// How many certificates it holds.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// An HTTPS client (rustls, HTTP/2 by ALPN) trusting the platform's
    /// roots and these certificates.
    pub(crate) fn http_client(&self) -> aws_smithy_runtime_api::client::http::SharedHttpClient {
        use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode, TlsContext, TrustStore};
        let trust = TrustStore::default().with_pem_certificate(self.pem.clone());
        aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::AwsLc))
            .tls_context(
                TlsContext::builder()
                    .with_trust_store(trust)
                    .build()
                    .unwrap_or_else(|_| unreachable!("a TLS context with only a trust store always builds")),
            )
            .build_https()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_that_is_not_certificates_is_refused_with_its_path() {
        let e = CaBundle::from_pem(b"hello".to_vec(), "/x/ca.pem").expect_err("no certificate");
        assert!(matches!(e, CaBundleError::Empty { .. }), "{e}");
        assert!(e.to_string().contains("/x/ca.pem"), "{e}");
        let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec();
        let e = CaBundle::from_pem(garbage, "/x/ca.pem").expect_err("not a certificate");
        assert!(matches!(e, CaBundleError::BadAnchor { index: 1, .. } | CaBundleError::NotPem { .. }), "{e}");
    }
}
