# ruff: noqa: F811  (pkg: the fixture of test_hostile_suites, imported to be shared)
"""Hostile suites, more variants (``test_hostile_suites`` holds the first ones and the
harness these share): files a suite names that are not regular files or claim sizes no
suite needs, run directories and kits read as input, and folders deltarun writes a suite
into. Each is driven through the real command line with no reachable Docker engine and
must end in one line and a fixed exit code, leave every outside file as it was and the
sentinel nowhere; none may wait on a FIFO or read a sparse file of terabytes.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.adversarial.test_hostile_suites import (  # noqa: F401  pkg is a fixture
    BAD,
    COMMANDS,
    Held,
    cli,
    edit_controls,
    edit_task,
    pkg,
    refused,
    sentinel_in,
    snapshot,
)

HUGE = 1 << 40  # a sparse file of a terabyte: costs its author nothing


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _hidden_fifo(pkg: Path) -> None:
    _fifo(pkg / "suite" / "hidden" / "t1.tar")


def _fixture_fifo(pkg: Path) -> None:
    _fifo(pkg / "suite" / "fixtures" / "t1.tar")


def _hidden_sparse(pkg: Path) -> None:
    os.truncate(pkg / "suite" / "hidden" / "t1.tar", HUGE)


def _fixture_sparse_gzip(pkg: Path) -> None:
    """A gzip header, then a terabyte of holes: a plain read never ends."""
    path = pkg / "suite" / "fixtures" / "t1.tar"
    path.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")
    os.truncate(path, HUGE)


def _tasks_fifo(pkg: Path) -> None:
    edit_controls(pkg, lambda c: c["suite"].update(sha256=BAD))
    _fifo(pkg / "suite" / "tasks.jsonl")


SPECIAL = {
    "hidden archive a FIFO": (_hidden_fifo, "hidden/t1.tar", "not a regular file"),
    "fixture archive a FIFO": (_fixture_fifo, "fixtures/t1.tar", "not a regular file"),
    "hidden archive a sparse terabyte": (_hidden_sparse, "hidden/t1.tar", "over the cap"),
    "fixture a sparse terabyte of gzip": (_fixture_sparse_gzip, "fixtures/t1.tar", "over the cap"),
    "tasks.jsonl a FIFO": (_tasks_fifo, "tasks.jsonl", "not a regular file"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("attack", sorted(SPECIAL))
def test_suite_files_are_regular_and_capped_before_a_read(
    tmp_path: Path, pkg: Path, held: Held, attack: str, command: str
) -> None:
    make, needle, reason = SPECIAL[attack]
    make(pkg)
    if "tasks.jsonl" not in attack:  # pinned as the hostile author would
        edit_task(pkg)
    args = COMMANDS[command](pkg, tmp_path)
    tried = f"deltarun {command} with {attack}"
    refused(tmp_path, held, f"suite file: {attack}", tried, args, needle, reason, codes=(1,))


def test_a_scored_run_reads_a_capped_validation_only(tmp_path: Path, pkg: Path, held: Held) -> None:
    """validation.json is read by a scored run; a FIFO there is refused, not waited on."""
    os.mkfifo(pkg / "suite" / "validation.json")

    def scored(c: dict[str, object]) -> None:
        c["channel"] = "scored"
        c["suite"]["validation"] = BAD  # type: ignore[index]

    edit_controls(pkg, scored)
    args = COMMANDS["run"](pkg, tmp_path)
    tried = "deltarun run, channel scored, suite/validation.json a FIFO"
    needles = ("validation.json", "not a regular file")
    refused(tmp_path, held, "suite file: validation.json a FIFO", tried, args, *needles, codes=(1,))


def _view_links_out(run: Path, out: Path) -> None:
    (run / "view").symlink_to(out / "work", target_is_directory=True)


def _bundle_climbs(run: Path, out: Path) -> None:
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "view_bundle": "../outside/work"}))


def _bundle_absolute(run: Path, out: Path) -> None:
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "view_bundle": str(out / "viewer")}))


def _page_links_out(run: Path, out: Path) -> None:
    (run / "view").mkdir()
    (run / "view" / "index.html").symlink_to(out / "secret.txt")


def _data_links_out(run: Path, out: Path) -> None:
    (run / "view" / "data").mkdir(parents=True)
    (run / "view" / "data" / "index.js").write_text("")
    (run / "view" / "data" / "trial").symlink_to(out / "work", target_is_directory=True)


VIEWER = {
    "view/ a link out": _view_links_out,
    "run.json view_bundle ../": _bundle_climbs,
    "run.json view_bundle absolute": _bundle_absolute,
    "view/index.html a link out": _page_links_out,
    "view/data/trial a link out": _data_links_out,
}


@pytest.mark.parametrize("attack", sorted(VIEWER))
def test_report_writes_the_viewer_only_into_the_run_directory(
    tmp_path: Path, pkg: Path, held: Held, attack: str
) -> None:
    """`deltarun report RUN_DIR` of someone else's run directory (a kit's run/): the viewer
    pages go into its own real folder, never through a link it ships nor where run.json's
    view_bundle climbs to. The report is still written; the viewer is one line saying why
    not."""
    from tests.test_report_input import make_run

    run = make_run(pkg)
    out = tmp_path / "outside"
    VIEWER[attack](run, out)
    before = snapshot(tmp_path)
    result = cli(tmp_path, "report", str(run))
    said = [line for line in result.stdout.splitlines() if line.startswith("viewer:")]
    held(f"run directory: {attack}", f"deltarun report on a run whose {attack}", said[0][:200])
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert len(said) == 1 and "not written" in said[0], result.stdout
    assert snapshot(tmp_path) == before
    assert not (out / "viewer").exists() and not any((out / "work").iterdir())


def _seed_kit(pkg: Path, out: Path) -> list[str]:
    from tests.test_seed_import import build_kit

    return ["import", "seed004", str(build_kit(pkg))]


def _swebench(pkg: Path, out: Path) -> list[str]:
    from tests.adversarial.test_hostile_suites import _instance

    (pkg / "instances.jsonl").write_text(json.dumps(_instance("owner/name")) + "\n")
    return ["import", "swebench", str(pkg / "instances.jsonl"), "--repos", str(pkg)]


IMPORTS = {"seed004": _seed_kit, "swebench": _swebench}


@pytest.mark.parametrize("target", ["an empty folder", "nothing"])
@pytest.mark.parametrize("kind", sorted(IMPORTS))
def test_an_import_never_writes_its_suite_through_an_out_link(
    tmp_path: Path, pkg: Path, held: Held, kind: str, target: str
) -> None:
    """The kit ships a link where the user points --out (inside the kit): the import makes
    its folder beside it and would rename it onto the link, or write into the folder the
    link names. Refused in one line naming the option, exit 2."""
    out = tmp_path / "outside"
    args = IMPORTS[kind](pkg, out)
    (out / "empty").mkdir()
    (pkg / "out").symlink_to(out / ("empty" if target == "an empty folder" else "new"))
    tried = f"deltarun import {kind} --out KIT/out, a link to {target} outside"
    attack = f"import: --out a link to {target}"
    refused(tmp_path, held, attack, tried, [*args, "--out", str(pkg / "out")], "--out", "link")
    assert not (out / "new").exists() and not any((out / "empty").iterdir())


def _kit_run_links_out(run: Path, kit: Path, out: Path) -> None:
    (out / "run").symlink_to(run, target_is_directory=True)
    (kit / "run").symlink_to(out / "run", target_is_directory=True)


def _controls_fifo(run: Path, kit: Path, out: Path) -> None:
    (run / "controls.yaml").unlink()
    os.mkfifo(run / "controls.yaml")


def _controls_links_out(run: Path, kit: Path, out: Path) -> None:
    (out / "controls.yaml").write_bytes((run / "controls.yaml").read_bytes())
    (run / "controls.yaml").unlink()
    (run / "controls.yaml").symlink_to(out / "controls.yaml")


def _ledger_fifo(run: Path, kit: Path, out: Path) -> None:
    (run / "trials.jsonl").unlink()
    os.mkfifo(run / "trials.jsonl")


def _report_links_out(run: Path, kit: Path, out: Path) -> None:
    """A replay compares the stored report with the rebuilt one: a link to a file of the
    user's would be read whole (and a FIFO waited on)."""
    (run / "report.md").symlink_to(out / "secret.txt")


