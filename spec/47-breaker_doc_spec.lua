-- doc/breaker.md: every function of backoff.breaker and every method of
-- a breaker has a syntax line and a context line, every option is in
-- the options table, and every ```lua block (not a fragment) runs as
-- pasted.
local breaker = require "backoff.breaker"

local function read_doc()
  local dir = debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./"
  local f = io.open(dir .. "../doc/breaker.md")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- a syntax line calling `call(` followed by a context line before the
-- next section
local function documented(doc, call)
  local at = doc:find("%*%*syntax:%*%* `[^`]*"
                      .. call:gsub("[%.%:%(]", "%%%0") .. "%(")
  if not at then return false, "no syntax line for " .. call end
  local next_section = doc:find("\n%-%-%-", at) or #doc
  local ctx = doc:find("**context:**", at, true)
  if not ctx or ctx > next_section then
    return false, "no context line for " .. call
  end
  return true
end

describe("doc/breaker.md", function()
  local doc = read_doc()
  if not doc then
    it("is not in this copy of the tree", function()
      pending("doc/breaker.md is not here (make rock-test's copy)")
    end)
    return
  end

  it("documents every function and method", function()
    local n = 0
    for name, v in pairs(breaker) do
      if type(v) == "function" then
        n = n + 1
        assert(documented(doc, "breaker." .. name))
      end
    end
    local br = breaker.new {}
    for name, v in pairs(getmetatable(br).__index) do
      if type(v) == "function" and name:sub(1, 1) ~= "_" then
        n = n + 1
        assert(documented(doc, "br:" .. name))
      end
    end
    assert.is_true(n >= 10)
  end)

  it("lists every option", function()
    for _, name in ipairs { "shared", "key", "policy", "failures",
        "failure_ratio", "slow_call_duration", "slow_call_ratio", "window",
        "buckets", "min_calls", "probes", "probe_timeout", "clock",
        "on_change", "metrics" } do
      assert.truthy(doc:find("\n| `" .. name .. "` |", 1, true), name)
      -- and the constructor takes it
      local ok, err = pcall(breaker.new, { [name] = {} })
      assert.is_false(ok)
      assert.falsy(err:find("unknown option", 1, true), name)
    end
  end)

  -- the docs' convention: a line `EXPR --> VALUES` checks EXPR's
  -- values as written: "strings", numbers as %.14g, nil, true, false
  local function shown(...)
    local t = {}
    for i = 1, select("#", ...) do
      local v = select(i, ...)
      if type(v) == "string" then t[i] = '"' .. v .. '"'
      elseif type(v) == "number" then t[i] = ("%.14g"):format(v)
      else t[i] = tostring(v) end
    end
    return table.concat(t, ", ")
  end
  local function checks(block)
    return (block:gsub("([^\n]-)%s+%-%->%s+([^\n]+)", function(expr, want)
      return ("__check(%q, %q, __shown(%s))"):format(expr, want, expr)
    end))
  end

  it("runs every lua block as pasted, with its --> checks", function()
    local n, checked = 0, 0
    for block in doc:gmatch("\n```lua\n(.-)\n```") do
      n = n + 1
      local env = setmetatable({ print = function() end, __shown = shown,
        __check = function(expr, want, got)
          checked = checked + 1
          assert(want == got, expr .. " --> " .. got .. ", the doc says "
                 .. want)
        end }, { __index = _G })
      block = checks(block)
      local f = assert((loadstring or load)(block, "=doc block " .. n, "t",
                                            env))
      if setfenv then setfenv(f, env) end
      local ok, err = pcall(f)
      assert(ok, "block " .. n .. ": " .. tostring(err))
    end
    assert.is_true(n >= 3)
    assert.is_true(checked >= 2)
  end)
end)
