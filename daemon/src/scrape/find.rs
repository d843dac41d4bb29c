//! Finding a server's metrics endpoint by itself: `GET /metrics` on each address the server
//! listens on, recognised by its metric families (vLLM, `SGLang`, TGI, llama.cpp). What the
//! daemon scrapes when no `--metrics-url` names one.

use std::{fmt, net::SocketAddr, time::Duration};

use super::{
    client::{ScrapeConfig, Scraper},
    mapping::{ServerKind, detect_server},
};
use crate::tls::TlsOptions;

/// The longest wait for one candidate address.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What was found on one server's listening addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// An exposition of a known server.
    Metrics {
        /// The URL that answered.
        url: String,
        /// Which server the families name.
        kind: ServerKind,
    },
    /// `/metrics` answered with Prometheus text, but of no inference server known here.
    Unrecognised {
        /// The URL that answered.
        url: String,
    },
    /// No address answered `/metrics` with Prometheus text.
    Nothing {
        /// The addresses tried.
        tried: Vec<SocketAddr>,
    },
}

impl Found {
    /// The URL to scrape, when it is one of a known server.
    #[must_use]
    pub fn url(&self) -> Option<&str> {
        match self {
            Found::Metrics { url, .. } => Some(url),
            _ => None,
        }
    }
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Found::Metrics { url, kind } => write!(f, "metrics at {url} ({kind:?})"),
            Found::Unrecognised { url } => write!(
                f,
                "{url} answers, but with no vLLM, SGLang, TGI or llama.cpp metric: give --metrics-url to scrape it anyway"
            ),
            Found::Nothing { tried } if tried.is_empty() => {
                f.write_str("no listening address the daemon can reach")
            }
            Found::Nothing { tried } => {
                let list: Vec<String> = tried.iter().map(SocketAddr::to_string).collect();
                write!(f, "no /metrics on {}", list.join(", "))
            }
        }
    }
}

/// Tries `GET http://ADDR/metrics` on each of `addrs` in turn; the first exposition of a
/// known server wins, else the first Prometheus text of any kind.
pub async fn metrics_on(addrs: &[SocketAddr], tls: &TlsOptions) -> Found {
    let mut unrecognised = None;
    for addr in addrs {
        let mut cfg = ScrapeConfig::new(format!("http://{addr}/metrics"));
        cfg.timeout = PROBE_TIMEOUT;
        cfg.body_limit = 4 << 20;
        cfg.tls = tls.clone();
        let Ok(scraper) = Scraper::new(cfg) else {
            continue;
        };
        let url = scraper.uri().to_string();
        let Ok(exp) = scraper.fetch().await else {
            continue;
        };
        if exp.families().is_empty() {
            continue;
        }
        match detect_server(&exp) {
            ServerKind::Unknown => {
                unrecognised.get_or_insert(url);
            }
            kind => return Found::Metrics { url, kind },
        }
    }
    match unrecognised {
        Some(url) => Found::Unrecognised { url },
        None => Found::Nothing {
            tried: addrs.to_vec(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn serve(body: &'static str) -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let app =
            axum::Router::new().route("/metrics", axum::routing::get(move || async move { body }));
        tokio::spawn(async move { axum::serve(l, app).await });
        addr
    }

    #[tokio::test]
    async fn the_first_known_exposition_wins_over_other_prometheus_text() {
        let other = serve("# TYPE go_goroutines gauge\ngo_goroutines 12\n").await;
        let vllm = serve(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n",
        )
        .await;
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let tls = TlsOptions::default();
        let found = metrics_on(&[closed, other, vllm], &tls).await;
        assert_eq!(
            found,
            Found::Metrics {
                url: format!("http://{vllm}/metrics"),
                kind: ServerKind::Vllm
            }
        );
        let found = metrics_on(&[closed, other], &tls).await;
        assert_eq!(found.url(), None);
        assert!(found.to_string().contains("give --metrics-url"), "{found}");
        let found = metrics_on(&[closed], &tls).await;
        assert_eq!(found.to_string(), format!("no /metrics on {closed}"));
    }
}
