"""Online capacity estimation: what each replica sustains within the latency targets.

Scrapes of a replica's `/metrics` give its running batch B and, from the token counters over the
last few scrapes, its output rate R and the prompt tokens it prefilled per output token, ρ.
While decoding, each running sequence gets one token per engine step, so the mean step time is
B / R, and it grows with the work a step carries:

    step = a + b·B + c·B·ρ      (a: the weight read; b: attention over each sequence's KV;
                                 c: prefill, whose tokens per step are B·ρ)

The estimator fits (a, b, c) per replica by exponentially weighted least squares pulled toward a
prior (ridge), so directions the data cannot resolve stay at the prior instead of drifting. The
capacity is the rate at the batch whose step meets the TPOT target with some headroom,

    B* = (headroom·TPOT − a) / (b + c·ρ̄),     capacity = B* / (headroom·TPOT),

capped, once a queue persists over a flat batch, by the batch the engine stops at (its sequence
or KV limit). The target here is the reference one, at which the replicas' capacity priors are
stated (MLPerf's); `ReplicaStats` turns it into any other target with the fitted fixed time a,
which the estimator publishes too. Estimates below the current one are believed only in
proportion to how close the replica runs to its target: far from it, the line is an
extrapolation. Why not the live generation rate, as SMG's `least_load` uses: a lightly loaded
fast GPU generates slowly and would look slow. The prior comes from the replica's capacity prior
(the fleet model's figure, or whatever the table says); the fit takes over as load reveals
the slope.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Set
from dataclasses import dataclass, field

from orchestrator.core.records import ReplicaLoad
from orchestrator.routing.stats import FIXED_SHARE_PRIOR, HEADROOM, ReplicaStats

FORGETTING = 0.97  # per scrape: about 30 scrapes of memory
RELATIVE_NOISE = 0.1  # step times measured over a scrape interval scatter about 10%
PRIOR_SPREAD = 1.0  # the prior's standard deviation, relative to its value
SMOOTHING = 0.3  # weight of a new estimate in the published capacity
RATIO_SMOOTHING = 0.05  # weight of one scrape in the running prompt/output ratio
MIN_BATCH = 1.0
QUEUED_SCRAPES = 5  # scrapes of a persistent queue over a flat batch before a limit is believed
QUEUED_STEPS = 20  # ... and engine steps: arrivals wait for the next step, a slow one holds them
QUEUE_FLOOR = 3  # fewer waiting requests than this is the normal wait for a prefill slot
PLATEAU_GROWTH = 1.02  # a batch that grew less than this over the queued scrapes is flat
LIGHT_LOAD = 0.4  # below this share of the step target, a lower estimate is not believed
HEAVY_LOAD = 0.8  # from this share on, it is believed fully
DEFAULT_PROMPT_TO_OUTPUT = 5000 / 1278  # the MLPerf gpt-oss-120b set's mean lengths
WINDOW_SCRAPES = 5  # each observation spans this many scrapes: one second of tokens is noisy

Vector = list[float]
Matrix = list[list[float]]


def solve(matrix: Matrix, vector: Vector) -> Vector:
    """Solve a small dense linear system by Gaussian elimination with partial pivoting."""
    n = len(vector)
    rows = [[*row, vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(n):
            if r != col and rows[col][col] != 0.0:
                factor = rows[r][col] / rows[col][col]
                for c in range(col, n + 1):
                    rows[r][c] -= factor * rows[col][c]
    return [rows[i][n] / rows[i][i] for i in range(n)]


@dataclass(slots=True)
class _Fit:
    """Decayed sufficient statistics of one replica's step-time regression."""

    prior: Vector
    prior_precision: Vector
    ratio: float
    theta: Vector = field(default_factory=list)
    sxx: Matrix = field(default_factory=lambda: [[0.0] * 3 for _ in range(3)])
    sxy: Vector = field(default_factory=lambda: [0.0] * 3)
    window: deque[tuple[float, float, float | None, int]] = field(default_factory=deque)
    batch_limit: float | None = None
    queued_scrapes: int = 0
    queued_since_batch: float = 0.0
    queued_since_s: float = 0.0
    step_s: float = 0.0  # the last measured step; 0 until one is
    observations: int = 0
    utilisation: float = 0.0  # smoothed mean step over the step target

    def update(self, features: Vector, step_s: float) -> None:
        weight = 1.0 / (RELATIVE_NOISE * step_s) ** 2
        for i in range(3):
            self.sxy[i] = FORGETTING * self.sxy[i] + weight * features[i] * step_s
            for j in range(3):
                self.sxx[i][j] = FORGETTING * self.sxx[i][j] + weight * features[i] * features[j]
        matrix = [
            [self.sxx[i][j] + (self.prior_precision[i] if i == j else 0.0) for j in range(3)]
            for i in range(3)
        ]
        vector = [self.sxy[i] + self.prior_precision[i] * self.prior[i] for i in range(3)]
        self.theta = solve(matrix, vector)
        self.observations += 1


