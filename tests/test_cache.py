"""`cuda-gym cache info|clear`: what is cached where, and clearing only known folders."""

import json
import os
from pathlib import Path

from cuda_gym.cache import CACHE_KINDS, cache_report, cache_root, clear_cache
from cuda_gym.cli import main


def _fill(root: Path) -> None:
    for name in ("baselines", "probes", "builds", "pch", "inductor"):
        (root / name).mkdir(parents=True)
        (root / name / "x.json").write_text("0123456789")
    (root / "not_ours").mkdir()
    (root / "not_ours" / "keep.txt").write_text("keep")


def test_cache_root_follows_the_judges_default(monkeypatch, tmp_path):
    from cuda_gym.judge.config import default_cache_dir

    monkeypatch.setenv("CUDA_GYM_CACHE", str(tmp_path))
    assert cache_root() == default_cache_dir() == tmp_path
    monkeypatch.delenv("CUDA_GYM_CACHE")
    assert cache_root() == default_cache_dir()


def test_info_reports_each_folder(tmp_path, monkeypatch, capsys):
    _fill(tmp_path)
    monkeypatch.setenv("CUDA_GYM_CACHE", str(tmp_path))
    report = cache_report()
    by_name = {e["name"]: e for e in report["entries"]}
    assert set(by_name) == set(CACHE_KINDS)
    assert by_name["baselines"]["bytes"] == 10 and by_name["baselines"]["files"] == 1
    assert by_name["hf"]["exists"] is False and report["total_bytes"] == 50
    assert main(["cache", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["root"] == str(tmp_path)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"cache root: {tmp_path} ($CUDA_GYM_CACHE)")


def test_clear_removes_only_the_named_groups(tmp_path, monkeypatch, capsys):
    _fill(tmp_path)
    monkeypatch.setenv("CUDA_GYM_CACHE", str(tmp_path))
    assert main(["cache", "clear"]) == 2
    assert "--baselines, --builds or --all" in capsys.readouterr().err
    assert main(["cache", "clear", "--baselines"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["builds", "inductor", "not_ours", "pch"]
    assert main(["cache", "clear", "--builds"]) == 0
    assert sorted(os.listdir(tmp_path)) == ["inductor", "not_ours"]
    assert clear_cache("all") == [(str(tmp_path / "inductor"), 10)]
    assert os.listdir(tmp_path) == ["not_ours"]


def test_cache_without_a_subcommand_prints_its_help(capsys):
    assert main(["cache"]) == 0
    assert capsys.readouterr().out.startswith("usage: cuda-gym cache")
