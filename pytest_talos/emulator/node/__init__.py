"""One emulated node's truth, in plain Python (no gRPC): who it is, its events, lifecycle,
boot sequence, status, applies and kubelet, with its services, host and networks in rooms of
their own."""
