# Redis for the redis backend's tests: one plain instance on a free
# loopback port, three more for quorum mode, and a 3-master cluster for
# cluster mode, all without persistence for the tests (the tests that
# restart or kill servers start servers of their own, with REDIS_BIN), and
# all with an append-only file fsynced once a second for the benchmarks
# (`bring_up_servers durable`). Sourced by scripts/test after common.sh.

install_redis() {
    if command -v redis-server >/dev/null 2>&1; then
        return 0
    fi
    step "installing redis-server"
    apt_install redis-server
}

# redis_persistence MODE: sets REDIS_PERSISTENCE to an instance's
# persistence settings: `durable`, an append-only file fsynced once a
# second by a background thread (Redis's own advice for an AOF); `always`,
# fsynced before each write is answered; anything else, none. Never RDB
# snapshots: their forks would fall into some measurements and not others.
redis_persistence() {
    case $1 in
        durable) REDIS_PERSISTENCE=(--appendonly yes --appendfsync everysec) ;;
        always) REDIS_PERSISTENCE=(--appendonly yes --appendfsync always) ;;
        *) REDIS_PERSISTENCE=(--appendonly no) ;;
    esac
}

# redis_reported PORT...: the persistence settings of the instances on
# PORT..., as they report them; one line if they agree, else one per port.
redis_reported() {
    local port each=()
    for port in "$@"; do
        each+=("port $port: $(redis-cli -p "$port" CONFIG GET appendonly appendfsync save |
            paste -d ' ' - - | sed "s/^save $/save ''/" | sort | paste -s -d ',' | sed 's/,/, /g')")
    done
    if [ "$(printf '%s\n' "${each[@]#*: }" | sort -u | wc -l)" = 1 ]; then
        echo "${each[0]#*: }"
    else
        printf '%s; ' "${each[@]}" | sed 's/; $/\n/'
    fi
}

# redis_waits MODE: what a write waits for on disk in MODE.
redis_waits() {
    case $1 in
        durable) echo "nothing per write: the append-only file is written before the reply and fsynced once a second" ;;
        always) echo "the append-only file's fsync, before every write is answered" ;;
        *) echo "nothing: no persistence" ;;
    esac
}

# The persistence of the instances start_redis and start_redis_cluster start.
redis_main_mode() {
    [ "$SERVER_SETTINGS" = durable ] && echo durable || echo off
}

# one_redis_instance BIN MODE [ARG…]: starts one instance on a free port,
# with the persistence of MODE (redis_persistence) and ARG… added to its
# settings, and sets REDIS_PORT to it (not printed: the process must stay
# this shell's child, which a command substitution's subshell would not
# keep it).
one_redis_instance() {
    local bin=$1 dir
    redis_persistence "$2"
    shift 2
    REDIS_PORT=$(free_port)
    dir="$DISTLOCK_TMP/redis-$REDIS_PORT"
    mkdir -p "$dir"
    "$bin" --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$dir" --save '' "${REDIS_PERSISTENCE[@]}" \
        --daemonize no --logfile "$dir/redis.log" "$@" &
    stop_on_exit "$!"
    wait_for_port "$REDIS_PORT" redis
}

start_redis() {
    step "starting redis ($SERVER_SETTINGS settings)"
    local bin hosts=() mode
    bin=$(command -v redis-server)
    mode=$(redis_main_mode)
    one_redis_instance "$bin" "$mode"
    export REDIS_BIN="$bin"
    export DISTLOCK_TEST_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
    say_durability Redis "the single server: $(redis_reported "$REDIS_PORT")" "$(redis_waits "$mode")"
    step "starting three redis servers for quorum mode"
    for _ in 1 2 3; do
        one_redis_instance "$bin" "$mode"
        hosts+=("127.0.0.1:$REDIS_PORT")
    done
    say_durability Redis "quorum mode's three: $(redis_reported "${hosts[@]##*:}")" "$(redis_waits "$mode")"
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
    local bin port hosts=() mode
    bin=$(command -v redis-server)
    mode=$(redis_main_mode)
    for _ in 1 2 3; do
        one_redis_instance "$bin" "$mode" --cluster-enabled yes --cluster-port "$(free_port)" \
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
    say_durability Redis "the cluster's three masters: $(redis_reported "${hosts[@]##*:}")" \
        "$(redis_waits "$mode")"
}

# redis_beside MODE: for the benchmarks' measured rows, one more instance
# with the persistence of MODE; sets REDIS_BESIDE_URL and REDIS_BESIDE (its
# settings, as it reports them). Not a start_ function: the tests do not
# need it.
redis_beside() {
    step "starting a redis server with persistence $1 (measured rows)"
    one_redis_instance "$(command -v redis-server)" "$1"
    REDIS_BESIDE=$(redis_reported "$REDIS_PORT")
    REDIS_BESIDE_URL="redis://127.0.0.1:$REDIS_PORT"
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