def _kept_links_out(name: str) -> Callable[[Path, Path, Path], None]:
    def make(run: Path, kit: Path, out: Path) -> None:
        (run / name).symlink_to(out / "secret.txt")

    return make


BASELINES = {
    # (make it, the command's tail, exit code, what the line names)
    "kit run/ a link out": (_kit_run_links_out, "gate", 2, "run/"),
    "controls.yaml a FIFO": (_controls_fifo, "gate", 1, "not a regular file"),
    "controls.yaml a link out": (_controls_links_out, "gate", 2, "symbolic link"),
    "trials.jsonl a FIFO (replay)": (_ledger_fifo, "replay", 1, "not a regular file"),
    "trials.jsonl a FIFO (gate)": (_ledger_fifo, "gate", 1, "trials.jsonl"),
    "report.md a link out (replay)": (_report_links_out, "replay", 2, "report.md"),
    "decision.json a link out (replay)": (_kept_links_out("decision.json"), "replay", 2, "link"),
    "edits.json a link out (replay)": (_kept_links_out("edits.json"), "replay", 2, "link"),
    "controls.yaml a FIFO (status)": (_controls_fifo, "status", 1, "not a regular file"),
}


@pytest.mark.parametrize("attack", sorted(BASELINES))
def test_a_run_directory_read_as_input_is_held_and_bounded(
    tmp_path: Path, pkg: Path, held: Held, attack: str
) -> None:
    """Another run directory read as input (gate --baseline KIT, replay of a downloaded
    run): its files are regular, capped and inside it; a FIFO is not waited on."""
    from tests.test_report_input import make_run

    ours = make_run(tmp_path / "mine")
    base = make_run(pkg)
    kit = pkg / "kit"
    kit.mkdir()
    make, command, code, needle = BASELINES[attack]
    make(base, kit, tmp_path / "outside")
    target = kit if "kit" in attack else base
    args = ["gate", str(ours), "--baseline", str(target), "--non-inferiority", "0.05"]
    if command in ("replay", "status"):
        args = [command, str(target)]
    tried = f"deltarun {command} with a run directory whose {attack}"
    refused(tmp_path, held, f"run directory: {attack}", tried, args, needle, codes=(code,))


