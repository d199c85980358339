-- The whole API once, as a plain script (not a *_spec, so busted skips
-- it): run under valgrind, under ASan, and by the allocation-failure
-- host (spec/c/allocfail.c), where any line may raise "not enough
-- memory".  Exits with an error if a result is wrong.
local backoff = require "backoff"

local function finite(x)
  assert(type(x) == "number" and x == x and x >= 0 and x < math.huge, x)
end

local opts = {
  constant = { delay = 1 },
  linear = { initial_delay = 1 },
  exponential = { initial_delay = 1, jitter = "full", max_delay = 50 },
  fibonacci = { initial_delay = 1, jitter = "equal" },
  lild = { initial_delay = 1, delay_increment_on_failure = 1,
           delay_increment_on_success = -1, jitter_factor = 0.2 },
  limd = { initial_delay = 1, delay_increment_on_failure = 1,
           delay_multiple_on_success = 0.5 },
  mild = { initial_delay = 1, delay_multiple_on_failure = 2,
           delay_increment_on_success = -1 },
  mimd = { initial_delay = 1, delay_multiple_on_failure = 2,
           delay_multiple_on_success = 0.5, consider_actual_delay = true },
  decorrelated = { initial_delay = 1, max_delay = 10, seed = 3 },
  retry_timeouts = { start = 0, clock = function() return 1 end },
  -- the systems; injected draws on two of them
  google = { start = 0 },
  cenkalti = { start = 0, random = function() return 0.5 end },
  eventsauce = { initial_delay = 0.1, max_tries = 30, jitter = "scattered",
                 range = 0.5 },
  polly = { backoff_type = "exponential", use_jitter = true,
            max_retry_attempts = 40 },
  decorrelated_v2 = { median_first_retry_delay = 1, fast_first = true,
                      random = function() return 1 end },
  aws = { base = 0.01, cap = 1, jitter = "decorrelated" },
}

for _, name in ipairs(backoff.strategies) do
  local b = backoff.new(name, opts[name])
  for i = 1, 20 do
    local d, t = b:failure(i)
    if d then finite(d) end
    if t and d then finite(t) end
    finite(b:success(i))
  end
  local c = b:clone()
  finite(c:failure(1))
  local cfg = b:config()
  local twin = backoff.new(cfg.strategy, cfg)
  assert(tostring(twin):find("^backoff%." .. name))
  b:reset(0)
  finite(b:elapsed(3))
  assert(b:attempts() == 0 and b:delay() == 0)
  b:timeout()
end

-- errors: each must raise and leak nothing
local bad = {
  function() backoff.constant { delay = -1 } end,
  function() backoff.constant { delay = "1" } end,
  function() backoff.exponential { initial_delay = 1, max_attemps = 1 } end,
  function() backoff.limd { initial_delay = 1 } end,
  function() backoff.new("nope", {}) end,
  function() backoff.constant { delay = 1, jitter = "loud" } end,
  function() backoff.constant { delay = 1 }:failure("x") end,
  function() backoff.constant { delay = 1 }.failure({}) end,
  function() backoff.sleep(-1) end,
  function() backoff.retry(42, print) end,
  function() backoff.eventsauce { initial_delay = 1 } end,
  function() backoff.google { initial_interval = 2, max_interval = 1 } end,
  -- a draw that raises, or is no number in [0, 1]
  function() backoff.exponential { initial_delay = 1, jitter = "full",
    random = function() error("no draw") end }:failure(0) end,
  function() backoff.retry_timeouts { random = function() return 2 end } end,
  function() backoff.aws { base = 1, cap = 2,
    random = function() return "x" end }:failure(0) end,
}
for i, f in ipairs(bad) do
  local ok, err = pcall(f)
  assert(not ok, "case " .. i .. " should raise")
  if type(err) == "string" and err:find("not enough memory") then
    error(err, 0)   -- let an allocation failure through, as itself
  end
end

-- the runner, with and without yields
local calls = 0
local r = backoff.retry({ strategy = "constant", delay = 0, max_attempts = 5 },
  function()
    calls = calls + 1
    if calls < 3 then error("flaky") end
    return "done"
  end, { sleep = function() end, retry_raised = true })
assert(r == "done")
local co = coroutine.wrap(function()
  return backoff.retry(backoff.constant { delay = 0, max_attempts = 2 },
    function() coroutine.yield() return nil, "no" end,
    { sleep = function(d) coroutine.yield(d) end })
end)
co() co() co()
local x, err, reason = co()
assert(x == nil and err == "no" and reason == "max_attempts", reason)

-- the token bucket (Lua over a dict of this state) through the runner
local bud = backoff.budget { capacity = 10, cost = 5 }
calls = 0
r = backoff.retry(backoff.constant { delay = 0, max_attempts = 5 },
  function()
    calls = calls + 1
    if calls < 2 then return nil, "flaky" end
    return "done"
  end, { sleep = function() end, budget = bud })
assert(r == "done" and bud:tokens() == 10, tostring(bud))
assert(bud:withdraw() and bud:withdraw() and not bud:withdraw())

for _ = 1, 200 do
  backoff.constant { delay = 1, clock = function() return 0 end }:clone()
end
collectgarbage()
print("valgrind_smoke: ok")
