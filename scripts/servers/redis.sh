# Redis for the redis backend's tests: one plain instance on a free
# loopback port, three more for quorum mode, and a 3-master cluster for
# cluster mode, all without persistence (the tests that restart or kill
# servers start servers of their own, with REDIS_BIN). Sourced by
# scripts/test after common.sh.

install_redis() {
    if command -v redis-server >/dev/null 2>&1; then
        return 0
    fi
    step "installing redis-server"
    apt_install redis-server
}

# one_redis_instance BIN [ARG…]: starts one instance on a free port, with
# ARG… added to its settings, and sets REDIS_PORT to it (not printed: the
# process must stay this shell's child, which a command substitution's
# subshell would not keep it).
one_redis_instance() {
    local bin=$1 dir
    shift
    REDIS_PORT=$(free_port)
    dir="$DISTLOCK_TMP/redis-$REDIS_PORT"
    mkdir -p "$dir"
    "$bin" --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$dir" --save '' --appendonly no \
        --daemonize no --logfile "$dir/redis.log" "$@" &
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
    # A deployment already in service: a quorum server that comes back
    # empty abstains for a lease (docs/redis.md), and so does a new one,
    # during which a grant needs every server's vote and a try right after
    # a release can find the third copy not yet deleted. An epoch long past
    # keeps that first lease out of the shared suites; crates/redis's
    # tests run it on servers of their own.
    for host in "${hosts[@]}"; do
        redis-cli -p "${host##*:}" SET distlock:epoch 0 >/dev/null
    done
    DISTLOCK_TEST_REDIS_QUORUM_URL="redis://$(IFS=,; echo "${hosts[*]}")?mode=quorum"
    export DISTLOCK_TEST_REDIS_QUORUM_URL
}

# A cluster of three masters and no replicas on loopback, for cluster
# mode. Each node keeps its cluster state in its own directory, and talks
# to the others on a bus port of its own: the default, the port + 10000,
# may be taken or past 65535.
start_redis_cluster() {
    step "starting a 3-master redis cluster for cluster mode"
    local bin port hosts=()
    bin=$(command -v redis-server)
    for _ in 1 2 3; do
        one_redis_instance "$bin" --cluster-enabled yes --cluster-port "$(free_port)" \
            --cluster-config-file nodes.conf --cluster-node-timeout 5000
        hosts+=("127.0.0.1:$REDIS_PORT")
    done
    redis-cli --cluster create "${hosts[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
    for host in "${hosts[@]}"; do
        port=${host##*:}
        wait_for_cluster_state "$port"
    done
    DISTLOCK_TEST_REDIS_CLUSTER_URL="redis://$(IFS=,; echo "${hosts[*]}")?mode=cluster"
    export DISTLOCK_TEST_REDIS_CLUSTER_URL
}

# wait_for_cluster_state PORT: waits until the node on PORT sees every slot
# served (cluster_state:ok), for at most 30 s.
wait_for_cluster_state() {
    local port=$1 tries=0
    until redis-cli -p "$port" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; do
        tries=$((tries + 1))
        if [ "$tries" -gt 300 ]; then
            echo "the redis cluster node on port $port did not reach cluster_state:ok" >&2
            return 1
        fi
        sleep 0.1
    done
}
