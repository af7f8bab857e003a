"""The compiled kernels make the pure-Python rules' decisions, block by block.

block-repeat with ``compiled=True`` compares blocks in numba (``loopbreak[fast]``); without
it, in Python sets. Both are fed the same streams, real and generated, one block at a
time, and must agree after every block on the streaks (so on every decision, not only on
the trips a stream happens to reach) and on every trip's rule, character and evidence.
The stall rule's 4-gram sets with ``compiled=True`` keep their grams in a numba table: fed
the same streams, both hold the same grams at the same sampling level, and every
containment between them is the pure one. A tool result's words (what its fingerprint
digests) read by the kernel are the pure words, on generated text and on every result of the
agent corpus. A language sample's letters counted by the kernel are the pure counts, for
every code point.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from itertools import pairwise
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopbreak import BlockRepeatConfig, BlockRepeatDetector, Config
from loopbreak._engine import accelerator
from loopbreak._engine.call_guard import build_detectors
from loopbreak._engine.detectors import block_repeat
from loopbreak._engine.grams import GramSet
from loopbreak.offline.corpus import alpaca_loops, alpaca_outputs, dsh_loop_guard, stdlib_sources

pytest.importorskip("numba", reason="the compiled kernels need numba (pip install loopbreak[fast])")
np = pytest.importorskip("numpy")
compiled = pytest.importorskip("loopbreak._engine.compiled")


@pytest.fixture(autouse=True)
def _kernels_loaded() -> None:
    # A rule uses the kernels once they are loaded (a long job loads them when it starts).
    assert accelerator.kernels() is not None


def _state(detector: BlockRepeatDetector) -> tuple[int, int, bool]:
    return detector._novelty_run, detector._exact_run, detector._code_in_run


def _agree(text: str, config: BlockRepeatConfig, python_blocks: int | None = None,
           reset_at: int | None = None) -> int:
    """Feed ``text`` to both, a block at a time (both reset before block ``reset_at``);
    return how many blocks agreed. The compiled rule hands its blocks to the ring after
    ``python_blocks`` (the module's default unless given)."""
    pure = BlockRepeatDetector(config)
    with mock.patch.object(block_repeat, "_PYTHON_BLOCKS",
                           block_repeat._PYTHON_BLOCKS if python_blocks is None
                           else python_blocks):
        fast = BlockRepeatDetector(config, compiled=True)
    assert not pure.compiled and fast.compiled
    size = config.block_chars
    blocks = 0
    for start in range(0, len(text), size):
        if blocks == reset_at:
            pure.reset()
            fast.reset()
        piece = text[start : start + size]
        expected, got = pure.feed(piece), fast.feed(piece)
        assert _state(fast) == _state(pure), f"block {blocks} of {text[:60]!r}"
        if expected is None:
            assert got is None
        else:
            assert got is not None
            assert (got.rule, got.at, got.offset, got.evidence) == (
                expected.rule, expected.at, expected.offset, expected.evidence)
            # After a trip the rule goes on judging; the streaks must go on agreeing.
        blocks += 1
    return blocks


def _texts(corpus: Path) -> Iterable[str]:
    for stream in dsh_loop_guard(corpus):
        yield stream.text
    for stream in alpaca_loops(corpus):
        yield stream.text
    for i, stream in enumerate(alpaca_outputs(corpus)):
        if i % 4 == 0:
            yield stream.text
    for i, stream in enumerate(stdlib_sources()):
        if i % 8 == 0:
            yield stream.text


def test_compiled_block_repeat_decides_as_python_on_the_real_corpus(corpus: Path) -> None:
    blocks = trips = 0
    config = BlockRepeatConfig()
    for text in _texts(corpus):
        blocks += _agree(text, config)
        pure = BlockRepeatDetector(config)
        trips += any(pure.feed(text[i : i + 128]) for i in range(0, len(text), 128))
    # The corpus holds real loops: both must have been seen trip, and many blocks judged.
    assert trips >= 100 and blocks >= 10_000


ALPHABETS = ["ab", "Go. OK.\n", "好。执行。\n", "😀😂 a", "abc def\n  x()", "\U0001f600\U0001f601",
             "x\ud800y"]  # a lone surrogate too: the pure rule keys it, so must the kernel


@st.composite
def streams(draw: st.DrawFn) -> str:
    alphabet = draw(st.sampled_from(ALPHABETS))
    letters = st.text(alphabet=alphabet, min_size=1, max_size=50)
    parts = []
    for _ in range(draw(st.integers(1, 8))):
        part = draw(letters)
        parts.append(part * draw(st.integers(1, 30)) if draw(st.booleans()) else part)
    return "".join(parts)[:4000]


@st.composite
def configs(draw: st.DrawFn) -> BlockRepeatConfig:
    shingle = draw(st.integers(2, 6))
    min_back = draw(st.integers(1, 6))
    return BlockRepeatConfig(
        block_chars=draw(st.integers(16, 96)), shingle_chars=shingle,
        shingle_step=draw(st.integers(1, 4)), min_back=min_back,
        # Config() holds min_back <= max_back (a section alone does not check it).
        max_back=draw(st.integers(min_back, 40)),
        novelty_overlap=draw(st.sampled_from([0.3, 0.5, 0.7, 0.75, 0.9, 1.0])),
        novelty_streak=draw(st.integers(0, 4)), novelty_streak_code=draw(st.integers(0, 6)),
        exact_streak=draw(st.integers(0, 3)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=streams(), config=configs(), python_blocks=st.sampled_from([0, 1, 3, 8, 50]),
       reset_at=st.none() | st.integers(1, 40))
def test_compiled_block_repeat_decides_as_python_on_generated_streams(
        text: str, config: BlockRepeatConfig, python_blocks: int, reset_at: int | None
) -> None:
    # The ring takes over at any block, before or after a reset, with the state the
    # blocks judged in Python left.
    _agree(text, config, python_blocks, reset_at)


def _ring_view(detector: BlockRepeatDetector) -> tuple[bytes, list[tuple[int, bytes]]]:
    """What a ring's later decisions read: the window's filter and, nearest block first,
    each remembered block's keys (the slots they sit in depend on how many came)."""
    ring = detector._ring
    assert ring is not None
    count, max_back = int(ring._state[compiled._COUNT]), ring._keys.shape[0] - 1
    blocks = []
    for back in range(1, min(count, max_back) + 1):
        slot = (count - back) % max_back
        size = int(ring._sizes[slot])
        blocks.append((size, ring._keys[slot, :size].tobytes()))
    return ring._window.tobytes(), blocks


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=streams(), config=configs(), python_blocks=st.integers(1, 50))
def test_the_ring_taking_over_holds_what_it_would_have_held_from_the_start(
        text: str, config: BlockRepeatConfig, python_blocks: int) -> None:
    with mock.patch.object(block_repeat, "_PYTHON_BLOCKS", 0):
        always = BlockRepeatDetector(config, compiled=True)
    with mock.patch.object(block_repeat, "_PYTHON_BLOCKS", python_blocks):
        late = BlockRepeatDetector(config, compiled=True)
    size = config.block_chars
    for blocks, start in enumerate(range(0, len(text) - size + 1, size), start=1):
        always.feed(text[start : start + size])
        late.feed(text[start : start + size])
        if blocks >= python_blocks:
            assert _ring_view(late) == _ring_view(always), f"after block {blocks}"


@settings(max_examples=300, deadline=None)
@given(pair=st.lists(st.text(alphabet="ac\U0001f600\U0001f640\ud800\u4e00 ", min_size=1,
                             max_size=40), min_size=2, max_size=2),
       size=st.integers(2, 6), step=st.integers(1, 4))
def test_shingle_keys_are_the_shingles(pair: list[str], size: int, step: int) -> None:
    # Keys equal exactly when the substrings are: the kernel's key counts and shared keys
    # are the pure rule's set sizes and intersection (characters that differ in one bit
    # only, astral ones and a lone surrogate included).
    from loopbreak._engine.grams import shingles

    def keys(block: str) -> tuple[object, object, int]:
        points = np.frombuffer(block.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        rows = np.zeros((len(block) + 1, 3), dtype=np.uint64)
        table = np.zeros(compiled._table_slots(len(block) + 1), dtype=np.int32)
        return rows, table, compiled._shingle_keys(points, size, step, rows, table)

    a, b = (p * 3 for p in pair)
    if min(len(a), len(b)) < size:
        return
    a_rows, a_table, a_count = keys(a)
    b_rows, _, b_count = keys(b)
    assert a_count == len(shingles(a, size, step)) and b_count == len(shingles(b, size, step))
    shared = sum(compiled._holds(a_rows, a_table, b_rows[i]) for i in range(b_count))
    assert shared == len(shingles(a, size, step) & shingles(b, size, step))


def test_a_ring_full_of_stale_counts_still_bounds_exactly() -> None:
    # Thousands of blocks through a small window: the counting filter is decremented as
    # blocks leave; a count left behind would let a block skip a repeat it holds.
    config = BlockRepeatConfig(block_chars=32, max_back=4, min_back=1, novelty_streak=2)
    words = [f"w{i:05d} " for i in range(4000)]
    text = "".join(words) + "".join(words[:400]) * 3
    assert _agree(text, config) > 1000


def test_the_guard_runs_the_kernel_unless_told_not_to() -> None:
    def block_repeat(config: Config) -> BlockRepeatDetector:
        found = [d for d in build_detectors("reasoning", config)
                 if isinstance(d, BlockRepeatDetector)]
        return found[0]

    assert block_repeat(Config()).compiled
    assert not block_repeat(Config().replace(**{"judging.compiled": "off"})).compiled
    # Shingles longer than a key holds stay in Python.
    assert not block_repeat(Config().replace(**{"block_repeat.shingle_chars": 7})).compiled


def test_the_ring_waits_for_a_long_stream() -> None:
    # A proxy holds a guard for every open stream; most hold little reasoning, and the
    # ring (its arrays ~100 kB) waits until the stream has had _PYTHON_BLOCKS blocks.
    detector = BlockRepeatDetector(BlockRepeatConfig(), compiled=True)
    assert detector.compiled and detector._ring is None
    size = BlockRepeatConfig().block_chars
    words = " ".join(f"w{i}" for i in range(10_000))
    detector.feed(words[: size * (block_repeat._PYTHON_BLOCKS - 1)])
    assert detector._ring is None
    detector.feed(words[size * (block_repeat._PYTHON_BLOCKS - 1) : size * 20])
    assert detector._ring is not None
    # The blocks judged in Python left the ring nothing to keep in sets.
    assert not detector._recent_grams


def test_without_numba_the_rules_run_in_python() -> None:
    # numba made unimportable in a fresh process: the kernels are absent, the rule runs in
    # Python and still trips.
    code = (
        "import sys; sys.modules['numba'] = None\n"
        "from loopbreak._engine import accelerator\n"
        "from loopbreak import BlockRepeatDetector\n"
        "from loopbreak._samples import counter_loop\n"
        "assert accelerator.kernels() is None\n"
        "d = BlockRepeatDetector(compiled=True)\n"
        "assert not d.compiled\n"
        "text = counter_loop().text\n"
        "print(any(d.feed(text[i:i + 32]) for i in range(0, len(text), 32)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "True"


def test_the_kernels_load_once() -> None:
    import loopbreak

    assert loopbreak.load_kernels() is True
    assert accelerator.kernels() is accelerator.kernels() is accelerator.loaded() is not None



def test_no_kernel_lets_the_gil_go() -> None:
    # A kernel runs for microseconds; a worker thread that lets the GIL go at every call (a
    # first request's replay calls the words kernel 800 times) kept the proxy's event loop
    # waiting for it up to 30-55 ms at a time (compiled.py says why).
    import numba

    kernels = [k for k in vars(compiled).values()
               if isinstance(k, numba.core.registry.CPUDispatcher)]
    assert len(kernels) >= 20
    assert [k.__name__ for k in kernels if k.targetoptions.get("nogil")] == []


def _fresh_process(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300)
    return out.stdout.strip()


def test_a_short_job_never_loads_numba() -> None:
    # loopbreak demo judges in 0.35 s; loading the kernels would cost more than that.
    code = (
        "import sys\n"
        "from loopbreak import scan\n"
        "from loopbreak._samples import counter_loop\n"
        "assert scan(counter_loop().text) is not None\n"
        "print('numba' in sys.modules)\n"
    )
    assert _fresh_process(code) == "False"


def test_a_long_job_loads_the_kernels_for_the_rules_made_after() -> None:
    code = (
        "from loopbreak import BlockRepeatDetector\n"
        "from loopbreak._engine import accelerator\n"
        "first = BlockRepeatDetector(compiled=True)\n"
        "assert not first.compiled and accelerator.loaded() is None\n"
        "words = ' '.join(f'w{i}' for i in range(200_000))\n"
        "text = words[: accelerator.LOAD_AFTER_CHARS - 1000]\n"
        "for i in range(0, len(text), 64):\n"
        "    first.feed(text[i : i + 64])\n"
        "assert accelerator.loaded() is None\n"
        "first.feed(words[len(text) : len(text) + 2000])\n"
        "assert accelerator.loaded() is not None and not first.compiled\n"
        "print(BlockRepeatDetector(compiled=True).compiled,"
        " BlockRepeatDetector().compiled)\n"
    )
    assert _fresh_process(code) == "True False"


# -- gram sets ---------------------------------------------------------------------------------


def _same_grams(pure: GramSet, fast: GramSet) -> None:
    assert fast.compiled and not pure.compiled
    assert (fast.level, len(fast), fast.consumed) == (pure.level, len(pure), pure.consumed)
    assert fast.sample(fast.level) == pure.sample(pure.level)


def _gram_pair(deltas: Iterable[str], cap: int) -> tuple[GramSet, GramSet]:
    pure, fast = GramSet(cap=cap), GramSet(cap=cap, compiled=True)
    for delta in deltas:
        pure.feed(delta)
        fast.feed(delta)
    return pure, fast


def _same_containments(a: tuple[GramSet, GramSet], b: tuple[GramSet, GramSet]) -> None:
    expected = a[0].containment(b[0])
    # Compiled with compiled, and each with a pure set (one made before the kernels loaded).
    assert a[1].containment(b[1]) == expected
    assert a[1].containment(b[0]) == expected == a[0].containment(b[1])
    assert b[1].containment(a[1]) == b[0].containment(a[0])


def test_compiled_gram_sets_hold_the_pure_grams_on_the_real_corpus(corpus: Path) -> None:
    # Exact sets and sampled ones (a small cap halves the sample several times): the same
    # grams, level and size, and the same containment between consecutive streams, as the
    # stall rule compares consecutive calls.
    previous: dict[int, tuple[GramSet, GramSet]] = {}
    levels: set[int] = set()
    compared = 0
    for i, text in enumerate(_texts(corpus)):
        if i % 3:
            continue
        for cap in (1 << 16, 512):
            pair = _gram_pair((text[k : k + 64] for k in range(0, len(text), 64)), cap)
            _same_grams(*pair)
            levels.add(pair[0].level)
            if cap in previous:
                _same_containments(pair, previous[cap])
                compared += 1
            previous[cap] = pair
    assert compared >= 100 and max(levels) >= 3


GRAM_ALPHABETS = ["ab ", "héllo wörld", "好。执行。\n", "😀😂 a", "x\ud800y\udfff", "\x00\x01a",
                  "aĀ\uffff\U0010ffff"]  # one, two and four bytes a character; NUL; a surrogate


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(st.sampled_from(GRAM_ALPHABETS).flatmap(
           lambda alphabet: st.text(alphabet=alphabet, max_size=3000)), min_size=2, max_size=2),
       cap=st.integers(1, 600), cuts=st.lists(st.integers(1, 2000), max_size=12))
def test_compiled_gram_sets_hold_the_pure_grams_on_generated_streams(
        texts: list[str], cap: int, cuts: list[int]) -> None:
    pairs = []
    for text in texts:
        bounds = sorted({0, len(text), *(c for c in cuts if c < len(text))})
        pair = _gram_pair((text[a:b] for a, b in pairwise(bounds)), cap)
        _same_grams(*pair)
        pairs.append(pair)
    _same_containments(pairs[0], pairs[1])


@settings(max_examples=300, deadline=None)
@given(text=st.text(min_size=1, max_size=6))
def test_the_kernel_hashes_strings_as_python_does(text: str) -> None:
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    assert compiled.STR_HASH_SECRET is not None
    assert int(compiled._str_hash(points, 0, len(text), compiled.STR_HASH_SECRET)) == (
        hash(text) & ((1 << 64) - 1))


def test_without_a_reproducible_str_hash_gram_sets_stay_in_python() -> None:
    with mock.patch.object(compiled, "STR_HASH_SECRET", None):
        assert not GramSet(compiled=True).compiled
    assert GramSet(compiled=True).compiled
    assert not GramSet(size=7, compiled=True).compiled


def test_the_guard_and_the_replay_keep_compiled_grams_unless_told_not_to() -> None:
    from loopbreak import CallGuard
    from loopbreak._recovery.history import clear_caches, replay

    off = Config().replace(**{"judging.compiled": "off"})
    for config, expected in ((Config(), True), (off, False)):
        guard = CallGuard(config, track_grams=True)
        guard.feed_reasoning("Let me check the file again. " * 10)
        grams = guard.summary().grams
        assert grams is not None and grams.compiled is expected
        clear_caches()
        body = {"messages": [{"role": "user", "content": "go"}] + [
            {"role": "assistant", "content": "ok", "reasoning_content": f"step {i} " * 600}
            for i in range(3)]}
        view = replay(body, "openai", config)
        # The last replayed call's grams, which the stall rule compares the next call with.
        kept = view.session._stall._previous
        assert kept is not None and kept.compiled is expected


# Every byte class the kernel reads apart: str.split's ASCII whitespace (the four
# separators too), hex digits of both cases, the 0x prefix's letter, word characters that
# are not hex, punctuation.
_WORDS_ALPHABET = " \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f0123456789abcdefABCDEFxXghz_.-:<>"


@settings(max_examples=1000, deadline=None)
@given(text=st.text(alphabet=_WORDS_ALPHABET, max_size=60))
def test_the_words_kernel_collapses_whitespace_as_str_split_and_sees_every_hex_run(
        text: str) -> None:
    from loopbreak._engine.masking import may_hold_hex_run

    words = " ".join(text.split())
    assert compiled.ascii_words(text, 0) == words
    assert compiled.ascii_words(text, 8) == (None if may_hold_hex_run(text, 8) else words)
    assert compiled.ascii_words(text, 3) == (None if may_hold_hex_run(text, 3) else words)


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet=_WORDS_ALPHABET + "é\u3000\x85\xa0\U0001f600", max_size=60))
def test_a_result_s_words_are_the_pure_words_with_the_kernels_loaded(text: str) -> None:
    from loopbreak._engine import tool_steps

    assert tool_steps._words(text) == tool_steps.python_words(text)


