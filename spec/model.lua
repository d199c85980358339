-- A plain-Lua model of API.md section 3, written from the text of the
-- contract (not from the C code), for jitter-free configurations. The
-- specs run thousands of random configurations and operation sequences
-- through both and compare every value.
local model = {}

local huge = math.huge
local max_finite = 1.7976931348623157e308

local function fin(x)
  if x > max_finite then return max_finite end
  if x < -max_finite then return -max_finite end
  return x
end

local ID = { lild = true, limd = true, mild = true, mimd = true }

function model.new(strategy, options)
  -- floats only: Lua 5.3+ integer arithmetic would wrap around
  local o = {}
  for k, v in pairs(options) do
    o[k] = type(v) == "number" and v + 0.0 or v
  end
  local rt = strategy == "retry_timeouts"
  local m = {
    s = strategy,
    initial = o.initial_delay or o.delay or o.initial_delay1
      or (rt and math.sqrt(2)) or 0,
    base = o.exponent_base or (rt and math.sqrt(2)) or 2,
    inc = o.delay_increment or o.initial_delay or 0,
    d2 = o.initial_delay2 or o.initial_delay,
    inc_f = o.delay_increment_on_failure, mul_f = o.delay_multiple_on_failure,
    inc_s = o.delay_increment_on_success, mul_s = o.delay_multiple_on_success,
    on_success = o.delay_on_success or 0,
    min = o.min_delay or 0, max = o.max_delay or huge,
    max_attempts = o.max_attempts or (rt and 8) or 0,
    dur = o.max_actual_duration or (rt and 50) or 0,
    consider = o.consider_actual_delay,
    timeouts = rt or o.adjust_timeout_factor ~= nil,
    atf = o.adjust_timeout_factor or 0.5,
    mat = o.min_adjust_timeout or 5,
    start = o.start,
    attempts = 0, prev = 0, last = nil, expired = false,
  }
  if m.consider == nil then m.consider = rt end
  m.active = m.timeouts and m.dur > 0
  if m.active then m.timeout = math.max(m.dur * m.atf, m.mat) end
  return m
end

local function clamp(m, d)
  if d > m.max then d = m.max end
  if d < 0 then d = 0 end
  if d < m.min then d = m.min end
  return d
end

local function raw_failure(m)
  local n, s = m.attempts, m.s
  if s == "constant" then return m.initial end
  if s == "linear" then return fin(m.initial + fin((n - 1) * m.inc)) end
  if s == "exponential" or s == "retry_timeouts" then
    return fin(m.initial * fin(m.base ^ (n - 1)))
  end
  if s == "fibonacci" then
    if n == 1 then m.fa, m.fb = 0, m.initial
    elseif n == 2 then m.fa, m.fb = m.initial, m.d2
    else m.fa, m.fb = m.fb, fin(m.fa + m.fb) end
    return m.fb
  end
  if m.seq == nil then return m.initial end
  if s == "lild" or s == "limd" then return fin(m.seq + m.inc_f) end
  return fin(m.seq * m.mul_f)
end

local function raw_success(m)
  local s = m.s
  if not ID[s] then return m.on_success end
  if m.seq == nil then return m.initial end
  if s == "lild" or s == "mild" then return fin(m.seq + m.inc_s) end
  return fin(m.seq * m.mul_s)
end

local function record(m, ts, raw)
  if m.last == nil then m.last = m.timeouts and m.start or ts end
  local d = raw
  if m.consider then d = fin(fin(d + m.prev) - fin(ts - m.last)) end
  d = clamp(m, d)
  if m.active then
    local f = m.atf
    local left = fin(m.dur - fin(ts - m.start))
    local cap = fin(left * (1 - f))
    if d > cap then d = cap end
    local t = fin(fin(left - d) * f)
    if m.mat > t then t = m.mat end
    m.timeout = t
    if d < 0 then d = 0 end
  end
  if d == 0 then d = 0 end
  m.last, m.prev = ts, d
  if ID[m.s] then
    if m.consider then m.seq = clamp(m, raw) else m.seq = d end
  end
  if m.active then return d, m.timeout end
  return d
end

local function effective(m, ts)
  if m.last ~= nil then return ts < m.last and m.last or ts end
  if m.timeouts and ts < m.start then return m.start end
  return ts
end

function model.failure(m, ts)
  ts = effective(m, ts)
  if m.dur > 0 and (m.expired or fin(ts - m.start) >= m.dur) then
    m.expired = true
    if m.timeouts then m.last = ts end
    return nil, "max_actual_duration"
  end
  m.attempts = m.attempts + 1
  if m.max_attempts > 0 and m.attempts >= m.max_attempts then
    if m.timeouts then m.last = ts end
    return nil, "max_attempts"
  end
  return record(m, ts, raw_failure(m))
end

function model.success(m, ts)
  ts = effective(m, ts)
  m.attempts = 0
  return record(m, ts, raw_success(m))
end

return model
