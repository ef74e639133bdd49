"""``burstscope rule-placement``: Prometheus' placement of rule groups, predicted and seen.

The prediction (burstscope/rule_placement.py: a hash of the group's name and its file's path,
modulo its interval) is held against a real Prometheus running the shipped rules: every
group's start, as its rules API reports it, is where the hash puts it, and under the names
``--spread`` chooses too. The sweep that counts groups running at once is checked on cases
worked by hand and on properties any placement has.
"""

from __future__ import annotations

import http.server
import json
import math
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burstscope.rule_placement import (
    Group,
    candidate_names,
    crowding,
    groups_from_config,
    parse_prometheus_duration,
    prometheus_offset_s,
    spread,
)
from burstscope.testing.processes import free_port, wait_for
from burstscope.testing.simulated_fleet import (
    Prometheus,
    place_rule_files,
    rule_files,
    running_prometheus,
)
from tests.conftest import require_binary
from tests.test_cli_core import assert_usage_error
from tests.test_cli_core import burstscope as cli

# A rules interval that is no divisor of a minute or of another: a wrong hash could not land
# on the right start by sharing a multiple. Short, so every group runs within the test.
INTERVAL_S = 7
# How late a group may start on a loaded machine (Go's timer and scheduler), seconds.
LATE_S = 0.5


def burstscope(*args: str) -> subprocess.CompletedProcess[str]:
    return cli("rule-placement", *args, timeout=120)


def table(stdout: str) -> dict[tuple[str, str], float]:
    """(group, file) -> its 'at' column, from the first table the command prints."""
    rows: dict[tuple[str, str], float] = {}
    for line in stdout.split("\n\n")[0].splitlines():
        match = re.match(r"^\s*([\d.]+)\s+\S+s\s+[\d.]+\s+\d+\s+(\S+)\s+(\S+)", line)
        if match:
            rows[(match[2], match[3])] = float(match[1])
    return rows


def circular_gap(a: float, b: float, period: float) -> float:
    gap = (a - b) % period
    return min(gap, period - gap)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15s", 15),
        ("1m30s", 90),
        ("5m", 300),
        ("1h", 3600),
        ("2d", 172800),
        ("0", 0),
        ("100ms", 0.1),
        ("1w", 604800),
    ],
)
def test_durations_read_as_prometheus_reads_them(text: str, seconds: float) -> None:
    assert parse_prometheus_duration(text) == seconds


@pytest.mark.parametrize("text", ["15", "1.5s", "s", "", "1s1m", "-5s"])
def test_a_malformed_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        parse_prometheus_duration(text)


def test_two_groups_a_half_second_apart_overlap_by_hand() -> None:
    # Every 15 s, each taking 1 s, starting at 0 and 0.5: they run together 0.5 s of each
    # run, which is 1 evaluation second (two groups) per 15 s cycle, of 2 in all.
    groups = [Group("f", "a", 15, 1.0, 0.0), Group("f", "b", 15, 1.0, 0.5)]
    found = crowding(groups)
    assert (found.cycle_s, found.peak, found.evaluation_s) == (15, 2, 2)
    assert found.beside_s == pytest.approx(1.0)
    # A 30 s group at 14.8 runs beside the second run only of a 15 s group at 0 (at 15):
    # 0.8 s of the 15 s group's run at 15, twice (both groups).
    found = crowding([Group("f", "a", 15, 1.0, 0.0), Group("g", "b", 30, 1.0, 14.8)])
    assert (found.cycle_s, found.peak, found.evaluation_s) == (30, 2, 3)
    assert found.beside_s == pytest.approx(1.6)


def test_an_evaluation_past_the_cycles_end_wraps_to_its_start() -> None:
    # a runs from 9 to 11, that is 9 to 10 and 0 to 1 of each 10 s; b from 0.5 to 1.5:
    # together from 0.5 to 1, two groups.
    found = crowding([Group("f", "a", 10, 2.0, 9.0), Group("f", "b", 10, 1.0, 0.5)])
    assert found.peak == 2
    assert found.beside_s == pytest.approx(1.0)


def test_one_starting_as_another_ends_is_not_beside_it() -> None:
    found = crowding([Group("f", "a", 10, 1.0, 0.0), Group("f", "b", 10, 1.0, 1.0)])
    assert (found.peak, found.beside_s) == (1, 0.0)


groups_strategy = st.lists(
    st.tuples(
        st.sampled_from([5.0, 10.0, 15.0, 30.0]),
        st.floats(0.0, 0.999, allow_nan=False),
        st.floats(0.01, 4.0, allow_nan=False),
    ),
    min_size=1,
    max_size=8,
)