def test_real_tool_results_read_as_the_same_words_with_the_kernels_loaded() -> None:
    from loopbreak._engine import tool_steps
    from loopbreak.offline.agent_corpus import load_trajectories

    corpus = Path(__file__).resolve().parents[2] / "agent-corpus"
    results = [step["result"] for run in load_trajectories([corpus]) for step in run.steps
               if isinstance(step.get("result"), str)]
    assert len(results) > 1000
    masked = 0
    for result in results:
        words = tool_steps._words(result)
        assert words == tool_steps.python_words(result)
        masked += "<hex>" in words
    assert masked > 10  # the results whose ids the kernel sends back to the expression


def test_the_letters_kernel_counts_every_character_as_isalpha_reads_it() -> None:
    # Every code point, as 50 of it (past the length the kernel is called from): the
    # kernel's table is this interpreter's str.isalpha; past the BMP, and a lone
    # surrogate, are left to Python.
    from loopbreak._engine.notices import letter_counts, python_letter_counts

    counted = 0
    for code in range(0x110000):
        text = chr(code) * 50
        found = compiled.letter_counts(text)
        assert (found is None) == (code >= 0xD800 and (code <= 0xDFFF or code > 0xFFFF))
        if found is not None:
            assert found == python_letter_counts(text), hex(code)
            counted += 1
        if code % 97 == 0:  # the guard's path, kernel or not, every so often
            assert letter_counts(text) == python_letter_counts(text)
    assert counted == 0x10000 - 0x800


