"""The COSI side of a node: the versioned resource store, the registry of types and
definitions, the spec encoders and how a written resource is decoded."""
