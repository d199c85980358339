-- The OpenResty side of spec/nginx/fleet_budget.lua: every budget kind
-- shared by the 4 workers through one lua_shared_dict, a handler that
-- retries an upstream through backoff.retry with one of them, and the
-- upstream itself, whose mode (healthy, half, dead) the test sets.
local backoff = require "backoff"
local budget = require "backoff.budget"

local app = {}
local budgets, up_port, policy = {}, nil, nil
local policies = {}

-- init_by_lua, in the master: every worker inherits the objects (and
-- so keeps its own success share for the earned kind); the state is in
-- the dict
function app.init(up)
  up_port = up
  local d = ngx.shared.budgets
  policy = backoff.constant { delay = 0.001, max_attempts = 4 }
  budgets.token = budget { shared = d, key = "token", capacity = 20,
                           cost = 5, refund = 1 }
  budgets.grpc = budget.grpc { shared = d, key = "grpc", max_tokens = 10,
                               token_ratio = 1 }
  budgets.rec = budget.recommended { shared = d, key = "rec" }
  budgets.ratio = budget.ratio { shared = d, key = "ratio", window = 60,
                                 percent = 10, min_per_second = 0.1 }
  budgets.sre = budget.adaptive { shared = d, key = "sre", window = 60 }
  -- the repeated outage: the recommended budget under a jittered policy
  budgets.rep = budget.recommended { shared = d, key = "rep" }
  policies.rep = backoff.exponential { initial_delay = 0.01,
    max_delay = 0.5, jitter = "full", max_attempts = 6 }
end

function app.upstream()
  local m = ngx.shared.mode:get("m") or "healthy"
  if m == "dead" then return ngx.exit(503) end
  if m == "half" then
    local n = ngx.shared.mode:incr("n", 1, 0)
    if n % 2 == 0 then return ngx.exit(503) end
  end
  ngx.say("ok")
end

function app.set_mode()
  ngx.shared.mode:set("m", ngx.var.arg_m)
  ngx.shared.mode:set("n", 0)
  ngx.say("mode=", ngx.var.arg_m)
end

function app.reset()
  ngx.shared.budgets:flush_all()
  ngx.shared.stats:flush_all()
  ngx.say("ok")
end

-- GET / on the upstream over a cosocket: true, or nil, the status line
local function fetch()
  local sock = ngx.socket.tcp()
  sock:settimeout(2000)
  local ok, err = sock:connect("127.0.0.1", up_port)
  if not ok then return nil, err end
  sock:send("GET / HTTP/1.0\r\nHost: up\r\n\r\n")
  local line = sock:receive("*l")
  sock:close()
  if line and line:find(" 200 ", 1, true) then return true end
  return nil, line or "no answer"
end

-- one call retried through the kind's budget; counts go to stats
function app.call()
  local kind = ngx.var.arg_kind
  local bud = assert(budgets[kind], "no such kind")
  local attempts = 0
  local res, _, reason = backoff.retry(policies[kind] or policy, function()
    attempts = attempts + 1
    return fetch()
  end, { budget = bud })
  local s = ngx.shared.stats
  s:incr(kind .. ":calls", 1, 0)
  s:incr(kind .. ":attempts", attempts, 0)
  s:incr(kind .. ":w" .. ngx.worker.id(), 1, 0)
  if res then s:incr(kind .. ":ok", 1, 0) end
  if reason == "budget" then s:incr(kind .. ":refused", 1, 0) end
  ngx.say("ok=", res and 1 or 0, " attempts=", attempts, " reason=",
          tostring(reason), " worker=", ngx.worker.id())
end

-- the kind's counts and raw shared values, key=value per line
function app.state()
  local kind = ngx.var.arg_kind
  local bud = budgets[kind]
  local s = ngx.shared.stats
  for _, k in ipairs { "calls", "attempts", "ok", "refused", "w0", "w1",
                       "w2", "w3" } do
    ngx.say(k, "=", s:get(kind .. ":" .. k) or 0)
  end
  ngx.say("tokens=", bud:tokens())
  if budget.kind(bud) == "earned" then
    ngx.say("reserve=", bud:reserve())
  end
  if bud.dict_key then
    ngx.say("raw=", tostring(ngx.shared.budgets:get(bud:dict_key())))
  end
  if bud.counts then
    local r, a = bud:counts()
    ngx.say("requests=", r, " accepts=", a)
  end
  -- every value under this kind's keys: an exact number, never NaN
  local bad = 0
  for _, k in ipairs(ngx.shared.budgets:get_keys(0)) do
    if k:find(bud:dict_key(), 1, true) == 1 then
      local v = ngx.shared.budgets:get(k)
      if type(v) ~= "number" or v ~= v or v ~= math.floor(v) then
        bad = bad + 1
      end
    end
  end
  ngx.say("bad=", bad)
end

return app
