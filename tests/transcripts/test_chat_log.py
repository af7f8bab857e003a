"""OpenAI- and Anthropic-style logs: requests with responses, recorded chunks, SSE captures."""

from __future__ import annotations

import json
from pathlib import Path

import loopbreak
from loopbreak._samples import verbatim_loop
from loopbreak.offline.analyze import analyze_events
from loopbreak.offline.transcripts import (
    ReadReport,
    RecordedCall,
    SessionStart,
    ToolResult,
    TurnStart,
    read_path,
    sniff,
)


def _chunk(ident: str, delta: dict, finish: str | None = None) -> dict:  # type: ignore[type-arg]
    return {"id": ident, "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _write(tmp_path: Path, lines: list[object], name: str = "log.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_requests_with_responses_give_turns_calls_and_tool_results(tmp_path: Path) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "read", "arguments": '{"path": "a.py"}'}}
    first = {"messages": [{"role": "user", "content": "fix a.py"}]}
    second = {"messages": first["messages"] + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Error: no such file: a.py"}]}
    third = {"messages": second["messages"] + [
        {"role": "assistant", "content": "It does not exist."},
        {"role": "user", "content": "create it"}]}
    response = {"object": "chat.completion", "choices": [{"message": {
        "role": "assistant", "reasoning_content": "Let me read it.", "content": None,
        "tool_calls": [call]}, "finish_reason": "tool_calls"}],
        "usage": {"completion_tokens": 9}}
    answer = {"object": "chat.completion", "choices": [{"message": {
        "role": "assistant", "content": "It does not exist."}, "finish_reason": "stop"}]}
    path = _write(tmp_path, [{"request": first, "response": response},
                             {"request": second, "response": answer},
                             {"request": third, "response": answer}])
    assert sniff(path) == "chat-log"
    events = list(read_path(path))
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["SessionStart", "TurnStart", "RecordedCall", "ToolResult", "RecordedCall",
                     "TurnEnd", "TurnStart", "RecordedCall", "TurnEnd", "ReadReport"]
    calls = [e for e in events if isinstance(e, RecordedCall)]
    assert [(c.turn, c.step) for c in calls] == [(1, 1), (1, 2), (2, 1)]
    assert calls[0].joined("reasoning") == "Let me read it."
    assert calls[0].tool_calls[0].name == "read" and calls[0].finish == "tool_calls"
    result = next(e for e in events if isinstance(e, ToolResult))
    assert (result.name, result.arguments, result.failed) == ("read", '{"path": "a.py"}', True)


def test_recorded_chunks_group_by_response_id(tmp_path: Path) -> None:
    loop = verbatim_loop().text[:3000]
    pieces = [loop[i : i + 7] for i in range(0, len(loop), 7)]
    lines: list[object] = [_chunk("a", {"role": "assistant"})]
    lines += [_chunk("a", {"reasoning_content": p}) for p in pieces]
    lines += [_chunk("a", {"content": "ok"}, "stop")]
    lines += [_chunk("b", {"reasoning": "second call"}),
              _chunk("b", {"tool_calls": [{"index": 0, "id": "t", "function": {
                  "name": "bash", "arguments": "{\"cmd\":"}}]}),
              _chunk("b", {"tool_calls": [{"index": 0, "function": {"arguments": "\"ls\"}"}}]},
                     "tool_calls")]
    events = list(read_path(_write(tmp_path, lines)))
    calls = [e for e in events if isinstance(e, RecordedCall)]
    assert len(calls) == 2
    assert [d.text for d in calls[0].deltas if d.channel == "reasoning"] == pieces
    assert calls[1].tool_calls[0].arguments == '{"cmd":"ls"}'
    # The analyzer cuts the looping call where scan cuts the same pieces.
    report = next(analyze_events(events, "log"))
    trip = loopbreak.scan(pieces)
    assert trip is not None and report.calls[0].cut is not None
    assert (report.calls[0].cut.rule, report.calls[0].cut.offset) == (trip.rule, trip.offset)
    assert report.calls[1].cut is None


def test_anthropic_stream_events_and_sse_capture(tmp_path: Path) -> None:
    events = [
        {"type": "message_start", "message": {"type": "message", "usage": {"input_tokens": 5}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking",
                                                                      "thinking": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "思考一下。"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "tu", "name": "grep", "input": {}}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": "{\"q\": \"x\"}"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
         "usage": {"output_tokens": 7}},
        {"type": "message_stop"},
    ]
    sse = tmp_path / "capture.sse"
    sse.write_text("".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events),
                   encoding="utf-8")
    out = list(read_path(sse))
    call = next(e for e in out if isinstance(e, RecordedCall))
    assert call.joined("reasoning") == "思考一下。" and call.finish == "tool_use"
    assert call.tool_calls[0].name == "grep" and call.tool_calls[0].arguments == '{"q": "x"}'
    assert call.usage == {"input_tokens": 5, "output_tokens": 7}


def test_bad_lines_are_counted_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"object": "chat.completion.chunk", "id": "x", "choices": "nope"}\n'
                     b"{oops\n\xff\xfe\n[1]\n{\"type\": \"mystery\"}\n")
    events = list(read_path(path))
    assert isinstance(events[0], SessionStart) and isinstance(events[-1], ReadReport)
    report = events[-1]
    assert report.bad_rows == 3 and report.unknown_rows == {"mystery": 1}
    assert not any(isinstance(e, TurnStart) for e in events)