@pytest.mark.parametrize("attack", ["report.md a link out", "hidden archive a FIFO"])
def test_export_copies_only_regular_files_held_inside(
    tmp_path: Path, pkg: Path, held: Held, attack: str
) -> None:
    """`deltarun export` of someone else's run: a link in the run directory to a file of the
    user's (report.md to a key) would be copied into a kit meant to be shared; a FIFO in
    the suite would be waited on."""
    from tests.adversarial.test_hostile_suites import _prepared_run

    run = _prepared_run(pkg)
    if attack.startswith("report.md"):
        (run / "report.md").symlink_to(tmp_path / "outside" / "secret.txt")
        needles, code = ("report.md", "symbolic link"), 2
    else:
        _hidden_fifo(pkg)
        needles, code = ("hidden/t1.tar", "not a regular file"), 1
    args = ["export", str(run), "--kit", str(tmp_path / "kit")]
    tried = f"deltarun export of a run whose {attack}"
    refused(tmp_path, held, f"export: {attack}", tried, args, *needles, codes=(code,))
    assert not (tmp_path / "kit").exists()


def test_every_writer_of_the_controls_refuses_a_link(tmp_path: Path) -> None:
    """Each place that rewrites a controls file (seal's and build's pins, build's artifacts,
    an import's exclusions) checks the file itself, not only its caller: a link there is
    refused, the file it names left as it was."""
    from runner.errors import SuitePathError
    from runner.run.agent_build import pin_artifacts
    from runner.suite.sealing import write_controls
    from runner.swebench.workflow import write_exclude

    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("arms: [{agent: {}}]\nsuite: {}\n")
    link = tmp_path / "controls.yaml"
    link.symlink_to(secret)
    writers = {
        "write_controls": lambda: write_controls(link, "x: 1\n"),
        "pin_artifacts": lambda: pin_artifacts(link, {0: "0" * 64}),
        "write_exclude": lambda: write_exclude(link, ["t1"]),
    }
    for name, write in writers.items():
        with pytest.raises(SuitePathError, match="symbolic link"):
            write()
        assert secret.read_text() == "arms: [{agent: {}}]\nsuite: {}\n", name


def _session_run(pkg: Path, data: bytes | Path) -> Path:
    """A run directory whose first record names an installed agent's session archive:
    ``data`` as its bytes, or a link to the file ``data``."""
    from tests.test_report_input import make_run

    run = make_run(pkg)
    raw = data.read_bytes() if isinstance(data, Path) else gzip.compress(data)
    digest = hashlib.sha256(raw).hexdigest()
    (run / "sessions").mkdir()
    session = run / "sessions" / f"{digest}.tar.gz"
    session.symlink_to(data) if isinstance(data, Path) else session.write_bytes(raw)
    lines = (run / "trials.jsonl").read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "session_sha256": digest})
    (run / "trials.jsonl").write_text("\n".join(lines) + "\n")
    return run


