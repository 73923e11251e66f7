//! The Rust that `scripts/gen-etcd-rpc` generated from `crates/etcd/proto`
//! with tonic's prost builder: etcd's messages and client stubs, one module
//! per protobuf package. Committed, so that building needs no `protoc`.

#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

pub mod etcdserverpb;
pub mod mvccpb;
