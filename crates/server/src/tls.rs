//! Redis's TLS: RESP on `tls-port` (and memcached's protocols with
//! `--memcached-tls`), with the certificate, key and client
//! authentication Redis's `tls-*` settings name (rustls, PEM files), and
//! the link to a master over TLS (`tls-replication`).
//!
//! The contexts are built when the server starts and again when CONFIG
//! SET changes one of their settings (a renewed certificate is loaded
//! without a restart, as in Redis); a context that does not build leaves
//! the old one serving and the setting as it was. rustls has no OpenSSL
//! cipher strings and no DHE: `tls-ciphers`, `tls-ciphersuites` and
//! `tls-dh-params-file` keep their defaults (`crate::redis_configs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, ServerConfig, SignatureScheme,
    SupportedProtocolVersion,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::redis_configs::Store;

/// A link to a master over TLS.
pub type ClientTls = tokio_rustls::client::TlsStream<TcpStream>;

/// The settings the contexts are built from: CONFIG SET of one rebuilds
/// them.
pub const CONTEXT_SETTINGS: [&str; 12] = [
    "tls-cert-file",
    "tls-key-file",
    "tls-ca-cert-file",
    "tls-ca-cert-dir",
    "tls-auth-clients",
    "tls-protocols",
    "tls-prefer-server-ciphers",
    "tls-session-caching",
    "tls-session-cache-size",
    "tls-replication",
    "tls-client-cert-file",
    "tls-client-key-file",
];

/// How long a client has to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The contexts TLS clients are accepted with (None: no `tls-port` nor
/// `--memcached-tls`) and the link to a master connects with (None:
/// `tls-replication no`).
#[derive(Default)]
pub struct Tls {
    acceptor: RwLock<Option<TlsAcceptor>>,
    connector: RwLock<Option<TlsConnector>>,
}

impl Tls {
    pub fn acceptor(&self) -> Option<TlsAcceptor> {
        self.acceptor.read().clone()
    }

    pub fn connector(&self) -> Option<TlsConnector> {
        self.connector.read().clone()
    }

    /// Builds the contexts from `params`, the server's if `serving` (a
    /// `tls-port`, or memcached's port over TLS), the link's if `tls-replication` is yes, and puts both
    /// in use; on an error neither changes.
    pub fn configure(&self, params: &Store, serving: bool) -> Result<(), String> {
        let value = |name: &str| params.value(name);
        let acceptor = match serving {
            true => Some(TlsAcceptor::from(Arc::new(server_config(&value)?))),
            false => None,
        };
        let connector = match value("tls-replication").as_str() {
            "yes" => Some(TlsConnector::from(Arc::new(client_config(&value)?))),
            _ => None,
        };
        *self.acceptor.write() = acceptor;
        *self.connector.write() = connector;
        Ok(())
    }
}

/// A client's handshake, on the I/O thread that then serves it.
pub async fn handshake(acceptor: TlsAcceptor, stream: TcpStream) -> std::io::Result<TlsStream<TcpStream>> {
    in_time(acceptor.accept(stream)).await
}

/// The link to a master at `host`, over TLS.
pub async fn connect(connector: TlsConnector, host: &str, stream: TcpStream) -> std::io::Result<ClientTls> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{host}: {e}")))?;
    in_time(connector.connect(name, stream)).await
}

/// A handshake, or an error once `HANDSHAKE_TIMEOUT` passes.
async fn in_time<T>(handshake: impl std::future::Future<Output = std::io::Result<T>>) -> std::io::Result<T> {
    tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake)
        .await
        .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "TLS handshake timed out")))
}

/// The client side's configuration: the master's certificate must chain
/// to the CAs of `tls-ca-cert-file` / `-dir`; the client certificate is
/// `tls-client-cert-file`'s, else `tls-cert-file`'s, as Redis's.
fn client_config(value: &dyn Fn(&str) -> String) -> Result<ClientConfig, String> {
    let roots = trusted_roots(&value("tls-ca-cert-file"), &value("tls-ca-cert-dir"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| e.to_string())?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&protocols(&value("tls-protocols"))?)
        .map_err(|e| e.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)));
    let (cert_file, key_file) = match value("tls-client-cert-file") {
        file if file.is_empty() => (value("tls-cert-file"), value("tls-key-file")),
        file => (file, value("tls-client-key-file")),
    };
    if cert_file.is_empty() {
        return Ok(builder.with_no_client_auth());
    }
    let certs = read_certs(Path::new(&cert_file))?;
    let key = PrivateKeyDer::from_pem_file(&key_file)
        .map_err(|e| format!("tls-client-key-file {key_file}: no private key read: {e}"))?;
    builder.with_client_auth_cert(certs, key).map_err(|e| format!("{cert_file} with {key_file}: {e}"))
}

/// A master's certificate checked as Redis (OpenSSL without a host name
/// set) checks it: the chain to a trusted CA, its dates and signatures,
/// not the name the replica dialled.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
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

