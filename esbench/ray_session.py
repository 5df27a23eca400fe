"""One way to reach Ray, shared by the ray executor (cells as tasks) and the ES population (members on actors).

`session()` uses the caller's Ray session when one is initialised (and leaves it running), connects to
`ESBENCH_RAY_ADDRESS` (set by `--ray-address`) when given, and otherwise starts a private local instance with its own
short temporary directory (Ray's unix sockets live under it: 108-byte path limit), no dashboard and no worker output
on the driver, which it shuts down and removes on exit, so no Ray session or /tmp/ray folder outlives it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

TEMP_PREFIX = "esbench-ray-"


def fresh_temp_dir() -> str:
    return tempfile.mkdtemp(prefix=TEMP_PREFIX)


@contextlib.contextmanager
def session(num_cpus: int | None = None) -> Iterator[str | None]:
    """Yield the private instance's temp dir, or None when an existing session or cluster is used."""
    import ray

    if ray.is_initialized():  # the caller's own Ray session: use it, leave it running
        yield None
        return
    address = os.environ.get("ESBENCH_RAY_ADDRESS")
    tmp = None
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        tmp = fresh_temp_dir()
        try:
            ray.init(
                address="local",  # never attach to a cluster named by RAY_ADDRESS by accident
                num_cpus=num_cpus or os.cpu_count(),
                include_dashboard=False,
                log_to_driver=False,
                _temp_dir=tmp,
            )
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    try:
        yield tmp
    finally:
        ray.shutdown()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
