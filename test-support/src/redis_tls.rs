//! A private `redis-server` that also listens with TLS, on a certificate made for the test
//! (`certs.rs`). Clients trust the CA through `SSL_CERT_FILE`, which is how rustls with the
//! system's roots (the workspace's TLS stack) is pointed at a private CA.

use std::path::PathBuf;

use crate::certs::make_certificates;
use crate::{free_port, RedisServer};

/// A running TLS-enabled Redis: plain port for test setup, TLS port for the code under test.
pub struct TlsRedis {
    server: RedisServer,
    tls_port: u16,
    dir: PathBuf,
}

impl TlsRedis {
    pub fn start() -> Self {
        let tls_port = free_port();
        let dir = std::env::temp_dir().join(format!("fg-tls-{}-{tls_port}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create tls temp dir");
        make_certificates(&dir);
        let path = |f: &str| dir.join(f).to_str().expect("utf-8 temp dir").to_owned();
        let server = RedisServer::start_with(&[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &path("server.crt"),
            "--tls-key-file",
            &path("server.key"),
            "--tls-ca-cert-file",
            &path("ca.crt"),
            "--tls-auth-clients",
            "no",
        ]);
        Self {
            server,
            tls_port,
            dir,
        }
    }

    /// `rediss://127.0.0.1:PORT`: the TLS listener.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }

    /// The same server's plain listener, for setup and assertions.
    pub fn server(&self) -> &RedisServer {
        &self.server
    }

    /// PEM file of the CA that signed the server's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        self.server.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
