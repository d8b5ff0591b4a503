"""Reading engine `/metrics` pages into a ReplicaLoad."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.bench.vllm_page import vllm_metrics_page
from orchestrator.core.records import ReplicaLoad
from orchestrator.engines import (
    MalformedMetricsPageError,
    MissingMetricsError,
    adapter_for,
    parse_replica_load,
    vllm,
)
from orchestrator.engines.base import Series
from orchestrator.engines.metrics import plain_samples, wanted_lines

PAGES = Path(__file__).parent / "pages"


def _page(name: str) -> str:
    return (PAGES / name).read_text()


def test_vllm_page_with_two_engines_sums_running_and_waiting_and_takes_max_kv_usage() -> None:
    load = adapter_for("vllm").parse_load(_page("vllm.txt"), now_s=12.5)

    assert (load.running, load.waiting) == (3 + 4, 1 + 2)
    assert load.kv_cache_usage == 0.625


def test_vllm_page_token_counters_sum_total_samples_and_ignore_created_timestamps() -> None:
    load = adapter_for("vllm").parse_load(_page("vllm.txt"), now_s=0.0)

    assert load.prompt_tokens_total == 12345 + 54321
    assert load.generation_tokens_total == 2000 + 3000


def test_load_is_stamped_with_the_scrape_time_given() -> None:
    load = adapter_for("vllm").parse_load(_page("vllm.txt"), now_s=12.5)

    assert load.observed_at_s == 12.5


def test_sglang_page_sums_data_parallel_ranks_and_counts_tensor_parallel_ranks_once() -> None:
    load = adapter_for("sglang").parse_load(_page("sglang.txt"), now_s=3.0)

    assert load == ReplicaLoad(
        running=3 + 2,
        waiting=2 + 0,
        kv_cache_usage=0.42,
        prompt_tokens_total=61000.0 + 30000.0,
        generation_tokens_total=40110.0 + 20000.0,
        observed_at_s=3.0,
    )


def test_sglang_tokens_come_from_the_per_step_counter_not_the_finished_request_ones() -> None:
    """`sglang:generation_tokens_total` moves only when a request ends; the page's 43210 is it."""
    load = adapter_for("sglang").parse_load(_page("sglang.txt"), now_s=0.0)

    assert load.generation_tokens_total != 43210.0
    assert load.prompt_tokens_total != 98765.0


def test_simulated_engine_page_is_read_with_vllm_names() -> None:
    sim = adapter_for("sim").parse_load(_page("vllm.txt"), now_s=1.0)

    assert sim == adapter_for("vllm").parse_load(_page("vllm.txt"), now_s=1.0)


def test_one_engines_table_on_another_engines_page_is_an_error_naming_what_is_missing() -> None:
    with pytest.raises(MissingMetricsError) as raised:
        parse_replica_load(_page("sglang.txt"), vllm.METRIC_NAMES, now_s=0.0)

    assert "vllm:num_requests_running" in str(raised.value)
    assert "vllm:generation_tokens_total" in str(raised.value)


def test_page_without_engine_gauges_is_unknown_load_not_an_idle_replica() -> None:
    page = (
        "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE process_resident_memory_bytes gauge\n"
        "process_resident_memory_bytes 5.3e+09\n"
    )

    with pytest.raises(ValueError, match="vllm:kv_cache_usage_perc") as raised:
        parse_replica_load(page, vllm.METRIC_NAMES, now_s=7.0)

    assert isinstance(raised.value, MissingMetricsError)


def test_renamed_gauge_alone_is_reported_missing() -> None:
    page = _page("vllm.txt").replace("vllm:num_requests_waiting", "vllm:num_requests_queued")

    with pytest.raises(MissingMetricsError) as raised:
        adapter_for("vllm").parse_load(page, now_s=0.0)

    assert raised.value.missing == ("vllm:num_requests_waiting",)


