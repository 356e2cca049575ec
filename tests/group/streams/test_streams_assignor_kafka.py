"""kgc's sticky task assignor against Kafka 4.4's own, on seeded random cases.

Kafka's ``StickyTaskAssignor`` (the group-coordinator jar) runs in one JVM through
``kgc.streams.StreamsAssignorCases`` (tests/jvm), which reads the cases as JSON lines and
prints each member's active and standby tasks. Every case must come out equal, placement for
placement: ties included, which Kafka resolves by its heaps' and HashMaps' order.

The cases are sequences of a group's epochs: a first assignment, then members joining (on new
or existing processes), leaving, the standby count changing and subtopologies growing, each
step's previous targets being the step before's answer; some members report task offsets
(cold-start stickiness), some carry previous targets for tasks that no longer exist. Member
and process ids are random strings of random length, so Java's hash order varies; a few large
groups make Java's tables resize.
"""

from __future__ import annotations

import json
import random
import string
import subprocess
from typing import Any

import pytest
from support.kafkaserver import java_command

from coordinator.group.streams.assignor import AssignmentMember, SubtopologySpec, assign

pytestmark = pytest.mark.kafka

SEQUENCES = 100
STEPS = 4

Case = dict[str, Any]


def _id(rng: random.Random, prefix: str, used: set[str]) -> str:
    """A fresh id: member ids are unique in a group, as process ids of distinct processes."""
    while True:
        n = rng.choice((1, 3, 8, 22, 36))
        out = prefix + "".join(rng.choices(string.ascii_letters + string.digits + "-_", k=n))
        if out not in used:
            used.add(out)
            return out


def _subtopologies(rng: random.Random) -> list[dict[str, Any]]:
    ids = rng.sample([str(i) for i in range(14)], rng.randint(1, 4))
    return [
        {"id": i, "tasks": rng.randint(1, 9), "stateful": rng.random() < 0.6}
        for i in sorted(ids, key=int)
    ]


def _offsets(rng: random.Random, subs: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for s in subs:
        if s["stateful"] and rng.random() < 0.5:
            parts = rng.sample(range(s["tasks"]), rng.randint(0, s["tasks"]))
            if parts:
                out[s["id"]] = {
                    str(p): rng.choice((0, 5, 5, 100, rng.randint(0, 10**6))) for p in parts
                }
    return out


def _kgc(case: Case) -> dict[str, dict[str, dict[str, list[int]]]]:
    members = [
        AssignmentMember(
            m["id"],
            m["process"],
            m.get("active", {}),
            m.get("standby", {}),
            {s: {int(p): o for p, o in ps.items()} for s, ps in m.get("offsets", {}).items()},
        )
        for m in case["members"]
    ]
    subs = [SubtopologySpec(s["id"], s["tasks"], s["stateful"]) for s in case["subtopologies"]]
    got = assign(members, subs, case["standbys"])
    return {
        mid: {
            "active": {s: ps for s, ps in sorted(t.active.items()) if ps},
            "standby": {s: ps for s, ps in sorted(t.standby.items()) if ps},
        }
        for mid, t in sorted(got.items())
    }


def _sequence(rng: random.Random, big: bool) -> list[Case]:
    used: set[str] = set()
    subs = _subtopologies(rng)
    if big:
        for s in subs:
            s["tasks"] = rng.randint(10, 40)
    n_processes = rng.randint(8, 20) if big else rng.randint(1, 5)
    processes = [_id(rng, "p", used) for _ in range(n_processes)]
    n_members = rng.randint(n_processes, 3 * n_processes) if big else rng.randint(1, 8)
    members: list[dict[str, Any]] = [
        {"id": _id(rng, "", used), "process": processes[i % n_processes]} for i in range(n_members)
    ]
    standbys = rng.choice((0, 0, 1, 1, 2))
    cases: list[Case] = []
    for step in range(STEPS):
        if step == 0 and rng.random() < 0.3:
            # Previous targets from elsewhere: stale tasks, ones beyond the partition count.
            for m in members:
                s = rng.choice(subs)
                m["active"] = {s["id"]: rng.sample(range(s["tasks"] + 2), 2)}
        for m in members:
            if rng.random() < 0.25:
                m["offsets"] = _offsets(rng, subs)
        case = {
            "standbys": standbys,
            "subtopologies": [dict(s) for s in subs],
            "members": [json.loads(json.dumps(m)) for m in members],
        }
        cases.append(case)
        result = _kgc(case)
        for m in members:
            m["active"] = result[m["id"]]["active"]
            m["standby"] = result[m["id"]]["standby"]
            m.pop("offsets", None)
        event = rng.random()
        if event < 0.35:
            process = rng.choice(processes) if rng.random() < 0.5 else _id(rng, "p", used)
            processes.append(process)
            members.insert(
                rng.randint(0, len(members)), {"id": _id(rng, "", used), "process": process}
            )
        elif event < 0.6 and len(members) > 1:
            members.pop(rng.randrange(len(members)))
        elif event < 0.75:
            standbys = rng.choice((0, 1, 2, 3))
        elif event < 0.85:
            rng.choice(subs)["tasks"] += rng.randint(1, 4)
        else:
            rng.shuffle(members)
    return cases


def test_assignor_equals_kafka_on_random_cases() -> None:
    cases: list[Case] = []
    for seed in range(SEQUENCES):
        cases.extend(_sequence(random.Random(seed), big=seed % 10 == 9))
    assert len(cases) >= 200
    expected = [_kgc(c) for c in cases]
    done = subprocess.run(
        java_command("kgc.streams.StreamsAssignorCases"),
        input="".join(json.dumps(c) + "\n" for c in cases),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    kafka = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(kafka) == len(cases), done.stderr
    differ = [i for i, (k, e) in enumerate(zip(kafka, expected, strict=True)) if k != e]
    assert not differ, (
        f"{len(differ)} of {len(cases)} cases differ; first: {json.dumps(cases[differ[0]])}\n"
        f"kafka: {kafka[differ[0]]}\nkgc:   {expected[differ[0]]}"
    )
