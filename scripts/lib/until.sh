# Sourced by bench/peer/matrix.sh and faults.sh: a deadline (a session's end) in the
# variable NAME, epoch seconds, unset for none.
# `until_check NAME` exits 2, naming NAME, unless it is unset or epoch seconds (a clock
# time like 20:30 would otherwise break the arithmetic below only once a run is due).
until_check() {
    local v="${!1:-}"
    if [ -n "$v" ] && ! [[ $v =~ ^[0-9]+$ ]]; then
        echo "error: $1 must be a time in seconds since the epoch (e.g. \$(date -d 20:30 +%s)), not '$v'" >&2
        exit 2
    fi
}
# `until_fits NAME SECONDS`: true unless NAME is set and SECONDS from now end past it.
until_fits() {
    local v="${!1:-}"
    [ -z "$v" ] || [ $(($(date +%s) + $2)) -le "$v" ]
}
