"""The facts file: relations with prompt templates and candidates, subjects with their attributes.

Format (JSON, UTF-8; ``docs/lm.md`` documents it with an example)::

    {"format": "georecall-facts/1",
     "source": "free text (optional)",
     "relations": [{"name": "country capital city",
                    "templates": ["The capital city of {} is", ...],
                    "candidates": ["Paris", "Tokyo", ...]}, ...],
     "subjects": [{"subject": "France",
                   "attributes": {"country capital city": "Paris", ...}}, ...]}

Every template holds ``{}`` exactly once (the subject's place); a relation's candidates are distinct and hold
every attribute a subject has in it (``candidates`` may be omitted: then it is the distinct attributes, in
order of first appearance); subject names are distinct; every relation has at least one subject.
:func:`load_facts` refuses anything else with one line naming the place
(:class:`~georecall.errors.InputError`).

:func:`build_from_relations` builds the bundled file from the factual relations of evandez/relations (MIT;
Hernandez et al. 2023, "Linearity of Relation Decoding in Transformer Language Models"). Rule: an exact
duplicate (subject, object) is kept once; a subject with two different objects in one relation loses that
fact; relations keep at least ``min_subjects`` subjects and subjects at least ``min_relations`` relations
(applied alternately until nothing changes); a relation's candidates are all distinct objects of its source
file. Sorted by name, so the build is deterministic."""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field

from georecall.errors import InputError

__all__ = ["FORMAT", "Facts", "Relation", "bundled_facts_path", "build_from_relations", "load_facts",
           "parse_facts"]

FORMAT = "georecall-facts/1"
MAX_BYTES = 64 * 2**20  # a facts file larger than this is refused before reading


@dataclass(frozen=True)
class Relation:
    """One relation: its name, prompt templates (``{}`` is the subject) and candidate attributes."""

    name: str
    templates: tuple[str, ...]
    candidates: tuple[str, ...]


@dataclass(frozen=True)
class Facts:
    """A validated facts file.

    Attributes
    ----------
    relations : tuple of Relation
    subjects : tuple of str
    attributes : dict
        ``attributes[r][subject]`` is the subject's attribute in relation index ``r`` (only subjects that have
        one).
    source : str
        Free-text provenance.
    meta : dict
        The file's ``license``, ``attribution`` and ``rule`` fields, when present (kept by :meth:`to_json`).
    """

    relations: tuple[Relation, ...]
    subjects: tuple[str, ...]
    attributes: tuple[dict[str, str], ...]
    source: str = ""
    meta: dict = field(default_factory=dict)

    def facts(self) -> list[tuple[int, int, str]]:
        """Every fact as ``(subject index, relation index, attribute)``, subjects then relations in order."""
        out = []
        for i, s in enumerate(self.subjects):
            for r in range(len(self.relations)):
                a = self.attributes[r].get(s)
                if a is not None:
                    out.append((i, r, a))
        return out

    def to_json(self) -> dict:
        """The facts as a document of the file format."""
        return {"format": FORMAT, "source": self.source, **self.meta,
                "relations": [{"name": r.name, "templates": list(r.templates),
                               "candidates": list(r.candidates)} for r in self.relations],
                "subjects": [{"subject": s, "attributes": {r.name: self.attributes[k][s]
                                                           for k, r in enumerate(self.relations)
                                                           if s in self.attributes[k]}}
                             for s in self.subjects]}

    def digest(self) -> str:
        """SHA-256 of the facts as a canonical JSON document (keys sorted): the same for the same facts
        wherever the file lies and however its keys are ordered, so a record names its facts by content."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()


def bundled_facts_path() -> str:
    """Path of the bundled facts file (built from evandez/relations, MIT; licence beside it).

    Returns
    -------
    str
        ``.../verify/lm/data/relations_facts.json`` inside the installed package.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "relations_facts.json")


