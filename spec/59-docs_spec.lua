-- The references in doc/ cover every name the new modules export: each
-- function has a `syntax:` line and a `context:` line (the nginx phases
-- where it may be called), and the runner's options table lists only
-- options the runner takes.
local backoff = require "backoff"

local function read(path)
  local f = assert(io.open(path))
  local s = f:read("*a")
  f:close()
  return s
end

-- the section of doc text whose syntax line calls `call(`: it must have
-- a context line before the next section
local function documented(doc, call)
  local at = doc:find("%*%*syntax:%*%* `[^`]*"
                      .. call:gsub("[%.%:%(]", "%%%0") .. "%(")
  if not at then return false, "no syntax line for " .. call end
  local next_section = doc:find("\n## ", at, true) or #doc
  local ctx = doc:find("**context:**", at, true)
  if not ctx or ctx > next_section then
    return false, "no context line for " .. call
  end
  return true
end

local function functions_of(t)
  local names = {}
  for k, v in pairs(t) do
    if type(v) == "function" and not k:match("^_") then
      names[#names + 1] = k
    end
  end
  table.sort(names)
  return names
end

describe("doc/", function()
  it("documents every function of backoff.http", function()
    local doc = read("doc/http.md")
    local names = functions_of(require "backoff.http")
    assert.is_true(#names >= 7)
    for _, name in ipairs(names) do
      assert(documented(doc, "http." .. name))
    end
  end)

  it("documents every function of backoff.metrics and its recorders",
    function()
      local metrics = require "backoff.metrics"
      local doc = read("doc/metrics.md")
      for _, name in ipairs(functions_of(metrics)) do
        assert(documented(doc, "metrics." .. name))
      end
      local mt = getmetatable(metrics.new("doc", { shared = false }))
      local methods = functions_of(mt.__index)
      assert.same({ "add", "counts", "run" }, methods)
      for _, name in ipairs(methods) do
        assert(documented(doc, "recorder:" .. name))
      end
    end)

  it("documents backoff.balancer and balancer.done", function()
    local doc = read("doc/balancer.md")
    local b = require "backoff.balancer"
    assert.same({ "done" }, functions_of(b))
    assert(documented(doc, "balancer.done"))
    assert(documented(doc, "balancer"))
  end)

  it("documents every function of backoff.breaker, every method of a "
     .. "breaker and every option", function()
    local breaker = require "backoff.breaker"
    local doc = read("doc/breaker.md")
    local names = functions_of(breaker)
    assert.is_true(#names >= 3)
    for _, name in ipairs(names) do
      assert(documented(doc, "breaker." .. name))
    end
    local br = breaker.new { shared = false }
    local methods = functions_of(getmetatable(br).__index)
    assert.is_true(#methods >= 7)
    for _, name in ipairs(methods) do
      assert(documented(doc, "br:" .. name))
    end
    for _, name in ipairs { "shared", "key", "policy", "failures",
        "failure_ratio", "slow_call_duration", "slow_call_ratio", "window",
        "buckets", "min_calls", "probes", "probe_timeout", "clock",
        "on_change", "metrics" } do
      assert.truthy(doc:find("\n| `" .. name .. "` |", 1, true), name)
      -- and the constructor takes it (a wrong value, not an unknown name)
      local ok, err = pcall(breaker.new, { [name] = {} })
      assert.is_false(ok)
      assert.falsy(err:find("unknown option", 1, true), name)
    end
  end)

  it("documents the runner, backoff.sleep and each runner option",
    function()
      local doc = read("doc/retry.md")
      assert(documented(doc, "backoff.retry"))
      assert(documented(doc, "backoff.sleep"))
      local table_ = doc:match("\n## ropts\n(.-)\n## ")
      local keys = {}
      for key in table_:gmatch("\n| `([%a_]+)[%(`]") do
        keys[#keys + 1] = key
      end
      assert.is_true(#keys >= 10)
      -- every key listed is taken by the runner (a value of its kind)
      local fine = function() return true end
      local values = {
        budget = { withdraw = fine, deposit = fine },
        metrics = { run = fine },
        breaker = { allow = fine, allows = fine, record = fine,
                    release = fine },
        min_attempt_time = 0, max_hint = 1,
        reference_delays = true, unlimited = true, retry_raised = true,
      }
      local p = backoff.constant { delay = 0, max_attempts = 2 }
      for _, key in ipairs(keys) do
        local v = values[key]
        if v == nil then v = fine end
        local ok, err = pcall(backoff.retry, p, fine, { [key] = v })
        assert(ok, key .. ": " .. tostring(err))
      end
      for _, key in ipairs { "sleep", "retry_on", "server_hint", "max_hint",
          "on_retry", "on_success", "on_giveup", "metrics", "budget",
          "breaker", "unlimited", "retry_raised", "retry_cost",
          "min_attempt_time", "reference_delays" } do
        assert.truthy(table_:find("`" .. key, 1, true), key)
      end
    end)
end)
