# Redis for the redis backend's tests: one plain instance on a free
# loopback port, without persistence (the tests that restart a server with
# and without it start servers of their own, with REDIS_BIN). Sourced by
# scripts/test after common.sh.

install_redis() {
    if command -v redis-server >/dev/null 2>&1; then
        return 0
    fi
    step "installing redis-server"
    apt_install redis-server
}

start_redis() {
    step "starting redis"
    local bin port pid dir
    bin=$(command -v redis-server)
    port=$(free_port)
    dir="$DISTLOCK_TMP/redis-$port"
    mkdir -p "$dir"
    "$bin" --bind 127.0.0.1 --port "$port" --dir "$dir" --save '' --appendonly no \
        --daemonize no --logfile "$dir/redis.log" &
    pid=$!
    stop_on_exit "$pid"
    wait_for_port "$port" redis
    export REDIS_BIN="$bin"
    export DISTLOCK_TEST_REDIS_URL="redis://127.0.0.1:$port"
}
