-- bench/deadline.lua: how backoff.retry spends a max_actual_duration
-- budget against a failing upstream, in virtual time (fake clock,
-- seeded: the same figures on every run and every Lua).
--
--   lua bench/deadline.lua [requests]      (default 2000)
--
-- Upstreams: "hanging" (each attempt takes its whole timeout), "503"
-- (fails after 1 ms) and "closing" (fails after 0.1 ms).  Runners:
--   rule        backoff.retry as it is: no sleep shorter than the
--               strategy's own delay, the deadline guards
--   reference   backoff.retry with reference_delays = true: the object's
--               delays (capped at a share of the time left), with the
--               deadline guards
--   unguarded   the first round's runner: the object's delays and
--               timeouts as they come, nothing cut at the deadline
-- Per runner and upstream: requests whose whole retry ran past the
-- duration (and by how much at most), attempts per request (mean and
-- max), attempts started in the last 10% of the duration (mean, max).
local backoff = require "backoff"

local REQUESTS = tonumber(arg and arg[1]) or 2000

local POLICY = { initial_delay = 0.05, max_delay = 0.4, jitter = "full",
  max_actual_duration = 1, adjust_timeout_factor = 0.5,
  min_adjust_timeout = 0.05 }
local DURATION = POLICY.max_actual_duration

local UPSTREAMS = {
  { "hanging", function(timeout) return timeout end },
  { "503", function() return 0.001 end },
  { "closing", function() return 0.0001 end },
}

-- the first round's runner (eager clone, no deadline guards)
local function unguarded(policy, fn, ropts)
  local b = policy:clone()
  local timeout, attempt = b:timeout(), 0
  while true do
    attempt = attempt + 1
    local ok, r, err = pcall(fn, attempt, timeout)
    if ok and r then return r end
    if not ok then err = r end
    local delay, t = b:failure()
    if delay == nil then return nil, err, t end
    if t ~= nil then timeout = t end
    ropts.sleep(delay)
  end
end

local RUNNERS = {
  { "rule", function(p, fn, ropts) return backoff.retry(p, fn, ropts) end },
  { "reference", function(p, fn, ropts)
      ropts.reference_delays = true
      return backoff.retry(p, fn, ropts)
    end },
  { "unguarded", unguarded },
}

-- one request against upstream `took`; returns elapsed, attempts, late
local function request(run, took, seed)
  local now = 0
  local opts = { clock = function() return now end, seed = seed }
  for k, v in pairs(POLICY) do opts[k] = v end
  local policy = backoff.exponential(opts)
  local attempts, late = 0, 0
  run(policy, function(_, timeout)
    attempts = attempts + 1
    if now >= 0.9 * DURATION then late = late + 1 end
    now = now + took(timeout)
    return nil, "failed"
  end, { sleep = function(d) now = now + d end })
  return now, attempts, late
end

local function measure(run, took)
  local over, worst, sum_a, max_a, sum_l, max_l = 0, 0, 0, 0, 0, 0
  for i = 1, REQUESTS do
    local elapsed, attempts, late = request(run, took, i)
    if elapsed > DURATION then
      over = over + 1
      if elapsed - DURATION > worst then worst = elapsed - DURATION end
    end
    sum_a, sum_l = sum_a + attempts, sum_l + late
    if attempts > max_a then max_a = attempts end
    if late > max_l then max_l = late end
  end
  return { over = over, worst = worst, attempts = sum_a / REQUESTS,
           max_attempts = max_a, late = sum_l / REQUESTS, max_late = max_l }
end

print(("backoff.exponential{initial_delay = 0.05, max_delay = 0.4, "
  .. "jitter = \"full\", max_actual_duration = 1, adjust_timeout_factor = "
  .. "0.5, min_adjust_timeout = 0.05}, %d requests, seeds 1..%d")
  :format(REQUESTS, REQUESTS))
print()
print("| upstream | runner | over the deadline | worst overrun | "
      .. "attempts (mean / max) | in the last 10% (mean / max) |")
print("|---|---|---:|---:|---:|---:|")
local failed = false
for _, u in ipairs(UPSTREAMS) do
  for _, r in ipairs(RUNNERS) do
    local m = measure(r[2], u[2])
    print(("| %s | %s | %d | %.1f ms | %.2f / %d | %.2f / %d |"):format(
      u[1], r[1], m.over, m.worst * 1000, m.attempts, m.max_attempts,
      m.late, m.max_late))
    if r[1] ~= "unguarded" and m.over > 0 then failed = true end
    if r[1] == "rule" and u[1] == "hanging" and m.late > 2 then
      failed = true
    end
  end
end
if failed then
  io.stderr:write("deadline.lua: a target missed (0 requests over the "
    .. "deadline with the guards, <= 2 late attempts with the rule)\n")
  os.exit(1)
end
