//! Writes the Rust for the trimmed etcd API: `etcd-rpc-gen PROTO_DIR OUT_DIR`
//! reads `rpc.proto` and `kv.proto` from PROTO_DIR and writes one file per
//! protobuf package into OUT_DIR. Needs `protoc` (found as prost-build
//! finds it: `$PROTOC`, then `PATH`).

use std::path::PathBuf;
use std::process::ExitCode;

/// Messages that carry a password or a token: their `Debug` is written by
/// hand in crates/etcd, and never shows the secret.
const SECRET: [&str; 2] = [
    ".etcdserverpb.AuthenticateRequest",
    ".etcdserverpb.AuthenticateResponse",
];

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [proto_dir, out_dir] = args.as_slice() else {
        eprintln!("usage: etcd-rpc-gen PROTO_DIR OUT_DIR");
        return ExitCode::from(2);
    };
    let protos = [proto_dir.join("rpc.proto"), proto_dir.join("kv.proto")];
    let generated = tonic_prost_build::configure()
        // distlock is a client: no server traits, and no `connect`
        // helpers (the backend builds its own channel).
        .build_server(false)
        .build_client(true)
        .build_transport(false)
        .skip_debug(SECRET)
        .emit_rerun_if_changed(false)
        .out_dir(out_dir)
        .compile_protos(&protos, std::slice::from_ref(proto_dir));
    match generated {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("etcd-rpc-gen: {error}");
            ExitCode::FAILURE
        }
    }
}
