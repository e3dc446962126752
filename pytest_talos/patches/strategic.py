"""Strategic merge patches and ``$patch: delete``, as Talos's configpatcher applies them.

Patch documents are matched to the config's documents (the ``v1alpha1`` document to the
``v1alpha1`` document, the others by ``(apiVersion, kind, name)``); unmatched ones are
appended. Within a document scalars are overwritten unless the patch value is zero
(``""``, ``0``, ``null``; ``false`` always wins), maps are merged per key and lists are
appended — except the replace-fields and keyed lists below. ``$patch: delete`` removes a
document, a key or a list item, before the rest of its patch document is merged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_talos.patches._yaml import (
    V1ALPHA1,
    Document,
    DocumentID,
    PatchError,
    as_document,
    check_documents,
    check_identity,
    describe,
    describe_id,
    document_id,
    plain_copy,
)

__all__ = ["apply_strategic_merge", "merge_patch_documents"]

# --------------------------------------------------------------------------- strategic merge

# Fields tagged `merge:"replace"` in Talos: replaced (when the patch value is non-empty).
_REPLACE_FIELDS: dict[str, frozenset[str]] = {
    V1ALPHA1: frozenset(
        {
            "cluster.network.podSubnets",
            "cluster.network.serviceSubnets",
            "cluster.apiServer.auditPolicy",
        }
    ),
    "NetworkRuleConfig": frozenset({"ingress", "portSelector.ports"}),
}


def _same_value_of(key: str) -> Callable[[Any, Any], bool]:
    def same(existing: Any, new: Any) -> bool:
        return isinstance(existing, dict) and existing.get(key) == new.get(key)

    return same


def _same_interface(existing: Any, new: Any) -> bool:
    if not isinstance(existing, dict):
        return False
    if new.get("interface"):
        return bool(existing.get("interface") == new["interface"])
    selector = new.get("deviceSelector")
    return selector is not None and existing.get("deviceSelector") == selector


# Lists with a custom Merge in Talos: an item matching an existing one is merged into it.
_KEYED_LISTS: dict[str, dict[str, Callable[[Any, Any], bool]]] = {
    V1ALPHA1: {
        "machine.network.interfaces": _same_interface,
        "machine.network.interfaces[].vlans": _same_value_of("vlanId"),
        "cluster.apiServer.admissionControl": _same_value_of("name"),
    },
    "ExtensionServiceConfig": {"configFiles": _same_value_of("mountPath")},
}

# Talos's `Args` maps (extraArgs) merge by copying keys over: a list value is replaced.
_ARGS_KEY = "extraArgs"
# Talos drops a patch document that (after taking out its deletes) has only these keys.
_IDENTITY_ONLY_KEYS = frozenset({"version", "kind", "name"})


def apply_strategic_merge(
    documents: Sequence[Mapping[str, Any]], patch: Sequence[Mapping[str, Any]]
) -> list[Document]:
    """Strategic-merge the ``patch`` documents into ``documents``; returns new documents."""
    config = [
        as_document(plain_copy(doc), n, "machine config") for n, doc in enumerate(documents, 1)
    ]
    patch_docs = [(n, as_document(plain_copy(doc), n, "patch")) for n, doc in enumerate(patch, 1)]
    return merge_patch_documents(config, patch_docs, "patch")


def merge_patch_documents(
    documents: list[Document], patch_docs: list[tuple[int, Document]], what: str
) -> list[Document]:
    """Merge ``(line, document)`` patch documents into copies of ``documents``.

    ``what`` names the patch in errors; the lines point into its text.
    """
    result = [plain_copy(doc) for doc in documents]
    prepared = [(line, *_extract_deletes(plain_copy(doc), line, what)) for line, doc in patch_docs]
    remaining = [(line, doc) for line, doc, _ in prepared if doc is not None]
    check_documents(remaining, what)
    for line, doc, deletes in prepared:
        for delete in deletes:
            result = delete.apply(result, what)
        if doc is not None:
            _merge_document(result, doc, line, what)
    return result


def _merge_document(result: list[Document], patch_doc: Document, line: int, what: str) -> None:
    doc_id = document_id(patch_doc)
    for target in result:
        if document_id(target) == doc_id:
            _merge_mapping(target, patch_doc, "", doc_id[1], f"{what} (line {line})")
            return
    result.append(patch_doc)


def _merge_mapping(left: Document, right: Document, path: str, kind: str, what: str) -> None:
    for key, value in right.items():
        key_path = f"{path}.{key}" if path else str(key)
        if left.get(key) is None:
            if value is not None:
                left[key] = value
            continue
        left[key] = _merge_value(left[key], value, key_path, kind, what)


def _merge_value(left: Any, right: Any, path: str, kind: str, what: str) -> Any:
    if right is None:
        return left
    if path in _REPLACE_FIELDS.get(kind, ()):
        return right if not _is_zero(right) else left
    if isinstance(left, dict) and isinstance(right, dict):
        if path.rsplit(".", 1)[-1] == _ARGS_KEY:
            left.update(right)
        else:
            _merge_mapping(left, right, path, kind, what)
        return left
    if isinstance(left, list) and isinstance(right, list):
        return _merge_list(left, right, path, kind, what)
    if not isinstance(left, dict | list) and not isinstance(right, dict | list):
        return left if _is_zero(right) else right
    raise PatchError(
        f"{what}: cannot merge {describe(right)} into {describe(left)} at '{path}'; "
        "the patch must have the same shape as the config there"
    )


def _merge_list(left: list[Any], right: list[Any], path: str, kind: str, what: str) -> list[Any]:
    same = _KEYED_LISTS.get(kind, {}).get(path)
    if same is None:
        return left + right
    for item in right:
        match = next((old for old in left if isinstance(item, dict) and same(old, item)), None)
        if match is None:
            left.append(item)
        else:
            _merge_mapping(match, item, f"{path}[]", kind, what)
    return left


def _is_zero(value: Any) -> bool:
    """Go's zero values, which a patch cannot merge in (``false`` is not one of them here)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float | str | list | dict):
        return not value
    return value is None


