"""Instance images on the Docker engine: present (pulled when absent, held to the digest
its reference pins), asked what environment it has, its repository's ``.git`` taken out,
and deltarun's layer (``runner.sandbox.instance_layer``) built over it, offline, checked
against the sandbox contract (the preflight) and tagged.

Nothing of the image runs on the host: its files are read through the engine's archive
endpoint from a container that is created, never started, and written here member by
member (regular files and directories only, relative normalised paths, a size cap).
"""

from __future__ import annotations

import io
import os
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import docker
import docker.errors

from runner.errors import DigestMismatch, InfraError, UserError
from runner.sandbox.engine import API_ERRORS
from runner.sandbox.image_build import DockerImageBuilder
from runner.sandbox.image_config import trigger_refusal, triggers, volume_refusal, volumes
from runner.sandbox.images import BuildRequest, ImageBuildFailed
from runner.sandbox.instance_layer import (
    SWEBENCH_ENV,
    adapted_tag,
    adapter_dockerfile,
    check_repo_path,
    digest_of,
    environment_path,
    left_out,
)
from runner.sandbox.labels import LABEL_PREFIX, host_identity, process_identity
from runner.trees.archives import normalise_member_name

GIT_CAP = 8 << 30  # the largest .git taken out of an image (Django's is ~0.3 GiB)
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Adapted:
    """An instance image after ``adapt``: the source's ID, the layer's tag and image ID."""

    reference: str
    source_id: str
    tag: str
    image_id: str
    path: tuple[str, ...]
    reused: bool


