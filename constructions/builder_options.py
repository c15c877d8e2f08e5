"""Builder options, each declared once: what a construction's builder takes beyond the task, how the command
line offers it (flag, kind, help, default, a command's own wording) and how a refusal names it.

The shared ones are :data:`BUILDER_OPTIONS`; a spec declares options of its own in
``ConstructionSpec.own_options`` (:mod:`.registry`), and the command-line commands that build a construction
(``check``, ``certify``, ``export``) add every declared option with no edit of the command line
(``georecall.cli.options.add_builder_option``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from georecall.constructions.codes import CODE_KINDS
from georecall.errors import InputError

if TYPE_CHECKING:  # the registry imports this module: its spec type is named for the annotations only
    from georecall.constructions.registry import ConstructionSpec

__all__ = ["BUILDER_OPTIONS", "OPTION_KINDS", "BuilderOption", "integer_by_default"]


# How the command line reads a builder option's value: a flag (given or not), one of ``choices``, a finite
# positive number, a positive number up to 1e12 (a scale), a code length (a whole number within the command
# line's limit on D), or any text.
OPTION_KINDS = ("flag", "choice", "positive", "scale", "length", "text")


@dataclass(frozen=True)
class BuilderOption:
    """One builder option, declared once: what the command line offers for it and how a refusal names it.

    The command-line commands that build a construction (``check``, ``certify``, ``export``) add their
    builder options from these declarations and pass what was given to the builder under ``name``: the
    shared ones (:data:`BUILDER_OPTIONS`) where each command offers them, and a spec's own
    (``ConstructionSpec.own_options``) on every such command of its hops, with no edit to the command line.

    Attributes
    ----------
    name : the builder's keyword; on the command line ``--name`` (underscores written as dashes)
    kind : how the command line reads the value (one of :data:`OPTION_KINDS`)
    help : the option's help text
    what : how a message names it (``"gate constant G (--gate)"``); default ``"name (--name)"``
    metavar : the value's name in the help (None: argparse's own)
    choices : the values a ``"choice"`` option takes
    default : the value when not given (None, or False for a flag: not passed to the builder)
    per_command : the wording of one command, where it differs: command (``"check single-hop"``, or its
        first word, ``"certify"``) -> the ``help``, ``metavar`` or ``default`` it uses instead
    """

    name: str
    kind: str
    help: str
    what: str = ""
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    default: Any = None
    per_command: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise InputError(f"a builder option's name is a Python identifier, got {self.name!r}")
        if self.kind not in OPTION_KINDS:
            raise InputError(f"builder option {self.name!r}: kind must be one of {OPTION_KINDS}, got "
                             f"{self.kind!r}")
        object.__setattr__(self, "choices", tuple(self.choices))
        if (self.kind == "choice") != bool(self.choices):
            raise InputError(f"builder option {self.name!r}: choices are given exactly for kind 'choice'")
        for command, wording in self.per_command.items():
            if not set(wording) <= {"help", "metavar", "default"}:
                raise InputError(f"builder option {self.name!r}: per_command[{command!r}] may set help, "
                                 f"metavar and default, got {sorted(wording)}")
        if not self.what:
            object.__setattr__(self, "what", f"{self.name} ({self.flag})")

    @property
    def flag(self) -> str:
        """The option on the command line: ``--name`` with underscores as dashes."""
        return "--" + self.name.replace("_", "-")

    def wording(self, command: str) -> dict[str, Any]:
        """The help, metavar and default ``command`` declares it with: the option's own, with the command's
        (or its first word's) ``per_command`` entry over them.

        Parameters
        ----------
        command : str
            The command (``"check single-hop"``).

        Returns
        -------
        dict
            ``help``, ``metavar`` and ``default``.
        """
        own = {"help": self.help, "metavar": self.metavar, "default": self.default}
        return {**own, **self.per_command.get(command, self.per_command.get(command.split()[0], {}))}


_CODES_HELP = "attribute codes a_i (default: the construction's own, binary for the built-in ones)"
# The builder options of the built-in constructions, each declared once: the common ones (COMMON_OPTIONS) and
# those a spec lists in ``options`` (``gain`` is offered in Python only). Each command-line command that
# builds a construction offers some of them, in the wording of ``per_command``.
BUILDER_OPTIONS: dict[str, BuilderOption] = {option.name: option for option in (
    BuilderOption(
        "codes", "choice", _CODES_HELP, "code kind (--codes)", choices=tuple(CODE_KINDS), per_command={
            "check single-hop": {"help": "attribute codes a_i: binary (the bits of i as ±1), random sign, "
                                 "normalised Gaussian (default: the construction's own, binary for the "
                                 "built-in ones; refused by one that takes none)"},
            "export": {"help": "attribute codes a_i (construction)"}}),
    BuilderOption(
        "D", "length", "code length D (default as for check single-hop)", "code length D (--D)", per_command={
            "check single-hop": {"help": "code length D (default: ceil(log2 N) for binary codes; "
                                 "2 ln(N²/2δ)/t² with t = 1/2, δ = 1e-3 for random codes)"},
            "certify": {"help": "code length D (default as for check)"},
            "export": {"help": "code length D (construction)"}}),
    BuilderOption(
        "lam", "scale", "read-out scale λ: the read-out rows are U_j = λ·a_j on the output block",
        "read-out scale λ (--lam)", metavar="λ", default=1.0,
        per_command={"certify": {"help": "read-out scale λ (default 1)", "metavar": None}}),
    BuilderOption(
        "gate", "positive", "gate constant G", "gate constant G (--gate)", metavar="G", per_command={
            "check single-hop": {"help": "gate constant G of G1's ReLU selector: the relation embedding is "
                                 "q_r = G·1_{g_r} (default 2·c1·max|a|/c2, twice the smallest G that shuts "
                                 "the other relations' units)"},
            "check multi-hop": {"help": "gate constant G of the AND units (default: twice its bound)"},
            "certify": {"metavar": None}}),
    BuilderOption(
        "beta", "positive", "inverse temperature β of a k-hop construction's positional heads",
        "softmax inverse temperature β (--beta)", metavar="β", per_command={
            "check single-hop": {"help": "softmax inverse temperature β (constructions with softmax heads "
                                 "only; G1 and A1 have none and refuse it)"},
            "check multi-hop": {"help": "inverse temperature β of the positional heads (default: the "
                                "smallest β whose leakage ε = n/(e^β + n) leaves half the margin)"},
            "certify": {"help": "inverse temperature β of the positional heads (default: from the leakage "
                        "inequality)", "metavar": None}}),
    BuilderOption(
        "attention", "choice", "softmax (β from the leakage inequality) or hard (an idealization: β -> ∞, "
        "leakage ε = 0)", "attention kind (--attention)", choices=("softmax", "hard"), default="softmax",
        per_command={
            "certify": {"help": "softmax (default) or hard (an idealization: β -> ∞)"},
            "export": {"help": "attention of a k-hop construction (hard, an idealization, cannot be "
                       "exported)", "default": None}}),
    BuilderOption("gain", "positive", "attention gain g",
                  "attention gain g (Python only: gain=g in gr.check, gr.certify, gr.build)"),
    BuilderOption(
        "integer", "flag", "±1 codes and integer constants (integer scale): prove every activation and logit "
        "is an exact integer", "integer mode (--integer)", default=False, per_command={
            "certify": {"help": "±1 codes and integer constants: certify in exact integer arithmetic (the "
                        "default where the construction allows it: binary or sign codes, no --lam or --gate "
                        "given)"}}),
)}


def integer_by_default(spec: ConstructionSpec, codes: str | None, options: Mapping[str, Any]) -> bool:
    """Whether certify works in exact integers when neither integer nor float mode is asked for: where the
    construction has an integer scale (it takes ``integer``, with binary or sign codes, asked for or its own)
    and no real constant was asked for (a read-out scale ``lam`` other than 1, a ``gate`` or a ``gain``).

    The one rule behind ``georecall certify single-hop`` (``--integer`` / ``--float`` decide instead) and
    ``gr.certify`` (``integer=True`` / ``False`` decide instead), so both certify the same object.

    Parameters
    ----------
    spec : ConstructionSpec
        The construction (``spec.accepts()``, and ``spec.codes`` when ``codes`` is None).
    codes : str or None
        The codes asked for (None: the construction's own).
    options : mapping
        The builder options asked for (None or absent: not asked for).

    Returns
    -------
    bool
    """
    kind = codes if codes is not None else spec.codes
    return ("integer" in spec.accepts() and kind in ("binary", "sign")
            and options.get("lam") in (None, 1.0) and options.get("gate") is None
            and options.get("gain") is None)
