# MongoDB for the tests: SecantusDB, a MongoDB-compatible single-node server
# that presents itself as a one-node replica set (so change streams and
# retryable writes work) and accepts fail points with
# --enable-test-commands. It is GPL-2.0: we only ever run it as a separate
# process and never link against it.

SECANTUS_VERSION=0.5.3-beta.196

secantusd_bin() {
    if command -v secantusd-rs >/dev/null 2>&1; then
        command -v secantusd-rs
    elif [ -x "$HOME/.cargo/bin/secantusd-rs" ]; then
        echo "$HOME/.cargo/bin/secantusd-rs"
    fi
}

install_mongodb() {
    case ":$PATH:" in
        *":$HOME/.cargo/bin:"*) ;;
        *) export PATH="$HOME/.cargo/bin:$PATH" ;;
    esac
    if [ -n "$(secantusd_bin)" ]; then
        return 0
    fi
    step "installing secantusd-rs $SECANTUS_VERSION"
    command -v cmake >/dev/null 2>&1 || apt_install cmake
    cargo install secantus-mdb --version "$SECANTUS_VERSION" --ignore-rust-version --locked \
        || cargo install secantus-mdb --version "$SECANTUS_VERSION" --ignore-rust-version
}

# mongodb_durability MODE: the server's durability flags for MODE:
# `durable`, --sync-on-commit, which syncs the log before a write is
# acknowledged, as mongod journals a `w: majority` write (without it
# SecantusDB acknowledges first, and a SIGKILL loses acknowledged writes:
# see crates/chaos/src/backends/mongodb.rs); anything else, none.
mongodb_durability() {
    [ "$1" = durable ] && echo --sync-on-commit
    return 0
}

# mongodb_waits MODE: what a write waits for on disk in MODE.
mongodb_waits() {
    case $1 in
        durable) echo "the log's sync: a write is acknowledged once it is on disk (w: majority, --sync-on-commit)" ;;
        *) echo "nothing: a write is acknowledged before its log reaches the file" ;;
    esac
}

# mongodb_server DIR MODE: a server on a free port, its data in DIR, with
# the durability flags of MODE; sets MONGODB_PORT and MONGODB_FLAGS (the
# durability flags passed, for the report). It stops on exit.
mongodb_server() {
    local dir=$1 bin pid
    bin=$(secantusd_bin)
    if [ -z "$bin" ]; then
        echo "secantusd-rs is not installed; install_mongodb should have installed it" >&2
        return 1
    fi
    MONGODB_FLAGS=$(mongodb_durability "$2")
    MONGODB_PORT=$(free_port)
    mkdir -p "$dir"
    # shellcheck disable=SC2086 # one word per flag
    "$bin" --port "$MONGODB_PORT" --storage-path "$dir/data" --enable-test-commands \
        --cache-size 512M --log-file-max 32MB $MONGODB_FLAGS >"$dir/server.log" 2>&1 &
    pid=$!
    stop_on_exit "$pid"
    if ! wait_for_port "$MONGODB_PORT" "secantusd-rs"; then
        tail -n 20 "$dir/server.log" >&2
        return 1
    fi
}

start_mongodb() {
    step "starting SecantusDB ($SERVER_SETTINGS settings)"
    local mode
    mode=$([ "$SERVER_SETTINGS" = durable ] && echo durable || echo off)
    mongodb_server "$DISTLOCK_TMP/mongodb" "$mode"
    export DISTLOCK_TEST_MONGODB_URL="mongodb://127.0.0.1:$MONGODB_PORT/"
    export SECANTUSD_BIN
    SECANTUSD_BIN=$(secantusd_bin)
    say_durability MongoDB "${MONGODB_FLAGS:+with }${MONGODB_FLAGS:-without --sync-on-commit}" \
        "$(mongodb_waits "$mode")"
}

# mongodb_without_durability: for the benchmarks' measured rows, a second
# server without --sync-on-commit; sets MONGODB_WITHOUT_DURABILITY_URL. Not
# a start_ function: the tests do not need it.
mongodb_without_durability() {
    step "starting a second SecantusDB without --sync-on-commit (measured rows)"
    mongodb_server "$DISTLOCK_TMP/mongodb-without-durability" off
    MONGODB_WITHOUT_DURABILITY_URL="mongodb://127.0.0.1:$MONGODB_PORT/"
}
