//! TLS for the webhook server: a certificate resolver whose certificate can be swapped while the server
//! runs, and the rustls server configuration (TLS 1.2+, ALPN `h2` and `http/1.1`).
//!
//! Rotation never restarts the listener: new handshakes pick up the new certificate, connections
//! already established keep the one they negotiated.

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate PEM holds no certificate.
    #[error("no certificate found in the certificate PEM")]
    NoCertificate,
    /// The certificate PEM does not parse.
    #[error("certificate PEM does not parse: {0}")]
    BadCertificate(String),
    /// The key PEM does not parse or is of an unsupported type. The key itself is never shown.
    #[error("private key PEM does not parse or is not a supported key type: {0}")]
    BadKey(String),
    /// The key does not belong to the certificate.
    #[error("the private key does not match the certificate: {0}")]
    KeyMismatch(String),
    /// A certificate file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration rejected: {0}")]
    Config(String),
}

/// Parse a PEM certificate chain and private key into a rustls [`CertifiedKey`].
pub fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadCertificate(e.to_string()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    // The pem error type can quote input; report only its kind.
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| TlsError::BadKey(pem_error_kind(&e)))?;
    let provider = ring::default_provider();
    let certified = CertifiedKey::from_der(chain, key, &provider).map_err(|e| match e {
        rustls::Error::InconsistentKeys(k) => TlsError::KeyMismatch(format!("{k:?}")),
        other => TlsError::BadKey(other.to_string()),
    })?;
    Ok(certified)
}

fn pem_error_kind(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::NoItemsFound => "no private key found".into(),
        E::MissingSectionEnd { .. } => "unterminated PEM section".into(),
        E::IllegalSectionStart { .. } => "malformed PEM section header".into(),
        E::Base64Decode(_) => "invalid base64 in PEM".into(),
        _ => "unreadable PEM".into(),
    }
}

/// A [`ResolvesServerCert`] whose certificate is replaced atomically with [`SwappableCert::set`]. One made
/// [`SwappableCert::pending`] has none yet: every handshake fails until the first [`SwappableCert::set`].
#[derive(Debug)]
pub struct SwappableCert {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl SwappableCert {
    /// Start serving `initial`.
    pub fn new(initial: CertifiedKey) -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(Some(Arc::new(initial))),
        })
    }

    /// Nothing to serve yet (a replica waiting for the certificate another one issues).
    pub fn pending() -> Arc<Self> {
        Arc::new(Self {
            current: RwLock::new(None),
        })
    }

    /// Start from PEM.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<Self>, TlsError> {
        Ok(Self::new(certified_key(cert_pem, key_pem)?))
    }

    /// Serve `next` for every handshake from now on.
    pub fn set(&self, next: CertifiedKey) {
        let next = Some(Arc::new(next));
        match self.current.write() {
            Ok(mut guard) => *guard = next,
            // A poisoned lock only means a writer panicked mid-assignment of an Arc: the value is whole.
            Err(poisoned) => *poisoned.into_inner() = next,
        }
    }

    /// Parse and serve new PEM; on error the current certificate stays.
    pub fn set_pem(&self, cert_pem: &[u8], key_pem: &[u8]) -> Result<(), TlsError> {
        self.set(certified_key(cert_pem, key_pem)?);
        Ok(())
    }

    /// The certificate served now (leaf first), if any.
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

impl ResolvesServerCert for SwappableCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

/// The rustls server configuration: TLS 1.3 and 1.2 only, ALPN `h2` then `http/1.1`, certificate from
/// `resolver`.
pub fn server_config(resolver: Arc<dyn ResolvesServerCert>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serve `tls.crt`/`tls.key` from a directory (e.g. a cert-manager Secret volume) and reload them when
/// their content changes. Polls rather than using inotify: kubelet updates Secret volumes by swapping a
/// symlink, which file watchers report unreliably; a content comparison every `interval` is cheap.
#[derive(Debug, Clone)]
pub struct CertDir {
    /// The directory.
    pub dir: PathBuf,
    /// Certificate file name inside `dir`.
    pub cert_file: String,
    /// Key file name inside `dir`.
    pub key_file: String,
}

impl CertDir {
    /// `tls.crt` and `tls.key` in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            cert_file: "tls.crt".into(),
            key_file: "tls.key".into(),
        }
    }

    /// Read both files.
    pub async fn read(&self) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
        let read = |path: PathBuf| async move {
            tokio::fs::read(&path)
                .await
                .map_err(|source| TlsError::Read { path, source })
        };
        Ok((
            read(self.dir.join(&self.cert_file)).await?,
            read(self.dir.join(&self.key_file)).await?,
        ))
    }

    /// Load the files now into a new resolver.
    pub async fn load(&self) -> Result<Arc<SwappableCert>, TlsError> {
        let (cert, key) = self.read().await?;
        SwappableCert::from_pem(&cert, &key)
    }

    /// Reload into `target` whenever the files hold another certificate than the one served, until the
    /// task is dropped. A half-written pair (cert and key not matching) is skipped and retried on the
    /// next tick.
    pub async fn watch(self, target: Arc<SwappableCert>, interval: Duration) {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let (cert, key) = match self.read().await {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "reading webhook certificate files");
                    continue;
                }
            };
            let served = target.current();
            let on_disk = CertificateDer::pem_slice_iter(&cert).next().and_then(Result::ok);
            let served_first = served.as_ref().and_then(|s| s.cert.first());
            if on_disk.is_some() && on_disk.as_ref() == served_first {
                continue;
            }
            match target.set_pem(&cert, &key) {
                Ok(()) => {
                    tracing::info!(dir = %self.dir.display(), "webhook certificate reloaded from files")
                }
                Err(e) => {
                    tracing::warn!(error = %e, dir = %self.dir.display(), "webhook certificate files not loaded")
                }
            }
        }
    }
}
