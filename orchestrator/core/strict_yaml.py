"""The one YAML reader for every document the project reads: safe, and a repeated key is an error.

Plain YAML loaders keep the last of two equal keys without a word, so a profile or replicas file
with a key given twice would run with half of what its author wrote. `load_strict_yaml` refuses
it, naming the key's path as the user wrote it (`profiles[0].scorers[1].weight`) and both lines.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(ValueError):
    """A mapping gives one key twice; `path` is that key's path, `lines` where both stand, and
    `problem` says so without the path (for reports that print the path apart)."""

    def __init__(self, path: str, key: str, lines: tuple[int, int]) -> None:
        self.path = path
        self.key = key
        self.lines = lines
        self.problem = (
            f"found duplicate key {key!r} (on line {lines[0]} and again on line {lines[1]}); "
            "a key may appear once"
        )
        super().__init__(f"{path}: {self.problem}")


def load_strict_yaml(text: str) -> Any:
    """The document in `text` as plain dicts, lists and scalars (None when empty).

    Raises `DuplicateKeyError` for a repeated key and `yaml.YAMLError` for malformed YAML.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, "", set())
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _refuse_duplicate_keys(node: Node, path: str, visited: set[int]) -> None:
    if id(node) in visited:  # an alias of a node already checked (or a recursive one)
        return
    visited.add(id(node))
    if isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicate_keys(item, f"{path}[{index}]", visited)
    elif isinstance(node, MappingNode):
        first_line: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = key_node.value if isinstance(key_node, ScalarNode) else None
            child = f"{path}.{key}" if path else str(key)
            if key is not None:
                line = key_node.start_mark.line + 1
                identity = (key_node.tag, key)
                if identity in first_line:
                    raise DuplicateKeyError(child, key, (first_line[identity], line))
                first_line[identity] = line
            _refuse_duplicate_keys(value_node, child, visited)
