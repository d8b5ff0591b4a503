"""The strict YAML reader: a repeated key is refused with its path, anything else reads as YAML."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.core.strict_yaml import DuplicateKeyError, load_strict_yaml


def test_documents_read_as_safe_yaml_does() -> None:
    text = "a: 1\nb: [x, {c: 2}]\nd: &anchor {e: 3}\nf: *anchor\ng: {<<: *anchor, h: 4}\n"
    assert load_strict_yaml(text) == yaml.safe_load(text)
    assert load_strict_yaml("") is None


@pytest.mark.parametrize(
    ("text", "path", "lines"),
    [
        ("kind: A\nspec: {}\nkind: B\n", "kind", (1, 3)),
        ("router:\n  httpPort: 1\n  httpPort: 2\n", "router.httpPort", (2, 3)),
        (
            "profiles:\n- name: a\n  scorers:\n  - type: x\n  - type: y\n    weight: 1\n"
            "    weight: 2\n",
            "profiles[0].scorers[1].weight",
            (6, 7),
        ),
    ],
)
def test_a_key_given_twice_is_refused_with_its_path_and_both_lines(
    text: str, path: str, lines: tuple[int, int]
) -> None:
    with pytest.raises(DuplicateKeyError) as refused:
        load_strict_yaml(text)
    assert refused.value.path == path and refused.value.lines == lines
    assert f"{path}: found duplicate key" in str(refused.value)


def test_a_merge_key_may_override_and_equal_keys_in_different_mappings_are_fine() -> None:
    text = "base: &b {x: 1}\nthis: {<<: *b, x: 2}\nother: {x: 3}\n"
    assert load_strict_yaml(text)["this"] == {"x": 2}


def test_malformed_yaml_still_raises_yamls_own_error() -> None:
    with pytest.raises(yaml.YAMLError):
        load_strict_yaml("a: [1, 2\n")
