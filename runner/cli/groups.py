"""Option groups: options several commands share, declared once as the fields of a frozen
dataclass (``OptionGroup``) and taken by a command as one parameter of that type.

Typer has no such thing (fastapi/typer#154, #264), so ``takes_groups`` does it the way
cyclopts flattens a dataclass parameter: the signature Typer reads from the command has
the group's options in the group parameter's place (in field order, so ``--help`` lists
them there), and the command is called with the group built from their values. Each option
is named ``<parameter>_<field>`` inside the command line parser; its flags, default and
help are the field's.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, TypeVar

Result = TypeVar("Result")


class OptionGroup:
    """Base of the option groups: a frozen dataclass whose every field is
    ``Annotated[type, typer.Option(...)]`` with a default."""


def _is_group(annotation: object) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, OptionGroup)


def _fields(group: type[OptionGroup], prefix: str) -> dict[str, inspect.Parameter]:
    """The group's fields as keyword parameters named ``<prefix>_<field>``, by field name."""
    if not dataclasses.is_dataclass(group):
        raise TypeError(f"{group.__name__}: an OptionGroup must be a dataclass")
    hints = typing.get_type_hints(group, include_extras=True)
    found = {}
    for field in dataclasses.fields(group):
        if field.default is dataclasses.MISSING:
            raise TypeError(f"{group.__name__}.{field.name}: an option needs a default")
        found[field.name] = inspect.Parameter(
            f"{prefix}_{field.name}",
            inspect.Parameter.KEYWORD_ONLY,
            default=field.default,
            annotation=hints[field.name],
        )
    return found


def takes_groups(command: Callable[..., Result]) -> Callable[..., Result]:
    """``command`` as Typer should see it: each parameter whose type is an ``OptionGroup``
    replaced by the group's options, and called with the group made of their values.
    Apply it under ``@app.command()``."""
    signature = inspect.signature(command, eval_str=True)
    flat: list[inspect.Parameter] = []
    groups: dict[str, tuple[type[OptionGroup], dict[str, str]]] = {}
    for param in signature.parameters.values():
        if not _is_group(param.annotation):
            flat.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY))
            continue
        fields = _fields(param.annotation, param.name)
        groups[param.name] = (param.annotation, {f: p.name for f, p in fields.items()})
        flat.extend(fields.values())
    names = [param.name for param in flat]
    clashes = sorted({name for name in names if names.count(name) > 1})
    if clashes:
        raise TypeError(f"{command.__name__}: option names given twice: {', '.join(clashes)}")

    @functools.wraps(command)
    def called(**values: Any) -> Result:
        for name, (group, fields) in groups.items():
            values[name] = group(**{field: values.pop(key) for field, key in fields.items()})
        return command(**values)

    called.__signature__ = signature.replace(parameters=flat)  # type: ignore[attr-defined]
    called.__annotations__ = {p.name: p.annotation for p in flat}
    return called