# --------------------------------------------------------------------------- $patch: delete


class _Delete:
    """One ``$patch: delete`` found in a patch document.

    ``path`` leads (by keys) to the deleted key, or to the list holding the deleted item;
    ``item`` is the ``(key, value)`` choosing that item; an empty path deletes the document.
    """

    def __init__(
        self, doc_id: DocumentID, path: tuple[Any, ...], item: tuple[Any, Any] | None, line: int
    ):
        self.doc_id, self.path, self.item, self.line = doc_id, path, item, line

    def describe(self) -> str:
        document = f"document {describe_id(self.doc_id)}"
        if not self.path:
            return document
        where = _dotted(self.path)
        if self.item is not None:
            where += f"[{self.item[0]}={_scalar_text(self.item[1])}]"
        return f"'{where}' in {document}"

    def apply(self, documents: list[Document], what: str) -> list[Document]:
        index = next((i for i, d in enumerate(documents) if document_id(d) == self.doc_id), None)
        if index is None:
            raise self._lookup_failed(what, "the config has no such document")
        if not self.path:
            return documents[:index] + documents[index + 1 :]
        if self.item is None:
            _delete_key(documents[index], self.path, lambda why: self._lookup_failed(what, why))
        else:
            _delete_item(
                documents[index], self.path, self.item, lambda why: self._lookup_failed(what, why)
            )
        return documents

    def _lookup_failed(self, what: str, why: str) -> PatchError:
        return PatchError(
            f"{what} (line {self.line}): $patch: delete of {self.describe()} failed: lookup "
            f"failed ({why}); delete only what the config contains"
        )


def _extract_deletes(doc: Document, line: int, what: str) -> tuple[Document | None, list[_Delete]]:
    """Take the ``$patch: delete`` markers out of a patch document.

    Returns what is left to merge (``None`` when nothing is) and the deletes, which Talos
    applies before merging the rest of the document.
    """
    where = f"{what} (line {line})"
    if _IDENTITY_ONLY_KEYS.issuperset(doc):
        return None, []  # Talos drops a document with nothing but version/kind/name
    if _is_delete_marker(doc, where, ""):
        if doc.get("kind") is None:
            raise PatchError(
                f"{where}: $patch: delete cannot remove the v1alpha1 document; delete its keys "
                "instead, or name the apiVersion and kind of the document to delete"
            )
        check_identity(doc, line, what)
        return None, [_Delete(document_id(doc), (), None, line)]
    check_identity(doc, line, what)
    deletes: list[_Delete] = []
    _DeleteFinder(document_id(doc), line, where, deletes).walk_mapping(doc, ())
    return (None if _IDENTITY_ONLY_KEYS.issuperset(doc) else doc), deletes


def _is_delete_marker(node: Mapping[Any, Any], where: str, path: str) -> bool:
    if "$patch" not in node:
        return False
    if node["$patch"] != "delete":
        raise PatchError(
            f"{where}: unsupported '$patch: {node['$patch']}' at '{path or '<document>'}'; "
            "only '$patch: delete' is supported"
        )
    return True


