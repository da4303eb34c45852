"""The judge's disk caches: one process computes a missing probe while others wait."""

import subprocess
import sys
import time

from cuda_gym.judge.baselines import JsonCache

WAITER = """
import sys
from cuda_gym.judge.baselines import JsonCache
cache = JsonCache(sys.argv[1], "probes")
print("waiting", flush=True)
with cache.lock("k"):
    print("acquired", cache.get("k"), flush=True)
"""


def test_the_lock_excludes_other_processes(tmp_path):
    cache = JsonCache(tmp_path, "probes")
    with cache.lock("k"):
        proc = subprocess.Popen(
            [sys.executable, "-c", WAITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "waiting"
        time.sleep(0.5)
        assert proc.poll() is None  # still blocked on the lock
        cache.put("k", {"probe": 1})
    out, _ = proc.communicate(timeout=60)
    # It got the lock only after the holder had stored the document, and can reuse it.
    assert out.strip() == "acquired {'probe': 1}"
