//! `fencing::Fence` on a table of the test's own, with tokens from real
//! grants: a holder whose lock was taken away and granted again cannot
//! write once the new holder has, and the new holder can.

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{LockClient, LockName, LockOptions};
use distlock_postgres::PostgresBackend;
use distlock_postgres::fencing::Fence;
use distlock_postgres::tokio_postgres::{self, NoTls};

use support::url;

/// The time an administrative call made on the backend directly is
/// given, as a client gives its operation timeout.
const ADMIN_LIMIT: Duration = Duration::from_secs(10);

async fn client() -> LockClient {
    let backend = PostgresBackend::open(&url()).await.expect("open");
    LockClient::new(Arc::new(backend), LockOptions::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holders_write_is_refused_and_the_new_holders_applied() {
    let (db, connection) = tokio_postgres::connect(&url(), NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let table = format!("fenced_{:016x}", rand::random::<u64>());
    // A column name that needs quoting, which the fence does.
    db.batch_execute(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, balance bigint NOT NULL, \"fencing token\" bigint);
         INSERT INTO {table} VALUES (42, 100, NULL)"
    ))
    .await
    .expect("create the table");
    let fence = Fence::new("fencing token").unwrap();
    let withdraw = format!(
        "UPDATE {table} SET balance = balance - $1, {} WHERE id = $2 AND {}",
        fence.assignment(3),
        fence.condition(3)
    );
    let write = |token: u64| {
        let (db, withdraw) = (&db, &withdraw);
        async move {
            let token = Fence::token(token).unwrap();
            db.execute(withdraw, &[&10_i64, &42_i64, &token])
                .await
                .expect("update")
        }
    };

    let name = LockName::new(format!("fenced-{table}")).unwrap();
    let (first, second) = (client().await, client().await);
    let stale = first
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(write(stale.fencing_token()).await, 1, "the holder writes");
    // The holder pauses; its lock is taken away and granted again.
    let admin = PostgresBackend::open(&url()).await.unwrap();
    use distlock_core::backend::Backend as _;
    assert!(admin.force_release(&name, ADMIN_LIMIT).await.unwrap());
    let fresh = second
        .acquire_with(&name, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(fresh.fencing_token() > stale.fencing_token());
    assert_eq!(
        write(fresh.fencing_token()).await,
        1,
        "the new holder writes"
    );
    assert_eq!(
        write(fresh.fencing_token()).await,
        1,
        "and again, with its token"
    );
    assert_eq!(
        write(stale.fencing_token()).await,
        0,
        "the stale holder is turned away"
    );
    let row = db
        .query_one(
            &format!("SELECT balance, \"fencing token\" FROM {table} WHERE id = 42"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        row.get::<_, i64>(0),
        70,
        "three withdrawals applied, one refused"
    );
    assert_eq!(
        row.get::<_, Option<i64>>(1),
        Some(Fence::token(fresh.fencing_token()).unwrap())
    );
    let _ = stale.release().await;
    fresh.release().await.unwrap();
    db.batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
}
