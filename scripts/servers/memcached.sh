# memcached for the memcached backend's tests: three independent instances
# on free loopback ports, so the tests can run in the default mode (one
# server) and in quorum mode (all three). Sourced by scripts/test after
# common.sh.

install_memcached() {
    if command -v memcached >/dev/null 2>&1; then
        return 0
    fi
    step "installing memcached"
    apt_install memcached
}

start_memcached() {
    step "starting memcached (3 instances)"
    local bin user_args=() urls=() port pid
    bin=$(command -v memcached)
    # memcached refuses to run as root unless told which user to be.
    if [ "$(id -u)" = 0 ]; then
        user_args=(-u root)
    fi
    for _ in 1 2 3; do
        port=$(free_port)
        "$bin" "${user_args[@]}" -l 127.0.0.1 -p "$port" -U 0 -m 64 -c 1024 \
            >"$DISTLOCK_TMP/memcached-$port.log" 2>&1 &
        pid=$!
        stop_on_exit "$pid"
        wait_for_port "$port" memcached
        urls+=("127.0.0.1:$port")
    done
    say_durability memcached "no persistence: memcached keeps everything in memory" \
        "nothing: memcached has no disk"
    export MEMCACHED_BIN="$bin"
    export DISTLOCK_TEST_MEMCACHED_URL="memcache://${urls[0]}"
    export DISTLOCK_TEST_MEMCACHED_QUORUM_URL="memcache://${urls[0]},${urls[1]},${urls[2]}?mode=quorum"
}
