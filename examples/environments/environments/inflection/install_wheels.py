"""Install pure-Python wheels offline, without pip (the sandbox base has none).

Usage: python3 install_wheels.py REQUIREMENTS WHEEL_DIR

Every wheel in WHEEL_DIR must be pinned by a ``--hash=sha256:...`` in REQUIREMENTS
and every pin must have its wheel; each wheel must be pure Python (``Root-Is-Purelib:
true``, no ``.data`` folder). A wheel is a zip: its members are unpacked into the
system site-packages of this python3, refusing absolute or ``..`` paths.
"""

import hashlib
import re
import site
import sys
import zipfile
from pathlib import Path, PurePosixPath


def pinned_hashes(requirements: Path) -> set[str]:
    text = requirements.read_text(encoding="utf-8")
    return set(re.findall(r"--hash=sha256:([0-9a-f]{64})", text))


def check_pure(wheel: zipfile.ZipFile, name: str) -> None:
    for member in wheel.namelist():
        path = PurePosixPath(member)
        if path.is_absolute() or ".." in path.parts:
            sys.exit(f"install_wheels: {name}: unsafe member {member!r}")
        if path.parts[0].endswith(".data"):
            sys.exit(f"install_wheels: {name}: has a .data folder; only pure wheels install here")
    metadata = [m for m in wheel.namelist() if m.endswith(".dist-info/WHEEL")]
    if not metadata or b"Root-Is-Purelib: true" not in wheel.read(metadata[0]):
        sys.exit(f"install_wheels: {name}: not a pure-Python wheel")


def main(requirements: Path, wheels: Path) -> None:
    pins = pinned_hashes(requirements)
    found = {}
    for path in sorted(wheels.glob("*.whl")):
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest not in pins:
            sys.exit(f"install_wheels: {path.name}: sha256 {digest} is not pinned")
        found[digest] = path
    if set(found) != pins:
        sys.exit(f"install_wheels: no wheel for the pins {sorted(pins - set(found))}")
    target = Path(site.getsitepackages()[0])
    target.mkdir(parents=True, exist_ok=True)
    for path in found.values():
        with zipfile.ZipFile(path) as wheel:
            check_pure(wheel, path.name)
            wheel.extractall(target)
        print(f"installed {path.name} into {target}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
