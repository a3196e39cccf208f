"""Speculative decoding by draft position, from the requests' acceptance histograms (pure).

A request's histogram (toolkit.loadgen.server_timing) counts its verify steps by how many draft tokens each
accepted: entry j holds the steps that accepted exactly j (0 to the configured draft length K). Drafts are
accepted in order, so draft position k (1-based) was accepted in a step exactly when that step accepted k or more:
summed over the requests, the acceptance rate of position k is ``sum(H[k:]) / sum(H)``, non-increasing in k. A
step that proposed fewer than k drafts (the ngram method finds no longer match) counts as not accepting position k,
so the mean of the K rates is accepted / (K × steps), at most the acceptance rate accepted / drafted tokens (equal
when every step proposed K drafts).

A cell keeps the rates as one text, `spec_acceptance_by_position` (results.csv is flat): the rates of positions 1,
2, … K as fractions 0–1 with `POSITION_DECIMALS` decimals, joined by commas: "0.620,0.310" is 62 % of the verify
steps accepting the first draft token and 31 % the second.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

POSITION_DECIMALS = 3
MAX_POSITIONS = 64  # toolkit.loadgen.server_timing.MAX_DRAFT_POSITIONS
_RATE = r"(0(\.[0-9]{1,6})?|1(\.0{1,6})?)"
POSITIONS_PATTERN = rf"^{_RATE}(,{_RATE}){{0,{MAX_POSITIONS - 1}}}$"  # the text's form, for the results validator


def summed_histogram(histograms: Iterable[Sequence[int]]) -> tuple[int, ...] | None:
    """The requests' histograms added entry by entry (a shorter one, of a shorter draft length, counts 0 for the
    longer's extra entries: its steps could not accept more); None when there are none."""
    total: list[int] = []
    for histogram in histograms:
        if len(histogram) > len(total):
            total += [0] * (len(histogram) - len(total))
        for j, count in enumerate(histogram):
            total[j] += count
    return tuple(total) if total else None


def position_rates(histogram: Sequence[int]) -> tuple[float, ...] | None:
    """The acceptance rate of draft positions 1 … len(histogram) − 1: the share of verify steps that accepted at
    least k drafts. None without a verify step."""
    steps = sum(histogram)
    if steps <= 0:
        return None
    return tuple(sum(histogram[k:]) / steps for k in range(1, len(histogram)))


def positions_text(rates: Sequence[float]) -> str:
    """The rates as `spec_acceptance_by_position` writes them: ``0.620,0.310``."""
    return ",".join(f"{rate:.{POSITION_DECIMALS}f}" for rate in rates)


def read_positions(text: object) -> tuple[float, ...] | None:
    """`spec_acceptance_by_position` back to its rates (a lone number, as a CSV reader may give one position,
    too); None for anything else."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return (float(text),)
    if not isinstance(text, str) or not text:
        return None
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        return None
