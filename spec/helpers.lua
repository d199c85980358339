-- Shared helpers for the specs.
local helpers = {}

-- the required options of each strategy, with valid values
helpers.REQUIRED = {
  constant = { delay = 1 },
  linear = { initial_delay = 1 },
  exponential = { initial_delay = 1 },
  fibonacci = { initial_delay1 = 1, initial_delay2 = 2 },
  lild = { initial_delay = 1, delay_increment_on_failure = 1,
           delay_increment_on_success = -1 },
  limd = { initial_delay = 1, delay_increment_on_failure = 1,
           delay_multiple_on_success = 0.5 },
  mild = { initial_delay = 1, delay_multiple_on_failure = 2,
           delay_increment_on_success = -1 },
  mimd = { initial_delay = 1, delay_multiple_on_failure = 2,
           delay_multiple_on_success = 0.5 },
  decorrelated = { initial_delay = 1, max_delay = 10 },
  retry_timeouts = {},
}

-- the systems users port from, with their required options
helpers.SYSTEMS = {
  google = {},
  cenkalti = {},
  eventsauce = { initial_delay = 0.1, max_tries = 5 },
  polly = {},
  decorrelated_v2 = { median_first_retry_delay = 1 },
  aws = { base = 0.01, cap = 1 },
}

-- a relative tolerance of 1e-9 (absolute near zero)
function helpers.close(expected, actual, tol)
  tol = tol or 1e-9
  if type(actual) ~= "number" then return false end
  local scale = math.max(math.abs(expected), math.abs(actual), 1e-300)
  return math.abs(expected - actual) <= tol * math.max(scale, 1)
    or math.abs(expected - actual) <= tol * scale
end

-- a finite number >= 0, and not -0
function helpers.is_delay(v)
  return type(v) == "number" and v == v and v >= 0 and v < math.huge
    and (v ~= 0 or 1 / v > 0)
end

-- perl option table -> ours (start from start_timestamp, jitter off
-- unless asked: the reference cases were produced with jitter off)
function helpers.options(case)
  local o = {}
  for k, v in pairs(case.params) do o[k] = v end
  o.start = case.start_timestamp
  return o
end

-- a one-line description of a flat table, keys sorted
function helpers.dump(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for i, k in ipairs(keys) do
    local v = t[k]
    keys[i] = k .. "=" .. (type(v) == "number" and ("%.17g"):format(v)
      or tostring(v))
  end
  return "{" .. table.concat(keys, ", ") .. "}"
end

-- Park-Miller's generator: exact in doubles, so the same stream on every
-- Lua.  helpers.park_miller(seed) -> rand(n), an integer from 1 to n.
function helpers.park_miller(seed)
  local x = seed % 2147483646 + 1
  return function(n)
    x = x * 48271 % 2147483647
    return x % n + 1
  end
end

return helpers
