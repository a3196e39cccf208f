"""What a gate compares, found on disk: two run folders measured apart, or one interleaved comparison folder.

An interleaved folder (`toolkit interleave --out DIR`, or a batch whose sweep says `interleave: R`) holds one run
folder per configuration and round, `<label>-round<r>/`. Its configurations are in the order round 1 measured
them (batch.json's order, else round 1's start times): the first is the baseline unless named.

`gate allowance` reads three or more run folders of one configuration measured apart (`allowance_runs`): one
configuration means the same parameters that decide what a measurement means (run.json's `fingerprint`, the
parameters a `--resume` must match), the same served model and the same launch command (its port aside).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.base.errors import ParamsError, ResultsError
from toolkit.method.allowance import MIN_RUNS
from toolkit.results.documents.batch import BATCH_FILE, BatchDocument
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RUN_FILE, read_json

INTERLEAVED, APART = "interleaved", "apart"
_ROUND = re.compile(r"(?P<label>.+)-round(?P<round>[1-9][0-9]{0,5})")


@dataclass(frozen=True)
class GateInput:
    """The two sides of a gate: labels, and each side's run folder per round (apart: round 1 only)."""

    design: str  # INTERLEAVED or APART
    labels: tuple[str, str]  # baseline, candidate
    baseline: dict[int, Path]
    candidate: dict[int, Path]

    @property
    def rounds(self) -> list[int]:
        """The rounds both sides measured."""
        return sorted(set(self.baseline) & set(self.candidate))


def interleaved_rounds(folder: Path) -> dict[str, dict[int, Path]]:
    """An interleaved folder's configurations in measuring order: label -> round -> run folder; empty for a
    folder without `<label>-round<r>/` run folders."""
    found: dict[str, dict[int, Path]] = {}
    children = sorted(folder.iterdir()) if folder.is_dir() else []
    for child in children:
        match = _ROUND.fullmatch(child.name)
        if match and child.is_dir() and not child.is_symlink() and (child / RUN_FILE).is_file():
            found.setdefault(match["label"], {})[int(match["round"])] = child
    return {label: found[label] for label in _measuring_order(folder, found)}


def _measuring_order(folder: Path, found: dict[str, dict[int, Path]]) -> list[str]:
    if (folder / BATCH_FILE).is_file():
        listed = BatchDocument.read(folder / BATCH_FILE).labels or []
        order = [m["label"] for x in listed if (m := _ROUND.fullmatch(x)) and m["round"] == "1" and m["label"] in found]
        return [*order, *(label for label in found if label not in order)]

    def first_start(label: str) -> str:
        first = found[label][min(found[label])]
        return str(read_json(first / RUN_FILE).get("started_at") or "")

    return sorted(found, key=lambda label: (min(found[label]), first_start(label), label))


def gate_input(folders: list[str], baseline: str | None = None, candidate: str | None = None) -> GateInput:
    """Two run folders (baseline, candidate: measured apart), or one interleaved folder and, when it holds more
    than two configurations, which to compare (`baseline` default: the first measured). ParamsError or
    ResultsError, one line, for anything else."""
    paths = [Path(f) for f in folders]
    for path in paths:
        if not path.is_dir():
            raise ParamsError(f"{path}: not a folder; give two run folders or one interleaved comparison folder")
    if len(paths) == 2:
        for path in paths:
            if not (path / RUN_FILE).is_file():
                hint = " (an interleaved folder is given alone)" if interleaved_rounds(path) else ""
                raise ResultsError(f"{path}: not a run folder (no {RUN_FILE}){hint}")
        a, b = paths
        return GateInput(APART, (str(a), str(b)), {1: a}, {1: b})
    if len(paths) != 1:
        raise ParamsError("gate: give BASELINE CANDIDATE (two run folders) or one interleaved comparison folder")
    configurations = interleaved_rounds(paths[0])
    if len(configurations) < 2:
        raise ResultsError(f"{paths[0]}: not an interleaved comparison (no two configurations of <label>-round<r>/ "
                           "run folders); give BASELINE CANDIDATE run folders instead")  # fmt: skip
    labels = list(configurations)
    for name in (baseline, candidate):
        if name is not None and name not in configurations:
            raise ParamsError(f"{name!r} is not a configuration of {paths[0]}; allowed: {', '.join(labels)}")
    base = baseline or labels[0]
    rest = [label for label in labels if label != base]
    if candidate is None and len(rest) > 1:
        raise ParamsError(f"{paths[0]} holds {len(labels)} configurations; name the candidate (--candidate): "
                          f"{', '.join(rest)}")  # fmt: skip
    other = candidate or rest[0]
    if other == base:
        raise ParamsError(f"candidate: {other!r} is also the baseline")
    found = GateInput(INTERLEAVED, (base, other), configurations[base], configurations[other])
    if len(found.rounds) < 2:
        raise ResultsError(f"{paths[0]}: {base} and {other} share {len(found.rounds)} round(s); a paired gate "
                           "needs two or more")  # fmt: skip
    return found


