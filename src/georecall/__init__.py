"""georecall: an executable theory verifier for *Geometric Factual Recall in Transformers* (arXiv 2605.12426).

Subpackages: :mod:`georecall.theory` (tasks, promises), :mod:`georecall.constructions` (hand-built weights and
THE forward pass), :mod:`georecall.bounds` (counting and lower bounds), :mod:`georecall.verify` (checker,
trainer, sweeps, probes, command line). :mod:`georecall.testing` holds the hypothesis strategies the tests
use.
"""

__version__ = "0.2.0"

__all__ = ["__version__"]