def _long_name_tar() -> bytes:
    """A GNU long-name header announcing 128 KiB of name (tarfile reads a claim whole)."""
    name = b"a" * (128 << 10)
    header = tarfile.TarInfo("././@LongLink")
    header.type, header.size = tarfile.GNUTYPE_LONGNAME, len(name)
    member = tarfile.TarInfo("x")
    return header.tobuf(format=tarfile.GNU_FORMAT) + name + member.tobuf() + b"\0" * 1024


@pytest.mark.parametrize("attack", ["a long-name header", "a link out"])
def test_the_viewer_reads_a_session_archive_bounded_and_inside(
    tmp_path: Path, pkg: Path, held: Held, attack: str
) -> None:
    """`deltarun report` writes the viewer, which shows an installed agent's session files:
    the archive is the run directory's (a link out of it is not read, so no byte of the
    user's own tar reaches the pages) and its headers are bounded before tarfile reads."""
    out = tmp_path / "outside"
    if attack == "a link out":
        secret = out / "session.tar.gz"  # the user's own tar, the sentinel in it
        secret.write_bytes(gzip.compress((out / "secret.tar").read_bytes()))
        run = _session_run(pkg, secret)
    else:
        run = _session_run(pkg, _long_name_tar())
    before = snapshot(tmp_path)
    result = cli(tmp_path, "report", str(run))
    said = [line for line in result.stdout.splitlines() if line.startswith("viewer:")]
    held(f"viewer: session {attack}", f"deltarun report, a session archive with {attack}", said[0])
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert said and "not written" not in said[0], result.stdout
    page = (run / "view" / "data" / "trial" / "1.js").read_text()
    assert "unreadable session archive" in page
    assert ("symbolic link" if attack == "a link out" else "over the cap") in page
    assert snapshot(tmp_path) == before and sentinel_in(tmp_path) == []


LINKED = {
    # (the link in the package, its target outside, the command, what the line names)
    "run: controls.yaml a link out": ("controls.yaml", "run", "controls file"),
    "validate: controls.yaml a link out": ("controls.yaml", "validate", "controls file"),
    "validate PKG: controls.yaml a link out": ("controls.yaml", "validate-dir", "controls file"),
    "build: controls.yaml a link out": ("controls.yaml", "build", "controls file"),
    "validate FILE: tasks.jsonl a link out": ("suite/tasks.jsonl", "validate-file", "tasks.jsonl"),
}


@pytest.mark.parametrize("attack", sorted(LINKED))
def test_a_file_named_on_the_command_line_is_held_in_its_folder(
    tmp_path: Path, pkg: Path, held: Held, attack: str
) -> None:
    """The user names pkg/controls.yaml (or pkg/suite/tasks.jsonl); the package ships it as
    a link to the user's own suite outside: every path would then resolve there, and
    validate would write its checks and verdicts into that suite."""
    name, command, needle = LINKED[attack]
    (pkg / name).unlink()
    (pkg / name).symlink_to(tmp_path / "outside" / name)
    args = {
        "run": ["run", str(pkg / name), "--out", str(tmp_path / "run")],
        "validate": ["validate", str(pkg / name)],
        "validate-dir": ["validate", str(pkg)],
        "build": ["build", str(pkg / name)],
        "validate-file": ["validate", str(pkg / name)],
    }[command]
    tried = f"deltarun {' '.join(args[:1])} with {attack}"
    refused(tmp_path, held, f"named file: {attack}", tried, args, needle, "symbolic link")


@pytest.mark.parametrize("scalar", ["1" + ":59" * 300_000, "!!int '1" + ":59" * 300_000 + "'"])
def test_a_sexagesimal_integer_is_refused_before_it_is_built(
    tmp_path: Path, pkg: Path, held: Held, scalar: str
) -> None:
    """YAML 1.1 reads 1:59:59 as an integer in base 60, one multiplication at a time: 900 KB
    of it under the 1 MiB cap of a controls file took 39 s (a specs file, 16 MiB, hours)
    before the check of the value's digits could run."""
    import time

    with (pkg / "controls.yaml").open("a") as controls:
        controls.write(f"seed_note: {scalar}\n")
    started = time.monotonic()
    args = COMMANDS["seal"](pkg, tmp_path)
    tried = "deltarun seal, controls holding a 900 KB sexagesimal integer"
    refused(tmp_path, held, "controls: sexagesimal", tried, args, "a number of", codes=(1,))
    assert time.monotonic() - started < 20