class _DeleteFinder:
    """Walks a patch document, removing delete markers and recording them as `_Delete`s."""

    def __init__(self, doc_id: DocumentID, line: int, where: str, found: list[_Delete]):
        self.doc_id, self.line, self.where, self.found = doc_id, line, where, found

    def walk_mapping(self, node: Document, path: tuple[Any, ...], in_item: bool = False) -> bool:
        """Returns True when ``node`` emptied because of deletes (so its parent drops it)."""
        removed = False
        for key in list(node):
            if self._walk_child(node[key], (*path, key), in_item):
                del node[key]
                removed = True
        return removed and not node

    def _walk_child(self, child: Any, path: tuple[Any, ...], in_item: bool) -> bool:
        if isinstance(child, dict):
            if _is_delete_marker(child, self.where, _dotted(path)):
                self._no_list_in_chain(path, in_item)
                self.found.append(_Delete(self.doc_id, path, None, self.line))
                return True
            return self.walk_mapping(child, path, in_item)
        if isinstance(child, list):
            return self._walk_list(child, path, in_item)
        return False

    def _walk_list(self, items: list[Any], path: tuple[Any, ...], in_item: bool) -> bool:
        kept: list[Any] = []
        for item in items:
            if isinstance(item, dict) and _is_delete_marker(item, self.where, _dotted(path)):
                self._no_list_in_chain(path, in_item)
                selector = self._item_selector(item, path)
                self.found.append(_Delete(self.doc_id, path, selector, self.line))
            elif not self._walk_child(item, path, in_item=True):
                kept.append(item)
        removed = len(kept) != len(items)
        items[:] = kept
        return removed and not items

    def _item_selector(self, item: Mapping[Any, Any], path: tuple[Any, ...]) -> tuple[Any, Any]:
        for key, value in item.items():
            if key != "$patch" and not isinstance(value, dict | list):
                return key, value
        raise PatchError(
            f"{self.where}: the '$patch: delete' item in '{_dotted(path)}' needs a key: value "
            "saying which item to delete (e.g. '- interface: eth0' above '$patch: delete')"
        )

    def _no_list_in_chain(self, path: tuple[Any, ...], in_item: bool) -> None:
        if in_item:
            raise PatchError(
                f"{self.where}: cannot delete inside a list item ('{_dotted(path)}'); Talos "
                "supports '$patch: delete' on map keys and on whole items of a list reached "
                "through map keys only"
            )


def _delete_key(doc: Document, path: tuple[Any, ...], fail: Callable[[str], PatchError]) -> None:
    parent = _lookup_mapping(doc, path[:-1], fail)
    if path[-1] not in parent:
        raise fail(f"there is no key {str(path[-1])!r}")
    del parent[path[-1]]
    _prune_emptied(doc, path[:-1])


def _delete_item(
    doc: Document, path: tuple[Any, ...], item: tuple[Any, Any], fail: Callable[[str], PatchError]
) -> None:
    items = _lookup_mapping(doc, path[:-1], fail).get(path[-1])
    if not isinstance(items, list):
        raise fail("there is no such list")
    key, wanted = item[0], _scalar_text(item[1])
    for index, candidate in enumerate(items):
        found = isinstance(candidate, dict) and key in candidate
        if found and _scalar_text(candidate[key]) == wanted:
            del items[index]  # Talos removes the first match only
            _prune_emptied(doc, path)
            return
    raise fail(f"no item has {key}: {wanted}")


def _lookup_mapping(
    doc: Document, path: tuple[Any, ...], fail: Callable[[str], PatchError]
) -> dict[Any, Any]:
    node: dict[Any, Any] = doc
    for depth, key in enumerate(path):
        child = node.get(key)
        if not isinstance(child, dict):
            shown = _dotted(path[: depth + 1])
            problem = "is not in the config" if child is None else "is not a map"
            raise fail(f"'{shown}' {problem}")
        node = child
    return node


def _prune_emptied(doc: Document, path: tuple[Any, ...]) -> None:
    """Drop containers a delete left empty, as Talos's encoder omits empty fields."""
    for depth in range(len(path), 0, -1):
        parent = doc
        for key in path[: depth - 1]:
            parent = parent[key]
        if parent[path[depth - 1]] not in ({}, []):
            return
        del parent[path[depth - 1]]


def _dotted(path: Sequence[Any]) -> str:
    return ".".join(str(key) for key in path)


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)
