"""Machine-config patches, applied the way Talos applies them.

Talos (``pkg/machinery/config/configpatcher``) knows two kinds of patch:

* **strategic merge** — one or more YAML documents written like a (partial) machine config,
  merged document by document (see :mod:`pytest_talos.patches.strategic`, with its
  ``_REPLACE_FIELDS`` and ``_KEYED_LISTS``). ``$patch: delete`` removes a document, a key
  or a list item.
* **JSON6902** (RFC 6902) — a JSON or YAML list of ``{op, path, value, from}`` operations;
  only for single-document configs (see :mod:`pytest_talos.patches.json6902`).

The same code serves both sides: the emulator applies patches server-side, and the client
builds patched configs locally (as ``talosctl patch`` does) before ApplyConfiguration.
Nothing here mutates its inputs. YAML is read by the 1.2 core schema (as Go's yaml.v3 reads
untyped values) and plain scalars such as ``0777`` or ``yes`` are written back as they came
(see :mod:`pytest_talos.patches._yaml`).
"""

from pytest_talos.patches._apply import PatchInput, apply_patches, config_diff, detect_patch_kind
from pytest_talos.patches._yaml import PatchError, document_id, dump_documents, load_documents
from pytest_talos.patches.json6902 import apply_json6902
from pytest_talos.patches.strategic import apply_strategic_merge

__all__ = [
    "PatchError",
    "PatchInput",
    "apply_json6902",
    "apply_patches",
    "apply_strategic_merge",
    "config_diff",
    "detect_patch_kind",
    "document_id",
    "dump_documents",
    "load_documents",
]