@settings(max_examples=500, deadline=None)
@given(text=st.text(alphabet="ab .\n7²Ⅷ〇兆々你好，。：カナ한Яé\u4dc0\ufa6e\U00020000\U0001f600",
                    max_size=300))
def test_a_samples_letters_are_the_pure_counts_with_the_kernels_loaded(text: str) -> None:
    from loopbreak._engine.notices import letter_counts, python_letter_counts

    assert letter_counts(text) == python_letter_counts(text)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="ab \x00\u0101\u4e00\U0001f600\ud800", max_size=40),
       size=st.integers(1, 6), cut=st.integers(0, 40))
def test_a_compiled_gram_table_of_any_size_holds_every_gram(text: str, size: int,
                                                            cut: int) -> None:
    # Every size each table keys (GramTable: a key's first three characters in one word,
    # the rest in the other; PackedGramTable: up to four BMP characters in one word, the
    # all-NUL gram flagged, wide from the first astral character on), taken in one piece
    # or two (the second starting with the first's last size - 1 characters, as a gram set
    # carries them).
    kinds = [compiled.GramTable] + ([compiled.PackedGramTable] if size <= 4 else [])
    cut = min(cut, len(text))
    for kind in kinds:
        table = kind(size, 1 << 16)
        table.take(text[:cut])
        table.take(text[max(0, cut - size + 1):])
        grams = {text[i : i + size] for i in range(len(text) - size + 1)}
        assert table.sample(0) == grams and len(table) == len(grams)


