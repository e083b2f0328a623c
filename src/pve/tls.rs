//! TLS verification for the PVE API.
//!
//! PVE nodes usually serve a self-signed certificate (`/etc/pve/local/pve-ssl.pem`, signed by
//! the cluster CA `/etc/pve/pve-root-ca.pem`). Verification is **on by default**; the choices:
//!
//! * [`TlsMode::System`] — the platform's roots (for a node behind a public certificate);
//! * [`TlsMode::CaFile`] — `--pve-ca FILE`: trust the PEM certificates in FILE (the cluster CA,
//!   or the node certificate itself); host names are checked;
//! * [`TlsMode::Fingerprint`] — `--pve-fingerprint SHA256`: accept exactly the certificate whose
//!   SHA-256 digest is given (as `GET /nodes` shows `ssl_fingerprint`, or
//!   `openssl x509 -fingerprint -sha256`), checking its signature on the handshake but not its
//!   chain or name — the pinning PVE's own clients use;
//! * [`TlsMode::Insecure`] — `--insecure`: no verification at all (a warning is logged).
//!
//! All use rustls with the *ring* provider, handed to reqwest as a preconfigured TLS config.
//!
//! Every verifier is wrapped in one that remembers the end-entity certificate it refused
//! ([`Presented`]): the client turns a refused handshake into [`PveError::Untrusted`], which
//! names that certificate's SHA-256 fingerprint and the `PROXMOX_FINGERPRINT=…` setting that
//! would trust it (the first run against a self-signed node is one copy-paste from working).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use sha2::{Digest, Sha256};

use super::PveError;

/// How the server certificate is verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsMode {
    /// Platform roots.
    System,
    /// Trust the PEM certificates in this file.
    CaFile(PathBuf),
    /// Accept the certificate with this SHA-256 fingerprint (32 bytes).
    Fingerprint([u8; 32]),
    /// No verification.
    Insecure,
}

/// Parses a SHA-256 fingerprint: 64 hex digits, optionally separated by `:` (any case).
///
/// # Errors
/// [`PveError::Config`] naming what was expected.
pub fn parse_fingerprint(s: &str) -> Result<[u8; 32], PveError> {
    let hexs: String = s.trim().chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(&hexs).ok().filter(|b| b.len() == 32).ok_or_else(|| {
        PveError::Config(format!(
            "--pve-fingerprint: expected a SHA-256 fingerprint (64 hex digits, optionally `:`-separated), found `{s}`"
        ))
    })?;
    let mut out = [0u8; 32];
    out.copy_from_slice(&bytes);
    Ok(out)
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The SHA-256 fingerprint of the last server certificate a verifier refused (shared between
/// the rustls configuration and the client that reports the failure).
#[derive(Debug, Clone, Default)]
pub struct Presented(Arc<Mutex<Option<[u8; 32]>>>);

impl Presented {
    /// The SHA-256 digest of the DER certificate most recently refused, if any.
    pub fn refused(&self) -> Option<[u8; 32]> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, end_entity: &CertificateDer<'_>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Sha256::digest(end_entity.as_ref()).into());
    }
}

/// Builds the rustls client configuration for `mode`.
///
/// # Errors
/// [`PveError::Config`] when the CA file is unreadable or holds no certificate.
pub fn client_config(mode: &TlsMode) -> Result<ClientConfig, PveError> {
    client_config_recording(mode).map(|(config, _)| config)
}

/// [`client_config`], and the [`Presented`] slot its verifier fills with the fingerprint of a
/// certificate it refuses.
///
/// # Errors
/// As [`client_config`].
pub fn client_config_recording(mode: &TlsMode) -> Result<(ClientConfig, Presented), PveError> {
    let provider = provider();
    let presented = Presented::default();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| PveError::Config(format!("TLS set-up failed: {e}")))?;
    let recording = |inner: Arc<dyn ServerCertVerifier>| Arc::new(Recording { inner, presented: presented.clone() });
    let config = match mode {
        TlsMode::System => {
            let verifier = rustls_platform_verifier::Verifier::new(provider)
                .map_err(|e| PveError::Config(format!("cannot load the system's root certificates: {e}")))?;
            builder.dangerous().with_custom_certificate_verifier(recording(Arc::new(verifier))).with_no_client_auth()
        }
        TlsMode::CaFile(path) => {
            let certs: Vec<CertificateDer<'static>> =
                CertificateDer::pem_file_iter(path).and_then(|it| it.collect::<Result<Vec<_>, _>>()).map_err(|e| {
                    PveError::Config(format!("--pve-ca {}: cannot read PEM certificates: {e}", path.display()))
                })?;
            if certs.is_empty() {
                return Err(PveError::Config(format!(
                    "--pve-ca {}: no certificate found (expected PEM `-----BEGIN CERTIFICATE-----`)",
                    path.display()
                )));
            }
            let mut roots = RootCertStore::empty();
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| PveError::Config(format!("--pve-ca {}: unusable certificate: {e}", path.display())))?;
            }
            let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| PveError::Config(format!("--pve-ca {}: {e}", path.display())))?;
            builder.dangerous().with_custom_certificate_verifier(recording(verifier)).with_no_client_auth()
        }
        TlsMode::Fingerprint(_) | TlsMode::Insecure => {
            let pin = match mode {
                TlsMode::Fingerprint(fp) => Some(*fp),
                _ => None,
            };
            let verifier = EndEntityOnly { pin, algs: provider.signature_verification_algorithms };
            builder.dangerous().with_custom_certificate_verifier(recording(Arc::new(verifier))).with_no_client_auth()
        }
    };
    Ok((config, presented))
}

/// Delegates to `inner` and records the end-entity certificate it refuses in `presented`.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn ServerCertVerifier>,
    presented: Presented,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now).inspect_err(|_| {
            self.presented.record(end_entity);
        })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }

    fn requires_raw_public_keys(&self) -> bool {
        self.inner.requires_raw_public_keys()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.inner.root_hint_subjects()
    }
}

/// Checks only the end-entity certificate: with `pin`, it must have exactly that SHA-256 digest
/// (`--pve-fingerprint`); without, any certificate is accepted (`--insecure`). Handshake
/// signatures are always verified with the provider's algorithms.
#[derive(Debug)]
struct EndEntityOnly {
    pin: Option<[u8; 32]>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for EndEntityOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(pin) = self.pin else { return Ok(ServerCertVerified::assertion()) };
        let got: [u8; 32] = Sha256::digest(end_entity.as_ref()).into();
        if got == pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(format!(
                "server certificate fingerprint {} does not match the pinned --pve-fingerprint {}",
                colon_hex(&got),
                colon_hex(&pin)
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algs.supported_schemes()
    }
}

/// `AA:BB:…` rendering of a digest.
pub fn colon_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints() {
        let fp = "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:10:21:32:43:54:65:76:87:98:A9:BA:CB:DC:ED:FE:0F";
        let b = parse_fingerprint(fp).unwrap();
        assert_eq!(colon_hex(&b), fp);
        assert_eq!(parse_fingerprint(&fp.replace(':', "").to_lowercase()).unwrap(), b);
        assert!(parse_fingerprint("00:11").is_err());
        assert!(parse_fingerprint("zz").is_err());
    }
}
