"""The building blocks of the ``georecall`` parser: its argparse classes (one-line errors, defaults in the
help), the argparse types of the paper's letters (``parse_N``, ``parse_R``, ``parse_k`` ... within
:data:`~.common.LIMITS`), the shared options and which command takes which (:data:`SHARED`), and the option
groups several commands declare (sizes, figure files, table formats, ``--construction``, ``--style``).

:mod:`.declarations` declares every command with them; :mod:`.parser` builds the parser from those
declarations."""

from __future__ import annotations

import argparse
import math
from typing import Any

from georecall import usercode
from georecall.cli.common import LIMITS
from georecall.constructions import builder_options, registry
from georecall.constructions.codes import CODE_KINDS

__all__ = [
    "BUILDER_OPTION_DEST", "DEBUG_VARIABLE", "OPTION_TYPES", "RUN_CONTROLS", "SHARED", "Parser",
    "RawDescription", "Subparsers", "UsageError", "add_builder_option", "add_figure_options", "add_group",
    "add_own_options",
    "add_sizes", "add_style", "add_table_options", "add_user_constructions", "code_kinds",
    "construction_choices", "parse_D", "parse_N", "parse_R", "parse_bits", "parse_d", "parse_fraction",
    "parse_heads", "parse_k", "parse_lr", "parse_m", "parse_positive_int", "parse_seed", "parse_steps",
    "real_number", "shared_parents", "whole_number",
]

DEBUG_VARIABLE = "GEORECALL_DEBUG"  # set to 1: a user construction's exception is shown with its traceback


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit code 2."""


def _shown(value) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(_shown(v) for v in value) or "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


class _Formatter(argparse.HelpFormatter):
    """Help that shows every option's default: appended as "(default X)" unless the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if ("default" in text or not action.option_strings or default is None or default is False
                or default == [] or default is argparse.SUPPRESS):
            return text
        return f"{text} (default {_shown(default)})".replace("%", "%%").replace("%%%%", "%%")


class Parser(argparse.ArgumentParser):
    """The parser class of every ``georecall`` (sub)command: exact option names, every default in the help,
    and a usage error raised as :class:`UsageError` (one line, exit 2) instead of argparse's exit."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _Formatter)
        kwargs.setdefault("allow_abbrev", False)  # exact options: --seed must not silently mean --seeds
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # one line, exit 2 (argparse prints usage + message by default)
        raise UsageError(f"{self.prog}: {message}")


class RawDescription(_Formatter):
    """A help formatter: the options' help with their defaults; the description printed as written (a table
    of figures)."""

    def _fill_text(self, text, width, indent):
        return "".join(indent + line for line in text.splitlines(keepends=True))


Subparsers = argparse._SubParsersAction  # what add_subparsers returns; each command's parser is added to it
"""The type of what ``add_subparsers`` returns; each command's parser is added to it."""


