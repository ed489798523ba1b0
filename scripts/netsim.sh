#!/usr/bin/env bash
# Bandwidth-limited "hosts" on one machine: network namespaces joined by a
# bridge, every link shaped with tbf in both directions, and MPI jobs run
# across them. Needs root, iproute2 and Open MPI. Facts: docs/NETWORK.md.
#
#   scripts/netsim.sh up   N RATE        create hosts PFX-h1..N at RATE (e.g. 100mbit, 1gbit, none)
#   scripts/netsim.sh down N             remove them
#   scripts/netsim.sh run  N RATE CMD... up, mpirun -np N CMD across the hosts, down (always)
#   scripts/netsim.sh torch N RATE CMD... up, CMD once in each host as a torch.distributed rank
#                                        (RANK, WORLD_SIZE, MASTER_ADDR = host 1, MASTER_PORT,
#                                        GLOO_SOCKET_IFNAME=eth0), wait for all, down (always)
#   scripts/netsim.sh launch N RATE BIN ARGS...
#                                        up, then `BIN launch --hosts … ARGS` (gradcomp's
#                                        supervisor) from a head host of its own (PFX-head),
#                                        down (always); ARGS: --min-workers K --config …
#   scripts/netsim.sh kill-host I        host I dies: its processes killed, its namespace gone
#   scripts/netsim.sh revive-host I RATE host I comes back (a fresh namespace at RATE)
#
# Environment: NETSIM_PREFIX (default gcns; names are machine-wide, so give
# parallel runs their own), NETSIM_SUBNET (default 10.77.0), NETSIM_TIMEOUT
# (seconds for the MPI job, default 1800), NETSIM_MPIRUN_ARGS (extra mpirun flags),
# NETSIM_BURST (tbf bucket; default 32kb at 10mbit and 100mbit, 256kb faster,
# the buckets every calibration used: about 2.5 ms of traffic at 100 Mbit/s and
# 1 Gbit/s, 26 ms at 10 Mbit/s; messages smaller than the bucket, after an idle
# gap that refills it, cross at veth speed, not at RATE),
# NETSIM_LATENCY (tbf queue: the longest a packet may wait, default 50ms).
set -euo pipefail

PFX="${NETSIM_PREFIX:-gcns}"
SUBNET="${NETSIM_SUBNET:-10.77.0}"
HERE="$(cd "$(dirname "$0")" && pwd)"

usage() { sed -n '2,24p' "$0" >&2; exit 2; }
need_root() { [ "$(id -u)" = 0 ] || { echo "error: netsim needs root (network namespaces and tc)" >&2; exit 1; }; }

default_burst() { # RATE
    case $1 in 10mbit|100mbit) echo 32kb ;; *) echo 256kb ;; esac
}

shape() { # NS DEV RATE
    [ "$3" = none ] && return 0
    ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "${NETSIM_BURST:-$(default_burst "$3")}" \
        latency "${NETSIM_LATENCY:-50ms}"
}

up() {
    local n=$1 rate=$2
    need_root
    down "$n" 2>/dev/null || true
    ip netns add "$PFX-sw"
    ip netns exec "$PFX-sw" ip link add br0 type bridge
    ip netns exec "$PFX-sw" ip link set br0 up
    ip netns exec "$PFX-sw" ip link set lo up
    for i in $(seq 1 "$n"); do add_host "$PFX-h$i" "p$i" "$SUBNET.$i" "$rate"; done
}

add_host() { # NAME SWITCH-PORT ADDRESS RATE
    local h=$1 port=$2
    ip netns add "$h"
    ip link add "$port" netns "$PFX-sw" type veth peer name eth0 netns "$h"
    ip netns exec "$PFX-sw" ip link set "$port" master br0
    ip netns exec "$PFX-sw" ip link set "$port" up
    ip netns exec "$h" ip addr add "$3/24" dev eth0
    ip netns exec "$h" ip link set eth0 up
    ip netns exec "$h" ip link set lo up
    shape "$h" eth0 "$4"
    shape "$PFX-sw" "$port" "$4"
}

# A host dies: every process in it is killed, and with its namespace gone
# the launch agent cannot reach it (as ssh to a dead machine fails).
kill_host() {
    local h="$PFX-h$1"
    need_root
    ip netns pids "$h" 2>/dev/null | xargs -r kill -KILL
    ip netns del "$h"
}

down() {
    local n=$1
    for i in $(seq 1 "$n"); do ip netns del "$PFX-h$i" 2>/dev/null || true; done
    ip netns del "$PFX-head" 2>/dev/null || true
    ip netns del "$PFX-sw" 2>/dev/null || true
}

