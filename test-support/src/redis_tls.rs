//! A private `redis-server` that also listens with TLS, on a certificate made for the test
//! by the `openssl` CLI: a throw-away CA and a server certificate for 127.0.0.1 and
//! localhost. Clients trust the CA through `SSL_CERT_FILE`, which is how rustls with the
//! system's roots (the workspace's TLS stack) is pointed at a private CA.

use std::path::{Path, PathBuf};
use std::process::Command;

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

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the openssl CLI must be installed (see deploy/local/lib.sh)");
    assert!(
        out.status.success(),
        "openssl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn make_certificates(dir: &Path) {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend(["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"]);
    ca.extend(["-subj", "/CN=flashgate test CA"]);
    openssl(dir, &ca);
    let mut csr = vec!["req"];
    csr.extend(ec);
    csr.extend(["-keyout", "server.key", "-out", "server.csr"]);
    csr.extend(["-subj", "/CN=localhost"]);
    openssl(dir, &csr);
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .expect("write ext.cnf");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.crt",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
}
