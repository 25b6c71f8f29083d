"""Per (principal, tool) minute and hour windows, with an injected clock."""

from __future__ import annotations

import random
import threading

import pytest

from host import ratelimit
from host.errors import RateLimited
from host.ratelimit import RateLimiter

ALICE, BOB = ("p", "alice"), ("p", "bob")


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def call(limiter: RateLimiter, *, key: tuple[str, str] = ALICE, tool: str = "t.x",
         per_minute: int | None = None, per_hour: int | None = None) -> None:
    limiter.check_and_consume(key, tool, per_minute=per_minute, per_hour=per_hour)


def test_minute_limit_crossed_then_refused_with_retry_after() -> None:
    clock = Clock(1000.0)
    limiter = RateLimiter(clock)
    for _ in range(3):
        call(limiter, per_minute=3)
    clock.now = 1010.0
    with pytest.raises(RateLimited) as info:
        call(limiter, per_minute=3)
    err = info.value
    assert err.code == "RATE_LIMITED"
    assert err.details["window"] == "minute"
    assert err.details["limit"] == 3
    # the three calls at t=1000 (bucket 1000) leave the window when bucket 1061 starts
    assert err.details["retry_after_s"] == pytest.approx(51.0)


def test_call_at_retry_after_is_admitted_and_one_tick_earlier_is_not() -> None:
    clock = Clock(1000.25)
    limiter = RateLimiter(clock)
    for _ in range(2):
        call(limiter, per_minute=2)
    clock.now = 1030.5
    with pytest.raises(RateLimited) as info:
        call(limiter, per_minute=2)
    retry = info.value.details["retry_after_s"]
    clock.now = 1030.5 + retry - 0.01
    with pytest.raises(RateLimited):
        call(limiter, per_minute=2)
    clock.now = 1030.5 + retry
    call(limiter, per_minute=2)


def test_hour_limit_crossed_then_refused() -> None:
    clock = Clock(7200.0)
    limiter = RateLimiter(clock)
    for i in range(5):
        clock.now = 7200.0 + i * 120  # spread out: the minute window never fills
        call(limiter, per_minute=2, per_hour=5)
    clock.now = 7200.0 + 5 * 120
    with pytest.raises(RateLimited) as info:
        call(limiter, per_minute=2, per_hour=5)
    assert info.value.details["window"] == "hour"
    # the first call (bucket 120 of 60 s) leaves when bucket 181 starts: t = 10860
    assert info.value.details["retry_after_s"] == pytest.approx(10860.0 - 7800.0)
    clock.now = 10860.0
    call(limiter, per_minute=2, per_hour=5)


def test_refused_call_is_not_counted() -> None:
    clock = Clock(0.0)
    limiter = RateLimiter(clock)
    call(limiter, per_minute=1, per_hour=2)
    for _ in range(10):
        with pytest.raises(RateLimited):
            call(limiter, per_minute=1, per_hour=2)
    clock.now = 61.0
    call(limiter, per_minute=1, per_hour=2)  # the hour window holds 2, not 12


def test_retry_after_reports_the_longer_window_when_both_are_full() -> None:
    clock = Clock(0.0)
    limiter = RateLimiter(clock)
    call(limiter, per_minute=1, per_hour=1)
    clock.now = 30.0
    with pytest.raises(RateLimited) as info:
        call(limiter, per_minute=1, per_hour=1)
    assert info.value.details["window"] == "hour"
    assert info.value.details["retry_after_s"] == pytest.approx(61 * 60 - 30.0)


@pytest.mark.parametrize(
    ("other_key", "other_tool"),
    [(BOB, "t.x"), (ALICE, "t.y"), (("q", "alice"), "t.x")],
    ids=["other-principal", "other-tool", "same-subject-other-project"],
)
def test_limits_are_per_principal_and_tool(other_key: tuple[str, str], other_tool: str) -> None:
    limiter = RateLimiter(Clock())
    call(limiter, per_minute=1)
    with pytest.raises(RateLimited):
        call(limiter, per_minute=1)
    call(limiter, key=other_key, tool=other_tool, per_minute=1)


def test_no_limits_means_unlimited() -> None:
    limiter = RateLimiter(Clock())
    for _ in range(1000):
        call(limiter)
    assert limiter.tracked_keys() == 0


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "5"], ids=["zero", "negative", "bool", "float", "str"])
def test_invalid_limits_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        call(RateLimiter(Clock()), per_minute=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        call(RateLimiter(Clock()), per_hour=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("limit", [1, 3, 10])
def test_no_sliding_60s_span_ever_exceeds_the_limit(limit: int) -> None:
    rng = random.Random(limit)
    clock = Clock(5000.0)
    limiter = RateLimiter(clock)
    admitted: list[float] = []
    for _ in range(2000):
        clock.now += rng.expovariate(1 / 4.0)
        try:
            call(limiter, per_minute=limit)
        except RateLimited:
            continue
        admitted.append(clock.now)
    assert len(admitted) > limit  # the limit was reached and crossed many times
    for i, t in enumerate(admitted):
        in_window = [u for u in admitted[: i + 1] if u > t - 60.0]
        assert len(in_window) <= limit


def test_expired_keys_are_pruned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ratelimit, "_PRUNE_EVERY", 10)
    clock = Clock(0.0)
    limiter = RateLimiter(clock)
    for n in range(50):
        call(limiter, key=("p", f"u{n}"), per_minute=5)
    assert limiter.tracked_keys() == 50
    clock.now = 62.0
    for _ in range(10):
        call(limiter, key=("p", "late"), per_minute=100)
    assert limiter.tracked_keys() == 1


def test_full_table_of_live_keys_refuses_new_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ratelimit, "MAX_KEYS", 3)
    clock = Clock(0.0)
    limiter = RateLimiter(clock)
    for n in range(3):
        call(limiter, key=("p", f"u{n}"), per_minute=5)
    with pytest.raises(RateLimited):
        call(limiter, key=("p", "new"), per_minute=5)
    call(limiter, key=("p", "u0"), per_minute=5)  # known keys still work
    clock.now = 62.0
    call(limiter, key=("p", "new"), per_minute=5)  # expired keys made room


def test_memory_per_key_is_bounded_whatever_the_limit() -> None:
    clock = Clock(0.0)
    limiter = RateLimiter(clock)
    for i in range(20_000):
        clock.now = i * 0.5
        call(limiter, per_minute=10**6, per_hour=10**9)
    counts = limiter._keys[(ALICE, "t.x")]
    assert len(counts.minute) <= 61 and len(counts.hour) <= 61


def test_concurrent_consumers_never_exceed_the_limit() -> None:
    limiter = RateLimiter(Clock())
    admitted = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(100):
            try:
                call(limiter, per_minute=150)
            except RateLimited:
                continue
            with lock:
                admitted.append(1)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 150
