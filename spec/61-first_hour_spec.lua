-- The first hour works as written (issue 33): the stumbles a newcomer
-- met, each one checked.  Milliseconds given as seconds where the value
-- cannot be meant as seconds; the uncalled constructor; backoff.wrap's
-- own name; the sleep's error at the caller's line; a lower-case method;
-- the recommended policy's per-try timeouts; messages that read well.
local backoff = require "backoff"
local http = require "backoff.http"
local budget = require "backoff.budget"

local HERE = debug.getinfo(1, "S").short_src

-- f's error, which must be raised at this file's line
local function raised_here(f)
  local ok, err = pcall(f)
  assert.is_false(ok)
  assert.equal("string", type(err))
  assert.equal(1, err:find(HERE, 1, true), err)
  return err
end


describe("an object option given a function", function()
  local p = backoff.recommended()

  it("hints at the uncalled constructor, by name", function()
    for _, case in ipairs {
      { "budget", budget.recommended, "backoff.budget.recommended()" },
      { "budget", budget.earned, "backoff.budget.earned()" },
      { "breaker", backoff.breaker.recommended,
        "backoff.breaker.recommended()" },
    } do
      local err = raised_here(function()
        backoff.retry(p, function() return true end, { [case[1]] = case[2] })
      end)
      assert.matches("option '" .. case[1] .. "'", err, 1, true)
      assert.matches("got function: did you mean " .. case[3] .. "?)",
                     err, 1, true)
    end
  end)

  it("says to call it when it is not the library's", function()
    local err = raised_here(function()
      http.request(p, function() return true end,
                   { method = "GET", metrics = function() end })
    end)
    assert.matches("option 'metrics'", err, 1, true)
    assert.matches("got function: an object is wanted here; call its "
                   .. "constructor", err, 1, true)
  end)

  it("hints for the policy too", function()
    local err = raised_here(function()
      backoff.retry(backoff.recommended, function() return true end)
    end)
    assert.matches("argument 'policy'", err, 1, true)
    assert.matches("did you mean backoff.recommended()?", err, 1, true)
  end)
end)

describe("backoff.wrap", function()
  it("names itself and its usage in its errors", function()
    local p = backoff.recommended()
    local err = raised_here(function() backoff.wrap(p, 5) end)
    assert.matches("^[^\n]-: backoff.wrap: argument 'fn'", err)
    assert.matches("usage: backoff.wrap(policy, fn [, ropts])", err, 1, true)
    assert.not_matches("backoff.retry", err, 1, true)
    err = raised_here(function() backoff.wrap(p, print, { tries = 3 }) end)
    assert.matches("backoff.wrap: unknown option 'tries'", err, 1, true)
    err = raised_here(function() backoff.wrap(nil, print) end)
    assert.matches("backoff.wrap: argument 'policy'", err, 1, true)
    err = raised_here(function()
      backoff.wrap(backoff.constant { delay = 0 }, print)
    end)
    assert.matches("backoff.wrap: the policy has no stop condition", err,
                   1, true)
  end)
end)
