"""The assembler guard: compiles that read files through the assembler fail, others do not."""

import os
import shutil
import subprocess

import pytest

from cuda_gym.judge.assembler_guard import guarded_env

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("as") is None, reason="needs gcc and as"
)

HOSTNAME = '__asm__(".pushsection .rodata\\n.incbin \\"/etc/hostname\\"\\n.popsection");\n'
# The same directive spelled in pieces the C compiler joins and an escape it decodes.
SPELLED = '__asm__(".pushsection .rodata\\n.inc" "b\\x69n \\"/etc/hostname\\"\\n.popsection");\n'
MACRO = '__asm__(".macro m d f\\n.\\\\d \\\\f\\n.endm\\nm incbin \\"/etc/hostname\\"");\n'
HONEST = 'int twice(int x) { __asm__ volatile("nop"); return 2 * x; }\n'


@pytest.mark.parametrize(
    ("source", "refused"), [(HOSTNAME, True), (SPELLED, True), (MACRO, True), (HONEST, False)]
)
@pytest.mark.parametrize("pipe", [False, True])
def test_assembly_that_reads_files_is_refused(tmp_path, source, refused, pipe):
    env = guarded_env(os.environ, tmp_path / "cache")
    assert env["COMPILER_PATH"].split(os.pathsep)[0] == str(tmp_path / "cache" / "assembler")
    (tmp_path / "t.c").write_text(source)
    cmd = ["gcc", *(["-pipe"] if pipe else []), "-c", "t.c", "-o", "t.o"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (proc.returncode != 0) == refused, proc.stderr
    if refused:
        assert "cuda_gym" in proc.stderr and "refused" in proc.stderr
    else:
        assert (tmp_path / "t.o").stat().st_size > 0
