"""The arrays of an ``.npy`` or ``.npz`` file, measured from its headers only: shape, dtype and the bytes each
takes once loaded, without decompressing a payload (a zip bomb is refused before a byte of it is inflated;
object arrays, which need pickle, are refused)."""

from __future__ import annotations

import math
import os
import zipfile
from dataclasses import dataclass

import numpy as np

from georecall.errors import InputError

__all__ = ["Member", "npy_member", "npz_members"]


@dataclass(frozen=True)
class Member:
    """One array of an ``.npz``/``.npy`` file, read from the headers only.

    Attributes
    ----------
    name : str
        The array's name (without ``.npy``).
    shape : tuple of int
        Its declared shape.
    dtype : numpy.dtype
        Its declared dtype.
    nbytes : int
        Bytes it takes once loaded (the larger of the declared shape's size and the zip's uncompressed size).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int


def _read_header(stream, path: str, name: str) -> tuple[tuple[int, ...], np.dtype]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(stream, max_header_size=100_000)
        elif version == (2, 0):
            shape, _, dtype = fmt.read_array_header_2_0(stream, max_header_size=100_000)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, SyntaxError, TypeError) as exc:
        raise InputError(f"{path!r}: array {name!r} has a damaged header ({_plain(exc)})") from None
    if dtype.hasobject:
        raise InputError(f"{path!r}: array {name!r} holds Python objects (pickled data); georecall reads "
                         "numbers only")
    if not isinstance(shape, tuple) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                               for s in shape):
        raise InputError(f"{path!r}: array {name!r} has a damaged header (shape {shape!r} is not a tuple of "
                         "sizes >= 0)")
    return tuple(int(s) for s in shape), dtype


def _plain(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def npy_member(path: str) -> Member:
    """Shape, dtype and size of a plain ``.npy`` file, read from its header only.

    Parameters
    ----------
    path : str
        The file.

    Returns
    -------
    Member
        The array's description.
    """
    try:
        with open(path, "rb") as f:
            shape, dtype = _read_header(f, path, os.path.basename(path))
    except IsADirectoryError:
        raise InputError(f"{path!r} is a directory, not an .npy file") from None
    except OSError as exc:
        raise InputError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    return Member(os.path.basename(path), shape, dtype, math.prod(shape) * dtype.itemsize)


def npz_members(path: str) -> list[Member]:
    """Every array of an ``.npz`` file, from the zip directory and each member's ``.npy`` header.

    Only the first bytes of each member are inflated (its header): a member whose declared or uncompressed
    size is huge is measured, never read.

    Parameters
    ----------
    path : str
        The file.

    Returns
    -------
    list of Member
        One per array.

    Raises
    ------
    InputError
        A missing, empty, truncated or non-zip file, a member that is not an ``.npy`` array, or object arrays.
    """
    if os.path.isdir(path):
        raise InputError(f"{path!r} is a directory, not an .npz file")
    if not os.path.exists(path):
        raise InputError(f"no such file {path!r}")
    if os.path.getsize(path) == 0:
        raise InputError(f"{path!r} is empty, not an .npz file")
    members = []
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    raise InputError(f"{path!r}: member {info.filename!r} is not an .npy array")
                name = info.filename[:-4]
                with archive.open(info) as stream:
                    shape, dtype = _read_header(stream, path, name)
                declared = math.prod(shape) * dtype.itemsize
                members.append(Member(name, shape, dtype, max(declared, int(info.file_size))))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError,
            RuntimeError) as exc:
        raise InputError(f"{path!r} is not a readable .npz file ({_plain(exc)})") from None
    return members
