"""Stop ``transformers`` generation where a row loops: :class:`LoopStoppingCriteria`.

``model.generate(..., stopping_criteria=StoppingCriteriaList([LoopStoppingCriteria(tok)]))``
judges every row of the batch while it is generated and stops the rows whose
text trips a rule; the other rows run exactly as they would without it (the
criteria only ever answers "stop" for a tripped row, it never touches logits).

How a row is read, step by step:

- **Where generation started** is inferred on the first call of a ``generate``:
  ``transformers`` calls stopping criteria after appending each new token, so the
  first call sees the prompt plus one generated token (``prompt_length`` is the
  length then, minus one). A later call whose ids do not continue the ones seen
  (another batch, a shorter sequence, a changed last token) starts over, so one
  criteria object can serve several ``generate`` calls.
- **Decoding is incremental** (:class:`IncrementalDecoder`): only a short window of
  recent ids is decoded per step, never the whole sequence, and only the new text
  is fed to the engine. A character whose bytes span tokens decodes to U+FFFD
  until its last token arrives; that tail is held back meanwhile. A byte-level BPE
  vocabulary (GPT-2's byte alphabet: SmolLM2, Llama 3, Qwen), whose decode is the
  UTF-8 text of its ids' bytes joined, is read without a decode call
  (:class:`ByteDecoder`: each id's bytes, looked up, through one incremental UTF-8
  decoder), to the same text.
- **Channels**: a row starts on ``channel`` ("text" by default; "reasoning" for a
  model whose prompt already opened its thinking; "auto" reads that from the
  prompt). Where the tokenizer has ``<think>`` and ``</think>`` as single tokens,
  they switch the row to reasoning and back to text as they are generated, so
  a thinking model's reasoning and answer are each judged by their own rules.
- A row stops on the token whose text trips; :attr:`LoopStoppingCriteria.trips`
  and :attr:`LoopStoppingCriteria.stopped_at` say why and where. Rows that ended
  (end-of-sequence) are no longer fed.

Greedy or sampled decoding (one sequence per row). Beam search reorders rows
between steps, which per-row state cannot follow.

The decoder and the per-stream judge here are shared with the vLLM logits
processor (``loopbreak.integrations.vllm``). Where ``transformers`` is installed,
importing this module imports it (the criteria subclasses its
``StoppingCriteria``); without it the module still imports, and making a
criteria object asks for the extra (``pip install '.[transformers]'`` from a checkout).
"""

from __future__ import annotations

import codecs
import contextlib
import importlib
import random
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from loopbreak._config import Config
from loopbreak._engine import accelerator
from loopbreak._engine.call_guard import CallGuard
from loopbreak._engine.trip import Channel, Trip
from loopbreak._extras import missing

StartChannel = Literal["reasoning", "text", "auto"]
"""Where a stream starts: a channel, or ``auto`` (reasoning when the prompt ends
inside an open ``<think>`` block, text otherwise)."""

THINK_MARKERS = ("<think>", "</think>")
"""The tokens that open and close a thinking block in most open reasoning models
(Qwen3, DeepSeek-R1 and their distills, QwQ, SmolLM3...)."""

CONTEXT_TOKENS = 4
"""Prompt tokens decoded in front of the first generated token, so that its text
is what a decode of the whole sequence gives (a leading space a tokenizer drops at
the start of a decode stays)."""

WINDOW_TOKENS = 8
"""Ids the decoder keeps as context; it trims back to this many once the window
holds twice as many, so one step decodes fewer than ``2 * WINDOW_TOKENS +
HOLD_TOKENS`` ids however long the stream (about 20 µs per token with the engine's
rules on SmolLM2's tokenizer, 2 CPU cores, flat from 10,000 to 90,000 tokens)."""

HOLD_TOKENS = 8
"""Most ids whose text is held back while it ends in U+FFFD (an incomplete
character: at most 4 byte tokens in UTF-8). Past this the bytes are really
invalid, and the replacement characters are emitted as text."""

_MARKER_SCAN = 16  # prompt tokens searched for an open thinking block ("auto")


def make_decode(tokenizer: Any) -> Callable[[list[int]], str]:
    """``tokenizer.decode`` without special tokens and without the clean-up of
    spaces around punctuation (which would make a decode depend on what follows).
    A :class:`ByteLevelDecode` where the tokenizer's vocabulary is byte-level BPE."""
    backend = _backend_decode(tokenizer)
    if backend is not None:
        pieces = byte_level_pieces(tokenizer, backend)
        return backend if pieces is None else ByteLevelDecode(backend, pieces)

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=True,
                                    clean_up_tokenization_spaces=False))

    try:
        decode([])
    except TypeError:  # tokenizers that take no clean-up flag (Mistral's, in vLLM)
        def decode(ids: list[int]) -> str:
            return str(tokenizer.decode(ids, skip_special_tokens=True))
    return decode


