"""Every text the model reads, in one place, per language.

What the model must learn after a cut: how many characters of repeating
reasoning or output were cut, not to repeat them, and to carry on with its
task. Never to conclude or finish: that derails work in progress.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from loopbreak._engine import accelerator

if TYPE_CHECKING:
    from loopbreak._engine.trip import Trip

Language = Literal["en", "zh"]
LANGUAGES: tuple[Language, ...] = ("en", "zh")
LanguageSource = Language | Callable[[], Language]
"""A language, or what to ask for it when a text is written: a session guard's follows its
conversation, and working it out is counting that most calls never need (no rule speaks)."""

TEXTS: dict[Language, dict[str, str]] = {
    "en": {
        "cut.reasoning": (
            "[loopbreak] Your reasoning was cut after {chars} characters because it kept "
            "repeating ({rule}). Do not repeat that reasoning. Carry on with the task from "
            "where it stands: take the next concrete step."
        ),
        "cut.text": (
            "[loopbreak] Your output was cut after {chars} characters because it kept "
            "repeating ({rule}). Do not repeat that output. Carry on with the task from "
            "where it stands."
        ),
        "stall": (
            "[loopbreak] Your last {calls} model calls only thought (or restated earlier "
            "thinking) without acting. Do not restate the plan again. Carry on with the "
            "task: take the next concrete step with a tool call or an answer."
        ),
        "tool.guidance": (
            "[loopbreak] This exact call to `{tool}` has now failed {failures} times in this "
            "turn with the same error. Repeating it will fail again. Change the approach: "
            "different arguments, a different tool, or check your assumptions first.\n"
            "The error was:\n{error}"
        ),
        "tool.denied": (
            "[loopbreak] This call to `{tool}` was not run: the identical call already "
            "failed {failures} times in this turn. Do not send it again unchanged. Change "
            "the approach (different arguments or a different tool) and carry on with "
            "the task."
        ),
        "post_trip": (
            "[loopbreak] Earlier in this step your reasoning was cut for repeating itself. "
            "Keep going with the task without re-deliberating what is already decided."
        ),
        "no_progress.guidance": (
            "[loopbreak] This exact call to `{tool}` has now returned the same result "
            "{calls} times. Calling it again will return it again. Use what it returned, or "
            "change the approach: different arguments or a different tool."
        ),
        "no_progress.denied": (
            "[loopbreak] This call to `{tool}` was not run: the identical call already "
            "returned the same result {calls} times. Do not send it again unchanged. Use "
            "the result you have or change the approach, and carry on with the task."
        ),
        "alternation.guidance": (
            "[loopbreak] Your last {steps} tool calls went round the same {period} calls "
            "({tools}), each returning what it returned before. Going round again will "
            "change nothing. Break the cycle: use what you have learned or try something "
            "different."
        ),
        "alternation.denied": (
            "[loopbreak] This call to `{tool}` was not run: it would start another round of "
            "the same {period} calls ({tools}), which returned the same results {cycles} "
            "times. Do something different and carry on with the task."
        ),
        "repeated_error.guidance": (
            "[loopbreak] {failures} different tool calls have failed with the same "
            "error. The cause is not in the arguments you keep changing: find out what the "
            "error means before calling again.\nThe error was:\n{error}"
        ),
        "repeated_error.denied": (
            "[loopbreak] This call to `{tool}` was not run: {failures} calls have failed "
            "with the same error and nothing has succeeded since. Deal with the "
            "cause of the error first, or tell the user what blocks you."
        ),
        "monologue.steer": (
            "[loopbreak] Your last {replies} answers said the same thing again without "
            "doing anything new. Do not repeat it. Carry on with the task: take the next "
            "concrete step with a tool call, or say what you need from the user."
        ),
        "monologue.stop": (
            "[loopbreak] This turn was ended: the model gave the same answer {replies} "
            "times in a row without acting."
        ),
    },
    "zh": {
        "cut.reasoning": (
            "[loopbreak] 你的思考在 {chars} 个字符处被截断，因为它在不断重复（{rule}）。"
            "不要重复这些思考。请从当前进度继续完成任务：执行下一个具体步骤。"
        ),
        "cut.text": (
            "[loopbreak] 你的输出在 {chars} 个字符处被截断，因为它在不断重复（{rule}）。"
            "不要重复这些输出。请从当前进度继续完成任务。"
        ),
        "stall": (
            "[loopbreak] 你最近的 {calls} 次模型调用只在思考（或复述之前的思考），没有行动。"
            "不要再复述计划。请继续完成任务：用一次工具调用或回答执行下一个具体步骤。"
        ),
        "tool.guidance": (
            "[loopbreak] 对 `{tool}` 的这个完全相同的调用在本轮中已以相同的错误失败 {failures} 次。"
            "重复它还会失败。请换一种做法：换参数、换工具，或先检查你的假设。\n"
            "错误信息：\n{error}"
        ),
        "tool.denied": (
            "[loopbreak] 对 `{tool}` 的这个调用没有执行："
            "完全相同的调用在本轮中已失败 {failures} 次。"
            "不要原样再发。请换一种做法（换参数或换工具），继续完成任务。"
        ),
        "post_trip": (
            "[loopbreak] 本步骤中你的思考因不断重复而被截断。"
            "请继续推进任务，不要重新斟酌已经决定的事。"
        ),
        "no_progress.guidance": (
            "[loopbreak] 对 `{tool}` 的这个完全相同的调用已 {calls} 次返回相同的结果。"
            "再调用一次还会是同样的结果。请利用已有的结果，或换一种做法：换参数或换工具。"
        ),
        "no_progress.denied": (
            "[loopbreak] 对 `{tool}` 的这个调用没有执行：完全相同的调用已 {calls} 次"
            "返回相同的结果。不要原样再发。请利用已有的结果或换一种做法，继续完成任务。"
        ),
        "alternation.guidance": (
            "[loopbreak] 你最近的 {steps} 次工具调用一直在相同的 {period} 个调用（{tools}）之间"
            "来回，每次都返回和之前相同的结果。再转一圈也不会有变化。请打破这个循环："
            "利用已经得到的信息，或尝试别的做法。"
        ),
        "alternation.denied": (
            "[loopbreak] 对 `{tool}` 的这个调用没有执行：它会再一次开始相同的 {period} 个调用"
            "（{tools}）的循环，而这些调用已 {cycles} 次返回相同的结果。"
            "请换一种做法，继续完成任务。"
        ),
        "repeated_error.guidance": (
            "[loopbreak] 已有 {failures} 个不同的工具调用以相同的错误失败。"
            "原因不在你不断修改的参数上：再次调用之前，先弄清这个错误的含义。\n错误信息：\n{error}"
        ),
        "repeated_error.denied": (
            "[loopbreak] 对 `{tool}` 的这个调用没有执行：已有 {failures} 个调用以相同的错误"
            "失败，此后没有任何成功。请先处理错误的原因，或告诉用户是什么阻碍了你。"
        ),
        "monologue.steer": (
            "[loopbreak] 你最近的 {replies} 次回答重复了同样的内容，却没有做任何新的事情。"
            "不要再重复。请继续完成任务：用一次工具调用执行下一个具体步骤，或说明你需要用户提供什么。"
        ),
        "monologue.stop": (
            "[loopbreak] 本轮已结束：模型连续 {replies} 次给出相同的回答而没有行动。"
        ),
    },
}


LANGUAGE_SAMPLE_CHARS = 4000
"""The conversation's last characters that ``auto`` language is read from."""


