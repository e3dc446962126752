"""An emulated cluster: its nodes as members, their PKI use, generated configs, the desired
state, the Kubernetes objects and the loopback listeners."""
