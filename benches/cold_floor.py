"""Benchmark: the floor of a cold wait (not a test; it sends no traffic, it computes).

Usage: python3 benches/cold_floor.py [DURATION=1.3] [CLIENT_MS=16] [ROUNDS=8]

DURATION (seconds, at least 1.1 and at least 0.1 s from a whole second) is the task's duration,
CLIENT_MS the client's own cost (time scale 0 of benches/provision_latency.py), ROUNDS the number
of cold rounds (the latency benchmark's cold rounds see 1, 2, … listed tasks).

How late must a wait be when all it knows of a task's duration is what the node lists? PVE lists
a finished task's `starttime` and `endtime` in whole seconds, so (module docs of
src/pve/task_prior.rs) a task of `d` seconds lists `⌊d⌋ + 1` with probability `frac(d)` and `⌊d⌋`
otherwise. Until a status poll finds the task stopped, a poll only says "running", so the polls of
a wait are a fixed sequence chosen up front, under the poll bound of src/pve/task_wait.rs (the
m-th poll no earlier than (m − 4) / 2 s). Lateness is the time from the task's end to the first
poll at or after it.

For n = 1 … ROUNDS listed tasks this places polls exactly (a dynamic program over a 5 ms grid of
poll times, no cost per poll, no other request counted against the bound: more freedom than the
client has) for two rules, and gives their expected lateness for true durations within ±0.1 s of
DURATION, which the listing cannot tell apart:

- "listing only": the placement best on average over every duration the listed seconds allow (a
  flat prior on (0, max D + 1) and the exact likelihood of the listings: no tempering, no flat
  floor). No rule that sees only the listing does better on average over all durations; near
  DURATION one can only by being tuned to it.
- "told the second": the same rule also told that the duration lies in
  [⌊DURATION⌋, ⌊DURATION⌋ + 1) — knowledge no client has — to show how little more that buys.

Then the mean over the rounds, and the ratio to the limit (DURATION) once CLIENT_MS is added.
Prints Markdown.
"""

import math
import sys

CELLS_PER_SECOND = 200  # a 5 ms grid of poll times, aligned to whole seconds
USAGE = 'usage: python3 benches/cold_floor.py [DURATION=1.3] [CLIENT_MS=16] [ROUNDS=8]'


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
    """Expected lateness (seconds) of the two rules with n listed tasks, near `duration`."""
    whole = math.floor(duration)
    truths = [duration - 0.1 + 0.01 * i for i in range(21)]
    step = 1 / CELLS_PER_SECOND
    cells = [(i + 0.5) * step for i in range((whole + 2) * CELLS_PER_SECOND)]
    listing_only = told = 0.0
    for up in range(n + 1):
        listed = [whole] * (n - up) + [whole + 1] * up
        prior = [listing_probability(listed, c) for c in cells]
        told_prior = [p if whole <= c < whole + 1 else 0.0 for p, c in zip(prior, cells)]
        for weights, rule in ((prior, 'listing'), (told_prior, 'told')):
            total = sum(weights)
            polls = placement([w / total for w in weights], step)
            late = sum(listing_probability(listed, d) * math.comb(n, up) * lateness(polls, d)
                       for d in truths) / len(truths)
            if rule == 'listing':
                listing_only += late
            else:
                told += late
    return listing_only, told


def arguments(argv):
    """(duration, client seconds, rounds) from the command line; exits with the usage on bad ones."""
    def bad(why):
        print('{0}\n{1}'.format(why, USAGE), file=sys.stderr)
        sys.exit(2)
    if any(a in ('-h', '--help') for a in argv):
        print(USAGE)
        sys.exit(0)
    if len(argv) > 3:
        bad('at most three arguments')
    try:
        duration = float(argv[0]) if argv else 1.3
        client = float(argv[1]) if len(argv) > 1 else 16.0
        rounds = int(argv[2]) if len(argv) > 2 else 8
    except ValueError as e:
        bad('not a number: {0}'.format(e))
    frac = duration - math.floor(duration)
    if not (duration >= 1.1 and 0.1 <= frac <= 0.9 and math.isfinite(duration)):
        bad('DURATION must be at least 1.1 s and at least 0.1 s from a whole second (under a second, '
            'the client polls as for an unknown duration; near a whole second the ±0.1 s window '
            'crosses it): {0}'.format(duration))
    if not (client >= 0 and math.isfinite(client)):
        bad('CLIENT_MS must be 0 or more: {0}'.format(client))
    if rounds < 1:
        bad('ROUNDS must be 1 or more: {0}'.format(rounds))
    return duration, client / 1000, rounds


def main():
    duration, client, rounds = arguments(sys.argv[1:])
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
