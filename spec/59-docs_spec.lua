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
      for _, key in ipairs(keys) do   -- every key listed is taken
        local v = key == "budget" and { withdraw = print, deposit = print }
          or key == "metrics" and { run = print }
          or (key == "min_attempt_time") and 0
          or key == "reference_delays" and true or print
        assert.has_no.errors(function() backoff._check_ropts({ [key] = v })
        end, key)
      end
      for _, key in ipairs { "sleep", "retry_on", "retry_after", "on_retry",
          "on_success", "on_giveup", "metrics", "budget",
          "min_attempt_time", "reference_delays" } do
        assert.truthy(table_:find("`" .. key, 1, true), key)
      end
    end)
end)