class CapacityEstimator:
    """Per-replica capacity in wall-clock output tokens/s, written into `ReplicaStats`."""

    def __init__(
        self,
        *,
        target_ttft_s: float,
        target_tpot_s: float,
        prompt_to_output: float = DEFAULT_PROMPT_TO_OUTPUT,
        load_tpot_s: float | None = None,
    ) -> None:
        """`target_tpot_s` is the reference target the capacity is stated at; `load_tpot_s`
        (default: the same) the tightest target the router routes against, by which it judges
        how close to its target a replica runs (and so how far a lower estimate is believed)."""
        self.target_ttft_s = target_ttft_s
        self.target_tpot_s = target_tpot_s
        self.load_step_s = HEADROOM * (load_tpot_s or target_tpot_s)
        self.prompt_to_output = prompt_to_output
        self._fits: dict[str, _Fit] = {}

    @property
    def step_target_s(self) -> float:
        return HEADROOM * self.target_tpot_s

    def _prior(self, stats: ReplicaStats) -> _Fit:
        """Split the prior capacity's step budget: a tenth fixed, the rest half decode, half
        prefill at the expected prompt/output ratio."""
        target = self.step_target_s
        fixed = FIXED_SHARE_PRIOR * target
        per_sequence = (target - fixed) / max(MIN_BATCH, stats.capacity_tokens_per_s * target)
        prior = [fixed, 0.5 * per_sequence, 0.5 * per_sequence / self.prompt_to_output]
        precision = [1.0 / (PRIOR_SPREAD * value) ** 2 for value in prior]
        return _Fit(prior=prior, prior_precision=precision, ratio=self.prompt_to_output)

    def update(self, replica_id: str, stats: ReplicaStats, load: ReplicaLoad, now_s: float) -> None:
        """Fold one scrape into the replica's capacity estimate."""
        fit = self._fits.get(replica_id)
        if fit is None:
            fit = self._fits[replica_id] = self._prior(stats)
            stats.reference_tpot_s = self.target_tpot_s
        generated, prompt = load.generation_tokens_total, load.prompt_tokens_total
        if generated is None:
            return
        window = fit.window
        if window and (generated < window[-1][1] or now_s <= window[-1][0]):
            window.clear()  # the engine restarted (its counters began again) or time went back
            fit.step_s = 0.0  # and its step is measured afresh
        window.append((now_s, generated, prompt, load.running))
        self._track_batch_limit(fit, load, now_s)
        if len(window) <= WINDOW_SCRAPES:
            return
        first_s, first_generated, first_prompt, _ = window.popleft()
        produced = generated - first_generated
        batch = sum(entry[3] for entry in window) / len(window)
        if produced <= 0 or batch < MIN_BATCH:
            return
        ratio = fit.ratio
        if prompt is not None and first_prompt is not None and prompt >= first_prompt:
            ratio = (prompt - first_prompt) / produced
            fit.ratio += RATIO_SMOOTHING * (ratio - fit.ratio)
        step_s = batch * (now_s - first_s) / produced
        fit.update([1.0, batch, batch * ratio], step_s)
        fit.step_s = step_s
        stats.measured_batch, stats.measured_step_s = batch, step_s
        fit.utilisation += SMOOTHING * (step_s / self.load_step_s - fit.utilisation)
        self._publish_line(fit, stats)
        estimate = self.capacity_of(fit)
        if estimate is None:
            return
        change = estimate - stats.capacity_tokens_per_s
        saturated = fit.batch_limit is not None
        if change < 0 and not saturated:  # lower only as far as load near the target shows it
            change *= self.evidence(fit.utilisation)
        stats.capacity_tokens_per_s += SMOOTHING * change

    def _publish_line(self, fit: _Fit, stats: ReplicaStats) -> None:
        """Write the step line other targets are computed from: the fit, believed like a lower
        capacity estimate (in proportion to how close to the target the replica runs) where it
        promises less than the prior; the prior's line elsewhere."""
        fixed, per_sequence = self.line_of(fit)
        prior_fixed = fit.prior[0]
        prior_per_sequence = fit.prior[1] + fit.prior[2] * fit.ratio
        if fit.batch_limit is None:
            weight = self.evidence(fit.utilisation)
            if fixed > prior_fixed:
                fixed = prior_fixed + weight * (fixed - prior_fixed)
            if per_sequence > prior_per_sequence:
                per_sequence = prior_per_sequence + weight * (per_sequence - prior_per_sequence)
        stats.step_fixed_s, stats.step_per_sequence_s = fixed, per_sequence
        stats.batch_limit = fit.batch_limit

    @staticmethod
    def evidence(utilisation: float) -> float:
        """How far a lower estimate is believed, in [0, 1], from the step's share of the target.

        Far below the target the slope is an extrapolation; an optimistic error costs little
        (the replica gets more work and the next scrapes correct it), a pessimistic one starves
        the replica of the very load that would reveal it.
        """
        return min(1.0, max(0.0, (utilisation - LIGHT_LOAD) / (HEAVY_LOAD - LIGHT_LOAD)))

    @staticmethod
    def _track_batch_limit(fit: _Fit, load: ReplicaLoad, now_s: float) -> None:
        """A request waits a step or two for its prefill while the batch grows; only a queue
        that persists while the batch stays flat shows the engine's sequence or KV limit.

        "Persists" is counted in scrapes and in the engine's own steps: a replica stepping
        slower than the scrape interval shows each scrape's arrivals waiting for the next
        step, and a router that holds the batch at its room keeps it flat meanwhile. That
        queue is the step's, not the engine's limit, so it must last many steps (and no limit
        is believed before a step has been measured).
        """
        if load.waiting < max(QUEUE_FLOOR, 0.02 * load.running) or load.running == 0:
            fit.queued_scrapes = 0
            return
        if fit.queued_scrapes == 0:
            fit.queued_since_batch = float(load.running)
            fit.queued_since_s = now_s
        fit.queued_scrapes += 1
        if load.running > PLATEAU_GROWTH * fit.queued_since_batch:
            fit.queued_scrapes = 1
            fit.queued_since_batch = float(load.running)
            fit.queued_since_s = now_s
            return
        lasted_steps = fit.step_s > 0.0 and now_s - fit.queued_since_s >= QUEUED_STEPS * fit.step_s
        if fit.queued_scrapes >= QUEUED_SCRAPES and lasted_steps:
            limit = float(load.running)
            fit.batch_limit = limit if fit.batch_limit is None else max(fit.batch_limit, limit)

    def line_of(self, fit: _Fit) -> tuple[float, float]:
        """The fitted step line: (fixed s, s per running sequence at the running prompt/output
        ratio), the fixed part at least 0, the slope at least a thousandth of the prior's."""
        fixed, per_decode, per_prefill = fit.theta
        per_sequence = per_decode + per_prefill * fit.ratio
        floor = 1e-3 * (fit.prior[1] + fit.prior[2] * self.prompt_to_output)
        return max(fixed, 0.0), max(per_sequence, floor)

    def capacity_of(self, fit: _Fit) -> float | None:
        """Tokens/s at the batch whose step meets the target, capped at the engine's limit."""
        if fit.observations == 0:
            return None
        target = self.step_target_s
        fixed, per_sequence = self.line_of(fit)
        batch = max(MIN_BATCH, (target - fixed) / per_sequence)
        if fit.batch_limit is not None and fit.batch_limit < batch:
            step = fixed + per_sequence * fit.batch_limit
            return fit.batch_limit / step
        capacity = batch / target
        return capacity if math.isfinite(capacity) else None

    def forget(self, replica_id: str) -> None:
        """Drop the history of a replica that left the table."""
        self._fits.pop(replica_id, None)

    def forget_except(self, live_ids: Set[str]) -> None:
        """Drop the history of every replica not in `live_ids`: one fit per table replica."""
        for replica_id in [r for r in self._fits if r not in live_ids]:
            del self._fits[replica_id]
