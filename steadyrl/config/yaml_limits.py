"""Limits on a YAML document before it becomes Python data: a config file is untrusted input.

A few hundred bytes of nested aliases (a "billion laughs" document: nine levels of nine
``*alias`` each) stand for 9**9 values. PyYAML builds them as shared references, fast, but
everything that walks the data afterwards (validation, copying, dumping) visits each one:
minutes of CPU for a 530-byte file. :func:`check_expansion` counts, on the composed node graph,
how many values the document expands to, counting each distinct node once (memoised), and
refuses past :data:`MAX_YAML_NODES`; it also refuses an alias used inside its own anchor (a
cycle, which nothing downstream could walk). Anchors, aliases and merge keys (``<<: *base``)
of an ordinary size load as before.

An integer of thousands of digits is refused too (:func:`check_int_text`): Python will not even
read one of more than 4,300 decimal digits (``int()`` raises), nor print one, and no setting needs
more than :data:`MAX_INT_CHARS`.
"""

from __future__ import annotations

import yaml

MAX_YAML_NODES = 100_000
"""Most values a document may expand to, an alias counted each time it is used. A config holds
a few hundred."""


MAX_INT_CHARS = 100
"""Most characters an integer in a config may have (10**99 is more than any count or size)."""


class NumberTooLongError(yaml.constructor.ConstructorError):
    """An integer written with more than :data:`MAX_INT_CHARS` characters; ``digits`` counts them."""

    def __init__(self, digits: int, mark):
        super().__init__(None, None, f"an integer of {digits} digits; a config value has at most "
                                     f"{MAX_INT_CHARS}", mark)
        self.digits = digits


def check_int_text(node: yaml.ScalarNode) -> None:
    """Raise :class:`NumberTooLongError` for an integer scalar of more than :data:`MAX_INT_CHARS`
    characters (before ``int()`` sees it)."""
    digits = sum(ch.isalnum() for ch in str(node.value))
    if digits > MAX_INT_CHARS:
        raise NumberTooLongError(digits, node.start_mark)


class AliasBombError(yaml.constructor.ConstructorError):
    """A document whose aliases expand past :data:`MAX_YAML_NODES` values, or refer to themselves."""


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def check_expansion(root: yaml.Node) -> int:
    """How many nodes ``root`` stands for with every alias written out, counted without writing
    them out; iterative, so a deeply nested document cannot overflow the stack here. Raises
    :class:`AliasBombError` past :data:`MAX_YAML_NODES`, or for an alias inside its own anchor."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if not children_done:
            if id(node) in open_nodes:
                raise AliasBombError(None, None, "an alias refers to the anchor it is inside of (a cycle)",
                                     node.start_mark)
            open_nodes.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
            continue
        open_nodes.discard(id(node))
        sizes[id(node)] = 1 + sum(sizes[id(child)] for child in _children(node))
        if sizes[id(node)] > MAX_YAML_NODES:
            raise AliasBombError(None, None, f"its aliases expand to more than {MAX_YAML_NODES:,} values "
                                 "(nested aliases, a 'billion laughs' document)", node.start_mark)
    return sizes[id(root)]
