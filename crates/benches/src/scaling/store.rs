//! What a backend's store keeps, read from the server itself: entries
//! (rows, documents, keys, items, files) and bytes. The names curve reads
//! it before and after taking its names, and reports the difference.

use distlock::mongodb::mongodb::bson::{Bson, Document, doc};
use distlock::redis::redis;

use crate::objectstore::ObjectStoreServer;
use crate::outcome::Outcome;
use crate::pg_stats::PgStats;
use crate::redis_peers::client_url;
use crate::target::{Server, Target};
use crate::url_kind::OBJECT_STORE;

/// One reading of what the store keeps. Either may be unknown where the
/// server does not say.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Stored {
    pub(crate) entries: Option<i64>,
    pub(crate) bytes: Option<i64>,
}

impl Stored {
    /// What was added since `earlier` (negative where the store shrank).
    pub(crate) fn since(self, earlier: Stored) -> Stored {
        let delta = |now: Option<i64>, then: Option<i64>| Some(now? - then?);
        Stored {
            entries: delta(self.entries, earlier.entries),
            bytes: delta(self.bytes, earlier.bytes),
        }
    }
}

/// What each backend's entries are, and where its figures come from, for
/// the report.
pub(crate) fn source(kind: &str) -> &'static str {
    match kind {
        "PostgreSQL" => "rows: `count(*)` of the lock table; bytes: `pg_total_relation_size`",
        "MongoDB" => {
            "documents and bytes: `collStats` of the lock collection (`count`, `storageSize`)"
        }
        "Redis" => "keys: `DBSIZE`; bytes: `used_memory` of `INFO memory`",
        "etcd" => {
            "keys: `etcd_debugging_mvcc_keys_total`; bytes: \
             `etcd_mvcc_db_total_size_in_use_in_bytes` (the member's metrics)"
        }
        "memcached" => "items and bytes: `stats` `curr_items` and `bytes`",
        "file" => "files and bytes: the lock directory's entries and their sizes",
        OBJECT_STORE => "objects and bytes: a listing of the URL's prefix (`List Blobs` on Azure)",
        _ => "not read",
    }
}

/// What `target`'s store keeps now.
pub(crate) async fn read(target: &Target) -> Outcome<Stored> {
    match &target.server {
        Server::Postgres(stats) => postgres(target, stats).await,
        Server::PostgresStatements(statements) => postgres(target, statements.stats()).await,
        Server::Mongo {
            database,
            collection,
            ..
        } => mongo(database, collection).await,
        Server::Redis(_) => redis_store(&target.url).await,
        Server::ObjectStore(server) => objects(server).await,
        Server::Etcd(Some(metrics)) => {
            let page = metrics.first_page().await?;
            Ok(Stored {
                entries: gauge(&page, "etcd_debugging_mvcc_keys_total"),
                bytes: gauge(&page, "etcd_mvcc_db_total_size_in_use_in_bytes"),
            })
        }
        Server::Memcached(backend) => {
            let stats = backend.stats().await.map_err(|e| e.to_string())?;
            let sum = |key: &str| -> Option<i64> {
                stats
                    .iter()
                    .map(|(_, stats)| {
                        stats
                            .iter()
                            .find(|(name, _)| name == key)
                            .and_then(|(_, value)| value.parse::<i64>().ok())
                    })
                    .sum()
            };
            Ok(Stored {
                entries: sum("curr_items"),
                bytes: sum("bytes"),
            })
        }
        Server::Uncounted if target.url.starts_with("file:") => file(&target.url),
        Server::Uncounted | Server::Etcd(None) => Ok(Stored::default()),
    }
}

/// The objects under an object store's prefix, and their sizes.
async fn objects(server: &ObjectStoreServer) -> Outcome<Stored> {
    use futures::TryStreamExt;
    let listed: Vec<_> = server
        .store
        .list(Some(&server.prefix))
        .try_collect()
        .await
        .map_err(|e| format!("listing {}: {e}", server.prefix))?;
    let bytes: u64 = listed.iter().map(|meta| meta.size).sum();
    Ok(Stored {
        entries: Some(listed.len() as i64),
        bytes: Some(bytes as i64),
    })
}

