"""Changing the config's YAML text in place, one value or one list item at a time, so the file stays the user's.

The forms of the web app never rewrite the whole file: each change replaces the text of
one node (found by its path of keys and indexes, with the positions PyYAML's composer
keeps) and leaves every other character alone, comments and blank lines included. A
value is written in the style the file used for it (a flow ``[a, b]`` stays flow, a block
list stays a block list). What is lost: comments inside a value that is replaced as a
whole (a wildcard list written as a block with comments between its entries).
"""

from __future__ import annotations

import math

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

Path = tuple   # keys (str) and list indexes (int) from the document's root


class EditError(Exception):
    """The text cannot be edited by a form (not YAML, or not the shape the form expects)."""


def compose(text: str) -> Node | None:
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        raise EditError(f"the config is not valid YAML ({str(exc).splitlines()[0]}); fix it in the YAML "
                        "editor first") from None
    except RecursionError:
        raise EditError("the config nests too deep to edit with a form; use the YAML editor") from None


def _load(snippet: str) -> object:
    """The value of a piece of the file (an item of a flow list) for re-writing it."""
    try:
        return yaml.safe_load(snippet)
    except yaml.YAMLError:
        raise EditError("a value here uses an alias (*name) defined elsewhere; change it in the YAML editor") \
            from None


def find(root: Node | None, path: Path) -> Node | None:
    """The node at ``path``, None when any step of it is missing."""
    node = root
    for step in path:
        if isinstance(step, str) and isinstance(node, MappingNode):
            node = next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == step), None)
        elif isinstance(step, int) and isinstance(node, SequenceNode) and 0 <= step < len(node.value):
            node = node.value[step]
        else:
            return None
    return node


def render(value: object, indent: int, block: bool) -> str:
    """``value`` as YAML text for a place at column ``indent``: a block collection's later lines indented so,
    anything else (and every collection when not ``block``) on one line."""
    if block and isinstance(value, (dict, list)) and value:
        text = yaml.safe_dump(value, default_flow_style=False, sort_keys=False, allow_unicode=True, width=math.inf)
        lines = text.rstrip("\n").split("\n")
        return "\n".join([lines[0]] + [" " * indent + line for line in lines[1:]])
    if isinstance(value, (dict, list)):
        text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, allow_unicode=True, width=math.inf)
        return text.rstrip("\n")
    # a scalar as an item of a flow list, so it is quoted wherever flow syntax would misread it ("a {b|c}")
    style = '"' if isinstance(value, str) and "\n" in value else None   # escaped on one line: no indentation rules
    text = yaml.safe_dump([value], default_flow_style=True, default_style=style, allow_unicode=True, width=math.inf)
    return text.rstrip("\n")[1:-1]


def _is_block(node: Node) -> bool:
    return isinstance(node, (MappingNode, SequenceNode)) and not node.flow_style


def _content_end(text: str, node: Node) -> int:
    """Where ``node``'s own text ends: a block node's end mark lies past the blank and comment lines after it,
    which belong to what follows."""
    end = node.end_mark.index
    if not _is_block(node):
        return end
    lines_start = node.start_mark.index
    body = text[lines_start:end]
    kept = body.split("\n")
    while len(kept) > 1 and (not kept[-1].strip() or kept[-1].lstrip().startswith("#")):
        kept.pop()
    return lines_start + len("\n".join(kept))


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def set_value(text: str, path: Path, value: object) -> str:
    """``text`` with the value at ``path`` (a mapping key, made with its missing parents) set to ``value``."""
    root = compose(text)
    node = find(root, path)
    if node is not None:
        start, end = node.start_mark.index, _content_end(text, node)
        return text[:start] + render(value, node.start_mark.column, _is_block(node)) + text[end:]
    if not path:
        return render(value, 0, block=True) + "\n"
    *parents, key = path
    if not isinstance(key, str):
        raise EditError(f"there is no item {key} at {_where(parents)}")
    parent = find(root, tuple(parents))
    if parent is None:
        return set_value(text, tuple(parents), {key: value}) if parents else \
            (text.rstrip("\n") + "\n" if text.strip() else "") + render({key: value}, 0, block=True) + "\n"
    if not isinstance(parent, MappingNode):
        raise EditError(f"{_where(parents)} is not a mapping of keys; fix it in the YAML editor")
    if parent.flow_style:
        close = parent.end_mark.index - 1   # the "}"
        sep = ", " if parent.value else ""
        return text[:close] + sep + render({key: value}, 0, block=False)[1:-1] + text[close:]
    column = parent.value[0][0].start_mark.column if parent.value else parent.start_mark.column
    end = _content_end(text, parent)
    entry = render({key: value}, column, block=True)
    return text[:end] + "\n" + " " * column + entry + text[end:]


