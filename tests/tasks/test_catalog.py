"""Task ids from every source: the shipped synthesised set is addressable like built-in ids."""

import pytest

from cuda_gym.errors import UnknownTaskError
from cuda_gym.tasks import load_task
from cuda_gym.tasks.catalog import find_task, open_sources


def test_load_task_finds_ids_of_the_shipped_synthesised_set():
    task = load_task("synth_0_02522")
    assert task.task_id == "synth_0_02522" and "class Model" in task.source
    assert find_task("synth_0_02522").source == task.source


def test_open_sources_all_is_builtin_then_synth():
    sets = open_sources("all")
    assert [s.name for s in sets] == ["builtin", "synth"]
    assert len(sets[1]) == 560


def test_find_task_in_a_named_source(tmp_path):
    (tmp_path / "a.py").write_text(load_task("row_softmax").source)
    assert find_task("a", f"dir:{tmp_path}").task_id == "a"
    with pytest.raises(UnknownTaskError, match="Unknown task 'row_softmax' in source 'dir:"):
        find_task("row_softmax", f"dir:{tmp_path}")
    with pytest.raises(FileNotFoundError, match="no level1/ .. level4/"):
        open_sources(f"kernelbench:{tmp_path}")