async fn postgres(target: &Target, stats: &PgStats) -> Outcome<Stored> {
    let config =
        distlock::postgres::PostgresConfig::parse(&target.url).map_err(|e| e.to_string())?;
    let table = format!("{}.{}", quoted(config.schema()), quoted(config.table()));
    let row = stats
        .query_one(&format!(
            "SELECT count(*), pg_total_relation_size('{}') FROM {table}",
            table.replace('\'', "''")
        ))
        .await?;
    let entries: i64 = row.try_get(0).map_err(|e| e.to_string())?;
    let bytes: i64 = row.try_get(1).map_err(|e| e.to_string())?;
    Ok(Stored {
        entries: Some(entries),
        bytes: Some(bytes),
    })
}

/// A PostgreSQL identifier, quoted.
fn quoted(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

async fn mongo(
    database: &distlock::mongodb::mongodb::Database,
    collection: &str,
) -> Outcome<Stored> {
    let number = |stats: &Document, key: &str| match stats.get(key) {
        Some(Bson::Int32(n)) => Some(i64::from(*n)),
        Some(Bson::Int64(n)) => Some(*n),
        Some(Bson::Double(n)) => Some(*n as i64),
        _ => None,
    };
    match database.run_command(doc! { "collStats": collection }).await {
        Ok(stats) => Ok(Stored {
            entries: number(&stats, "count"),
            bytes: number(&stats, "storageSize").or_else(|| number(&stats, "size")),
        }),
        // A server without collStats still counts its documents.
        Err(_) => {
            let count = database
                .collection::<Document>(collection)
                .count_documents(doc! {})
                .await
                .map_err(|e| e.to_string())?;
            Ok(Stored {
                entries: i64::try_from(count).ok(),
                bytes: None,
            })
        }
    }
}

async fn redis_store(url: &str) -> Outcome<Stored> {
    let fail = |e: redis::RedisError| format!("Redis store: {e}");
    let client = redis::Client::open(client_url(url)).map_err(fail)?;
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .map_err(fail)?;
    let keys: i64 = redis::cmd("DBSIZE")
        .query_async(&mut connection)
        .await
        .map_err(fail)?;
    let memory: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut connection)
        .await
        .map_err(fail)?;
    let bytes = memory.lines().find_map(|line| {
        line.strip_prefix("used_memory:")
            .and_then(|n| n.trim().parse().ok())
    });
    Ok(Stored {
        entries: Some(keys),
        bytes,
    })
}

fn file(url: &str) -> Outcome<Stored> {
    let config = distlock::file::FileConfig::parse(url).map_err(|e| e.to_string())?;
    let (mut entries, mut bytes) = (0, 0);
    let listing =
        std::fs::read_dir(config.dir()).map_err(|e| format!("{}: {e}", config.dir().display()))?;
    for entry in listing.flatten() {
        entries += 1;
        bytes += entry.metadata().map_or(0, |m| m.len() as i64);
    }
    Ok(Stored {
        entries: Some(entries),
        bytes: Some(bytes),
    })
}

/// The value of the unlabelled gauge `name` in a Prometheus metrics page.
fn gauge(page: &str, name: &str) -> Option<i64> {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            (series == name).then(|| value.parse::<f64>().ok().map(|v| v.round() as i64))?
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_are_read_by_their_exact_name() {
        let page = "# HELP etcd_debugging_mvcc_keys_total Total number of keys.\n\
                    etcd_debugging_mvcc_keys_total 1.2345e+04\n\
                    etcd_debugging_mvcc_keys_total_other 7\n\
                    etcd_mvcc_db_total_size_in_use_in_bytes 163840\n";
        assert_eq!(gauge(page, "etcd_debugging_mvcc_keys_total"), Some(12_345));
        assert_eq!(
            gauge(page, "etcd_mvcc_db_total_size_in_use_in_bytes"),
            Some(163_840)
        );
        assert_eq!(gauge(page, "etcd_mvcc_db_total_size_in_bytes"), None);
    }

    #[test]
    fn the_difference_is_unknown_where_either_reading_is() {
        let before = Stored {
            entries: Some(10),
            bytes: None,
        };
        let after = Stored {
            entries: Some(7),
            bytes: Some(100),
        };
        assert_eq!(
            after.since(before),
            Stored {
                entries: Some(-3),
                bytes: None
            }
        );
    }
}