def _text(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def parse_facts(doc, where: str = "facts") -> Facts:
    """Validate a facts document (already parsed JSON).

    Parameters
    ----------
    doc : object
        The parsed JSON.
    where : str
        How messages name the file.

    Returns
    -------
    Facts

    Raises
    ------
    InputError
        One line naming the first problem: not an object, wrong format tag, missing or mistyped fields, an
        empty string, a template without exactly one ``{}`` or with other braces, duplicate relation names,
        subjects or candidates, an unknown relation, an attribute outside its relation's candidates, a
        subject without attributes, a relation without subjects.
    """
    if not isinstance(doc, dict):
        raise InputError(f"{where}: the top level must be a JSON object")
    if doc.get("format") != FORMAT:
        raise InputError(f"{where}: 'format' must be {FORMAT!r}, got {doc.get('format')!r}")
    for key in ("relations", "subjects"):
        if key not in doc:
            raise InputError(f"{where}: missing field {key!r}")
        if not isinstance(doc[key], list) or not doc[key]:
            raise InputError(f"{where}: {key!r} must be a non-empty list")
    names: dict[str, int] = {}
    raw_relations = []
    for k, rel in enumerate(doc["relations"]):
        at = f"{where}: relations[{k}]"
        if not isinstance(rel, dict):
            raise InputError(f"{at}: expected an object")
        for key in ("name", "templates"):
            if key not in rel:
                raise InputError(f"{at}: missing field {key!r}")
        name = _text(rel["name"], f"{at}.name")
        if name in names:
            raise InputError(f"{at}: duplicate relation name {name!r}")
        names[name] = k
        templates = rel["templates"]
        if not isinstance(templates, list) or not templates:
            raise InputError(f"{at} ({name!r}): 'templates' must be a non-empty list")
        for t, template in enumerate(templates):
            _text(template, f"{at}.templates[{t}]")
            if template.count("{}") != 1 or re.search(r"\{(?!\})|(?<!\{)\}", template):
                raise InputError(f"{at}.templates[{t}] ({name!r}): a template holds '{{}}' exactly once "
                                 f"and no other braces, got {template!r}")
        candidates = rel.get("candidates")
        if candidates is not None:
            if not isinstance(candidates, list) or not candidates:
                raise InputError(f"{at} ({name!r}): 'candidates' must be a non-empty list when given")
            for c, cand in enumerate(candidates):
                _text(cand, f"{at}.candidates[{c}]")
            if len(set(candidates)) != len(candidates):
                dup = next(c for c in candidates if candidates.count(c) > 1)
                raise InputError(f"{at} ({name!r}): duplicate candidate {dup!r}")
        raw_relations.append((name, tuple(templates), candidates))
    subjects: list[str] = []
    seen: set[str] = set()
    attributes: list[dict[str, str]] = [{} for _ in raw_relations]
    for i, item in enumerate(doc["subjects"]):
        at = f"{where}: subjects[{i}]"
        if not isinstance(item, dict):
            raise InputError(f"{at}: expected an object")
        for key in ("subject", "attributes"):
            if key not in item:
                raise InputError(f"{at}: missing field {key!r}")
        s = _text(item["subject"], f"{at}.subject")
        if s in seen:
            raise InputError(f"{at}: duplicate subject {s!r}")
        seen.add(s)
        attrs = item["attributes"]
        if not isinstance(attrs, dict) or not attrs:
            raise InputError(f"{at} ({s!r}): 'attributes' must be a non-empty object "
                             "(relation name -> attribute)")
        for rname, value in attrs.items():
            if rname not in names:
                raise InputError(f"{at} ({s!r}): unknown relation {rname!r}")
            attributes[names[rname]][s] = _text(value, f"{at}.attributes[{rname!r}]")
        subjects.append(s)
    relations = []
    for k, (name, templates, candidates) in enumerate(raw_relations):
        if not attributes[k]:
            raise InputError(f"{where}: relation {name!r} has no subject (an empty relation)")
        if candidates is None:
            candidates = list(dict.fromkeys(attributes[k][s] for s in subjects if s in attributes[k]))
        else:
            allowed = set(candidates)
            for s, a in attributes[k].items():
                if a not in allowed:
                    raise InputError(f"{where}: subject {s!r}: attribute {a!r} is not among "
                                     f"the candidates of {name!r}")
        relations.append(Relation(name, templates, tuple(candidates)))
    meta = {k: v for k, v in doc.items() if k in ("license", "attribution", "rule")}
    return Facts(tuple(relations), tuple(subjects), tuple(attributes), str(doc.get("source", "")), meta)


def load_facts(path: str) -> Facts:
    """Read and validate a facts file.

    Parameters
    ----------
    path : str
        A JSON file in the format of this module.

    Returns
    -------
    Facts

    Raises
    ------
    InputError
        A missing, oversized, non-UTF-8 or non-JSON file, or any problem :func:`parse_facts` names.
    """
    if not os.path.isfile(path):
        raise InputError(f"no facts file {path!r}")
    if os.path.getsize(path) > MAX_BYTES:
        raise InputError(f"facts file {path!r} is larger than {MAX_BYTES // 2**20} MiB")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except UnicodeDecodeError:
        raise InputError(f"facts file {path!r} is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"facts file {path!r} is not JSON: {exc.msg} at line {exc.lineno}") from None
    return parse_facts(doc, where=os.path.basename(path))


_ESCAPED = re.compile(r"\\u([0-9a-fA-F]{4})")


def _unescape(text: str) -> str:
    """The source has a few doubly escaped characters (``Bras\\u00edlia``): decode them."""
    return _ESCAPED.sub(lambda m: chr(int(m.group(1), 16)), text)


def build_from_relations(relations: list[dict], *, min_relations: int = 3, min_subjects: int = 8,
                         source: str = "") -> Facts:
    """The multi-relation facts of evandez/relations-style files (the rule is in the module docstring).

    Parameters
    ----------
    relations : list of dict
        Parsed relation files: ``name``, ``prompt_templates``, ``samples`` (``subject``, ``object``).
    min_relations, min_subjects : int
        A subject is kept with answers in at least ``min_relations`` kept relations; a relation with at least
        ``min_subjects`` kept subjects.
    source : str
        Provenance recorded in the file.

    Returns
    -------
    Facts

    Raises
    ------
    InputError
        When nothing survives the rule, or the result fails :func:`parse_facts` (e.g. a source template
        with braces other than one ``{}``). A relation file without ``name``, ``prompt_templates`` or
        ``samples`` is a KeyError (these files are the maintainer's input, not the user's).
    """
    table: dict[str, dict[str, str]] = {}
    templates: dict[str, list[str]] = {}
    candidates: dict[str, list[str]] = {}
    for rel in relations:
        name = rel["name"]
        templates[name] = list(rel["prompt_templates"])
        objects: dict[str, set[str]] = {}
        for sample in rel["samples"]:
            s, o = _unescape(sample["subject"]).strip(), _unescape(sample["object"]).strip()
            objects.setdefault(s, set()).add(o)
        candidates[name] = sorted({_unescape(x["object"]).strip() for x in rel["samples"]})
        for s, objs in objects.items():
            if len(objs) == 1:  # two different objects for one subject: ambiguous, dropped
                table.setdefault(s, {})[name] = next(iter(objs))
    kept_rel = set(templates)
    kept_subj = set(table)
    while True:
        subj = {s for s in kept_subj if sum(r in kept_rel for r in table[s]) >= min_relations}
        rels = {r for r in kept_rel if sum(r in table[s] for s in subj) >= min_subjects}
        if subj == kept_subj and rels == kept_rel:
            break
        kept_subj, kept_rel = subj, rels
    if not kept_subj:
        raise InputError("no subject has answers in enough relations")
    names = sorted(kept_rel)
    doc = {"format": FORMAT, "source": source,
           "rule": f"subjects with answers in >= {min_relations} relations, relations with >= {min_subjects} "
                   "such subjects; exact duplicates kept once, conflicting answers dropped; "
                   "candidates = every distinct object of the relation's source file",
           "relations": [{"name": r, "templates": templates[r], "candidates": candidates[r]} for r in names],
           "subjects": [{"subject": s, "attributes": {r: table[s][r] for r in names if r in table[s]}}
                        for s in sorted(kept_subj)]}
    return parse_facts(doc, where="built facts")
