#!/bin/sh
# Run one MPI process as if on its own cluster node: `mpirun -np N scripts/sim-node.sh APP ARGS`.
#
# SIM_NODE_ROOT  directory of the simulated cluster: nodes/<name>/ is each node's local storage,
#               node/ the mount point where a process sees its own node's storage.
# SIM_NODE_MAP   node name of each rank, separated by spaces or commas ("n0,n0,n1,n1").
#
# The process gets a private UTS namespace (its host name is the node name) and a private
# mount namespace in which SIM_NODE_ROOT/nodes/<name> is bind-mounted on SIM_NODE_ROOT/node, so
# every process uses the same cache path while each node has its own storage. Losing a node is
# deleting its directory; a spare node is a name no rank used before. Needs root, or
# unprivileged user namespaces.
set -eu
: "${SIM_NODE_ROOT:?set SIM_NODE_ROOT}" "${SIM_NODE_MAP:?set SIM_NODE_MAP}"
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-}}}
[ -n "$rank" ] || { echo "sim-node.sh: no MPI rank in the environment (run it under mpirun)" >&2; exit 2; }
node=$(echo "$SIM_NODE_MAP" | tr ',' ' ' | awk -v r="$rank" '{ if (r + 1 > NF) exit 1; print $(r + 1) }') || {
    echo "sim-node.sh: SIM_NODE_MAP has no node for rank $rank: $SIM_NODE_MAP" >&2; exit 2; }
mkdir -p "$SIM_NODE_ROOT/nodes/$node" "$SIM_NODE_ROOT/node"
if [ "$(id -u)" = 0 ]; then ns="--uts --mount"; else ns="--user --map-root-user --uts --mount"; fi
# shellcheck disable=SC2086
exec unshare $ns sh -c 'mount --bind "$1/nodes/$2" "$1/node" && hostname "$2" && shift 2 && exec "$@"' \
    sim-node "$SIM_NODE_ROOT" "$node" "$@"
