# Sourced by the install scripts. `apt_install WHY PACKAGE...` installs the
# packages when run as root on a system with apt; elsewhere it says what is
# needed and why, and exits 1.
apt_install() {
    local why="$1"
    shift
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "installing $*" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq "$@" >/dev/null
    else
        echo "error: $why; install them (Debian/Ubuntu: sudo apt-get install $*) or run this as root" >&2
        exit 1
    fi
}