def test_sglang_without_its_per_step_counter_names_the_selector() -> None:
    page = "\n".join(
        line for line in _page("sglang.txt").splitlines() if "realtime_tokens" not in line
    )

    with pytest.raises(MissingMetricsError, match=r'realtime_tokens_total\{mode="decode"\}'):
        adapter_for("sglang").parse_load(page, now_s=0.0)


def test_missing_prompt_counter_reads_unknown() -> None:
    page = "\n".join(line for line in _page("vllm.txt").splitlines() if "prompt_tokens" not in line)

    assert adapter_for("vllm").parse_load(page, now_s=0.0).prompt_tokens_total is None


def test_counter_without_help_or_type_lines_is_still_read() -> None:
    page = (
        'vllm:num_requests_running{engine="0"} 1.0\n'
        'vllm:num_requests_waiting{engine="0"} 0.0\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.1\n'
        'vllm:generation_tokens_total{engine="0"} 7.0\n'
        'vllm:prompt_tokens_total{engine="0"} 10.0\nvllm:prompt_tokens_total{engine="1"} 5.0\n'
    )

    load = parse_replica_load(page, vllm.METRIC_NAMES, now_s=0.0)

    assert load.prompt_tokens_total == 15.0


@pytest.mark.parametrize(
    ("page", "quoted"),
    [
        pytest.param(
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running three\n",
            "line 2 'vllm:num_requests_running three'",
            id="value-not-a-number",
        ),
        pytest.param(
            'vllm:num_requests_running{engine="0" 3.0\n',
            "line 1 'vllm:num_requests_running{engine=\"0\" 3.0'",
            id="unterminated-labels",
        ),
        pytest.param(
            "<html>\n<body>502 Bad Gateway</body>\n</html>\n",
            "line 1 '<html>'",
            id="html-error-page",
        ),
    ],
)
def test_malformed_page_raises_value_error_quoting_the_bad_line(page: str, quoted: str) -> None:
    with pytest.raises(ValueError, match="malformed metrics page") as raised:
        parse_replica_load(page, vllm.METRIC_NAMES, now_s=0.0)

    assert quoted in str(raised.value)
    assert isinstance(raised.value, MalformedMetricsPageError)


def test_kv_usage_above_one_is_rejected_as_not_a_ratio() -> None:
    page = 'vllm:kv_cache_usage_perc{engine="0"} 62.5\n'

    with pytest.raises(ValueError, match=r"vllm:kv_cache_usage_perc is 62\.5; expected a ratio"):
        parse_replica_load(page, vllm.METRIC_NAMES, now_s=0.0)


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-1.0"])
def test_non_finite_or_negative_engine_figure_is_rejected(value: str) -> None:
    page = f'vllm:num_requests_waiting{{engine="0"}} {value}\n'

    with pytest.raises(ValueError, match=r"vllm:num_requests_waiting.*expected a finite value"):
        parse_replica_load(page, vllm.METRIC_NAMES, now_s=0.0)


def test_series_given_twice_is_rejected_rather_than_counted_twice() -> None:
    page = 'vllm:num_requests_running{engine="0"} 3.0\nvllm:num_requests_running{engine="0"} 3.0\n'

    with pytest.raises(ValueError, match="appears twice"):
        parse_replica_load(page, vllm.METRIC_NAMES, now_s=0.0)


def test_nan_in_a_metric_the_adapter_does_not_read_is_ignored() -> None:
    page = _page("vllm.txt") + "vllm:spec_decode_acceptance_rate NaN\n"

    assert parse_replica_load(page, vllm.METRIC_NAMES, now_s=0.0).running == 7


