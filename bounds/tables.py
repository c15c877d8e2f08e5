"""Lower bounds beside the constructions' sizes, with the gap ratio (docs/theory.md, "Lower bounds";
docs/bounds.md).

One row per (construction, N, R, k, b): the construction's d and its other fact-specific parameters P0 (from
its promise in ``theory/statements.py``, never from a built model), the lower bound that applies to a model of
its kind with that P0, and ``gap = d / d_min``. A bound that is vacuous (``d_min = 0``, e.g. when P0 already
holds all the facts) has no gap: the construction pays in P0 instead of d.

Two notions of b (docs/bounds.md, "Two notions of b"): ``bound_rows`` evaluates the bounds at the b it is
given, which is the *per-parameter codebook* notion (each fact-specific parameter takes one of ``2^b``
task-independent values of its own); ``gap_rows`` puts each construction at the b its *per-tensor*
quantization actually needs (the checker's precision scan measures it; the caller passes it in) beside
the per-parameter b = 1 row where the construction's embeddings are known to fit it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import unicodedata
import warnings
from collections.abc import Mapping

from georecall.bounds import lower
from georecall.constructions import registry
from georecall.constructions.codes import binary_length
from georecall.errors import InputError
from georecall.theory import __version__, statements
from georecall.theory.tasks import check_positive_int

__all__ = ["BOUND_COLUMNS", "COLUMNS", "FORMATS", "GAP_COLUMNS", "bound_rows", "gap_rows", "governing_bound",
           "latex_caption", "latex_escape", "render", "render_table"]

FORMATS = ("md", "csv", "json", "latex")


def _promises(N: int, R: int, k: int, constructions=None) -> dict[str, statements.Promise]:
    """Promised sizes at binary codes and nominal constants for every registered construction answering k
    hops (``constructions.registry``: the one list of constructions; sizes do not depend on the attention
    constants), or only for the ids in ``constructions``."""
    chosen = registry.specs() if constructions is None else [registry.get(c) for c in constructions]
    return {spec.id: spec.nominal_promise(N, R, k) for spec in chosen if spec.hops == "multi" or k == 1}


def governing_bound(name: str, promise: statements.Promise):
    """``(bound function, P0)`` for a registered construction.

    The bound function evaluates every bound that holds for a model of the construction's kind and returns
    the strongest (largest ``d_min``; the earlier in this list on a tie):

    1. the bound its spec names (``spec.bound``);
    2. total information, which holds for every model answering every query whatever its kind: e.g. G2 at
       N = 4096, R = 16, k = 3, where no gadget fits (``N < S_3``) and the tradeoff bound is empty;
    3. per entity (docs/bounds.md), for a construction that answers in one forward pass (``spec.decoding ==
       "last"``): the query ⟨r_k, …, r_1, s⟩ sees no entity embedding but e_s, so e_s and the P0 others
       determine the entity's R^k answers. It does not hold for chain-of-thought decoding, whose later steps
       read the generated entities' embeddings (there the spec's own bound is its first-step form). E.g. G1
       at N = 4096, R = 16, b = 1: d ≥ R·log2 N = 192 per entity against 169 from total information.

    As P0 it takes the promise's fact-specific parameters when the construction stores the facts in the MLP
    (``spec.facts_in``), else 0 (the embeddings are counted by the bound itself).

    Parameters
    ----------
    name : str
        A registered construction id or name.
    promise : Promise
        Its promise (for P0).

    Returns
    -------
    tuple
        ``(fn, P0)`` with ``fn(N, R, k, b, P0) -> lower.Bound``.

    Examples
    --------
    >>> from georecall.constructions import registry
    >>> fn, P0 = governing_bound("G1", registry.get("G1").nominal_promise(4096, 16, 1))
    >>> bound = fn(4096, 16, 1, 1, P0)
    >>> bound.id, bound.d_min
    ('per-entity', 192)
    """
    spec = registry.get(name)
    names = [spec.bound] + [other for other in ("total_information", "per_entity")
                            if other != spec.bound and (other != "per_entity" or spec.decoding == "last")]

    def strongest(N: int, R: int, k: int, b, P0: int) -> lower.Bound:
        # looked up at call time, so that tests can replace a bound function
        bounds = [getattr(lower, bound_name)(N, R, k, b, P0) for bound_name in names]
        return max(bounds, key=lambda bound: bound.d_min)  # the first of the largest: the spec's own on a tie

    strongest.__name__ = "strongest_of_" + "_and_".join(names)
    return strongest, (promise.fact_params if spec.facts_in == "mlp" else 0)


def _bound_cells(bound: lower.Bound, d: int, prefix: str = "") -> dict:
    """``d_bound``, ``d_min``, ``gap`` and ``vacuous``: None for a bound that says something (d_min > 0),
    "no gadget" when the tradeoff bound's gadget family does not fit (N < S_k), "vacuous" otherwise (the
    count is already paid for by P0, or there is nothing to count)."""
    gap = d / bound.d_min if bound.d_min > 0 else None
    empty = None
    if bound.d_min == 0:
        empty = "no gadget" if bound.id == "tradeoff" and not bound.params.get("M") else "vacuous"
    return {f"{prefix}d_bound": round(bound.d_bound, 6), f"{prefix}d_min": bound.d_min,
            f"{prefix}gap": None if gap is None else round(gap, 4), f"{prefix}vacuous": empty}


def bound_rows(Ns, Rs, ks, bits=(1,), constructions=None) -> list[dict]:
    """Rows for every combination of the given N, R, k and b (b in the per-parameter codebook notion), for
    every registered construction (or those whose ids or names ``constructions`` lists), each with the bound
    that governs it (:func:`governing_bound`).

    ``log2_count_lower`` is log2 of a lower bound on the counted set (``count_exact`` says when it is the
    exact size). G1 rows also carry its fact-carrying bits per subject (``R·⌈log2 N⌉``) against the
    per-subject share of ``log2|F_1|`` and their ratio (``1 + O(1/log N)``).

    Parameters
    ----------
    Ns, Rs, ks : iterable of int
        The sizes.
    bits : iterable of float
        The b values.
    constructions : iterable of str, optional
        Construction ids or names (default: every registered one answering k hops).

    Returns
    -------
    list of dict
        One row per (N, R, k, b, construction).

    Raises
    ------
    InputError
        A size not a positive integer, a bad b, or an unknown construction.
    """
    rows = []
    for N in Ns:
        for R in Rs:
            for k in ks:
                N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
                for b in bits:
                    for name, promise in _promises(N, R, k, constructions).items():
                        bound_fn, P0 = governing_bound(name, promise)
                        bound = bound_fn(N, R, k, b, P0)
                        row = {"construction": name, "N": N, "R": R, "k": k, "b": b,
                               "codebook": "per parameter", "d": promise.d, "m": promise.m, "P0": P0,
                               "bound": bound.id, "formula": bound.formula, "counted": bound.counted,
                               "log2_count_lower": round(bound.log2_count_lower, 6),
                               "count_exact": bound.count_exact, **_bound_cells(bound, promise.d),
                               "M": bound.params.get("M"), "version": __version__}
                        # G1: fact-carrying bits per subject vs the per-subject share of log2|F_1| (total
                        # information, whichever bound the row shows; per entity it is R·log2 N)
                        if name == "G1":
                            information = lower.total_information(N, R, 1).log2_count_lower
                            row["fact_bits_per_subject"] = R * binary_length(N)
                            row["bound_bits_per_subject"] = round(information / N, 6)
                            # (N = 1: one task, nothing to store; the ratio is undefined)
                            row["fact_bits_ratio"] = round(
                                R * binary_length(N) * N / information, 4
                            ) if information > 0 else None
                        rows.append(row)
    return rows


def gap_rows(Ns, Rs, ks, needed: Mapping[str, int | None],
             per_parameter: Mapping[str, int] | None = None, constructions=None) -> list[dict]:
    """One row per (construction, N, R, k): the gap at the b the construction needs, and at a per-parameter b.

    Columns ``b_needed``, ``needed_d_min``, ``needed_gap`` and ``b_per_parameter``, ``per_parameter_d_min``,
    ``per_parameter_gap``; a vacuous bound has gap ``None``.

    Parameters
    ----------
    Ns, Rs, ks : iterable of int
        The sizes.
    needed : mapping of str to int or None
        ``needed[name]``: the smallest b at which the construction's per-tensor quantization stays exact
        (measured by the precision scan; None or absent: not measured or size-dependent, no bound evaluated).
    per_parameter : mapping of str to int, optional
        ``per_parameter[name]``: a b at which its fact-specific parameters fit per-parameter codebooks (e.g. 1
        for G1: every embedding entry is ``±|a_i|`` or a task-independent 0).
    constructions : iterable of str, optional
        Construction ids or names (default: every registered one answering k hops).

    Returns
    -------
    list of dict

    Raises
    ------
    InputError
        A size not a positive integer, a bad b, or an unknown construction.
    """
    per_parameter = per_parameter or {}
    rows = []
    for N in Ns:
        for R in Rs:
            for k in ks:
                N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
                for name, promise in _promises(N, R, k, constructions).items():
                    bound_fn, P0 = governing_bound(name, promise)
                    row = {"construction": name, "N": N, "R": R, "k": k, "d": promise.d, "P0": P0}
                    b = needed.get(name)
                    row["b_needed"] = b
                    if b is not None:
                        bound = bound_fn(N, R, k, b, P0)
                        row.update(bound=bound.id, **_bound_cells(bound, promise.d, "needed_"))
                    b1 = per_parameter.get(name)
                    row["b_per_parameter"] = b1
                    if b1 is not None:
                        bound = bound_fn(N, R, k, b1, P0)
                        row.update(bound=bound.id, **_bound_cells(bound, promise.d, "per_parameter_"))
                    row["version"] = __version__
                    rows.append(row)
    return rows


# ----------------------------------------------------------------------------------------------- rendering

# Column key -> (plain header for Markdown, LaTeX header in math mode where it is a symbol).
COLUMNS: dict[str, tuple[str, str]] = {
    "construction": ("construction", "construction"),
    "N": ("N", "$N$"), "R": ("R", "$R$"), "k": ("k", "$k$"), "b": ("b", "$b$"), "D": ("D", "$D$"),
    "d": ("d", "$d$"), "m": ("m", "$m$"), "P0": ("P0", "$P_0$"), "M": ("M", "$M$"),
    "params": ("parameters", "parameters"), "fact_params": ("fact-specific", "fact-specific"),
    "bound": ("bound", "bound"), "formula": ("formula", "formula"), "counted": ("counted", "counted"),
    "d_bound": ("d >=", r"$d \geq$"), "d_min": ("d_min", r"$d_{\min}$"), "gap": ("gap", r"$d/d_{\min}$"),
    "log2_count_lower": ("log2 C", r"$\log_2 C$"),
    "b_needed": ("b needed", r"$b$"), "needed_d_min": ("d_min (needed b)", r"$d_{\min}$"),
    "needed_gap": ("gap (needed b)", "gap"),
    "b_per_parameter": ("b per parameter", r"$b$"),
    "per_parameter_d_min": ("d_min (per-parameter b)", r"$d_{\min}$"),
    "per_parameter_gap": ("gap (per-parameter b)", "gap"),
    "fact_bits_per_subject": ("fact bits / subject", "fact bits/subject"),
    "bound_bits_per_subject": ("bound bits / subject", "bound bits/subject"),
    "fact_bits_ratio": ("ratio", "ratio"),
}
# Default columns: what a paper table needs, narrow enough for one page (every field is in csv and json).
# N, R, k and b are left out of the default columns when every row has the same value (the caption, or a
# comment line in LaTeX, states them).
BOUND_COLUMNS = ("construction", "N", "R", "k", "b", "d", "bound", "d_min", "gap")
GAP_COLUMNS = ("construction", "N", "R", "k", "d", "b_needed", "needed_d_min", "needed_gap",
               "b_per_parameter", "per_parameter_d_min", "per_parameter_gap")
GAP_GROUPS = (("$b$ needed", ("b_needed", "needed_d_min", "needed_gap")),
              ("per param.", ("b_per_parameter", "per_parameter_d_min", "per_parameter_gap")))
# A gap table whose measured b is the same wherever it is given names it in the group's header instead.
_GAP_GROUP_WITH_B = {"b_needed": "$b = {b}$ needed", "b_per_parameter": "$b = {b}$ per param."}
_CONSTANT_DROPPED = ("N", "R", "k", "b")
_BOUND_NAMES = {"total-information": "total information", "per-entity": "per entity",
                "tradeoff": "tradeoff", "chain-of-thought": "chain of thought"}
_BOUND_NAMES_LATEX = {"total-information": "total", "per-entity": "entity",
                      "tradeoff": "tradeoff", "chain-of-thought": "CoT"}
# Cells whose value is replaced by the row's reason when the bound is empty (d_min = 0).
# (the gap of an empty bound is None: shown as a dash)
_EMPTY_CELLS = {"d_bound": "vacuous", "d_min": "vacuous", "needed_d_min": "needed_vacuous",
                "per_parameter_d_min": "per_parameter_vacuous"}

_LATEX_SPECIALS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                   "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                   "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}", "—": "---", "–": "--",
                   "≥": r"$\geq$", "≤": r"$\leq$", "·": r"$\cdot$", "×": r"$\times$", "−": "$-$",
                   "λ": r"$\lambda$", "β": r"$\beta$", "ε": r"$\varepsilon$", "π": r"$\pi$"}


# Beyond the specials: math symbols (set in math mode), text symbols, accents (by Unicode decomposition)
_LATEX_MATH = {"∑": r"\sum", "∏": r"\prod", "∞": r"\infty", "≠": r"\neq", "≈": r"\approx", "±": r"\pm",
               "∈": r"\in", "∉": r"\notin", "→": r"\to", "←": r"\leftarrow", "⇒": r"\Rightarrow",
               "↔": r"\leftrightarrow", "√": r"\surd", "∀": r"\forall", "∃": r"\exists", "∂": r"\partial",
               "∇": r"\nabla", "∫": r"\int", "⌈": r"\lceil", "⌉": r"\rceil", "⌊": r"\lfloor", "⌋": r"\rfloor",
               "⊆": r"\subseteq", "⊂": r"\subset", "∪": r"\cup", "∩": r"\cap", "∅": r"\emptyset",
               "÷": r"\div", "∘": r"\circ", "⟨": r"\langle", "⟩": r"\rangle", "‖": r"\|", "≡": r"\equiv",
               "∝": r"\propto", "≪": r"\ll", "≫": r"\gg", "°": r"^\circ", "²": "^2", "³": "^3", "¹": "^1",
               "∼": r"\sim", "≃": r"\simeq", "⊗": r"\otimes", "⊕": r"\oplus", "ℝ": r"\mathbf{R}",
               "ℕ": r"\mathbf{N}", "ℤ": r"\mathbf{Z}", "ℓ": r"\ell", "µ": r"\mu"}
_LATEX_TEXT = {"“": "``", "”": "''", "‘": "`", "’": "'", "…": r"\dots{}", "§": r"\S{}",
               "©": r"\copyright{}", "£": r"\pounds{}", "ß": r"\ss{}", "æ": r"\ae{}", "Æ": r"\AE{}",
               "ø": r"\o{}", "Ø": r"\O{}",
               "å": r"\aa{}", "Å": r"\AA{}", "œ": r"\oe{}", "Œ": r"\OE{}", "ł": r"\l{}", "Ł": r"\L{}",
               "\u00a0": "~", "•": r"\textbullet{}", "†": r"\dag{}", "‡": r"\ddag{}", "¶": r"\P{}"}
_LATEX_ACCENTS = {"\u0301": "'", "\u0300": "`", "\u0302": "^", "\u0303": "~", "\u0308": '"', "\u0327": "c",
                  "\u030a": "r", "\u030c": "v", "\u0304": "=", "\u0306": "u", "\u0307": ".", "\u030b": "H",
                  "\u0328": "k"}
# Greek letters: the small ones LaTeX has commands for, the capitals it has, the capitals that look Latin
_GREEK_SMALL = {"ALPHA", "BETA", "GAMMA", "DELTA", "EPSILON", "ZETA", "ETA", "THETA", "IOTA", "KAPPA",
                "LAMDA", "MU", "NU", "XI", "PI", "RHO", "SIGMA", "TAU", "UPSILON", "PHI", "CHI", "PSI",
                "OMEGA"}
_GREEK_CAPITAL = {"GAMMA", "DELTA", "THETA", "LAMDA", "XI", "PI", "SIGMA", "UPSILON", "PHI", "PSI", "OMEGA"}
_GREEK_LATIN = {"ALPHA": "A", "BETA": "B", "EPSILON": "E", "ZETA": "Z", "ETA": "H", "IOTA": "I", "KAPPA": "K",
                "MU": "M", "NU": "N", "OMICRON": "O", "RHO": "P", "TAU": "T", "CHI": "X"}
UNSET = "?"  # what a character LaTeX cannot set becomes (with a warning naming it)


def _latex_char(ch: str) -> str | None:
    """One non-ASCII character as LaTeX source, or None when pdfLaTeX without extra packages cannot set
    it."""
    if ch in _LATEX_SPECIALS:
        return _LATEX_SPECIALS[ch]
    if ch in _LATEX_MATH:
        return "$" + _LATEX_MATH[ch] + "$"
    if ch in _LATEX_TEXT:
        return _LATEX_TEXT[ch]
    name = unicodedata.name(ch, "")
    command = {"LAMDA": "lambda", "Lamda": "Lambda"}  # Unicode spells it LAMDA
    if name.startswith("GREEK SMALL LETTER "):
        letter = name[len("GREEK SMALL LETTER "):]
        if letter == "OMICRON":
            return "o"
        if letter == "FINAL SIGMA":
            return r"$\varsigma$"
        if letter in _GREEK_SMALL:
            return "$\\" + command.get(letter, letter.lower()) + "$"
    if name.startswith("GREEK CAPITAL LETTER "):
        letter = name[len("GREEK CAPITAL LETTER "):]
        if letter in _GREEK_LATIN:
            return _GREEK_LATIN[letter]
        if letter in _GREEK_CAPITAL:
            return "$\\" + command.get(letter.capitalize(), letter.capitalize()) + "$"
    parts = unicodedata.normalize("NFD", ch)
    if len(parts) == 2 and parts[0].isascii() and parts[0].isalpha() and parts[1] in _LATEX_ACCENTS:
        base = {"i": r"\i", "j": r"\j"}.get(parts[0], parts[0])
        return "\\" + _LATEX_ACCENTS[parts[1]] + "{" + base + "}"
    return None


def latex_caption(text: str) -> str:
    """A caption in LaTeX: text escaped (:func:`latex_escape`), each ``$…$`` pair kept as written (math:
    ``"bounds on $d$"`` is ``bounds on $d$``); an unpaired ``$`` is escaped.

    Parameters
    ----------
    text : str
        The caption as the user wrote it.

    Returns
    -------
    str

    Examples
    --------
    >>> print(latex_caption("Lower bounds on $d_{min}$ & gaps: 5$"))
    Lower bounds on $d_{min}$ \\& gaps: 5\\$
    """
    parts = str(text).split("$")
    if len(parts) % 2 == 0:  # an odd number of $: the last one is unpaired, escaped as text
        parts = [*parts[:-2], parts[-2] + "$" + parts[-1]]
    return "".join(latex_escape(part) if i % 2 == 0 else f"${part}$" for i, part in enumerate(parts))


def latex_escape(text: str) -> str:
    """``text`` safe in LaTeX text mode: the ten special characters escaped, Greek letters and math symbols
    in math mode, accented Latin letters as accent commands, typographic quotes and a few text symbols by
    their commands; any other character (an emoji, a CJK ideograph) cannot be set by pdfLaTeX without
    extra packages and becomes :data:`UNSET`, with a warning naming it.

    Parameters
    ----------
    text : str
        Plain text.

    Returns
    -------
    str
        LaTeX source (ASCII).

    Warns
    -----
    UserWarning
        Once per call that met characters LaTeX cannot set, naming each (``U+1F4A5 COLLISION SYMBOL``).
    """
    out, unset = [], []
    for ch in str(text):
        if ord(ch) < 128 and ch not in _LATEX_SPECIALS:
            out.append(ch)
            continue
        mapped = _latex_char(ch)
        if mapped is None:
            unset.append(ch)
            mapped = UNSET
        if out and len(mapped) > 2 and mapped[0] == mapped[-1] == "$" and out[-1].endswith("$") \
                and len(out[-1]) > 2 and out[-1][0] == "$":
            out[-1] = out[-1][:-1] + mapped[1:]  # adjacent symbols: one formula ($\alpha\leq\beta$)
            continue
        out.append(mapped)
    if unset:
        names = ", ".join(dict.fromkeys(f"U+{ord(c):04X} {unicodedata.name(c, 'unnamed')}" for c in unset))
        warnings.warn(f"LaTeX output: {len(unset)} character(s) pdfLaTeX cannot set were written as "
                      f"{UNSET!r}: {names}", stacklevel=2)
    return "".join(out)


# Columns holding a number of bits: an integral value prints as an integer (b = 1, not 1.00).
_BITS = {"b", "bits", "b_needed", "b_per_parameter"}


def _number(value, fmt: str, integral: bool = True) -> str:
    """An int with thousands separators (``{,}`` in LaTeX), an integral float as an int when ``integral``,
    other floats with two decimals; non-finite floats as words."""
    if isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return "n/a" if math.isnan(value) else ("infinite" if value > 0 else "-infinite")
    if integral and isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        value = int(value)
    text = f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"
    return text.replace(",", "{,}").replace("-", "$-$") if fmt == "latex" else text


def _cell(row: dict, key: str, fmt: str) -> str:
    value = row.get(key)
    reason_key = _EMPTY_CELLS.get(key)
    if reason_key is not None and row.get(reason_key) and key in row:
        return str(row[reason_key])
    if value is None:
        return "--" if fmt == "latex" else "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return _number(value, fmt, integral=key in _BITS)
    if key == "bound":
        value = (_BOUND_NAMES_LATEX if fmt == "latex" else _BOUND_NAMES).get(str(value), value)
    return latex_escape(str(value)) if fmt == "latex" else str(value).replace("|", "\\|")


def render_table(rows: list[dict], fmt: str = "md", *, columns=None, headers: Mapping[str, tuple[str, str]]
                 | None = None, caption: str | None = None, label: str | None = None,
                 meta: Mapping | None = None, groups=(), constants: Mapping | None = None) -> str:
    """Rows of dicts as a Markdown, CSV, JSON or LaTeX table.

    Markdown and LaTeX show ``columns`` (default: every key of the first row); CSV has every field of every
    row, ``columns`` first; JSON is ``{"version", **meta, "rows"}``. LaTeX is paper-ready: booktabs rules,
    math-mode headers (``headers[key][1]``, else the escaped key), the first and every text column
    left-aligned and the numeric ones right-aligned, every text cell escaped, and with a caption or label a
    ``table`` float around it (needs ``\\usepackage{booktabs}``).

    Parameters
    ----------
    rows : list of dict
        The rows.
    fmt : {"md", "csv", "json", "latex"}
        The format.
    columns : sequence of str, optional
        Keys to show, in order; each must be a key of some row.
    headers : mapping, optional
        Key -> (Markdown header, LaTeX header); default :data:`COLUMNS`.
    caption, label : str, optional
        LaTeX caption (escaped) and ``\\label`` key; ignored by the other formats.
    meta : mapping, optional
        Extra top-level fields of the JSON form.
    groups : sequence of (str, sequence of str), optional
        LaTeX column groups: a header (LaTeX source) spanning consecutive columns, with a ``\\cmidrule``.
    constants : mapping, optional
        Column -> the value every row has, for columns left out: a line under a Markdown table; in LaTeX
        appended to the caption in math (``$N = 4{,}096$``) and a comment line.

    Returns
    -------
    str
        The table.

    Raises
    ------
    InputError
        For an unknown format or a column that no row has.
    """
    if fmt not in FORMATS:
        raise InputError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "json":
        return json.dumps({"version": __version__, **(meta or {}), "rows": rows}, indent=2)
    available = list(dict.fromkeys(c for r in rows for c in r))
    columns = list(columns) if columns is not None else available
    unknown = [c for c in columns if c not in available]
    if unknown and rows:
        raise InputError(f"no column {', '.join(map(repr, unknown))}; the rows have: {', '.join(available)}")
    if not columns:
        raise InputError("a table needs at least one column")
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    headers = {**COLUMNS, **(headers or {})}
    constants = dict(constants or {})
    body = [[_cell(r, c, fmt) for c in columns] for r in rows]
    # text columns left-aligned, numeric ones right-aligned (a word such as "vacuous" in a numeric column
    # does not make it a text column)
    text = [i == 0 or any(isinstance(r.get(c), str) and c not in _EMPTY_CELLS for r in rows)
            for i, c in enumerate(columns)]
    if fmt == "md":
        lines = ["| " + " | ".join(headers.get(c, (c, c))[0].replace("|", "\\|") for c in columns) + " |",
                 "|" + "|".join("---" if t else "---:" for t in text) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        note = ", ".join(f"{headers.get(c, (c, c))[0]} = {_number(v, 'md')}" for c, v in constants.items())
        return "\n".join(lines + ([f"\nevery row: {note}"] if note else []))
    head = [headers[c][1] if c in headers else latex_escape(c) for c in columns]
    lines = [r"\begin{tabular}{" + "".join("l" if t else "r" for t in text) + "}", r"\toprule"]
    spans = [(title, [columns.index(c) for c in group if c in columns]) for title, group in groups]
    spans = [(title, at) for title, at in spans if at]
    if spans:
        cells, rules, i = [], [], 0
        for title, at in sorted(spans, key=lambda span: span[1][0]):
            cells += [""] * (at[0] - i) + [r"\multicolumn{" + f"{len(at)}" + "}{c}{" + title + "}"]
            rules.append(r"\cmidrule(lr){" + f"{at[0] + 1}-{at[-1] + 1}" + "}")
            i = at[-1] + 1
        cells += [""] * (len(columns) - i)
        lines += [" & ".join(cells) + r" \\", " ".join(rules)]
    lines += [" & ".join(head) + r" \\", r"\midrule"]
    lines += [" & ".join(row) + r" \\" for row in body]
    lines += [r"\bottomrule", r"\end{tabular}"]
    if caption is not None or label is not None:
        float_ = [r"\begin{table}[t]", r"\centering"]
        if caption is not None:
            grouped = {c for _, group in groups for c in group}
            parts = [(headers[c][1].rstrip("$") if c in headers and headers[c][1].startswith("$")
                      else "$" + latex_escape(c)) + " = " + _number(v, "latex").replace("$", "") + "$"
                     for c, v in constants.items() if c not in grouped]
            float_.append(r"\caption{" + latex_caption(caption) + (f" ({', '.join(parts)})" if parts else "")
                          + "}")
        if label is not None:
            float_.append(r"\label{" + "".join(ch for ch in label if ch.isalnum() or ch in ":-_.") + "}")
        lines = float_ + lines + [r"\end{table}"]
    if constants:
        lines.append("% every row: " + ", ".join(f"{c} = {_number(v, 'md')}" for c, v in constants.items()))
    lines.append(f"% georecall {__version__}; needs \\usepackage{{booktabs}}")
    return "\n".join(lines)


def render(rows: list[dict], fmt: str = "md", *, columns=None, caption: str | None = None,
           label: str | None = None) -> str:
    """Bound rows (:func:`bound_rows`) or gap rows (:func:`gap_rows`) as a table (:func:`render_table`).

    Default columns: :data:`BOUND_COLUMNS` or :data:`GAP_COLUMNS`, without those of N, R, k, b that are the
    same in every row (stated in a note under the table and in the caption). An empty bound (``d_min = 0``)
    shows the word "vacuous", or "no gadget" for a tradeoff bound whose gadget family does not fit, in its
    ``d_min`` and ``d_bound`` cells and a dash as its gap (never a negative real bound); b prints as an
    integer where it is one.

    Parameters
    ----------
    rows : list of dict
        Bound or gap rows.
    fmt : {"md", "csv", "json", "latex"}
        The format.
    columns : sequence of str, optional
        Columns to show instead of the default ones.
    caption, label : str, optional
        LaTeX caption and label (a ``table`` float).

    Returns
    -------
    str
        The table.
    """
    if fmt == "csv":  # a machine format: every field unless columns are chosen
        return render_table(rows, fmt, columns=columns)
    gaps = bool(rows) and "b_needed" in rows[0]
    constants: dict = {}
    groups = list(GAP_GROUPS) if gaps else []
    if columns is None:
        columns = GAP_COLUMNS if gaps else BOUND_COLUMNS
        if rows:  # a gap table without any per-parameter b has no per-parameter columns
            columns = tuple(c for c in columns if any(r.get(c) is not None for r in rows))
        for c in _CONSTANT_DROPPED:
            if c in columns and len(rows) > 1 and len({repr(r.get(c)) for r in rows}) == 1:
                constants[c] = rows[0][c]
        for i, (_, group) in enumerate(groups):
            values = {r[group[0]] for r in rows if r.get(group[0]) is not None}
            if group[0] in columns and len(values) == 1:
                value = values.pop()
                groups[i] = (_GAP_GROUP_WITH_B[group[0]].format(b=_number(value, "latex")), group)
                # (a Markdown note; LaTeX says it in the group's header)
                constants[group[0]] = value if all(r.get(group[0]) is not None for r in rows) else \
                    f"{_number(value, 'md')} where measured"
                columns = tuple(c for c in columns if c != group[0])
        columns = tuple(c for c in columns if c not in constants)
    else:  # chosen columns: the shared values of the left-out N, R, k, b still go to the caption
        columns = tuple(columns)
        for c in _CONSTANT_DROPPED:
            shared = rows and all(c in r for r in rows) and len({repr(r[c]) for r in rows}) == 1
            if c not in columns and shared:
                constants[c] = rows[0][c]
    return render_table(rows, fmt, columns=columns, caption=caption, label=label, groups=groups,
                        constants=constants)
