-- tostring, __gc, __close, __name and calls on a wrong self.
local backoff = require "backoff"

describe("the object", function()
  it("prints as backoff.<strategy>", function()
    local b = backoff.mimd { initial_delay = 1, delay_multiple_on_failure = 2,
      delay_multiple_on_success = 0.5 }
    assert.matches("^backoff%.mimd: ", tostring(b))
    assert.matches("^backoff%.retry_timeouts",
      tostring(backoff.retry_timeouts()))
  end)

  it("has one metatable named backoff.Backoff with __gc", function()
    local mt = getmetatable(backoff.constant { delay = 1 })
    assert.equal(mt, getmetatable(backoff.linear { initial_delay = 1 }))
    assert.equal("backoff.Backoff", mt.__name)
    assert.is_function(mt.__gc)
    assert.is_function(mt.__close)
  end)

  it("survives __gc called by hand, twice, and stays usable", function()
    local b = backoff.constant { delay = 1 }
    local mt = getmetatable(b)
    mt.__gc(b)
    mt.__gc(b)
    assert.equal(1, b:failure(0))
    collectgarbage()
    collectgarbage()
  end)

  it("collects thousands of objects with clocks", function()
    for _ = 1, 5000 do
      backoff.constant { delay = 1, clock = function() return 1 end }:clone()
    end
    collectgarbage()
    collectgarbage()
  end)

  it("refuses a wrong self in every method", function()
    local b = backoff.constant { delay = 1 }
    local mt = getmetatable(b)
    local fake = io.stdout
    for name, f in pairs(mt.__index) do
      for _, bad in ipairs { {}, "x", 1, fake } do
        -- pcall(f, ...) directly: no debug name to lean on
        local ok, err = pcall(f, bad)
        assert.is_false(ok)
        assert.matches("bad argument #1 to '" .. name ..
          "' (backoff.Backoff expected", err, nil, true)
      end
      assert.has_error(function() f() end)
    end
    for _, name in ipairs { "__tostring", "__gc", "__close" } do
      local ok, err = pcall(mt[name], {})
      assert.is_false(ok)
      assert.matches("bad argument #1 to '" .. name ..
        "' (backoff.Backoff expected", err, nil, true)
    end
    -- a method call counts self as argument 0, as luaL_argerror does
    local impostor = setmetatable({}, { __index = mt.__index })
    assert.error_matches(function() impostor:delay() end,
      "calling 'delay' on bad self (backoff.Backoff expected, got table)",
      nil, true)
  end)

  -- registered only where they apply, so that no version counts a
  -- test that checked nothing
  local newproxy = rawget(_G, "newproxy")
  if newproxy then
    it("refuses a LuaJIT/5.1 proxy given the metatable", function()
      local p = newproxy(false)
      debug.setmetatable(p, getmetatable(backoff.constant { delay = 1 }))
      assert.error_matches(function() p:failure(0) end,
        "backoff.Backoff expected", nil, true)
      debug.setmetatable(p, nil)
    end)
  end

  it("refuses another library's userdata given the metatable", function()
    local f = assert(io.tmpfile())
    debug.setmetatable(f, getmetatable(backoff.constant { delay = 1 }))
    local ok, err = pcall(f.failure, f, 0)
    debug.setmetatable(f, getmetatable(io.stdout))
    f:close()
    assert.is_false(ok)
    assert.matches("backoff.Backoff expected", err, nil, true)
  end)

  if _VERSION == "Lua 5.4" then
    it("works as a <close> variable on Lua 5.4", function()
      local chunk = assert(load([[
        local backoff = ...
        do local b <close> = backoff.constant { delay = 1 } end
        return true
      ]]))
      assert.is_true(chunk(backoff))
    end)
  end
end)
