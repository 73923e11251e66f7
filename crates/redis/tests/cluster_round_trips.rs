//! What extending leases costs each master of a Redis Cluster of the
//! test's own (three masters, nothing else talking to them), counted by
//! the masters themselves with `INFO commandstats` and `INFO stats`.
//!
//! Redis counts the commands it runs (`cmdstat_evalsha`, and the commands
//! scripts run) and the read and write events of its client connections
//! (`total_reads_processed`, `total_writes_processed`). A batch that
//! reaches a master in one read and is answered in one write is one round
//! trip; a lease extended on its own is a read and a write of its own. So
//! the test proves that one call extending N leases sends each master
//! exactly its own leases' scripts, in one request answered at once, and
//! nothing else: the same commands as the same leases extended one call
//! each, with no slot-map read and no per-lease extra. It cannot tell how
//! the bytes crossed the network below the server's reads (one `write`, or
//! several that arrived together): the server's count of reads is the
//! observable.

mod support;

use std::collections::BTreeMap;

use distlock_core::LockName;
use distlock_core::backend::BackendExt;
use distlock_core::backend::{Backend, Lease};
use distlock_redis::redis;
use redis::aio::MultiplexedConnection;

use support::cluster::{OwnCluster, names_on, query};
use support::{backend, grant_each};

/// How many leases each master serves: all different, so that a count
/// that went to the wrong master shows.
const LEASES: [usize; 3] = [2, 3, 5];

/// What a master has counted so far.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Counts {
    /// Each command's calls (`cmdstat_<command>`), but `INFO`'s, which
    /// reads them.
    calls: BTreeMap<String, u64>,
    /// Read and write events on client connections.
    reads: u64,
    writes: u64,
}

impl Counts {
    /// Asks `master`, in one `INFO` (one read, and one write after the
    /// counts are taken).
    async fn of(master: &mut MultiplexedConnection) -> Self {
        let info: String = query(master, &["INFO", "commandstats", "stats"]).await;
        let field = |name: &str| -> u64 {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or_else(|| panic!("{name} in INFO"))
                .trim()
                .parse()
                .expect("a count")
        };
        let calls = info
            .lines()
            .filter_map(|line| {
                let (command, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = stats
                    .split(',')
                    .find_map(|stat| stat.strip_prefix("calls="))?;
                Some((command.to_owned(), calls.parse().expect("calls")))
            })
            .filter(|(command, _)| command != "info")
            .collect();
        Self {
            calls,
            reads: field("total_reads_processed"),
            writes: field("total_writes_processed"),
        }
    }

    /// What happened since `before`: each command's new calls, and the new
    /// reads and writes.
    fn since(&self, before: &Self) -> (BTreeMap<String, u64>, u64, u64) {
        let calls = self
            .calls
            .iter()
            .map(|(command, calls)| {
                let was = before.calls.get(command).copied().unwrap_or(0);
                (command.clone(), calls - was)
            })
            .filter(|(_, new)| *new > 0)
            .collect();
        (
            calls,
            self.reads - before.reads,
            self.writes - before.writes,
        )
    }
}

async fn counts(masters: &mut [MultiplexedConnection]) -> Vec<Counts> {
    let mut all = Vec::new();
    for master in masters {
        all.push(Counts::of(master).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_leases_costs_each_master_one_batch_of_its_own_leases() {
    let cluster = OwnCluster::start(3, false, None, &[]).await;
    let backend = backend(&cluster.url()).await;
    let mut masters = Vec::new();
    for master in &cluster.masters {
        masters.push(master.connection().await);
    }
    let mut names: Vec<LockName> = Vec::new();
    for (master, count) in LEASES.iter().enumerate() {
        names.extend(names_on(&cluster, &backend, &mut masters[0], master, *count, "trips").await);
    }
    let leases: Vec<Lease> = grant_each(&backend, &names).await;
    // The first extension loads the script on the masters (NOSCRIPT) and
    // reads the slot map; what follows is the steady state the keeper
    // lives in.
    let warm = backend.extend_many(&leases).await.outcomes;
    assert!(
        warm.iter()
            .all(|outcome| *outcome.as_ref().expect("extend"))
    );

    // One call for all the leases, then the same leases one call each.
    let before = counts(&mut masters).await;
    let extended = backend.extend_many(&leases).await.outcomes;
    let batched = counts(&mut masters).await;
    assert_eq!(extended.len(), leases.len());
    assert!(
        extended
            .iter()
            .all(|outcome| *outcome.as_ref().expect("extend")),
        "every lease is ours"
    );
    let before_singles = counts(&mut masters).await;
    for lease in &leases {
        assert!(backend.extend(lease).await.expect("extend"));
    }
    let singles = counts(&mut masters).await;

    for (master, leases) in LEASES.iter().enumerate() {
        let leases = u64::try_from(*leases).unwrap();
        let (calls, reads, writes) = batched[master].since(&before[master]);
        let (single_calls, single_reads, single_writes) =
            singles[master].since(&before_singles[master]);
        assert_eq!(
            calls.get("evalsha"),
            Some(&leases),
            "master {master} ran one EVALSHA per lease it serves: {calls:?}"
        );
        // Redis counts the commands the scripts run too (PEXPIRE, ZADD,
        // TIME, …): the batch ran exactly what the same scripts run when
        // called one by one, so it sent nothing else.
        assert_eq!(
            calls, single_calls,
            "master {master}: the batch ran what single calls run, and nothing more"
        );
        // One read for the batch, and one for the INFO that counted after
        // it; one write for the batch's replies, and one for the reply to
        // the INFO that counted before it.
        assert_eq!(
            (reads, writes),
            (2, 2),
            "master {master} got its {leases} leases in one request and answered them at once"
        );
        // Called one by one, each lease is a read and a write of its own:
        // the counts tell a batch from single calls.
        assert_eq!(
            (single_reads, single_writes),
            (leases + 1, leases + 1),
            "master {master}: one round trip per lease, called one by one"
        );
    }

    for lease in &leases {
        assert!(backend.release(lease).await.expect("release"));
    }
}
