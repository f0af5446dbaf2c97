"""The screen of a suite's environment Dockerfile (``runner.suite.dockerfile_screen``): what
the field writes passes; every way of naming something outside the context and the base
is refused on its line, however the text is split, escaped, quoted or encoded."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.sandbox.image_config import (
    trigger_refusal,
    triggers,
    volume_refusal,
    volumes,
)
from runner.suite.dockerfile_screen import ESCAPES, first_problem, instructions
from runner.swebench.specs import Spec, dockerfile

ROOT = Path(__file__).resolve().parents[1]
BASE_TAG = "deltarun/sandbox-python:bookworm"
BASE_ID = "sha256:" + "a" * 64
BASES = (BASE_TAG, BASE_ID)
HEAD = "ARG BASE\nFROM ${BASE}\n"

ALLOWED = {
    "the base and the context": HEAD + "COPY a /b\nADD wheels.tar /opt/\nRUN echo hi\n",
    "the base by its tag": f"FROM {BASE_TAG}\nUSER root\n",
    "the base by its ID": f"FROM {BASE_ID}\n",
    "$BASE unbraced": "ARG BASE\nFROM $BASE\n",
    "earlier stages by name and index": HEAD.replace("}", "} AS build")
    + "RUN make\nFROM ${BASE}\nCOPY --from=build /x /y\nCOPY --from=0 /x /z\n",
    "stage names are case-insensitive": "ARG BASE\nFROM ${BASE} AS Build\nFROM build\n",
    "flags that stay inside": HEAD + "COPY --chown=1000:1000 --chmod=644 a /b\n"
    "ADD --chown=0:0 a.tar /opt/\n",
    "a URL in a RUN step (the build's network decides)": HEAD + "RUN echo http://example\n",
    "a URL in a comment": HEAD + "# ADD http://127.0.0.1/x /y\n",
    "a COPY source with a variable": HEAD + "ARG F=a\nCOPY $F /b\n",
    "scratch": "FROM scratch\nCOPY a /a\n",
}

# name -> (Dockerfile, the line refused, a word of the reason)
REFUSED = {
    "ADD of a URL": (HEAD + "ADD http://127.0.0.1:1/x /y\n", 3, "remote source"),
    "ADD of https, upper case": (HEAD + "add HTTPS://127.0.0.1/x /y\n", 3, "remote source"),
    "ADD of a git remote": (HEAD + "ADD git@127.0.0.1:a/b.git /y\n", 3, "remote source"),
    "ADD with escaped slashes": (HEAD + "ADD http:\\/\\/127.0.0.1/x /y\n", 3, "remote"),
    "ADD with quotes inside": (HEAD + 'ADD "ht"tp://127.0.0.1/x /y\n', 3, "remote source"),
    "ADD in JSON with a \\u escape": (
        HEAD + 'ADD ["http\\u003a//127.0.0.1/x", "/y"]\n',
        3,
        "remote source",
    ),
    "ADD split over lines": (
        HEAD + "AD\\\nD htt\\\n# a comment\n\np://127.0.0.1/x /y\n",
        3,
        "remote",
    ),
    "ADD under the backtick escape": (
        "# escape=`\n" + HEAD + "AD`\nD http://127.0.0.1/x /y\n",
        4,
        "remote source",
    ),
    "ADD behind a byte order mark": ("\ufeffADD http://127.0.0.1/x /y\n", 1, "remote"),
    "ADD of a variable": (HEAD + "ARG U=http://127.0.0.1/x\nADD $U /y\n", 4, "variable"),
    "ADD of a braced variable in JSON": (HEAD + 'ADD ["${U}", "/y"]\n', 3, "variable"),
    "ADD with a checksum flag": (
        HEAD + "ADD --checksum=sha256:00 http://127.0.0.1/x /y\n",
        3,
        "remote source",
    ),
    "FROM another image": ("FROM deltarun-env/other:1\n", 1, "outside the suite"),
    "FROM a variable": ("ARG X=deltarun-env/other:1\nFROM ${X}\n", 2, "outside the suite"),
    "FROM the base with a default": ("ARG BASE\nFROM ${BASE:-other}\n", 2, "outside the suite"),
    "FROM a stage named later": (HEAD + "FROM later\nFROM ${BASE} AS later\n", 3, "outside"),
    "FROM with a platform flag": ("FROM --platform=linux/amd64 other\n", 1, "outside"),
    "COPY --from another image": (HEAD + "COPY --from=deltarun/agent /x /y\n", 3, "outside"),
    "COPY --from quoted": (HEAD + 'COPY --from="other" /x /y\n', 3, "outside the suite"),
    "COPY --from a variable": (HEAD + "COPY --from=${X} /x /y\n", 3, "outside the suite"),
    "COPY --from an index not yet built": (HEAD + "COPY --from=1 /x /y\n", 3, "outside"),
    "COPY --from after a tab": (HEAD + "COPY\t--from=other\t/x /y\n", 3, "outside"),
    "ONBUILD": (HEAD + "onbuild RUN true\n", 3, "ONBUILD"),
    "ONBUILD ADD": (HEAD + "ONBUILD ADD http://127.0.0.1/x /y\n", 3, "ONBUILD"),
    "VOLUME": (HEAD + "VOLUME /var/tmp\n", 3, "VOLUME"),
    "RUN --mount": (HEAD + "RUN --mount=type=bind,from=other,target=/m true\n", 3, "--mount"),
    "RUN --network": (HEAD + "RUN --network=host true\n", 3, "--network"),
    "RUN --security": (HEAD + "RUN --security=insecure true\n", 3, "--security"),
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_what_stays_inside_passes(name: str) -> None:
    assert first_problem(ALLOWED[name], BASES) is None


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_reaches_outside_is_refused_on_its_line(name: str) -> None:
    text, line, word = REFUSED[name]
    problem = first_problem(text, BASES)
    assert problem is not None, name
    assert problem.line == line and word in problem.why, problem
    assert "\n" not in problem.why + problem.fix


def test_the_field_s_dockerfiles_pass() -> None:
    """The import's generated environments, the example's, and a multi-line RUN."""
    spec = Spec(
        install=("pip install -e .",),
        pip_packages=("pytest==8.0.0", "six"),
        python="3.11",
        env_vars={"A": "$x"},
    )
    for wheels in (True, False):
        assert first_problem(dockerfile(spec, BASE_TAG, wheels), BASES) is None
    example = ROOT / "examples/environments/environments/inflection/Dockerfile"
    assert first_problem(example.read_text(), BASES) is None
    multi = HEAD + "RUN apt-get install -y \\\n    a \\\n    # a comment\n    b\n"
    assert first_problem(multi, BASES) is None


@pytest.mark.parametrize("escape", ESCAPES)
def test_a_url_is_refused_wherever_the_line_is_split(escape: str) -> None:
    """Every split point of the ADD line, with the escape character and a comment between
    the halves: the parser joins them, and so does the screen."""
    line = "ADD http://127.0.0.1:8/x /y"
    directive = "# escape=`\n" if escape == "`" else ""
    for cut in range(1, len(line)):
        text = f"{directive}{HEAD}{line[:cut]}{escape}\n# between\n{line[cut:]}\n"
        problem = first_problem(text, BASES)
        assert problem is not None and "remote source" in problem.why, (cut, problem)


def test_instructions_read_as_docker_s_parser() -> None:
    text = "# c\n\nFROM x AS y\nRUN a \\\n  b\n  # inside\nCOPY  --from=y\t/a /b\n"
    steps = [(s.line, s.keyword, s.args) for s in instructions(text, "\\")]
    assert steps == [(3, "FROM", "x AS y"), (4, "RUN", "a   b"), (7, "COPY", "--from=y\t/a /b")]


def test_image_config_refusals() -> None:
    config = {"Volumes": {"/b": {}, "/a": {}}, "OnBuild": ["RUN  true", "ADD http://x /y"]}
    assert volumes(config) == ("/a", "/b") and volumes({"Volumes": None}) == ()
    assert triggers(config) == ("RUN  true", "ADD http://x /y") and triggers(None) == ()
    assert volume_refusal("img", ()) is None and trigger_refusal("img", ()) is None
    refused = volume_refusal("img", volumes(config))
    assert refused is not None and "img declares VOLUME /a, /b" in refused
    triggered = trigger_refusal("img", triggers(config))
    assert triggered is not None and "2 ONBUILD trigger(s) (RUN true; ADD http://x /y)" in triggered
