"""runner.paths.inside / writable / own_folder: a path a suite names stays in the suite, and
deltarun never writes through a link a suite ships (DESIGN rule 6)."""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner.errors import SuitePathError, UserError
from runner.paths import closed_folder, inside, own_folder, under, writable


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """suite/ (the base) beside outside/; links in the suite lead in, out, and out-and-back."""
    suite, outside = tmp_path / "suite", tmp_path / "outside"
    (suite / "a" / "b").mkdir(parents=True)
    (suite / "a" / "b" / "f.tar").write_bytes(b"in")
    outside.mkdir()
    (outside / "secret").write_bytes(b"out")
    (outside / "back").symlink_to(suite / "a")
    (suite / "in").symlink_to("a/b")
    (suite / "out").symlink_to(outside)
    (suite / "out-file").symlink_to(outside / "secret")
    return suite


def test_a_plain_path_and_a_link_that_stays_inside_resolve(tree: Path) -> None:
    real = tree.resolve()
    assert inside(tree, "a/b/f.tar", file="t.jsonl:1", field="repo") == real / "a/b/f.tar"
    assert inside(tree, "in/f.tar", file="t.jsonl:1", field="repo") == real / "a/b/f.tar"
    assert inside(tree, "a/../a/./b", file="t.jsonl:1", field="repo") == real / "a/b"
    assert inside(tree, "missing/x", file="t.jsonl:1", field="repo") == real / "missing/x"


@pytest.mark.parametrize(
    ("relative", "how"),
    [
        ("../outside/secret", "climbs out of"),
        ("a/../../outside/secret", "climbs out of"),
        ("out/secret", "symbolic link out of"),
        ("out-file", "symbolic link out of"),
        ("out/back/b/f.tar", "symbolic link out of"),  # out and back in: still refused
        ("in/../../../outside", "climbs out of"),
    ],
)
def test_a_path_that_leaves_the_suite_is_one_line_naming_file_field_and_path(
    tree: Path, relative: str, how: str
) -> None:
    with pytest.raises(SuitePathError) as caught:
        inside(tree, relative, file="tasks.jsonl:3", field="hidden")
    message = str(caught.value)
    assert message.startswith(f"tasks.jsonl:3: hidden: {relative!r}: ")
    assert how in message and "\n" not in message
    assert caught.value.exit_code == 2 and isinstance(caught.value, UserError)


@pytest.mark.parametrize("relative", ["/etc/passwd", "", "a/\x00b"])
def test_absolute_empty_and_nul_paths_are_refused(tree: Path, relative: str) -> None:
    with pytest.raises(SuitePathError, match=r"controls\.yaml: suite\.file: "):
        inside(tree, relative, file="controls.yaml", field="suite.file")


def test_a_wider_root_lets_deltarun_own_controls_name_the_suite_beside_them(tree: Path) -> None:
    work = tree / "a" / ".work"
    work.mkdir()
    found = inside(work, "../b/f.tar", file="own.yaml", field="suite.file", root=tree)
    assert found == tree.resolve() / "a/b/f.tar"
    with pytest.raises(SuitePathError):
        inside(work, "../../out/secret", file="own.yaml", field="suite.file", root=tree)


PARTS = st.sampled_from(["a", "b", "..", ".", "in", "out", "out-file", "back", "f.tar", "x"])


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(PARTS, min_size=1, max_size=6))
def test_inside_never_returns_a_path_outside_and_agrees_with_the_os(
    tree: Path, parts: list[str]
) -> None:
    """Whatever the string: a returned path is the OS's own resolution of it and lies in the
    suite; a refusal means some prefix of it resolves (by the OS) outside the suite."""
    relative = "/".join(parts)
    real = Path(os.path.realpath(tree))
    prefixes = [os.path.realpath(tree / "/".join(parts[: i + 1])) for i in range(len(parts))]
    leaves = any(not Path(p).is_relative_to(real) for p in prefixes)
    try:
        found = inside(tree, relative, file="f", field="x")
    except SuitePathError:
        assert leaves, relative
        return
    assert not leaves, relative
    assert found.is_relative_to(real)
    assert str(found) == os.path.realpath(tree / relative)


