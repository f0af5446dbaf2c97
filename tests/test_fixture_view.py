"""runner.trees.facts and runner.trees.staging.StagedFixture: a trial whose fixture is staged
reads none of its members, and gets the same answers as one that reads them all."""

from __future__ import annotations

import tarfile
from pathlib import Path

from runner.sandbox.base import AGENT_UID
from runner.trees.archives import SANDBOX_MTIME, ArchiveCaps, Member, build_tar
from runner.trees.cache import CacheDir
from runner.trees.declared import runner_config
from runner.trees.facts import BLOCK, FixtureView
from runner.trees.staging import StagedFixture, Staging

FILES = {
    "pyproject.toml": b'[tool.pytest.ini_options]\naddopts = "-q"\n',
    "setup.cfg": b"[metadata]\nname = x\n",
    "README.md": b"read me\n" * 1000,
    "pkg/__init__.py": b"",
    "pkg/core.py": b"def f():\n    return 1\n",
    "tests/conftest.py": b"import pytest\n",
    "tests/test_core.py": b"def test_f():\n    pass\n",
    "docs/conf.py": b"x = 1\n",
}
CAPS = ArchiveCaps()


def members() -> list[Member]:
    dirs = [Member(d, True, b"", False) for d in ("docs", "pkg", "tests")]
    files = [Member(p, False, d, p.endswith(".sh")) for p, d in FILES.items()]
    return dirs + files


class Loader:
    """A fixture loader that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> list[Member]:
        self.calls += 1
        return members()


def test_the_view_holds_paths_footprint_and_the_pristine_files_only() -> None:
    view = FixtureView.of(members())
    assert view.files == frozenset(FILES)
    expected = sum(-(-len(d) // BLOCK) * BLOCK + BLOCK for d in FILES.values()) + 3 * BLOCK
    assert view.footprint == expected
    assert set(view.pristine) == {
        "pyproject.toml",
        "setup.cfg",
        "pkg/__init__.py",
        "tests/conftest.py",
    }
    assert view.pristine["tests/conftest.py"].data == FILES["tests/conftest.py"]
    # pytest's settings come out the same from the view as from every member.
    assert runner_config(list(view.pristine.values())) == runner_config(members())


def test_the_view_round_trips_and_anything_else_reads_as_missing() -> None:
    view = FixtureView.of(members())
    assert FixtureView.from_bytes(view.to_bytes()) == view
    for junk in (b"", b"not json", b"[]", b'{"version": 99}', b'{"version": 1}'):
        assert FixtureView.from_bytes(junk) is None


def test_a_staged_fixture_is_read_once_per_machine_then_never(tmp_path: Path) -> None:
    staging = Staging(CacheDir(tmp_path / "cache"))
    first_load = Loader()
    first = StagedFixture("tar:k", first_load, staging, CAPS)
    view = first.view
    agent_tar = first.workspace_tar(("secret",))
    verify_tar = first.workspace_tar(())
    kit = first.baseline_tar(("secret",))
    assert first_load.calls == 1, "one read makes every entry"
    again_load = Loader()
    again = StagedFixture("tar:k", again_load, staging, CAPS)
    assert again.view == view
    assert again.workspace_tar(("secret",)) == agent_tar
    assert again.workspace_tar(()) == verify_tar
    assert again.baseline_tar(("secret",)) == kit
    assert again_load.calls == 0, "a trial with everything staged reads no member"
    assert isinstance(verify_tar, Path) and verify_tar.read_bytes() == build_tar(
        members(), uid=AGENT_UID, gid=AGENT_UID, mtime=SANDBOX_MTIME
    )


def test_other_archive_caps_read_the_members_again(tmp_path: Path) -> None:
    """Members are checked against the caps when read, so a run under other caps
    must not take a view that was made under looser ones."""
    staging = Staging(CacheDir(tmp_path / "cache"))
    made = StagedFixture("tar:k", Loader(), staging, CAPS).view
    tighter = Loader()
    assert StagedFixture("tar:k", tighter, staging, ArchiveCaps(max_members=50)).view == made
    assert tighter.calls == 1


def test_without_staging_the_same_tar_is_built_from_the_members(tmp_path: Path) -> None:
    staged = StagedFixture("tar:k", Loader(), Staging(CacheDir(tmp_path / "cache")), CAPS)
    load = Loader()
    plain = StagedFixture("tar:k", load, None, CAPS)
    built = plain.workspace_tar(("tests",))
    assert isinstance(built, bytes)
    path = staged.workspace_tar(("tests",))
    assert isinstance(path, Path) and path.read_bytes() == built
    assert plain.baseline_tar(()) is None, "no staging: the sandbox commits the baseline"
    assert plain.view == staged.view
    assert load.calls == 1
    with tarfile.open(path) as archive:
        assert not any(n.startswith("tests") for n in archive.getnames())


def test_a_cache_that_cannot_be_written_falls_back_to_reading(tmp_path: Path) -> None:
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache directory should be")
    load = Loader()
    fixture = StagedFixture("tar:k", load, Staging(CacheDir(blocker)), CAPS)
    assert fixture.view == FixtureView.of(members())
    assert isinstance(fixture.workspace_tar(()), bytes)
    assert fixture.baseline_tar(()) is None
    assert load.calls == 1


def test_an_empty_fixture_has_no_tar_without_staging() -> None:
    fixture = StagedFixture(None, lambda: [], None, CAPS)
    assert fixture.workspace_tar(()) is None
    assert fixture.view == FixtureView(frozenset(), 0, {})
