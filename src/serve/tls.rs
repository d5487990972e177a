//! HTTPS for `serve --tls-cert FILE --tls-key FILE`: the certificate chain
//! and key read once at start (PEM), a rustls server config with ring's
//! primitives, and the handshake of each connection, bounded in time so a
//! client that stalls in it holds nothing but its own task.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{self, ServerConfig};

use crate::error::{Error, Result};

/// How long a client has to finish its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// A server's TLS settings.
#[derive(Clone)]
pub(super) struct Tls(TlsAcceptor);

/// Reads the chain and key, and checks that they go together.
pub(super) fn config(cert: &Path, key: &Path) -> Result<Tls> {
    let bad = |path: &Path| {
        let path = path.to_owned();
        move |e: &dyn std::fmt::Display| Error::Tls {
            path,
            message: e.to_string(),
        }
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(std::iter::Iterator::collect::<std::result::Result<_, _>>)
        .map_err(|e| bad(cert)(&e))?;
    if chain.is_empty() {
        return Err(bad(cert)(&"no certificate in it (a PEM `CERTIFICATE` block)"));
    }
    let secret = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key)(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(cert)(&e))?
        .with_no_client_auth()
        .with_single_cert(chain, secret)
        .map_err(|e| bad(key)(&e))?;
    Ok(Tls(TlsAcceptor::from(Arc::new(config))))
}

impl Tls {
    /// The connection's handshake; `None` when it fails or stalls.
    pub(super) async fn accept(
        &self,
        stream: TcpStream,
    ) -> Option<tokio_rustls::server::TlsStream<TcpStream>> {
        match tokio::time::timeout(HANDSHAKE, self.0.accept(stream)).await {
            Ok(Ok(s)) => Some(s),
            Ok(Err(e)) => {
                tracing::debug!("TLS handshake failed: {e}");
                None
            }
            Err(_) => {
                tracing::debug!("TLS handshake took longer than {HANDSHAKE:?}");
                None
            }
        }
    }
}