def _backend_decode(tokenizer: Any) -> Callable[[list[int]], str] | None:
    """The ``tokenizers`` library's own decode, where ``tokenizer.decode`` is a fast
    tokenizer's that only wraps it (no subclass changes ``decode`` or ``_decode``): the
    same text without the Python layers around it, 1.7 µs against 4.5 for 12 of SmolLM2's
    ids, and a generation step decodes every row once or twice. ``None`` otherwise."""
    # Not imported here: a tokenizer of transformers means transformers is imported.
    transformers = sys.modules.get("transformers")
    fast = getattr(transformers, "PreTrainedTokenizerFast", None)
    base = getattr(sys.modules.get("transformers.tokenization_utils_base"),
                   "PreTrainedTokenizerBase", None)
    if fast is None or base is None or not isinstance(tokenizer, fast):
        return None
    kind = type(tokenizer)
    if kind._decode is not fast._decode or kind.decode is not base.decode:
        return None
    backend_decode = getattr(getattr(tokenizer, "_tokenizer", None), "decode", None)
    if backend_decode is None:
        return None

    def decode(ids: list[int]) -> str:
        return str(backend_decode(ids, skip_special_tokens=True))

    return decode


class ByteLevelDecode:
    """A byte-level BPE tokenizer's decode, with the bytes each id stands for: the
    judges read such a vocabulary with a :class:`ByteDecoder`."""

    __slots__ = ("_decode", "pieces")

    def __init__(self, decode: Callable[[list[int]], str], pieces: Sequence[bytes]) -> None:
        self._decode = decode
        self.pieces = pieces
        """The bytes of each id (none for a special token, skipped as the decode skips it)."""

    def __call__(self, ids: list[int]) -> str:
        return self._decode(ids)


# GPT-2's byte alphabet: a byte-level BPE token's characters, each one byte.
_PRINTABLE_BYTES = (*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1),
                    *range(ord("\xae"), ord("\xff") + 1))
_BYTE_OF_CHAR = {chr(b): b for b in _PRINTABLE_BYTES} | {
    chr(256 + n): b for n, b in enumerate(b for b in range(256) if b not in _PRINTABLE_BYTES)}
_PIECES: weakref.WeakKeyDictionary[Any, tuple[bytes, ...] | None] = weakref.WeakKeyDictionary()
_CHECKED_DECODES = 256  # random id runs decoded both ways before the table is trusted


def byte_level_pieces(tokenizer: Any, decode: Callable[[list[int]], str],
                      ) -> tuple[bytes, ...] | None:
    """The bytes of each id of a fast tokenizer whose decoder is ``tokenizers``' ByteLevel
    (kept per tokenizer), if its ``decode`` is their UTF-8 text: each added token (the
    special ones decode to nothing) and every one of ``_CHECKED_DECODES`` random runs of ids
    (byte tokens among them) decoded both ways must agree, else ``None`` (the window decoder
    then reads it)."""
    try:
        return _PIECES[tokenizer]
    except (KeyError, TypeError):
        pass
    pieces = _read_pieces(tokenizer, decode)
    with contextlib.suppress(TypeError):  # no weak reference taken: read again next time
        _PIECES[tokenizer] = pieces
    return pieces


def _read_pieces(tokenizer: Any, decode: Callable[[list[int]], str]) -> tuple[bytes, ...] | None:
    backend = getattr(tokenizer, "_tokenizer", None)
    try:  # a fast tokenizer's backend: the tokenizers library is installed
        byte_level = importlib.import_module("tokenizers.decoders").ByteLevel
    except (ImportError, AttributeError):
        return None
    if backend is None or type(getattr(backend, "decoder", None)) is not byte_level:
        return None
    try:
        size = int(backend.get_vocab_size(with_added_tokens=True))
        added = backend.get_added_tokens_decoder()
        special = {i for i, token in added.items() if getattr(token, "special", False)}
        tokens = [None if i in special else backend.id_to_token(i) for i in range(size)]
    except Exception:  # an API that is not the one read here: the window decoder
        return None
    table = []
    for token in tokens:
        if not token:
            table.append(b"")
        elif all(char in _BYTE_OF_CHAR for char in token):
            table.append(bytes(_BYTE_OF_CHAR[char] for char in token))
        else:  # an added token written as text: its own UTF-8
            table.append(token.encode("utf-8", "surrogatepass"))
    pieces = tuple(table)
    # The table stands in for the decode only where the two agree: a decoder that strips
    # a leading space, or joins some other way, is caught here.
    rng = random.Random(size)
    runs = [[i] for i in sorted(added) if 0 <= i < size] + [
        [rng.randrange(size) if rng.random() < 0.8 else rng.randrange(min(size, 512))
         for _ in range(rng.randrange(1, 24))] for _ in range(_CHECKED_DECODES)]
    try:
        for ids in runs:
            if decode(ids) != b"".join(pieces[i] for i in ids).decode("utf-8", "replace"):
                return None
    except Exception:
        return None
    return pieces


