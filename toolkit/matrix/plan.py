"""Which measurements a run makes, in order: pure, from the params and the server's facts (docs/method/)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toolkit.method.contexts import check_contexts, decode_contexts, embedding_lengths, prefill_only_context
from toolkit.params import RunParams

Phase = str


@dataclass(frozen=True)
class Plan:
    """Which measurements a run makes, in order (pure: from params and server facts)."""

    decode_contexts: tuple[int, ...]
    prefill_only_contexts: tuple[int, ...]
    concurrency: tuple[int, ...]
    # An embeddings run (endpoint embeddings): its input lengths, measured instead of prefill and decode
    embedding_contexts: tuple[int, ...] = ()

    def keys(self, phases: Sequence[Phase]) -> list[tuple[str, int, int]]:
        keys: list[tuple[str, int, int]] = []
        if "embeddings" in phases:
            keys += [("embeddings", ctx, n) for ctx in self.embedding_contexts for n in self.concurrency]
        for ctx in self.decode_contexts:
            if "prefill" in phases:
                keys.append(("prefill", ctx, 1))
            if "decode" in phases:
                keys += [("decode", ctx, n) for n in self.concurrency]
        if "prefill" in phases:
            keys += [("prefill", ctx, 1) for ctx in self.prefill_only_contexts]
        return keys


def make_plan(params: RunParams, max_model_len: int) -> Plan:
    """Contexts by the rules of docs/method/matrix.md, or the explicit lists checked against max_model_len; an
    embeddings run's input lengths (docs/method/embeddings-matrix.md) and nothing else."""
    if params.endpoint == "embeddings":
        if params.contexts is None:
            lengths = embedding_lengths(max_model_len)
        else:
            check_contexts(params.contexts, max_model_len, 1, "prefill")  # an input and the margin
            lengths = list(params.contexts)
        return Plan((), (), tuple(params.concurrency), tuple(lengths))
    if params.contexts is None:
        decode = decode_contexts(max_model_len, params.max_output)
    else:
        check_contexts(params.contexts, max_model_len, params.max_output, "decode")
        decode = list(params.contexts)
    if params.prefill_only_contexts is None:
        only = [] if params.contexts is not None else [prefill_only_context(max_model_len)]
    else:
        check_contexts(params.prefill_only_contexts, max_model_len, params.max_output, "prefill")
        only = list(params.prefill_only_contexts)
    only = [c for c in only if c not in decode]
    return Plan(tuple(decode), tuple(only), tuple(params.concurrency))
