"""The assembler guard: compiles that read files through the assembler fail, others do not."""

import os
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from cuda_gym.judge.assembler_guard import guard_dir, guarded_env

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("as") is None, reason="needs gcc and as"
)

HOSTNAME = '__asm__(".pushsection .rodata\\n.incbin \\"/etc/hostname\\"\\n.popsection");\n'
# The same directive spelled in pieces the C compiler joins and an escape it decodes.
SPELLED = '__asm__(".pushsection .rodata\\n.inc" "b\\x69n \\"/etc/hostname\\"\\n.popsection");\n'
MACRO = '__asm__(".macro m d f\\n.\\\\d \\\\f\\n.endm\\nm incbin \\"/etc/hostname\\"");\n'
# GNU as reads directives in any case.
UPPER = '__asm__(".pushsection .rodata\\n.INCBIN \\"/etc/hostname\\"\\n.popsection");\n'
HONEST = 'int twice(int x) { __asm__ volatile("nop"); return 2 * x; }\n'


@pytest.mark.parametrize(
    ("source", "refused"),
    [(HOSTNAME, True), (SPELLED, True), (MACRO, True), (UPPER, True), (HONEST, False)],
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


def test_threads_of_one_process_make_the_guard_at_once(tmp_path):
    # The judge's threads share a pid: each writer needs a file of its own before the rename.
    for attempt in range(20):
        cache = tmp_path / str(attempt)
        start = threading.Barrier(8)

        def make(cache=cache, start=start):
            start.wait()
            return guard_dir(cache)

        with ThreadPoolExecutor(8) as pool:
            folders = list(pool.map(lambda _: make(), range(8)))
        assert folders == [cache / "assembler"] * 8
        assert sorted(p.name for p in folders[0].iterdir()) == ["as"]
        assert os.access(folders[0] / "as", os.X_OK)
