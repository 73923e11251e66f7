# etcd for the etcd backend's tests: one member for the conformance suite,
# and a 3-member cluster on loopback with short election timeouts for the
# cluster tests. Sourced by scripts/test after common.sh.
#
# Exports:
# - DISTLOCK_TEST_ETCD_URL: etcd://127.0.0.1:PORT (the single member)
# - DISTLOCK_TEST_ETCD_CLUSTER_URL: etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
# - DISTLOCK_TEST_ETCD_CLUSTER_DIR: for each member N (1 to 3), member-N.cmd
#   (its command line, one argument per line, to restart it after a kill),
#   member-N.pid (the pid of the running process; a test that restarts a
#   member writes the new one), member-N.client (its client URL).
# - DISTLOCK_ETCD_BIN, DISTLOCK_ETCDCTL_BIN: the binaries (not ETCD_*: etcd
#   and etcdctl read those as flags).

install_etcd() {
    local missing=()
    command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
    # etcd-server only suggests etcd-client, which brings etcdctl.
    command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
    # The partition test cuts a member off in a network namespace.
    command -v ip >/dev/null 2>&1 || missing+=(iproute2)
    # The TLS test makes a throwaway CA and a certificate for its member.
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    install_missing "${missing[@]}"
}

# etcd_wait_healthy CLIENT_URL NAME: wait up to 60 s until the member
# answers a linearizable read (so it has a leader).
etcd_wait_healthy() {
    local url=$1 name=$2
    for _ in $(seq 1 600); do
        if ETCDCTL_API=3 "$DISTLOCK_ETCDCTL_BIN" --endpoints "$url" --command-timeout 1s \
            get --consistency=l health-probe >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.1
    done
    echo "$name did not become healthy at $url" >&2
    return 1
}

# etcd_member NAME DATA CLIENT_PORT PEER_PORT INITIAL_CLUSTER TOKEN [ARGS...]:
# the command line of one member, one argument per line. Members of one
# cluster share its token.
etcd_member() {
    local name=$1 data=$2 client=$3 peer=$4 initial=$5 token=$6
    shift 6
    printf '%s\n' "$DISTLOCK_ETCD_BIN" \
        --name "$name" \
        --data-dir "$data" \
        --listen-client-urls "http://127.0.0.1:$client" \
        --advertise-client-urls "http://127.0.0.1:$client" \
        --listen-peer-urls "http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "$initial" \
        --initial-cluster-state new \
        --initial-cluster-token "$token" \
        --logger zap --log-level error \
        "$@"
}

# etcd_start_from CMD_FILE LOG: starts the command in CMD_FILE in the
# background; prints its pid.
etcd_start_from() {
    local cmd_file=$1 log=$2 args=()
    mapfile -t args <"$cmd_file"
    "${args[@]}" >>"$log" 2>&1 &
    echo $!
}

start_etcd() {
    step "starting etcd (1 member, and a cluster of 3)"
    DISTLOCK_ETCD_BIN=$(command -v etcd)
    DISTLOCK_ETCDCTL_BIN=$(command -v etcdctl)
    export DISTLOCK_ETCD_BIN DISTLOCK_ETCDCTL_BIN
    local dir="$DISTLOCK_TMP/etcd" pid client peer
    mkdir -p "$dir"

    client=$(free_port)
    peer=$(free_port)
    etcd_member single "$dir/single" "$client" "$peer" \
        "single=http://127.0.0.1:$peer" "distlock-single-$$" >"$dir/single.cmd"
    pid=$(etcd_start_from "$dir/single.cmd" "$dir/single.log")
    stop_on_exit "$pid"

    # The cluster: elections within about a second of a leader's death,
    # yet not so short that a busy test machine's late heartbeats start one.
    local cluster="$dir/cluster" n clients=() peers=() initial=() urls=()
    mkdir -p "$cluster"
    for n in 1 2 3; do
        clients[n]=$(free_port)
        peers[n]=$(free_port)
        initial+=("m$n=http://127.0.0.1:${peers[n]}")
    done
    local joined
    joined=$(IFS=,; echo "${initial[*]}")
    for n in 1 2 3; do
        etcd_member "m$n" "$cluster/m$n" "${clients[n]}" "${peers[n]}" "$joined" "distlock-cluster-$$" \
            --heartbeat-interval 100 --election-timeout 1000 >"$cluster/member-$n.cmd"
        echo "http://127.0.0.1:${clients[n]}" >"$cluster/member-$n.client"
        pid=$(etcd_start_from "$cluster/member-$n.cmd" "$cluster/member-$n.log")
        echo "$pid" >"$cluster/member-$n.pid"
        stop_on_exit "$pid"
        urls+=("127.0.0.1:${clients[n]}")
    done

    wait_for_port "$client" etcd
    etcd_wait_healthy "http://127.0.0.1:$client" etcd
    for n in 1 2 3; do
        wait_for_port "${clients[n]}" "etcd member $n"
        etcd_wait_healthy "http://127.0.0.1:${clients[n]}" "etcd member $n"
    done

    # etcd as it comes: it fsyncs its WAL before it commits a write, unless
    # a member runs with --unsafe-no-fsync, which the report would say.
    local settings="as it comes, without --unsafe-no-fsync (read from every member's command line)"
    local waits="the WAL's fsync: a write is answered once its log entry is fsynced (in the cluster, by a majority)"
    if grep -q -- '^--unsafe-no-fsync' "$dir/single.cmd" "$cluster"/member-*.cmd; then
        settings="with --unsafe-no-fsync"
        waits="nothing: the WAL is not fsynced"
    fi
    say_durability etcd "$settings" "$waits"

    export DISTLOCK_TEST_ETCD_URL="etcd://127.0.0.1:$client"
    export DISTLOCK_TEST_ETCD_CLUSTER_URL="etcd://$(IFS=,; echo "${urls[*]}")"
    export DISTLOCK_TEST_ETCD_CLUSTER_DIR="$cluster"
}

# A test that restarts a member leaves a process that stop_servers does not
# know: stop whatever each member's pid file names as well.
stop_etcd_cluster() {
    local file
    [ -n "${DISTLOCK_TEST_ETCD_CLUSTER_DIR:-}" ] || return 0
    for file in "$DISTLOCK_TEST_ETCD_CLUSTER_DIR"/member-*.pid; do
        [ -f "$file" ] && kill "$(cat "$file")" 2>/dev/null
    done
    return 0
}
run_on_exit stop_etcd_cluster
