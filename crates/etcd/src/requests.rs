//! etcd requests as the backend makes them: compares, a transaction's
//! operations, and reads.

use crate::keys::NameRange;
use crate::raw::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use crate::raw::etcdserverpb::range_request::{SortOrder, SortTarget};
use crate::raw::etcdserverpb::request_op::Request;
use crate::raw::etcdserverpb::{Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp};

/// Compares `key`'s create revision with `revision`.
pub(crate) fn create_revision(key: Vec<u8>, result: CompareResult, revision: i64) -> Compare {
    Compare {
        result: result as i32,
        target: CompareTarget::Create as i32,
        key,
        range_end: Vec::new(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
    }
}

/// Compares `key`'s last modification revision with `revision`.
pub(crate) fn mod_revision(key: Vec<u8>, result: CompareResult, revision: i64) -> Compare {
    Compare {
        target: CompareTarget::Mod as i32,
        target_union: Some(TargetUnion::ModRevision(revision)),
        ..create_revision(key, result, revision)
    }
}

/// `compare`, made over every key from its key up to `end` (exclusive).
pub(crate) fn over(compare: Compare, end: Vec<u8>) -> Compare {
    Compare {
        range_end: end,
        ..compare
    }
}

/// Writes `key` on etcd lease `lease`, within a transaction.
pub(crate) fn put_op(key: Vec<u8>, value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest { key, value, lease })),
    }
}

/// Deletes `key` alone.
pub(crate) fn delete(key: &[u8]) -> DeleteRangeRequest {
    DeleteRangeRequest {
        key: key.to_vec(),
        range_end: Vec::new(),
    }
}

/// Deletes `key` alone, within a transaction.
pub(crate) fn delete_op(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestDeleteRange(delete(key))),
    }
}

/// Reads, within a transaction.
pub(crate) fn read_op(range: RangeRequest) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestRange(range)),
    }
}

/// Reads `key` alone.
pub(crate) fn key(key: Vec<u8>) -> RangeRequest {
    RangeRequest {
        key,
        ..RangeRequest::default()
    }
}

/// Reads the keys from `start` up to `end` (exclusive), oldest (by create
/// revision) first.
pub(crate) fn oldest_first(start: Vec<u8>, end: Vec<u8>) -> RangeRequest {
    RangeRequest {
        key: start,
        range_end: end,
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        keys_only: false,
    }
}

/// Reads a name's keys, oldest first.
pub(crate) fn name_keys(range: &NameRange) -> RangeRequest {
    oldest_first(range.start.clone(), range.end())
}