/// rustls's configuration as Redis's settings (`value` gives each one's
/// text) ask for it.
fn server_config(value: &dyn Fn(&str) -> String) -> Result<ServerConfig, String> {
    let (cert_file, key_file) = (value("tls-cert-file"), value("tls-key-file"));
    if cert_file.is_empty() || key_file.is_empty() {
        return Err("tls-cert-file and tls-key-file must name the server's certificate and key".into());
    }
    let certs = read_certs(Path::new(&cert_file))?;
    let key = PrivateKeyDer::from_pem_file(&key_file)
        .map_err(|e| format!("tls-key-file {key_file}: no private key read: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&protocols(&value("tls-protocols"))?)
        .map_err(|e| e.to_string())?;
    let auth = value("tls-auth-clients");
    let builder = match auth.as_str() {
        "no" => builder.with_no_client_auth(),
        _ => {
            let roots = trusted_roots(&value("tls-ca-cert-file"), &value("tls-ca-cert-dir"))?;
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match auth.as_str() {
                "optional" => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("tls-cert-file {cert_file} with tls-key-file {key_file}: {e}"))?;
    config.ignore_client_order = value("tls-prefer-server-ciphers") == "yes";
    config.session_storage = match value("tls-session-caching").as_str() {
        "no" => Arc::new(NoServerSessionStorage {}),
        _ => ServerSessionMemoryCache::new(value("tls-session-cache-size").parse().unwrap_or(20480).max(1)),
    };
    Ok(config)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{shown}: {e}"))?;
    match certs.is_empty() {
        true => Err(format!("{shown}: no certificate in it")),
        false => Ok(certs),
    }
}

/// The CAs certificates must chain to (clients', and a master's): those
/// of the file and of every file in the directory (as OpenSSL's hashed
/// directory holds them).
fn trusted_roots(file: &str, dir: &str) -> Result<RootCertStore, String> {
    if file.is_empty() && dir.is_empty() {
        // Redis's words for it.
        return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, \
                    tls-replication or tls-auth-clients are enabled!"
            .into());
    }
    let mut paths = Vec::new();
    if !file.is_empty() {
        paths.push(std::path::PathBuf::from(file));
    }
    if !dir.is_empty() {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("tls-ca-cert-dir {dir}: {e}"))?;
        for entry in entries {
            let path = entry.map_err(|e| format!("tls-ca-cert-dir {dir}: {e}"))?.path();
            if path.is_file() {
                paths.push(path);
            }
        }
    }
    let mut roots = RootCertStore::empty();
    for path in paths {
        for cert in read_certs(&path)? {
            roots.add(cert).map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(roots)
}

/// `tls-protocols` (empty: TLSv1.2 and TLSv1.3, as Redis's default).
fn protocols(text: &str) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    if text.trim().is_empty() {
        return Ok(vec![&rustls::version::TLS12, &rustls::version::TLS13]);
    }
    text.split_whitespace()
        .map(|name| match name.to_ascii_lowercase().as_str() {
            "tlsv1.2" => Ok(&rustls::version::TLS12),
            "tlsv1.3" => Ok(&rustls::version::TLS13),
            "tlsv1" | "tlsv1.1" => {
                Err(format!("tls-protocols: ScaledKV's TLS (rustls) offers only TLSv1.2 and TLSv1.3, not {name}"))
            }
            _ => Err(format!("tls-protocols: {name} is not a protocol (TLSv1.2, TLSv1.3)")),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_read_as_redis_names_them() {
        assert_eq!(protocols("").unwrap().len(), 2);
        let only = protocols("TLSv1.3").unwrap();
        assert!(only.len() == 1 && only[0].version == rustls::ProtocolVersion::TLSv1_3);
        assert!(protocols("tlsv1.2 TLSv1.3").is_ok());
        assert!(protocols("TLSv1.1").unwrap_err().contains("only TLSv1.2 and TLSv1.3"));
        assert!(protocols("SSLv3").unwrap_err().contains("not a protocol"));
    }

    #[test]
    fn a_context_needs_a_certificate_a_key_and_for_client_auth_a_ca() {
        let dir = tempfile::tempdir().unwrap();
        let issued = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, issued.cert.pem()).unwrap();
        std::fs::write(&key, issued.key_pair.serialize_pem()).unwrap();
        let settings = |pairs: &[(&str, String)]| {
            let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
            move |name: &str| {
                let default = crate::redis_configs::find(name).unwrap().default.clone();
                pairs.iter().find(|(k, _)| k == name).map_or(default, |(_, v)| v.clone())
            }
        };
        let path = |p: &std::path::Path| p.display().to_string();
        let error = server_config(&settings(&[])).unwrap_err();
        assert!(error.contains("tls-cert-file and tls-key-file"), "{error}");
        let files = [("tls-cert-file", path(&cert)), ("tls-key-file", path(&key))];
        let error = server_config(&settings(&files)).unwrap_err();
        assert!(error.contains("tls-ca-cert-file or tls-ca-cert-dir must be specified"), "{error}");
        let no_auth = [files[0].clone(), files[1].clone(), ("tls-auth-clients", "no".into())];
        server_config(&settings(&no_auth)).unwrap();
        let with_ca = [files[0].clone(), files[1].clone(), ("tls-ca-cert-file", path(&cert))];
        server_config(&settings(&with_ca)).unwrap();
        let with_dir = [files[0].clone(), files[1].clone(), ("tls-ca-cert-dir", path(dir.path()))];
        // The directory holds the key too: not a certificate, refused.
        assert!(server_config(&settings(&with_dir)).unwrap_err().contains("no certificate"));
        std::fs::write(&key, "not a key").unwrap();
        let error = server_config(&settings(&no_auth)).unwrap_err();
        assert!(error.contains("no private key"), "{error}");
    }
}
