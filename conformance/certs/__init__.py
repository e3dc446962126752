"""Certificate hygiene: the talosconfig, apid and kube-apiserver certificates."""
