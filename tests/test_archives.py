"""Archive checks: only regular files and directories with safe paths, under caps."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from runner.errors import ArchiveError
from runner.paths import is_forbidden
from runner.trees.archives import ArchiveCaps, Member, build_tar, read_members


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


# ------------------------------------------------------ headers checked before tarfile reads


def claim(typeflag: bytes, size: int, body: bytes = b"") -> bytes:
    """A tar whose first header is an extension (``L``, ``K``, ``x``, ``g``) or a sparse file
    (``S``) claiming ``size`` bytes; ``body`` of them follow, then a small regular file."""
    from tests.adversarial.hostile_kit import header, padded

    tail = header(b"ok.txt", b"0", 2) + padded(b"ok") + b"\0" * 1024
    return header(b"././@LongLink", typeflag, size) + padded(body) + tail


@pytest.mark.parametrize(
    ("typeflag", "kind"),
    [(b"L", "GNU long name"), (b"K", "GNU long link"), (b"x", "pax"), (b"g", "pax global")],
)
def test_an_extension_header_over_the_cap_is_refused_before_it_is_read(
    tmp_path: Path, typeflag: bytes, kind: str
) -> None:
    import tracemalloc

    path = tmp_path / "claim.tar"
    path.write_bytes(claim(typeflag, 128 << 20, b"A" * 4096))
    tracemalloc.start()
    try:
        with pytest.raises(ArchiveError, match=f"a {kind} header of 134217728 bytes, over"):
            read_members(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20  # nothing allocated from the claim
    fine = tmp_path / "fine.tar"
    name = "d/" * 100 + "long.txt"  # 208 bytes: a GNU long name within the cap
    with tarfile.open(fine, "w", format=tarfile.GNU_FORMAT) as archive:
        archive.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    assert [m.path for m in read_members(fine)] == [name]


def test_sparse_members_and_pax_sparse_maps_are_refused(tmp_path: Path) -> None:
    gnu = tmp_path / "gnu.tar"
    gnu.write_bytes(claim(b"S", 1 << 30))
    with pytest.raises(ArchiveError, match="a GNU sparse member"):
        read_members(gnu)
    for record in (b"GNU.sparse.map=0,1", b"GNU.sparse.size=9", b"GNU.sparse.major=1"):
        line = b" %s\n" % record
        line = b"%d%s" % (len(line) + len(str(len(line) + 2)), line)
        extra = b"22 GNU.sparse.minor=0\n" if b"major" in record else b""
        pax = tmp_path / "pax.tar"
        pax.write_bytes(claim(b"x", len(line + extra), line + extra))
        with pytest.raises(ArchiveError, match="a pax sparse member"):
            read_members(pax)


def test_chained_extension_headers_and_long_pax_numbers_are_refused(tmp_path: Path) -> None:
    from tests.adversarial.hostile_kit import header, padded

    chain = tmp_path / "chain.tar"
    record = b"12 a=bcdefg\n"
    chain.write_bytes(b"".join(header(b"p", b"x", 12) + padded(record) for _ in range(600)))
    with pytest.raises(ArchiveError, match="more than 8 extension headers in a row"):
        read_members(chain)  # tarfile reads each next header recursively: RecursionError
    digits = tmp_path / "digits.tar"
    digits.write_bytes(header(b"p", b"x", 5004) + padded(b"9" * 5000 + b" a=\n") + b"\0" * 1024)
    with pytest.raises(ArchiveError, match="not a readable tar archive"):
        read_members(digits)  # tarfile's int() of the record length: a ValueError


def test_only_plain_and_gzip_archives_are_read(tmp_path: Path) -> None:
    import gzip

    plain = tmp_path / "a.tar"
    write(plain, [regular("a.txt", b"a")])
    packed = tmp_path / "a.tar.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert [m.path for m in read_members(packed)] == ["a.txt"]
    for name, head in (("bzip2", b"BZh91AY&SY"), ("xz", b"\xfd7zXZ\x00\x00")):
        other = tmp_path / f"a.{name}"
        other.write_bytes(head + b"\0" * 100)
        with pytest.raises(ArchiveError, match=f"compressed with {name}; give a .tar or"):
            read_members(other)


def test_header_data_is_capped_per_member_and_in_all(tmp_path: Path) -> None:
    from runner.trees import archives

    long_path = tmp_path / "long.tar"
    info = tarfile.TarInfo("d/" * 2100 + "x")  # 4,201 bytes: over PATH_MAX
    with tarfile.open(long_path, "w", format=tarfile.PAX_FORMAT) as archive:
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(ArchiveError, match=r"path longer than 4096 bytes"):
        read_members(long_path)
    keys = tmp_path / "keys.tar"
    many = tarfile.TarInfo("a.txt")
    many.pax_headers = {f"SCHILY.xattr.user.k{i}": "v" for i in range(40)}
    with tarfile.open(keys, "w", format=tarfile.PAX_FORMAT) as archive:
        archive.addfile(many, io.BytesIO(b""))
    with pytest.raises(ArchiveError, match="more than 32 pax header keys"):
        read_members(keys)
    names = tmp_path / "names.tar"
    with tarfile.open(names, "w", format=tarfile.GNU_FORMAT) as archive:
        for i in range(10):
            archive.addfile(tarfile.TarInfo(f"{i}" + "n" * 3000), io.BytesIO(b""))
    caps = ArchiveCaps(max_members=10)
    assert archives.METADATA_BYTES_PER_MEMBER * caps.max_members < 10 * 3001
    with pytest.raises(ArchiveError, match="more header data"):
        read_members(names, caps)
    assert len(read_members(names, ArchiveCaps(max_members=20))) == 10


def test_a_directory_read_whole_is_capped(tmp_path: Path) -> None:
    from runner.trees.archives import members_from_dir

    (tmp_path / "agent").mkdir()
    for i in range(3):
        (tmp_path / "agent" / f"{i}.txt").write_bytes(b"x" * 100)
    assert len(members_from_dir(tmp_path / "agent")) == 3
    with pytest.raises(ArchiveError, match="more than 2 files and folders"):
        members_from_dir(tmp_path / "agent", ArchiveCaps(max_members=2))
    with pytest.raises(ArchiveError, match="over the caps of 99 bytes a file"):
        members_from_dir(tmp_path / "agent", ArchiveCaps(max_member_bytes=99))
    with pytest.raises(ArchiveError, match="250 in all"):
        members_from_dir(tmp_path / "agent", ArchiveCaps(max_total_bytes=250))
