//! Redis's TLS: clients on `tls-port` with certificates from a CA made
//! here (rcgen), through rustls and through redis-cli's OpenSSL.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use common::{encode, request, Server};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A CA, a server certificate it signed (localhost, 127.0.0.1) and a
/// client's, as PEM files in `dir`.
struct Certs {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn make_certs(dir: &Path) -> Certs {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(DnType::CommonName, "ScaledKV test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issue = |names: Vec<String>| {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(names).unwrap().signed_by(&key, &ca, &ca_key).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = issue(vec!["localhost".into(), "127.0.0.1".into()]);
    let (client_cert, client_key) = issue(vec!["client".into()]);
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    Certs {
        ca: write("ca.pem", &ca.pem()),
        server_cert: write("server.pem", &server_cert),
        server_key: write("server.key", &server_key),
        client_cert: write("client.pem", &client_cert),
        client_key: write("client.key", &client_key),
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

type TlsClient = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A rustls client trusting the test CA, presenting the client
/// certificate if `with_cert`.
fn tls_connect(port: u16, certs: &Certs, with_cert: bool) -> TlsClient {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(&certs.ca).unwrap()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match with_cert {
        true => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(&certs.client_cert).unwrap()],
                PrivateKeyDer::from_pem_file(&certs.client_key).unwrap(),
            )
            .unwrap(),
        false => builder.with_no_client_auth(),
    };
    let name = ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    rustls::StreamOwned::new(connection, tcp)
}

/// A request over TLS: its reply, or None if the server closed or
/// refused the connection.
fn try_request(stream: &mut TlsClient, args: &[&[u8]]) -> Option<Vec<u8>> {
    stream.write_all(&encode(args)).ok()?;
    stream.flush().ok()?;
    let mut byte = [0u8; 1];
    let mut reply = Vec::new();
    // Replies here are one line: "+PONG", "$5" and its line, "-ERR ...".
    while !(reply.ends_with(b"\r\n") && (reply[0] != b'$' || reply.iter().filter(|&&b| b == b'\n').count() == 2)) {
        match stream.read(&mut byte) {
            Ok(1) => reply.push(byte[0]),
            _ => return None,
        }
    }
    Some(reply)
}

/// The server's certificate, key and CA as flags (ScaledKV's and
/// redis-server's alike).
fn certificate_files(certs: &Certs) -> [&str; 6] {
    [
        "--tls-cert-file",
        path(&certs.server_cert),
        "--tls-key-file",
        path(&certs.server_key),
        "--tls-ca-cert-file",
        path(&certs.ca),
    ]
}

fn tls_settings<'a>(tls_port: &'a str, certs: &'a Certs) -> Vec<&'a str> {
    let mut settings = vec!["--tls-port", tls_port];
    settings.extend(certificate_files(certs));
    settings
}

#[test]
fn a_tls_port_serves_clients_with_certificates_and_config_set_reloads_them() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path());
    let tls_port = common::free_port();
    let tls_text = tls_port.to_string();
    let server = Server::start_at(&dir.path().join("db"), common::free_port(), &tls_settings(&tls_text, &certs));
    let mut plain = server.connect();
    // A client with a certificate the CA signed.
    let mut client = tls_connect(tls_port, &certs, true);
    assert_eq!(try_request(&mut client, &[b"PING"]).unwrap(), b"+PONG\r\n");
    assert_eq!(try_request(&mut client, &[b"SET", b"k", b"over TLS"]).unwrap(), b"+OK\r\n");
    assert_eq!(request(&mut plain, &encode(&[b"GET", b"k"])), b"$8\r\nover TLS\r\n", "one keyspace");
    // Without one: refused, as tls-auth-clients yes asks.
    let mut anonymous = tls_connect(tls_port, &certs, false);
    assert_eq!(try_request(&mut anonymous, &[b"PING"]), None);
    // CONFIG SET changes the context for new clients.
    let set = |plain: &mut TcpStream, name: &str, value: &str| {
        String::from_utf8(request(plain, &encode(&[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()]))).unwrap()
    };
    assert_eq!(set(&mut plain, "tls-auth-clients", "optional"), "+OK\r\n");
    let mut anonymous = tls_connect(tls_port, &certs, false);
    assert_eq!(try_request(&mut anonymous, &[b"GET", b"k"]).unwrap(), b"$8\r\nover TLS\r\n");
    // A context that does not build leaves the old one and the setting.
    let error = set(&mut plain, "tls-cert-file", "/nonexistent.pem");
    assert!(error.starts_with("-ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - Unable to update TLS configuration"), "{error}");
    let got = request(&mut plain, &encode(&[b"CONFIG", b"GET", b"tls-cert-file"]));
    assert!(String::from_utf8(got).unwrap().contains(path(&certs.server_cert)));
    let mut again = tls_connect(tls_port, &certs, true);
    assert_eq!(try_request(&mut again, &[b"PING"]).unwrap(), b"+PONG\r\n", "still serving");
    // A client that closes its TLS session politely while it waits in
    // BLPOP (close_notify, then the end of the stream) takes nothing.
    again.write_all(&encode(&[b"BLPOP", b"queue", b"0"])).unwrap();
    again.flush().unwrap();
    server.wait_for_blocked_clients(1);
    again.conn.send_close_notify();
    again.flush().unwrap();
    drop(again);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(request(&mut plain, &encode(&[b"RPUSH", b"queue", b"kept"])), b":1\r\n");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(request(&mut plain, &encode(&[b"LLEN", b"queue"])), b":1\r\n");
    // What ScaledKV's TLS does not do is refused saying so.
    let error = set(&mut plain, "tls-port", &common::free_port().to_string());
    assert!(error.contains("restart it to move the port"), "{error}");
    assert_eq!(set(&mut plain, "tls-port", &tls_text), "+OK\r\n", "the port it has");
    let error = set(&mut plain, "tls-ciphers", "HIGH");
    assert!(error.contains("reads no OpenSSL cipher lists"), "{error}");
    assert_eq!(set(&mut plain, "tls-auth-clients", "yes"), "+OK\r\n");
    // OpenSSL's side: redis-cli over TLS with the client certificate.
    match std::process::Command::new("redis-cli")
        .args(["--tls", "--cacert", path(&certs.ca), "--cert", path(&certs.client_cert)])
        .args(["--key", path(&certs.client_key), "-p", &tls_text, "GET", "k"])
        .output()
    {
        Ok(output) => assert_eq!(String::from_utf8_lossy(&output.stdout), "over TLS\n", "{output:?}"),
        Err(_) => eprintln!("NOTICE: redis-cli not installed: the OpenSSL client's check skipped"),
    }
}

