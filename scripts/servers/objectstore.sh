# The object stores for the object-storage backend's tests: Azurite (from
# npm), Microsoft's Azure Blob emulator, which the Azure SDKs test against;
# and moto (from PyPI), an S3 emulator, served one request at a time by
# moto_serial.py (moto checks a precondition and then writes, with nothing
# between them to stop a racing write). Sourced by scripts/test after
# common.sh. No real S3-compatible server that installs here keeps racing
# conditional writes atomic, and Google Cloud Storage has no emulator here
# that honours its generation preconditions: see docs/objectstore.md.

AZURITE_VERSION=3.35.0
# Where it is installed, once per machine.
OBJECTSTORE_TOOLS="${DISTLOCK_TOOLS_DIR:-$HOME/.local/share/distlock}"
# Azurite's one account and its key, the same in every copy of Azurite
# (published by Microsoft for its emulators; not a secret).
AZURITE_ACCOUNT=devstoreaccount1
AZURITE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
# The container (and the S3 bucket) the tests use.
OBJECTSTORE_BUCKET=distlock
MOTO_VERSION=5.1.22
# moto's web server's own packages, pinned with it.
MOTO_FLASK="flask==3.1.3 flask-cors==6.0.5"

azurite_bin() { echo "$OBJECTSTORE_TOOLS/azurite-$AZURITE_VERSION/node_modules/.bin/azurite-blob"; }
moto_dir() { echo "$OBJECTSTORE_TOOLS/moto-$MOTO_VERSION"; }

install_objectstore() {
    if [ ! -x "$(azurite_bin)" ]; then
        step "installing Azurite $AZURITE_VERSION (npm)"
        if ! command -v npm >/dev/null 2>&1; then
            apt_install npm
        fi
        npm install --silent --no-audit --no-fund \
            --prefix "$OBJECTSTORE_TOOLS/azurite-$AZURITE_VERSION" "azurite@$AZURITE_VERSION"
    fi
    if [ ! -d "$(moto_dir)/moto" ]; then
        step "installing moto $MOTO_VERSION (PyPI, S3 only)"
        # shellcheck disable=SC2086 # MOTO_FLASK is two requirements.
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --disable-pip-version-check \
            --no-warn-conflicts --target "$(moto_dir)" \
            "moto[s3]==$MOTO_VERSION" $MOTO_FLASK
    fi
}

start_objectstore() {
    azurite_up
    moto_up
    # Read from Azurite's source (dist/src/blob/persistence/
    # LokiBlobMetadataStore.js and common/persistence/FSExtentStore.js).
    say_durability objectstore \
        "Azurite $AZURITE_VERSION, as it comes: its data in the run's temp dir (--location); a blob's bytes appended to an extent file and fdatasynced before the answer, but the metadata that makes them the blob (its ETag, which bytes) kept in memory (LokiJS) and written to its index file every 5 s (autosave: a new file and a rename, without an fsync)" \
        "the extent file's fdatasync, not the index's: an acknowledged write lives only in Azurite's memory until the next autosave, up to 5 s later, so a crash takes it back; the index itself is never fsynced"
}

# Not named start_*: bring_up_servers runs every start_ function itself.
azurite_up() {
    step "starting Azurite $AZURITE_VERSION (Azure Blob)"
    local dir="$DISTLOCK_TMP/azurite" port pid
    mkdir -p "$dir"
    port=$(free_port)
    # --skipApiVersionCheck: object_store may ask for a newer API version
    # than this Azurite knows; the calls it makes are old ones.
    "$(azurite_bin)" --blobHost 127.0.0.1 --blobPort "$port" --location "$dir" \
        --silent --disableTelemetry --skipApiVersionCheck --loose \
        >"$dir/azurite.log" 2>&1 &
    pid=$!
    stop_on_exit "$pid"
    wait_for_port "$port" azurite
    python3 "$(dirname "${BASH_SOURCE[0]}")/azure_container.py" \
        "http://127.0.0.1:$port" "$AZURITE_ACCOUNT" "$AZURITE_KEY" "$OBJECTSTORE_BUCKET"
    export AZURITE_BIN
    AZURITE_BIN=$(azurite_bin)
    export AZURE_STORAGE_ACCOUNT_NAME=$AZURITE_ACCOUNT AZURE_STORAGE_ACCOUNT_KEY=$AZURITE_KEY
    export DISTLOCK_TEST_AZURE_URL="az://$OBJECTSTORE_BUCKET/tests?endpoint=http://127.0.0.1:$port/$AZURITE_ACCOUNT"
}

# Not named start_*, as above.
moto_up() {
    step "starting moto $MOTO_VERSION (S3, one request at a time)"
    local dir="$DISTLOCK_TMP/moto" port pid
    mkdir -p "$dir"
    # The command the chaos campaign restarts: PORT BUCKET, moto in memory.
    MOTO_SERIAL_BIN="$dir/moto-serial"
    printf '#!/bin/sh\nPYTHONPATH=%q exec python3 %q "$@"\n' \
        "$(moto_dir)" "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/moto_serial.py" \
        >"$MOTO_SERIAL_BIN"
    chmod +x "$MOTO_SERIAL_BIN"
    export MOTO_SERIAL_BIN
    port=$(free_port)
    "$MOTO_SERIAL_BIN" "$port" "$OBJECTSTORE_BUCKET" >"$dir/moto.log" 2>&1 &
    pid=$!
    stop_on_exit "$pid"
    # The bucket is made before the server listens.
    wait_for_port "$port" moto
    # moto checks no signatures: any key is taken.
    export AWS_ACCESS_KEY_ID=distlock-tests AWS_SECRET_ACCESS_KEY=distlock-tests
    export DISTLOCK_TEST_S3_URL="s3://$OBJECTSTORE_BUCKET/tests?endpoint=http://127.0.0.1:$port&region=us-east-1"
}
