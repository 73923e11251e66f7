//! Several workers read a report by id, change it and write it back: the
//! scenario of document-level pessimistic locking. The same work is done
//! three ways, and each is checked for lost updates:
//!
//! 1. without a lock (updates are lost when workers overlap);
//! 2. under entity locks (`EntityLocks`: the lock lives on the report);
//! 3. with optimistic updates (`update_if_unchanged`, retried on conflict).
//!
//! ```sh
//! cargo run -p distlock-mongodb --example entity_reports -- mongodb://127.0.0.1:27017/
//! ```
//!
//! The URL may also come from `DISTLOCK_MONGODB_URL`. Each worker has a
//! handle of its own, as separate instances of a service would.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use distlock_core::LockOptions;
use distlock_mongodb::EntityLocks;
use distlock_mongodb::mongodb::bson::{Uuid, doc};
use distlock_mongodb::mongodb::{Client, Collection};
use serde::{Deserialize, Serialize};

const WORKERS: usize = 4;
const UPDATES: usize = 25;
/// The "do something" between reading the report and writing it back.
const WORK: Duration = Duration::from_millis(2);

/// What the workers know of a report. The stored document has more: an
/// `owner` the workers never read, which must survive their writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    #[serde(rename = "_id")]
    id: Uuid,
    title: String,
    revisions: u64,
    last_editor: String,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let Some(url) = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("DISTLOCK_MONGODB_URL").ok())
    else {
        eprintln!(
            "entity_reports needs a MongoDB URL: pass it as the argument or set DISTLOCK_MONGODB_URL, e.g.\n  \
             cargo run -p distlock-mongodb --example entity_reports -- mongodb://127.0.0.1:27017/"
        );
        return ExitCode::from(2);
    };
    match run(&url).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("entity_reports: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(url: &str) -> Result<bool, BoxError> {
    let client = Client::with_uri_str(url).await?;
    let reports: Collection<Report> = client.database("distlock_examples").collection("reports");
    let expected = (WORKERS * UPDATES) as u64;
    println!(
        "entity_reports: {WORKERS} workers x {UPDATES} updates of one report in {}, \
         each a read, {WORK:?} of work, and a write back",
        reports.namespace()
    );
    let mut ok = true;

    // 1. No lock: read, work, write back.
    let id = new_report(&reports).await?;
    run_workers(|worker| {
        let reports = reports.clone();
        async move {
            for _ in 0..UPDATES {
                let report = reports
                    .find_one(doc! { "_id": id })
                    .await?
                    .ok_or("no report")?;
                tokio::time::sleep(WORK).await;
                reports
                    .update_one(
                        doc! { "_id": id },
                        doc! { "$set": {
                            "revisions": (report.revisions + 1) as i64,
                            "last_editor": worker_name(worker),
                        } },
                    )
                    .await?;
            }
            Ok(Vec::<()>::new())
        }
    })
    .await?;
    let revisions = read_revisions(&reports, id).await?;
    println!(
        "without a lock      {expected} updates, revisions {revisions}: {} updates lost",
        expected - revisions.min(expected)
    );
    reports.delete_one(doc! { "_id": id }).await?;

    // 2. Entity locks. The first worker to come inserts the report, already
    // locked; the rest lock it as it is.
    let id = Uuid::new();
    let options = LockOptions::default();
    let records = run_workers(|worker| {
        let locks = EntityLocks::new(reports.clone(), options.clone());
        async move {
            let mut records = Vec::with_capacity(UPDATES);
            let fresh = Report {
                id,
                title: "Quarterly report".into(),
                revisions: 0,
                last_editor: String::new(),
            };
            for _ in 0..UPDATES {
                let started = Instant::now();
                let mut report = locks
                    .lock_or_insert(&id, &fresh, Duration::from_secs(30))
                    .await?;
                let waited = started.elapsed();
                let seen = report.value().revisions;
                tokio::time::sleep(WORK).await;
                report.value_mut().revisions += 1;
                report.value_mut().last_editor = worker_name(worker);
                records.push(Record {
                    token: report.fencing_token(),
                    revisions_seen: seen,
                    waited,
                    inserted: report.inserted(),
                });
                report.commit().await?;
            }
            Ok(records)
        }
    })
    .await?;
    let revisions = read_revisions(&reports, id).await?;
    let inserts = records.iter().filter(|record| record.inserted).count();
    let in_order = tokens_in_order(&records);
    let mut waits: Vec<Duration> = records.iter().map(|record| record.waited).collect();
    waits.sort();
    let lost = expected - revisions.min(expected);
    println!(
        "with entity locks   {expected} updates, revisions {revisions}: {}; {}; \
         each lock saw the previous write and a higher token: {}; lock waits p50 {:.1?}, max {:.1?}",
        if lost == 0 {
            "none lost".to_owned()
        } else {
            format!("{lost} LOST")
        },
        match inserts {
            1 => "inserted once by lock_or_insert".to_owned(),
            n => format!("inserted {n} times by lock_or_insert (expected once)"),
        },
        if in_order { "yes" } else { "NO" },
        waits[waits.len() / 2],
        waits[waits.len() - 1],
    );
    ok &= lost == 0 && inserts == 1 && in_order;

    // A field the workers do not model, set by somebody else, survives
    // their locked writes.
    reports
        .clone_with_type::<distlock_mongodb::mongodb::bson::Document>()
        .update_one(doc! { "_id": id }, doc! { "$set": { "owner": "finance" } })
        .await?;
    let locks = EntityLocks::new(reports.clone(), LockOptions::default());
    let mut report = locks.lock(&id, Duration::from_secs(5)).await?;
    report.value_mut().title = "Quarterly report (final)".into();
    report.commit().await?;
    let owner = reports
        .clone_with_type::<distlock_mongodb::mongodb::bson::Document>()
        .find_one(doc! { "_id": id })
        .await?
        .and_then(|stored| stored.get_str("owner").ok().map(str::to_owned));
    println!(
        "unmodelled field    `owner` after a locked write: {}",
        owner.as_deref().unwrap_or("MISSING")
    );
    ok &= owner.as_deref() == Some("finance");

    // 3. Optimistic updates: read with the version, write if unchanged,
    // retry from a fresh read on conflict.
    let base = read_revisions(&reports, id).await?;
    let conflicts = run_workers(|worker| {
        let locks = locks.clone();
        async move {
            let mut conflicts = Vec::new();
            for _ in 0..UPDATES {
                loop {
                    let read = locks.read(&id).await?;
                    tokio::time::sleep(WORK).await;
                    let mut next = read.value;
                    next.revisions += 1;
                    next.last_editor = worker_name(worker);
                    if locks.update_if_unchanged(&id, read.version, &next).await? {
                        break;
                    }
                    conflicts.push(());
                }
            }
            Ok(conflicts)
        }
    })
    .await?
    .len();
    let revisions = read_revisions(&reports, id).await?.saturating_sub(base);
    let lost = expected - revisions.min(expected);
    println!(
        "optimistic updates  {expected} updates, revisions {revisions}: {}; {conflicts} conflicts retried",
        if lost == 0 {
            "none lost".to_owned()
        } else {
            format!("{lost} LOST")
        },
    );
    ok &= lost == 0;
    reports.delete_one(doc! { "_id": id }).await?;
    println!("result              {}", if ok { "ok" } else { "FAILED" });
    Ok(ok)
}