def detect_language(sample: str) -> Language:
    """``zh`` when CJK characters make up at least a fifth of the letters in ``sample``."""
    return language_of_counts(*letter_counts(sample[-LANGUAGE_SAMPLE_CHARS:]))


def language_of_counts(cjk: int, letters: int) -> Language:
    """What ``detect_language`` says of a sample holding ``cjk`` CJK letters among
    ``letters`` letters."""
    return "zh" if cjk and cjk * 5 >= letters else "en"


_ASCII_LETTERS = string.ascii_letters.encode("ascii")
CJK_BLOCKS = ((0x3400, 0x9FFF), (0xF900, 0xFAFF))
"""The code points whose letters count as CJK (``detect_language``)."""
# Blocks of punctuation a CJK text is full of (general punctuation, CJK symbols, full-width
# forms): their characters that are not letters are passed over without a look.
_PUNCTUATION_BLOCKS = ((0x2000, 0x206F), (0x3000, 0x303F), (0xFF00, 0xFFEF))


def _class_of(codes: list[int]) -> str:
    """A regular expression character class body holding exactly ``codes`` (ascending,
    BMP)."""
    spans: list[list[int]] = []
    for code in codes:
        if spans and code == spans[-1][1] + 1:
            spans[-1][1] = code
        else:
            spans.append([code, code])
    return "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in spans)


