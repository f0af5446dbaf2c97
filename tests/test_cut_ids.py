"""A pytest id SWE-bench's log parser cut at a space (its issue #290: ``test_x[a b]``
logged, ``test_x[a`` kept; Verified holds 662 such ids), declared as SWE-bench has it, on
the real engine: the harness's plugin selects every test it prefixes, gold resolves, the
fixture as it is misses, and a test outside the prefix is not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ADD_FIXTURE, ADD_GOLD, make_suite, repo_task
from tests.test_runner_unittest import ARMS, trials

pytestmark = pytest.mark.docker

HIDDEN = {
    "tests/test_hidden.py": (
        "import pytest\n\nfrom calc import add\n\n\n"
        "@pytest.mark.parametrize('words', ['a b', 'a b c'])\n"
        "def test_add(words):\n    assert add(len(words), 1) == len(words) + 1\n\n\n"
        "@pytest.mark.parametrize('words', ['b a'])\n"
        "def test_other(words):\n    assert False, 'not declared: never run'\n"
    ),
}


def test_an_id_cut_at_a_space_selects_the_tests_it_prefixes(tmp_path: Path) -> None:
    task = {**repo_task("cut"), "hidden_tests": ["tests/test_hidden.py::test_add[a"]}
    (tmp_path / "gold").mkdir()
    (tmp_path / "gold" / "cut.diff").write_text(ADD_GOLD)
    controls = make_suite(
        tmp_path, [task], ARMS, fixtures={"cut": ADD_FIXTURE}, hidden={"cut": HIDDEN}
    )
    found = trials(tmp_path, controls)
    gold, ctrl = found[("cut", "gold")], found[("cut", "ctrl")]
    assert gold["outcome"] == "success", (gold["reason"], gold["verify_log"][-1500:])
    assert "test_other" not in gold["verify_log"]
    assert ctrl["outcome"] == "miss", ctrl["reason"]
    assert "test_add[a b" in ctrl["reason"], ctrl["reason"]
