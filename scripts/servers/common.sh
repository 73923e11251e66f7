# Shared helpers for scripts/test, scripts/bench and scripts/chaos. Each
# scripts/servers/<name>.sh defines install_<name> (skip when already
# installed) and start_<name> (start on a free loopback port, data in a temp
# dir, export the URL the tests read, register the process with
# `stop_on_exit`, and say its durability with `say_durability`).

DISTLOCK_TMP=$(mktemp -d -t distlock-test.XXXXXX)
export DISTLOCK_TMP
STOP_PIDS=()

step() { printf '\n==> %s\n' "$*"; }

# apt-get update once per run, only when something must be installed.
APT_UPDATED=0
apt_install() {
    if [ "$APT_UPDATED" = 0 ]; then
        apt-get update -q >/dev/null
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null
}

# install_missing PACKAGE...: install the packages named, saying so;
# nothing when none is named (an install_<name> lists what it lacks).
install_missing() {
    if [ "$#" = 0 ]; then
        return 0
    fi
    step "installing $*"
    apt_install "$@"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# wait_for_port PORT NAME: wait up to 60 s for a TCP listener.
wait_for_port() {
    local port=$1 name=$2
    for _ in $(seq 1 600); do
        if python3 -c "import socket,sys; s=socket.socket(); s.settimeout(0.2); sys.exit(s.connect_ex(('127.0.0.1', $port)))" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "$name did not start listening on port $port" >&2
    return 1
}

stop_on_exit() { STOP_PIDS+=("$1"); }

# How the servers are started: `fast` for the tests (nothing waits for the
# disk that need not: the data is thrown away with the run), or `durable`
# for the benchmarks (as users run them). `bring_up_servers durable` sets it.
SERVER_SETTINGS=fast

# say_durability KIND SETTINGS WAITS: records, for the benchmark report,
# the durability settings of KIND's servers (read back from the servers
# where they can say) and what an acquisition or release waits for on
# disk, as distlock-bench's `--durability KIND SETTINGS WAITS`.
DURABILITY_ARGS=()
say_durability() { DURABILITY_ARGS+=(--durability "$1" "$2" "$3"); }

# run_on_exit FN: calls FN on exit, before the servers are signalled and
# the temp dir removed (for a server that needs its own way to stop).
EXIT_HOOKS=()
run_on_exit() { EXIT_HOOKS+=("$1"); }

stop_servers() {
    local pid hook
    for hook in "${EXIT_HOOKS[@]}"; do
        "$hook" || true
    done
    for pid in "${STOP_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${STOP_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$DISTLOCK_TMP"
}
trap stop_servers EXIT

# bring_up_servers [durable]: installs (once per machine) and starts every
# server in scripts/servers/, with the fast settings or, given `durable`,
# the durable ones (see SERVER_SETTINGS).
bring_up_servers() {
    local server fn
    SERVER_SETTINGS=${1:-fast}
    for server in "$(dirname "${BASH_SOURCE[0]}")"/*.sh; do
        [ "$(basename "$server")" = common.sh ] || source "$server"
    done
    for fn in $(declare -F | awk '{print $3}' | grep '^install_'); do
        "$fn"
    done
    for fn in $(declare -F | awk '{print $3}' | grep '^start_'); do
        "$fn"
    done
}
