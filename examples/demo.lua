-- make demo: the backoff module at work, in three short scenes.
local backoff = require "backoff"

local function say(fmt, ...) io.write(fmt:format(...), "\n") end

say("%s on %s%s\n", backoff._VERSION, _VERSION,
    rawget(_G, "jit") and (" / " .. rawget(_G, "jit").version) or "")

------------------------------------------------------------------------
say("1. A flaky operation, retried for real with backoff.retry")
say("   (fails 3 times, then works; exponential from 50 ms, full jitter)\n")

local calls = 0
local function flaky_fetch(attempt)
  calls = calls + 1
  if calls <= 3 then
    return nil, "connection refused (call " .. calls .. ")"
  end
  return "200 OK", attempt
end

local policy = backoff.exponential { initial_delay = 0.05, max_delay = 1,
  jitter = "full", max_attempts = 6 }
local t0 = backoff.now()
local body, attempt = backoff.retry(policy, flaky_fetch, {
  on_retry = function(err, delay, n)
    say("   attempt %d failed: %-32s -> sleeping %.3f s", n, err, delay)
  end,
})
say("   attempt %d: %s, after %.3f s in all\n", attempt, body,
    backoff.now() - t0)

------------------------------------------------------------------------
say("2. Giving up: the operation never works, max_attempts = 4\n")

local ok, err, reason = backoff.retry(
  { strategy = "constant", delay = 0.01, max_attempts = 4 },
  function(n) return nil, "upstream timed out on attempt " .. n end,
  { on_retry = function(e, d) say("   %s; retry in %.2f s", e, d) end })
say("   retry returned: %s, %q, %q\n", tostring(ok), err, reason)

------------------------------------------------------------------------
say("3. Delays and per-attempt timeouts in fake time (no waiting)")
say("   retry_timeouts: 50 s budget, timeouts of half the time left;")
say("   attempts 1, 2 fail at once, the others hang until their timeout\n")

local now = 0
local b = backoff.retry_timeouts { seed = 7, clock = function() return now end }
local timeout, n = b:timeout(), 0
say("   %8s  %8s  %8s", "failed at", "timeout", "delay")
while true do
  n = n + 1
  now = now + (n <= 2 and 0.1 or timeout)
  local delay, t = b:failure()
  if not delay then
    say("   %8.2f  %8s  %8s  give up (%s)", now, "", "", t)
    break
  end
  say("   %8.2f  %8.2f  %8.2f", now, t, delay)
  now, timeout = now + delay, t
end

------------------------------------------------------------------------
say("\n4. The same 6 failures, 2 successes, 3 failures per strategy")
say("   (seed 1 for the random ones)\n")

local ops = { 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0 }
local examples = {
  { "constant", { delay = 1 } },
  { "linear", { initial_delay = 1 } },
  { "exponential", { initial_delay = 1, max_delay = 60 } },
  { "fibonacci", { initial_delay = 1 } },
  { "lild", { initial_delay = 1, delay_increment_on_failure = 2,
              delay_increment_on_success = -3, min_delay = 1 } },
  { "limd", { initial_delay = 2, delay_increment_on_failure = 4,
              delay_multiple_on_success = 0.2, min_delay = 1 } },
  { "mild", { initial_delay = 1, delay_multiple_on_failure = 2,
              delay_increment_on_success = -5, min_delay = 0.5 } },
  { "mimd", { initial_delay = 1, delay_multiple_on_failure = 2,
              delay_multiple_on_success = 0.5 } },
  { "decorrelated", { initial_delay = 1, max_delay = 60, seed = 1 } },
  { "exponential", { initial_delay = 1, max_delay = 60, jitter = "equal",
                     seed = 1 }, "exponential+equal" },
}
for _, e in ipairs(examples) do
  local o = e[2]
  o.start = 0
  local bo = backoff.new(e[1], o)
  local row = {}
  for i, op in ipairs(ops) do
    local d = op == 0 and bo:failure(0) or bo:success(0)
    row[i] = ("%5.1f"):format(d)
  end
  say("   %-18s %s", e[3] or e[1], table.concat(row, " "))
end

-- the next step, so that the demo does not end on a table
say("")
say("Next:")
say("  lua5.4 examples/retry.lua          a retry loop to copy (it runs as")
say("                                     it is, from this checkout)")
say("  ./bin/backoff-delays -a exponential --initial-delay 0.1 0 0 0 0")
say("                                     any strategy's delays (doc/cli.md)")
say("  make LUA_VERSION=luajit            then README.md, \"OpenResty\":")
say("                                     a gateway with retries, a budget")
say("  make install                       the module for your own code")
say("                                     (doc/install.md)")
