"""Messages across judge process boundaries decode strictly (the runner's replies are untrusted)."""

import dataclasses

import pytest

from cuda_gym.judge.protocol import (
    CallReply,
    CandidateResult,
    ProtocolError,
    RunnerReady,
    TimingStats,
    decode,
    encode,
)


def reply(**fields):
    base = {
        "call_id": 3,
        "error": None,
        "violations": [],
        "values": [None, 1.5],
        "own_calls": 1,
        "profile_rows": [],
    }
    return {**base, **fields}


def test_a_well_formed_reply_decodes():
    got = decode(CallReply, reply())
    assert got == CallReply(3, None, [], [None, 1.5], 1, [])
    assert got.event_ms is None  # only a traced call's reply carries the runner's event time
    assert decode(CallReply, reply(event_ms=0.93)).event_ms == 0.93
    assert decode(CallReply, reply(marks=[1.0, 1.5, 2.0, 2.5])).marks == [1.0, 1.5, 2.0, 2.5]


@pytest.mark.parametrize(
    "bad",
    [
        {"call_id": "3"},
        {"own_calls": True},
        {"violations": "torch_fallback: x"},
        {"values": [object.__name__, {}]},
        {"extra": 1},
        {"event_ms": "0.93"},
        {"marks": ["1.0"]},
    ],
)
def test_a_reply_with_other_types_or_fields_is_refused(bad):
    with pytest.raises(ProtocolError):
        decode(CallReply, reply(**bad))


def test_a_missing_field_is_refused():
    data = reply()
    del data["own_calls"]
    with pytest.raises(ProtocolError, match="own_calls"):
        decode(CallReply, data)


def test_json_text_and_nested_dataclasses_round_trip():
    timing = TimingStats(1.0, 1.1, 0.9, 1.5, 0.1, 1.2, 0.2, 0.0, 0.0, False, 20, 5, 2)
    result = CandidateResult(timing=timing, violations=["input_mutated: x"])
    assert decode(CandidateResult, encode(result)) == result
    assert decode(RunnerReady, '{"error": null, "build_failed": false, "weights_not_copied": []}')


def test_integers_are_accepted_where_floats_are_declared():
    fields = {f.name: 1 for f in dataclasses.fields(TimingStats)}
    fields["side_work"] = fields["rechecked_by_seed"] = False
    fields["runner_trace_ms"] = {"to_runner": 1}
    got = decode(TimingStats, fields)
    assert got.median_ms == 1.0 and got.runner_trace_ms == {"to_runner": 1.0}
