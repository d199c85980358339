#!/usr/bin/env python3
"""An independent run of the blog's herd model, to check bench/herd.lua.

The model of "Exponential Backoff And Jitter" (Marc Brooker, AWS
Architecture Blog, 2015), written again from its description with the
blog's formulas and Python's own random numbers: nothing is shared with
bench/herd.lua or the backoff module.  Times in milliseconds.

    python3 bench/herd_reference.py [--runs 100] [--clients 50,100,190]
                                    [--csv build/herd.csv]

With --csv (the file `make bench` writes), each figure is printed next to
the module's and the relative difference.  Standard library only.
"""
import argparse
import csv
import heapq
import random

BASE, CAP = 5.0, 2000.0


def hop():
    return abs(random.normalvariate(10.0, 2.0))


def expo(n):
    return min(CAP, BASE * 2.0 ** n)


def no_backoff(_state, _n):
    return 0.0


def exponential(_state, n):
    return expo(n)


def full_jitter(_state, n):
    return random.uniform(0, expo(n))


def equal_jitter(_state, n):
    v = expo(n)
    return v / 2 + random.uniform(0, v / 2)


def decorrelated(state, _n):
    state[0] = min(CAP, random.uniform(BASE, state[0] * 3))
    return state[0]


# names as in the CSV of bench/herd.lua
STRATEGIES = [("none", no_backoff), ("exponential", exponential),
              ("full jitter", full_jitter), ("equal jitter", equal_jitter),
              ("decorrelated", decorrelated)]

READ, READ_RSP, WRITE, WRITE_RSP = range(4)


def simulate(clients, backoff):
    """One run: (write calls, time of the last event)."""
    queue, order = [], 0
    failures = [0] * clients
    state = [[BASE] for _ in range(clients)]
    for c in range(clients):
        heapq.heappush(queue, (hop(), order, c, READ, None))
        order += 1
    version, writes, now = 0, 0, 0.0
    while queue:
        now, _, c, kind, value = heapq.heappop(queue)
        if kind == READ:
            nxt = (now + hop(), READ_RSP, version)
        elif kind == READ_RSP:
            nxt = (now + hop(), WRITE, value)
        elif kind == WRITE:
            writes += 1
            ok = value == version
            if ok:
                version += 1
            nxt = (now + hop(), WRITE_RSP, ok)
        elif value:
            continue                    # this client is done
        else:
            failures[c] += 1
            nxt = (now + hop() + backoff(state[c], failures[c]), READ, None)
        heapq.heappush(queue, (nxt[0], order, c, nxt[1], nxt[2]))
        order += 1
    return writes, now


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--clients", default="10,50,100,150,190")
    ap.add_argument("--csv", help="bench/herd.lua's CSV to compare with")
    ap.add_argument("--seed", type=int, default=2015)
    args = ap.parse_args()
    random.seed(args.seed)

    module = {}
    if args.csv:
        with open(args.csv) as f:
            for row in csv.DictReader(f):
                module[(int(row["clients"]), row["strategy"])] = (
                    float(row["work"]), float(row["time_ms"]))

    print("%7s %-13s %10s %10s %7s %10s %10s %7s" % (
        "clients", "strategy", "work", "module", "diff", "time ms",
        "module", "diff"))
    for n in (int(x) for x in args.clients.split(",")):
        for name, backoff in STRATEGIES:
            work = time = 0.0
            for _ in range(args.runs):
                w, t = simulate(n, backoff)
                work, time = work + w, time + t
            work, time = work / args.runs, time / args.runs
            theirs = module.get((n, name))
            if theirs:
                print("%7d %-13s %10.1f %10.1f %+6.1f%% %10.1f %10.1f %+6.1f%%"
                      % (n, name, work, theirs[0],
                         100 * (theirs[0] - work) / work, time, theirs[1],
                         100 * (theirs[1] - time) / time))
            else:
                print("%7d %-13s %10.1f %10s %7s %10.1f" % (
                    n, name, work, "-", "", time))


if __name__ == "__main__":
    main()