class Decoder(Protocol):
    """Token ids in, the new text out (:class:`IncrementalDecoder`, :class:`ByteDecoder`)."""

    def push(self, ids: Sequence[int]) -> str: ...

    def flush(self) -> str: ...


class ByteDecoder:
    """A byte-level vocabulary's text, id by id: each id's bytes through one incremental
    UTF-8 decoder, which holds the first bytes of a character until its last arrives (never
    more than three) and gives a byte that cannot be UTF-8 as U+FFFD at once. The text of
    ids that leave a character unfinished is held with it, so that read id by id its pieces
    are the window decoder's (valid text); they join to the decode of all the ids however
    many ids a push brings (the window decoder, unable to tell an unfinished character from
    invalid bytes, gives a U+FFFD where several pushes in a row end mid-character, and holds
    text that ends in a U+FFFD character)."""

    __slots__ = ("_context_open", "_held", "_pieces", "_size", "_utf8")

    def __init__(self, pieces: Sequence[bytes], context: Sequence[int] = ()) -> None:
        self._pieces = pieces
        self._size = len(pieces)
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""
        if context:
            # Only a character the context leaves unfinished carries into the new text.
            self._utf8.decode(b"".join(self._piece(i) for i in context[-CONTEXT_TOKENS:]))
        # The context's text then ends in U+FFFD: where the new text still begins with it
        # (the character never finished), it is the context's, as the window decoder has it.
        self._context_open = bool(self._utf8.getstate()[0])

    def _piece(self, token_id: int) -> bytes:
        # An id past the table (an engine's padded vocabulary) decodes to nothing.
        return self._pieces[token_id] if 0 <= token_id < self._size else b""

    def push(self, ids: Sequence[int]) -> str:
        """Take the next ids; return the text they complete (may be empty)."""
        if not ids:
            return ""
        data = self._piece(ids[0]) if len(ids) == 1 else b"".join(map(self._piece, ids))
        text = self._held + self._utf8.decode(data)
        if self._utf8.getstate()[0]:
            self._held = text
            return ""
        return self._give(text)

    def flush(self) -> str:
        """Whatever is held back, an unfinished character as U+FFFD (at the end of a
        stream or channel)."""
        return self._give(self._held + self._utf8.decode(b"", True))

    def _give(self, text: str) -> str:
        self._held = ""
        if self._context_open:
            self._context_open = False
            if text.startswith("\ufffd"):
                return text[1:]
        return text


def decoder_for(decode: Callable[[list[int]], str], context: Sequence[int] = ()) -> Decoder:
    """The decoder a judge reads ids with: by bytes where ``decode`` has them."""
    if isinstance(decode, ByteLevelDecode):
        return ByteDecoder(decode.pieces, context)
    return IncrementalDecoder(decode, context)


def marker_ids(tokenizer: Any,
               markers: tuple[str, str] | None = THINK_MARKERS) -> tuple[int | None, int | None]:
    """The ids of the thinking markers where each is one token of ``tokenizer``, else ``None``."""
    if markers is None:
        return None, None
    found: list[int | None] = []
    for marker in markers:
        token_id = None
        try:
            token_id = tokenizer.convert_tokens_to_ids(marker)
            ok = (isinstance(token_id, int) and token_id != tokenizer.unk_token_id
                  and tokenizer.convert_ids_to_tokens(token_id) == marker)
        except (KeyError, TypeError, ValueError):
            ok = False
        found.append(token_id if ok else None)
    return found[0], found[1]


