"""The gateway's effective configuration: defaults, a TOML file, the environment, flags.

Every field of `GatewayConfig` can be set in a TOML file (`serve --config FILE`, top-level
keys named as the fields: `port = 8000`, `state = "sqlite:///state.db"`), in the
environment as DELTAGUARD_<FIELD> (`DELTAGUARD_PORT=8000`), or by a flag; later sources
win, in that order. An unknown key in the file is refused, naming it and the nearest
known key, so a typo never silently changes nothing. `deltaguard config [--file FILE]`
prints the result, one setting a line, with where each value came from.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from deltaguard.errors import DeltaGuardError
from deltaguard.gateway.config import GatewayConfig

ENV_PREFIX = "DELTAGUARD_"
SECRET_FIELDS = frozenset({"upstream_api_key", "api_keys", "metrics_api_key"})  # printed masked
# Read from the environment by the field's own default, in its own format
# (DELTAGUARD_API_KEYS="tenant-a:key1,tenant-b:key2"): a source "env" all the same.
OWN_ENV = frozenset({"upstream_api_key", "api_keys", "metrics_api_key"})


class ConfigError(DeltaGuardError):
    """A configuration file or value that cannot be used; the message names the key."""


def _nearest(key: str) -> str:
    near = difflib.get_close_matches(key, list(GatewayConfig.model_fields), n=1)
    return f" (did you mean {near[0]!r}?)" if near else ""


def read_file(path: Path) -> dict[str, Any]:
    """The settings of a TOML file; an unreadable file or an unknown key raises ConfigError."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    for key in data:
        if key not in GatewayConfig.model_fields:
            raise ConfigError(f"{path}: unknown key {key!r}{_nearest(key)}")
    return data


def _from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in GatewayConfig.model_fields:
        raw = environ.get(ENV_PREFIX + key.upper())
        if raw is None or key in OWN_ENV:
            continue
        try:  # lists, tables, numbers and booleans as JSON; anything else is the string itself
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def effective(
    file: Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[GatewayConfig, dict[str, str]]:
    """The configuration from defaults < `file` < the environment < `flags`, and per
    field where its value came from ("default", "file PATH", "env NAME", "flag")."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    layers = [
        (read_file(file) if file is not None else {}, f"file {file}"),
        (_from_env(environ), "env"),
        (dict(flags or {}), "flag"),
    ]
    for layer, source in layers:
        for key, value in layer.items():
            values[key] = value
            sources[key] = f"env {ENV_PREFIX}{key.upper()}" if source == "env" else source
    try:
        config = GatewayConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        raise ConfigError(f"{key} ({sources.get(key.split('.')[0], 'default')}): {err['msg']}") from exc
    for key in OWN_ENV - set(sources):
        if environ.get(ENV_PREFIX + key.upper()):
            sources[key] = f"env {ENV_PREFIX}{key.upper()}"
    return config, {key: sources.get(key, "default") for key in GatewayConfig.model_fields}


def describe(config: GatewayConfig, sources: Mapping[str, str]) -> list[str]:
    """One line per setting: `key = value  # source` (TOML values; secrets masked)."""
    lines = []
    for key in GatewayConfig.model_fields:
        value = getattr(config, key)
        if key in SECRET_FIELDS and value:
            shown = '"***"'
        elif value is None:
            lines.append(f"# {key} is unset  # {sources[key]}")
            continue
        else:
            shown = json.dumps(list(value) if isinstance(value, tuple) else value)
        lines.append(f"{key} = {shown}  # {sources[key]}")
    return lines
