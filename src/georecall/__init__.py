"""georecall: an executable theory verifier for *Geometric Factual Recall in Transformers* (arXiv 2605.12426).

The front door is this package, networkx-style::

    import georecall as gr

    gr.list_constructions()                      # the registered constructions
    report = gr.check("geometric", N=64, R=3)    # build on THE task of (N, R, seed), check every query
    report.passed                                # True: a proof for this task
    gr.certify("geometric", N=16, R=2)           # ... for every task
    gr.lower_bounds(N=4096, R=16, k=1)           # lower bounds on d beside each construction's d

Each verb is a thin function over the code the command line runs (``gr.check`` and ``georecall check`` call
the same checker with the same defaults, except smaller default sizes: docs/api/index.md):
:mod:`georecall.api_catalog` (constructions, tasks, building),
:mod:`georecall.api_check` (check, certify), :mod:`georecall.api_tables` (lower_bounds, counts),
:mod:`georecall.api_training` (train, probe), :mod:`georecall.api_models` (load, save, evaluate, export) and
:mod:`georecall.api_command` (a command run from Python). They are imported on first use
(``__getattr__``), so ``import georecall`` loads neither NumPy's companions (scipy, networkx) nor any extra.

Subpackages: :mod:`georecall.theory` (tasks, promises), :mod:`georecall.constructions` (hand-built weights and
THE forward pass), :mod:`georecall.bounds` (counting and lower bounds), :mod:`georecall.verify` (the checker
and the rows of ``georecall verify``), :mod:`georecall.training` (the NumPy trainer),
:mod:`georecall.experiments` (sweeps, the mechanism study, probes, figures), :mod:`georecall.lm` and
:mod:`georecall.exporters` (the ``lm`` and ``export`` extras) and :mod:`georecall.cli` (the command line).
:mod:`georecall.testing` holds hypothesis strategies for users' tests. The layout, module by module:
CONTRIBUTING.md, "Where things go".
"""

__version__ = "0.2.0"

# Each public name and the module that defines it, imported when the name is first read (PEP 562): the
# front door costs nothing at ``import georecall``.
_API = {
    "list_constructions": "georecall.api_catalog",
    "construction": "georecall.api_catalog",
    "task": "georecall.api_catalog",
    "build": "georecall.api_catalog",
    "check": "georecall.api_check",
    "certify": "georecall.api_check",
    "CheckReport": "georecall.api_check",
    "CertifyReport": "georecall.api_check",
    "lower_bounds": "georecall.api_tables",
    "counts": "georecall.api_tables",
    "Table": "georecall.api_tables",
    "train": "georecall.api_training",
    "probe": "georecall.api_training",
    "TrainResult": "georecall.api_training",
    "load": "georecall.api_models",
    "save": "georecall.api_models",
    "evaluate": "georecall.api_models",
    "export": "georecall.api_models",
    "Result": "georecall.api_command",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    """The public name ``name``, imported from its module on first use."""
    if name not in _API:
        raise AttributeError(f"module 'georecall' has no attribute {name!r}")
    import importlib  # the front door: each verb's module when the verb is first used

    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
