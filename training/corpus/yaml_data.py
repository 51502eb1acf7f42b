"""The wheels' YAML data files, read with PyYAML.

A safe loader with two changes, so that what a file says is what the corpus gets: plain
scalars that look like dates stay text (agentdojo's environments are rendered back into
tool outputs, and a date must read as written), and a tag such as `!include x` becomes
{"!include": "x"} (agentdojo's environments include other files by name).
"""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["loads"]

_TIMESTAMP = "tag:yaml.org,2002:timestamp"


class _Loader(yaml.SafeLoader):
    pass


_Loader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _TIMESTAMP]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_constructor("!include", lambda loader, node: {"!include": loader.construct_scalar(node)})


def loads(text: str) -> Any:
    """The document in `text` (one YAML document)."""
    return yaml.load(text, Loader=_Loader)  # a SafeLoader: no arbitrary objects
