"""Streams this project makes itself: loop shapes and clean calls.

The demo replays them, the benchmark times them, the calibration sweeps use
them beside the real corpus, and the tests trip on them. Loops are generated
(seeded, so every run is the same); clean texts were written for this project
(``_data/``). None of it is copied from ``../shared/corpus``.

Each loop sample starts with real work and then degenerates, as loops do; its
``loop_start`` says where, so reports can count what a loop ran before its cut.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache
from importlib import resources

from loopbreak._engine.trip import Channel


@dataclass(frozen=True)
class Sample:
    """One stream: what it is, which channel it plays on, and where its loop starts."""

    name: str
    title: str
    channel: Channel
    text: str
    loop_start: int | None = None

    @property
    def is_loop(self) -> bool:
        return self.loop_start is not None


@cache
def data_text(name: str) -> str:
    """A clean text bundled with the package."""
    return resources.files("loopbreak").joinpath("_data").joinpath(name).read_text(encoding="utf-8")


def _prefix() -> str:
    # The first paragraphs of the clean trace: the work a call did before it degenerated.
    text = data_text("clean_reasoning.txt")
    return text[: text.index("What should the behaviour be?")]


def verbatim_loop(length: int = 20_000) -> Sample:
    """A short phrase cycle repeated in the same order (period 78)."""
    prefix = _prefix()
    unit = ("Let me write the test now.\n\nOK.\n\nGo.\n\nWriting the file.\n\nNow.\n\n"
            "Let me do it.\n\n")
    body = unit * (length // len(unit) + 1)
    return Sample("verbatim", "verbatim reasoning loop", "reasoning",
                  (prefix + body)[:length], len(prefix))


def phrase_pool(length: int = 30_000, seed: int = 7) -> Sample:
    """About ten short sentences reshuffled on every pass: no period at all."""
    rng = random.Random(seed)
    pool = ["Let me read the section.", "Go.", "Now.", "OK.", "Writing.", "Let me write.",
            "Executing.", "Making the call.", "Let me read the README.", "Let me run it.",
            "I need to act. Reading the file now."]
    prefix = _prefix()
    parts = [prefix]
    size = len(prefix)
    while size < length:
        rng.shuffle(pool)
        for line in pool[: rng.randint(6, len(pool))]:
            parts.append(line + "\n\n")
            size += len(line) + 2
    return Sample("phrase-pool", "reshuffled phrase pool", "reasoning",
                  "".join(parts)[:length], len(prefix))


def star_flood(length: int = 12_000, seed: int = 3) -> Sample:
    """Reasoning that dissolves into asterisks."""
    rng = random.Random(seed)
    prefix = _prefix()
    parts = [prefix]
    size = len(prefix)
    while size < length:
        piece = "*" * rng.randint(3, 7) + rng.choice([" ", " ", "\n", "  "])
        parts.append(piece)
        size += len(piece)
    return Sample("star-flood", "*** flood", "reasoning", "".join(parts)[:length], len(prefix))


_EMOJI = "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩😘😗😚😙🥲😋😛😜🤪😝🤑🤗🤭🫢🤫🤔🫡🤐🤨😐😑😶😏😒🙄😬"


def emoji_flood(length: int = 8_000, seed: int = 5) -> Sample:
    """An emoji flood drawn at random from a small set: no period, no two blocks equal,
    so only the degeneracy rule can see it."""
    rng = random.Random(seed)
    prefix = _prefix()
    body = "".join(rng.choice(_EMOJI) for _ in range(length))
    return Sample("emoji-flood", "emoji flood", "reasoning", (prefix + body)[:length], len(prefix))


def counter_loop(length: int = 20_000) -> Sample:
    """A near-verbatim paragraph whose counter ticks: never periodic, never new."""
    prefix = _prefix()
    parts = [prefix]
    size = len(prefix)
    n = 1
    while size < length:
        piece = (f"Attempt {n}: the retry still fires immediately after the 429, so let me "
                 f"re-read put_chunk once more and check whether the loop sleeps before it "
                 f"sends the request again.\n\n")
        parts.append(piece)
        size += len(piece)
        n += 1
    return Sample("counter", "near-verbatim loop with a counter", "reasoning",
                  "".join(parts)[:length], len(prefix))


def cjk_loop(length: int = 12_000, seed: int = 11) -> Sample:
    """A Chinese phrase pool: 好。执行。输出。 reshuffled."""
    rng = random.Random(seed)
    pool = ["好。", "执行。", "输出。", "现在。", "我写。", "（输出）", "现在输出。", "写报告。"]
    prefix = data_text("clean_reasoning_zh.txt")[:400]
    parts = [prefix]
    size = len(prefix)
    while size < length:
        rng.shuffle(pool)
        for line in pool:
            parts.append(line + "\n\n")
            size += len(line) + 2
    return Sample("cjk-pool", "Chinese phrase pool", "reasoning", "".join(parts)[:length],
                  len(prefix))


def answer_loop(length: int = 12_000) -> Sample:
    """A visible answer that starts well and then repeats one sentence block."""
    intro = data_text("clean_code.md")
    intro = intro[: intro.index("```python")]
    unit = ("The fix above handles the 429 case. The fix above handles the 429 case "
            "by waiting before the next attempt.\n")
    body = unit * (length // len(unit) + 1)
    return Sample("answer-loop", "repeating visible answer", "text", (intro + body)[:length],
                  len(intro))


def block_aligned_loop(length: int = 12_000) -> Sample:
    """A loop whose 64-character unit divides the block size: its blocks repeat exactly."""
    prefix = _prefix()
    unit = "Checking the upload loop again: it still retries at once. OK.\n\n\n"
    body = unit * (length // len(unit) + 1)
    return Sample("block-aligned", "loop aligned with the block size", "reasoning",
                  (prefix + body)[:length], len(prefix))


def token_repeat(length: int = 6_000) -> Sample:
    """A visible answer stuck on one token, streamed one token per delta."""
    intro = "好的，我来总结一下上传客户端的修改。\n\n"
    body = "好。" * ((length - len(intro)) // 2)
    return Sample("token-repeat", "answer stuck on one token", "text", intro + body, len(intro))


def clean_reasoning() -> Sample:
    return Sample("clean-reasoning", "clean reasoning trace", "reasoning",
                  data_text("clean_reasoning.txt"))


def clean_reasoning_zh() -> Sample:
    return Sample("clean-reasoning-zh", "clean Chinese reasoning", "reasoning",
                  data_text("clean_reasoning_zh.txt"))


def clean_code() -> Sample:
    return Sample("clean-code", "clean code answer", "text", data_text("clean_code.md"))


def loop_samples() -> list[Sample]:
    """Every loop shape this project generates."""
    return [verbatim_loop(), phrase_pool(), star_flood(), emoji_flood(), counter_loop(),
            cjk_loop(), block_aligned_loop(), answer_loop(), token_repeat()]


def table_template(blank_rows: int = 8) -> Sample:
    """An answer a user asked for: a template table with wide rows left blank on purpose
    (a real AlpacaEval answer has three; this one has more)."""
    widths = (20, 14, 8, 15, 15, 16, 19, 10, 7)

    def row(cells: tuple[str, ...]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |\n"

    examples = [("Netflix", "Streaming", "$15.99", "Monthly", "15th", "Credit card",
                 "me@example.com", "me", "Family"),
                ("Gym", "Fitness", "$50", "Monthly", "5th", "Bank transfer", "me@example.com",
                 "member 7", "24/7"),
                ("Microsoft 365", "Software", "$69.99", "Yearly", "March 15", "Credit card",
                 "me@example.com", "me", "Family")]
    header = row(("Subscription", "Type", "Cost", "Billing cycle", "Renewal", "Payment",
                  "Account", "User", "Notes"))
    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|\n"
    text = ("Here's a template table for keeping track of all subscriptions:\n\n" + header
            + rule + "".join(row(e) for e in examples) + row(("",) * 9) * blank_rows
            + "\nFill in one row per service and sort by renewal date.\n")
    return Sample("table-template", "template table with blank rows", "text", text)


def clean_samples() -> list[Sample]:
    """Every clean stream bundled with the project."""
    return [clean_reasoning(), clean_reasoning_zh(), clean_code(), table_template()]


def demo_samples() -> list[Sample]:
    """The streams ``loopbreak demo`` replays, in order."""
    return [verbatim_loop(), phrase_pool(), star_flood(), emoji_flood(), counter_loop(),
            clean_reasoning(), clean_code()]
