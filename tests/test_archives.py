"""Archive checks: only regular files and directories with safe paths, under caps."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from runner.errors import ArchiveError
from runner.fixtures.archives import ArchiveCaps, Member, build_tar, read_members
from runner.paths import is_forbidden


def write(path: Path, build: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w") as archive:
        for info, data in build:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def regular(name: str, data: bytes = b"x") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def special(name: str, kind: bytes, linkname: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def test_accepts_files_and_dirs(tmp_path: Path) -> None:
    folder = tarfile.TarInfo("pkg")
    folder.type = tarfile.DIRTYPE
    path = write(
        tmp_path / "a.tar",
        [(folder, None), regular("pkg/a.py", b"print(1)\n"), regular("./README.md")],
    )
    members = read_members(path)
    assert [(m.path, m.is_dir) for m in members] == [
        ("pkg", True),
        ("pkg/a.py", False),
        ("README.md", False),
    ]
    assert members[1].data == b"print(1)\n"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (special("link", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
        (special("hard", tarfile.LNKTYPE, "README.md"), "hard link"),
        (special("dev", tarfile.CHRTYPE), "device node"),
        (special("fifo", tarfile.FIFOTYPE), "FIFO"),
        (regular("../escape.py"), "escapes"),
        (regular("/etc/cron.d/x"), "absolute"),
        (regular("a/../../b"), "escapes"),
    ],
)
def test_rejects_unsafe_members(
    tmp_path: Path, entry: tuple[tarfile.TarInfo, bytes | None], message: str
) -> None:
    path = write(tmp_path / "bad.tar", [regular("README.md"), entry])
    with pytest.raises(ArchiveError) as excinfo:
        read_members(path)
    assert str(path) in str(excinfo.value)
    assert message in str(excinfo.value)


def test_caps_on_count_and_size(tmp_path: Path) -> None:
    many = write(tmp_path / "many.tar", [regular(f"f{i}") for i in range(11)])
    with pytest.raises(ArchiveError, match="more than 10 members"):
        read_members(many, ArchiveCaps(max_members=10))
    big = write(tmp_path / "big.tar", [regular("big", b"x" * 2048)])
    with pytest.raises(ArchiveError, match="over the cap"):
        read_members(big, ArchiveCaps(max_member_bytes=1024))


def test_duplicate_and_file_under_file(tmp_path: Path) -> None:
    dup = write(tmp_path / "dup.tar", [regular("a"), regular("a")])
    with pytest.raises(ArchiveError, match="twice"):
        read_members(dup)
    nested = write(tmp_path / "nested.tar", [regular("a"), regular("a/b")])
    with pytest.raises(ArchiveError, match="which is a file"):
        read_members(nested)


def test_not_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "junk.tar"
    path.write_bytes(b"not a tar at all" * 100)
    with pytest.raises(ArchiveError, match="not a readable tar"):
        read_members(path)
    with pytest.raises(ArchiveError, match="not found"):
        read_members(tmp_path / "missing.tar")


def test_build_tar_normalises_owner_mode_and_excludes() -> None:
    members = [
        Member("run.sh", False, b"#!/bin/sh\n", True),
        Member(".git/config", False, b"", False),
        Member("pkg/a.py", False, b"a", False),
    ]
    data = build_tar(members, uid=1000, gid=1000, exclude=[".git/"])
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        infos = {i.name: i for i in archive.getmembers()}
    assert set(infos) == {"pkg", "pkg/a.py", "run.sh"}
    assert all(i.uid == 1000 and i.gid == 1000 for i in infos.values())
    assert infos["run.sh"].mode == 0o755 and infos["pkg/a.py"].mode == 0o644
    readonly = build_tar(members, uid=0, gid=0, writable=False)
    with tarfile.open(fileobj=io.BytesIO(readonly)) as archive:
        assert all(not (i.mode & 0o222) for i in archive.getmembers())


def test_is_forbidden() -> None:
    assert is_forbidden(".git", [".git/"])
    assert is_forbidden(".git/config", [".git/"])
    assert is_forbidden("secrets/a/b", ["secrets"])
    assert not is_forbidden(".github/workflows/x.yml", [".git/"])
    assert not is_forbidden("src/.gitignore", [".git"])