def delete_key(text: str, path: Path) -> str:
    """``text`` without the key at ``path`` (and its value); unchanged when there is no such key."""
    root = compose(text)
    *parents, key = path
    parent = find(root, tuple(parents))
    if not isinstance(parent, MappingNode):
        return text
    pairs = [(k, v) for k, v in parent.value if isinstance(k, ScalarNode) and k.value == key]
    if not pairs:
        return text
    k, v = pairs[0]
    if parent.flow_style:
        rest = {kk.value: _load(text[vv.start_mark.index:vv.end_mark.index]) for kk, vv in parent.value
                if kk is not k}
        return text[:parent.start_mark.index] + render(rest, 0, block=False) + text[parent.end_mark.index:]
    if len(parent.value) == 1:
        return set_value(text, tuple(parents), {}) if parents else ""
    start, end = k.start_mark.index, _content_end(text, v)
    if parent.value[0][0] is k:   # the first key may share its line with a list's "- "
        following = parent.value[1][0].start_mark.index
        return text[:start] + text[following:]
    line = _line_start(text, start)
    newline = text.find("\n", end)
    return text[:line] + (text[newline + 1:] if newline >= 0 else "")


def _where(path) -> str:
    return ".".join(str(p) for p in path) or "the top level"


def _sequence(root: Node | None, path: Path) -> SequenceNode:
    node = find(root, path)
    if not isinstance(node, SequenceNode):
        raise EditError(f"{_where(path)} is not a list in the config; fix it in the YAML editor")
    return node


def _item_lines(text: str, seq: SequenceNode, index: int) -> tuple[int, int]:
    """The span of a block list's item ``index``: from the start of its "- " line to the end of its own text."""
    item = seq.value[index]
    return _line_start(text, item.start_mark.index), _content_end(text, item)


def append_item(text: str, path: Path, value: object) -> str:
    """``text`` with ``value`` added at the end of the list at ``path`` (made when missing)."""
    root = compose(text)
    node = find(root, path)
    if node is None or (isinstance(node, ScalarNode) and node.value in ("", "~", "null")):
        return set_value(text, path, [value])
    seq = _sequence(root, path)
    values = _load(text[seq.start_mark.index:seq.end_mark.index]) if seq.flow_style else None
    if seq.flow_style or not seq.value:
        return text[:seq.start_mark.index] + render((values or []) + [value], 0, block=False) + \
            text[seq.end_mark.index:]
    first = seq.value[0]
    dash = text.rfind("-", _line_start(text, first.start_mark.index), first.start_mark.index)
    column = dash - _line_start(text, dash)
    end = _content_end(text, seq.value[-1])
    return text[:end] + "\n" + " " * column + "- " + render(value, column + 2, block=True) + text[end:]


def delete_item(text: str, path: Path, index: int) -> str:
    root = compose(text)
    seq = _sequence(root, path)
    if not 0 <= index < len(seq.value):
        raise EditError(f"{_where(path)} has no item {index + 1}")
    if seq.flow_style or len(seq.value) == 1:
        values = [_load(text[v.start_mark.index:_content_end(text, v)]) for v in seq.value]
        del values[index]
        return text[:seq.start_mark.index] + render(values, 0, block=False) + text[_content_end(text, seq):]
    start, end = _item_lines(text, seq, index)
    if index + 1 < len(seq.value):
        return text[:start] + text[_line_start(text, seq.value[index + 1].start_mark.index):]
    previous_end = _content_end(text, seq.value[index - 1])
    return text[:previous_end] + text[end:]


def move_item(text: str, path: Path, index: int, delta: int) -> str:
    """``text`` with item ``index`` of the list at ``path`` swapped with its neighbour ``index + delta``."""
    root = compose(text)
    seq = _sequence(root, path)
    other = index + delta
    if not (0 <= index < len(seq.value) and 0 <= other < len(seq.value)):
        return text
    first, second = sorted((index, other))
    if seq.flow_style:
        values = [_load(text[v.start_mark.index:v.end_mark.index]) for v in seq.value]
        values[first], values[second] = values[second], values[first]
        return text[:seq.start_mark.index] + render(values, 0, block=False) + text[seq.end_mark.index:]
    a_start, a_end = _item_lines(text, seq, first)
    b_start, b_end = _item_lines(text, seq, second)
    return text[:a_start] + text[b_start:b_end] + text[a_end:b_start] + text[a_start:a_end] + text[b_end:]
