//! HTTPS end to end: `inferscope sim --tls-cert --tls-key` serves a certificate made here
//! (rcgen: a test CA and a leaf for 127.0.0.1 and localhost), and `inferscope stress` loads it
//! over `https://`: trusted through `--ca-file`; refused, request by request, as `tls` errors
//! without it; accepted, with a loud warning, under `--insecure`. The `/metrics` scraper reads
//! the same endpoint over TLS. Loopback only; no root needed.

use crate::sim_process;

use std::{
    ffi::OsStr,
    path::{Path, PathBuf},
};

use sim_process::SimProcess;

use inferscope::{
    measure::report::StressReport,
    scrape::{ScrapeConfig, ScrapeError, Scraper},
    tls::TlsOptions,
};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};

/// A test CA and a server certificate it signed (`ca.pem`, `server.pem`, `server.key`), and
/// an unrelated CA (`other.pem`) that stands in for the system's roots, so that the tests do
/// not depend on what the machine trusts.
struct Pki {
    dir: tempfile::TempDir,
}

/// A self-signed CA: its parameters, its certificate and its key.
fn ca(name: &str) -> (CertificateParams, rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).unwrap();
    (params, cert, key)
}

impl Pki {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (params, ca_cert, ca_key) = ca("inferscope test CA");
        let (_, other, _) = ca("some other CA");
        std::fs::write(dir.path().join("other.pem"), other.pem()).unwrap();
        let issuer = Issuer::new(params, ca_key);
        let key = KeyPair::generate().unwrap();
        let mut leaf =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
        leaf.distinguished_name
            .push(DnType::CommonName, "inferscope sim");
        let cert = leaf.signed_by(&key, &issuer).unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
        std::fs::write(dir.path().join("server.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("server.key"), key.serialize_pem()).unwrap();
        Pki { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// `inferscope sim` over TLS on an ephemeral loopback port, with fixed timing: exact token
/// times and next to no CPU, on a small test machine.
fn tls_sim(pki: &Pki) -> SimProcess {
    let (cert, key) = (pki.path("server.pem"), pki.path("server.key"));
    let sim = SimProcess::start([
        OsStr::new("--corpus-size"),
        OsStr::new("50"),
        OsStr::new("--ttft-ms"),
        OsStr::new("5"),
        OsStr::new("--itl-ms"),
        OsStr::new("2"),
        OsStr::new("--tls-cert"),
        cert.as_os_str(),
        OsStr::new("--tls-key"),
        key.as_os_str(),
    ]);
    assert!(sim.url.starts_with("https://"), "{}", sim.banner);
    sim
}

/// `inferscope stress` against `target` for 2 s at 10/s with `extra` flags: (exit code,
/// stderr, report).
fn stress(dir: &Path, target: &str, extra: &[&str]) -> (Option<i32>, String, StressReport) {
    let out_path = dir.join(format!("report-{}.json", extra.join("_").replace('/', "")));
    let mut cmd = crate::cli::inferscope();
    cmd.args(["stress", "--target", target, "--duration", "2s", "--quiet"])
        .args(["--max-tokens", "8", "--timeout", "10s", "--out"])
        .arg(&out_path)
        .args(extra)
        // The "system" roots: a CA that did not sign the sim's certificate.
        .env("SSL_CERT_FILE", dir.join("other.pem"));
    crate::cli::stress_report(&mut cmd, &out_path)
}

fn assert_clean(r: &StressReport, stderr: &str) {
    let p = &r.phases[0];
    assert!(p.counts.finished >= 10, "{:?}\n{stderr}", p.counts);
    assert!(p.counts.errors.is_empty(), "{:?}\n{stderr}", p.counts);
    assert_eq!(p.counts.ok, p.counts.finished);
    assert!(
        p.output_tokens >= p.counts.ok * 8,
        "real tokens: {}",
        p.output_tokens
    );
}

#[test]
fn https_targets_are_trusted_refused_or_accepted_loudly() {
    let pki = Pki::new();
    let sim = tls_sim(&pki);
    let ca = pki.path("ca.pem");
    let ca = ca.to_str().unwrap();
    let dir = pki.dir.path();

    // (a) The test CA is trusted: no error, real tokens, and the model found over TLS.
    let (code, err, r) = stress(dir, &sim.url, &["--rate", "10", "--ca-file", ca]);
    assert_eq!(code, Some(0), "{err}");
    assert_clean(&r, &err);
    assert!(
        err.contains("no model given; using \"inferscope-sim\""),
        "{err}"
    );
    // HTTP/1.1 keep-alive over TLS: a handful of connections carry every request.
    let conns: std::collections::BTreeSet<_> =
        r.records.iter().filter_map(|x| x.local_addr).collect();
    assert!(
        !conns.is_empty() && conns.len() <= 4,
        "{} connections for {} requests",
        conns.len(),
        r.records.len()
    );

    // Closed loop (one connection per user) and the host name from the URL (SNI `localhost`).
    let by_name = sim.url.replace("127.0.0.1", "localhost");
    let (code, err, r) = stress(dir, &by_name, &["--connections", "2", "--ca-file", ca]);
    assert_eq!(code, Some(0), "{err}");
    assert_clean(&r, &err);

    // (b) Not trusted: every request is a `tls` error, said in one line with what to do, and
    // the run fails.
    let (code, err, r) = stress(dir, &sim.url, &["--rate", "10"]);
    assert_eq!(code, Some(1), "{err}");
    let p = &r.phases[0];
    assert!(p.counts.finished >= 10, "{:?}", p.counts);
    assert_eq!(p.counts.ok, 0);
    assert_eq!(
        p.counts.errors.get("tls").copied(),
        Some(p.counts.finished),
        "{:?}",
        p.counts
    );
    let line = err
        .lines()
        .find(|l| l.contains("failed with `tls` errors"))
        .unwrap_or_else(|| panic!("no tls line in {err}"));
    assert!(line.contains("TLS handshake with 127.0.0.1:"), "{line}");
    assert!(line.contains("UnknownIssuer"), "{line}");
    assert!(line.contains("pass --ca-file PEM"), "{line}");
    assert!(err.contains("not one request succeeded"), "{err}");
    let msg = r.records[0].error_message.as_deref().unwrap();
    assert!(msg.starts_with("TLS handshake with"), "{msg}");

    // (c) --insecure: works, and says loudly that nothing is verified.
    let (code, err, r) = stress(dir, &sim.url, &["--rate", "10", "--insecure"]);
    assert_eq!(code, Some(0), "{err}");
    assert_clean(&r, &err);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("WARNING")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("--insecure: TLS certificates are NOT verified"),
        "{err}"
    );
}

/// A self-signed certificate made the usual way (`openssl req -x509 -newkey rsa:2048 -nodes
/// -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1`): basicConstraints `CA:TRUE`, and
/// the same certificate given with `--ca-file`. rustls refuses a CA as an end entity; the line
/// says so and what to do, never a bare rustls error.
#[test]
fn an_openssl_default_self_signed_certificate_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    std::fs::write(dir.path().join("other.pem"), ca("some other CA").1.pem()).unwrap();
    let sim = SimProcess::start([
        OsStr::new("--corpus-size"),
        OsStr::new("50"),
        OsStr::new("--tls-cert"),
        cert_path.as_os_str(),
        OsStr::new("--tls-key"),
        key_path.as_os_str(),
    ]);
    let ca = cert_path.to_str().unwrap();
    let (code, err, r) = stress(dir.path(), &sim.url, &["--rate", "10", "--ca-file", ca]);
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(r.phases[0].counts.ok, 0, "{:?}", r.phases[0].counts);
    let line = err
        .lines()
        .find(|l| l.contains("failed with `tls` errors"))
        .unwrap_or_else(|| panic!("no tls line in {err}"));
    assert!(line.contains("CA:FALSE"), "{line}");
    assert!(line.contains("--insecure"), "{line}");
}

#[test]
fn bad_tls_files_are_one_line_errors() {
    let pki = Pki::new();
    let missing = pki.path("missing.pem");
    let out = crate::cli::inferscope()
        .args(["stress", "--target", "https://127.0.0.1:1", "--rate", "1"])
        .args(["--duration", "1s", "--ca-file"])
        .arg(&missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("inferscope: --ca-file "), "{err}");
    assert!(err.contains("missing.pem"), "{err}");

    // The sim refuses a key that is not a key before it takes the port.
    let out = crate::cli::inferscope()
        .args(["sim", "--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(pki.path("server.pem"))
        .arg("--tls-key")
        .arg(pki.path("server.pem"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--tls-key"), "{err}");
    assert!(err.contains("no PRIVATE KEY block"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scraper_reads_https_metrics() {
    let pki = Pki::new();
    let server =
        inferscope::tls::server::server_config(&pki.path("server.pem"), &pki.path("server.key"))
            .unwrap();
    let mut cfg = inferscope::sim::profile("healthy").unwrap();
    cfg.vector.corpus_size = 10;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let sim = inferscope::sim::start_tls(cfg, l, server).await.unwrap();
    assert!(sim.url().starts_with("https://"));

    let mut config = ScrapeConfig::new(sim.url());
    config.tls = TlsOptions {
        ca_file: Some(pki.path("ca.pem")),
        insecure: false,
    };
    let exposition = Scraper::new(config).unwrap().fetch().await.unwrap();
    assert!(exposition.sample_count() > 0);

    // Trusting another CA only: one line that says what to do.
    let mut config = ScrapeConfig::new(sim.url());
    config.tls.ca_file = Some(pki.path("other.pem"));
    let e = Scraper::new(config).unwrap().fetch().await.unwrap_err();
    assert!(matches!(e, ScrapeError::Tls { .. }), "{e:?}");
    let e = e.to_string();
    assert!(e.contains("/metrics: TLS handshake with 127.0.0.1:"), "{e}");
    assert!(e.contains("--ca-file"), "{e}");
    sim.shutdown().await.unwrap();
}