/// A TLS port beside `--port 0` is the only TCP port, as Redis's `port 0`;
/// a TLS port without a CA while clients must authenticate stops the
/// start with Redis's words.
#[test]
fn a_tls_port_alone_and_a_tls_port_without_a_ca() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path());
    let tls_port = common::free_port();
    let tls_text = tls_port.to_string();
    let server = Server::start(&dir.path().join("db"), &tls_settings(&tls_text, &certs));
    assert_eq!(server.port, 0, "no plain port");
    let mut client = tls_connect(tls_port, &certs, true);
    assert_eq!(try_request(&mut client, &[b"PING"]).unwrap(), b"+PONG\r\n");
    drop(server);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .args(["--port", "0", "--tls-port", &tls_text, "--tls-cert-file", path(&certs.server_cert)])
        .args(["--tls-key-file", path(&certs.server_key), "--dir"])
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("Failed to configure TLS: Either tls-ca-cert-file or tls-ca-cert-dir"), "{stderr}");
}

/// Polls `stream` until GET `key` gives `want` (10 s at most).
fn wait_for_value(stream: &mut TcpStream, key: &[u8], want: &[u8]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let got = request(stream, &encode(&[b"GET", key]));
        if got == want {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "GET {key:?} stayed {:?}", String::from_utf8_lossy(&got));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tls-replication yes`: ScaledKV follows a Redis master on its TLS
/// port, and a Redis replica follows ScaledKV's, each presenting its
/// certificate; a full sync, then the command stream. Skipped with a
/// notice without redis-server.
#[test]
fn replication_over_tls_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path());
    let redis_tls = common::free_port().to_string();
    let server_files = certificate_files(&certs);
    let Some(redis) = common::RedisServer::start_with(&tls_settings(&redis_tls, &certs)) else { return };
    let mut on_redis = TcpStream::connect(("127.0.0.1", redis.port)).unwrap();
    on_redis.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(request(&mut on_redis, &encode(&[b"SET", b"before", b"full sync"])), b"+OK\r\n");
    // ScaledKV, a replica over TLS.
    let master = format!("127.0.0.1 {redis_tls}");
    let mut args = vec!["--tls-replication", "yes", "--replicaof", &master];
    args.extend(server_files);
    let replica = Server::start(&dir.path().join("replica"), &args);
    let mut on_replica = replica.connect();
    wait_for_value(&mut on_replica, b"before", b"$9\r\nfull sync\r\n");
    assert_eq!(request(&mut on_redis, &encode(&[b"SET", b"after", b"streamed"])), b"+OK\r\n");
    wait_for_value(&mut on_replica, b"after", b"$8\r\nstreamed\r\n");
    drop((replica, redis));
    // A Redis replica of ScaledKV over TLS.
    let tls_port = common::free_port().to_string();
    let master = Server::start_at(&dir.path().join("master"), common::free_port(), &tls_settings(&tls_port, &certs));
    let mut on_master = master.connect();
    assert_eq!(request(&mut on_master, &encode(&[b"SET", b"before", b"full sync"])), b"+OK\r\n");
    let mut extra = vec!["--tls-replication", "yes", "--replicaof", "127.0.0.1", &tls_port, "--tls-port", "0"];
    extra.extend(server_files);
    let redis = common::RedisServer::start_with(&extra).expect("it ran above");
    let mut on_redis = TcpStream::connect(("127.0.0.1", redis.port)).unwrap();
    on_redis.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    wait_for_value(&mut on_redis, b"before", b"$9\r\nfull sync\r\n");
    assert_eq!(request(&mut on_master, &encode(&[b"SET", b"after", b"streamed"])), b"+OK\r\n");
    wait_for_value(&mut on_redis, b"after", b"$8\r\nstreamed\r\n");
}

/// `--memcached-tls yes`: memcached's port speaks TLS with the context of
/// Redis's settings (here no client certificate, memcached's default),
/// and `stats settings` says so as memcached does.
#[test]
fn the_memcached_port_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path());
    let mut args = vec!["--memcached-port", "0", "--memcached-tls", "yes", "--tls-auth-clients", "no"];
    args.extend(certificate_files(&certs));
    let server = Server::start_at(&dir.path().join("db"), common::free_port(), &args);
    let port = common::memcached_port(&server, None);
    let mut client = tls_connect(port, &certs, false);
    client.write_all(b"set k 0 0 2\r\nhi\r\nget k\r\n").unwrap();
    let got = common::read_memcached_until(&mut client, b"END\r\n").unwrap();
    assert_eq!(got, b"STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n");
    client.write_all(b"stats settings\r\n").unwrap();
    let settings = String::from_utf8(common::read_memcached_until(&mut client, b"END\r\n").unwrap()).unwrap();
    assert!(settings.contains("STAT ssl_enabled yes\r\n"), "{settings}");
    assert!(settings.contains("STAT ssl_verify_mode 0\r\n"), "{settings}");
    assert!(settings.contains(&format!("STAT ssl_chain_cert {}\r\n", path(&certs.server_cert))), "{settings}");
    // Plain text on that port gets nothing back but a closed connection.
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"get k\r\n").unwrap();
    let mut buf = [0u8; 64];
    assert!(!matches!(plain.read(&mut buf), Ok(n) if n > 0 && buf[..n].starts_with(b"VALUE")));
    // Without a port to speak it on, the start stops.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .args(["--port", "0", "--memcached-tls", "yes", "--dir"])
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no memcached-port"));
}

/// TLS's settings in the TOML file, by Redis's names; CONFIG REWRITE
/// keeps what CONFIG SET changed across a restart.
#[test]
fn tls_settings_in_the_toml_file_and_config_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let certs = make_certs(dir.path());
    let tls_port = common::free_port();
    let file = dir.path().join("scaledkv.toml");
    let toml = format!(
        "tls-port = {tls_port}\ntls-cert-file = {:?}\ntls-key-file = {:?}\ntls-ca-cert-file = {:?}\n",
        path(&certs.server_cert),
        path(&certs.server_key),
        path(&certs.ca)
    );
    std::fs::write(&file, toml).unwrap();
    let data = dir.path().join("db");
    let mut server = Server::start_at(&data, common::free_port(), &["--config", path(&file)]);
    let mut client = tls_connect(tls_port, &certs, true);
    assert_eq!(try_request(&mut client, &[b"PING"]).unwrap(), b"+PONG\r\n");
    let mut plain = server.connect();
    let set = encode(&[b"CONFIG", b"SET", b"tls-auth-clients", b"optional"]);
    assert_eq!(request(&mut plain, &set), b"+OK\r\n");
    assert_eq!(request(&mut plain, &encode(&[b"CONFIG", b"REWRITE"])), b"+OK\r\n");
    let written = std::fs::read_to_string(&file).unwrap();
    assert!(written.contains("tls-auth-clients = \"optional\""), "{written}");
    assert!(written.contains(&format!("tls-port = {tls_port}")), "{written}");
    drop(plain);
    assert!(server.terminate());
    let server = Server::start_at(&data, common::free_port(), &["--config", path(&file)]);
    let mut anonymous = tls_connect(tls_port, &certs, false);
    assert_eq!(try_request(&mut anonymous, &[b"PING"]).unwrap(), b"+PONG\r\n", "optional after the restart");
    drop(server);
}
