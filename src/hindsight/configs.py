"""Method configurations: typed dataclasses read from YAML with `key=value` overrides.

Each method has one frozen config dataclass. Every field carries its documentation once,
in `field(metadata={"help": ...})`; `describe(cls)` prints it and the loader rejects
unknown keys with the list of known ones, so a typo never silently falls back to a
default.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

from hindsight.registry import UnknownName

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration that cannot be used: unknown key, wrong type, unreadable file."""


def option(default: Any, help: str, **kwargs: Any) -> Any:
    """A documented config field."""
    if isinstance(default, (list, dict, set)):
        return dataclasses.field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return dataclasses.field(default=default, metadata={"help": help}, **kwargs)


def _coerce(name: str, value: Any, annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for candidate in (a for a in args if a is not type(None)):
            try:
                return _coerce(name, value, candidate)
            except ConfigError:
                continue
        raise ConfigError(f"{name}: {value!r} does not fit {annotation}")
    if annotation is Any:
        return value
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{name}: expected true/false, got {value!r}")
    if annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(f"{name}: expected an integer, got {value!r}")
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            # YAML 1.1 reads `1e-4` (no dot) as text; users mean a number.
            try:
                return float(value)
            except ValueError:
                pass
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    if annotation is str:
        if value is None:  # `--set final_eval_split=` or an empty YAML value: empty text, as written
            return ""
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{name}: expected text, got {value!r}")
    if origin in (dict, Mapping) or annotation is dict:
        if isinstance(value, dict):
            return dict(value)
        raise ConfigError(f"{name}: expected a mapping, got {value!r}")
    if origin in (list, tuple) or annotation in (list, tuple):
        if isinstance(value, (list, tuple)):
            item = args[0] if args else Any
            return type(value)(_coerce(name, v, item) for v in value) if origin is list else tuple(
                _coerce(name, v, item) for v in value
            )
        raise ConfigError(f"{name}: expected a list, got {value!r}")
    return value


def from_mapping(cls: type[T], values: Mapping[str, Any]) -> T:
    """Build a config dataclass, checking every key and value type."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    unknown = [key for key in values if key not in fields]
    if unknown:
        suggestion = difflib.get_close_matches(unknown[0], list(fields), n=1)
        hint = f" (did you mean {suggestion[0]!r}?)" if suggestion else ""
        raise ConfigError(f"unknown {cls.__name__} key {unknown[0]!r}{hint}; known keys: {', '.join(fields)}")
    coerced = {key: _coerce(key, value, hints[key]) for key, value in values.items()}
    try:
        return cls(**coerced)
    except (TypeError, ValueError, UnknownName) as exc:  # UnknownName: a name no registry has
        raise ConfigError(f"{cls.__name__}: {exc}") from None


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """`key=value` strings with YAML-typed values (`lr=1e-5` is a float, `env=sudoku` text)."""
    result: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected KEY=VALUE, got {pair!r}")
        try:
            result[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            result[key.strip()] = value
    return result


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Read a YAML file (optional) and apply `key=value` overrides."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML ({exc})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of keys to values")
        values.update(loaded or {})
    values.update(parse_overrides(overrides))
    return from_mapping(cls, values)


def describe(cls: type) -> str:
    """One line per field: name, default and documentation."""
    lines = []
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        lines.append(f"{f.name} (default {default!r}): {f.metadata.get('help', '')}")
    return "\n".join(lines)