# mpirun's options on these hosts, on one line (the reasons are at `run`;
# rtc_hwloc_vmhole none: the hosts share /tmp, and a daemon started after a
# killed one crashed writing the shared hwloc topology, Open MPI 4.1.4).
mpirun_options() {
    echo "--mca pml ob1 --mca btl self,tcp --mca oob_tcp_if_include $SUBNET.0/24 --mca rtc_hwloc_vmhole none" \
        "--mca btl_tcp_if_include $SUBNET.0/24 --mca mpi_yield_when_idle 1 --mca btl_tcp_flags send" \
        "--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 3 ${NETSIM_MPIRUN_ARGS:-}"
}

run() {
    local n=$1 rate=$2; shift 2
    [ $# -ge 1 ] || usage
    trap 'down '"$n" EXIT
    up "$n" "$rate"
    local hosts
    hosts=$(seq -s, -f "$PFX-h%g" 1 "$n")
    local agent="$HERE/netsim-agent.sh"
    # mpirun runs inside host 1; the agent starts the other ranks' daemons in
    # their own namespaces (each with its own hostname, so MPI sees N nodes).
    # All "hosts" share this machine's cores: without mpi_yield_when_idle the
    # busy-polling ranks starve the kernel's packet processing and every
    # message round costs a scheduler tick (8 ms measured; 61 us with it).
    # Allreduce is pinned to recursive doubling: Open MPI's default reached
    # only ~60% of the line rate at 2 ranks (docs/NETWORK.md), and a fixed,
    # known algorithm is what the network model can price.
    # Large messages as plain send fragments (btl_tcp_flags send), not the TCP
    # BTL's emulated RDMA put: with put, a round in which both ranks send and
    # receive at once ran at half the line rate whenever they entered it
    # together (1 and 4 MiB at N = 2, 100 Mbit/s: 154 and 680 ms against 90
    # and 370 ms), and at full rate when one came a few ms later, so the same
    # step took either time. Plain TCP across these links is full duplex
    # (12.4 MB/s each way at once); with send fragments so is MPI, in every
    # repetition. (Two connections per pair, btl_tcp_links 2, also gave the
    # full rate, but training jobs then hung at their end with the ranks in
    # different collectives.) docs/NETWORK.md.
    ip netns exec "$PFX-h1" unshare --uts sh -c "hostname $PFX-h1; exec timeout ${NETSIM_TIMEOUT:-1800} \
        mpirun --allow-run-as-root -np $n --host $hosts --mca plm_rsh_agent $agent \
        $(mpirun_options) $(printf '%q ' "$@")"
}

# gradcomp's supervisor on these hosts. It runs in a head host of its own,
# on the bridge but unshaped (it carries only mpirun's control traffic), so
# that any worker host, rank 0's included, can be killed under it.
launch() {
    local n=$1 rate=$2 bin=$3; shift 3
    hosts=$(mktemp)
    trap 'rm -f "$hosts"; down '"$n" EXIT
    up "$n" "$rate"
    add_host "$PFX-head" phead "$SUBNET.254" none
    seq -f "$PFX-h%g" 1 "$n" > "$hosts"
    local args=("$bin" launch --hosts "$hosts" --agent "$HERE/netsim-agent.sh"
                --mpirun "mpirun $(mpirun_options)" "$@")
    ip netns exec "$PFX-head" unshare --uts sh -c "hostname $PFX-head; \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 exec timeout ${NETSIM_TIMEOUT:-1800} \
        $(printf '%q ' "${args[@]}")"
}

# The same hosts and links as `run`, for PyTorch's gloo ranks: one process per
# host, rank i−1 in host i, rendezvous at host 1. Every rank's exit status
# counts; the first to fail, or the timeout, ends them all.
torch_ranks() {
    local n=$1 rate=$2; shift 2
    [ $# -ge 1 ] || usage
    trap 'kill $(jobs -p) 2>/dev/null || true; down '"$n" EXIT
    up "$n" "$rate"
    local pids=() i
    for i in $(seq 1 "$n"); do
        ip netns exec "$PFX-h$i" env RANK=$((i - 1)) WORLD_SIZE="$n" MASTER_ADDR="$SUBNET.1" \
            MASTER_PORT="${NETSIM_TORCH_PORT:-29500}" GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
            timeout "${NETSIM_TIMEOUT:-1800}" "$@" &
        pids+=($!)
    done
    local rc=0
    for pid in "${pids[@]}"; do
        wait "$pid" || { rc=$?; kill "${pids[@]}" 2>/dev/null || true; }
    done
    return $rc
}

[ $# -ge 2 ] || usage
cmd=$1; shift
case "$cmd" in
    up) [ $# -eq 2 ] || usage; up "$1" "$2" ;;
    down) down "$1" ;;
    run) run "$@" ;;
    torch) torch_ranks "$@" ;;
    launch) launch "$@" ;;
    kill-host) kill_host "$1" ;;
    revive-host) [ $# -eq 2 ] || usage; add_host "$PFX-h$1" "p$1" "$SUBNET.$1" "$2" ;;
    *) usage ;;
esac