/// What one worker saw under one lock.
struct Record {
    token: u64,
    revisions_seen: u64,
    waited: Duration,
    inserted: bool,
}

/// Whether, in the order of their tokens, the locks saw 0, 1, 2, …
/// revisions: each lock came after the previous write, never beside it.
fn tokens_in_order(records: &[Record]) -> bool {
    let mut sorted: Vec<&Record> = records.iter().collect();
    sorted.sort_by_key(|record| record.token);
    sorted
        .iter()
        .enumerate()
        .all(|(i, record)| record.revisions_seen == i as u64)
        && sorted.windows(2).all(|pair| pair[0].token < pair[1].token)
}

fn worker_name(worker: usize) -> String {
    format!("worker-{worker}")
}

/// Inserts a report with no revisions; returns its id.
async fn new_report(reports: &Collection<Report>) -> Result<Uuid, BoxError> {
    let id = Uuid::new();
    reports
        .insert_one(Report {
            id,
            title: "Quarterly report".into(),
            revisions: 0,
            last_editor: String::new(),
        })
        .await?;
    Ok(id)
}

async fn read_revisions(reports: &Collection<Report>, id: Uuid) -> Result<u64, BoxError> {
    Ok(reports
        .find_one(doc! { "_id": id })
        .await?
        .ok_or("the report is gone")?
        .revisions)
}

/// Runs one worker per number, concurrently; gathers what they return.
async fn run_workers<F, Fut, T>(worker: F) -> Result<Vec<T>, BoxError>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, BoxError>> + Send + 'static,
    T: Send + 'static,
{
    let tasks: Vec<_> = (0..WORKERS).map(|n| tokio::spawn(worker(n))).collect();
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    Ok(all)
}
