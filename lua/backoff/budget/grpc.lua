-- backoff.budget.grpc: gRPC's retry throttling (gRFC A6), in-process or
-- shared by the workers of an nginx host.  See doc/budget.md.
--
-- The rule, as gRPC's ServerRetryThrottleData: token_count starts at
-- max_tokens and stays in [0, max_tokens]; every failed attempt takes
-- 1, every successful one adds token_ratio; a retry is allowed only
-- while token_count > max_tokens / 2.  Counts are kept in thousandths
-- (milli-tokens), as gRPC keeps them: gRPC reads tokenRatio's decimal
-- text and drops the digits beyond the third (0.0995 -> 0.099), and
-- refuses a ratio that leaves 0 (below 0.001: it would never refill);
-- so does this, and every count is an exact integer.
--
-- The milli-tokens are one integer under a key, in-process in a dict of
-- this Lua state, shared in an ngx.shared dict, changed by incr only
-- (a missing key is full):
--   failure: r = incr(-1000); if r < 0 then incr(min(1000, -r)) (what
--     went below 0 is given back: the floor);
--   success: r = incr(+ratio); if r > max, incr(-min(ratio, r - max)).
-- Shared, a worker may see the counter briefly below 0 or above the
-- maximum while another worker's call is in flight (by at most the
-- amounts in flight); withdraw, allows and tokens read it clamped.

local C = require "backoff.budget.common"
local store = require "backoff.store"
local rule = require "backoff.check"  -- the option rules

local floor, getmetatable, setmetatable = math.floor, getmetatable,
                                          setmetatable

local CTOR = "backoff.budget.grpc"

local Grpc = { __name = CTOR }
Grpc.__index = Grpc

local function check(self, method)
  if getmetatable(self) ~= Grpc then C.self_check(self, Grpc, method) end
end

local read, from_milli = C.read, C.from_milli
-- the lowest the counter goes: SPAN failures taken at once (1000 each)
local LOW = -C.SPAN * 1000

-- the counter, clamped to [0, max] (a foreign value: read as missing,
-- full)
local function milli_tokens(self)
  local max = self.max
  local v = read(self.dict, self.dkey, max, max, LOW)
  if v <= 0 then return 0 end            -- a foreign -0 too
  if v > max then return max end
  return v
end

-- bud:withdraw([cost]) -> true while token_count > max_tokens / 2; takes
-- nothing (cost is checked, not used: A6 charges failures, not retries)
function Grpc:withdraw(cost)
  check(self, "withdraw")
  C.count_arg(cost, "withdraw", "cost")
  return milli_tokens(self) > self.half
end

-- bud:allows([cost]) -> the same decision, reading only
function Grpc:allows(cost)
  check(self, "allows")
  C.count_arg(cost, "allows", "cost")
  local v = milli_tokens(self)
  return v ~= nil and v > self.half
end

-- bud:record(ok [, attempt [, cost]]): failure -1 token, success
-- +token_ratio, every attempt alike
function Grpc:record(ok, attempt, cost)
  check(self, "record")
  C.record_args(ok, attempt, cost)
  local max = self.max
  if ok then
    local n = self.ratio
    if n > max then n = max end
    if n > 0 then C.add(self.dict, self.dkey, n, max, max, LOW) end
  else
    C.sub_floor(self.dict, self.dkey, 1000, max, max, LOW)
  end
end

-- bud:deposit([n]) -> token_count: gives back what withdraw(n) took,
-- which is nothing (A6 charges failures): n is checked, nothing changes
function Grpc:deposit(n)
  check(self, "deposit")
  C.count_arg(n, "deposit", "n")
  return from_milli(milli_tokens(self))
end

-- bud:tokens() -> token_count (0 to max_tokens, thousandths)
function Grpc:tokens()
  check(self, "tokens")
  return from_milli(milli_tokens(self))
end

function Grpc:max_tokens()
  check(self, "max_tokens")
  return from_milli(self.max)
end

function Grpc:token_ratio()
  check(self, "token_ratio")
  return from_milli(self.ratio)
end

C.getter(Grpc, "dict_key", "dkey")

function Grpc:__tostring()
  check(self, "__tostring")
  return ("%s: %s%s/%s tokens (token_ratio %s)"):format(CTOR,
    self.shared and ("shared " .. C.repr(self.dkey) .. ", ") or "",
    C.milli_text(milli_tokens(self)), C.milli_text(self.max),
    C.milli_text(self.ratio))
end

-- token_ratio in thousandths as gRPC keeps it: the decimals beyond the
-- third dropped, not rounded.  The largest m with m / 1000 <= ratio:
-- m / 1000 is the double nearest the decimal m/1000, so a ratio written
-- with at most 3 decimals keeps them exactly (1.001 -> 1001, where
-- floor(1.001 * 1000) is 1000), and 0.0995 becomes 99.
local function milli_ratio(v)
  local m = floor(v * 1000)
  if (m + 1) / 1000 <= v then
    m = m + 1
  elseif m / 1000 > v then
    m = m - 1
  end
  return m
end

local options = rule.options(CTOR, {
  max_tokens = rule.count{ default = 10, min = 1, max = 1000,
                            text = "an integer > 0 and <= 1000" },
  -- gRPC refuses a ratio of 0 thousandths
  token_ratio = rule.number{ default = 0.1, min = 0.001, max = 1000,
    text = "a number >= 0.001 and <= 1000 (gRPC keeps 3 decimals)" },
  shared = rule.shared("budget"),
}, { key = true })

-- grpc(opts) -> an A6 throttle; opts: max_tokens (10), token_ratio
-- (0.1), shared, key
local function new(opts)
  local o = options(opts)
  local max, ratio = o.max_tokens * 1000, milli_ratio(o.token_ratio)
  local self = { max = max, half = floor(max / 2), ratio = ratio }
  if o.shared or o.key ~= nil then
    self.key, self.dkey = C.shared_key(CTOR, o, "g", { max, ratio })
    self.dict, self.shared = o.shared, true
  else
    self.dict, self.dkey = store.dict(), "tokens"
  end
  return setmetatable(self, Grpc)
end

return { new = new, metatable = Grpc }
