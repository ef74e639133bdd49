"""The fleet consumer against 590 nodes' step summaries: ``python bench/stragglers.py --json``.

The load: every node of one job publishes one summary per step of its training rails
(collector.step_summaries). The step rate is measured, not assumed: the simulated MoE job's
iteration period from ``TrafficModel("moe")``'s blocks, and the summaries per iteration
from detectors.stragglers.StepSplitter run over one simulated node's eight training rails
(its steps are the template of every node's: same rails, same shape). Each of ``--nodes``
nodes publishes the template's steps shifted by its own clock offset (within 100 us) and
jitter (up to 300 us a step); ``--stragglers`` of them are 5 ms late in every other step.
A summary reaches the consumer between ``quiet`` and ``quiet`` + 1.1 s after its step ends
(the agent's drain every second, the broker), so the arrival order is the fleet's.

Timed, on one core (the process pinned to one CPU): the consumer's whole ingest path,
burstscope.straggler_watch.StragglerWatch as ``burstscope stragglers`` runs it: each
message's JSON decoded and checked (``handle``), grouping, the settle-and-judge pass every
0.1 s of simulated time (``settle``: matching, judge_step, Standings), and one exposition
render (prometheus_client.generate_latest, what a scrape costs) per 15 s of simulated time.
Building and encoding the messages (the agents' work) is outside the timing.

The figure: ``ratio_vs_real_time`` = processing seconds / simulated seconds. The reference is
real time, the span the summaries cover, measured in the same run; the target is a ratio of
at most 1 (the consumer keeps up on one core). ``decode_only_seconds`` (json.loads of the
same messages alone) is a floor on this machine, for comparing runs across machines.
``--json`` prints one line; the exit status is 1 when the target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from prometheus_client import CollectorRegistry, generate_latest

from burstscope.collector.mqtt.messages import (
    Identity,
    encode,
    step_payload,
    steps_topic,
)
from burstscope.collector.simulation.model import TrafficModel
from burstscope.detectors.stragglers import (
    QUIET_NS,
    NodeStep,
    RailStep,
    StepSplitter,
)
from burstscope.straggler_watch import TICK_SECONDS, StragglerWatch, WatchSettings

FLEET_NODES = 590
INTERVAL_NS = 1_000_000
SECOND = 1_000_000_000
SCRAPE_NS = 15 * SECOND
TICK_NS = round(TICK_SECONDS * 1e9)
LATE_NS = 5_000_000  # an injected straggler's delay, every other step
EPOCH = 1_800_000_000 * SECOND
TEMPLATE_ITERATIONS = 3


def iteration_period(profile: str, seed: int) -> int:
    """The median duration of the simulated job's iterations (its blocks with a job) over
    its first minute."""
    model = TrafficModel(profile, seed)
    model.extend_to(60 * SECOND)
    lengths = sorted(block.end_ns - block.start_ns for block in model.blocks() if block.job >= 0)
    return lengths[len(lengths) // 2]


def template_steps(profile: str, seed: int, iterations: int) -> tuple[list[NodeStep], int]:
    """One simulated node's steps over its first ``iterations`` iterations, as the agent
    cuts them (its eight training rails' transmit counters at 1 ms), and the model time
    they span."""
    model = TrafficModel(profile, seed)
    model.extend_to(0)
    blocks = [model.blocks()[0]]
    while len([b for b in blocks if b.job >= 0]) < iterations:
        blocks.append(model.block_after(blocks[-1]))
    span = blocks[-1].end_ns
    stamps = np.arange(INTERVAL_NS, span + 1, INTERVAL_NS, dtype=np.int64)
    transmit, _ = model.counters_at(stamps)
    splitter = StepSplitter("template", INTERVAL_NS)
    for index, port in enumerate(model.ports[:8]):  # the training rails; not the storage NIC
        splitter.feed(
            f"{port.device}/{port.port}", port.line_rate_bytes_per_second, stamps, transmit[index]
        )
    return splitter.close(final=True), span


def shifted(step: NodeStep, host: str, by_ns: int, jobs: tuple[str, ...]) -> NodeStep:
    def move(value: int | None) -> int | None:
        return None if value is None else value + by_ns

    rails = tuple(
        RailStep(
            r.rail, r.onset_ns + by_ns, r.end_ns + by_ns, r.bytes, r.peak, move(r.onset_latest_ns)
        )
        for r in step.rails
    )
    return NodeStep(
        host,
        step.onset_ns + by_ns,
        step.end_ns + by_ns,
        step.interval_ns,
        rails,
        jobs,
        move(step.onset_latest_ns),
    )


class Fleet:
    """The nodes' summaries, built slab by slab (outside the timing) in arrival order."""

    def __init__(
        self, nodes: int, stragglers: int, template: list[NodeStep], span_ns: int, seed: int
    ) -> None:
        self.hosts = [f"gpu{index:03d}" for index in range(nodes)]
        self.late = set(self.hosts[:: max(1, nodes // max(1, stragglers))][:stragglers])
        self.template = template
        self.span_ns = span_ns  # the template repeats with this period
        self.rng = np.random.default_rng(seed)
        self.offsets = self.rng.integers(-100_000, 100_000, size=nodes)  # clock error
        self.identities = [Identity(h, 1, "bench", 0.0, (), 0.5) for h in self.hosts]
        self.repeat = 0
        self.step_index = 0
        self.waiting: list[tuple[int, str, bytes]] = []  # (arrival, topic, body)

    def _one_repeat(self) -> None:
        base = EPOCH + self.repeat * self.span_ns
        for step in self.template:
            late_step = self.step_index % 2 == 1
            jitter = self.rng.integers(0, 300_000, size=len(self.hosts))
            arrive = self.rng.integers(0, 1_100_000_000, size=len(self.hosts))
            for index, host in enumerate(self.hosts):
                by = base + int(self.offsets[index]) + int(jitter[index])
                if late_step and host in self.late:
                    by += LATE_NS
                node_step = shifted(step, host, by, ("4242",))
                body = encode({**step_payload(self.identities[index], node_step), "seq": 1})
                arrival = node_step.end_ns + QUIET_NS + int(arrive[index])
                self.waiting.append((arrival, steps_topic(host), body))
            self.step_index += 1
        self.repeat += 1
        self.waiting.sort(key=lambda item: item[0])

    def until(self, time_ns: int) -> list[tuple[int, str, bytes]]:
        """Every message arriving before ``time_ns``, in arrival order."""
        while EPOCH + self.repeat * self.span_ns < time_ns + 2 * SECOND:
            self._one_repeat()
        cut = 0
        while cut < len(self.waiting) and self.waiting[cut][0] < time_ns:
            cut += 1
        out, self.waiting = self.waiting[:cut], self.waiting[cut:]
        return out


def measure(nodes: int, seconds: float, stragglers: int, seed: int) -> dict[str, object]:
    period_ns = iteration_period("moe", seed)
    template, span = template_steps("moe", seed, TEMPLATE_ITERATIONS)
    fleet = Fleet(nodes, stragglers, template, span, seed)
    watch = StragglerWatch(WatchSettings())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(watch)
    simulated_ns = round(seconds * SECOND)
    handle_s = settle_s = render_s = decode_s = 0.0
    messages = renders = exposition_bytes = 0
    judged = []
    now = EPOCH
    next_scrape = EPOCH + SCRAPE_NS
    while now < EPOCH + simulated_ns:
        now += TICK_NS
        batch = fleet.until(now)
        messages += len(batch)
        began = time.perf_counter()
        for _, _, body in batch:
            json.loads(body)
        decode_s += time.perf_counter() - began
        began = time.perf_counter()
        for arrival, topic, body in batch:
            watch.handle(topic, body, arrival)
        handle_s += time.perf_counter() - began
        began = time.perf_counter()
        judged += watch.settle(now)
        settle_s += time.perf_counter() - began
        if now >= next_scrape:
            next_scrape += SCRAPE_NS
            began = time.perf_counter()
            exposition_bytes = len(generate_latest(registry))
            render_s += time.perf_counter() - began
            renders += 1
    processing = handle_s + settle_s + render_s
    called = [j.verdict for j in judged]
    late_steps = sum(1 for v in called if set(v.stragglers) & fleet.late)
    wrong = sum(1 for v in called for host in v.stragglers if host not in fleet.late)
    ratio = processing / seconds
    return {
        "benchmark": "stragglers",
        "nodes": nodes,
        "simulated_seconds": seconds,
        "moe_iteration_period_seconds": round(period_ns / 1e9, 4),
        "summaries_per_iteration_per_node": round(len(template) / TEMPLATE_ITERATIONS, 3),
        "summaries_per_second": round(messages / seconds, 1),
        "messages": messages,
        "judged_steps": len(judged),
        "nodes_per_judged_step": round(float(np.mean([len(v.nodes) for v in called])), 1)
        if called
        else 0,
        "injected_stragglers": len(fleet.late),
        "judged_steps_with_an_injected_straggler_called": late_steps,
        "on_time_nodes_called_stragglers": wrong,
        "handle_seconds": round(handle_s, 3),
        "settle_seconds": round(settle_s, 3),
        "render_seconds": round(render_s, 3),
        "exposition_renders": renders,
        "exposition_bytes": exposition_bytes,
        "processing_seconds": round(processing, 3),
        "decode_only_seconds": round(decode_s, 3),
        "reference": "real time: the simulated seconds the summaries span, in this run",
        "ratio_vs_real_time": round(ratio, 4),
        "target_ratio_at_most": 1.0,
        "target_met": ratio <= 1.0,
        "cpu_affinity": sorted(os.sched_getaffinity(0)),
        "cpus": os.cpu_count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=FLEET_NODES)
    parser.add_argument("--seconds", type=float, default=300.0, help="simulated seconds")
    parser.add_argument(
        "--stragglers", type=int, default=6, help="nodes 5 ms late in every other step"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    if args.nodes < 3:
        parser.error("--nodes must be at least 3: a step needs three nodes to be judged")
    if not 1 <= args.seconds <= 86_400:
        parser.error("--seconds must be between 1 and 86400")
    if not 0 <= args.stragglers < args.nodes / 2:
        parser.error("--stragglers must be at least 0 and fewer than half the nodes")
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[0]})  # one core, as the target says
    result = measure(args.nodes, args.seconds, args.stragglers, args.seed)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{args.nodes} nodes, {args.seconds:g} simulated s, {result['messages']} summaries "
            f"({result['summaries_per_second']}/s): {result['processing_seconds']} s on one "
            f"core, {result['ratio_vs_real_time']}x real time (target <= 1); "
            f"{result['judged_steps']} steps judged"
        )
    return 0 if result["target_met"] else 1


if __name__ == "__main__":
    sys.exit(main())
