"""`Judge.build` (the compile tool) checks kernels/'s sources before it compiles them."""

from cuda_gym.judge import Judge, JudgeConfig


def test_a_build_whose_sources_read_outside_the_workspace_is_not_run(tmp_path):
    """A red team's: compiler errors of an unchecked build quoted any file the judge reads."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.cpp").write_text('#include "/etc/hostname"\nint x;\n')
    (tmp_path / "kernels" / "a.cpp").write_text('__asm__(".INCBIN \\"/etc/hostname\\"");\n')
    build = Judge(JudgeConfig(device="cpu", cache_dir=tmp_path / "cache")).build(tmp_path)
    assert not build.ok and build.module_dir is None
    assert "static:native_include" in build.errors and "kernels/k.cpp" in build.errors
    assert "INCBIN" in build.errors
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.so"))


def test_links_use_no_lto_plugin():
    """A red team's: LTO sections emitted as data had GCC's plugin replay `-Xassembler -al=FILE`
    at the unsandboxed link, writing any file the judge can."""
    from pathlib import Path

    from cuda_gym.judge.plain_build import NO_LTO_LINK, _link_command

    for device in ("cpu", "cuda"):
        cmd = _link_command([Path("a.o")], Path("k.so"), device, {"ld": ["-fopenmp"]})
        flags = " ".join(cmd)
        assert all(flag in flags for flag in NO_LTO_LINK), cmd
