"""Context labels and the context rules of docs/method/matrix.md, against both reference reports."""

import pytest

from toolkit.method.contexts import (
    DEFAULT_DECODE_CANDIDATES,
    check_contexts,
    decode_contexts,
    format_context,
    parse_context,
    parse_contexts,
    prefill_only_context,
)

K = 1024


def prefill_contexts(
    max_model_len: int, max_output: int, candidates: list[int] = DEFAULT_DECODE_CANDIDATES
) -> list[int]:
    """The prefill contexts of docs/method/matrix.md: every decode context, then the prefill-only one."""
    return [*decode_contexts(max_model_len, max_output, candidates), prefill_only_context(max_model_len)]


@pytest.mark.parametrize(
    ("label", "expected"),
    [("8K", 8192), ("8k", 8192), ("8192", 8192), (8192, 8192), ("251K", 257_024), (" 16K ", 16_384), (1, 1)],
)
def test_parse_context(label: str | int, expected: int) -> None:
    assert parse_context(label) == expected


@pytest.mark.parametrize("label", ["1.5K", "8 K", "8KB", "K", "", "-8K", "0", 0, -5, True, 8.0, "8M"])
def test_parse_context_rejects(label: object) -> None:
    with pytest.raises(ValueError, match=r"is not a context; use .*whole number of K = 1024 tokens"):
        parse_context(label)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("8K,16K, 32K", [8192, 16_384, 32_768]),
        (["8K", 16_384], [8192, 16_384]),
        ((8192,), [8192]),
        ("1000", [1000]),
        (4096, [4096]),
    ],
)
def test_parse_contexts(value: object, expected: list[int]) -> None:
    assert parse_contexts(value) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("8K,1.5K", "decode_contexts: '1.5K' is not a context"),
        (["8K", "x"], "decode_contexts: 'x' is not a context"),
        ("", "decode_contexts: give at least one context"),
        ([], "decode_contexts: give at least one context"),
        ("8K,8192", "decode_contexts: '8192' is listed twice"),
        ("8K,", "decode_contexts: '' is not a context"),
    ],
)
def test_parse_contexts_errors_name_parameter(value: object, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        parse_contexts(value, parameter="decode_contexts")  # type: ignore[arg-type]
    assert str(excinfo.value).startswith(message)


@pytest.mark.parametrize(
    ("tokens", "label"),
    [(8192, "8K"), (257_024, "251K"), (262_080, "256K"), (122_880, "120K"), (127_936, "125K"), (1984, "2K")],
)
def test_format_context(tokens: int, label: str) -> None:
    assert format_context(tokens) == label


def test_default_candidates() -> None:
    assert DEFAULT_DECODE_CANDIDATES == (8192, 16_384, 32_768, 65_536, 131_072)


@pytest.mark.parametrize(
    ("max_model_len", "max_output", "candidates", "decode", "prefill_only"),
    [
        # Kimi reference: 8K..128K, 251K; prefill adds 256K.
        (
            262_144,
            4096,
            DEFAULT_DECODE_CANDIDATES,
            [8 * K, 16 * K, 32 * K, 64 * K, 128 * K, 257_024],
            262_080,
        ),
        # LFM reference: 128K does not fit, so 8K..64K, 120K; prefill adds 125K.
        (128_000, 4096, DEFAULT_DECODE_CANDIDATES, [8 * K, 16 * K, 32 * K, 64 * K, 122_880], 127_936),
        # Largest fitting (1024) is not larger than the kept 1024, so nothing is added.
        (2048, 256, [512, 1024], [512, 1024], 1984),
        # Unsorted candidates with a duplicate; largest fitting 1024 > 512 is added.
        (2048, 256, [1024 * 4, 512, 512], [512, 1024], 1984),
        # No candidate fits; the largest fitting context alone.
        (4096, 1024, DEFAULT_DECODE_CANDIDATES, [2048], 4032),
        # Largest fitting rounds down to 0: only the candidate that fits.
        (1000, 256, [512, 1024], [512], 936),
        # Exactly on the limit: 8,192 + 4,096 + 64 = 12,352.
        (12_352, 4096, DEFAULT_DECODE_CANDIDATES, [8 * K], 12_288),
    ],
)
def test_decode_and_prefill_contexts(
    max_model_len: int, max_output: int, candidates: list[int], decode: list[int], prefill_only: int
) -> None:
    assert decode_contexts(max_model_len, max_output, candidates) == decode
    assert prefill_contexts(max_model_len, max_output, candidates) == [*decode, prefill_only]


def test_reference_labels() -> None:
    assert [format_context(c) for c in prefill_contexts(262_144, 4096)] == [
        *("8K", "16K", "32K", "64K", "128K", "251K", "256K")
    ]
    assert [format_context(c) for c in prefill_contexts(128_000, 4096)] == [
        *("8K", "16K", "32K", "64K", "120K", "125K")
    ]


@pytest.mark.parametrize(
    ("max_model_len", "max_output", "message"),
    [
        (300, 256, "max_model_len: 300 leaves no room for a decode context"),
        (64, 1, "max_model_len: 64 must be larger than the 64-token margin"),
        (8192, 0, "max_output: 0 must be at least 1"),
    ],
)
def test_decode_contexts_errors(max_model_len: int, max_output: int, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        decode_contexts(max_model_len, max_output, [512])
    assert str(excinfo.value).startswith(message)


@pytest.mark.parametrize(
    ("contexts", "phase"),
    [([8 * K, 257_024], "decode"), ([262_080], "prefill"), ([8 * K, 256 * K - 64], "prefill")],
)
def test_check_contexts_accepts(contexts: list[int], phase: str) -> None:
    check_contexts(contexts, 262_144, 4096, phase)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("contexts", "phase", "message"),
    [
        (
            [8 * K, 300 * K],
            "decode",
            "contexts: 300K does not fit max_model_len 262,144 with max_output 4,096 "
            "(needs context + max_output + 64 <= max_model_len)",
        ),
        (
            [256 * K],
            "decode",
            "contexts: 256K does not fit max_model_len 262,144 with max_output 4,096 "
            "(needs context + max_output + 64 <= max_model_len)",
        ),
        (
            [257_985],
            "decode",
            "contexts: 257,985 tokens does not fit max_model_len 262,144 with max_output 4,096 "
            "(needs context + max_output + 64 <= max_model_len)",
        ),
        (
            [262_081],
            "prefill",
            "contexts: 262,081 tokens does not fit max_model_len 262,144 for prefill "
            "(needs context + 64 <= max_model_len)",
        ),
        ([256 * K], "prefill", "contexts: 256K does not fit max_model_len 262,144 for prefill"),
        ([0], "decode", "contexts: 0 is not a positive number of tokens"),
        ([8 * K], "both", "phase: 'both' is not 'prefill' or 'decode'"),
    ],
)
def test_check_contexts_rejects(contexts: list[int], phase: str, message: str) -> None:
    with pytest.raises(ValueError) as excinfo:
        check_contexts(contexts, 262_144, 4096, phase)  # type: ignore[arg-type]
    assert str(excinfo.value).startswith(message)


@pytest.mark.parametrize(("context", "fits"), [(257_984, True), (257_985, False)])
def test_check_contexts_decode_boundary(context: int, fits: bool) -> None:
    # 257,984 + 4,096 + 64 = 262,144 exactly.
    if fits:
        check_contexts([context], 262_144, 4096, "decode")
    else:
        with pytest.raises(ValueError, match="does not fit"):
            check_contexts([context], 262_144, 4096, "decode")


def test_check_contexts_names_parameter() -> None:
    with pytest.raises(ValueError, match=r"^prefill_contexts: 256K does not fit"):
        check_contexts([256 * K], 262_144, 4096, "prefill", parameter="prefill_contexts")
