"""The NumPy trainer's optimizers: Adam(W) and SGD with momentum (docs/training.md, the paragraph on them).

Each is a small state object: ``start(params)`` returns the working copies of the parameters and sets fresh
state (moments, velocity), ``update(params, grads)`` applies one step in place to the keys of ``grads`` (the
others stay fixed). :func:`adam` and :func:`sgd` run one on a gradient function, for the callers that want a
function (``grad_fn(params, step) -> grads``, ``callback(params, step, grads)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from georecall.errors import InputError
from georecall.training.train_structured import run_parallel

__all__ = ["ADAM_BLOCK", "EPS_FORMS", "OPTIMIZERS", "SGD", "Adam", "adam", "sgd"]


def _decay(params: dict, grads: dict, lr: float, weight_decay) -> None:
    """Decoupled weight decay ``θ ← (1 − lr·λ_θ)·θ`` on the parameters being updated this step (Loshchilov &
    Hutter; PyTorch's ``AdamW`` order: before the gradient step). ``weight_decay``: one λ or ``{key: λ}``."""
    if not weight_decay:
        return
    for k in grads:
        lam = weight_decay.get(k, 0.0) if isinstance(weight_decay, Mapping) else weight_decay
        if lam:
            params[k] *= params[k].dtype.type(1.0 - lr * lam)


@dataclass
class SGD:
    """Gradient descent with heavy-ball momentum: ``v ← μ·v + g``, ``θ ← θ − lr·v``, after decoupled weight
    decay ``θ ← (1 − lr·λ)·θ``. Its state is the velocity.

    Attributes
    ----------
    lr, momentum : float
        Step size and μ.
    weight_decay : float or mapping
        One λ, or ``{key: λ}`` (missing keys: 0).
    velocity : dict
        ``v`` per parameter key (set by :meth:`start`).
    """

    lr: float = 0.1
    momentum: float = 0.0
    weight_decay: float | Mapping[str, float] = 0.0
    velocity: dict[str, np.ndarray] = field(default_factory=dict)

    def start(self, params: dict) -> dict:
        """Fresh state for ``params``.

        Parameters
        ----------
        params : dict
            Initial parameters (not modified).

        Returns
        -------
        dict
            Copies of them, which :meth:`update` changes in place.
        """
        params = {k: np.array(v) for k, v in params.items()}
        self.velocity = {k: np.zeros_like(v) for k, v in params.items()}
        return params

    def update(self, params: dict, grads: dict) -> None:
        """One step, in place, on the keys of ``grads`` (the other parameters stay fixed).

        Parameters
        ----------
        params : dict
            What :meth:`start` returned, updated in place.
        grads : dict
            The step's gradient.
        """
        _decay(params, grads, self.lr, self.weight_decay)
        for k, g in grads.items():
            self.velocity[k] *= self.momentum
            self.velocity[k] += g
            params[k] -= self.lr * self.velocity[k]


EPS_FORMS = ("standard", "hat")

# Adam updates parameters in blocks of this many entries (1 MiB of float32: the ~12 passes over a block stay
# in cache), spread over a few threads (``run_parallel``).
ADAM_BLOCK = 1 << 18


def _adam_task(task: list) -> None:
    _adam_block(*task)


def _adam_block(p, g, m, v, tmp, keep, b1, b2, eps_t, alpha) -> None:
    """One Adam(W) update of a block, in place: ``p ← keep·p`` (decoupled decay, ``keep = 1 − lr·λ``), then
    ``m ← β1 m + (1−β1) g``, ``v ← β2 v + (1−β2) g²``, ``p ← p − α·m/(√v + ε_t)``."""
    f = p.dtype.type
    if keep != 1.0:
        p *= f(keep)
    m *= f(b1)
    np.multiply(g, f(1 - b1), out=tmp)
    m += tmp
    np.multiply(g, g, out=tmp)
    tmp *= f(1 - b2)
    v *= f(b2)
    v += tmp
    np.sqrt(v, out=tmp)
    tmp += f(eps_t)
    np.divide(m, tmp, out=tmp)
    tmp *= f(alpha)
    p -= tmp


@dataclass
class Adam:
    """Adam (Kingma & Ba 2015), with decoupled weight decay (AdamW) when ``weight_decay`` is non-zero.

    At update ``t = 1, 2, ...`` with gradient ``g``: ``m ← β1·m + (1 − β1)·g``, ``v ← β2·v + (1 − β2)·g²``,
    then

    - ``eps_form="standard"`` (PyTorch, Optax; the default): ``θ ← θ − lr·m̂/(√v̂ + ε)`` with
      ``m̂ = m/(1 − β1^t)``, ``v̂ = v/(1 − β2^t)``;
    - ``eps_form="hat"`` (Kingma & Ba's efficient form, Algorithm 1's footnote):
      ``θ ← θ − α_t·m/(√v + ε̂)`` with ``α_t = lr·√(1 − β2^t)/(1 − β1^t)`` and ``ε̂ = eps``.

    The two agree exactly when ``ε̂ = ε·√(1 − β2^t)``, which is how the standard form is computed here (one
    code path). Decoupled decay ``θ ← (1 − lr·λ)·θ`` comes first (PyTorch ``AdamW``). The update runs in
    cache-sized blocks on a few threads; each entry's arithmetic is the same as in one pass.

    Attributes
    ----------
    lr, b1, b2, eps : float
        Step size, β1, β2 and ε.
    eps_form : str
        ``"standard"`` or ``"hat"`` (:data:`EPS_FORMS`).
    weight_decay : float or mapping
        One λ, or ``{key: λ}`` (missing keys: 0).
    t : int
        Updates applied since :meth:`start`.
    m1, m2 : dict
        The first and second moments per parameter key.

    Raises
    ------
    InputError
        An unknown ``eps_form``.
    """

    lr: float = 1e-3
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    eps_form: str = "standard"
    weight_decay: float | Mapping[str, float] = 0.0
    t: int = 0
    m1: dict[str, np.ndarray] = field(default_factory=dict)
    m2: dict[str, np.ndarray] = field(default_factory=dict)
    scratch: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.eps_form not in EPS_FORMS:
            raise InputError(f"eps_form must be one of {EPS_FORMS}, got {self.eps_form!r}")

    def start(self, params: dict) -> dict:
        """Fresh state for ``params`` (see :meth:`SGD.start`); the copies are C-contiguous.

        Parameters
        ----------
        params : dict
            Initial parameters (not modified).

        Returns
        -------
        dict
            C-contiguous copies of them, which :meth:`update` changes in place.
        """
        params = {k: np.array(v, order="C") for k, v in params.items()}
        self.t = 0
        self.m1 = {k: np.zeros_like(v) for k, v in params.items()}
        self.m2 = {k: np.zeros_like(v) for k, v in params.items()}
        self.scratch = {k: np.empty_like(v) for k, v in params.items()}
        return params

    def update(self, params: dict, grads: dict) -> None:
        """One step, in place, on the keys of ``grads`` (the other parameters stay fixed).

        Parameters
        ----------
        params, grads
            As in :meth:`SGD.update`.
        """
        self.t += 1
        correction2 = math.sqrt(1 - self.b2**self.t)
        alpha = self.lr * correction2 / (1 - self.b1**self.t)
        eps_t = self.eps * correction2 if self.eps_form == "standard" else self.eps
        tasks = []
        for k, g in grads.items():
            decay = self.weight_decay
            lam = decay.get(k, 0.0) if isinstance(decay, Mapping) else decay
            views = [a.reshape(-1) for a in (params[k], np.asarray(g, dtype=params[k].dtype), self.m1[k],
                                             self.m2[k], self.scratch[k])]
            scalars = [1.0 - self.lr * lam, self.b1, self.b2, eps_t, alpha]
            for start in range(0, views[0].size, ADAM_BLOCK):
                block = slice(start, start + ADAM_BLOCK)
                tasks.append([v[block] for v in views] + scalars)
        run_parallel(_adam_task, tasks)


def _descend(optimizer: SGD | Adam, grad_fn: Callable, params: dict, steps: int,
             callback: Callable | None) -> dict:
    params = optimizer.start(params)
    for step in range(steps):
        grads = grad_fn(params, step)
        if callback is not None and callback(params, step, grads):
            break
        optimizer.update(params, grads)
    return params


def sgd(grad_fn: Callable, params: dict, steps: int, *, lr: float = 0.1, momentum: float = 0.0,
        weight_decay: float | Mapping[str, float] = 0.0, callback: Callable | None = None) -> dict:
    """Run :class:`SGD` for at most ``steps`` steps on the gradients ``grad_fn`` gives.

    Parameters
    ----------
    grad_fn : callable
        ``grad_fn(params, step) -> grads``, a dict over a subset of the keys (the others stay fixed).
    params : dict
        Initial parameters (not modified).
    steps : int
        Steps at most.
    lr, momentum, weight_decay
        As in :class:`SGD`.
    callback : callable, optional
        ``callback(params, step, grads)``; True stops before that step's update.

    Returns
    -------
    dict
        The final parameters.
    """
    return _descend(SGD(lr, momentum, weight_decay), grad_fn, params, steps, callback)


def adam(grad_fn: Callable, params: dict, steps: int, *, lr: float = 1e-3, b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8, eps_form: str = "standard", weight_decay: float | Mapping[str, float] = 0.0,
         callback: Callable | None = None) -> dict:
    """Run :class:`Adam` for at most ``steps`` steps on the gradients ``grad_fn`` gives (the contract of
    :func:`sgd`).

    Parameters
    ----------
    grad_fn, params, steps, callback
        As in :func:`sgd`.
    lr, b1, b2, eps, eps_form, weight_decay
        As in :class:`Adam`.

    Returns
    -------
    dict
        The final parameters.

    Raises
    ------
    InputError
        An unknown ``eps_form``.
    """
    return _descend(Adam(lr, b1, b2, eps, eps_form, weight_decay), grad_fn, params, steps, callback)


OPTIMIZERS: dict[str, Callable[..., dict]] = {"adam": adam, "sgd": sgd}