def start_channel(channel: StartChannel, prompt_tail: Sequence[int],
                  markers: tuple[int | None, int | None]) -> Channel:
    """The channel a stream starts on; ``auto`` looks for an open thinking block
    at the end of the prompt."""
    if channel != "auto":
        return channel
    opening, closing = markers
    for token_id in reversed(prompt_tail[-_MARKER_SCAN:]):
        if opening is not None and token_id == opening:
            return "reasoning"
        if closing is not None and token_id == closing:
            return "text"
    return "text"


class IncrementalDecoder:
    """Token ids in, the new stable text out, at a cost that does not grow with the stream.

    It decodes a short window of recent ids (the last context ids plus the new
    ones) and emits what the window decodes to beyond the text of the ids it had
    already emitted. A window whose text ends in U+FFFD (a character still missing
    bytes) is held until the token that completes it arrives. Concatenated, the
    pieces are the decode of all the ids (``tests`` check this on real tokenizers).
    """

    __slots__ = ("_decode", "_read", "_text", "_window")

    def __init__(self, decode: Callable[[list[int]], str], context: Sequence[int] = ()) -> None:
        self._decode = decode
        self._window: list[int] = list(context[-CONTEXT_TOKENS:]) if context else []
        self._text = decode(self._window) if self._window else ""
        self._read = len(self._window)

    def push(self, ids: Sequence[int]) -> str:
        """Take the next ids; return the text they complete (may be empty)."""
        if not ids:
            return ""
        self._window.extend(ids)
        text = self._decode(self._window)
        if text.endswith("\ufffd") and len(self._window) - self._read < HOLD_TOKENS:
            return ""
        return self._emit(text)

    def flush(self) -> str:
        """Whatever is held back, as it decodes now (at the end of a stream or channel)."""
        if self._read == len(self._window):
            return ""
        return self._emit(self._decode(self._window))

    def _emit(self, text: str) -> str:
        if text.startswith(self._text):
            new = text[len(self._text):]
        else:  # a decoder that is not prefix-stable here: emit from where they part
            common = 0
            for a, b in zip(text, self._text):
                if a != b:
                    break
                common += 1
            new = text[common:]
        if len(self._window) >= 2 * WINDOW_TOKENS:
            self._window = self._window[-WINDOW_TOKENS:]
            self._text = self._decode(self._window)
        else:
            self._text = text
        self._read = len(self._window)
        return new


class TokenJudge:
    """One generated stream judged by the engine: ids to text to a :class:`CallGuard`.

    ``feed(ids)`` takes the ids generated since the last call and answers with
    the trip the first time a rule trips. ``tokens`` counts the ids taken;
    ``trip_token`` is that count at the token whose text tripped (so the stream
    cut there keeps ``trip_token`` generated tokens). A thinking-marker id switches
    the channel (opening: reasoning, closing: text) and is not fed as text.
    """

    __slots__ = ("_closing", "_decode", "_decoder", "_opening", "channel", "guard", "tokens",
                 "trip", "trip_token")

    def __init__(self, decode: Callable[[list[int]], str], config: Config | None = None, *,
                 channel: Channel = "text", context: Sequence[int] = (),
                 markers: tuple[int | None, int | None] = (None, None)) -> None:
        self.guard = CallGuard(config)
        self.channel: Channel = channel
        self._decode = decode
        self._decoder = decoder_for(decode, context)
        self._opening, self._closing = markers
        self.tokens = 0
        self.trip: Trip | None = None
        self.trip_token: int | None = None

    def feed(self, ids: Sequence[int]) -> Trip | None:
        """Judge the next generated ids; the trip, once, on the call that trips."""
        if self.trip is not None:
            return None
        for token_id in ids:
            self.tokens += 1
            if token_id == self._opening or token_id == self._closing:
                trip = self._judge(self._decoder.flush())
                self.channel = "reasoning" if token_id == self._opening else "text"
                self._decoder = decoder_for(self._decode, (token_id,))
            else:
                trip = self._judge(self._decoder.push((token_id,)))
            if trip is not None:
                self.trip, self.trip_token = trip, self.tokens
                return trip
        return None

    def finish(self) -> Trip | None:
        """The stream ended: judge the text still held back."""
        if self.trip is not None:
            return None
        # What the decoder held back, then what waits in the guard's last batch.
        trip = self._judge(self._decoder.flush()) or self.guard.flush()
        if trip is not None:
            self.trip, self.trip_token = trip, self.tokens
        return trip

    def _judge(self, delta: str) -> Trip | None:
        return self.guard.feed(self.channel, delta) if delta else None


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise missing(__name__, name, "transformers", exc) from exc


def _stopping_criteria_base() -> type:
    """``transformers.StoppingCriteria`` where ``transformers`` is installed."""
    try:
        return importlib.import_module("transformers").StoppingCriteria  # type: ignore[no-any-return]
    except (ImportError, AttributeError):
        return object


