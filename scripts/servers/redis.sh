# Redis for the redis backend's tests: one plain instance on a free
# loopback port, and three more for quorum mode, all without persistence
# (the tests that restart or kill servers start servers of their own, with
# REDIS_BIN). Sourced by scripts/test after common.sh.

install_redis() {
    if command -v redis-server >/dev/null 2>&1; then
        return 0
    fi
    step "installing redis-server"
    apt_install redis-server
}

# one_redis_instance BIN: starts one instance on a free port, and sets
# REDIS_PORT to it (not printed: the process must stay this shell's child,
# which a command substitution's subshell would not keep it).
one_redis_instance() {
    local bin=$1 dir
    REDIS_PORT=$(free_port)
    dir="$DISTLOCK_TMP/redis-$REDIS_PORT"
    mkdir -p "$dir"
    "$bin" --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$dir" --save '' --appendonly no \
        --daemonize no --logfile "$dir/redis.log" &
    stop_on_exit "$!"
    wait_for_port "$REDIS_PORT" redis
}

start_redis() {
    step "starting redis"
    local bin hosts=()
    bin=$(command -v redis-server)
    one_redis_instance "$bin"
    export REDIS_BIN="$bin"
    export DISTLOCK_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
    step "starting three redis servers for quorum mode"
    for _ in 1 2 3; do
        one_redis_instance "$bin"
        hosts+=("127.0.0.1:$REDIS_PORT")
    done
    DISTLOCK_TEST_REDIS_QUORUM_URL="redis://$(IFS=,; echo "${hosts[*]}")?mode=quorum"
    export DISTLOCK_TEST_REDIS_QUORUM_URL
}
