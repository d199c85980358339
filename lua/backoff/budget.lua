-- backoff.budget: retry budgets of every kind, in-process or shared by
-- the workers of an nginx host (doc/budget.md is the reference).
--
--   local budget = require "backoff.budget"
--   budget{ capacity = 500, cost = 5, refund = 1 }   -- the token bucket
--   budget.recommended{ shared = ngx.shared.retry, key = "api" }
--   budget.grpc{ max_tokens = 10, token_ratio = 0.1 }  -- gRFC A6
--   budget.ratio{ ttl = 10, percent = 20, min_per_second = 10 } -- Finagle
--   budget.adaptive{ k = 2, window = 120 }            -- SRE throttling
--   budget.earned{ capacity = 8, earn = 6, window = 32 }
--   backoff.retry(p, fn, { budget = b, retry_cost = budget.aws_cost })
--
-- Every kind speaks the same protocol (withdraw, allows, record,
-- deposit, tokens), so the runner, backoff.balancer and code by hand
-- drive them alike.  The modules under lua/backoff/budget/ hold the
-- kinds; they share backoff.budget.common and never require this file.

local check = require "backoff.check"
local util = require "backoff.util"
local token = require "backoff.budget.token"
local grpc = require "backoff.budget.grpc"
local earned = require "backoff.budget.earned"
local ratio = require "backoff.budget.ratio"
local adaptive = require "backoff.budget.adaptive"

local getmetatable, setmetatable = getmetatable, setmetatable

local M = {}

-- each constructor raises at its caller (backoff.check finds the line)
function M.token_bucket(opts) return (token.new(opts)) end
function M.grpc(opts) return (grpc.new(opts)) end
function M.earned(opts) return (earned.new(opts)) end
function M.ratio(opts) return (ratio.new(opts)) end
function M.adaptive(opts) return (adaptive.new(opts)) end

-- The recommended setting (doc/budget.md, "The recommended setting"):
-- earned{} with its defaults; opts: shared, key and clock only.
local REC = "backoff.budget.recommended"
local REC_KEYS = { "shared", "key", "clock" }
function M.recommended(opts)
  check.only(REC, opts, REC_KEYS, "backoff.budget.earned")
  return (earned.new(opts, REC))
end

-- Is err a timeout?  The string "timeout" (cosockets, lua-resty-http),
-- a string ending in "timeout" or "timed out", or a table whose field
-- `timeout` is true or whose field `err` is such a string.
local is_timeout = util.is_timeout
M.is_timeout = is_timeout

-- AWS standard mode's per-error cost, for ropts.retry_cost: 10 for a
-- timeout, 5 for any other error (the SDKs' TIMEOUT_RETRY_COST and
-- RETRY_COST, against the token bucket's 500 tokens)
function M.aws_cost(err)
  if is_timeout(err) then return 10 end
  return 5
end

-- the metatables of the kinds: is v a budget of this module?
local kinds = {
  [token.metatable] = "token_bucket",
  [grpc.metatable] = "grpc", [earned.metatable] = "earned",
  [ratio.metatable] = "ratio", [adaptive.metatable] = "adaptive",
}
function M.kind(v)
  return kinds[getmetatable(v)]
end

-- budget(opts) is the token bucket, as before
return setmetatable(M, { __call = function(_, opts)
  return (token.new(opts))
end })