@functools.cache
def _letter_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Runs of CJK letters, and runs of the characters that are neither ASCII nor in the CJK
    blocks nor known not to be letters: built from this interpreter's ``str.isalpha`` (its
    Unicode version) when first needed (~3 ms)."""
    cjk = [c for low, high in CJK_BLOCKS for c in range(low, high + 1) if chr(c).isalpha()]
    blocks = "".join(f"\\u{low:04x}-\\u{high:04x}" for low, high in CJK_BLOCKS)
    not_letters = [c for low, high in _PUNCTUATION_BLOCKS for c in range(low, high + 1)
                   if not chr(c).isalpha()]
    return (re.compile(f"[{_class_of(cjk)}]+"),
            re.compile(f"[^\\x00-\\x7f{blocks}{_class_of(not_letters)}]+"))


# Past ASCII, a text this long is counted by the compiled kernel where it is loaded (a
# shorter one costs less than the call).
_COMPILED_FROM = 48


def letter_counts(text: str) -> tuple[int, int]:
    """The CJK letters and the letters (``str.isalpha``) in ``text``. Counts add up over
    the pieces of a text, so a session guard keeps its sample's as the sample moves."""
    kernels = accelerator.loaded()
    if kernels is not None and len(text) >= _COMPILED_FROM and not text.isascii():
        counted: tuple[int, int] | None = kernels.letter_counts(text)
        if counted is not None:
            return counted
    return python_letter_counts(text)


def python_letter_counts(text: str) -> tuple[int, int]:
    """``letter_counts`` without the compiled kernel (the reference). Counted in C: ASCII
    letters in the UTF-8 bytes (no byte of a longer character is ASCII), CJK letters by
    their runs' lengths, any other letters run by run (a letter at a time took ~440 us for
    4,000 CJK characters)."""
    raw = text.encode("utf-8", "surrogatepass")
    letters = len(raw) - len(raw.translate(None, _ASCII_LETTERS))
    if len(raw) == len(text):  # ASCII
        return 0, letters
    cjk_letter, other_run = _letter_patterns()
    cjk = sum(map(len, cjk_letter.findall(text)))
    other = sum(len(run) if run.isalpha() else sum(map(str.isalpha, run))
                for run in other_run.findall(text))
    return cjk, letters + cjk + other


def resolve_language(setting: str, sample: str = "") -> Language:
    """The language to write in: the setting, or the sample's when the setting is ``auto``."""
    if setting in LANGUAGES:
        return setting
    return detect_language(sample)


def render(name: str, language: LanguageSource = "en", **values: object) -> str:
    """The text ``name`` in ``language`` with ``values`` filled in."""
    if not isinstance(language, str):
        language = language()
    return TEXTS[language][name].format(**values)


def is_denial(text: str) -> bool:
    """Whether a tool result is one of loopbreak's own denials (a host that stores it as
    the call's result shows it back; it says nothing about the tool)."""
    # Ruled out from the text's first characters when its first one past the whitespace
    # is found there and is not the tag's: a replayed history asks this of every result
    # (`cat -n` output starts with spaces), and the whole text stripped is a copy of it.
    start = text[:64].lstrip()
    if start and start[0] != "[":
        return False
    head = text.lstrip()[:400]
    return head.startswith(_NOTICE_TAG) and any(
        head.startswith(TEXTS[lang][name].split("{", 1)[0])
        for lang in LANGUAGES for name in _DENIALS)


_NOTICE_TAG = "[loopbreak]"
_DENIALS = ("tool.denied", "no_progress.denied", "alternation.denied", "repeated_error.denied")


def cut_notice(trip: Trip, language: Language = "en", chars: int | None = None) -> str:
    """What the model reads after ``trip``: after how many characters (``trip.offset``
    unless ``chars`` says otherwise) its repeating reasoning or output was cut."""
    name = "cut.reasoning" if trip.channel == "reasoning" else "cut.text"
    count = trip.offset if chars is None else chars
    return render(name, language, chars=f"{count:,}", rule=trip.rule)
