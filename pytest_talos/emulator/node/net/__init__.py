"""A node's networks: links and addresses, its place on the cluster's networks, KubeSpan and
WireGuard."""
