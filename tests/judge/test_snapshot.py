"""What of a workspace reaches the judge: model_new.py, kernels/ and the sources beside them."""

import os

from cuda_gym.judge.judge import SOURCE_BYTES, _snapshot, static_violations


def test_sources_beside_model_new_are_copied_and_nothing_else(tmp_path):
    work = tmp_path / "work"
    (work / "kernels").mkdir(parents=True)
    (work / "model_new.py").write_text("import torch\n")
    (work / "kernels" / "k.cpp").write_text("// kernel\n")
    # cpp_extension.load(sources=[os.path.join(here, "axpb.cpp")]) names a file beside it.
    (work / "axpb.cpp").write_text("// axpb\n")
    (work / "axpb.h").write_text("// header\n")
    (work / "big.cu").write_bytes(b" " * (SOURCE_BYTES + 1))
    (work / "notes.txt").write_text("not a source\n")
    os.symlink("/etc/hostname", work / "linked.cpp")
    snap = _snapshot(work, tmp_path / "snap")
    copied = sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file())
    assert copied == ["axpb.cpp", "axpb.h", "kernels/k.cpp", "model_new.py"]


def test_sources_beside_model_new_are_copied_up_to_a_total(tmp_path, monkeypatch):
    from cuda_gym.judge import judge

    monkeypatch.setattr(judge, "SOURCES_TOTAL_BYTES", 10)
    work = tmp_path / "work"
    work.mkdir()
    for name in ("a.cpp", "b.cpp", "c.cpp"):
        (work / name).write_text("x" * 4)
    snap = _snapshot(work, tmp_path / "snap")
    assert sorted(p.name for p in snap.iterdir()) == ["a.cpp", "b.cpp"]


def test_sources_in_folders_under_model_new_are_copied_and_scanned(tmp_path):
    work = tmp_path / "work"
    (work / "csrc" / "detail").mkdir(parents=True)
    (work / ".git").mkdir()
    (work / "__pycache__").mkdir()
    (work / "model_new.py").write_text("import torch\n")
    # cpp_extension.load(sources=["csrc/softplus.cpp", ...], extra_include_paths=["csrc"])
    (work / "csrc" / "softplus.cpp").write_text("// softplus\n")
    (work / "csrc" / "detail" / "math.h").write_text("// header\n")
    (work / ".git" / "hook.c").write_text("// not the solution's\n")
    (work / "__pycache__" / "x.c").write_text("// nor this\n")
    snap = _snapshot(work, tmp_path / "snap")
    copied = sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file())
    assert copied == ["csrc/detail/math.h", "csrc/softplus.cpp", "model_new.py"]
    # Whatever was copied may be built: the native scan reads it, kernels/ or not.
    (snap / "csrc" / "softplus.cpp").write_text("#define CAT(a, b) a##b\n")
    found = static_violations("import torch\n", snap / "kernels", "external")
    assert len(found) == 1 and "token_pasting" in found[0] and "csrc/softplus.cpp" in found[0]


def test_links_devices_and_fifos_in_kernels_are_never_read(tmp_path):
    """A link's target could be any file the judge reads (a compiler error would quote it)."""
    secret = tmp_path / "outside"
    (secret / "dir").mkdir(parents=True)
    (secret / "key").write_text("secret\n")
    (secret / "dir" / "nested.h").write_text("nested secret\n")
    work = tmp_path / "work"
    (work / "kernels" / "sub").mkdir(parents=True)
    (work / "model_new.py").write_text("import torch\n")
    (work / "kernels" / "k.cpp").write_text('#include "leak.h"\n')
    (work / "kernels" / "sub" / "ok.h").write_text("// header\n")
    os.symlink(secret / "key", work / "kernels" / "leak.h")
    os.symlink(secret / "dir", work / "kernels" / "linked_dir")
    os.symlink("/dev/zero", work / "kernels" / "zero.h")
    os.mkfifo(work / "kernels" / "pipe.h")  # opened without blocking, never read
    not_copied = []
    snap = _snapshot(work, tmp_path / "snap", not_copied)
    copied = sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file())
    assert copied == ["kernels/k.cpp", "kernels/sub/ok.h", "model_new.py"]
    assert not any(p.is_symlink() for p in snap.rglob("*"))
    assert sorted(not_copied) == [
        "kernels/leak.h: a symbolic link",
        "kernels/linked_dir: a symbolic link",
        "kernels/pipe.h: not a regular file",
        "kernels/zero.h: a symbolic link",
    ]


def test_a_linked_model_new_or_kernels_folder_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    (outside / "kernels").mkdir(parents=True)
    (outside / "model_new.py").write_text("import torch\n")
    (outside / "kernels" / "k.cpp").write_text("// not the workspace's\n")
    work = tmp_path / "work"
    work.mkdir()
    os.symlink(outside / "model_new.py", work / "model_new.py")
    os.symlink(outside / "kernels", work / "kernels")
    not_copied = []
    snap = _snapshot(work, tmp_path / "snap", not_copied)
    assert [p for p in snap.rglob("*") if p.is_file()] == []
    assert sorted(not_copied) == ["kernels: a symbolic link", "model_new.py: a symbolic link"]
