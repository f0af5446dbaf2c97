"""``deltarun build CONTROLS`` pins the images a scored run uses, so no one copies an image
ID out of a refusal.

``channel: scored`` refuses to start while an image a task runs in is not pinned under
``images:`` (``runner.config.loader.scored_channel_problems``): the runtime's image, a
task's own ``image`` (an instance image's adapted tag among them). After the build, each
of those present on this machine is pinned to its local image ID, by the round-trip edit
that pins the suite digest (``runner.suite.sealing.pin_images``), written atomically. An
environment's image is pinned by the suite itself (``environment_image``) and is left
out, as the scored check leaves it out. Other channels are left as they are: a pin makes
a rebuilt base image a refusal (exit 3), which an exploratory run does not ask for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from runner.bounded_input import read_capped
from runner.config.loader import CONTROLS_MAX_BYTES, load_controls
from runner.errors import UserError
from runner.records import RepoTask
from runner.suite.load import read_tasks
from runner.suite.sealing import pin_images, write_controls
from runner.trial.sandbox_specs import image_of

ImageId = Callable[[str], str | None]  # the local image ID of a reference, None: absent


def pin_run_images(target: Path, image_id: ImageId) -> Iterator[str]:
    """Pin every image a scored run of the controls ``target`` uses; a line for each image
    pinned or left unpinned, and for the file written. Nothing for a suite folder or
    ``tasks.jsonl`` (no controls to write), nor for another channel."""
    if target.suffix not in (".yaml", ".yml"):
        return
    loaded = load_controls(target)
    controls = loaded.controls
    if controls.channel != "scored":
        return
    tasks = read_tasks(loaded.suite_path)
    pinned_by_suite = {
        t.environment_tag
        for t in tasks
        if isinstance(t, RepoTask) and t.environment_tag is not None and t.environment_image
    }
    pins: dict[str, str] = {}
    for image in sorted({image_of(task, controls) for task in tasks} - pinned_by_suite):
        found = image_id(image)
        if found is None:
            yield (
                f"images.{image}: not on this machine, not pinned; build or pull it, then "
                "run deltarun build again"
            )
            continue
        pins[image] = found
        before = controls.images.get(image)
        if before != found:
            yield f"images.{image}: pinned {found}" + (f" (was {before})" if before else "")
    if not pins:
        return
    try:
        text = read_capped(target, CONTROLS_MAX_BYTES, "a controls file").decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{target}: cannot read the controls file ({exc})") from exc
    written = pin_images(text, pins, str(target))
    if written != text:
        write_controls(target, written)
        yield f"wrote {target}"


def engine_image_ids() -> ImageId:
    """The local image ID of a reference on this machine's engine (None when absent)."""
    from runner.sandbox.engine import connect, image_id

    client = connect()

    def local(image: str) -> str | None:
        try:
            return image_id(client, image)
        except UserError:  # not present (an engine that failed raises SandboxError)
            return None

    return local
