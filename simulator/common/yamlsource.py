"""YAML loading that remembers where every value came from, so errors can name file and line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from biasim.simulator.common.errors import InputError, Problem, format_path

FieldPath = tuple[str | int, ...]

#: Largest study file read (bytes): the biggest built-in study is under 20 KB.
MAX_STUDY_BYTES = 1_000_000
#: Most values a document may expand to once its aliases are followed (a "billion laughs" file
#: of 1 KB would otherwise grow to gigabytes).
MAX_YAML_NODES = 200_000
#: Most characters of text a document may expand to once its aliases are followed (30,000
#: aliases to one 450 KB string would be 13.5 GB once built; ten times the file limit is ample).
MAX_YAML_CHARS = 10 * 1_000_000
#: Deepest nesting of mappings and lists (deeper would exhaust the interpreter's stack).
MAX_YAML_DEPTH = 64
#: Longest integer literal (Python refuses to convert longer ones; no study needs one).
MAX_INT_DIGITS = 4300
_INT_TAG = "tag:yaml.org,2002:int"
#: libyaml's loader where installed: a 1 MB study parses in a tenth of a second, not seconds.
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class SourceMap:
    """Maps each field path to the ``(file, line)`` it was written at."""

    locations: dict[FieldPath, tuple[str, int]] = field(default_factory=dict)
    default_file: str = ""
    #: Line where a scalar's text starts (the line after the key for ``|`` and ``>`` blocks).
    text_lines: dict[FieldPath, int] = field(default_factory=dict)

    def locate(self, path: FieldPath) -> tuple[str, int | None]:
        """Return the file and line of ``path`` or of its nearest written ancestor."""
        for end in range(len(path), -1, -1):
            hit = self.locations.get(tuple(path[:end]))
            if hit:
                return hit
        return self.default_file, None

    def field(self, path: FieldPath) -> str:
        """How a problem names the field at ``path``."""
        return format_path(path)

    def problem(self, path: FieldPath, message: str) -> Problem:
        """Build a :class:`Problem` located at ``path``."""
        file, line = self.locate(path)
        return Problem(file=file, line=line, field=self.field(path), message=message)

    def overlay(self, other: SourceMap, merged: Any) -> SourceMap:
        """Locations after ``other``'s document was deep-merged over this one's."""
        out = dict(self.locations)
        for path in other.locations:
            # A value the override replaces wholesale (a list, a scalar) takes its children along.
            if path and not isinstance(_get(merged, path), dict):
                for stale in [p for p in out if p[: len(path)] == path and len(p) > len(path)]:
                    del out[stale]
        out.update(other.locations)
        text_lines = {
            p: n for p, n in self.text_lines.items() if p in out and out[p] == self.locations.get(p)
        }
        text_lines.update(other.text_lines)
        return SourceMap(out, other.default_file, text_lines)

    def text_line(self, path: FieldPath, line_in_text: int) -> tuple[str, int | None]:
        """File and line of line ``line_in_text`` (1-based) inside the string at ``path``."""
        file, line = self.locate(path)
        start = self.text_lines.get(path)
        return (file, start + line_in_text - 1) if start else (file, line)


def _get(doc: Any, path: FieldPath) -> Any:
    for part in path:
        try:
            doc = doc[part]
        except (KeyError, IndexError, TypeError):
            return None
    return doc


def load_yaml(text: str, filename: str) -> tuple[Any, SourceMap]:
    """Parse YAML safely and record the line of every key and list item.

    Raises:
        InputError: On a syntax error or a key written twice in one mapping.
    """
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise InputError([Problem(filename, line, "", "invalid YAML: a NUL byte")])
    try:
        node, data = _parse(text, filename, _FAST_LOADER)
    except yaml.YAMLError:
        # libyaml's messages differ from PyYAML's: say what is wrong in PyYAML's words.
        node, data = _parse(text, filename, yaml.SafeLoader)
    smap = SourceMap(default_file=filename)
    problems: list[Problem] = []
    if node is not None:
        _walk(node, (), filename, smap, problems)
    if problems:
        raise InputError(problems)
    return data, smap


def _parse(text: str, filename: str, loader_class: Any) -> tuple[yaml.Node | None, Any]:
    """The document's node tree (for locations) and its data, sized before it is built.

    Raises:
        yaml.YAMLError: From the fast loader, to be parsed again for a readable message.
        InputError: From PyYAML's loader, a syntax error with its line; or a size limit.
    """
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_size(node, filename)
        return node, loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        if loader_class is not yaml.SafeLoader:
            raise
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        raise InputError([Problem(filename, line, "", f"invalid YAML: {exc.problem}")]) from None
    except yaml.YAMLError as exc:  # e.g. a character YAML forbids (no line mark)
        if loader_class is not yaml.SafeLoader:
            raise
        raise InputError([Problem(filename, None, "", f"invalid YAML: {exc}")]) from None
    except RecursionError:
        raise InputError(
            [Problem(filename, None, "", f"nesting deeper than {MAX_YAML_DEPTH} levels")]
        ) from None
    finally:
        loader.dispose()


def _check_size(root: yaml.Node, filename: str) -> None:
    """Refuse a document nested deeper than :data:`MAX_YAML_DEPTH` or expanding, aliases
    followed, to more than :data:`MAX_YAML_NODES` values or :data:`MAX_YAML_CHARS` characters,
    before anything is built from it.

    Each distinct node is sized once (an alias reuses its anchor's node), so the check takes
    time in the file's size, not in its expansion.
    """
    sizes: dict[int, tuple[int, int]] = {}  # node -> (values, characters) once expanded
    # Iterative post-order walk: the stack never recurses however deep the file.
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    on_path: set[int] = set()
    while stack:
        node, depth, done = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _INT_TAG and len(node.value) > MAX_INT_DIGITS:
                raise _located(filename, node, f"an integer of more than {MAX_INT_DIGITS:,} digits")
            sizes[id(node)] = (1, len(node.value))
            continue
        children = (
            [v for pair in node.value for v in pair]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
        )
        if done:
            on_path.discard(id(node))
            values = 1 + sum(sizes[id(c)][0] for c in children)
            chars = sum(sizes[id(c)][1] for c in children)
            sizes[id(node)] = (values, chars)
            _check_expansion(values, chars, node, filename)
            continue
        if id(node) in sizes:
            continue
        if depth > MAX_YAML_DEPTH:
            raise _located(filename, node, f"nesting deeper than {MAX_YAML_DEPTH} levels")
        if id(node) in on_path:
            raise _located(filename, node, "an alias refers to itself")
        on_path.add(id(node))
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)


def _located(filename: str, node: yaml.Node, message: str) -> InputError:
    return InputError([Problem(filename, node.start_mark.line + 1, "", message)])


def _check_expansion(values: int, chars: int, node: yaml.Node, filename: str) -> None:
    if values > MAX_YAML_NODES:
        raise _located(
            filename,
            node,
            f"the document expands to more than {MAX_YAML_NODES:,} values "
            "once its aliases are followed",
        )
    if chars > MAX_YAML_CHARS:
        raise _located(
            filename,
            node,
            f"the document expands to more than {MAX_YAML_CHARS:,} characters of text "
            "once its aliases are followed",
        )


def _walk(
    node: yaml.Node,
    path: FieldPath,
    filename: str,
    smap: SourceMap,
    problems: list[Problem],
) -> None:
    out = smap.locations
    if isinstance(node, yaml.ScalarNode):
        block = node.style in ("|", ">")
        smap.text_lines[path] = node.start_mark.line + 1 + (1 if block else 0)
    elif isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                problems.append(
                    Problem(
                        filename,
                        key_node.start_mark.line + 1,
                        format_path((*path, key)),
                        "key is written twice in the same mapping",
                    )
                )
            seen.add(key)
            out[(*path, key)] = (filename, key_node.start_mark.line + 1)
            _walk(value_node, (*path, key), filename, smap, problems)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            out[(*path, index)] = (filename, item.start_mark.line + 1)
            _walk(item, (*path, index), filename, smap, problems)


def deep_merge(base: Any, override: Any, path: tuple[Any, ...] = ()) -> Any:
    """Merge ``override`` over ``base``: mappings merge key by key, anything else is replaced,
    and ``key: null`` removes the key (so a study can drop a factor level or an axis).

    A synthetic field's declared truth (``...synthetic.<field>``) is replaced whole: merging
    two probability tables would give one that sums to more than 1.
    """
    atomic = len(path) >= 2 and path[-2] == "synthetic"
    if isinstance(base, dict) and isinstance(override, dict) and not atomic:
        merged = dict(base)
        for key, value in override.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = deep_merge(base[key], value, (*path, key)) if key in base else value
        return merged
    return override