def test_writable_refuses_a_link_at_the_file_or_on_the_way(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    (suite / "real").mkdir(parents=True)
    (tmp_path / "target").write_bytes(b"keep")
    (suite / "validation.json").symlink_to(tmp_path / "target")
    (suite / "linked").symlink_to(suite / "real")  # a link inside the suite: still a link
    (suite / "file").write_bytes(b"")
    what = "deltarun writes here"
    assert writable(suite, "new.json", what=what) == suite.resolve() / "new.json"
    assert writable(suite, "real/x/y", what=what) == suite.resolve() / "real/x/y"
    for relative in ("validation.json", "linked/x", "file/x", "../x", "/abs"):
        with pytest.raises(SuitePathError) as caught:
            writable(suite, relative, what=what)
        assert "\n" not in str(caught.value)
    with pytest.raises(SuitePathError, match=r"a symbolic link .* where deltarun writes here"):
        writable(suite, "linked", what=what)
    assert (tmp_path / "target").read_bytes() == b"keep"


def test_own_folder_is_made_real_and_never_a_link(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    made = own_folder(suite, ".work", what="deltarun keeps its checks")
    assert made.is_dir() and not made.is_symlink()
    assert own_folder(suite, ".work", what="again") == made
    (tmp_path / "elsewhere").mkdir()
    (suite / ".linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SuitePathError, match="symbolic link"):
        own_folder(suite, ".linked", what="deltarun keeps its checks")
    (suite / ".file").write_bytes(b"")
    with pytest.raises(SuitePathError):
        own_folder(suite, ".file", what="deltarun keeps its checks")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_posix_normalisation_is_not_what_decides(tree: Path) -> None:
    # Lexically "out/.." is "."; the OS takes ".." from where the link leads, outside.
    assert posixpath.normpath("out/../a") == "a"
    with pytest.raises(SuitePathError):
        inside(tree, "out/../a", file="f", field="x")


def test_under_keeps_a_name_under_the_users_folder_and_leaves_their_links(tmp_path: Path) -> None:
    repos = tmp_path / "repos"
    (tmp_path / "src" / "click").mkdir(parents=True)
    repos.mkdir()
    (repos / "pallets__click").symlink_to(tmp_path / "src" / "click")  # the user's own link
    found = under(repos, "pallets__click", file="i.jsonl: instance 'x'", field="repo")
    assert found == repos / "pallets__click" and found.resolve() == tmp_path / "src" / "click"
    for relative in ("../outside", "a/../../b", "/etc", ""):
        with pytest.raises(SuitePathError, match=r"i\.jsonl: instance 'x': repo: "):
            under(repos, relative, file="i.jsonl: instance 'x'", field="repo")


def test_closed_folder_refuses_a_link_or_a_pointer_anywhere_in_it(tmp_path: Path) -> None:
    repo = tmp_path / "calc.git"
    (repo / "objects" / "info").mkdir(parents=True)
    (repo / "HEAD").write_text("ref: refs/heads/main\n")
    pointers = ("objects/info/alternates",)
    closed_folder(repo, pointers, file="tasks.jsonl:1", field="repo.git")  # nothing leads out
    (repo / "objects" / "info" / "alternates").write_text("/elsewhere/objects\n")
    with pytest.raises(
        SuitePathError, match=r"tasks\.jsonl:1: repo\.git: .*holds objects/info/alternates"
    ):
        closed_folder(repo, pointers, file="tasks.jsonl:1", field="repo.git")
    (repo / "objects" / "info" / "alternates").unlink()
    (repo / "objects" / "pack").symlink_to(tmp_path)
    with pytest.raises(SuitePathError, match=r"objects/pack is a symbolic link"):
        closed_folder(repo, pointers, file="tasks.jsonl:1", field="repo.git")
