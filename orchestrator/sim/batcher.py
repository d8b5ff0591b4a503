"""Continuous batching with a per-step token budget and KV-limited admission, as in vLLM.

The batcher knows nothing about clocks: `plan_step()` decides what the next step computes and how
long it takes on the capacity model; `finish_step()` applies it. A live server sleeps the step's
duration in between; the virtual-time driver adds it to a counter. Both run the same policy.

Per step, in order: every decoding sequence gets one token (the newest are preempted and sent
back to the waiting queue, to be recomputed, when the KV cache cannot hold the growth); sequences
part-way through prefill continue; then waiting requests are admitted first come, first served
while the token budget, the sequence limit and free KV allow. Prefill is chunked to the budget.
A request's first token comes out of the step that completes its prefill.

Decoding sequences are not touched one by one each step: a sequence's token count is derived from
the step counter, so a step costs O(1) plus O(log n) per start and finish. A driver that needs only
durations (virtual time) plans with `plan_duration_s()` and finishes a decode-only step with
`finish_decode_step()`: the same policy and arithmetic, without a `StepPlan` or `StepOutcome` for
the decode-only steps that make up most of a loaded engine's steps.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable

from mypy_extensions import mypyc_attr

from orchestrator.fleet.step_cost import StepCostModel, StepWork
from orchestrator.sim.sequences import SimRequest, StepOutcome, StepPlan


# Compiled with mypyc (see docs/compiled.md), a class is final to Python code unless it says
# otherwise; tests record a batcher's steps by subclassing it.
@mypyc_attr(allow_interpreted_subclasses=True)
class SimBatcher:
    """One replica's scheduler state."""

    def __init__(
        self,
        cost: StepCostModel,
        *,
        max_num_seqs: int | None = None,
        max_num_batched_tokens: int | None = None,
        kv_capacity_tokens: int | None = None,
    ) -> None:
        engine = cost.figures.engine
        self.cost = cost
        self.max_num_seqs = max_num_seqs or engine.max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens or engine.max_num_batched_tokens
        self.kv_capacity_tokens = kv_capacity_tokens or cost.kv_capacity_tokens
        self._sliding_tokens = cost.figures.model.sliding_kv_tokens_per_sequence
        self.steps = 0
        self._waiting: deque[SimRequest] = deque()
        self._prefilling: list[SimRequest] = []
        self._decoding: dict[int, SimRequest] = {}  # insertion order = admission order
        self._finish_heap: list[tuple[int, int, int, SimRequest]] = []
        self._decode_start_sum = 0  # sum of (decode_start_step - generated_before) over decoding
        self._decode_prompt_sum = 0  # sum of prompt tokens over decoding
        self._prefill_kv = 0  # KV tokens held by sequences in prefill
        self._plan: StepPlan | None = None
        # A decode-only step planned by `plan_duration_s()`: its sequences (>= 1), else 0.
        self._decode_planned = 0
        # A cost model may time a decode-only step without a `StepWork` (same arithmetic).
        self._decode_step_time_s: Callable[[int, float], float] = getattr(
            cost, "decode_step_time_s", self._decode_step_time_from_work
        )

    # -- queries -------------------------------------------------------------------------------

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._prefilling) + len(self._decoding)

    @property
    def has_work(self) -> bool:
        return bool(self._waiting or self._prefilling or self._decoding)

    def generated_tokens(self, request: SimRequest) -> int:
        """Tokens `request` has produced so far (what a streaming client may have seen)."""
        if request.state == "decoding":
            return request.generated_before + 1 + self.steps - request.decode_start_step
        if request.state == "finished":
            return request.output_tokens
        return request.generated_before

    @property
    def kv_used_tokens(self) -> float:
        decoding = len(self._decoding)
        generated = decoding * (1 + self.steps) - self._decode_start_sum
        running = decoding + len(self._prefilling)
        return (
            self._decode_prompt_sum + generated + self._prefill_kv + running * self._sliding_tokens
        )

    @property
    def kv_usage(self) -> float:
        """KV-cache usage as a ratio in [0, 1]."""
        return min(1.0, self.kv_used_tokens / self.kv_capacity_tokens)

    # -- requests ------------------------------------------------------------------------------

    def submit(self, request: SimRequest) -> None:
        if request.prompt_tokens < 1 or request.output_tokens < 1:
            raise ValueError("a request needs at least one prompt token and one output token")
        if request.prompt_tokens + self._sliding_tokens > self.kv_capacity_tokens:
            raise ValueError(
                f"prompt of {request.prompt_tokens} tokens exceeds the KV cache "
                f"({self.kv_capacity_tokens} tokens)"
            )
        request.state = "waiting"
        self._waiting.append(request)

    def abort(self, request: SimRequest) -> None:
        """Drop a request wherever it is and free its KV; a no-op once it has finished."""
        if request.finished:
            return
        if request.state == "waiting":
            self._waiting.remove(request)
        elif request.state == "prefilling":
            self._prefilling.remove(request)
            self._prefill_kv -= request.computed_prompt
        elif request.state == "decoding":
            self._remove_decoding(request)
        request.state = "aborted"

    # -- steps ---------------------------------------------------------------------------------

    @property
    def planned_decode_only_sequences(self) -> int:
        """Sequences of the decode-only step `plan_duration_s()` has in flight; 0 if none is."""
        return self._decode_planned

    def plan_duration_s(self) -> float:
        """`plan_step().duration_s`; a decode-only step is kept without a `StepPlan`.

        Finish such a step with `finish_decode_step()` (or `finish_step()`, which handles both).
        """
        if self._plan is not None or self._decode_planned:
            raise RuntimeError("a step is already planned: finish it first")
        if self._decoding and not self._prefilling and not self._waiting:
            decode_sequences = len(self._decoding)
            decode_context = (
                self._decode_prompt_sum
                + decode_sequences * (1 + self.steps)
                - self._decode_start_sum
            )
            kv_used = decode_context + self._prefill_kv + decode_sequences * self._sliding_tokens
            if kv_used + decode_sequences <= self.kv_capacity_tokens:  # else: preemption
                self._decode_planned = decode_sequences
                return self._decode_step_time_s(decode_sequences, decode_context)
        return self.plan_step().duration_s

    def finish_decode_step(self, now_s: float) -> list[SimRequest] | None:
        """Finish a decode-only step from `plan_duration_s()`: the requests it finished, or None.

        It produced one token for each of `planned_decode_only_sequences` and computed no prompt.
        """
        if not self._decode_planned:
            raise RuntimeError("finish_decode_step() without a decode-only plan_duration_s()")
        self._decode_planned = 0
        self.steps += 1
        return self._finish_due(now_s)

    def finish_decode_step_and_plan(self, now_s: float) -> tuple[list[SimRequest] | None, float]:
        """`finish_decode_step(now_s)`, then `plan_duration_s()` if work remains, in one call:
        the requests finished (or None) and the next step's duration, -1.0 when idle.

        The virtual-time driver's most common event, so the two are fused here: one call per step
        instead of four (finish, its due check, the work check, the plan).
        """
        if not self._decode_planned:
            raise RuntimeError("finish_decode_step() without a decode-only plan_duration_s()")
        self._decode_planned = 0
        self.steps = steps = self.steps + 1
        heap = self._finish_heap
        finished = self._finish_due(now_s) if heap and heap[0][0] <= steps else None
        if self._waiting or self._prefilling or self._decoding:
            return finished, self.plan_duration_s()
        return finished, -1.0

    def plan_step(self) -> StepPlan:
        """Decide the next step. Call `finish_step()` before planning another."""
        if self._plan is not None or self._decode_planned:
            raise RuntimeError("plan_step() called twice without finish_step()")
        decode_sequences = len(self._decoding)
        decode_context = (
            self._decode_prompt_sum + decode_sequences * (1 + self.steps) - self._decode_start_sum
        )
        kv_used = (  # `kv_used_tokens`, written out: this runs every step
            decode_context
            + self._prefill_kv
            + (decode_sequences + len(self._prefilling)) * self._sliding_tokens
        )
        if decode_sequences and kv_used + decode_sequences > self.kv_capacity_tokens:
            preempted = self._make_room_for_decode()
            decode_sequences = len(self._decoding)
            decode_context = (
                self._decode_prompt_sum
                + decode_sequences * (1 + self.steps)
                - self._decode_start_sum
            )
        else:
            preempted = []  # the usual case, without the call
        if not self._prefilling and not self._waiting:  # decode only: most steps, kept cheap
            duration = self._decode_step_time_s(decode_sequences, decode_context)
            self._plan = StepPlan(duration, decode_sequences, decode_context, [], preempted)
            return self._plan
        budget = self.max_num_batched_tokens - decode_sequences
        free_kv = self.kv_capacity_tokens - self.kv_used_tokens - decode_sequences
        chunks: list[tuple[SimRequest, int]] = []
        for request in self._prefilling:
            if budget <= 0:
                break
            remaining = self._prefill_target(request) - request.computed_prompt
            take = min(budget, remaining, int(free_kv))
            if take == remaining and take + 1 > free_kv:
                take -= 1  # completing needs one more slot, for the token it produces
            if take <= 0:
                break
            chunks.append((request, take))
            budget -= take
            free_kv -= take + (take == remaining)
        while self._waiting and budget > 0 and self.num_running < self.max_num_seqs:
            request = self._waiting[0]
            take = min(budget, self._prefill_target(request))
            kv_needed = take + (take == self._prefill_target(request)) + self._sliding_tokens
            if kv_needed > free_kv:
                break
            self._waiting.popleft()
            request.state = "prefilling"
            request.computed_prompt = 0
            self._prefilling.append(request)
            chunks.append((request, take))
            budget -= take
            free_kv -= kv_needed
        if not chunks and not decode_sequences and self._prefilling:
            # Part-filled prompts hold all free KV and none can finish: recompute the newest.
            preempted.append(self._preempt_prefill(self._prefilling[-1]))
            self._plan = None
            plan = self.plan_step()
            plan.preempted[:0] = preempted
            return plan
        prefill_tokens = sum(take for _, take in chunks)
        prior = sum(request.computed_prompt for request, _ in chunks)
        pairs = sum(take * (request.computed_prompt + take / 2) for request, take in chunks)
        work = StepWork(
            decode_sequences=decode_sequences,
            decode_context_tokens=decode_context,
            prefill_tokens=prefill_tokens,
            prefill_prior_tokens=prior,
            prefill_attention_pairs=pairs,
        )
        self._plan = StepPlan(
            self.cost.step_time_s(work), decode_sequences, decode_context, chunks, preempted, work
        )
        return self._plan

    def finish_step(self, now_s: float) -> StepOutcome:
        """Apply the planned step, stamping first and last tokens with `now_s`."""
        if self._decode_planned:
            sequences = self._decode_planned
            return StepOutcome([], self.finish_decode_step(now_s) or [], [], sequences, 0)
        plan = self._plan
        if plan is None:
            raise RuntimeError("finish_step() without plan_step()")
        self._plan = None
        self.steps += 1
        first_tokens: list[SimRequest] = []
        prefills_completed = 0  # each produces a token, a resumed one as much as a first one
        for request, take in plan.prefill_chunks:
            if request.state != "prefilling":
                continue  # aborted while the step ran
            request.computed_prompt += take
            self._prefill_kv += take
            if request.computed_prompt >= self._prefill_target(request):
                self._prefilling.remove(request)
                self._prefill_kv -= request.computed_prompt
                if request.first_token_s is None:
                    request.first_token_s = now_s
                    first_tokens.append(request)
                prefills_completed += 1
                self._start_decoding(request)
        return StepOutcome(  # first_tokens, finished, preempted, tokens, prompt tokens
            first_tokens, self._finish_due(now_s) or [], plan.preempted,
            plan.decode_sequences + prefills_completed, plan.prefill_tokens,
        )  # fmt: skip

    # -- internals -----------------------------------------------------------------------------

    def _finish_due(self, now_s: float) -> list[SimRequest] | None:
        """Finish the sequences whose last token came out of step `steps`; None if none did."""
        heap, steps = self._finish_heap, self.steps
        if not heap or heap[0][0] > steps:
            return None
        finished: list[SimRequest] = []
        while heap and heap[0][0] <= steps:
            _, epoch, _, request = heapq.heappop(heap)
            if request.state != "decoding" or epoch != request._epoch:
                continue  # preempted or aborted since it was scheduled
            self._remove_decoding(request)
            request.state = "finished"
            request.finish_s = now_s
            finished.append(request)
        return finished

    def _decode_step_time_from_work(self, sequences: int, context_tokens: float) -> float:
        return self.cost.step_time_s(StepWork(sequences, context_tokens, 0))

    @staticmethod
    def _prefill_target(request: SimRequest) -> int:
        """Tokens to (re)compute: the prompt, plus what was generated before a preemption."""
        return request.prompt_tokens + request.generated_before

    def _start_decoding(self, request: SimRequest) -> None:
        """The step that completed prefill produced token number generated_before + 1."""
        request.state = "decoding"
        request.decode_start_step = self.steps
        request._epoch += 1
        self._decoding[request.request_id] = request
        self._decode_start_sum += request.decode_start_step - request.generated_before
        self._decode_prompt_sum += request.prompt_tokens
        finish_step = (
            request.decode_start_step + request.output_tokens - request.generated_before - 1
        )
        heapq.heappush(
            self._finish_heap, (finish_step, request._epoch, request.request_id, request)
        )

    def _remove_decoding(self, request: SimRequest) -> None:
        del self._decoding[request.request_id]
        self._decode_start_sum -= request.decode_start_step - request.generated_before
        self._decode_prompt_sum -= request.prompt_tokens
        request._epoch += 1

    def _preempt_prefill(self, request: SimRequest) -> SimRequest:
        self._prefilling.remove(request)
        self._prefill_kv -= request.computed_prompt
        request.computed_prompt = 0
        request.state = "waiting"
        request.preemptions += 1
        self._waiting.appendleft(request)
        return request

    def _make_room_for_decode(self) -> list[SimRequest]:
        """Preempt the newest decoding sequences until one more token each fits in KV."""
        preempted: list[SimRequest] = []
        while (
            self._decoding and self.kv_used_tokens + len(self._decoding) > self.kv_capacity_tokens
        ):
            victim = next(reversed(self._decoding.values()))
            generated = self.generated_tokens(victim)
            self._remove_decoding(victim)  # with the generated_before it started decoding with
            victim.generated_before = generated
            victim.state = "waiting"
            victim.preemptions += 1
            self._waiting.appendleft(victim)
            preempted.append(victim)
        return preempted
