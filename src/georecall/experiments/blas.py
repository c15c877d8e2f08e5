"""Which BLAS computed a trial's matrix products, and on how many threads (recorded in every sweep trial).

A float32 training run is reproducible bit for bit only with the same BLAS kernels and the same thread
count: OpenBLAS splits a product between threads differently for 1 and for 2 threads, and the rounding of the
sums changes with the split (measured: the weights after four full-batch Adam steps at N = 4096, R = 4,
d = 24 differ between ``OPENBLAS_NUM_THREADS=1`` and ``=2``). Each trial is still judged exactly on its own
stored weights, so both are valid trials; but two trials that went through different arithmetic are
different runs, and a threshold search that mixes them says so (its record lists every arithmetic its trials
used).

Linux with NumPy's OpenBLAS: the library is found among the loaded shared objects (``/proc/self/maps``;
NumPy's own copy when SciPy has loaded another, :func:`numpys_openblas`) and asked for its configuration
(version, the CPU kernel it selected) and its thread count. Anywhere else the description is ``"unknown"``:
never a guess.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Iterator

__all__ = ["UNKNOWN", "blas_description", "blas_threads", "limited_threads", "numpys_openblas"]

UNKNOWN = "unknown"
# (configuration, kernel name, thread count, set thread count) symbols of the OpenBLAS builds NumPy ships:
# scipy-openblas (64-bit integers, NumPy >= 2), then the plain and 64-suffixed names of other builds
_SYMBOLS = (
    ("scipy_openblas_get_config64_", "scipy_openblas_get_corename64_", "scipy_openblas_get_num_threads64_",
     "scipy_openblas_set_num_threads64_"),
    ("scipy_openblas_get_config", "scipy_openblas_get_corename", "scipy_openblas_get_num_threads",
     "scipy_openblas_set_num_threads"),
    ("openblas_get_config64_", "openblas_get_corename64_", "openblas_get_num_threads64_",
     "openblas_set_num_threads64_"),
    ("openblas_get_config", "openblas_get_corename", "openblas_get_num_threads", "openblas_set_num_threads"),
)
# (library and kernel, get threads, set threads or None)
_Found = tuple[str, Callable[[], int], "Callable[[int], None] | None"]
_CACHE: list[_Found | None] = []


def _loaded_openblas() -> list[str]:
    """Paths of the loaded shared objects whose file name mentions OpenBLAS (Linux; else empty)."""
    try:
        with open("/proc/self/maps") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    paths = {line.split()[-1] for line in lines if line.split() and line.split()[-1].startswith("/")}
    return sorted(p for p in paths if "openblas" in p.rsplit("/", 1)[-1].lower())


def numpys_openblas(paths: list[str], numpy_dir: str) -> str | None:
    """Which of the loaded OpenBLAS libraries NumPy's products use.

    SciPy ships an OpenBLAS of its own (``scipy.libs``), loaded beside NumPy's once ``scipy.sparse`` or
    ``scipy.linalg`` is imported; NumPy's wheel keeps its copy in ``numpy.libs`` next to the package.

    Parameters
    ----------
    paths : list of str
        The loaded OpenBLAS libraries.
    numpy_dir : str
        NumPy's package folder (``os.path.dirname(numpy.__file__)``).

    Returns
    -------
    str or None
        The one in ``numpy.libs`` (or inside NumPy's folder); else the only one loaded; else None (none, or
        several with none of them NumPy's).
    """
    own = [p for p in paths if os.path.dirname(p) in (numpy_dir + ".libs", numpy_dir)
           or p.startswith(numpy_dir + os.sep)]
    if len(own) == 1:
        return own[0]
    return paths[0] if len(paths) == 1 else None


def _describe(path: str) -> _Found | None:
    """``(library and kernel, get-threads function, set-threads function)`` of the OpenBLAS at ``path``."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for config_name, core_name, threads_name, set_name in _SYMBOLS:
        if not all(hasattr(lib, name) for name in (config_name, core_name, threads_name)):
            continue
        config, core, threads = (getattr(lib, name) for name in (config_name, core_name, threads_name))
        config.restype = core.restype = ctypes.c_char_p
        threads.restype = ctypes.c_int
        setter = getattr(lib, set_name, None)
        if setter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
        version = (config() or b"").decode(errors="replace").split()
        name = " ".join(version[:2]) if len(version) >= 2 else "OpenBLAS"
        kernel = (core() or b"?").decode(errors="replace")
        return f"{name} {kernel}", threads, setter
    return None


def _library() -> _Found | None:
    """NumPy's OpenBLAS, described once per process (None: another BLAS, or another platform)."""
    if not _CACHE:
        import numpy  # loads NumPy's BLAS before the process's map is read

        path = numpys_openblas(_loaded_openblas(), os.path.dirname(os.path.abspath(numpy.__file__)))
        _CACHE.append(None if path is None else _describe(path))
    return _CACHE[0]


def blas_threads() -> int | None:
    """OpenBLAS's thread count now (None when NumPy's BLAS is not an OpenBLAS this module can ask).

    Returns
    -------
    int or None
    """
    found = _library()
    return None if found is None else int(found[1]())


def blas_description() -> str:
    """The BLAS of this process in one line, e.g. ``"OpenBLAS 0.3.31.188.0 SkylakeX, 1 thread"``.

    The library is found once per process; the thread count is read at each call (OpenBLAS's own: set by
    ``OPENBLAS_NUM_THREADS`` or ``OMP_NUM_THREADS`` before NumPy is imported, or for a block by
    :func:`limited_threads`).

    Returns
    -------
    str
        The library, its version, the CPU kernel it chose and its threads; :data:`UNKNOWN` when NumPy's BLAS
        is not an OpenBLAS this module can ask (another library, another platform).
    """
    found = _library()
    if found is None:
        return UNKNOWN
    count = int(found[1]())
    return f"{found[0]}, {count} thread{'s' if count != 1 else ''}"


@contextlib.contextmanager
def limited_threads(threads: int = 1) -> Iterator[int | None]:
    """OpenBLAS runs at most ``threads`` threads inside the block, and its own count again after it.

    On a shared machine small products run faster and spend less CPU on one thread: two OpenBLAS threads wait
    for each other whenever a neighbour holds the other core (``georecall verify`` ran 5–10× slower in wall
    time with two threads at load 6, ``benchmarks/bench_verify.py``). Nothing happens when NumPy's BLAS is not
    an OpenBLAS this module can set, or when the count is already at most ``threads``.

    Parameters
    ----------
    threads : int
        The most threads inside the block (>= 1).

    Yields
    ------
    int or None
        The thread count inside the block (None: not an OpenBLAS this module can set).

    Raises
    ------
    ValueError
        ``threads`` < 1.
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    found = _library()
    setter = None if found is None else found[2]
    before = blas_threads()
    if setter is None or before is None or before <= threads:
        yield before
        return
    setter(threads)
    try:
        yield threads
    finally:
        setter(before)
