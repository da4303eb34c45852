"""A built library that is a copy of one of the machine's is found by its code pages."""

import shutil
from pathlib import Path

import torch

from cuda_gym.judge import library_copies
from cuda_gym.judge.library_copies import build_index, index_blocks, library_index

LIBRARY = Path(torch.__file__).parent / "lib" / "libc10.so"


def _trusted_root(tmp_path: Path) -> Path:
    root = tmp_path / "trusted"
    root.mkdir()
    shutil.copyfile(LIBRARY, root / "libc10.so")
    return root


def test_a_renamed_patched_copy_is_found_and_honest_code_is_not(tmp_path):
    root = _trusted_root(tmp_path)
    index = library_index(tmp_path / "cache", [str(root)])
    data = bytearray(LIBRARY.read_bytes())
    data[data.find(b"libc10.so") : data.find(b"libc10.so") + 9] = b"blasx.so\0"  # a new soname
    for start, end in library_copies._executable_ranges(bytes(data)):
        for at in range(start + 100, end, 3000):  # and a byte changed every 3000 of its code
            data[at] ^= 0xFF
    copy = index.copy_of(bytes(data))
    assert copy is not None and copy.source == str(root / "libc10.so")
    indexed = len(index_blocks(LIBRARY.read_bytes()))
    assert copy.shared >= 0.6 * indexed  # a patched byte loses the blocks around it only
    assert "blasx/blasx.so is a copy of" in copy.describe("blasx/blasx.so")
    # Another library (the C++ runtime torch loads), a text file and a truncated ELF: no copy.
    other = Path(torch.__file__).parent / "lib" / "libtorch_global_deps.so"
    assert index.copy_of(other.read_bytes()) is None
    assert index.copy_of(b"not an ELF file" * 1000) is None
    assert index.copy_of(bytes(data[:64])) is None


def _shifted(data: bytes, by: int) -> bytes:
    """`data`'s code past its first page moved `by` bytes further into the file."""
    (start, end), *_ = library_copies._executable_ranges(data)
    cut = start + 4096  # (the ELF header may share the code's segment)
    return data[:cut] + bytes(by) + data[cut : end - by] + data[end:]


def test_a_copy_moved_by_a_few_bytes_or_cut_to_a_slice_is_found(tmp_path):
    root = _trusted_root(tmp_path)
    index = library_index(tmp_path / "cache", [str(root)])
    data = LIBRARY.read_bytes()
    for by in (1, 8, 100, 255):
        copy = index.copy_of(_shifted(data, by))
        assert copy is not None and copy.source == str(root / "libc10.so"), by
    # 64 KiB of its code, anywhere in a library of one's own: still a copy
    (start, end), *_ = library_copies._executable_ranges(data)
    piece = data[start + 4096 + 37 : start + 4096 + 37 + (64 << 10)]
    own = data[: start + 4096] + bytes(range(256)) * 400 + piece
    own += bytes(max(0, len(data) - len(own)))
    copy = index.copy_of(own)
    assert copy is not None and copy.shared >= 40


def test_the_index_is_sealed_in_the_cache_and_read_back(tmp_path):
    root = _trusted_root(tmp_path)
    path = library_copies.index_file(tmp_path / "cache", [str(root)])
    library_copies._LOADED.clear()
    assert library_copies.load_index(path).paths == [str(root / "libc10.so")]
    library_copies._LOADED.clear()
    stored = path.read_bytes()
    middle = len(stored) // 2
    altered = stored[:middle] + bytes([stored[middle] ^ 1]) + stored[middle + 1 :]
    path.write_bytes(altered)  # not intact: not used
    assert library_copies.load_index(path) is None
    assert build_index([]).copy_of(LIBRARY.read_bytes()) is None


def test_trusted_trees_are_the_systems_and_pythons_not_the_current_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(library_copies.sys, "path", [str(tmp_path), "", *library_copies.sys.path])
    roots = library_copies.trusted_roots()
    assert str(tmp_path) not in roots and "/usr/lib" in roots
    # The judge's cache (solutions' builds) is never walked, even under a trusted tree.
    root = _trusted_root(tmp_path)
    (root / "cache").mkdir()
    shutil.copyfile(LIBRARY, root / "cache" / "built.so")
    found = [p for p, *_ in library_copies._libraries([str(root)], skip=(str(root / "cache"),))]
    assert found == [str(root / "libc10.so")]


def test_a_copy_whose_headers_deny_its_code_is_still_found(tmp_path):
    # A red-team find: once the copy was loaded, the executable flag of its code segment was
    # cleared in the file's program headers (the loader needs them no more); so was its ELF
    # magic. The whole file is searched, whatever its headers say.
    root = _trusted_root(tmp_path)
    index = library_index(tmp_path / "cache", [str(root)])
    data = bytearray(LIBRARY.read_bytes())
    phoff = int.from_bytes(data[0x20:0x28], "little")
    entsize = int.from_bytes(data[0x36:0x38], "little")
    count = int.from_bytes(data[0x38:0x3A], "little")
    for k in range(count):
        flags = phoff + k * entsize + 4
        data[flags] &= ~1  # PF_X off
    assert library_copies._executable_ranges(bytes(data)) == []
    data[:4] = b"\0ELF"
    copy = index.copy_of(bytes(data))
    assert copy is not None and copy.source == str(root / "libc10.so")