if TYPE_CHECKING:
    _Base = object
else:
    _Base = _stopping_criteria_base()


class LoopStoppingCriteria(_Base):
    """A ``transformers`` ``StoppingCriteria`` that stops each batch row whose text loops.

    ``tokenizer`` decodes the generated ids; ``config`` is the engine's (defaults
    when ``None``); ``channel`` is where each row starts (see :data:`StartChannel`);
    ``eos_token_id`` (default: the tokenizer's) ends a row's judging when it is
    generated; ``think_markers`` name the tokens that switch between reasoning and
    text (``None``: no switching).

    After (or during) ``generate``: ``trips[row]`` is the row's trip or ``None``,
    ``stopped_at[row]`` the number of generated tokens the row kept (the tripping
    one included) or ``None``, ``prompt_length`` the inferred prompt length.
    """

    def __init__(self, tokenizer: Any, config: Config | None = None, *,
                 channel: StartChannel = "text",
                 eos_token_id: int | Sequence[int] | None = None,
                 think_markers: tuple[str, str] | None = THINK_MARKERS) -> None:
        if channel not in ("reasoning", "text", "auto"):
            raise ValueError(
                f"channel must be one of 'reasoning', 'text', 'auto' (not {channel!r})")
        self._torch = _import("torch")
        _import("transformers")
        self.tokenizer = tokenizer
        self.config = config or Config()
        # numba compiles or loads the kernels here, not inside the first decode step.
        accelerator.wanted(self.config.judging.compiled)
        self.channel: StartChannel = channel
        if eos_token_id is None:
            eos_token_id = getattr(tokenizer, "eos_token_id", None)
        if eos_token_id is None:
            eos_token_id = ()
        self._eos = frozenset((eos_token_id,) if isinstance(eos_token_id, int) else eos_token_id)
        self._decode = make_decode(tokenizer)
        self._markers = marker_ids(tokenizer, think_markers)
        self.prompt_length: int | None = None
        self.judges: list[TokenJudge] = []
        self._ended: list[bool] = []
        self._last: list[int] = []
        self._length = 0

    @property
    def trips(self) -> list[Trip | None]:
        """Each row's trip, ``None`` where it ran clean."""
        return [judge.trip for judge in self.judges]

    @property
    def stopped_at(self) -> list[int | None]:
        """Generated tokens each stopped row kept (the tripping token included)."""
        return [judge.trip_token for judge in self.judges]

    def reset(self) -> None:
        """Forget every row (the next call starts a new generation)."""
        self.prompt_length = None
        self.judges, self._ended, self._last, self._length = [], [], [], 0

    def __call__(self, input_ids: Any, scores: Any = None, **kwargs: Any) -> Any:
        """One generation step: ``True`` for each row that tripped (a ``(batch,)`` bool tensor)."""
        batch, length = (int(n) for n in input_ids.shape)
        new_rows = self._new_ids(input_ids, batch, length)
        for row, ids in enumerate(new_rows):
            if self._ended[row] or self.judges[row].trip is not None:
                continue
            for n, token_id in enumerate(ids):
                if token_id in self._eos:
                    self.judges[row].feed(ids[:n])
                    self.judges[row].finish()
                    self._ended[row] = True
                    break
            else:
                self.judges[row].feed(ids)
        self._last = [ids[-1] for ids in new_rows]
        self._length = length
        done = [judge.trip is not None for judge in self.judges]
        return self._torch.tensor(done, dtype=self._torch.bool, device=input_ids.device)

    def _new_ids(self, input_ids: Any, batch: int, length: int) -> list[list[int]]:
        """The ids each row gained since the last call, starting a generation when
        these ids do not continue the ones seen."""
        if self.judges and batch == len(self.judges) and length > self._length:
            tail: list[list[int]] = input_ids[:, self._length - 1:].tolist()
            if all(row[0] == last for row, last in zip(tail, self._last)):
                return [row[1:] for row in tail]
        self.reset()
        self.prompt_length = prompt = length - 1
        tail = input_ids[:, max(0, prompt - _MARKER_SCAN):].tolist()
        cut = len(tail[0]) - 1 if tail else 0
        for row in tail:
            context = row[:cut]
            self.judges.append(TokenJudge(
                self._decode, self.config, context=context, markers=self._markers,
                channel=start_channel(self.channel, context, self._markers)))
        self._ended = [False] * batch
        return [row[cut:] for row in tail]
