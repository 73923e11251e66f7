# The object store for the object-storage backend's tests: Azurite (from
# npm), Microsoft's Azure Blob emulator, which the Azure SDKs test against.
# Sourced by scripts/test after common.sh. No S3-compatible server that
# installs here keeps conditional writes atomic when they race (SeaweedFS
# 4.48 and moto 5.1 each let two racing If-Match writes land), and Google
# Cloud Storage has no emulator here that honours its generation
# preconditions: see docs/objectstore.md.

AZURITE_VERSION=3.35.0
# Where it is installed, once per machine.
OBJECTSTORE_TOOLS="${DISTLOCK_TOOLS_DIR:-$HOME/.local/share/distlock}"
# Azurite's one account and its key, the same in every copy of Azurite
# (published by Microsoft for its emulators; not a secret).
AZURITE_ACCOUNT=devstoreaccount1
AZURITE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
# The container the tests use.
OBJECTSTORE_BUCKET=distlock

azurite_bin() { echo "$OBJECTSTORE_TOOLS/azurite-$AZURITE_VERSION/node_modules/.bin/azurite-blob"; }

install_objectstore() {
    if [ ! -x "$(azurite_bin)" ]; then
        step "installing Azurite $AZURITE_VERSION (npm)"
        if ! command -v npm >/dev/null 2>&1; then
            apt_install npm
        fi
        npm install --silent --no-audit --no-fund \
            --prefix "$OBJECTSTORE_TOOLS/azurite-$AZURITE_VERSION" "azurite@$AZURITE_VERSION"
    fi
}

start_objectstore() {
    azurite_up
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