class InstanceImages:
    """Instance images on one engine (a client with a long read timeout)."""

    def __init__(self, client: docker.APIClient, say: Callable[[str], None] = print) -> None:
        self.client = client
        self.say = say

    def present(self, reference: str) -> str:
        """The image ID of ``reference``, pulled when absent; a reference with a digest is
        pulled by it and must be the image the engine holds under it."""
        found = self._inspect(reference)
        if found is None:
            self.say(f"pulling {reference}")
            self._pull(reference)
            found = self._inspect(reference)
            if found is None:
                raise UserError(f"{reference}: the pull ended without the image")
        digest = digest_of(reference)
        if digest is not None:
            held = [d.rsplit("@", 1)[-1] for d in found.get("RepoDigests") or ()]
            if digest not in held:
                raise DigestMismatch(
                    f"{reference}: the engine's image {found['Id'][:19]} has digests "
                    f"{', '.join(held) or 'none'}, not {digest}"
                )
        return str(found["Id"])

    def environment(self, image_id: str) -> tuple[str, ...]:
        """The directories of the image's environment (``instance_layer.environment_path``);
        an image that declares a volume or carries ONBUILD triggers is refused."""
        info = self._screened(image_id)
        env = (info.get("Config") or {}).get("Env") or []
        path = next((e.split("=", 1)[1] for e in env if e.startswith("PATH=")), "")
        # A conda environment (or a venv) at SWE-bench's path, activated or not.
        has_conda = self._exists(image_id, f"{SWEBENCH_ENV}/bin/python")
        for entry in left_out(path):
            self.say(
                f"warning: image {image_id[:19]}: {entry!r} of its PATH is left out (relative, "
                "or where a sandbox writes)"
            )
        return environment_path(path, has_conda)

    def take_git(self, image_id: str, repo: str, dest: Path, cap: int = GIT_CAP) -> Path:
        """Write the image's ``<repo>/.git`` into ``dest`` (a new directory); its path."""
        with self.spooled(image_id, f"{check_repo_path(repo)}/.git", cap) as spool:
            _write_tree(spool, dest, f"image {image_id[:19]} {repo}/.git")
        return dest / ".git"

    @contextmanager
    def spooled(self, image_id: str, path: str, cap: int = GIT_CAP) -> Iterator[IO[bytes]]:
        """The engine's tar of ``path`` in the image, in a temporary file (at most ``cap``
        bytes), read from a container that is created and never started."""
        with self._container(image_id) as container, tempfile.TemporaryFile() as spool:
            try:
                stream, _stat = self.client.get_archive(container, path)
                size = 0
                for chunk in stream:
                    size += len(chunk)
                    if size > cap:
                        raise UserError(f"image {image_id[:19]}: {path} is over {cap >> 20} MiB")
                    spool.write(chunk)
            except docker.errors.NotFound:
                raise UserError(
                    f"image {image_id[:19]}: {path} not found; the instance image must hold "
                    "the repository as a git checkout there"
                ) from None
            except API_ERRORS as exc:
                raise InfraError(f"reading {path} of image {image_id[:19]}: {exc}") from exc
            spool.seek(0)
            yield spool

    def adapt(
        self,
        reference: str,
        source_id: str,
        instance_id: str,
        repo: str,
        path: tuple[str, ...],
        preflight: Callable[[str], None],
    ) -> Adapted:
        """deltarun's layer over ``source_id``, built offline (or the tag reused), checked
        by ``preflight`` (the sandbox contract) and tagged."""
        self._screened(source_id)
        text = adapter_dockerfile(source_id, reference, repo, path)
        tag = adapted_tag(instance_id, text)
        have = self._inspect(tag)
        if have is not None:
            return Adapted(reference, source_id, tag, str(have["Id"]), path, True)
        builder = DockerImageBuilder(self.client)
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as archive:
            data = text.encode("utf-8")
            info = tarfile.TarInfo("Dockerfile")
            info.size, info.mode = len(data), 0o644
            archive.addfile(info, io.BytesIO(data))
        context.seek(0)
        request = BuildRequest(buildargs={}, labels={}, network="none")
        try:
            image = builder.build(context, request, lambda line: None)
        except ImageBuildFailed as exc:
            why = f"instance image {reference}: deltarun's layer did not build: {exc}"
            raise UserError(why) from exc
        try:
            preflight(image)
        except UserError as exc:
            builder.remove(image)
            raise UserError(
                f"instance image {reference}: the adapted image breaks the sandbox contract: {exc}"
            ) from exc
        builder.tag(image, tag)
        return Adapted(reference, source_id, tag, image, path, False)

    def _screened(self, image_id: str) -> dict[str, Any]:
        """The image's inspection; one line when it declares a volume (no layer can undo
        VOLUME) or carries ONBUILD triggers (they would run in deltarun's layer build over
        it): ``runner.sandbox.image_config``."""
        info = self._inspect(image_id) or {}
        config, name = info.get("Config"), image_id[:19]
        refused = volume_refusal(name, volumes(config)) or trigger_refusal(name, triggers(config))
        if refused is not None:
            raise UserError(refused)
        return info

    def _inspect(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.client.inspect_image(name)  # type: ignore[no-untyped-call]
        except docker.errors.ImageNotFound:
            return None
        except API_ERRORS as exc:
            raise InfraError(f"Docker failed to inspect image {name!r}: {exc}") from exc
        return found

    def _pull(self, reference: str) -> None:
        try:
            for event in self.client.pull(reference, stream=True, decode=True):
                error = event.get("error") or (event.get("errorDetail") or {}).get("message")
                if error:
                    raise UserError(f"docker pull {reference}: {str(error).splitlines()[0]}")
        except docker.errors.APIError as exc:
            why = str(exc.explanation or exc).splitlines()[0]
            raise UserError(f"docker pull {reference}: {why}") from exc
        except API_ERRORS as exc:
            raise InfraError(f"docker pull {reference} failed: {exc}") from exc

    def _exists(self, image_id: str, path: str) -> bool:
        with self._container(image_id) as container:
            try:
                stream, _stat = self.client.get_archive(container, path)
                for _chunk in stream:
                    pass
            except docker.errors.NotFound:
                return False
            except API_ERRORS as exc:
                raise InfraError(f"reading {path} of image {image_id[:19]}: {exc}") from exc
        return True

    def _container(self, image_id: str) -> _Created:
        return _Created(self.client, image_id)


class _Created:
    """A container of the image, created and never started (to read its files), removed
    on exit."""

    def __init__(self, client: docker.APIClient, image_id: str) -> None:
        self.client = client
        self.image_id = image_id
        self.container = ""

    def __enter__(self) -> str:
        try:
            created = self.client.create_container(
                self.image_id,
                command=["true"],
                entrypoint=[],
                network_disabled=True,
                labels={  # what `deltarun gc` reads, should this process die first
                    f"{LABEL_PREFIX}run": "import",
                    f"{LABEL_PREFIX}job": "instance-image",
                    f"{LABEL_PREFIX}pid": process_identity(os.getpid()),
                    f"{LABEL_PREFIX}host": host_identity(),
                    f"{LABEL_PREFIX}deadline": str(int(time.time()) + 3600),
                },
            )
        except API_ERRORS as exc:
            raise InfraError(f"Docker failed to open image {self.image_id[:19]}: {exc}") from exc
        self.container = str(created["Id"])
        return self.container

    def __exit__(self, *exc: object) -> None:
        try:
            self.client.remove_container(self.container, force=True, v=True)
        except API_ERRORS:
            pass  # labelled: `deltarun gc` removes it


def _write_tree(spool: Any, dest: Path, where: str) -> None:
    """The tar in ``spool`` written under ``dest``: directories and regular files only
    (a link or a device is refused), each path relative and normalised, never through a
    link; no ``extractall``."""
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=spool, mode="r:") as archive:
        for info in archive:
            try:
                name = normalise_member_name(info.name)
            except ValueError as exc:
                raise UserError(f"{where}: member {info.name!r} refused ({exc})") from None
            if not name:
                continue
            target = dest / name
            if info.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            if not info.isreg():
                raise UserError(
                    f"{where}: member {info.name!r} is not a regular file or a directory"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(info)
            assert source is not None
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as handle:
                while chunk := source.read(_CHUNK):
                    handle.write(chunk)