@given(groups_strategy, st.floats(0.0, 30.0, allow_nan=False))
def test_crowding_does_not_depend_on_where_the_cycle_starts(
    specs: list[tuple[float, float, float]], shift: float
) -> None:
    groups = [
        Group("f", f"g{i}", interval, seconds, share * interval)
        for i, (interval, share, seconds) in enumerate(specs)
    ]
    moved = [
        Group(g.file, g.name, g.interval_s, g.seconds, (g.at_s + shift) % g.interval_s)
        for g in groups
    ]
    here, there = crowding(groups), crowding(moved)
    assert here.peak == there.peak
    assert here.beside_s == pytest.approx(there.beside_s, abs=1e-6)
    assert 1 <= here.peak <= len(groups) * math.ceil(4.0 / 5.0 + 1)
    assert 0 <= here.beside_s <= here.evaluation_s + 1e-9
    assert (here.peak == 1) == (here.beside_s < 1e-9)


def test_spread_is_never_worse_and_keeps_the_glob(tmp_path: Path) -> None:
    files = [str(tmp_path / "recording.rules.yml"), str(tmp_path / "alerts.rules.yml")]
    names = {files[0]: ["a", "b", "c", "d", "e", "f"], files[1]: ["x", "y", "z"]}
    groups = [
        Group(file, name, 15.0 if name in "abx" else 30.0, 1.0, 0.0).moved(file)
        for file, listed in names.items()
        for name in listed
    ]
    taken = {candidate_names(files[0])[1]}
    renames, moved = spread(groups, files, taken=taken.__contains__)
    assert crowding(moved).score() <= crowding(groups).score()
    for old, new in renames.items():
        assert new.endswith(".rules.yml") and Path(new).parent == Path(old).parent
        assert new not in taken
    for group in moved:
        assert group.at_s == pytest.approx(
            prometheus_offset_s(group.file, group.name, group.interval_s)
        )


