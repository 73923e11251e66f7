# PostgreSQL for the postgres backend's tests: one server, and PgBouncer in
# transaction-pooling mode in front of it. Sourced by scripts/test after
# common.sh.
#
# Exports:
# - DISTLOCK_TEST_POSTGRES_URL: postgres://distlock:PASSWORD@127.0.0.1:PORT/distlock
#   (the server itself, with a password-authenticated role of its own; it
#   accepts TLS and plain TCP alike)
# - DISTLOCK_TEST_POSTGRES_CA: the PEM certificate of the throwaway CA that
#   signed the server's certificate (issued for 127.0.0.1 and localhost)
# - DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL: the same role and database through
#   PgBouncer (pool_mode = transaction)
# - DISTLOCK_TEST_POSTGRES_READER_URL: a role that may read distlock's
#   tables in that database but write nothing
# - DISTLOCK_POSTGRES_BIN: the directory of initdb, pg_ctl and psql
# - DISTLOCK_POSTGRES_SERVER: the server binary in it

# The newest PostgreSQL installed, as Debian lays it out.
postgres_bin_dir() {
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
    [ -n "$dir" ] && [ -x "$dir/postgres" ] && echo "$dir"
}

install_postgres() {
    local missing=()
    postgres_bin_dir >/dev/null || missing+=(postgresql)
    command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
    command -v openssl >/dev/null 2>&1 || missing+=(openssl)
    install_missing "${missing[@]}"
}

# postgres_tls DIR: a throwaway CA (DIR/ca.pem) and a server certificate it
# signs for 127.0.0.1 and localhost (DIR/server.pem, DIR/server.key), valid
# for a week; the CA's key is deleted once it has signed.
postgres_tls() {
    local dir=$1
    mkdir -p "$dir"
    openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
        -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 7 -subj "/CN=distlock test CA" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>"$dir/openssl.log" &&
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
        -keyout "$dir/server.key" -out "$dir/server.csr" -subj "/CN=127.0.0.1" \
        2>>"$dir/openssl.log" &&
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=critical,CA:FALSE" \
        "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth" >"$dir/server.ext" &&
    openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" \
        -CAcreateserial -days 7 -extfile "$dir/server.ext" -out "$dir/server.pem" \
        2>>"$dir/openssl.log" || {
        cat "$dir/openssl.log" >&2
        return 1
    }
    rm -f "$dir/ca.key" "$dir/ca.srl" "$dir/server.csr" "$dir/server.ext" "$dir/openssl.log"
    # The server refuses a key that others can read.
    chown postgres:postgres "$dir/server.key" "$dir/server.pem"
    chmod 600 "$dir/server.key"
    chmod 644 "$dir/ca.pem" "$dir/server.pem"
}

# postgres_as COMMAND...: runs COMMAND as the postgres user, which initdb,
# the server and PgBouncer insist on (none of them runs as root).
postgres_as() {
    runuser -u postgres -- "$@" </dev/null
}

# postgres_durability MODE: the server's durability settings for MODE:
# `durable`, PostgreSQL's defaults, said explicitly so that nothing else
# can change them; anything else, off (nothing waits for the disk).
postgres_durability() {
    case $1 in
        durable) echo "fsync=on synchronous_commit=on full_page_writes=on" ;;
        *) echo "fsync=off synchronous_commit=off full_page_writes=off" ;;
    esac
}

# postgres_server DIR MODE [OPTIONS]: a server on a free port, its data in
# DIR/data, with the durability settings of MODE (postgres_durability) and
# the `-c` OPTIONS given in one word, and a role `distlock` with a password
# of its own that owns the database `distlock`. The database has
# pg_stat_statements, in a schema of its own (`statistics`), for the
# benchmarks' count of statements (crates/benches/src/pg_statements.rs).
# Sets POSTGRES_PORT, POSTGRES_PASSWORD and POSTGRES_SOCKET; the server
# stops on exit.
postgres_server() {
    local dir=$1 mode=$2 options=${3:-} setting bin
    bin=$(postgres_bin_dir)
    for setting in $(postgres_durability "$mode"); do
        options+=" -c $setting"
    done
    mkdir -p "$dir/sock"
    chown -R postgres:postgres "$dir"
    chmod 700 "$dir"
    POSTGRES_PORT=$(free_port)
    POSTGRES_SOCKET="$dir/sock"
    POSTGRES_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    # Local (socket) connections trust the OS user, for the setup below;
    # TCP connections need a password, as the tests' URLs give.
    postgres_as "$bin/initdb" -D "$dir/data" -U postgres -E UTF8 --no-locale \
        --auth-local=trust --auth-host=scram-sha-256 >"$dir/initdb.log" 2>&1 || {
        cat "$dir/initdb.log" >&2
        return 1
    }
    postgres_as "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -t 60 start \
        -o "-p $POSTGRES_PORT -k $dir/sock -c listen_addresses=127.0.0.1 -c max_connections=400 -c shared_preload_libraries=pg_stat_statements$options" \
        >/dev/null || {
        cat "$dir/postgres.log" >&2
        return 1
    }
    POSTGRES_DATA_DIRS+=("$dir/data")
    stop_on_exit "$(head -n 1 "$dir/data/postmaster.pid")"
    # The password is hex, so it needs no quoting inside the SQL string.
    postgres_psql postgres \
        -c "CREATE ROLE distlock LOGIN PASSWORD '$POSTGRES_PASSWORD'" \
        -c "CREATE DATABASE distlock OWNER distlock" >/dev/null
    postgres_psql distlock \
        -c "CREATE SCHEMA statistics" \
        -c "GRANT USAGE ON SCHEMA statistics TO PUBLIC" \
        -c "CREATE EXTENSION pg_stat_statements SCHEMA statistics" >/dev/null
}

