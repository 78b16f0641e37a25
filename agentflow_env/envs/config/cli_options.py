"""Command-line options from config fields: ``cli_option`` (how one setting is given),
``add_config_arguments`` (one option per setting) and ``settings_from_args``."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin

from agentflow_env.envs.config.choices import SECTIONS
from agentflow_env.envs.config.fields import is_literal, is_sequence, type_hints, union_members
from agentflow_env.envs.config.shared import EnvConfig


@dataclass(frozen=True)
class CliOption:
    """How a setting is given on a command line: a switch, a value or a comma-separated list."""

    kind: Literal["flag", "value", "list"]
    parse: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    takes_none: bool = False  # "none" gives None (an optional setting whose default is not)


def _scalar(hint: Any) -> Any:
    """The command-line scalar a type offers: a ``Literal``, ``int``, ``float`` or ``str``."""
    members = [m for m in union_members(hint) if m is not type(None)]
    literals = [m for m in members if is_literal(m)]
    if literals:
        return literals[0]
    for kind in (int, float, str):
        if kind in members:
            return kind
    if any(get_origin(m) is os.PathLike for m in members):
        return str
    return None


def _list_items(hint: Any) -> Any:
    """The item type of the list a type offers (``None`` if it offers none)."""
    sequences = [m for m in union_members(hint) if is_sequence(m)]
    return _scalar(get_args(sequences[0])[0]) if sequences else None


def cli_option(item: dataclasses.Field, hint: Any) -> CliOption | None:
    """How setting ``item`` (of type ``hint``) is given on a command line; ``None`` when only
    Python can give it (objects such as a task source or a judge)."""
    members = union_members(hint)
    if "choices" in item.metadata:  # a registry's names, as they are now
        return CliOption("value", choices=tuple(str(c) for c in item.metadata["choices"]()))
    if bool in members:
        return CliOption("flag")
    if any(is_sequence(m) for m in members):
        items = _list_items(hint)
        if items is None:
            return None
        parse = _int_parser(None, False) if items is int else str
        return CliOption("list", _list_parser(parse))
    scalar = _scalar(hint)
    if scalar is None:
        return None
    if is_literal(scalar):
        return CliOption("value", choices=tuple(str(c) for c in get_args(scalar)))
    takes_none = type(None) in members and item.default is not None
    minimum = item.metadata.get("minimum")
    if scalar is int:
        return CliOption("value", _int_parser(minimum, takes_none), takes_none=takes_none)
    if scalar is float:
        return CliOption("value", _float_parser(minimum))
    return CliOption("value", str)


def _int_parser(minimum: float | None, takes_none: bool) -> Callable[[str], int | None]:
    wanted = "a positive integer" if minimum == 1 else "an integer"
    if minimum is not None and minimum != 1:
        wanted = f"an integer >= {minimum}"
    wanted += " or none" * takes_none

    def parse(text: str) -> int | None:
        if takes_none and text.strip().lower() == "none":
            return None
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    return parse


def _float_parser(minimum: float | None) -> Callable[[str], float]:
    wanted = "a number" if minimum is None else f"a number >= {minimum}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or (minimum is not None and value < minimum):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text!r}")
        return value

    return parse


def _list_parser(parse: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    """``a,b,c``, or a JSON list (``[...]``) whose objects pass through whole (e.g. a tool's
    options: ``[{"name": "Search", "rename": "Lookup"}]``)."""

    def parse_list(text: str) -> tuple[Any, ...]:
        if text.lstrip().startswith("["):
            try:
                items = json.loads(text)
            except json.JSONDecodeError as error:
                raise argparse.ArgumentTypeError(f"not a JSON list ({error.msg})") from None
            if not isinstance(items, list):
                raise argparse.ArgumentTypeError("not a JSON list")
            return tuple(parse(i) if isinstance(i, str) else i for i in items)
        return tuple(parse(part.strip()) for part in text.split(",") if part.strip())

    return parse_list


def _shown(value: Any, meta: Mapping[str, Any]) -> str | None:
    """A default as the help shows it (``None`` when there is nothing to show)."""
    if value is None:
        return meta.get("none_means")
    if value is False:
        return None
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _per_variant(values: Mapping[str, str | None]) -> str | None:
    """One text when every variant agrees, else ``text on variant, variant; ...`` (the variants
    that share a text named together, in order)."""
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    groups: dict[str, list[str]] = {}
    for env_id, text in values.items():
        if text is not None:
            groups.setdefault(text, []).append(env_id)
    return "; ".join(f"{text} on {', '.join(env_ids)}" for text, env_ids in groups.items())


def add_config_arguments(
    parser: argparse.ArgumentParser,
    configs: Mapping[str, type[EnvConfig]],
    *,
    only: Sequence[str] | None = None,
    exclude: Sequence[str] = (),
    flags: Mapping[str, str] | None = None,
    shown_defaults: Mapping[str, str] | None = None,
    required: Sequence[str] = (),
    title: str = "env settings",
) -> tuple[str, ...]:
    """Add one option per setting of ``configs`` (env id -> config class) to ``parser``, in one
    argument group per section; returns the settings added (each option's ``dest`` is its
    setting's name; read them back with ``settings_from_args``).

    An option is ``--name-with-dashes`` (or ``flags[name]``), typed from the field: a ``Literal``
    gives choices, a list is comma-separated, a ``bool`` is a switch, an optional number whose
    default is not ``None`` also takes ``none``. Options default to absent, so only what the user
    gave reaches the env; the help shows the config's default (``shown_defaults`` overrides what
    it says) and says which variants have a setting when not all do. Settings only Python can
    give (objects) get no option.
    """
    flags = flags or {}
    owners: dict[str, list[str]] = {}
    for env_id, cls in configs.items():
        for name in cls.settings():
            owners.setdefault(name, []).append(env_id)
    names = [n for n in owners if (only is None or n in only) and n not in exclude]
    groups: dict[str, Any] = {}
    added: list[str] = []
    for section in SECTIONS:
        for name in names:
            first = configs[owners[name][0]]
            item = first.__dataclass_fields__[name]
            option = cli_option(item, type_hints(first)[name])
            if item.metadata["section"] != section or option is None:
                continue
            if section not in groups:
                groups[section] = parser.add_argument_group(f"{title}: {section}")
            kwargs = _argument_kwargs(name, option, owners[name], configs, shown_defaults or {})
            flag = flags.get(name, "--" + name.replace("_", "-"))
            if option.kind != "flag" and option.choices is None:
                kwargs["metavar"] = flag.lstrip("-").replace("-", "_").upper()
            groups[section].add_argument(
                flag,
                dest=name,
                required=name in required,
                default=argparse.SUPPRESS,
                **kwargs,
            )
            added.append(name)
    return tuple(added)


def _argument_kwargs(
    name: str,
    option: CliOption,
    env_ids: Sequence[str],
    configs: Mapping[str, type[EnvConfig]],
    shown_defaults: Mapping[str, str],
) -> dict[str, Any]:
    fields = {env_id: configs[env_id].__dataclass_fields__[name] for env_id in env_ids}
    hints = {env_id: type_hints(configs[env_id])[name] for env_id in env_ids}
    meta = fields[env_ids[0]].metadata
    text = meta["help"]
    if option.kind == "list":
        text += ", comma-separated"
        items = {e: _list_items(hint) for e, hint in hints.items()}
        if all(is_literal(i) for i in items.values()):
            text += ": " + str(_per_variant({e: ",".join(get_args(i)) for e, i in items.items()}))
    if option.takes_none:
        text += f"; none: {meta['none_means']}"
    if len(env_ids) < len(configs):
        text += f" ({', '.join(env_ids)} only)"
    default = shown_defaults.get(name) or _per_variant(
        {env_id: _shown(item.default, item.metadata) for env_id, item in fields.items()}
    )
    if default:
        text += f" (default: {default})"
    kwargs: dict[str, Any] = {"help": text.replace("%", "%%")}
    if option.kind == "flag":
        kwargs["action"] = argparse.BooleanOptionalAction  # --name and --no-name
    elif option.choices is not None:
        choices = list(option.choices)
        for hint in hints.values():
            choices += [str(c) for c in get_args(_scalar(hint)) if str(c) not in choices]
        kwargs["choices"] = choices
    else:
        kwargs["type"] = option.parse
    return kwargs


def settings_from_args(args: argparse.Namespace, names: Sequence[str]) -> dict[str, Any]:
    """The settings among ``names`` that the command line gave."""
    return {name: getattr(args, name) for name in names if hasattr(args, name)}
