# libfaketime, for the campaign's shifted-clock scenario (R8): holders run
# with LD_PRELOAD of the library and FAKETIME=+1h / -1h. Not a server:
# start_faketime only finds the library and exports FAKETIME_LIB, which the
# campaign reads (and fails without). Sourced by scripts/test after
# common.sh.

faketime_lib() {
    local lib
    lib=$(dpkg -L libfaketime 2>/dev/null | grep '/libfaketime\.so\.1$' | head -n 1)
    if [ -z "$lib" ] && [ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ]; then
        lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
    fi
    echo "$lib"
}

install_faketime() {
    if [ -n "$(faketime_lib)" ]; then
        return 0
    fi
    step "installing faketime"
    apt_install faketime
}

start_faketime() {
    local lib
    lib=$(faketime_lib)
    if [ -z "$lib" ]; then
        echo "libfaketime.so.1 is not installed; install_faketime should have installed it" >&2
        return 1
    fi
    export FAKETIME_LIB="$lib"
}
