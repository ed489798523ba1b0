#!/usr/bin/env bash
# Open MPI's launch agent for scripts/netsim.sh, called like ssh:
#   netsim-agent.sh [ssh options] HOST command...
# It runs the command inside the namespace HOST under its own hostname.
while [ $# -gt 0 ]; do
    case "$1" in
        -[oplibcDeEFIJLmOQRSwW]) shift 2 ;;   # ssh options with an argument
        -*) shift ;;                          # flags such as -x, -T
        *) break ;;
    esac
done
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host; $*"
