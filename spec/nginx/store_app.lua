-- The app of spec/nginx/store.lua: every object whose state the workers
-- share, on one lua_shared_dict, used, then its keys overwritten with
-- values it cannot have written.
local backoff = require "backoff"
local budget = backoff.budget
local hedge = require "backoff.hedge"
local metrics = require "backoff.metrics"

local app = {}

-- the objects, built once per worker (a clock of the test's: each
-- request moves it on by the seconds given)
local t = 1000
local function clock() return t end
local objs

local function build()
  local d = ngx.shared.objs
  objs = {
    token = budget.token_bucket { shared = d, key = "tok", capacity = 10,
                                  cost = 5 },
    grpc = budget.grpc { shared = d, key = "grpc", max_tokens = 10 },
    earned = budget.recommended { shared = d, key = "rec", clock = clock },
    ratio = budget.ratio { shared = d, key = "ratio", clock = clock },
    adaptive = budget.adaptive { shared = d, key = "sre", clock = clock },
    breaker = backoff.breaker { shared = d, key = "br", failures = 2,
      clock = clock, probe_timeout = 5,
      policy = backoff.constant { delay = 2 } },
    latency = hedge.latency { shared = d, key = "lat", clock = clock },
    metrics = metrics.new { key = "api", shared = d },
    pace = hedge.pace { shared = d, key = "pace", clock = clock },
  }
end

-- every object used as a request would: outcomes of both kinds, a
-- retry paid, a breaker tripped and probed.  Returns what each says
-- now: is a retry allowed, is an attempt allowed, the delay
local function use(fail)
  local o = objs
  for _, b in ipairs { o.token, o.grpc, o.earned, o.ratio, o.adaptive } do
    b:record(not fail, 1)
    if b:withdraw() then b:record(true, 2) end
  end
  local ok, ticket = o.breaker:allow()
  if ok then o.breaker:record(not fail, ticket) end
  o.latency:observe(fail and 0.2 or 0.01)
  o.metrics:run(not fail, 2, fail and "max_attempts" or nil, 0)
  o.pace:request()
  if o.pace:allow() then
    o.pace:hedged()
    o.pace:outcome(1, not fail)
  end
  if fail then o.pace:pause(0.1) end
  local c = o.metrics:counts()
  return {
    token = o.token:allows(), grpc = o.grpc:allows(),
    earned = o.earned:allows(), ratio = o.ratio:allows(),
    adaptive = o.adaptive:allows(), breaker = o.breaker:allows(),
    state = o.breaker:state(), delay = o.latency:delay(),
    attempts = c.attempts, pace = o.pace:allow(),
  }
end

-- /use?fail=1&dt=S: the clock moves on dt seconds, every object is
-- used; what each says is printed one per line
function app.use()
  if not objs then build() end
  local a = ngx.req.get_uri_args()
  t = t + (tonumber(a.dt) or 0)
  local r = use(a.fail == "1")
  for _, k in ipairs { "token", "grpc", "earned", "ratio", "adaptive",
                       "breaker", "state", "delay", "attempts", "pace" } do
    ngx.say(k, "=", tostring(r[k]))
  end
end

-- the values a foreign writer leaves: text, NaN, infinities, a negative
-- count, a huge one, a fraction, a boolean, an open record opened in
-- the future, one open for 1e308 s, a probe token with no expiry
local HOSTILE = { "junk", 0 / 0, 1 / 0, -1e9, 1e300, 2.5, true,
  "o1:1:99999999999:1", "o1:1:0:1e308", "9:9" }
app.HOSTILE = #HOSTILE

-- /poison?v=I: every key of the dict set to hostile value I (no expiry);
-- prints the keys
function app.poison()
  local v = HOSTILE[tonumber(ngx.var.arg_v)]
  local d = ngx.shared.objs
  for _, k in ipairs(d:get_keys(0)) do
    d:set(k, v)
    ngx.say(k)
  end
end

-- /keys: every key and its value now
function app.keys()
  local d = ngx.shared.objs
  for _, k in ipairs(d:get_keys(0)) do
    ngx.say(k, "\t", tostring(d:get(k)))
  end
end

-- /fill: another user fills the 12k dict; 300 metric recorders add to it
function app.fill()
  local d = ngx.shared.tiny
  for i = 1, 400 do d:set("other" .. i, ("x"):rep(100)) end
  for i = 1, 300 do
    metrics.new(("r%d"):format(i), { shared = d }):add("attempts", 1)
  end
  ngx.say("ok")
end

return app
