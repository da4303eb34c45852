import os
import stat

import pytest

from cuda_gym.skills import builtin_skills
from cuda_gym.workspace import Workspace, WorkspacePathError

REFERENCE = "class Model: pass\n"


@pytest.fixture
def ws(tmp_path):
    workspace = Workspace(REFERENCE, list(builtin_skills()), "cpu", parent_dir=tmp_path)
    yield workspace
    workspace.close()


def test_layout_and_read_only_files(ws):
    paths = {e.path: e for e in ws.list_files()}
    assert paths["model.py"].writable is False
    assert paths["model_new.py"].writable is True
    assert any(p.startswith("skills/") and p.endswith("SKILL.md") for p in paths)
    assert (ws.root / "kernels").is_dir()
    assert not os.stat(ws.root / "model.py").st_mode & stat.S_IWUSR


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/etc/passwd", "relative"),
        ("../x.cpp", "without '..'"),
        ("kernels/../../x.cpp", "without '..'"),
        ("", "non-empty"),
        ("a\x00b", "NUL"),
    ],
)
def test_paths_outside_the_workspace_are_refused(ws, path, message):
    with pytest.raises(WorkspacePathError, match=message):
        ws.resolve(path)


@pytest.mark.parametrize("path", ["model.py", "skills/workspace/SKILL.md", "notes.txt", "kernels"])
def test_only_solution_files_are_writable(ws, path):
    with pytest.raises(WorkspacePathError, match="read-only"):
        ws.resolve(path, for_write=True)


def test_kernel_suffixes_depend_on_the_device(tmp_path):
    cpu = Workspace(REFERENCE, [], "cpu", parent_dir=tmp_path)
    cuda = Workspace(REFERENCE, [], "cuda", parent_dir=tmp_path)
    assert cpu.resolve("kernels/a.cpp", for_write=True).name == "a.cpp"
    with pytest.raises(WorkspacePathError, match="must end in"):
        cpu.resolve("kernels/a.cu", for_write=True)
    assert cuda.resolve("kernels/sub/a.cu", for_write=True).name == "a.cu"
    with pytest.raises(WorkspacePathError, match="must end in"):
        cuda.resolve("kernels/a.py", for_write=True)


def test_symlinks_are_not_followed(ws, tmp_path):
    (ws.root / "kernels" / "link.cpp").symlink_to(tmp_path / "elsewhere.cpp")
    with pytest.raises(WorkspacePathError, match="symbolic links"):
        ws.resolve("kernels/link.cpp", for_write=True)


def test_tampered_protected_files_are_restored(ws):
    path = ws.root / "model.py"
    path.chmod(0o644)
    path.write_text("class Model: cheat = True\n")
    assert ws.restore_protected() == ["model.py"]
    assert path.read_text() == REFERENCE
    assert ws.restore_protected() == []


def test_close_removes_everything_and_is_idempotent(ws):
    root = ws.root
    ws.close()
    ws.close()
    assert not root.exists()