def whole_number(minimum: int, maximum: int | None = None):
    """An argparse type: a whole number in ``[minimum, maximum]``.

    Parameters
    ----------
    minimum : int
        The smallest value accepted.
    maximum : int or None
        The largest value accepted (None: no upper bound).
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"expected a whole number <= {maximum:,}, got {value}")
        return value
    return parse


def real_number(minimum: float | None = None, maximum: float | None = None, *, positive: bool = False):
    """An argparse type: a finite real number (strictly positive when ``positive``) within the bounds.

    Parameters
    ----------
    minimum, maximum : float or None
        The bounds (None: unbounded on that side).
    positive : bool
        Refuse zero and negative numbers.
    """
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if positive and value <= 0:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"expected a number >= {minimum:g}, got {text!r}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"expected a number <= {maximum:g}, got {text!r}")
        return value
    return parse


L = LIMITS
parse_positive_int, parse_seed = whole_number(1), whole_number(0, 2**63 - 1)
parse_N, parse_R = whole_number(1, L["N"]), whole_number(1, L["R"])
parse_k, parse_D = whole_number(1, L["k"]), whole_number(1, L["D"])
parse_d, parse_m, parse_heads, parse_steps = (whole_number(1, L["d"]), whole_number(1, L["m"]),
                                              whole_number(1, L["heads"]), whole_number(1, L["steps"]))
parse_bits = whole_number(1, L["bits"])
# The argparse types of the paper's letters and of the shared numbers, each within its LIMITS entry.
parse_lr = real_number(positive=True, maximum=1e6)
parse_fraction = real_number(minimum=0.0, maximum=1.0)


# How the command line reads each kind of builder option (builder_options.OPTION_KINDS; a flag and a choice
# have no type: argparse's store_true and choices).
OPTION_TYPES: dict[str, Any] = {
    "flag": None, "choice": None, "positive": real_number(positive=True),
    "scale": real_number(positive=True, maximum=1e12), "length": parse_D, "text": str,
}
# The dest of the builder options a spec declares itself: one dict, name -> value given (None: none given).
BUILDER_OPTION_DEST = "builder_options"


def _argparse_keywords(option: builder_options.BuilderOption, command: str) -> dict[str, Any]:
    """``add_argument``'s keywords for a builder option in ``command``'s wording."""
    wording = option.wording(command)
    if option.kind == "flag":
        return {"action": "store_true", "help": wording["help"]}
    keywords: dict[str, Any] = {"default": wording["default"], "help": wording["help"]}
    if option.kind == "choice":
        keywords["choices"] = option.choices
    else:
        keywords["type"] = OPTION_TYPES[option.kind]
    if wording["metavar"] is not None:
        keywords["metavar"] = wording["metavar"]
    return keywords


def add_builder_option(p: argparse.ArgumentParser, command: str, name: str) -> None:
    """Declare a shared builder option (``builder_options.BUILDER_OPTIONS``) as its declaration says, in the
    wording of ``command``; its dest is its name.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The command's parser.
    command : str
        The command (``"check single-hop"``), for the declaration's ``per_command`` wording.
    name : str
        The option's name (a key of ``builder_options.BUILDER_OPTIONS``).

    Raises
    ------
    KeyError
        No shared declaration of that name (a bug in the command's declaration).
    """
    option = builder_options.BUILDER_OPTIONS[name]
    p.add_argument(option.flag, dest=option.name, **_argparse_keywords(option, command))


class _OwnOption(argparse.Action):
    """A builder option a spec declares itself: its value goes into the dict :data:`BUILDER_OPTION_DEST`
    under the option's name (a new dict each time: the default is never mutated)."""

    def __init__(self, *args, name: str, **kwargs):
        self.name = name
        super().__init__(*args, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        given = dict(getattr(namespace, self.dest, None) or {})
        given[self.name] = True if self.nargs == 0 else values
        setattr(namespace, self.dest, given)


def add_own_options(p: argparse.ArgumentParser, command: str, hops: str | None) -> None:
    """Declare the builder options that registered specs declare themselves (``ConstructionSpec.own_options``
    of the specs of ``hops``, each name once, the first declaration kept), gathered into one dict,
    :data:`BUILDER_OPTION_DEST` (None when none is given). An option whose flag the command already has is not
    offered there (it stays a Python option). A user's spec named on the command line (``--construction
    MODULE:ATTR`` / ``FILE.py:ATTR``) is among them: :mod:`.parser` loads it, which registers it, before it
    builds the parser.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The command's parser.
    command : str
        The command, for the declarations' ``per_command`` wording.
    hops : {"single", "multi"} or None
        The specs the command builds (None: every one).
    """
    p.set_defaults(**{BUILDER_OPTION_DEST: None})
    for spec in registry.specs(hops):
        for option in spec.own_options:
            if option.flag in p._option_string_actions:  # declared by an earlier spec, or the command's own
                continue
            keywords = _argparse_keywords(option, command)
            if option.kind == "flag":
                keywords = {"nargs": 0, "help": keywords["help"]}
            else:
                keywords.pop("default")
                keywords.setdefault("metavar", option.name.upper())
            p.add_argument(option.flag, dest=BUILDER_OPTION_DEST, action=_OwnOption, name=option.name,
                           default=None, **keywords)


def add_sizes(p: argparse.ArgumentParser, N, R) -> None:
    """Declare --N and --R in the paper's letters; lists (several values) when the defaults are lists.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The command's parser.
    N, R : int or list of int
        Their defaults.
    """
    many = isinstance(N, list)
    extra: dict[str, Any] = {"nargs": "+"} if many else {}
    more = " (one or more)" if many else ""
    p.add_argument("--N", type=parse_N, default=N, **extra,
                   help=f"number of entities N (subjects and attributes){more}")
    p.add_argument("--R", type=parse_R, default=R, **extra,
                   help=f"number of relations R, each a bijection π_r of [N]{more}")


def add_figure_options(p: argparse.ArgumentParser) -> None:
    """Declare --dpi and --format of the figures (``dest="formats"``: not a table format, no conflict with
    --json).

    Parameters
    ----------
    p : argparse.ArgumentParser
        The command's parser.
    """
    p.add_argument("--dpi", type=whole_number(30, 1200), default=None,
                   help="resolution of PNG files in dots per inch, 30..1200 (default 150; vector formats "
                        "ignore it)")
    p.add_argument("--format", dest="formats", nargs="+", choices=("png", "svg", "pdf"), default=None,
                   metavar="{png,svg,pdf}", help="file formats, one or more (default png svg)")


def construction_choices(hops: str) -> str:
    """The registered constructions of one kind, ``"name (id), ..."``, for a help text.

    Parameters
    ----------
    hops : str
        ``"single"`` or ``"multi"`` (:func:`georecall.constructions.registry.specs`).
    """
    return ", ".join(f"{spec.name} ({spec.id})" for spec in registry.specs(hops))


def code_kinds() -> tuple[str, ...]:
    """The codebook kinds a ``--codes`` option offers."""
    return tuple(CODE_KINDS)


# The options several commands share, and which command takes which: an option is offered only where it does
# something. --seed where randomness exists (count enumerates every task; tradeoff and bounds are formulas;
# sweep and study take a list of seeds, --seeds), --quiet where progress goes to stderr, --max-gib where a
# memory estimate guards the work, --json wherever there is a result document (demo is narrated text). A new
# command adds its row here; tests/test_cli.py checks that each command reads every shared option it offers.
SHARED: dict[str, tuple[str, ...]] = {
    "verify": ("seed", "json", "quiet", "max-gib"),
    "check single-hop": ("seed", "json", "quiet", "max-gib"),
    "check multi-hop": ("seed", "json", "quiet", "max-gib"),
    "certify single-hop": ("seed", "json", "quiet", "max-gib"),
    "certify multi-hop": ("seed", "json", "quiet", "max-gib"),
    "tradeoff": ("json",),
    "bounds": ("json", "quiet", "max-gib"),
    "count": ("json", "quiet", "max-gib"),
    "precision": ("seed", "json", "max-gib"),
    "train": ("seed", "json", "quiet", "max-gib"),
    "sweep threshold": ("json", "quiet", "max-gib"),
    "study mechanism": ("json", "quiet", "max-gib"),
    "probe": ("seed", "json", "max-gib"),
    "eval": ("json", "quiet", "max-gib"),
    "transfer": ("seed", "json", "max-gib"),
    "probe-hidden": ("seed", "json", "max-gib"),
    "probe-lm": ("seed", "json", "quiet", "max-gib"),
    "figures": ("seed", "json", "max-gib"),
    "demo": ("seed",),
    "export": ("seed", "json", "quiet", "max-gib"),
    "lecture": ("json", "quiet"),
}

# Commands that never run a user's construction: --debug and --build-timeout are not offered there (the
# lecture's cells have their own --timeout).
RUNS_NO_CONSTRUCTION = ("lecture",)

# The dests of the shared options that steer a run (its output, progress, budget, debugging) and of the
# command word itself: not the command's parameters, so a document's ``params`` leaves them out (a command's
# own documents record only its parameters; a failure document, built from the parsed arguments, drops these).
RUN_CONTROLS = frozenset({"command", "json", "quiet", "max_gib", "debug", "build_timeout"})

_SEED_HELP = {
    "verify": "run seed S of every check: the task is a function of (N, R, S); every other random choice "
              "draws from its own named stream of S",
    "probe": "seed S of the probes' random choices (held-out subjects, intervened subjects, new bijections)",
    "transfer": "seed S of the new bijections and of the fitted embeddings' initialisation",
    "probe-hidden": "seed S of the held-out split",
    "probe-lm": "seed S of the cross-fitting groups, shuffled controls, intervention targets and the "
                "random-init model",
    "figures": "seed S of the tasks behind the computed figures (margins)",
    "demo": "seed S of the task (its R bijections) and of the trained model",
    "export": "seed S of a construction's task (a function of (N, R, S)) and codes; not with --model",
}


def shared_parents(command: str) -> list[Parser]:
    """The parent parser holding the shared options that ``command`` takes (:data:`SHARED`).

    Parameters
    ----------
    command : str
        A row of :data:`SHARED`.

    Raises
    ------
    ValueError
        When the row names an unknown option (a typo in the table).
    """
    names = SHARED[command]
    unknown = set(names) - {"seed", "json", "quiet", "max-gib"}
    if unknown:  # a typo in the table would otherwise drop an option silently
        raise ValueError(f"SHARED[{command!r}] names unknown options {sorted(unknown)}")
    parent = Parser(add_help=False)
    if "seed" in names:
        parent.add_argument("--seed", type=parse_seed, default=0, metavar="S", help=_SEED_HELP.get(
            command, "run seed S: the task is a function of (N, R, S); every other random choice draws from "
                     "its own named stream of S"))
    if "json" in names:
        parent.add_argument("--json", action="store_true",
                            help="print exactly one strict JSON document on stdout (parameters, seed, "
                                 "version, status) and nothing on stderr unless there is an error")
    if "quiet" in names:
        parent.add_argument("--quiet", action="store_true", help="no progress output on stderr")
    if "max-gib" in names:
        parent.add_argument("--max-gib", type=real_number(positive=True, maximum=2.0**20), default=None,
                            metavar="G",
                            help="memory budget in GiB: refuse (exit 2, naming the estimate and what to "
                                 "lower) a job whose estimated peak exceeds it (default: half the machine's "
                                 "available memory; more than the available memory is capped, with a "
                                 "warning)")
    if command in RUNS_NO_CONSTRUCTION:  # the options would do nothing: not offered (their defaults set)
        parent.set_defaults(debug=False, build_timeout=usercode.DEFAULT_BUILD_TIMEOUT)
        return [parent]
    parent.add_argument("--debug", action="store_true",  # every other command may run your construction
                        help=f"show the traceback of an exception raised by your own construction (also: "
                             f"{DEBUG_VARIABLE}=1)")
    parent.add_argument("--build-timeout", type=real_number(positive=True, maximum=1e7),
                        default=usercode.DEFAULT_BUILD_TIMEOUT, metavar="SECONDS",
                        help="time limit of each call into your own construction's code (its module, "
                             "builder, nominal_promise): past it, exit 2 naming it (default: "
                             f"{usercode.DEFAULT_BUILD_TIMEOUT:g})")
    return [parent]


# Options that contradict each other, refused in one place (exit 2, one line) before any command runs. Each
# entry: two options (their dests) that must not both be given on the command line, and a test on the parsed
# arguments saying when they disagree (None: always). "Given" means typed by the user, whatever the defaults


class _FormatAction(argparse.Action):
    """``--format``: ``json`` also sets ``--json``, so the two are one behaviour (one document on stdout
    whatever happens, no progress on stderr, the same refusals)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        if values == "json" and hasattr(namespace, "json"):
            namespace.json = True


def add_table_options(p: argparse.ArgumentParser, default: str) -> None:
    """Declare --format, --columns, --caption and --label of a command that prints a table.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The command's parser.
    default : str
        The default format (``"md"`` or ``"text"``; ``"text"`` offers text too).
    """
    formats = ("md", "csv", "json", "latex") if default == "md" else ("text", "md", "csv", "json", "latex")
    p.add_argument("--format", choices=formats, default=default, action=_FormatAction,
                   help="output format (json is the same document as --json; latex is a booktabs tabular, "
                        "needing \\usepackage{booktabs})")
    p.add_argument("--columns", default=None, metavar="A,B,...",
                   help="columns of an md, csv or latex table, comma-separated keys of the rows (see "
                        "--format json for every key; default: a selection that fits a page)")
    p.add_argument("--caption", default=None, help="LaTeX: wrap the tabular in a table float with this "
                                                   "caption")
    p.add_argument("--label", default=None, help="LaTeX: \\label of the table float")


def add_user_constructions(p: argparse.ArgumentParser, which: str) -> None:
    """Declare --construction: registered names or ids, or the user's own ``MODULE:ATTR`` / ``FILE.py:ATTR``.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The command's parser.
    which : str
        Which constructions the command takes, for the help text.
    """
    p.add_argument("--construction", action="extend", nargs="+", default=None, metavar="NAME",
                   help=f"only these constructions ({which}; one or more): a registered name or id, or "
                        "MODULE:ATTR / FILE.py:ATTR naming your own ConstructionSpec (default: every "
                        "registered one)")


def add_group(sub: Subparsers, name: str, help_: str, description: str) -> Subparsers:
    """A command with sub-commands of its own (``check KIND``, ``sweep KIND``, ``study KIND``): their parsers'
    container.

    Parameters
    ----------
    sub : Subparsers
        The container the command is added to.
    name, help_, description : str
        The command's name, its one-line help and its description.
    """
    group = sub.add_parser(name, help=help_, description=description)
    return group.add_subparsers(dest="target", required=True, parser_class=Parser, metavar="KIND")


def add_style(p: argparse.ArgumentParser) -> None:
    """Declare --style, the figures' type sizes.

    Parameters
    ----------
    p : argparse.ArgumentParser
        The command's parser.
    """
    p.add_argument("--style", choices=("default", "talk"), default="default",
                   help="type sizes: default (tick labels 10 pt) or talk (14 pt, for a lecture hall)")


