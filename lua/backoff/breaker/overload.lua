-- backoff.breaker.overload: the graded refusal of a closed breaker
-- (internal; lua/backoff/breaker.lua calls it with itself as `br`).
--
-- When the upstream's capacity falls below the load, its queue grows
-- until every answer comes after the client gave up: the server works
-- on and nothing succeeds (goodput collapse).  Nothing fails fast, so
-- neither the failure rules nor an open interval help: only clients
-- that send less (the excess refused at once, here) keep the queue
-- short and the rest succeeding.  So, between closed and open, a
-- closed breaker refuses a share p of its attempts, steered by the
-- calls' latency toward overload_latency (T) (doc/breaker.md,
-- "Overload"):
--
--   * a success that took T or more starts it (the upstream queues);
--     a plain failure never does, however many (failing is the failure
--     rules' business: 10-50% failing never refuses)
--   * then every outcome that says how long it took moves p, by
--       GAIN x e x dt  +  SLOPE x (L - L')/T
--     e = (L - T)/T within [-1, 1] (L its seconds), dt the seconds
--     since this worker's previous outcome (at most 1), L' that
--     outcome's seconds: p grows while calls are slower than T and
--     shrinks while they are faster (the integral), and follows the
--     latency's own rise and fall at once (the slope, which damps the
--     swing a queue would otherwise make around T)
--   * p back at 0: over, until the next slow success.
--   * none starts within 2 x hold seconds of this worker's last
--     allow() while open or half-open: the herd of held runs a closing releases
--     queues for a few seconds, and all of it would succeed.
--
-- Measured in bench/outage.lua ("capacity down to 900/s"), the queue
-- stays near T, the server busy, and no work is wasted.  An isolated
-- slow success moves p by a few hundredths of a percent, and the next
-- fast one takes it back before anything is refused.
--
-- One key, K|g, holds p in 1/UNIT for the workers of a host (incr:
-- each sees its own result).  A worker takes part once it has seen a
-- slow success itself; until then, and whenever p is 0, a success
-- writes nothing.  Each worker refuses its share by error diffusion (p
-- added up per attempt, one refusal per whole unit): no draw, exactly
-- p of the attempts, the same on every run.

local store = require "backoff.breaker.store"

local floor, type = math.floor, type

local O = {}

local UNIT = 10000
-- p's integral: 5% a second per worker while calls take 2T or more
-- (a host of 4: 20%), as fast down while they are instant
local GAIN = 500
-- p's slope: 5% for a rise of T in the latency a worker sees
local SLOPE = 500
-- what a slow success adds when it starts the refusal: 0.25%
local FIRST = 25
-- no start within twice the hold after this worker saw the breaker
-- open: the runs the hold kept come back together when it closes, and
-- the queue they make for a few seconds is no overload (refused, they
-- were lost where all would succeed)
local GRACE = 2
-- at most 95% refused: one attempt in 20 still measures the upstream
local MAX = 9500
-- the key is forgotten a minute after it was made (0 again, as when
-- missing: an overload that goes on raises it again within a second)
local KEEP = 60
O.UNIT, O.MAX, O.KEEP = UNIT, MAX, KEEP

-- p as the dict holds it, in 1/UNIT: an integer near [0, MAX] (the
-- corrections of two workers may cross), else foreign: logged,
-- deleted, 0
local function read(br)
  local v = br.dict:get(br.gk)
  if v == nil then return 0 end
  if type(v) == "number" and v >= -UNIT and v <= MAX + UNIT
     and v % 1 == 0 then
    return v
  end
  store.corrupt(br.dict, br.gk, v, br.name)
  return 0
end

-- this worker leaves the refusal (p is 0, or foreign)
local function leave(br)
  br.g_on, br.g_acc, br.g_last, br.g_t = false, 0, nil, nil
end

--- overload.refuse(br) -> true when this attempt is refused (called
-- while br.g_on: this worker takes part; it reads p here)
function O.refuse(br)
  local p = read(br)
  if p <= 0 then
    leave(br)
    return false
  end
  local acc = br.g_acc + p
  if acc >= UNIT then
    br.g_acc = acc - UNIT
    return true
  end
  br.g_acc = acc
  return false
end

-- p moved by n; brought back within [0, MAX] by the one who passed it
local function move(br, n)
  if n == 0 then return end
  local r = store.incr(br.dict, br.gk, n, KEEP, br.name)
  if r == nil then return end
  if r > MAX then
    store.incr(br.dict, br.gk, MAX - r, KEEP, br.name)
  elseif r <= 0 then
    if r < 0 then store.incr(br.dict, br.gk, -r, KEEP, br.name) end
    leave(br)
  end
end

-- the step of an outcome of L seconds at `now`, for a worker taking part
local function step(br, L, now)
  local T = br.ol
  local e = (L - T) / T
  if e > 1 then e = 1 end
  local dt = now - br.g_t
  if dt > 1 then dt = 1 elseif dt < 0 then dt = 0 end
  local n = GAIN * e * dt + SLOPE * (L - br.g_last) / T
  br.g_last, br.g_t = L, now
  -- (a call of hours moves it no further than from 0 to the most)
  if n > UNIT then n = UNIT elseif n < -UNIT then n = -UNIT end
  return floor(n + 0.5)
end

--- overload.record(br, ok, seconds): an outcome and how long it took
-- (seconds nil: unknown, nothing learnt)
function O.record(br, ok, seconds)
  if seconds == nil then return end
  if br.g_on then
    return move(br, step(br, seconds, br:_now()))
  end
  if ok and seconds >= br.ol then              -- the upstream queues
    local now = br:_now()
    local open_at = br.g_open_at
    if open_at and now - open_at < br.hold_ * GRACE then return end
    br.g_on, br.g_acc, br.g_last, br.g_t = true, 0, seconds, now
    move(br, FIRST)
  end
end

--- overload.share(br) -> the share of attempts refused now (0 to 0.95)
function O.share(br)
  local p = read(br)
  return p > 0 and p / UNIT or 0
end

return O
