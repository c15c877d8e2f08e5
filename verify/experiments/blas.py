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

import ctypes
import os

__all__ = ["UNKNOWN", "blas_description", "numpys_openblas"]

UNKNOWN = "unknown"
# (configuration, kernel name, thread count) symbols of the OpenBLAS builds NumPy ships: scipy-openblas
# (64-bit integers, NumPy >= 2), then the plain and 64-suffixed names of other builds
_SYMBOLS = (
    ("scipy_openblas_get_config64_", "scipy_openblas_get_corename64_", "scipy_openblas_get_num_threads64_"),
    ("scipy_openblas_get_config", "scipy_openblas_get_corename", "scipy_openblas_get_num_threads"),
    ("openblas_get_config64_", "openblas_get_corename64_", "openblas_get_num_threads64_"),
    ("openblas_get_config", "openblas_get_corename", "openblas_get_num_threads"),
)
_CACHE: list[str] = []


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


def _describe(path: str) -> str | None:
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for config_name, core_name, threads_name in _SYMBOLS:
        if not all(hasattr(lib, name) for name in (config_name, core_name, threads_name)):
            continue
        config, core, threads = (getattr(lib, name) for name in (config_name, core_name, threads_name))
        config.restype = core.restype = ctypes.c_char_p
        threads.restype = ctypes.c_int
        version = (config() or b"").decode(errors="replace").split()
        name = " ".join(version[:2]) if len(version) >= 2 else "OpenBLAS"
        count = int(threads())
        kernel = (core() or b"?").decode(errors="replace")
        return f"{name} {kernel}, {count} thread{'s' if count != 1 else ''}"
    return None


def blas_description() -> str:
    """The BLAS of this process in one line, e.g. ``"OpenBLAS 0.3.31.188.0 SkylakeX, 1 thread"``.

    The thread count is OpenBLAS's own (set by ``OPENBLAS_NUM_THREADS`` or ``OMP_NUM_THREADS`` before NumPy
    is imported); it is read once per process and cached, since NumPy does not change it.

    Returns
    -------
    str
        The library, its version, the CPU kernel it chose and its threads; :data:`UNKNOWN` when NumPy's BLAS
        is not an OpenBLAS this module can ask (another library, another platform).
    """
    if not _CACHE:
        import numpy  # loads NumPy's BLAS before the process's map is read

        path = numpys_openblas(_loaded_openblas(), os.path.dirname(os.path.abspath(numpy.__file__)))
        described = None if path is None else _describe(path)
        _CACHE.append(described or UNKNOWN)
    return _CACHE[0]
