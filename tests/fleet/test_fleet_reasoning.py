"""gpt-oss's reasoning in the fleet model: output tokens split by effort, counted as output."""

from __future__ import annotations

import pytest

from orchestrator.fleet.figures import load_figures
from orchestrator.fleet.workload import split_output

STATS = load_figures().workload


def test_at_the_measured_effort_the_split_keeps_the_measured_length() -> None:
    split = split_output(STATS, 1278, STATS.reasoning.effort)

    assert split.output_tokens == 1278
    assert split.reasoning_tokens > 0 and split.answer_tokens > 0


def test_higher_effort_reasons_longer_and_keeps_the_answer() -> None:
    splits = [split_output(STATS, 1000, effort) for effort in ("low", "medium", "high")]

    assert splits[0].reasoning_tokens < splits[1].reasoning_tokens < splits[2].reasoning_tokens
    assert len({s.answer_tokens for s in splits}) == 1
    assert [s.output_tokens for s in splits] == sorted(s.output_tokens for s in splits)


def test_no_effort_means_no_reasoning_channel_and_unknown_effort_is_refused() -> None:
    assert split_output(STATS, 50, None).reasoning_tokens == 0
    with pytest.raises(ValueError, match="extreme"):
        split_output(STATS, 50, "extreme")
