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

start_mongodb() {
    local bin port dir pid
    bin=$(secantusd_bin)
    if [ -z "$bin" ]; then
        echo "secantusd-rs is not installed; install_mongodb should have installed it" >&2
        return 1
    fi
    port=$(free_port)
    dir="$DISTLOCK_TMP/mongodb"
    mkdir -p "$dir"
    "$bin" --port "$port" --storage-path "$dir/data" --enable-test-commands \
        --cache-size 512M --log-file-max 32MB >"$dir/server.log" 2>&1 &
    pid=$!
    stop_on_exit "$pid"
    if ! wait_for_port "$port" "secantusd-rs"; then
        tail -n 20 "$dir/server.log" >&2
        return 1
    fi
    export DISTLOCK_TEST_MONGODB_URL="mongodb://127.0.0.1:$port/"
    export SECANTUSD_BIN="$bin"
}
