"""``loopbreak analyze --html``: one self-contained page, every string escaped, the same
bytes for the same reports, bounded for long sessions, and it opens in headless Chromium
without a console error."""

from __future__ import annotations

import base64
import hashlib
import html
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopbreak._samples import (
    clean_code,
    clean_reasoning,
    phrase_pool,
    star_flood,
    verbatim_loop,
)
from loopbreak.offline.analyze import CallReport, Cut, SessionReport, analyze_events, summary
from loopbreak.offline.report import (
    EXCERPTS_PER_SESSION,
    FOLD_FROM,
    render_html,
)
from loopbreak.offline.transcripts._model import (
    Delta,
    DeltaChannel,
    Event,
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolCallRecord,
    ToolResult,
    TurnEnd,
    TurnStart,
)

INJECTION = "<script>alert(1)</script>"
NASTY = (f"Let me try {INJECTION} & \"quotes\" 'too' \x00\x07\x1b[31m \u202eevil\u202c "
         "\ud800 \u0085 é 好 😀\n")


def _deltas(channel: DeltaChannel, text: str, size: int = 40) -> tuple[Delta, ...]:
    return tuple(Delta(channel, text[i : i + size]) for i in range(0, len(text), size))


def _agent_session() -> Iterator[Event]:
    """Two turns: a clean call, three real-looking loops, a failing tool call sent again and
    again, and a run of ordinary tool-calling steps."""
    yield SessionStart("agent-run-7f3e", "dsh")
    yield TurnStart(1)
    yield RecordedCall(1, 1, _deltas("reasoning", clean_reasoning().text)
                       + _deltas("text", clean_code().text[:800]), finish="stop")
    yield RecordedCall(1, 2, _deltas("reasoning", verbatim_loop().text), finish="length")
    yield RecordedCall(1, 3, _deltas("reasoning", phrase_pool().text), finish="length")
    yield RecordedCall(1, 4, _deltas("reasoning", star_flood().text), finish="length")
    yield TurnEnd(1)
    yield TurnStart(2)
    args = '{"path": "src/upload.py"}'
    yield RecordedCall(2, 1, _deltas("reasoning", "Read the upload client first.")
                       + (Delta("tool", args, key="t1", name="read_file"),),
                       finish="tool-calls", tool_calls=(ToolCallRecord("t1", "read_file", args),))
    for _ in range(4):
        yield ToolResult(2, "t1", "read_file", args, "Error: ENOENT: no such file", failed=True)
    for step in range(2, 2 + FOLD_FROM + 2):
        yield RecordedCall(2, step, _deltas("text", clean_code().text[: 150 * step])
                           + _deltas("tool", '{"cmd": "pytest -q"}'), finish="tool-calls")
    yield RecordedCall(2, 20, _deltas("reasoning", "x" * 300_000), kind="attempt")
    yield TurnEnd(2)
    yield ReadReport("dsh", rows=42)


def _nasty_session() -> Iterator[Event]:
    """Model output and log fields that try to break out of the page."""
    yield SessionStart(f"id-{INJECTION}", "openai-jsonl")
    yield TurnStart(1)
    yield RecordedCall(1, 1, _deltas("reasoning", NASTY * 120), finish="stop")
    name = f'tool"{INJECTION}'
    for _ in range(3):
        yield ToolResult(1, "k", name, "{}", f"failed: {INJECTION}", failed=True)
    report = ReadReport("openai", rows=9, bad_rows=2, first_error=f"line 3: {INJECTION}",
                        torn=True, lost_bytes=17)
    report.unknown_rows["<ping>"] += 3
    report.warn(f"odd row {INJECTION}")
    yield report


def _clean_session() -> Iterator[Event]:
    yield SessionStart("clean-1", "text")
    yield TurnStart(1)
    yield RecordedCall(1, 1, _deltas("reasoning", clean_reasoning().text), finish="stop")
    yield RecordedCall(1, 2, _deltas("text", clean_code().text), finish="stop")
    yield TurnEnd(1)


