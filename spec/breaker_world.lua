-- What spec/44-breaker_spec.lua and spec/48-breaker_rules_spec.lua
-- drive a breaker with:
--   local world, make = dofile("spec/breaker_world.lua")
--   world() -> w: a clock the test moves (w.t), a dict expiring by it
--   make(w [, opts]) -> a breaker of world w, named "api", its intervals
--     1, 2, 4, ... s without jitter; opts override
local backoff = require "backoff"
local new_dict = dofile("spec/breaker_dict.lua")

local function world()
  local w = { t = 1000 }
  w.clock = function() return w.t end
  w.dict = new_dict(w.clock)
  return w
end

local function make(w, o)
  local opts = { shared = w.dict, key = "api", clock = w.clock,
    policy = backoff.exponential { initial_delay = 1, seed = 1 } }
  for k, v in pairs(o or {}) do opts[k] = v end
  return backoff.breaker.new(opts)
end

return world, make
