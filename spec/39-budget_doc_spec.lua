-- doc/budget.md documents every name the budget module exports: each
-- constructor and helper, and each method of every kind.

local budget = require "backoff.budget"
local new_dict = dofile("spec/budget_dict.lua")

-- doc/budget.md next to this spec's directory; nil where the tree has
-- no doc/ (the copy `make rock-test` runs the specs from)
local function read_doc()
  local dir = debug.getinfo(1, "S").source:match("^@(.-)[^/]*$") or "./"
  local f = io.open(dir .. "../doc/budget.md")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

describe("doc/budget.md", function()
  local doc = read_doc()
  if not doc then
    it("is not in this copy of the tree", function()
      pending("doc/budget.md is not here (make rock-test's copy)")
    end)
    return
  end

  it("documents every function of the module", function()
    local n = 0
    for name, v in pairs(budget) do
      if type(v) == "function" then
        n = n + 1
        assert.truthy(doc:find("budget." .. name, 1, true)
                      or name == "token_bucket"
                      and doc:find("budget.token_bucket(", 1, true),
                      "budget." .. name)
      end
    end
    assert.is_true(n >= 9)
  end)

  it("documents every method of every kind, in-process and shared",
     function()
    local clock = function() return 0 end
    local objects = {
      budget {}, budget { shared = new_dict() }, budget.grpc {},
      budget.earned {}, budget.recommended(), budget.ratio { clock = clock },
      budget.adaptive { clock = clock },
    }
    local n = 0
    for _, b in ipairs(objects) do
      local index = getmetatable(b).__index
      for name, v in pairs(index) do
        if type(v) == "function" and name:sub(1, 2) ~= "__" then
          n = n + 1
          assert.truthy(doc:find(name .. "(", 1, true), name)
        end
      end
    end
    assert.is_true(n >= 40)
  end)

  it("has a syntax line and a context for the constructors and methods",
     function()
    for _, name in ipairs { "budget.recommended", "budget.earned",
      "budget.grpc", "budget.ratio", "budget.adaptive", "bud:withdraw",
      "bud:allows", "bud:record", "bud:deposit", "bud:tokens" } do
      local at = doc:find("\n" .. name .. "\n", 1, true)
      assert.truthy(at, name)
      assert.truthy(doc:find("**syntax:**", at, true), name)
    end
    local _, contexts = doc:gsub("\ncontext: ", "")
    assert.is_true(contexts >= 2)
  end)
end)