def test_only_the_series_the_adapter_reads_are_parsed() -> None:
    """A vLLM-sized page (histograms and all) is read for its five series; a line the adapter
    never reads is not even parsed, so it cannot cost time or fail the page."""
    page = vllm_metrics_page().decode()
    broken = page + 'vllm:iteration_tokens_total_bucket{le="1"} not-a-number\n'

    load = adapter_for("vllm").parse_load(broken, now_s=0.0)

    assert len(page) > 30_000
    assert (load.running, load.waiting, load.kv_cache_usage) == (3, 0, 0.21)
    assert load.generation_tokens_total == 320_000.0
    assert wanted_lines(page, vllm.METRIC_NAMES.sample_names()).count("\n") == 5


def _prometheus_samples(page: str) -> list[tuple[str, dict[str, str], float]]:
    return [
        (sample.name, sample.labels, float(sample.value))
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    ]


def _same(
    ours: list[tuple[str, dict[str, str], float]], theirs: list[tuple[str, dict[str, str], float]]
) -> bool:
    return len(ours) == len(theirs) and all(
        a[:2] == b[:2] and (a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2])))
        for a, b in zip(ours, theirs, strict=True)
    )


@pytest.mark.parametrize("name", sorted(p.name for p in PAGES.glob("*.txt")))
def test_engine_pages_take_the_plain_reading_and_it_reads_what_prometheus_client_does(
    name: str,
) -> None:
    text = _page(name)
    wanted = {
        s.name for kind in ("vllm", "sglang") for s in adapter_for(kind).metric_names.all_series()
    }
    page = wanted_lines(text, wanted)
    ours = plain_samples(page)
    assert ours is not None and ours
    assert _same(ours, _prometheus_samples(page))


_LABEL_VALUES = st.text(alphabet='ab0 ,={}"\\\t', max_size=6)
_VALUES = st.sampled_from(
    [
        "0",
        "3",
        "1.5",
        "-2",
        "1e3",
        "2.5E-3",
        ".5",
        "7.",
        "+Inf",
        "-Inf",
        "NaN",
        "1_0",
        "0x1f",
        "inf",
        "1 1700000000000",
        " 2",
        '1.0 # {a="b"} 1',
    ]
)


@given(
    lines=st.lists(
        st.tuples(
            st.sampled_from(["m", "vllm:x_total", "sglang:y"]),
            st.lists(
                st.tuples(st.sampled_from(["a", "b", "tp_rank", "__name__"]), _LABEL_VALUES),
                max_size=3,
            ),
            st.sampled_from(["", ",", ", "]),
            _VALUES,
        ),
        min_size=1,
        max_size=4,
    )
)
@settings(max_examples=400, deadline=None)
def test_the_plain_reading_reads_what_prometheus_client_does_or_declines(
    lines: list[tuple[str, list[tuple[str, str]], str, str]],
) -> None:
    text = ""
    for metric, labels, trailer, value in lines:
        body = ",".join(f'{key}="{label}"' for key, label in labels)
        text += (
            f"{metric}{{{body}{trailer if labels else ''}}} {value}\n"
            if labels
            else f"{metric} {value}\n"
        )
    ours = plain_samples(text)
    if ours is None:
        return  # declined: prometheus_client's parser reads it (or rejects it) as before
    assert _same(ours, _prometheus_samples(text))


def test_a_series_hashes_by_name_and_labels_whatever_their_order() -> None:
    """`Series` keeps its hash from construction (a page's parse looks each up a few dozen
    times): equal series still hash alike, and a different label value does not collide."""
    a = Series("sglang:realtime_tokens_total", {"mode": "decode", "tp_rank": "0"})
    b = Series("sglang:realtime_tokens_total", {"tp_rank": "0", "mode": "decode"})
    c = Series("sglang:realtime_tokens_total", {"mode": "prefill_compute", "tp_rank": "0"})
    assert a == b and hash(a) == hash(b)
    assert a != c and len({a, b, c}) == 2
    assert {a: 1}[b] == 1
    copy = pickle.loads(pickle.dumps(a))  # rebuilt, so its hash is this process's
    assert copy == a and hash(copy) == hash(a) and copy.labels == a.labels
