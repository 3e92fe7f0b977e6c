# Sourced by the tests that need two "nodes" on this machine: two network namespaces joined by a
# veth pair, each end with an address and up, loopback up in both.
#   make_two_nodes NAME OCTET   namespaces accel-NAME0-PID and accel-NAME1-PID, addresses
#                               10.OCTET.0.1 (node 0) and 10.OCTET.0.2 (node 1)
# Sets end_a and end_b (the veth ends, for GLOO_SOCKET_IFNAME), defines in_a / in_b (run a command
# in node 0's / node 1's namespace) and remove_two_nodes (for the caller's EXIT trap). Calls the
# caller's skip (exit 77, where namespaces cannot be made) and fail.
make_two_nodes() {
  local name=$1 octet=$2 why
  command -v ip >/dev/null || skip "the ip command (iproute2) is missing"
  command -v nsenter >/dev/null || skip "nsenter (util-linux) is missing"
  [ "$(id -u)" = 0 ] || skip "making network namespaces needs root"
  node_a="accel-${name}0-$$" node_b="accel-${name}1-$$" end_a="${name:0:1}a$$" end_b="${name:0:1}b$$"
  why="$(ip netns add "$node_a" 2>&1 && ip netns add "$node_b" 2>&1)" ||
    skip "cannot make network namespaces: $why"
  why="$(ip link add "$end_a" type veth peer name "$end_b" 2>&1)" || skip "cannot make a veth pair: $why"
  ip link set "$end_a" netns "$node_a" && ip link set "$end_b" netns "$node_b" ||
    fail "cannot move the veth ends"
  in_a ip addr add "10.$octet.0.1/24" dev "$end_a" && in_b ip addr add "10.$octet.0.2/24" dev "$end_b" &&
    in_a ip link set "$end_a" up && in_b ip link set "$end_b" up &&
    in_a ip link set lo up && in_b ip link set lo up || fail "cannot configure the link"
}
# nsenter rather than `ip -n` / `ip netns exec`, which remount /sys and fail inside a chroot.
in_a() { nsenter --net="/run/netns/$node_a" "$@"; }
in_b() { nsenter --net="/run/netns/$node_b" "$@"; }
remove_two_nodes() {
  [ -z "${node_a:-}" ] || ip netns del "$node_a" 2>/dev/null
  [ -z "${node_b:-}" ] || ip netns del "$node_b" 2>/dev/null
  return 0
}
