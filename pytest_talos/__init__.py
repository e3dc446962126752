"""pytest-talos: a pytest plugin and conformance kit for Talos Linux nodes."""

__version__ = "0.1.0"
