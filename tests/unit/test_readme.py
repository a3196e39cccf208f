"""README.md stays a front door a newcomer reads in five minutes: at most 1,200 words outside code blocks and at
most 20 words a sentence on average (issue 44). The figures are printed: `pytest tests/unit/test_readme.py -s`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
MAX_WORDS = 1200
MAX_MEAN_SENTENCE = 20.0
_ABBREVIATION = re.compile(r"\b(e\.g|i\.e|etc|vs|cf)\.$")  # a full stop that does not end a sentence
_SENTENCE_END = re.compile(r"[.!?][)\]\"'*`]*$")
_LIST_ITEM = re.compile(r"^([-*+]|\d+\.)\s")

pytestmark = pytest.mark.unit


def blocks(markdown: str) -> list[tuple[str, str]]:
    """The text outside fenced code blocks as (kind, text): "heading", or "prose" for a paragraph or list item."""
    found: list[tuple[str, str]] = []
    current: list[str] = []
    fenced = False

    def close() -> None:
        if current:
            found.append(("prose", " ".join(current)))
            current.clear()

    for line in markdown.splitlines():
        text = line.strip()
        if text.startswith("```"):
            close()
            fenced = not fenced
        elif fenced:
            continue
        elif text.startswith("#"):
            close()
            found.append(("heading", text.lstrip("#").strip()))
        elif not text or _LIST_ITEM.match(text):
            close()
            current.extend([text] if text else [])
        else:
            current.append(text)
    close()
    return found


def words(text: str) -> list[str]:
    """Words as a reader counts them: a link counts by its text, a token without a letter or digit is no word."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return [word for word in text.split() if re.search(r"\w", word)]


def sentences(text: str) -> list[list[str]]:
    """A paragraph's or list item's sentences: each ends at `.`, `!` or `?` before a space, or at the block's end."""
    found: list[list[str]] = []
    current: list[str] = []
    for word in words(text):
        current.append(word)
        if _SENTENCE_END.search(word) and not _ABBREVIATION.search(word):
            found.append(current)
            current = []
    return [*found, current] if current else found


def measure(markdown: str) -> tuple[int, float, int]:
    """Words outside code blocks (headings included), mean words a sentence (prose only), the longest sentence."""
    found = blocks(markdown)
    counted = sum(len(words(text)) for _, text in found)
    prose = [sentence for kind, text in found if kind == "prose" for sentence in sentences(text)]
    lengths = [len(sentence) for sentence in prose]
    return counted, sum(lengths) / len(lengths), max(lengths)


def test_measure_counts_words_and_sentences_outside_code() -> None:
    text = "# Title here\n\nOne two three. Four, e.g. five?\n- a [link text](x.md) item\n\n```bash\nnot counted\n```\n"
    assert measure(text) == (12, 10 / 3, 4)


def test_readme_is_short_and_its_sentences_are_short() -> None:
    counted, mean, longest = measure(README.read_text(encoding="utf-8"))
    figures = f"README.md: {counted} words outside code blocks, {mean:.1f} words a sentence, the longest {longest}"
    print(figures)
    assert counted <= MAX_WORDS, f"{figures}; at most {MAX_WORDS} words"
    assert mean <= MAX_MEAN_SENTENCE, f"{figures}; at most {MAX_MEAN_SENTENCE:.0f} words a sentence on average"


def test_readme_opens_with_the_two_commands() -> None:
    """`make demo` and `make test` stay the first two commands a reader sees."""
    opening = re.search(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert opening is not None
    assert [line.split()[:2] for line in opening.group(1).splitlines()] == [["make", "demo"], ["make", "test"]]
