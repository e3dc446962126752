"""The emulated Talos cluster: state, servicers, PKI, servers, fault profiles."""
