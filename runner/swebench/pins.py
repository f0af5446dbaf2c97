"""Unpinned ``pip_packages`` of a specs file, pinned once at import.

SWE-bench's own specs name some packages without a version (sympy's lists
``flake8-comprehensions``) or with a range (``name>=x``). A suite pins everything it runs,
so the import asks this machine's pip once, for the environment's Python, which version it
would fetch for each such requirement, and writes that exact pin into the suite (the
environment's Dockerfile and the wheels in its context): one warning line per package
names the specs file, the repo and version, the requirement and the pin chosen. The same
requirement for the same Python is asked once per import. A requirement pip cannot meet
is one error line naming the file, the field and the fix.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from runner.errors import UserError
from runner.swebench.specs import PIN_RE, REQUIREMENT_RE, Specs
from runner.swebench.wheels import download, last_line, python_of

# A wheel's file name: distribution, version, optional build tag, then three tags.
_WHEEL = re.compile(r"\A(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl\Z")
_VERSION = re.compile(r"\A[A-Za-z0-9.+!_]+\Z")


def pin_specs(specs: Specs, used: Iterable[tuple[str, str]], say: Callable[[str], None]) -> Specs:
    """``specs`` with every requirement of the specs ``used`` (repo, version) that is not
    an exact pin replaced by the pin pip resolves now; one warning per requirement pinned."""
    by_key = dict(specs.by_key)
    resolved: dict[tuple[str, tuple[int, int]], str] = {}
    for key in sorted(set(used) & set(by_key)):
        spec = by_key[key]
        if not spec.unpinned:
            continue
        python = python_of(spec)
        where = f"{specs.source}: {key[0]} {key[1]}"
        pins = []
        for requirement in spec.pip_packages:
            if PIN_RE.fullmatch(requirement):
                pins.append(requirement)
                continue
            if (requirement, python) not in resolved:
                resolved[(requirement, python)] = resolve(requirement, python, where)
            pin = resolved[(requirement, python)]
            say(
                f"warning: {where}: pip_packages {requirement!r} is not an exact pin; pinned "
                f"{pin} (what pip fetches for Python {python[0]}.{python[1]} now); write the "
                "pin into the specs file to keep it"
            )
            pins.append(pin)
        by_key[key] = replace(spec, pip_packages=tuple(pins))
    return Specs(by_key, specs.warnings, specs.source)


def resolve(requirement: str, python: tuple[int, int], where: str) -> str:
    """The exact pin (``name[extras]==version``) of ``requirement``: the version of the one
    wheel pip downloads for it, for CPython ``python``."""
    found = REQUIREMENT_RE.fullmatch(requirement)
    assert found is not None  # checked when the specs were parsed
    fix = (
        f"pin it (name==version) in the specs file, or make a wheel for Python "
        f"{python[0]}.{python[1]} reachable to this machine's pip"
    )
    with tempfile.TemporaryDirectory(prefix="deltarun-pin-") as work:
        done = download([requirement], Path(work), python)
        if done.returncode != 0:
            raise UserError(
                f"{where}: pip_packages {requirement!r}: pip found no wheel for Python "
                f"{python[0]}.{python[1]} ({last_line(done.stderr)}); {fix}"
            )
        wheels = sorted(p.name for p in Path(work).iterdir() if p.name.endswith(".whl"))
    named = _WHEEL.fullmatch(wheels[0]) if len(wheels) == 1 else None
    if (
        named is None
        or not _VERSION.fullmatch(named["version"])
        or _normal(named["name"]) != _normal(found["name"].split("[")[0])
    ):
        raise UserError(
            f"{where}: pip_packages {requirement!r}: pip gave {', '.join(wheels) or 'nothing'}, "
            f"not one wheel whose name says its version; {fix}"
        )
    return f"{found['name']}=={named['version']}"


def _normal(name: str) -> str:
    """A distribution name as PEP 503 compares it (a wheel's file name writes ``_``)."""
    return re.sub(r"[-_.]+", "-", name).lower()