# postgres_psql DATABASE ARG...: psql as the superuser, over the socket of
# the server postgres_server started last.
postgres_psql() {
    local database=$1
    shift
    postgres_as "$(postgres_bin_dir)/psql" -q -X -v ON_ERROR_STOP=1 -h "$POSTGRES_SOCKET" \
        -p "$POSTGRES_PORT" -U postgres -d "$database" "$@"
}

# postgres_reported: the durability settings of the server postgres_server
# started last, as it reports them.
postgres_reported() {
    postgres_psql postgres -A -t -F= \
        -c "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes') ORDER BY name" |
        paste -s -d ' '
}

# postgres_waits MODE: what a transaction waits for on disk in MODE.
postgres_waits() {
    case $1 in
        # Advisory mode turns synchronous_commit off for the writes a crash
        # may lose (docs/postgres.md, "Tokens across a crash").
        durable) echo "in lease mode, the commit's WAL flush: a statement returns once its commit record is fsynced; in advisory mode, the flush only for a fencing token ahead of the server's clock and an election's term, not for a release, a name's new key or a token raised to the clock" ;;
        *) echo "nothing: a commit returns before its WAL reaches the disk" ;;
    esac
}

start_postgres() {
    step "starting PostgreSQL and PgBouncer (transaction pooling, $SERVER_SETTINGS settings)"
    local bin dir mode port bouncer_port password reader_password pgbouncer
    bin=$(postgres_bin_dir)
    pgbouncer=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
    export DISTLOCK_POSTGRES_BIN="$bin"
    # The server binary itself, for the reliability campaign's own server.
    export DISTLOCK_POSTGRES_SERVER="$bin/postgres"
    dir="$DISTLOCK_TMP/postgres"
    # The postgres user must reach its directory through the run's temp
    # dir, which mktemp made private: let others through, not list it.
    chmod o+x "$DISTLOCK_TMP"
    mkdir -p "$dir"
    postgres_tls "$dir/tls"
    # Durability off for the tests (the data is thrown away with the run),
    # PostgreSQL's defaults for the benchmarks. TLS on, with the certificate above; plain TCP is still accepted.
    mode=$([ "$SERVER_SETTINGS" = durable ] && echo durable || echo off)
    postgres_server "$dir" "$mode" \
        " -c ssl=on -c ssl_cert_file=$dir/tls/server.pem -c ssl_key_file=$dir/tls/server.key"
    port=$POSTGRES_PORT
    password=$POSTGRES_PASSWORD
    bouncer_port=$(free_port)
    say_durability PostgreSQL "$(postgres_reported)" "$(postgres_waits "$mode")"
    reader_password=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
    postgres_psql postgres \
        -c "CREATE ROLE distlock_reader LOGIN PASSWORD '$reader_password'" >/dev/null
    # A user who may read distlock's tables but write nothing, for
    # `distlock check`'s test of missing permissions.
    postgres_psql distlock \
        -c "ALTER DEFAULT PRIVILEGES FOR ROLE distlock GRANT SELECT ON TABLES TO distlock_reader" >/dev/null

    # PgBouncer 1.18 (Debian 12's) predates prepared-statement support in
    # transaction mode: the backend must send every statement unnamed.
    printf '"distlock" "%s"\n' "$password" >"$dir/userlist.txt"
    cat >"$dir/pgbouncer.ini" <<EOF
[databases]
distlock = host=127.0.0.1 port=$port dbname=distlock

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = scram-sha-256
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 60
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
    chown postgres:postgres "$dir/userlist.txt" "$dir/pgbouncer.ini"
    chmod 600 "$dir/userlist.txt"
    postgres_as "$pgbouncer" -d -q "$dir/pgbouncer.ini" || {
        cat "$dir/pgbouncer.log" >&2 2>/dev/null
        return 1
    }
    wait_for_port "$bouncer_port" pgbouncer
    stop_on_exit "$(cat "$dir/pgbouncer.pid")"

    export DISTLOCK_TEST_POSTGRES_URL="postgres://distlock:$password@127.0.0.1:$port/distlock"
    export DISTLOCK_TEST_POSTGRES_PGBOUNCER_URL="postgres://distlock:$password@127.0.0.1:$bouncer_port/distlock"
    export DISTLOCK_TEST_POSTGRES_CA="$dir/tls/ca.pem"
    export DISTLOCK_TEST_POSTGRES_READER_URL="postgres://distlock_reader:$reader_password@127.0.0.1:$port/distlock"
}

# postgres_without_durability: for the benchmarks' measured rows, a second
# server with durability off, plain TCP only; sets
# POSTGRES_WITHOUT_DURABILITY_URL and POSTGRES_WITHOUT_DURABILITY (its
# settings, as it reports them). Not a start_ function: the tests do not
# need it.
postgres_without_durability() {
    step "starting a second PostgreSQL with durability off (measured rows)"
    postgres_server "$DISTLOCK_TMP/postgres-without-durability" off
    POSTGRES_WITHOUT_DURABILITY=$(postgres_reported)
    POSTGRES_WITHOUT_DURABILITY_URL="postgres://distlock:$POSTGRES_PASSWORD@127.0.0.1:$POSTGRES_PORT/distlock"
}

# stop_servers sends each server SIGTERM, which waits for clients to leave,
# and then removes its data: stop them at once, and wait, before that.
POSTGRES_DATA_DIRS=()
stop_postgres() {
    local data
    for data in "${POSTGRES_DATA_DIRS[@]}"; do
        [ -f "$data/postmaster.pid" ] &&
            postgres_as "$DISTLOCK_POSTGRES_BIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1
    done
    return 0
}

run_on_exit stop_postgres
