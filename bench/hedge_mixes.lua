-- The latency mixes of make bench-hedge (bench/hedge.lua), read by the
-- bench and by the upstream (bench/hedge_app.lua).  Each mix: its
-- load (rate requests/s for seconds per route), the upstream's
-- answers, the routes run, and the targets (issue 32) checked.
--   fast, slow, share   each copy takes `fast`, or `slow` for a seeded
--                       share of (request, copy) pairs
--   queue               { slots, mean }: one queue of `slots` in the
--                       upstream, service times exponential of `mean`
--                       seconds (seeded); a copy waits its turn
--   peers               n peers; peer_queue[i]: peer i's queue (the
--                       others answer as fast/slow say)
--   calm                a calm run first (same budget, pace and
--                       estimator: the slow episode starts after it)
--   down                the upstream is down: every connect is refused
--                       (the front counts its connects)
local M = {
  { name = "c5", what = "5% of copies at 200 ms (the budget's half)",
    rate = 300, seconds = 8, fast = 0.002, slow = 0.2, share = 0.05,
    routes = { "none", "fixed", "adaptive" }, cut = 0.15 },
  { name = "b10", what = "10% at 50 ms (the budget's whole percent)",
    rate = 300, seconds = 8, fast = 0.002, slow = 0.05, share = 0.10,
    routes = { "none", "fixed", "adaptive" }, never_worse = true },
  { name = "slow", what = "every answer 300 ms (an episode, after a "
      .. "calm run of 2 ms answers)",
    rate = 100, seconds = 8, fast = 0.3, slow = 0.3, share = 0,
    calm = { rate = 100, seconds = 4, fast = 0.002 },
    routes = { "none", "fixed", "adaptive" }, never_worse = true,
    windows = true },
  { name = "queue", what = "one queue of 2 slots, 10 ms mean service, "
      .. "driven at 85%",
    rate = 170, seconds = 8, queue = { slots = 2, mean = 0.010 },
    routes = { "none", "fixed", "adaptive" }, never_worse = true },
  { name = "peers", what = "4 peers, one of them a queue of 1 slot "
      .. "(18 ms mean, at 90%), the others 2 ms",
    rate = 200, seconds = 8, fast = 0.002, slow = 0.002, share = 0,
    peers = 4, peer_queue = { [1] = { slots = 1, mean = 0.018 } },
    routes = { "none", "fixed", "adaptive" }, cut = 0.2 },
  { name = "down", what = "the upstream down for 10 s (every connect "
      .. "refused)",
    rate = 200, seconds = 10, down = true,
    routes = { "none", "fixed", "adaptive" } },
}
for _, m in ipairs(M) do M[m.name] = m end
return M
