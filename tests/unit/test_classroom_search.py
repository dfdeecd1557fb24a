"""The largest-class search of benchmarks/load_classroom.py (--search), with fake probes instead of
classes against a server: the growth, the bisection, the confirmation and the limits."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load():
    # benchmarks/ is not a package: the script imports its sibling `fixtures` as a top-level module
    sys.path.insert(0, str(_BENCH))
    try:
        spec = importlib.util.spec_from_file_location("load_classroom", _BENCH / "load_classroom.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(_BENCH))


lc = _load()


class Fake:
    """A probe: passes up to `limit` students, except where `script` says otherwise for the k-th
    probe of a count (a noisy result); refuses to be called more than `budget` times."""

    def __init__(self, limit: int, script: dict[tuple[int, int], bool] | None = None, budget: int = 100):
        self.limit, self.script, self.budget = limit, script or {}, budget
        self.calls: list[int] = []

    def __call__(self, n: int) -> bool:
        assert n >= 1, n
        self.calls.append(n)
        assert len(self.calls) <= self.budget, "more probes than allowed"
        return self.script.get((n, self.calls.count(n)), n <= self.limit)


def check_consistent(found, fake: Fake) -> None:
    """What any answer must satisfy: the probes reported are the ones run, the answer passed,
    and every count that failed is above it."""
    assert [n for n, _ in found.probes] == fake.calls
    fails = [n for n, ok in found.probes if not ok]
    assert all(n > found.answer for n in fails), (found.answer, found.probes)
    assert found.lowest_fail == (min(fails) if fails else None)
    if found.answer:
        assert (found.answer, True) in found.probes


def test_the_exact_probes_for_a_threshold_of_34():
    fake = Fake(34)
    found = lc.search_largest(fake)
    # 5, 10, 20 pass, 40 fails; bisect 30 (pass), 35 (fail), 32 (pass): 32..35 within 10 %; 32 again
    assert fake.calls == [5, 10, 20, 40, 30, 35, 32, 32]
    assert (found.answer, found.lowest_fail, found.reason) == (32, 35, "resolved")
    check_consistent(found, fake)


@pytest.mark.parametrize("limit", list(range(1, 130)) + [199, 200, 201, 457, 1000])
def test_a_monotone_threshold_is_found_within_the_resolution(limit):
    fake = Fake(limit, budget=30)
    found = lc.search_largest(fake, max_probes=30)
    check_consistent(found, fake)
    assert found.reason == "resolved"
    assert found.answer <= limit < found.lowest_fail
    assert found.lowest_fail - found.answer <= max(2, 0.10 * found.answer)
    assert fake.calls.count(found.answer) == 2  # confirmed
    assert found.answer - limit <= 0 and limit - found.answer <= max(2, 0.10 * found.answer)


def test_a_finer_resolution_finds_the_exact_threshold():
    for limit in (7, 34, 61, 250):
        fake = Fake(limit)
        found = lc.search_largest(fake, resolution=0.0, abs_resolution=1, max_probes=40, confirm=False)
        assert (found.answer, found.lowest_fail) == (limit, limit + 1)
        assert len(set(fake.calls)) == len(fake.calls)  # no count probed twice without confirm


def test_a_lucky_pass_above_the_limit_is_caught_by_the_confirmation():
    # the limit is 30, but 35 passes on its first try
    script = {(35, 1): True}
    fake = Fake(30, script)
    found = lc.search_largest(fake)
    check_consistent(found, fake)
    assert fake.calls == [5, 10, 20, 40, 30, 35, 37, 35, 32, 30]
    assert (found.answer, found.lowest_fail, found.reason) == (30, 32, "resolved")
    # without the confirmation the lucky 35 would stand
    fake = Fake(30, script)
    found = lc.search_largest(fake, confirm=False)
    assert found.answer == 35
    check_consistent(found, fake)


def test_a_noisy_fail_below_the_limit_only_lowers_the_answer():
    # the limit is 60, but 20 fails on its first try: the answer stays below every fail
    fake = Fake(60, {(20, 1): False})
    found = lc.search_largest(fake)
    check_consistent(found, fake)
    assert found.answer < 20 and found.lowest_fail == 20 and found.reason == "resolved"
    assert found.answer >= 17  # bisected between 10 and 20 to within 2


@pytest.mark.parametrize("seed", range(200))
def test_random_noise_never_gives_an_answer_a_probe_contradicts(seed):
    rng = random.Random(seed)
    limit = rng.randint(0, 150)
    p_flip = rng.choice([0.05, 0.2, 0.5])
    calls: list[int] = []

    def noisy(n: int) -> bool:
        calls.append(n)
        ok = n <= limit
        return (not ok) if rng.random() < p_flip else ok

    max_probes = rng.randint(1, 20)
    found = lc.search_largest(noisy, start=rng.randint(1, 10), max_probes=max_probes,
                              max_students=rng.choice([None, 50, 200]), confirm=rng.random() < 0.7)
    assert len(calls) <= max_probes
    assert [n for n, _ in found.probes] == calls
    assert all(n > found.answer for n, ok in found.probes if not ok)
    if found.answer:
        assert (found.answer, True) in found.probes
    else:
        assert found.reason in ("none passed", "probe limit")
    if found.reason == "resolved":
        assert found.lowest_fail - found.answer <= max(2, 0.10 * found.answer)


def test_all_pass_up_to_the_cap():
    fake = Fake(10_000)
    found = lc.search_largest(fake, max_students=50)
    assert fake.calls == [5, 10, 20, 40, 50, 50]
    assert (found.answer, found.lowest_fail, found.reason) == (50, None, "capped")
    line = lc.answer_line(found, 1.0, 1)
    assert "at least 50 students" in line


def test_the_cap_failing_on_its_second_try_bisects_below_it():
    fake = Fake(10_000, {(50, 2): False})
    found = lc.search_largest(fake, max_students=50)
    check_consistent(found, fake)
    assert found.reason == "resolved" and 40 <= found.answer < 50 and found.lowest_fail == 50


def test_all_pass_without_a_cap_stops_at_the_probe_limit():
    fake = Fake(10_000, budget=6)
    found = lc.search_largest(fake, max_probes=6)
    assert fake.calls == [5, 10, 20, 40, 80, 160]
    assert (found.answer, found.lowest_fail, found.reason) == (160, None, "probe limit")
    assert "not resolved" in lc.answer_line(found, 1.0, 1)


def test_the_first_probe_fails():
    fake = Fake(3)
    found = lc.search_largest(fake)
    assert fake.calls == [5, 2, 3, 3]  # below 5: bisect from nothing
    assert (found.answer, found.lowest_fail, found.reason) == (3, 5, "resolved")


def test_nothing_passes():
    fake = Fake(0)
    found = lc.search_largest(fake)
    assert fake.calls == [5, 2, 1]
    assert (found.answer, found.lowest_fail, found.reason) == (0, 1, "none passed")
    assert lc.answer_line(found, 1.0, 2) == "largest class with p99 < 1.0 s and no errors: none (1 student failed) " \
                                            "(2 processes)"


def test_the_probe_limit_mid_bisection_and_before_confirming():
    fake = Fake(34, budget=5)
    found = lc.search_largest(fake, max_probes=5)
    assert fake.calls == [5, 10, 20, 40, 30]
    assert (found.answer, found.lowest_fail, found.reason) == (30, 40, "probe limit")
    fake = Fake(34, budget=7)
    found = lc.search_largest(fake, max_probes=7)
    assert (found.answer, found.lowest_fail, found.reason) == (32, 35, "unconfirmed")
    assert "not confirmed" in lc.answer_line(found, 1.0, 1)
    found = lc.search_largest(Fake(3), max_probes=1)
    assert (found.answer, found.lowest_fail, found.reason) == (0, 5, "probe limit")
    assert lc.answer_line(found, 1.0, 1).endswith(": no pass yet, not resolved (5 failed; --max-probes reached) "
                                                  "(1 process)")


def test_bad_arguments():
    for kw in ({"start": 0}, {"factor": 1.0}, {"max_probes": 0}, {"max_students": 0}):
        with pytest.raises(ValueError):
            lc.search_largest(Fake(10), **kw)


def _res(p99_ms=500, errors=0, busy=0, unfinished=0, answered=100):
    return {"answered": answered, "overall": {"p50_ms": 100, "p99_ms": p99_ms} if answered else {},
            "errors_total": errors, "busy_503_total": busy, "unfinished_students": unfinished}


def test_what_passes():
    assert lc.probe_passes(_res(), 1.0)
    assert lc.probe_passes(_res(busy=40), 1.0)  # 503s retried after Retry-After are not errors
    assert lc.probe_passes(_res(p99_ms=999), 1.0)
    assert not lc.probe_passes(_res(p99_ms=1000), 1.0)  # under the limit, not at it
    assert not lc.probe_passes(_res(p99_ms=1500), 1.0)
    assert lc.probe_passes(_res(p99_ms=1500), 2.0)
    assert not lc.probe_passes(_res(errors=1), 1.0)
    assert not lc.probe_passes(_res(unfinished=1), 1.0)
    assert not lc.probe_passes(_res(answered=0), 1.0)


def test_the_answer_line_and_the_process_count():
    found = lc.SearchResult(34, 37, "resolved", [])
    assert lc.answer_line(found, 1.0, 1) == "largest class with p99 < 1.0 s and no errors: 34 students (1 process)"
    assert lc.answer_line(found, 0.5, 2).endswith(": 34 students (2 processes)")
    assert lc.server_processes([]) == 1
    assert lc.server_processes(["--workers=2"]) == 2
    assert lc.server_processes(["--queue=8", "--workers", "3"]) == 3


def test_a_table_row():
    res = {**_res(p99_ms=1097, busy=3), "students": 20, "requests_per_s": 8.853, "server_peak_rss_mb": 1310,
           "load_average_1m": 4.45, "passed": False}
    assert lc.table_row(res).split() == ["20", "8.85", "100", "1097", "0", "3", "1310", "4.5", "FAIL"]
    assert len(lc.TABLE_HEAD.split()) == 9 + 3  # "p50 ms", "p99 ms", "peak MB" are two words each
