"""apid of an emulated node: the wire. The server, where a call goes (routing, forwarding,
in-process hand-off), the TLS and EKU gate, the servicers that translate protobuf into calls on
the node's state, how errors are worded, the call log, the latency model and the loopback
listeners."""
