"""A node's system services: what each is (model), how they run (runner), what they publish and
the faults that act on them."""
