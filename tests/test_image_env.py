"""What of the image's environment a command gets (``runner.sandbox.image_env``): the
agent's commands and the tests all of it; deltarun's own as root none of it but PATH,
however the request writes uid 0."""

from __future__ import annotations

from runner.sandbox.base import ExecRequest
from runner.sandbox.image_env import in_environment

NAMES = ("LD_PRELOAD", "PATH", "GIT_DIR", "LD_LIBRARY_PATH")


def test_root_goes_without_the_image_s_variables_however_root_is_written() -> None:
    own = {"PATH": "/usr/bin:/bin", "GIT_DIR": "/baseline/git"}
    for user in ("0:0", "0", "root", "root:root"):
        request = in_environment(ExecRequest(argv=["git"], user=user, env=own), (), NAMES)
        assert request.env == {**own, "LD_PRELOAD": "", "LD_LIBRARY_PATH": ""}, user


def test_other_users_keep_the_image_s_environment() -> None:
    for user in ("1000:1000", "1000", "agent", "10:0"):
        request = in_environment(ExecRequest(argv=["sh"], user=user, env={"A": "1"}), (), NAMES)
        assert request.env == {"A": "1"}, user
