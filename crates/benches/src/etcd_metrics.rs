//! Counting what an etcd member receives, from the Prometheus metrics it
//! serves on its client port (`GET /metrics`).
//!
//! - **Requests**: `grpc_server_msg_received_total`, by gRPC method, for
//!   etcd's own services. A unary call (`Txn`, `Range`, `Lock`, …) is one
//!   message; a stream counts each message the client sends on it: a
//!   `Watch` create request, a `LeaseKeepAlive` request. Counting messages
//!   rather than calls is what makes keepalives and watches visible, since
//!   a stream's call is counted only when it ends.
//! - **Storage operations**: `etcd_mvcc_{range,put,delete}_total`, what the
//!   key-value store did, including the work etcd's own lock service does
//!   inside one `Lock` call, which no gRPC counter shows. `etcd_mvcc_txn_total`
//!   is left out: its operations are already counted one by one.
//! - **Processor time**: `process_cpu_seconds_total`, the member's own,
//!   user and system (in hundredths of a second): what its requests cost
//!   it beyond their count, the lock service's work inside `Lock` included.
//!
//! The counters are the whole member's: every client of the member counts,
//! which is why the benchmarks give each run a server of its own. For a
//! cluster, the requests are summed over its members (a client's request
//! reaches one member, which forwards writes to the leader over the peer
//! protocol, not gRPC); the storage operations are not, since every member
//! applies every write, and are left out.

use std::collections::BTreeMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::commands::Counts;
use crate::outcome::Outcome;

/// The gRPC services whose requests are counted: etcd's key-value, watch,
/// lease and lock services (not the health checks).
const COUNTED_SERVICES: [&str; 2] = ["etcdserverpb.", "v3lockpb."];

/// The store's counters that make up the storage operations.
const STORAGE_COUNTERS: [(&str, &str); 3] = [
    ("etcd_mvcc_range_total", "range"),
    ("etcd_mvcc_put_total", "put"),
    ("etcd_mvcc_delete_total", "delete"),
];

/// The metrics endpoints of the members of one etcd cluster.
#[derive(Debug, Clone)]
pub(crate) struct EtcdMetrics {
    /// `host:port` of each member's client port.
    addresses: Vec<String>,
}

/// One reading of the metrics.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sample {
    pub(crate) requests: Counts,
    /// The store's operations, for a single member only.
    pub(crate) storage: Option<Counts>,
    /// `process_cpu_seconds_total`, summed over the members.
    pub(crate) cpu_seconds: f64,
    pub(crate) version: Option<String>,
}

impl EtcdMetrics {
    /// The metrics of the members an `etcd://` URL names; `None` for
    /// `etcds://`, whose metrics need TLS.
    pub(crate) fn for_url(url: &str) -> Outcome<Option<Self>> {
        let config = distlock::etcd::EtcdConfig::parse(url).map_err(|e| e.to_string())?;
        if config.tls {
            return Ok(None);
        }
        if config.endpoints.is_empty() {
            return Err("an etcd URL without a member".to_owned());
        }
        Ok(Some(Self {
            addresses: config.endpoints,
        }))
    }

    /// Reads the metrics now: every member's requests summed, and the
    /// storage operations of a single member.
    pub(crate) async fn sample(&self) -> Outcome<Sample> {
        let mut sum = Sample::default();
        for address in &self.addresses {
            let sample = parse(&fetch(address).await?);
            sum.requests.add(&sample.requests);
            sum.cpu_seconds += sample.cpu_seconds;
            sum.version = sum.version.or(sample.version);
            sum.storage = sample.storage;
        }
        if self.addresses.len() > 1 {
            sum.storage = None;
        }
        Ok(sum)
    }

    /// The metrics page of the first member, as text: its gauges (the
    /// store's keys and size) are per member.
    pub(crate) async fn first_page(&self) -> Outcome<String> {
        let address = self.addresses.first().ok_or("etcd without a member")?;
        fetch(address).await
    }

    /// The member's version.
    pub(crate) async fn version(&self) -> Option<String> {
        self.sample().await.ok()?.version
    }
}

/// The metrics page of the member at `address`, over plain HTTP/1.0 so that
/// the member closes the connection after one unchunked reply.
async fn fetch(address: &str) -> Outcome<String> {
    let fail = |e: std::io::Error| format!("etcd metrics at {address}: {e}");
    let mut stream = TcpStream::connect(address).await.map_err(fail)?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.map_err(fail)?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).await.map_err(fail)?;
    let reply = String::from_utf8_lossy(&reply);
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .ok_or("etcd metrics: a reply without headers")?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200") {
        return Err(format!("etcd metrics: {status}"));
    }
    Ok(body.to_owned())
}

/// The requests, storage operations and version in a metrics page.
fn parse(text: &str) -> Sample {
    let mut requests = BTreeMap::new();
    let mut storage = BTreeMap::new();
    let mut version = None;
    let mut cpu_seconds = 0.0;
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (name, labels.trim_end_matches('}')),
            None => (series, ""),
        };
        // Counters past a million are printed as 1.234567e+06.
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let count = value.round() as u64;
        match name {
            "grpc_server_msg_received_total" => {
                let service = label(labels, "grpc_service").unwrap_or_default();
                if count > 0
                    && COUNTED_SERVICES.iter().any(|s| service.starts_with(s))
                    && let Some(method) = label(labels, "grpc_method")
                {
                    *requests.entry(method.to_owned()).or_default() += count;
                }
            }
            "process_cpu_seconds_total" => cpu_seconds = value,
            "etcd_server_version" => {
                version = label(labels, "server_version").map(str::to_owned);
            }
            _ => {
                if let Some((_, short)) = STORAGE_COUNTERS.iter().find(|(n, _)| *n == name) {
                    storage.insert((*short).to_owned(), count);
                }
            }
        }
    }
    Sample {
        requests: Counts(requests),
        storage: Some(Counts(storage)),
        cpu_seconds,
        version,
    }
}

/// The value of label `key` in `a="x",b="y"`.
fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == key).then(|| v.trim_matches('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_storage_and_version_are_read() {
        let text = "\
# HELP grpc_server_msg_received_total Total number of RPC stream messages received on the server.
grpc_server_msg_received_total{grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 2923
grpc_server_msg_received_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 1.234567e+06
grpc_server_msg_received_total{grpc_method=\"Watch\",grpc_service=\"grpc.health.v1.Health\",grpc_type=\"server_stream\"} 7
grpc_server_msg_received_total{grpc_method=\"Lock\",grpc_service=\"v3lockpb.Lock\",grpc_type=\"unary\"} 4
grpc_server_msg_received_total{grpc_method=\"Range\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 0
grpc_server_started_total{grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 2923
etcd_mvcc_put_total 971
etcd_mvcc_range_total 4893
etcd_mvcc_txn_total 908
etcd_server_version{server_version=\"3.4.23\"} 1
process_cpu_seconds_total 12.34
";
        let sample = parse(text);
        let expected: BTreeMap<String, u64> = [("Lock", 4), ("Txn", 2923), ("Watch", 1_234_567)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(sample.requests.0, expected);
        assert_eq!(sample.storage.map(|s| s.total()), Some(971 + 4893));
        assert_eq!(sample.version.as_deref(), Some("3.4.23"));
        assert_eq!(sample.cpu_seconds, 12.34);
    }
}