def wait_every_group_ran(server: Prometheus) -> None:
    def every_group_ran() -> bool:
        groups = server.get("/api/v1/rules")["data"]["groups"]
        return bool(groups) and all(not g["lastEvaluation"].startswith("0001") for g in groups)

    wait_for(every_group_ran, 4 * INTERVAL_S + 60, "every rule group's first evaluation")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A real Prometheus running the shipped rules files (no targets), every group every
    INTERVAL_S, until each group has run once: its configuration and its URL."""
    binary = require_binary("prometheus")
    directory = tmp_path_factory.mktemp("placement")
    names = rule_files(directory, shorten_for=True, interval=f"{INTERVAL_S}s")
    config = directory / "prometheus.yml"
    config.write_text(
        f"global:\n  evaluation_interval: {INTERVAL_S}s\nrule_files: {json.dumps(names)}\n"
    )
    with running_prometheus(binary, config, directory / "data", free_port()) as server:
        wait_every_group_ran(server)
        yield config, server.url


def test_prometheus_starts_every_group_where_the_hash_says(
    prometheus: tuple[Path, str],
) -> None:
    config, url = prometheus
    predicted = burstscope("--config", str(config))
    seen = burstscope("--url", url)
    assert predicted.returncode == 0 and seen.returncode == 0, (predicted, seen)
    expected, found = table(predicted.stdout), table(seen.stdout)
    assert len(expected) == 14 and set(found) == set(expected), (predicted.stdout, seen.stdout)
    for key, at in expected.items():
        # the server starts a group when its timer fires: at the hash's moment or just after
        late = (found[key] - at) % INTERVAL_S
        assert late < LATE_S or circular_gap(found[key], at, INTERVAL_S) < 0.005, (key, at, found)
    assert "not yet run" not in seen.stdout


def test_spread_names_are_where_prometheus_puts_them(
    prometheus: tuple[Path, str], tmp_path: Path
) -> None:
    """--spread's new names, loaded by the same Prometheus build: every group starts where
    the printed table says."""
    config, _url = prometheus
    result = burstscope("--config", str(config), "--spread")
    assert result.returncode == 0, result
    moves = re.findall(r"^  mv (\S+) (\S+)$", result.stdout, flags=re.MULTILINE)
    assert moves, result.stdout
    # rule_files names the files literally here: each renamed entry is told its new name
    edits = re.findall(r"^  rule_files: (\S+) -> (\S+)$", result.stdout, flags=re.MULTILINE)
    assert edits == [(Path(old).name, Path(new).name) for old, new in moves]
    before = re.search(r"at most (\d+) groups at once; ([\d.]+) of", result.stdout)
    after = re.search(
        r"--spread: with these names, at most (\d+) groups at once; ([\d.]+)", result.stdout
    )
    assert before and after
    assert (int(after[1]), float(after[2])) <= (int(before[1]), float(before[2]))
    # The same files under their new names beside the old ones, as a site would rename
    # them: a second server, its rules API against the printed table.
    spread_table = table(result.stdout.split("--spread:")[1].split("\n\n", 1)[1])
    renamed = {Path(old).name: Path(new).name for old, new in moves}
    binary = require_binary("prometheus")
    directory = config.parent
    copies = []
    for old, new in renamed.items():
        (directory / new).write_text((directory / old).read_text())
        copies.append(new)
    kept = [n for n in ("recording.rules.yml", "alerts.rules.yml") if n not in renamed]
    second = directory / "spread.yml"
    second.write_text(
        f"global:\n  evaluation_interval: {INTERVAL_S}s\nrule_files: {json.dumps(copies + kept)}\n"
    )
    with running_prometheus(binary, second, tmp_path / "data", free_port()) as server:
        wait_every_group_ran(server)
        seen = table(burstscope("--url", server.url).stdout)
    assert set(seen) == set(spread_table)
    for key, at in spread_table.items():
        late = (seen[key] - at) % INTERVAL_S
        assert late < LATE_S or circular_gap(seen[key], at, INTERVAL_S) < 0.005, (key, at, seen)


# Bad input: one line naming the problem, status 2.


def test_a_missing_configuration(tmp_path: Path) -> None:
    assert_usage_error(
        burstscope("--config", str(tmp_path / "nope.yml")), "nope.yml", "cannot read"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("rule_files: [unclosed\n", "is not YAML"),
        ("rule_files: [absent/*.yml]\n", "names no file that exists"),
        ("- a list\n", "is not a Prometheus configuration"),
        ("rule_files: r.rules.yml\n", "rule_files is not a list of paths"),
        ("global: {evaluation_interval: 15}\nrule_files: []\n", "global.evaluation_interval"),
    ],
)
def test_a_bad_configuration(tmp_path: Path, text: str, fragment: str) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_text(text)
    assert_usage_error(burstscope("--config", str(config)), fragment)


def test_a_configuration_that_is_not_text(tmp_path: Path) -> None:
    config = tmp_path / "prometheus.yml"
    config.write_bytes(b"\xff\xfe\x00rule_files")
    assert_usage_error(burstscope("--config", str(config)), "is not a text file")


def test_rules_files_with_no_group(tmp_path: Path) -> None:
    (tmp_path / "r.rules.yml").write_text("groups: []\n")
    config = tmp_path / "prometheus.yml"
    config.write_text("rule_files: [r.rules.yml]\n")
    assert_usage_error(burstscope("--config", str(config)), "no rule groups to place")


@pytest.mark.parametrize(
    ("rules", "fragment"),
    [
        ("groups: 3\n", "is not a rules file"),
        ("groups:\n  - rules: []\n", "a group without a name"),
        ("groups:\n  - name: g\n    interval: 15\n    rules: []\n", "not a Prometheus duration"),
        ("groups:\n  - name: g\n    interval: 0s\n    rules: []\n", "interval 0"),
    ],
)
def test_a_bad_rules_file(tmp_path: Path, rules: str, fragment: str) -> None:
    (tmp_path / "r.rules.yml").write_text(rules)
    config = tmp_path / "prometheus.yml"
    config.write_text("rule_files: [r.rules.yml]\n")
    assert_usage_error(burstscope("--config", str(config)), fragment, "r.rules.yml")


@pytest.mark.parametrize("seconds", ["0", "-1", "abc", "inf", "nan"])
def test_bad_seconds(tmp_path: Path, seconds: str) -> None:
    assert_usage_error(
        burstscope("--config", str(tmp_path / "x.yml"), "--seconds", seconds), "--seconds"
    )


def test_a_server_that_is_not_there() -> None:
    assert_usage_error(burstscope("--url", f"http://127.0.0.1:{free_port()}"), "cannot read")


def test_a_server_that_is_not_prometheus() -> None:
    class NotPrometheus(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"status": "success", "data": {"groups": [{"name": "g"}]}}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotPrometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = burstscope("--url", f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
    assert_usage_error(result, "did not answer as Prometheus' rules API")


def test_spread_with_no_file_of_ours(tmp_path: Path) -> None:
    (tmp_path / "r.rules.yml").write_text("groups:\n  - name: site\n    rules: []\n")
    config = tmp_path / "prometheus.yml"
    config.write_text("rule_files: [r.rules.yml]\n")
    assert_usage_error(
        burstscope("--config", str(config), "--spread"), "no rules file holds only burstscope"
    )


def test_the_fleet_bench_runs_the_rules_under_spread_names(tmp_path: Path) -> None:
    """bench/fleet.py's placement: the files renamed on disk, the configuration naming them,
    and the figures it reports those of what Prometheus will load."""
    names = rule_files(tmp_path, shorten_for=False, interval="15s")
    config = tmp_path / "prometheus.yml"
    config.write_text(f"global:\n  evaluation_interval: 15s\nrule_files: {json.dumps(names)}\n")
    hashed = place_rule_files(config, rename=False)
    assert (
        sorted(hashed["files"]) == sorted(names) and hashed["at_once"] == hashed["at_once_hashed"]
    )
    placed = place_rule_files(config, rename=True)
    assert (placed["at_once"], placed["beside_s"]) <= (
        placed["at_once_hashed"],
        placed["beside_s_hashed"],
    )
    assert (placed["at_once_hashed"], placed["beside_s_hashed"]) == (
        hashed["at_once"],
        hashed["beside_s"],
    )
    groups, _named_by = groups_from_config(str(config), 1.0)
    assert sorted({Path(g.file).name for g in groups}) == sorted(placed["files"])
    assert all((tmp_path / name).exists() for name in placed["files"])
    found = crowding(groups)
    assert (found.peak, round(found.beside_s, 1)) == (placed["at_once"], placed["beside_s"])
