//! Running a transaction, and reading what its reply holds.

use distlock_core::Result;

use crate::error::from_etcd;
use crate::raw::Client;
use crate::raw::etcdserverpb::response_op::Response;
use crate::raw::etcdserverpb::{RangeResponse, TxnRequest, TxnResponse};
use crate::rules::{Entry, in_order};

/// How many times a transaction guarded by what was read (a single try, a
/// campaign's attempt, a term's withdrawal) reads and writes again when
/// another write came between its read and its write.
pub(crate) const TRY_ROUNDS: usize = 8;

/// Runs `txn` through `client`; `what` names it in an error.
pub(crate) async fn run(client: &Client, txn: TxnRequest, what: &str) -> Result<TxnResponse> {
    client.txn(txn).await.map_err(|e| from_etcd(what, e))
}

/// The revision the transaction ran at.
pub(crate) fn header_revision(response: &TxnResponse) -> i64 {
    response.header.as_ref().map_or(0, |header| header.revision)
}

/// The answers of the transaction's reads, in order.
pub(crate) fn range_reads(response: &TxnResponse) -> impl Iterator<Item = &RangeResponse> {
    response
        .responses
        .iter()
        .filter_map(|op| match &op.response {
            Some(Response::ResponseRange(read)) => Some(read),
            _ => None,
        })
}

/// The keys read by the transaction's last range, in their order.
pub(crate) fn entries_of(response: &TxnResponse) -> Vec<Entry> {
    let entries = range_reads(response)
        .last()
        .map(|read| read.kvs.iter().map(Entry::from_kv).collect())
        .unwrap_or_default();
    in_order(entries)
}