def _reports() -> list[SessionReport]:
    return [*analyze_events(_agent_session(), "logs/dsh/agent-run.jsonl"),
            *analyze_events(_nasty_session(), f"logs/{INJECTION}.jsonl"),
            *analyze_events(_clean_session(), "notes/clean.txt")]


class _Page(HTMLParser):
    """What a browser would build: elements opened and closed in order, the text shown,
    and every attribute."""

    VOID: ClassVar[frozenset[str]] = frozenset(
        {"meta", "br", "hr", "img", "input", "link", "wbr", "col", "source"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs.extend(attrs)
        self.ids.extend(v for k, v in attrs if k == "id" and v is not None)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack and self.stack[-1] == "script":
            self.scripts.append(data)
        elif not self.stack or self.stack[-1] != "style":
            self.text.append(data)


def _parse(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    assert parser.errors == []
    assert parser.stack == []
    return parser


def _cards(page: str) -> list[str]:
    return re.findall(r'<article class="cutcard".*?</article>', page, re.S)


def _rule(card: str) -> str:
    found = re.search(r'<span class="chip">([^<]+)</span>', card)
    assert found is not None
    return found.group(1)


def _marked(card: str) -> list[str]:
    body = card.split("<pre>", 1)[1].split('<span class="cutpt"', 1)[0]
    return [html.unescape(m) for m in re.findall(r'<mark class="h[01]">(.*?)</mark>', body, re.S)]


def test_multi_session_report_shows_totals_timelines_and_cuts() -> None:
    reports = _reports()
    page = render_html(reports, title="Replay of last week")
    parsed = _parse(page)
    text = "".join(parsed.text)
    total = summary(reports)

    assert "<title>Replay of last week</title>" in page
    assert f"{total['saved_chars']:,}" in text and f"{total['saved_tokens']:,}" in text
    for rule in total["rules"]:
        assert f'<span class="chip">{rule}</span>' in page
    assert "Linear scale" in text and "No bar is drawn narrower than 3 pixels" in text
    assert "How to read it" in text
    # One section per session, each with its header, timeline and cuts.
    assert [i for i in parsed.ids if re.fullmatch(r"s\d+", i)] == ["s1", "s2", "s3"]
    assert "logs/dsh/agent-run.jsonl" in text and "agent-run-7f3e" in text
    first = page[page.index('id="s1"') : page.index('id="s2"')]
    calls = reports[0].calls
    # Every call has its row; the eight uneventful steps of turn 2 sit in one fold.
    assert first.count('<li class="call') == len(calls)
    assert first.count('<li class="fold">') == 1 and "8 calls without a cut" in first
    assert len(_cards(first)) == len(reports[0].cut_calls)
    # The 300,000-character attempt sets the scale; the 29-character call still gets a bar.
    assert "the full width is 300,000 characters" in first
    assert first.count('class="bar') == len(calls) + len(reports[0].cut_calls)
    assert "tool steer" in first and "tool deny" in first and "stall: steer" in first
    assert ">attempt</span>" in first
    # Read problems of the second source are said at the top and in its session.
    assert "2 bad rows" in text and "torn frame stream" in text and "17 bytes lost" in text
    # Every cut links to its card and back, and every link lands somewhere.
    links = {v[1:] for k, v in parsed.attrs if k == "href" and v and v.startswith("#")}
    assert links <= set(parsed.ids)
    for ident in parsed.ids:
        if "-x" in ident:
            assert f'href="#{ident}"' in page
            assert f'href="#{ident.replace("-x", "-c")}"' in page


def test_page_is_self_contained() -> None:
    page = render_html(_reports())
    parsed = _parse(page)
    assert parsed.tags.count("script") == 1
    assert not {"link", "img", "iframe", "object", "embed"} & set(parsed.tags)
    assert not re.search(r"https?://|@import|url\(|src=", page)
    # The policy lets exactly the page's own script run.
    csp = next(v for k, v in parsed.attrs if k == "content" and v and "script-src" in v)
    digest = base64.b64encode(hashlib.sha256(parsed.scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp
    assert "default-src 'none'" in csp


def test_model_output_is_shown_never_run() -> None:
    page = render_html(_reports(), title=f"t {INJECTION}")
    parsed = _parse(page)
    text = "".join(parsed.text)
    assert INJECTION not in page
    assert parsed.tags.count("script") == 1
    assert f"t {INJECTION}" in text  # the title, shown as text
    assert f"Let me try {INJECTION} & \"quotes\" 'too'" in text
    assert f"id-{INJECTION}" in text and f"logs/{INJECTION}.jsonl" in text
    assert f'tool"{INJECTION}' in text and f"line 3: {INJECTION}" in text
    assert f"odd row {INJECTION}" in text and "&lt;ping&gt;" in page
    # Controls, direction overrides and lone surrogates appear as visible marks, not as
    # themselves; the page encodes as UTF-8.
    for raw in ("\x00", "\x07", "\x1b", "\x85", "\u202e", "\u202c", "\ud800"):
        assert raw not in page
    assert "\\x1b" in text and "U+202E" in text and "\ufffd" in text
    assert "好 😀" in text
    page.encode("utf-8")
    for name, value in parsed.attrs:
        assert value is None or INJECTION not in value or name == "title"


@settings(max_examples=60, deadline=None)
@given(before=st.text(max_size=300), after=st.text(max_size=80), name=st.text(max_size=40),
       period=st.integers(min_value=-3, max_value=400),
       rule=st.sampled_from(["cycle", "lines", "exact-repeat", "symbol-flood",
                             "identical-chunks", "max-reasoning-chars", "<b>odd</b>"]))
def test_any_text_stays_text(before: str, after: str, name: str, period: int,
                             rule: str) -> None:
    # Any code point at all, lone surrogates included, in every field the page shows.
    report = SessionReport(name, name, name)
    cut = Cut(rule, "reasoning", len(before), len(before), len(before),
              {"period": period, "streak": 3, "unit": name, "chunk": name[:5], name: name},
              before, after)
    report.calls.append(CallReport(1, 1, name, name, len(before) + len(after), 0, 0, [name],
                                   cut, len(after), 1))
    page = render_html([report], title=name)
    page.encode("utf-8")
    parsed = _parse(page)
    assert parsed.tags.count("script") == 1
    assert "b" not in parsed.tags
    shown = "".join(parsed.text)
    # What follows the cut is shown up to its fifth line break; every printable stretch of
    # both sides appears as it is, between the marks that stand for the rest.
    after = "\n".join(after.split("\n")[:5])
    for piece in (before, after):
        marked = "".join(ch if ch.isprintable() or ch == "\n" else "\0" for ch in piece)
        for part in marked.split("\0"):
            assert part in shown


def test_session_without_cuts() -> None:
    reports = list(analyze_events(_clean_session(), "notes/clean.txt"))
    page = render_html(reports)
    text = "".join(_parse(page).text)
    assert "No rule would have cut a call in this session." in text
    assert "No rule would have cut any of the 2 calls" in text
    assert _cards(page) == []
    assert 'id="card-tools"' not in page


def test_no_sessions() -> None:
    text = "".join(_parse(render_html([])).text)
    assert "No sessions were read" in text


def test_same_reports_same_bytes() -> None:
    assert render_html(_reports()) == render_html(_reports())


def test_repeating_part_is_highlighted() -> None:
    reports = list(analyze_events(_agent_session(), "a.jsonl"))
    cards = {_rule(c): c for c in _cards(render_html(reports))}
    by_rule = {c.cut.rule: c.cut for c in reports[0].calls if c.cut is not None}

    # cycle: every whole repetition before the cut is the same unit, the period long, and
    # the marks cover what the rule saw from the first line start in it on. Copies are split
    # where a line starts, so the rule's copies (rotated) can show as a whole copy less and
    # a part of one.
    period = by_rule["cycle"].evidence["period"]
    marked = _marked(cards["cycle"])
    units = [m for m in marked if len(m) == period]
    assert len(units) >= 2 and len(set(units)) == 1
    assert all(units[0].startswith(m) or units[0].endswith(m) for m in marked)
    assert sum(len(m) for m in marked) > by_rule["cycle"].evidence["span"] - period
    assert units[0].startswith("Let me write the test now.")  # split where a line starts

    # lines: what is highlighted are lines that repeat.
    lines = _marked(cards["lines"])
    assert lines and all(lines.count(line) >= 2 for line in lines)

    # blocks: the streak of 128-character blocks that ended at the cut.
    flood = by_rule["symbol-flood"]
    marked = _marked(cards["symbol-flood"])
    assert [len(m) for m in marked] == [128] * flood.evidence["streak"]
    assert "".join(marked) == flood.excerpt_before[-128 * flood.evidence["streak"] :]

    # The cut point sits exactly between excerpt_before and excerpt_after.
    cut = by_rule["cycle"]
    pre = cards["cycle"].split("<pre>", 1)[1]
    shown_before = html.unescape(re.sub(r"<[^>]+>", "", pre.split('<span class="cutpt"')[0]))
    assert shown_before.endswith(cut.excerpt_before[-200:])


def test_a_counted_loop_is_highlighted_by_its_unit_numbers_aside() -> None:
    from loopbreak._engine.detectors.counter_cycle import read_counters
    from loopbreak.offline.corpus import smollm2_lists

    planets = next(s for s in smollm2_lists() if s.id == "smollm2-planets").text

    def session() -> Iterator[Event]:
        yield SessionStart("smollm2", "openai-jsonl")
        yield TurnStart(1)
        yield RecordedCall(1, 1, _deltas("text", planets), finish="length")
        yield TurnEnd(1)

    reports = list(analyze_events(session(), "s.jsonl"))
    (cut,) = [c.cut for c in reports[0].calls if c.cut is not None]
    assert cut.rule == "counter-cycle"
    (card,) = _cards(render_html(reports))
    units = [m for m in _marked(card) if len(read_counters(m)) == cut.evidence["period"]]
    # Every marked repetition is the same line once its number reads as 0, and the numbers
    # really differ: what a reader sees is the list ticking over one item.
    assert len(units) >= 4 and len({read_counters(u) for u in units}) == 1
    assert len(set(units)) == len(units) and all("Pluto" in u for u in units)
    assert "its numbers aside" in html.unescape(card)


def _synthetic(calls: int, cut_every: int | None) -> SessionReport:
    report = SessionReport("big.jsonl", "big", "dsh")
    for j in range(calls):
        cut = None
        saved = 0
        if cut_every and j % cut_every == 0:
            cut = Cut("cycle", "reasoning", 1000, 990, 1000, {"period": 7},
                      "abcdefg" * 200, "abcdefg" * 50)
            saved = 19_000
        report.calls.append(CallReport(turn=1 + j // 50, step=1 + j % 50, kind="message",
                                       finish="stop", reasoning_chars=20_000 if cut else 900,
                                       text_chars=100, tool_chars=0, tool_calls=[], cut=cut,
                                       saved_chars=saved, saved_tokens=saved // 4))
    return report


def test_long_sessions_stay_bounded() -> None:
    report = _synthetic(2_000, 10)
    page = render_html([report])
    parsed = _parse(page)
    assert len(_cards(page)) == EXCERPTS_PER_SESSION
    assert "more cut calls" in page
    links = {v[1:] for k, v in parsed.attrs if k == "href" and v and v.startswith("#")}
    assert links <= set(parsed.ids)
    assert len(links) == 2 * EXCERPTS_PER_SESSION
    # Uneventful runs are folded; the page grows by a row per call, not by call contents.
    assert '<li class="fold">' in page
    assert len(page) < 2_000 * 900 + EXCERPTS_PER_SESSION * 12_000
    quiet = render_html([_synthetic(3_000, None)])
    assert "Turns 1\u201360: 3,000 calls without a cut" in quiet
    assert "more calls" in quiet


# --- headless Chromium ------------------------------------------------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


def _chromium() -> str:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("the `chromium` binary is not installed (Debian: apt-get install -y "
                    "chromium); the HTML report is not opened in a browser")
    return binary


def _run_chromium(binary: str, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp)}
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}", *args],
        capture_output=True, text=True, timeout=60, env=env, check=False)


def _png_rows(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """Width, height, bytes per pixel and the filtered rows of an 8-bit PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, []
    width = height = bpp = 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) == crc, kind
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0
            bpp = {0: 1, 2: 3, 4: 2, 6: 4}[colour]
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    raw = zlib.decompress(b"".join(idat))
    stride = 1 + width * bpp
    assert len(raw) == stride * height
    return width, height, bpp, [raw[i * stride : (i + 1) * stride] for i in range(height)]


def _varied_rows(rows: list[bytes], width: int, bpp: int) -> int:
    """Rows that no single-colour image could produce: in such an image every filtered row
    (None, Sub, Up, Average, Paeth alike) repeats one pixel's bytes after its first pixel."""
    varied = 0
    for row in rows:
        rest = row[1 + bpp :]
        if rest != rest[:bpp] * (width - 1):
            varied += 1
    return varied


def test_opens_in_headless_chromium(tmp_path: Path) -> None:
    binary = _chromium()
    page = tmp_path / "report.html"
    page.write_text(render_html(_reports()), encoding="utf-8")
    url = page.as_uri()
    shot = tmp_path / "report.png"

    run = _run_chromium(binary, tmp_path, "--enable-logging=stderr", "--v=0",
                        f"--screenshot={shot}", "--window-size=1280,2000", url)
    assert run.returncode == 0, run.stderr[-2000:]
    # Chromium logs every console message and uncaught exception as INFO:CONSOLE.
    console = [line for line in run.stderr.splitlines()
               if ":CONSOLE" in line or "Uncaught" in line]
    assert console == []

    width, height, bpp, rows = _png_rows(shot.read_bytes())
    assert (width, height) == (1280, 2000)
    assert _varied_rows(rows, width, bpp) > height // 10

    dom = _run_chromium(binary, tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # The page's script ran to its end, and the injected one is text, not an element.
    assert 'data-ready="1"' in dom.stdout
    assert dom.stdout.count("<script") == 1
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom.stdout
    assert "agent-run-7f3e" in dom.stdout

    keep = os.environ.get("LOOPBREAK_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


def test_a_char_flood_cut_highlights_the_filled_blocks() -> None:
    from loopbreak import CharFloodConfig, CharFloodDetector
    from loopbreak.offline.analyze import Cut
    from loopbreak.offline.report.excerpts import _marks

    text = "Here is the answer.\n" + ("る" * 37 + "<unk|LLM-jp>") * 20
    detector = CharFloodDetector(channel="text")
    trip = next(t for i in range(0, len(text), 32) if (t := detector.feed(text[i : i + 32])))
    cut = Cut(trip.rule, trip.channel, trip.offset, trip.at, trip.at, dict(trip.evidence),
              text[: trip.at], text[trip.at :])
    marks = _marks(cut, text, trip.at)
    size, blocks = CharFloodConfig().block_chars, trip.evidence["blocks"]
    assert [(a, b) for a, b, _ in marks.ranges] == [
        (trip.at - size * (k + 1), trip.at - size * k) for k in reversed(range(blocks))]
    assert "る" in marks.caption and str(size) in marks.caption