def test_a_gzip_header_of_any_length_is_passed_over_at_c_speed(
    tmp_path: Path, pkg: Path, held: Held
) -> None:
    """A .tar.gz whose gzip header names a file of 64 MiB (under the archive cap): Python's
    gzip reads a name one byte at a time (about 8 s here, 70 s at the cap, per archive)."""
    import time

    fixture = pkg / "suite" / "fixtures" / "t1.tar"
    fixture.write_bytes(b"\x1f\x8b\x08\x08\x00\x00\x00\x00\x00\x03" + b"a" * (64 << 20))
    edit_task(pkg)
    started = time.monotonic()
    args = COMMANDS["seal"](pkg, tmp_path)
    tried = "deltarun seal, a fixture .tar.gz whose gzip header holds a 64 MiB file name"
    refused(
        tmp_path, held, "archive: gzip name", tried, args, "t1.tar", "not a readable", codes=(1,)
    )
    assert time.monotonic() - started < 5


def test_a_suite_of_too_many_task_lines_is_refused_before_they_are_validated(
    tmp_path: Path, pkg: Path, held: Held
) -> None:
    """128 MiB of minimal task lines is over a million tasks, several GB once validated:
    the count is checked as the lines are split, before the next one is parsed."""
    tasks = pkg / "suite" / "tasks.jsonl"
    tasks.write_text(tasks.read_text() + "0\n" * 100_000)
    args = COMMANDS["seal"](pkg, tmp_path)
    tried = "deltarun seal, a tasks.jsonl of 100,001 lines"
    needles = ("tasks.jsonl:100001", "more than 100000 tasks")
    refused(tmp_path, held, "suite: many task lines", tried, args, *needles, codes=(1,))


def test_a_folder_read_whole_is_walked_within_a_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare repository a suite ships is walked whole for links on every seal and run:
    past CLOSED_FOLDER_ENTRIES entries it is refused (here with the cap set to 5)."""
    import runner.paths
    from runner.errors import SuitePathError

    monkeypatch.setattr(runner.paths, "CLOSED_FOLDER_ENTRIES", 5)
    for index in range(6):
        (tmp_path / f"f{index}").write_text("")
    with pytest.raises(SuitePathError, match="more than 5 files and folders"):
        runner.paths.closed_folder(tmp_path, (), file="tasks.jsonl:1", field="repo.git")


def test_export_never_writes_a_kit_through_a_link(tmp_path: Path, pkg: Path, held: Held) -> None:
    """--kit names a link (the run directory's package ships it): refused, exit 2."""
    from tests.adversarial.test_hostile_suites import _prepared_run

    run = _prepared_run(pkg)
    (pkg / "kit").symlink_to(tmp_path / "outside" / "work", target_is_directory=True)
    args = ["export", str(run), "--kit", str(pkg / "kit")]
    tried = "deltarun export --kit PKG/kit, a link to an empty folder outside"
    refused(tmp_path, held, "export: --kit a link", tried, args, "--kit", "symbolic link")


def test_a_new_run_directory_is_never_a_link(tmp_path: Path, pkg: Path) -> None:
    """run --out PKG/runs/r1, a link the package ships to an empty folder of the user's:
    refused before anything is written there (checked past Docker's image digests, so in
    process, as test_hostile_suites._prepared_run does)."""
    from runner.errors import SuitePathError
    from runner.run.prepare import prepare

    out = tmp_path / "outside" / "work"
    (pkg / "r1").symlink_to(out, target_is_directory=True)
    with pytest.raises(SuitePathError, match=r"--out .*symbolic link"):
        prepare(pkg / "controls.yaml", pkg / "r1", resume=False, image_digest=lambda _: BAD)
    assert not any(out.iterdir())


def test_the_viewer_reads_no_report_through_a_link_out(tmp_path: Path, pkg: Path) -> None:
    """`deltarun view RUN --bundle DIR` shows report.md's headline: a report.md that is a
    link to a file of the user's is not read into the pages."""
    from tests.adversarial.test_hostile_suites import SENTINEL
    from tests.test_report_input import make_run

    run = make_run(pkg)
    secret = tmp_path / "outside" / "report.md"
    secret.write_text(f"# Report\n\n## Headline\n\n{SENTINEL}\n")
    (run / "report.md").symlink_to(secret)
    result = cli(tmp_path, "view", str(run), "--bundle", str(tmp_path / "bundle"))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert (tmp_path / "bundle" / "index.html").is_file()
    assert sentinel_in(tmp_path) == [] and SENTINEL not in result.stdout + result.stderr
