"""A node's host as its machine API shows it: the root filesystem, mounts, processes and sockets."""
