-- The handlers of `make bench-nginx` (bench/nginx.lua): the same
-- trivial operation called through backoff.retry and through pcall.
-- luacheck: read globals ngx
local backoff = require "backoff"

local M = {}
local policy, ropts, ropts_breaker, up, ropts_fleet

-- README's OpenResty policy, built once in init_by_lua (before the fork)
function M.init()
  policy = backoff.exponential { initial_delay = 0.05, max_delay = 1,
    jitter = "full", max_attempts = 5, max_actual_duration = 3,
    adjust_timeout_factor = 0.5, min_adjust_timeout = 0.2 }
  -- the recommended budget, shared by the workers (told of every
  -- attempt: a success costs one dict read while the budget is full)
  ropts = { budget = backoff.budget.recommended {
    shared = ngx.shared.budget, key = "bench" } }
  -- and the recommended breaker beside it (its own dict: a closed
  -- breaker costs one dict get before and one count after a call)
  ropts_breaker = { budget = ropts.budget,
    breaker = backoff.breaker.recommended {
      shared = ngx.shared.breakers, key = "bench" } }
  -- a declared upstream: the same policy, the recommended budget,
  -- breaker and metrics, in one dict of its own (no peers: up:call's
  -- happy path)
  up = require("backoff.upstream").new { name = "bench",
    shared = ngx.shared.upstream, policy = { strategy = "exponential",
      initial_delay = 0.05, max_delay = 1, jitter = "full",
      max_attempts = 5, max_actual_duration = 3,
      adjust_timeout_factor = 0.5, min_adjust_timeout = 0.2 } }
  -- the same breaker guarded by backoff.fleet (its timer not started:
  -- what a request pays, one dict get more per allow and one per record;
  -- the timer's cost is one EVALSHA per host and interval, doc/fleet.md)
  local fl = require("backoff.fleet").new { shared = ngx.shared.fleet,
                                            host = "bench" }
  ropts_fleet = { budget = ropts.budget,
    breaker = fl:breaker(backoff.breaker.recommended {
      shared = ngx.shared.breakers, key = "bench_fleet" }) }
end

-- the operation: succeeds at once
local function op(attempt, timeout)  -- luacheck: ignore 212
  return "ok"
end

-- ?k=N: the call made N times in the request (bench/nginx.lua's
-- amplified measure: the library's own cost per call, out of the noise
-- of the request around it); one time without it
local function times()
  return tonumber(ngx.var.arg_k) or 1
end

function M.retry()
  local body
  for _ = 1, times() do body = backoff.retry(policy, op) end
  ngx.say(body)
end

function M.budget()
  local body
  for _ = 1, times() do body = backoff.retry(policy, op, ropts) end
  ngx.say(body)
end

function M.breaker()
  local body
  for _ = 1, times() do body = backoff.retry(policy, op, ropts_breaker) end
  ngx.say(body)
end

function M.upstream()
  local body
  for _ = 1, times() do body = up:call(op) end
  ngx.say(body)
end

function M.fleet()
  local body
  for _ = 1, times() do body = backoff.retry(policy, op, ropts_fleet) end
  ngx.say(body)
end

function M.pcall()
  local ok, body
  for _ = 1, times() do ok, body = pcall(op, 1, nil) end
  ngx.say(ok and body)
end

return M
