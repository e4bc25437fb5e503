"""Reading an inventory document from YAML or JSON text, with the line and column of a syntax error."""

import json
from collections.abc import Hashable
from typing import Any, Literal

import yaml

from apps.inventory.importer.errors import DOCUMENT, ImportFailed, Issue

Format = Literal["yaml", "json"]

# libyaml's parser when PyYAML was built with it (ten times faster on a 1,000-node file), with the
# same safe constructor as yaml.safe_load.
_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):  # type: ignore[misc,valid-type]
    """yaml.safe_load, except that a key given twice in one mapping is an error: PyYAML would keep
    the last one silently, and a second ``hostname:`` in a node usually means two nodes ran together."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Hashable, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (first on line {first_line[key]})", key_node.start_mark
                )
            first_line[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number an inventory can hold")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise ValueError(f"key {key!r} is given twice in one object")
        mapping[key] = value
    return mapping


def load_document(text: str | bytes, format: Format) -> Any:
    """Parse the text; ImportFailed names the line and column of a syntax error."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise ImportFailed([Issue(DOCUMENT, f"not UTF-8 text (byte {exc.start})")]) from exc
    if format == "json":
        try:
            return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicate_keys)
        except json.JSONDecodeError as exc:
            raise ImportFailed(
                [Issue(DOCUMENT, f"JSON syntax error at line {exc.lineno}, column {exc.colno}: {exc.msg}")]
            ) from exc
        except ValueError as exc:
            raise ImportFailed([Issue(DOCUMENT, f"JSON: {exc}")]) from exc
    try:
        return yaml.load(text, Loader=_StrictLoader)  # a SafeLoader: builds plain data only
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ImportFailed([Issue(DOCUMENT, f"YAML error{where}: {exc.problem or exc.context}")]) from exc
    except yaml.YAMLError as exc:
        raise ImportFailed([Issue(DOCUMENT, f"YAML: {exc}")]) from exc