@dataclass(frozen=True)
class AllowanceRun:
    """One A/A run folder of `gate allowance`: the path as given, its run id and start time when run.json has them."""

    path: Path
    run_id: str | None
    started_at: str | None


_PORT = re.compile(r"(--port[= ])\d+")  # where a server listens is not what it is (toolkit.matrix.run_folder)


def configuration(document: RunDocument) -> dict[str, Any]:
    """What makes two runs one configuration, as run.json records it: the fingerprint's parameters (else the same
    names in its params), the served model, the launch command without its port; unrecorded ones left out."""
    if document.fingerprint is not None:
        fingerprint = document.fingerprint.as_dict()
    else:
        from toolkit.params import RunParams

        params = document.params.as_dict() if document.params is not None else {}
        fingerprint = {k: params.get(k) for k in RunParams.model_construct().fingerprint()}
    found = {k: v for k, v in fingerprint.items() if v is not None}
    if model := document.server.model if document.server is not None else None:
        found["served model"] = model
    if command := document.launch_command:
        found["launch command"] = _PORT.sub(r"\1<port>", command)
    return found


def allowance_runs(folders: Sequence[str]) -> list[AllowanceRun]:
    """Three or more run folders of one configuration (measured apart): each with its run id and start time.
    ParamsError or ResultsError, one line, for fewer, a folder that is not a run folder, or runs of another
    configuration than the first (naming what differs), or one run given twice (its spread would be none)."""
    if len(folders) < MIN_RUNS:
        raise ParamsError(f"gate allowance: {len(folders)} run folder(s); give {MIN_RUNS} or more of one "
                          "configuration measured apart")  # fmt: skip
    runs: list[AllowanceRun] = []
    first: tuple[Path, dict[str, Any]] | None = None
    for text in folders:
        path = Path(text)
        if not path.is_dir():
            raise ParamsError(f"{path}: not a folder; give run folders of one configuration")
        if not (path / RUN_FILE).is_file():
            raise ResultsError(f"{path}: not a run folder (no {RUN_FILE})")
        document = RunDocument.load(path)
        for seen in runs:
            if seen.path.resolve() == path.resolve() or (document.run_id and seen.run_id == document.run_id):
                raise ParamsError(f"gate allowance: {path} is the run {seen.path} again; give each run once")
        mine = configuration(document)
        if first is None:
            first = (path, mine)
        elif differ := _differences(first[1], mine):
            raise ParamsError(f"gate allowance: {path} is another configuration than {first[0]} ({differ}); give "
                              "runs of one configuration")  # fmt: skip
        runs.append(AllowanceRun(path, document.run_id, document.started_at))
    return runs


def _differences(first: dict[str, Any], other: dict[str, Any]) -> str:
    """The recorded fields two configurations both have and disagree on: `name: first -> other`."""
    names = [k for k in first if k in other and first[k] != other[k]]
    return ", ".join(f"{k}: {first[k]!r} -> {other[k]!r}" for k in names)
