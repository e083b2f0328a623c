"""Benchmark: the floor of a cold wait (not a test; it sends no traffic, it computes).

Usage: python3 benches/cold_floor.py [DURATION=1.3] [CLIENT_MS=16] [ROUNDS=8]

How late must a wait be, at best, when all it knows of a task's duration is what the node lists?
PVE lists a finished task's `starttime` and `endtime` in whole seconds, so (module docs of
src/pve/task_prior.rs) a task of `d` seconds lists `⌊d⌋ + 1` with probability `frac(d)` and `⌊d⌋`
otherwise. Until a status poll finds the task stopped, a poll only says "running", so the polls of
a wait are a fixed sequence chosen up front, under the poll bound of src/pve/task_wait.rs (the
m-th poll no earlier than (m − 4) / 2 s). Lateness is the time from the task's end to the first
poll at or after it.

For n = 1 … ROUNDS listed tasks (the latency benchmark's cold rounds see 1, 2, … of them) this
computes, exactly (a dynamic program over a grid of poll times, no cost per poll, no other request
counted against the bound), two floors:

- "listing only": the placement that is best on average over every duration the listed seconds
  allow (a flat prior on (0, max D + 1) and the exact likelihood of the listings, no tempering,
  no floor), evaluated for true durations within ±0.1 s of DURATION (a rule cannot tell these
  apart from the listing, so one of them is as likely as another). No rule that sees only the
  listing does better on average over all durations; at DURATION it can only by being tuned to it.
- "told the second": the same when the rule is also told that the duration lies in
  [⌊DURATION⌋, ⌊DURATION⌋ + 1), averaged over that second. This is a lower bound for the average
  over that second of any rule whatever.

Then the mean over the rounds, and the ratio to the limit (DURATION) once the client's own cost
(CLIENT_MS: time scale 0 of benches/provision_latency.py) is added. Prints Markdown.
"""

import math
import sys

GRID = 400  # poll times on (0, horizon]


def bound_ok(m, t):
    """True when the m-th poll of a wait (1-based) may be made t seconds after its start."""
    return m <= 4 + 2 * t + 1e-9


def placement(weights, step, most=12):
    """Poll times (seconds) minimising the expected lateness under `weights` (the probability
    that the task ends in grid cell i, i.e. in (i·step, (i+1)·step]), the last at the end of the
    last cell that has any."""
    n = max(i for i, w in enumerate(weights) if w > 0) + 1
    times = [(i + 1) * step for i in range(n)]
    mass, moment = [0.0], [0.0]
    for i, w in enumerate(weights):
        mass.append(mass[-1] + w)
        moment.append(moment[-1] + w * (i + 0.5) * step)
    first = next(i for i in range(n) if weights[i] > 0)

    def late(a, b):
        """Expected lateness of the ends after poll a (None: the start) noticed by poll b."""
        m0, s0 = (mass[a + 1], moment[a + 1]) if a is not None else (0.0, 0.0)
        return times[b] * (mass[b + 1] - m0) - (moment[b + 1] - s0)

    best = [[math.inf] * n for _ in range(most + 1)]
    back = [[None] * n for _ in range(most + 1)]
    for b in range(first, n):
        if bound_ok(1, times[b]):
            best[1][b] = late(None, b)
    for m in range(2, most + 1):
        for b in range(first, n):
            if not bound_ok(m, times[b]):
                continue
            for a in range(first, b):
                v = best[m - 1][a] + late(a, b)
                if v < best[m][b]:
                    best[m][b], back[m][b] = v, a
    m = min(range(1, most + 1), key=lambda k: best[k][n - 1])
    b, polls = n - 1, []
    while b is not None and m >= 1:
        polls.append(times[b])
        b, m = back[m][b], m - 1
    return sorted(polls)


def lateness(polls, d):
    return min((t for t in polls if t >= d), default=math.inf) - d


def listing_probability(listed, d):
    """P(the listed whole-second durations | a task of d seconds), phases independent."""
    p = 1.0
    for big_d in listed:
        p *= max(0.0, 1.0 - abs(d - big_d))
    return p


def floors(duration, n):
    whole = math.floor(duration)
    truths = [duration - 0.1 + 0.01 * i for i in range(21)]
    second = [whole + (i + 0.5) / 100 for i in range(100)]
    listing_only = told = 0.0
    for up in range(n + 1):
        listed = [whole] * (n - up) + [whole + 1] * up
        horizon = whole + 2
        step = horizon / GRID
        cells = [(i + 0.5) * step for i in range(GRID)]
        prior = [listing_probability(listed, c) for c in cells]
        told_prior = [p if whole <= c < whole + 1 else 0.0 for p, c in zip(prior, cells)]
        for weights, truth, acc in ((prior, truths, 'listing'), (told_prior, second, 'told')):
            total = sum(weights)
            if total == 0:
                continue
            polls = placement([w / total for w in weights], step)
            late = sum(listing_probability(listed, d) * math.comb(n, up) * lateness(polls, d)
                       for d in truth) / len(truth)
            if acc == 'listing':
                listing_only += late
            else:
                told += late
    return listing_only, told


def main():
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 1.3
    client = (float(sys.argv[2]) if len(sys.argv) > 2 else 16.0) / 1000
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    print('| listed tasks | floor, listing only | floor, told the second |')
    print('|---|---|---|')
    sums = [0.0, 0.0]
    for n in range(1, rounds + 1):
        a, b = floors(duration, n)
        sums[0] += a
        sums[1] += b
        print('| {0} | {1:.1f} ms | {2:.1f} ms |'.format(n, a * 1000, b * 1000), flush=True)
    a, b = sums[0] / rounds, sums[1] / rounds
    print('| mean of 1–{0} | {1:.1f} ms | {2:.1f} ms |'.format(rounds, a * 1000, b * 1000))
    print('| wall / limit at {0} s, client {1:.0f} ms | {2:.3f}× | {3:.3f}× |'.format(
        duration, client * 1000, 1 + (a + client) / duration, 1 + (b + client) / duration))


if __name__ == '__main__':
    main()