def test_a_packed_gram_set_turns_wide_at_its_first_astral_character_keeping_its_grams(
        ) -> None:
    # Past its cap first (sampled at a level above 0), then an emoji: the same grams,
    # level and containment as the pure set, before and after the table turns wide.
    text = "".join(f"line {i}: {i * 7919 % 1000} \u597d\x00\x00\x00\x00 " for i in range(400))
    pure, fast = _gram_pair([text], 300)
    assert fast.level >= 2 and fast._table is not None
    assert isinstance(fast._table, compiled.PackedGramTable) and fast._table._wide is None
    _same_grams(pure, fast)
    before = (GramSet(cap=300), GramSet(cap=300, compiled=True))
    for grams in before:
        grams.feed(text[::-1])
    _same_containments((pure, fast), before)
    for grams in (pure, fast):
        grams.feed("and then \U0001f600 " + text[:2000])
    assert fast._table._wide is not None
    _same_grams(pure, fast)
    _same_containments((pure, fast), before)
    _same_containments(before, (pure, fast))


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="abc \x00\u4e00", max_size=400), cap=st.integers(1, 80),
       pieces=st.integers(1, 8))
def test_a_packed_table_s_cache_of_grams_seen_changes_no_gram(text: str, cap: int,
                                                              pieces: int) -> None:
    # The cache skips a gram met before: one in the table, or one its sample leaves out
    # (then or after a halving since). A table whose cache is emptied before every take
    # (each gram looked up in the table and hashed anew) holds the same grams; the text is
    # taken twice, so the second time every gram is met again, across halvings.
    cached, uncached = compiled.PackedGramTable(3, cap), compiled.PackedGramTable(3, cap)
    step = max(1, len(text) // pieces)
    for start in [*range(0, len(text), step), *range(0, len(text), step)]:
        piece = text[max(0, start - 2) : start + step]
        cached.take(piece)
        if uncached._seen is not None:
            uncached._seen[:] = 0
        uncached.take(piece)
    assert cached._seen is not None or len(text) < 3
    assert (cached.level, len(cached)) == (uncached.level, len(uncached))
    assert cached.sample(cached.level) == uncached.sample(uncached.level)
